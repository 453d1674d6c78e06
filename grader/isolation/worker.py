"""The sandboxed half of the grader: import a student's Python file and answer calls to it.

    python -I worker.py '<json config>'          (started by grader.isolation.sandbox)

Runs inside the sandbox with nothing of the instructor's in view, so it imports only the standard
library, torch and safetensors (and, for a kit driver, the kit copy the client puts beside this file).
Before anything of the student's runs it drops to an unprivileged uid (when started as root), moves its
protocol off stdin/stdout (a student's print goes to the log, not into the protocol) and replaces the
operations the task forbids with tripwires.

Protocol: frames on the private descriptors, each ``HEADER`` (magic, JSON length, payload length),
a JSON object, then a safetensors payload holding the tensors the JSON refers to as {"$t": name}.
Tensors cross as plain data, so whatever a student's object pretends to be, the grader receives
bytes with a dtype and a shape. Requests: {"op": "hello"}, {"op": "import", "file"} (the file alone,
before any call sends it data) and {"op": "call", "file", "function", "args", "kwargs", "device",
"track", "drain"}; every reply carries the request's "id". The grader trusts nothing a reply says
except the data it checks itself.

Kit objects live in the checker (grader/isolation/served.py): a model, a tokenizer, a cache's stand-in
kernels. An argument {"$served": handle, "what", "attributes", "methods"} becomes a ``ServedObject``
here: its attributes are plain values, and each method call is a frame {"op": "serve", "object",
"method", "args", "kwargs"} to the checker, which runs the kit's object, records the call and answers
{"op": "served", "ok", "result"} (or the kit's error, raised here with its type and message). So the
call log the checks judge is the checker's, and nothing in this process can compute what the model
would answer. {"$generator": seed} becomes a ``torch.Generator`` on the call's device.

"drain" iterates an iterator result and sends each item to the checker as it comes out, one frame
{"op": "piece", "text"} per item, before asking the iterator for the next: the checker notes, at each
arrival, how many model steps it has served (streaming happens during generation, not after it).

A request with "driver" (``name``: the kit module ``name.py`` the client copied beside this file, one
of the config's "drivers") calls one of that module's ENTRY_POINTS with the student's module first: a
KV cache is a class the kit's model drives, not a function of data, so its task's scenarios are kit
code (the task keeps the file; the checker hands it over) run here around it. Results may then hold
dicts with string keys, sent as {"$dict": {...}}.
"""

from __future__ import annotations

import collections.abc
import importlib.util
import json
import math
import os
import struct
import sys
import threading
import traceback

MAGIC = b"KITW"
HEADER = struct.Struct("<4sQQ")
MAX_JSON_BYTES = 1 << 20
# Where a tripwire is installed for each forbidden name found there.
TRIPWIRE_HOMES = (
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.Tensor",
    "torch._C",
    "torch._C._nn",
    "torch.linalg",
    "torch.special",
)
MAX_DRAINED_ITEMS = 100_000  # items of a drained iterator (a stream of a few hundred pieces is far below)
MAX_PIECE_CHARS = 1 << 16  # a longer streamed piece crosses as "not text" (a frame's JSON is at most 1 MiB)
# Errors a served call may raise here (the checker sends the type's name); any other becomes a RuntimeError.
SERVED_ERRORS = {
    error.__name__: error
    for error in (ValueError, TypeError, IndexError, RuntimeError, NotImplementedError, AttributeError)
}


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


class Channel:
    """The private descriptors to the checker: frames out and in, one exchange at a time (a student's thread
    cannot interleave its frames with a served call's)."""

    def __init__(self, out_stream, in_stream, max_payload: int):
        self.out, self.inp, self.max_payload = out_stream, in_stream, max_payload
        self._lock = threading.Lock()

    def send(self, header: dict, payload: bytes = b"") -> None:
        with self._lock:
            write_frame(self.out, header, payload)

    def ask(self, header: dict, payload: bytes = b"") -> tuple[dict, bytes]:
        """Send a frame and wait for the checker's answer to it."""
        with self._lock:
            write_frame(self.out, header, payload)
            reply, data = read_frame(self.inp, self.max_payload)
        if reply.get("op") != "served":
            raise ProtocolError("the checker answered a served call with something else")
        return reply, data


class ServedObject:
    """A kit object that lives in the checker (a model, a tokenizer, stand-in kernels), as the student's code sees
    it: the attributes the checker sent, and methods that each send one call to the checker and return its answer
    (tensors on the call's device). Nothing else: there is no model here to ask, and no record to rewrite."""

    def __init__(self, worker: Worker, handle: str, what: str, attributes: dict, methods: list, device: str):
        self._worker, self._handle, self._what, self._device = worker, handle, what, device
        self._methods = tuple(str(m) for m in methods)
        for name, value in attributes.items():
            setattr(self, name, value)

    def __getattr__(self, name: str):
        methods = vars(self).get("_methods", ())
        if name.startswith("_") or name not in methods:
            offered = ", ".join((*methods, *(k for k in vars(self) if not k.startswith("_"))))
            raise AttributeError(
                f"the kit's {vars(self).get('_what', 'object')} offers {offered}; it has no attribute {name!r}"
            )

        def call(*args, **kwargs):
            return self._worker.ask_checker(self._handle, name, args, kwargs, self._device)

        call.__name__ = name
        return call

    def __repr__(self) -> str:
        return f"<the kit's {self._what}, served by the grader>"


def _error(kind: str, type_name: str, message: str, traceback_text: str = "", reason: str = "") -> dict:
    """An error reply. The checker shows a student only what it can vouch for (worker.py runs in the student's
    process, so any of this may be forged): the kind, a type name it knows, and its own text for ``reason``."""
    error = {"kind": kind, "type": type_name, "message": message[:4000]}
    if traceback_text:
        error["traceback"] = traceback_text
    if reason:
        error["reason"] = reason
    return {"ok": False, "error": error}


class Worker:
    def __init__(self, config: dict, out_stream, in_stream):
        import torch
        from safetensors.torch import load, save

        self.torch, self.load, self.save = torch, load, save
        self.config = config
        self.max_payload = int(config.get("max_payload", 8 << 30))
        self.channel = Channel(out_stream, in_stream, self.max_payload)
        self.modules: dict[str, object] = {}
        self.kit_root = os.path.dirname(os.path.abspath(__file__))  # the client's copy of the kit (drivers)
        self.drivers: dict[str, object] = {}
        if os.path.isdir(os.path.join(self.kit_root, "assignment")) and self.kit_root not in sys.path:
            # The kit's package beside this file (a driver's task: the student's cache subclasses the kit's) is
            # importable by the student's file, as in the student's own checkout.
            sys.path.insert(0, self.kit_root)

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
        """A kit driver module (``<name>.py`` the client put beside this file, named in the config), imported once."""
        path = os.path.join(self.kit_root, f"{name}.py")
        if name not in self.config.get("drivers", ()) or not name.isidentifier() or not os.path.isfile(path):
            raise ProtocolError(f"unknown driver {name!r}")
        if name not in self.drivers:
            spec = importlib.util.spec_from_file_location("kit_driver_" + name, path)
            driver = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(driver)
            driver.configure(self.config.get("checkpoint", ""))
            self.drivers[name] = driver
        return self.drivers[name]

    def _decode(self, value, tensors: dict, device: str):
        """Plain data back into Python values (tensors on ``device``); served kit objects become ServedObjects."""
        if isinstance(value, dict) and "$t" in value:
            return tensors[value["$t"]].to(device)
        if isinstance(value, dict) and "$float" in value:
            return float(value["$float"])
        if isinstance(value, dict) and "$tuple" in value:
            return tuple(self._decode(v, tensors, device) for v in value["$tuple"])
        if isinstance(value, dict) and "$device" in value:
            return self.torch.device(str(value["$device"]))
        if isinstance(value, dict) and "$served" in value:
            attributes = self._decode(dict(value.get("attributes") or {}), tensors, device)
            return ServedObject(
                self,
                str(value["$served"]),
                str(value.get("what", "object")),
                attributes,
                list(value.get("methods") or []),
                device,
            )
        if isinstance(value, dict) and "$generator" in value:
            return self.torch.Generator(device=device).manual_seed(int(value["$generator"]))
        if isinstance(value, list):
            return [self._decode(v, tensors, device) for v in value]
        if isinstance(value, dict):
            return {k: self._decode(v, tensors, device) for k, v in value.items()}
        return value

    def ask_checker(self, handle: str, method: str, args: tuple, kwargs: dict, device: str):
        """One method call of a served object: the arguments go to the checker as data; its answer comes back
        (tensors on ``device``), or its error is raised here."""
        tensors: dict = {}
        header = {
            "op": "serve",
            "object": handle,
            "method": method,
            "args": self._encode(list(args), tensors),
            "kwargs": self._encode(dict(kwargs), tensors),
        }
        reply, data = self.channel.ask(header, self.save(tensors) if tensors else b"")
        if not reply.get("ok"):
            error = reply.get("error") or {}
            raise SERVED_ERRORS.get(str(error.get("type")), RuntimeError)(str(error.get("message", "")))
        return self._decode(reply.get("result"), self.load(data) if data else {}, device)

    def _encode(self, value, tensors: dict):
        torch = self.torch
        if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
            # A subclass can answer anything about itself: report it without asking it for anything.
            return {"$other": f"{type(value).__module__}.{type(value).__qualname__}", "subclass": True}
        if isinstance(value, torch.Tensor):
            name = f"r{len(tensors)}"
            meta = {
                "$t": name,
                "type": f"{type(value).__module__}.{type(value).__qualname__}",
                "device": str(value.device),
            }
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

    def import_file(self, request: dict) -> dict:
        """Import the student's file on its own, before any call sends this process data: what a failed import
        says comes from the student's file alone."""
        try:
            self._module(request["file"])
        except BaseException as exc:  # noqa: BLE001 - any failure to import is the student's to see
            return _error("import", type(exc).__name__, str(exc), self._student_traceback())
        return {"ok": True}

    def call(self, request: dict, payload: bytes) -> tuple[dict, bytes]:
        torch = self.torch
        device = request.get("device", "cpu")
        tensors = self.load(payload) if payload else {}
        try:
            args = self._decode(request.get("args", []), tensors, device)
            kwargs = self._decode(request.get("kwargs", {}), tensors, device)
        except BaseException as exc:  # noqa: BLE001 - the kit's own objects: an instructor's error, said as such
            return _error(
                "kit",
                type(exc).__name__,
                f"the worker could not build the call's arguments: {type(exc).__name__}: {exc}",
            ), b""
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
        largest = None
        try:
            if request.get("track"):
                with _Largest() as mode:
                    result = function(*args, **kwargs)
                largest = {"numel": mode.numel, "shape": mode.shape, "op": mode.op}
            else:
                result = function(*args, **kwargs)
            if request.get("drain"):
                if not isinstance(result, collections.abc.Iterator):
                    return _error(
                        "result",
                        "TypeError",
                        f"returned a {type(result).__name__}, not an iterator",
                        reason="not_an_iterator",
                    ), b""
                result = self._drain(result)
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
            return _error(
                "result", type(exc).__name__, f"the result could not be read: {str(exc)[:500]}", reason="unreadable"
            ), b""
        return {"ok": True, "result": encoded, "largest": largest}, data

    def _drain(self, iterator) -> int:
        """Send each item to the checker as it comes out (the checker keeps the pieces and when they came); the
        count of items."""
        count = 0
        for item in iterator:
            count += 1
            if count > MAX_DRAINED_ITEMS:
                raise RuntimeError(f"the iterator yielded more than {MAX_DRAINED_ITEMS} items")
            if type(item) is str and len(item) <= MAX_PIECE_CHARS:
                self.channel.send({"op": "piece", "text": item})
            else:
                self.channel.send({"op": "piece", "text": None})
        return count

    def serve(self) -> None:
        while True:
            try:
                request, payload = read_frame(self.channel.inp, self.max_payload)
            except EOFError:
                return
            op = request.get("op")
            data = b""
            if op == "hello":
                reply = {
                    "ok": True,
                    "uid": os.getuid(),
                    "python": sys.version.split()[0],
                    "torch": self.torch.__version__,
                    "cuda": self.torch.cuda.is_available(),
                    "tripwires": self.config.get("installed", []),
                }
            elif op == "import":
                reply = self.import_file(request)
            elif op == "call":
                reply, data = self.call(request, payload)
            else:
                reply = {"ok": False, "error": {"kind": "protocol", "message": f"unknown op {op!r}"}}
            reply["id"] = request.get("id")
            self.channel.send(reply, data)


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
