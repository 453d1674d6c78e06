"""Kit objects that live in the checker and are served to the sandboxed worker: the kit's models and tokenizers, and
whatever object a task's checks bring (a KV cache's stand-in kernels).

A generation loop needs a model and a tokenizer, and a KV cache needs kernels to call; none of them crosses the
channel as data. So they are built here, in the checker's process, from the kit's own code on the call's device,
and the worker gets a thin stand-in (``worker.ServedObject``) whose methods send each call over the channel and
block for the answer. What the checker then judges about how the student's code used them (each model step's
op, positions and tokens, in order and in time; each kernel call's arguments) is recorded here, as each call is
served: nothing in the student's process can add to, drop from or rewrite the record, and nothing there can
answer "what would the right logits be" (the scripted model's seed and the checkpoint's weights never enter it).

Each served object says what the worker's stand-in shows (``attributes``: plain values) and which methods it
answers (``methods``: nothing else is ever called); ``serve`` runs one on arguments decoded from plain data. An
error that the kit's object raises (a position past the cache, a token of the wrong shape) goes back to the
worker as its type and message, where the stand-in raises it, and is kept in ``refusals``: what the student's
feedback may say about it is the kit's own message, with the numbers in it masked (they come from the hidden
inputs).

``KitObject("scripted_model", {...})`` names what to build (``build`` below): one of the kit's ``BUILDERS``, or,
with ``make``, an object of the checks' own (``brought``: its class says which methods it answers and keeps its
record). The client builds one per argument of each call, so each record holds that call only.
"""

from __future__ import annotations

import inspect
import re
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

import assignment

# Where the kit's own code lives: an error raised there carries the kit's own message (its checks of arguments).
KIT_SOURCES = (Path(assignment.__file__).resolve().parent, Path(__file__).resolve().parent)
_NUMBER = re.compile(r"(?<![A-Za-z_\d])\d+(?![A-Za-z_\d])")  # a run of digits, not part of a name (float32)


def masked_numbers(text: str) -> str:
    """``text`` with every run of digits but 0 and 1 written as N: a kit message about a student's call names
    positions, lengths and shapes that come from the hidden inputs."""
    return _NUMBER.sub(lambda m: m[0] if m[0] in ("0", "1") else "N", text)


@dataclass(frozen=True)
class Refusal:
    """A served call that raised: the object (its ``what``), the method, the error's type and message, and whether
    the kit's own code raised it (only then is its message the kit's to show)."""

    what: str
    method: str
    type: str
    message: str
    kit_message: bool

    def feedback(self) -> str:
        said = f": {masked_numbers(self.message)}" if self.kit_message and self.message else ""
        return f"the kit's {self.what} had refused a call of {self.method} with a {self.type}{said}"


class Served:
    """One kit object served to the worker (subclasses say what it shows and answers)."""

    what = "object"  # how messages name it
    methods: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self.refusals: list[Refusal] = []
        self.calls: list[dict] | None = None  # the record, for objects that keep one
        self.started = time.monotonic()
        self.kit_sources: tuple[Path, ...] = KIT_SOURCES  # where an error is the kit's own (its message shown)

    def attributes(self) -> dict:
        return {}

    def serve(self, method: str, args: list, kwargs: dict):
        """Run ``method`` (one of ``methods``) on plain arguments. What it added to the record gets the time since
        the object was built (the checker's clock); an error it raises is kept in ``refusals`` and re-raised."""
        if method not in self.methods:
            raise AttributeError(f"the kit's {self.what} has no method {method!r}")
        recorded = len(self.calls) if self.calls is not None else 0
        try:
            result = self._run(method, args, kwargs)
        except Exception as exc:
            self.refusals.append(
                Refusal(self.what, method, type(exc).__name__, str(exc)[:2000], raised_by_kit(exc, self.kit_sources))
            )
            raise
        if self.calls is not None:
            at = round(time.monotonic() - self.started, 6)
            for entry in self.calls[recorded:]:
                entry["at"] = at
        return result

    def _run(self, method: str, args: list, kwargs: dict):
        raise NotImplementedError


def raised_by_kit(exc: BaseException, sources: tuple[Path, ...] = KIT_SOURCES) -> bool:
    """Whether the innermost frame that raised ``exc`` is the kit's own code (in ``sources``: ``assignment``, this
    folder and the file of a brought object's class; its checks of arguments, with its own messages) rather than
    PyTorch's internals or Python's argument binding."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and any(Path(frames[-1].filename).resolve().is_relative_to(s) for s in sources)


class ServedModel(Served):
    """A model with a KV cache (the scripted stand-in or the shipped checkpoint's transformer), answering
    ``prefill`` and ``decode_one_token``. ``calls`` is the record: one {op, positions, tokens, at} per call it
    served, in order."""

    what = "model"
    methods = frozenset({"prefill", "decode_one_token"})
    OPS = {"prefill": "prefill", "decode_one_token": "decode"}

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        self.calls = []

    def attributes(self) -> dict:
        return {
            "max_seq_len": int(self.model.max_seq_len),
            "vocab_size": int(self.model.vocab_size),
            "device": {"$device": str(self.model.device)},
        }

    def _run(self, method: str, args: list, kwargs: dict):
        function = getattr(self.model, method)
        bound = inspect.signature(function).bind(*args, **kwargs)
        with torch.no_grad():
            logits = function(*bound.args, **bound.kwargs)
        tokens, positions = bound.args[0] if bound.args else None, bound.arguments.get("input_pos")
        self.calls.append({"op": self.OPS[method], "positions": _ints(positions), "tokens": _ints(tokens)})
        return logits

    @property
    def steps(self) -> int:
        """How many model steps (prefill and decode calls) it has served."""
        return len(self.calls)


def _ints(value) -> list[int]:
    """A tensor's values as a flat list of ints (the record's positions and tokens); a model that served the call
    had them as integer tensors."""
    return [int(x) for x in value.reshape(-1).tolist()] if isinstance(value, torch.Tensor) else []


class ServedMethods(Served):
    """An object's listed methods, served as they are (``record``: the object's own list of calls, if it keeps
    one; the object lives in the checker, so the list is the checker's; ``kit_files``: files beyond KIT_SOURCES
    whose errors are the kit's own)."""

    def __init__(
        self,
        target,
        what: str,
        methods,
        attributes: dict | None = None,
        record: list | None = None,
        kit_files: tuple[Path, ...] = (),
    ):
        super().__init__()
        self.target, self.what, self.methods = target, what, frozenset(methods)
        self._attributes, self.calls = dict(attributes or {}), record
        self.kit_sources = (*KIT_SOURCES, *kit_files)

    def attributes(self) -> dict:
        return self._attributes

    def _run(self, method: str, args: list, kwargs: dict):
        return getattr(self.target, method)(*args, **kwargs)


def _tokenizer(tokenizer) -> ServedMethods:
    """A tokenizer (the byte tokenizer, or the checkpoint's): ``encode`` and ``decode``, and its ids."""
    ids = {
        "vocab_size": int(tokenizer.vocab_size),
        "bos_id": tokenizer.bos_id,
        "eos_id": tokenizer.eos_id,
        "stop_ids": {"$tuple": [int(i) for i in tokenizer.stop_ids]},
    }
    return ServedMethods(tokenizer, "tokenizer", ("encode", "decode"), ids)


@cache
def _checkpoint(device: str):
    """The shipped checkpoint, loaded once per device in the checker's process for serving (the hidden tests judge
    with their own copy, which no student-driven call ever touches)."""
    from assignment.model import DEFAULT_CHECKPOINT, load_checkpoint

    return load_checkpoint(DEFAULT_CHECKPOINT, device=device, max_seq_len=1)


def _checkpoint_model(device: str, max_seq_len: int) -> ServedModel:
    model = _checkpoint(device).model
    model.setup_caches(1, int(max_seq_len))  # a fresh cache for each call
    return ServedModel(model)


def _scripted_model(device: str, **settings) -> ServedModel:
    from assignment.model.scripted import ScriptedModel

    return ServedModel(ScriptedModel(device=device, **settings))


def _byte_tokenizer(device: str) -> ServedMethods:
    from assignment.model.scripted import ByteTokenizer

    return _tokenizer(ByteTokenizer())


def brought(target, what: str) -> ServedMethods:
    """An object a task's checks bring (built by the checker, from the checks' own code), served as it is: the
    methods its class lists in ``METHODS``, its ``calls`` list (when it keeps one) the record. An error raised in
    the file of its class is the kit's own, as one raised in ``assignment`` is."""
    own_file = Path(inspect.getfile(type(target))).resolve()
    return ServedMethods(
        target, what, type(target).METHODS, record=getattr(target, "calls", None), kit_files=(own_file,)
    )


BUILDERS = {
    "scripted_model": _scripted_model,
    "checkpoint_model": _checkpoint_model,
    "byte_tokenizer": _byte_tokenizer,
    "checkpoint_tokenizer": lambda device: _tokenizer(_checkpoint(device).tokenizer),
}


def build(name: str, kwargs: dict, device: str, make: Callable[..., object] | None = None) -> Served:
    """The kit object ``name`` (a key of BUILDERS) on ``device``, for one call; with ``make``, the checks' own
    object ``make(**kwargs)``, served as ``name`` (``brought``)."""
    if make is not None:
        return brought(make(**kwargs), name)
    if name not in BUILDERS:
        raise ValueError(f"unknown kit object {name!r} (choose from {', '.join(BUILDERS)})")
    return BUILDERS[name](device, **kwargs)
