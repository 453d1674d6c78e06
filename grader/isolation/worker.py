"""The sandboxed half of the grader: import a student's Python file and answer calls to it.

    python -I worker.py '<json config>'          (started by grader.isolation.sandbox)

Runs inside the sandbox with nothing of the instructor's in view, so it imports only the standard
library, torch and safetensors, and the kit's model package (the copy the client puts beside this
file, which students get anyway) only when a request names one of its objects. Before anything of
the student's runs it drops to an unprivileged uid (when started as root), moves its protocol off
stdin/stdout (a student's print goes to the log, not into the protocol) and replaces the operations
the task forbids with tripwires.

Protocol: frames on the private descriptors, each ``HEADER`` (magic, JSON length, payload length),
a JSON object, then a safetensors payload holding the tensors the JSON refers to as {"$t": name}.
Tensors cross as plain data, so whatever a student's object pretends to be, the grader receives
bytes with a dtype and a shape. Requests: {"op": "hello"} and {"op": "call", "file", "function",
"args", "kwargs", "device", "track", "drain", "calls"}; every reply carries the request's "id". The
grader trusts nothing a reply says except the data it checks itself.

Arguments that are not data (t7's model, tokenizer and random generator) are built here from the
kit's code: {"$object": name, "kwargs": {...}} (a name in KIT_OBJECTS) and {"$generator": seed}, on
the call's device. "drain" iterates an iterator result here and returns its items, each with the
step counter of the call's first kit model when it came out (streaming happens during generation,
not after it); "calls" returns the call log of the call's first scripted model.

A request with "driver" (a name in KIT_DRIVERS) calls a function of that kit module beside this file,
with the student's module first: t6's cache is a class the kit's model drives, not a function of data,
so its scenarios are kit code (t6_driver.py) run here around it. Results may then hold dicts with
string keys, sent as {"$dict": {...}}.
"""

from __future__ import annotations

import collections.abc
import importlib.util
import json
import math
import os
import struct
import sys
import traceback

MAGIC = b"KITW"
HEADER = struct.Struct("<4sQQ")
MAX_JSON_BYTES = 1 << 20
# Where a tripwire is installed for each forbidden name found there.
TRIPWIRE_HOMES = ("torch", "torch.nn", "torch.nn.functional", "torch.Tensor", "torch._C", "torch._C._nn",
                  "torch.linalg", "torch.special")
KIT_OBJECTS = ("scripted_model", "byte_tokenizer", "checkpoint_model", "checkpoint_tokenizer")
KIT_DRIVERS = {"t6": "t6_driver"}  # driver name -> kit module beside this file (its ENTRY_POINTS may be called)
MAX_DRAINED_ITEMS = 100_000   # items of a drained iterator (a stream of a few hundred pieces is far below)
MAX_LOG_ENTRIES = 10_000      # entries of a returned call log, and values in each


class ProtocolError(RuntimeError):
    """A malformed or oversized frame."""


class ForbiddenOperation(RuntimeError):
    """Raised by a tripwire: the student's code called something its task forbids."""


def write_frame(stream, header: dict, payload: bytes = b"") -> None:
    body = json.dumps(header, allow_nan=False).encode()
    stream.write(HEADER.pack(MAGIC, len(body), len(payload)) + body + payload)
    stream.flush()


def _read_exactly(stream, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(stream, max_payload: int) -> tuple[dict, bytes]:
    magic, json_len, payload_len = HEADER.unpack(_read_exactly(stream, HEADER.size))
    if magic != MAGIC:
        raise ProtocolError("not a frame (bad magic)")
    if json_len > MAX_JSON_BYTES or payload_len > max_payload:
        raise ProtocolError(f"frame too large ({json_len} + {payload_len} bytes)")
    header = json.loads(_read_exactly(stream, json_len))
    if not isinstance(header, dict):
        raise ProtocolError("frame header is not an object")
    return header, _read_exactly(stream, payload_len) if payload_len else b""


# --------------------------------------------------------------------------- the sandboxed side


def _drop_privileges(config: dict) -> None:
    uid, gid = config.get("uid"), config.get("gid")
    if uid is None or os.getuid() != 0:
        return
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise SystemExit("worker: could not drop root privileges")


def _install_tripwires(names: list[str]) -> list[str]:
    installed = []
    for home in TRIPWIRE_HOMES:
        obj = sys.modules.get(home)
        if obj is None and home == "torch.Tensor":
            obj = sys.modules["torch"].Tensor
        if obj is None:
            continue
        for name in names:
            if hasattr(obj, name):
                def tripwire(*args, _what=f"{home}.{name}", **kwargs):
                    raise ForbiddenOperation(_what)
                try:
                    setattr(obj, name, tripwire)
                    installed.append(f"{home}.{name}")
                except (AttributeError, TypeError):
                    pass
    return installed


class _Largest:
    """The largest tensor any PyTorch operation makes inside the block (what the student used)."""

    def __new__(cls):
        from torch.utils._python_dispatch import TorchDispatchMode

        class Mode(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.numel, self.shape, self.op = 0, [], ""

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                import torch
                for t in out if isinstance(out, (tuple, list)) else (out,):
                    if isinstance(t, torch.Tensor) and t.numel() > self.numel:
                        self.numel, self.shape, self.op = t.numel(), list(t.shape), str(func)
                return out
        return Mode()


class _CountingModel:
    """The kit's transformer as the student's loop sees it, counting its prefill and decode calls (the
    scripted model's ``steps``), so that a drained stream shows when each piece came out."""

    def __init__(self, model):
        self._model, self.steps = model, 0

    def prefill(self, tokens, input_pos):
        self.steps += 1
        return self._model.prefill(tokens, input_pos)

    def decode_one_token(self, token, input_pos):
        self.steps += 1
        return self._model.decode_one_token(token, input_pos)

    def __getattr__(self, name):  # max_seq_len, vocab_size, device, config, ...
        return getattr(self._model, name)


def _plain_log(calls) -> list | None:
    """A scripted model's call log as plain JSON ({op, positions, tokens} entries, bounded in size), or None
    when it is not one. It is an object of the student's process, which can rewrite it: the checker reads
    it as evidence beside the outputs it checks itself, never as the only evidence."""
    try:
        entries, budget = [], MAX_LOG_ENTRIES
        for entry in list(calls)[:MAX_LOG_ENTRIES]:
            positions = [int(p) for p in list(entry["positions"])[:budget]]
            tokens = [int(t) for t in list(entry["tokens"])[:budget]]
            budget -= len(positions) + len(tokens)
            entries.append({"op": str(entry["op"])[:16], "positions": positions, "tokens": tokens})
            if budget <= 0:
                break
        return entries
    except Exception:  # noqa: BLE001 - whatever the object is, it is not a call log
        return None


def _error(kind: str, type_name: str, message: str, traceback_text: str = "") -> dict:
    error = {"kind": kind, "type": type_name, "message": message[:4000]}
    if traceback_text:
        error["traceback"] = traceback_text
    return {"ok": False, "error": error}


class Worker:
    def __init__(self, config: dict, out_stream, in_stream):
        import torch
        from safetensors.torch import load, save

        self.torch, self.load, self.save = torch, load, save
        self.config = config
        self.out, self.inp = out_stream, in_stream
        self.modules: dict[str, object] = {}
        self.max_payload = int(config.get("max_payload", 8 << 30))
        self.kit_root = os.path.dirname(os.path.abspath(__file__))  # the client's copy of the kit's model package
        self.checkpoints: dict[str, object] = {}  # device -> the shipped checkpoint, loaded once
        self.drivers: dict[str, object] = {}

    def _module(self, filename: str):
        if filename not in self.modules:
            if "/" in filename or filename.startswith("."):
                raise ProtocolError(f"bad file name {filename!r}")
            path = os.path.join(self.config["student_dir"], filename)
            spec = importlib.util.spec_from_file_location("student_" + filename.removesuffix(".py"), path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            self.modules[filename] = module
        return self.modules[filename]

    def _driver(self, name: str):
        """A kit driver module (KIT_DRIVERS), imported once from beside this file."""
        if name not in KIT_DRIVERS:
            raise ProtocolError(f"unknown driver {name!r}")
        if name not in self.drivers:
            if self.kit_root not in sys.path:
                sys.path.insert(0, self.kit_root)
            path = os.path.join(self.kit_root, KIT_DRIVERS[name] + ".py")
            spec = importlib.util.spec_from_file_location("kit_driver_" + name, path)
            driver = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(driver)
            driver.configure(self.config.get("checkpoint", ""))
            self.drivers[name] = driver
        return self.drivers[name]

    def _decode(self, value, tensors: dict, device: str, made: list):
        """Plain data back into Python values; kit objects are built here and listed in ``made``."""
        if isinstance(value, dict) and "$t" in value:
            return tensors[value["$t"]].to(device)
        if isinstance(value, dict) and "$float" in value:
            return float(value["$float"])
        if isinstance(value, dict) and "$object" in value:
            name = str(value["$object"])
            made.append((name, self._kit_object(name, dict(value.get("kwargs") or {}), device)))
            return made[-1][1]
        if isinstance(value, dict) and "$generator" in value:
            return self.torch.Generator(device=device).manual_seed(int(value["$generator"]))
        if isinstance(value, list):
            return [self._decode(v, tensors, device, made) for v in value]
        if isinstance(value, dict):
            return {k: self._decode(v, tensors, device, made) for k, v in value.items()}
        return value

    def _kit_object(self, name: str, kwargs: dict, device: str):
        """One of KIT_OBJECTS, from the kit's model package beside this file (a fresh scripted model per call,
        so its log holds that call only; the checkpoint is loaded once per device, its cache set up anew)."""
        if name not in KIT_OBJECTS:
            raise ProtocolError(f"unknown kit object {name!r}")
        if self.kit_root not in sys.path:
            sys.path.insert(0, self.kit_root)
        if name in ("scripted_model", "byte_tokenizer"):
            from assignment.model.scripted import ByteTokenizer, ScriptedModel

            return ScriptedModel(device=device, **kwargs) if name == "scripted_model" else ByteTokenizer()
        if device not in self.checkpoints:
            from assignment.model import load_checkpoint

            path = os.path.join(self.kit_root, self.config["checkpoint"])
            self.checkpoints[device] = load_checkpoint(path, device=device, max_seq_len=1)
        loaded = self.checkpoints[device]
        if name == "checkpoint_tokenizer":
            return loaded.tokenizer
        loaded.model.setup_caches(1, int(kwargs["max_seq_len"]))
        return _CountingModel(loaded.model)

    def _encode(self, value, tensors: dict):
        torch = self.torch
        if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
            # A subclass can answer anything about itself: report it without asking it for anything.
            return {"$other": f"{type(value).__module__}.{type(value).__qualname__}", "subclass": True}
        if isinstance(value, torch.Tensor):
            name = f"r{len(tensors)}"
            meta = {"$t": name, "type": f"{type(value).__module__}.{type(value).__qualname__}",
                    "device": str(value.device)}
            tensors[name] = value.detach().to("cpu").clone().contiguous()
            return meta
        if isinstance(value, (tuple, list)):
            return {"$tuple" if isinstance(value, tuple) else "$list": [self._encode(v, tensors) for v in value]}
        if isinstance(value, dict) and all(type(k) is str for k in value):
            return {"$dict": {k: self._encode(v, tensors) for k, v in value.items()}}
        if isinstance(value, float) and not math.isfinite(value):
            return {"$float": repr(value)}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        other = {"$other": f"{type(value).__module__}.{type(value).__qualname__}"}
        return dict(other, iterator=True) if isinstance(value, collections.abc.Iterator) else other

    def _student_traceback(self) -> str:
        root = self.config["student_dir"]
        frames = [f for f in traceback.extract_tb(sys.exc_info()[2]) if f.filename.startswith(root)]
        return "".join(traceback.format_list(frames))[-4000:]

    def call(self, request: dict, payload: bytes) -> tuple[dict, bytes]:
        torch = self.torch
        device = request.get("device", "cpu")
        tensors = self.load(payload) if payload else {}
        made: list[tuple[str, object]] = []
        try:
            args = self._decode(request.get("args", []), tensors, device, made)
            kwargs = self._decode(request.get("kwargs", {}), tensors, device, made)
        except BaseException as exc:  # noqa: BLE001 - the kit's own objects: an instructor's error, said as such
            return _error("kit", type(exc).__name__, "the worker could not build the call's kit objects: "
                                                     f"{type(exc).__name__}: {exc}"), b""
        try:
            driver = self._driver(request["driver"]) if request.get("driver") else None
        except BaseException as exc:  # noqa: BLE001 - the kit's own driver: an instructor's error, said as such
            return _error("kit", type(exc).__name__, f"the worker could not load its driver: {exc}"), b""
        try:
            module = self._module(request["file"])
        except BaseException as exc:  # noqa: BLE001 - any failure to import is the student's to see
            return _error("import", type(exc).__name__, str(exc), self._student_traceback()), b""
        if driver is not None:
            if request["function"] not in driver.ENTRY_POINTS:
                return _error("kit", "ProtocolError", f"the driver has no scenario {request['function']!r}"), b""
            scenario = getattr(driver, request["function"])

            def function(*a, **k):
                return scenario(module, *a, **k)
        else:
            function = getattr(module, request["function"], None)
        if not callable(function):
            return _error("missing", "AttributeError", f"{request['file']} has no function {request['function']}"), b""
        largest, steps = None, None
        try:
            if request.get("track"):
                with _Largest() as mode:
                    result = function(*args, **kwargs)
                largest = {"numel": mode.numel, "shape": mode.shape, "op": mode.op}
            else:
                result = function(*args, **kwargs)
            if request.get("drain"):
                if not isinstance(result, collections.abc.Iterator):
                    return _error("result", "TypeError", f"returned a {type(result).__name__}, not an iterator: "
                                                         "write it as a generator that yields each piece as soon "
                                                         "as it is ready"), b""
                result, steps = self._drain(result, made)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        except ForbiddenOperation as exc:
            return _error("forbidden", "ForbiddenOperation", str(exc)), b""
        except NotImplementedError as exc:
            return _error("not_implemented", "NotImplementedError", str(exc)[:2000]), b""
        except BaseException as exc:  # noqa: BLE001
            return _error("exception", type(exc).__name__, str(exc), self._student_traceback()), b""
        out: dict = {}
        try:
            encoded = self._encode(result, out)
            data = self.save(out) if out else b""
        except BaseException as exc:  # noqa: BLE001
            return _error("result", type(exc).__name__, f"the result could not be read: {str(exc)[:500]}"), b""
        reply = {"ok": True, "result": encoded, "largest": largest, "steps": steps}
        if request.get("calls"):
            scripted = next((obj for name, obj in made if name == "scripted_model"), None)
            reply["calls"] = _plain_log(getattr(scripted, "calls", None))
        return reply, data

    @staticmethod
    def _drain(iterator, made: list) -> tuple[list, list]:
        """The iterator's items, and for each the step counter of the call's first kit model when it came out."""
        model = next((obj for name, obj in made if name in ("scripted_model", "checkpoint_model")), None)
        items, steps = [], []
        for item in iterator:
            items.append(item)
            steps.append(int(model.steps) if model is not None else None)
            if len(items) > MAX_DRAINED_ITEMS:
                raise RuntimeError(f"the iterator yielded more than {MAX_DRAINED_ITEMS} items")
        return items, steps

    def serve(self) -> None:
        while True:
            try:
                request, payload = read_frame(self.inp, self.max_payload)
            except EOFError:
                return
            op = request.get("op")
            if op == "hello":
                reply, data = {"ok": True, "uid": os.getuid(), "python": sys.version.split()[0],
                               "torch": self.torch.__version__, "cuda": self.torch.cuda.is_available(),
                               "tripwires": self.config.get("installed", [])}, b""
            elif op == "call":
                reply, data = self.call(request, payload)
            else:
                reply, data = {"ok": False, "error": {"kind": "protocol", "message": f"unknown op {op!r}"}}, b""
            reply["id"] = request.get("id")
            write_frame(self.out, reply, data)


def main() -> None:
    config = json.loads(sys.argv[1])
    _drop_privileges(config)
    # The protocol moves to private descriptors; fd 0 and 1 become /dev/null and the log.
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path[:0] = [p for p in config.get("sys_path", []) if p not in sys.path]
    sys.dont_write_bytecode = True
    import torch  # noqa: F401 - loaded before the student's code, so the tripwires sit on the real modules

    config["installed"] = _install_tripwires(list(config.get("forbidden", [])))
    Worker(config, out, inp).serve()


if __name__ == "__main__":
    main()
