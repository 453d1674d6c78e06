"""What crosses between the checker and a sandboxed worker (grader/isolation/client.py): the values a call sends (its
tensors apart, kit objects by name) and gets back, the kit objects this process serves to the worker during a call,
and the failure a call raises."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from grader.isolation import feedback, served
from grader.isolation.worker import MAX_DRAINED_ITEMS, SERVED_ERRORS

# Tensors one served call may send (a decode step's KV cache in a driver's scenarios is well under 1 MiB; the kit's
# objects compute in this process, so what the student's code sends is work and memory here).
SERVED_PAYLOAD_BYTES = 64 * 2**20


class WorkerFailure(RuntimeError):
    """A call did not produce a usable result. ``kind`` says how (the checker reports it); ``str()`` and ``detail``
    hold everything known (for the checks and the instructor), ``feedback`` what a student may be told (see the
    module docstring; the message itself when the checker wrote it)."""

    def __init__(self, kind: str, message: str, detail: str = "", feedback: str | None = None):
        super().__init__(message)
        self.kind, self.detail = kind, detail
        self.feedback = message if feedback is None else feedback


@dataclass
class CallResult:
    value: object
    peak_bytes: int | None  # resident memory the call added (None: not measured)
    largest: dict | None  # the worker's own report of its largest tensor (informative only)
    seconds: float
    steps: list | None = None  # drain: how many model steps the checker had served as each piece arrived
    calls: list | None = None  # the checker's record of the call's first served model or kernels (served.py)


@dataclass(frozen=True)
class KitObject:
    """An argument that is a kit object, built in the checker for the call and served to the worker (it cannot cross
    the channel as data): ``name`` a key of served.BUILDERS (a model, a tokenizer), or, with ``make``, what the
    messages call the checks' own object ``make(**kwargs)`` (a class with ``METHODS``: served.brought). Neither
    ``kwargs`` nor ``make`` ever crosses."""

    name: str
    kwargs: dict = field(default_factory=dict)
    make: Callable[..., object] | None = None


@dataclass(frozen=True)
class SeededGenerator:
    """An argument the worker turns into a ``torch.Generator`` on the call's device, seeded with ``seed``."""

    seed: int


class CallInFlight:
    """The checker's side of one call while it runs: the kit objects it serves to the worker (by handle), and the
    pieces a drained stream sent, each with how many model steps had been served when it arrived."""

    def __init__(self, device: str):
        self.device = device
        self.served: dict[str, served.Served] = {}
        self.pieces: list[str | None] = []  # None: an item that was not a string
        self.arrivals: list[int] = []

    def add(self, kit_object: KitObject, tensors: dict) -> dict:
        """Build ``kit_object`` for this call; what the worker gets to stand for it."""
        built = served.build(kit_object.name, dict(kit_object.kwargs), self.device, kit_object.make)
        handle = f"k{len(self.served)}"
        self.served[handle] = built
        return {
            "$served": handle,
            "what": built.what,
            "methods": sorted(built.methods),
            "attributes": encode_value(built.attributes(), tensors),
        }

    def model_steps(self) -> int:
        return sum(s.steps for s in self.served.values() if isinstance(s, served.ServedModel))

    def take_piece(self, frame: dict) -> bool:
        """Keep a streamed piece, stamped with the model steps served so far; False past MAX_DRAINED_ITEMS."""
        text = frame.get("text")
        self.pieces.append(text if isinstance(text, str) else None)
        self.arrivals.append(self.model_steps())
        return len(self.pieces) <= MAX_DRAINED_ITEMS

    def answer(self, frame: dict, data: bytes) -> tuple[dict, bytes]:
        """Serve one method call the worker asked for: the kit object's answer, or its error (type and message)."""
        from safetensors.torch import load, save

        try:
            target = self.served.get(str(frame.get("object")))
            if target is None:
                raise RuntimeError("this call has no such kit object")
            if len(data) > SERVED_PAYLOAD_BYTES:  # the work is this process's: the student's code picks its size
                raise ValueError(
                    f"the kit's {target.what} takes at most {SERVED_PAYLOAD_BYTES >> 20} MiB of tensors per call"
                )
            tensors = load(data) if data else {}
            args = decode_served(frame.get("args", []), tensors, self.device)
            kwargs = decode_served(frame.get("kwargs", {}), tensors, self.device)
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise TypeError("the arguments did not arrive as a list and a dict")
            result = target.serve(str(frame.get("method")), args, kwargs)
            out: dict = {}
            encoded = encode_value(result, out)
            return {"op": "served", "ok": True, "result": encoded}, save(out) if out else b""
        except Exception as exc:  # noqa: BLE001 - whatever the kit's object raised goes back to the student's code
            name = type(exc).__name__ if type(exc).__name__ in SERVED_ERRORS else "RuntimeError"
            return {"op": "served", "ok": False, "error": {"type": name, "message": str(exc)[:2000]}}, b""

    def record(self) -> list | None:
        """The record of the first served object that keeps one (a model's steps, stand-in kernels' calls)."""
        return next((list(s.calls) for s in self.served.values() if s.calls is not None), None)

    def offers(self) -> str:
        """What the call's served kit objects offer the student's code (this process's own words)."""
        return "; ".join(
            f"the kit's {s.what} offers {', '.join((*sorted(s.methods), *s.attributes()))}"
            for s in self.served.values()
        )

    def refusal(self, type_name: str) -> served.Refusal | None:
        """The last call a served object refused with this type of error (what made the student's code fail)."""
        refused = [r for s in self.served.values() for r in s.refusals if r.type == type_name]
        return refused[-1] if refused else None


def decode_served(value, tensors: dict, device: str):
    """A served call's arguments as the worker encoded them (worker.Worker._encode): plain data only. Each tensor is
    placed where the student's code had it (the call's device or the CPU), so the kit's object can refuse a tensor
    on the wrong device as it would in the student's own process."""
    if isinstance(value, list):
        return [decode_served(v, tensors, device) for v in value]
    if not isinstance(value, dict):
        return value
    if "$t" in value:
        if str(value.get("type")) != "torch.Tensor" or value["$t"] not in tensors:
            raise TypeError("a tensor argument must be a plain torch.Tensor")
        where = str(value.get("device", "cpu"))
        if where not in ("cpu", device):
            raise ValueError(f"a tensor argument is on {where}, but this call runs on {device}")
        return tensors[value["$t"]].to(where)
    if "$tuple" in value or "$list" in value:
        items = [decode_served(v, tensors, device) for v in value.get("$tuple", value.get("$list", []))]
        return tuple(items) if "$tuple" in value else items
    if "$dict" in value:
        return {str(k): decode_served(v, tensors, device) for k, v in dict(value["$dict"]).items()}
    if "$float" in value:
        return float(value["$float"])
    raise TypeError("the kit's objects take data: tensors, numbers, strings, and lists, tuples and dicts of them")


def error_text(error: dict) -> str:
    kind, name, message = error.get("kind", ""), error.get("type", "Error"), str(error.get("message", ""))
    if kind == "forbidden":
        return f"called {message}, which this task forbids"
    return f"{name}: {message}"[:4000]


def device_of(args, kwargs) -> str:
    """The device of the first tensor among the arguments, nested lists, tuples and dicts included; else the CPU."""
    pending = [*args, *kwargs.values()]
    while pending:
        value = pending.pop(0)
        if isinstance(value, torch.Tensor):
            return str(value.device)
        if isinstance(value, (list, tuple)):
            pending[:0] = value
        elif isinstance(value, dict):
            pending[:0] = value.values()
    return "cpu"


def canonical_device(device: str) -> str:
    """ "cuda" as "cuda:N" (the current device), the way a tensor there names its device."""
    parsed = torch.device(device)
    if parsed.type == "cuda" and parsed.index is None:
        parsed = torch.device("cuda", torch.cuda.current_device())
    return str(parsed)


def encode_value(value, tensors: dict, in_flight: CallInFlight | None = None):
    """Plain data for the worker (tensors go into ``tensors``); a KitObject is built for ``in_flight``."""
    if isinstance(value, KitObject):
        if in_flight is None:
            raise TypeError("a kit object can only be an argument of a call")
        return in_flight.add(value, tensors)
    if isinstance(value, SeededGenerator):
        return {"$generator": int(value.seed)}
    if isinstance(value, torch.Tensor):
        name = f"a{len(tensors)}"
        tensors[name] = value.detach().to("cpu").contiguous().clone()
        return {"$t": name}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    if isinstance(value, (list, tuple)):
        return [encode_value(v, tensors, in_flight) for v in value]
    if isinstance(value, dict):
        return {str(k): encode_value(v, tensors, in_flight) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot send a {type(value).__name__} to the worker")


class ResultTypeError(WorkerFailure):
    pass


def decode_value(value, tensors: dict, device: str):
    if isinstance(value, dict):
        if "$t" in value:
            name = value["$t"]
            if name not in tensors:
                raise WorkerFailure("result", "the reply refers to a tensor it does not carry")
            declared = str(value.get("type", "torch.Tensor"))
            if declared != "torch.Tensor":
                raise ResultTypeError("result", f"returned {feedback.type_said(declared)}, not a plain torch.Tensor")
            where = str(value.get("device", device))
            if where != device:
                said = "the CPU" if where == "cpu" else "a GPU" if where.startswith("cuda") else "another device"
                raise ResultTypeError("result", f"returned a tensor on {said}, but the inputs were on {device}")
            return tensors[name].to(device)
        if "$tuple" in value or "$list" in value:
            items = [decode_value(v, tensors, device) for v in value.get("$tuple", value.get("$list", []))]
            return tuple(items) if "$tuple" in value else items
        if "$dict" in value and isinstance(value["$dict"], dict):
            return {str(k): decode_value(v, tensors, device) for k, v in value["$dict"].items()}
        if "$float" in value:
            return float(value["$float"])
        if "$other" in value:
            what = feedback.type_said(str(value["$other"]))
            if value.get("iterator"):
                raise ResultTypeError(
                    "result",
                    f"returned {what} (an iterator) where a value was expected: return "
                    "the values themselves (a list, say), not a generator",
                )
            raise ResultTypeError(
                "result",
                f"returned {what}, not a plain torch.Tensor"
                if value.get("subclass")
                else f"returned {what}, not a tensor",
            )
    return value
