"""What every task's Python wrappers around its CUDA kernels are made of: ``KernelsBase``, the argument checks, the
loading and binding of a student's file, the launch. A task's wrapper class (``TaskCode.kernels`` in
``assignment/tasks/``: its methods, e.g. ``softmax``) is written on these; ``assignment/kernels.py``, above the task
modules, composes every task's into the ``Kernels`` that tests, benchmarks and the grader call.

Every wrapper, in this order:
  1. refuses a file whose task still has ``KIT_TODO`` (NotImplementedError, no GPU touched),
  2. checks dtype, shapes, contiguity, then device (TypeError / ValueError naming the argument),
  3. builds (cached) the student's file as a device module and the kit's host library, loads the module into
     the library (``compiler``: the host code that launches is always the kit's), launches on the current
     PyTorch stream,
  4. turns a non-zero cudaError_t into ``RuntimeError("<kernel> failed: <reason>")``.
Steps 1 and 2 need no GPU, so a starter or a wrong call fails cleanly on any machine.

A call that names no implementation (``assignment.kernels.softmax(x)``, the model's attention through a task's
kernel) runs ``IMPL``'s: ``under_test``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os
import threading
from ctypes import c_int, c_void_p
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from assignment.cuda import compiler
from assignment.cuda.compiler import require_implemented
from assignment.impl import student_dir

if TYPE_CHECKING:  # torch is imported where a wrapper runs: the task modules that name their exports load without it
    import torch

ATTENTION_HEAD_DIMS = (32, 64, 128)  # what the attention kernels are built for
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Export:
    """A KIT_API function of a task file's host library. ``module``: it launches kernels, so it takes the
    device module first (the wrapper passes it)."""

    file: str
    symbol: str
    argtypes: tuple
    restype: type = c_int
    module: bool = True


# A few cudaError_t names, used only when libcudart cannot be found to ask it.
_KNOWN_ERRORS = {
    1: "invalid argument",
    2: "out of memory",
    9: "invalid configuration argument",
    98: "invalid device function",
    209: "no kernel image is available for execution on the device",
    700: "an illegal memory access was encountered",
    710: "device-side assert triggered",
    719: "unspecified launch failure",
}


# --------------------------------------------------------------------------- errors


@lru_cache(maxsize=1)
def _cudart() -> ctypes.CDLL | None:
    """libcudart: the one torch already loaded, torch's bundled copy, or the system's."""
    import torch

    candidates = []
    try:
        with open("/proc/self/maps") as maps:
            candidates += sorted({line.split()[-1] for line in maps if "libcudart.so" in line})
    except OSError:
        pass
    torch_dir = Path(torch.__file__).parent
    for pattern in ("lib/libcudart.so*", "../nvidia/cuda_runtime/lib/libcudart.so*", "../nvidia/cu*/lib/libcudart.so*"):
        candidates += sorted(glob.glob(str(torch_dir / pattern)))
    if found := ctypes.util.find_library("cudart"):
        candidates.append(found)
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
            lib.cudaGetErrorString.restype = ctypes.c_char_p
            lib.cudaGetErrorString.argtypes = (c_int,)
            return lib
        except (OSError, AttributeError):
            continue
    return None


def cuda_error_string(code: int) -> str:
    lib = _cudart()
    if lib is not None:
        text = lib.cudaGetErrorString(code)
        if text:
            return f"{text.decode()} (cudaError_t {code})"
    return f"{_KNOWN_ERRORS.get(code, 'cudaError_t')} (cudaError_t {code})"


def _check_status(code: int, kernel: str) -> None:
    if code != 0:
        raise RuntimeError(f"{kernel} failed: {cuda_error_string(code)}")


# --------------------------------------------------------------------------- argument checks (no GPU needed)


def check_tensor(
    kernel: str, name: str, value, ndim: tuple[int, ...] | None = None, dtypes: tuple | None = None
) -> torch.Tensor:
    """``value`` is a tensor of one of ``dtypes`` (torch dtypes; None: float32, as most kernels are) and ``ndim``."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{kernel}: {name} must be a torch.Tensor, got {type(value).__name__}")
    fp32_only = dtypes is None
    dtypes = (torch.float32,) if fp32_only else dtypes
    if value.dtype not in dtypes:
        wanted = " or ".join(str(t) for t in dtypes)
        why = " (the kernels are fp32)" if fp32_only else ""
        raise TypeError(f"{kernel}: {name} must be {wanted}{why}, got {value.dtype}")
    if ndim is not None and value.dim() not in ndim:
        wanted = " or ".join(f"{n}-D" for n in ndim)
        raise ValueError(f"{kernel}: {name} must be {wanted}, got shape {tuple(value.shape)}")
    return value


def check_shape(kernel: str, name: str, value: torch.Tensor, expected: tuple[int, ...], meaning: str) -> None:
    if tuple(value.shape) != tuple(expected):
        raise ValueError(f"{kernel}: {name} must have shape {tuple(expected)} ({meaning}), got {tuple(value.shape)}")


def check_layout_and_device(kernel: str, **tensors: torch.Tensor) -> torch.device:
    for name, value in tensors.items():
        if not value.is_contiguous():
            raise ValueError(f"{kernel}: {name} must be contiguous (call .contiguous()), got strides {value.stride()}")
    devices = {name: value.device for name, value in tensors.items()}
    for name, device in devices.items():
        if device.type != "cuda":
            raise ValueError(f"{kernel}: {name} must be a CUDA tensor, got device {device} (move it with .cuda())")
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{n} on {d}" for n, d in devices.items())
        raise ValueError(f"{kernel}: all tensors must be on the same device, got {listed}")
    return next(iter(devices.values()))


def check_int32(kernel: str, **sizes: int) -> None:
    for name, size in sizes.items():
        if size > INT32_MAX:
            raise ValueError(f"{kernel}: {name} = {size} does not fit the kernel's 32-bit int argument")


def launch(function, device: torch.device, kernel: str, *args) -> None:
    import torch

    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        _check_status(function(*args, c_void_p(stream)), kernel)


# --------------------------------------------------------------------------- loading a student's file


@dataclass(frozen=True)
class LoadedKernels:
    """A student's CUDA file ready to call: the kit's host library for it, and the module it launches from."""

    host: ctypes.CDLL
    module: c_void_p
    cubin: Path


_loaded: dict[tuple[Path, Path], LoadedKernels] = {}  # (host library, cubin) -> loaded, once per process
_load_lock = threading.Lock()


def load_kernels(source: Path, arch: str | None = None, kit: Path | None = None) -> LoadedKernels:
    """Build ``source`` as a device module (its regions in the kit's file, compiled in the sandbox) and load it
    into the kit's host library built from that same kit file; cached by content, loaded once per process.
    ``kit``: an instructor's variant of the kit's file to use instead of the kit's own (``Kernels.kit``)."""
    built = compiler.build_module(source, arch, kit=kit, source_rules=False if kit is not None else None)
    host_build = compiler.build_library(built.kit, built.arch, trusted=kit is not None)
    return load_module(host_build.path, built.path)


def load_module(host_library: Path | str, cubin: Path | str) -> LoadedKernels:
    """dlopen the kit's host library and load the cubin into it (cudaLibraryLoadData); once per process."""
    key = (Path(host_library), Path(cubin))
    with _load_lock:
        if key not in _loaded:
            host = compiler.open_library(host_library)
            host.kit_module_load.argtypes = (ctypes.c_char_p, ctypes.POINTER(c_void_p))
            host.kit_module_load.restype = c_int
            handle = c_void_p()
            code = host.kit_module_load(Path(cubin).read_bytes(), ctypes.byref(handle))
            if code != 0:
                raise RuntimeError(f"loading the device module {Path(cubin).name} failed: {cuda_error_string(code)}")
            _loaded[key] = LoadedKernels(host, handle, Path(cubin))
        return _loaded[key]


def bind(loaded: LoadedKernels, export: Export):
    """The export of ``loaded``'s host library as a callable; the module is passed first where it launches."""
    function = getattr(loaded.host, export.symbol, None)
    if function is None:
        raise RuntimeError(f"the kit's {export.file} has no {export.symbol} (an instructor error)")
    function.argtypes = ((c_void_p,) if export.module else ()) + export.argtypes
    function.restype = export.restype
    return functools.partial(function, loaded.module) if export.module else function


# --------------------------------------------------------------------------- the wrappers


class FileState(NamedTuple):
    """A student file as last seen, with the tasks a wrapper needs from it: a cache key that changes on edits."""

    path: str
    mtime_ns: int
    size: int
    tasks: tuple[str, ...]


def file_state(source: Path, tasks: tuple[str, ...]) -> FileState:
    stat = source.stat()
    return FileState(str(source), stat.st_mtime_ns, stat.st_size, tasks)


_implemented: set[FileState] = set()  # files whose tasks have no KIT_TODO left
_functions: dict[tuple, object] = {}  # (file state, symbol, arch override) -> ctypes function


class KernelsBase:
    """The kernels of one implementation directory (None: whatever ``IMPL`` names, looked up per call).

    ``kit``: an instructor's experiment, a folder whose files are whole variants of the kit's own (host code
    included), each built as its own kit: never a student's folder (its host code would run)."""

    def __init__(self, impl: str | os.PathLike | None = None, kit: str | os.PathLike | None = None):
        self.impl = None if impl is None else str(impl)
        self.kit = None if kit is None else Path(kit)

    def source(self, filename: str) -> Path:
        path = student_dir(self.impl) / filename
        if not path.is_file():
            raise FileNotFoundError(
                f"{filename} not found in {path.parent} (IMPL={self.impl or os.environ.get('IMPL')})"
            )
        return path

    def require(self, export: Export, tasks: tuple[str, ...], kernel: str) -> FileState:
        """The file's state after refusing a TODO; the source is re-read only when the file changed."""
        source = self.source(export.file)
        state = file_state(source, tasks)
        if state not in _implemented:
            require_implemented(source, tasks, kernel)
            _implemented.add(state)
        return state

    def function(self, export: Export, state: FileState):
        key = (state, export.symbol, os.environ.get("KIT_CUDA_ARCH"), self.kit)
        if key not in _functions:
            kit = self.kit / export.file if self.kit is not None else None
            _functions[key] = bind(load_kernels(Path(state.path), kit=kit), export)
        return _functions[key]


def attention_shapes(kernel: str, q, k, v, dtypes: tuple | None = None) -> tuple[int, int, int, int, int, int]:
    """(B, H, H_kv, Lq, Lk, d) of q (B, H, Lq, d) and k, v (B, H_kv, Lk, d), H_kv dividing H; q, k and v of one
    dtype, one of ``dtypes``."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(kernel, name, t, (4,), dtypes)
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"{kernel}: q, k and v must have one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    B, H, Lq, d = q.shape
    H_kv, Lk = k.shape[1], k.shape[2]
    check_shape(kernel, "k", k, (B, H_kv, Lk, d), "(B, H_kv, Lk, d) with q's B and d")
    check_shape(kernel, "v", v, tuple(k.shape), "same as k")
    if (H_kv == 0 and H != 0) or (H_kv != 0 and H % H_kv != 0):
        raise ValueError(
            f"{kernel}: q has H = {H} heads but k and v have H_kv = {H_kv}: grouped-query attention "
            f"needs H_kv to divide H (query head h reads KV head h // (H // H_kv))"
        )
    return B, H, H_kv, Lq, Lk, d


# --------------------------------------------------------------------------- the implementation under test

_under_test: KernelsBase | None = None  # run_under_test's kernels: the grader's t6 worker's prebuilt ones


def run_under_test(kernels: KernelsBase) -> None:
    """Every call of ``under_test`` in this process runs ``kernels`` from now on: the grader's t6 worker sets the
    kit's wrappers over the builds it was given, as it has no compiler or source."""
    global _under_test
    _under_test = kernels


def under_test(wrappers: type[KernelsBase]) -> KernelsBase:
    """The kernels a call that names no implementation runs (``kernels.softmax(x)`` of ``assignment/kernels.py``, the
    model's attention through a task's kernel): ``IMPL``'s, through ``wrappers`` (a class over ``KernelsBase`` with the
    methods the caller needs), unless ``run_under_test`` set others."""
    return _under_test if _under_test is not None else _impl_kernels(wrappers)


@functools.cache
def _impl_kernels(wrappers: type[KernelsBase]) -> KernelsBase:
    return wrappers()  # impl None: IMPL is looked up at each call, so one object serves any IMPL
