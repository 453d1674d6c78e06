"""Python wrappers around the students' CUDA kernels (t2, t3, t4/t5, t6).

Tests, benchmarks and the grader call the kernels only through this module.
Every wrapper, in this order:
  1. refuses a file whose task still has ``KIT_TODO`` (NotImplementedError, no GPU touched),
  2. checks dtype, shapes, contiguity, then device (TypeError / ValueError naming the argument),
  3. builds (cached) the student's file as a device module and the kit's host library, loads the module into
     the library (``compiler``: the host code that launches is always the kit's), launches on the current
     PyTorch stream,
  4. turns a non-zero cudaError_t into ``RuntimeError("<kernel> failed: <reason>")``.
Steps 1 and 2 need no GPU, so a starter or a wrong call fails cleanly on any machine.

The module-level functions test the implementation chosen by ``IMPL``;
``Kernels("solutions")`` binds another one (the benchmark loads both).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import math
import os
import threading
from ctypes import c_float, c_int, c_int64, c_void_p
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import torch

from assignment.cuda import compiler
from assignment.cuda.compiler import require_implemented
from assignment.impl import student_dir

SOFTMAX_FILE = "t2_softmax.cu"
GEMM_FILE = "t3_gemm.cu"
ATTENTION_FILE = "t4_flash_attention.cu"
DECODE_FILE = "t6_decode_attention.cu"
ATTENTION_HEAD_DIMS = (32, 64, 128)
DECODE_LENGTH_DTYPES = (torch.int32, torch.int64)
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class _Export:
    """A KIT_API function of a task file's host library. ``module``: it launches kernels, so it takes the
    device module first (the wrapper passes it)."""
    file: str
    symbol: str
    argtypes: tuple
    restype: type = c_int
    module: bool = True


SOFTMAX = _Export(SOFTMAX_FILE, "t2_softmax_forward", (c_void_p, c_void_p, c_int64, c_int64, c_void_p))
GEMM = _Export(GEMM_FILE, "t3_gemm_batched", (c_void_p, c_void_p, c_void_p, c_int, c_int, c_int, c_int, c_int,
                                              c_int, c_int64, c_int64, c_int64, c_float, c_void_p))
FLASH = _Export(ATTENTION_FILE, "t4_flash_attention_forward", (c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                                                c_int, c_int, c_int, c_int, c_int, c_int, c_float,
                                                                c_int, c_void_p))
DECODE = _Export(DECODE_FILE, "t6_decode_attention", (c_void_p, c_void_p, c_void_p, c_void_p, c_int, c_int, c_void_p,
                                                      c_void_p, c_void_p, c_int, c_int, c_int, c_int, c_int, c_int,
                                                      c_float, c_void_p))
DECODE_SPLITS = _Export(DECODE_FILE, "t6_decode_num_splits", (c_int, c_int, c_int, c_int, c_int))
DECODE_WORKSPACE = _Export(DECODE_FILE, "t6_decode_workspace_floats", (c_int, c_int, c_int, c_int), c_int64,
                           module=False)
DECODE_MAX_SPLITS = _Export(DECODE_FILE, "t6_decode_max_splits", (), module=False)

# A few cudaError_t names, used only when libcudart cannot be found to ask it.
_KNOWN_ERRORS = {1: "invalid argument", 2: "out of memory", 9: "invalid configuration argument",
                 98: "invalid device function", 209: "no kernel image is available for execution on the device",
                 700: "an illegal memory access was encountered", 710: "device-side assert triggered",
                 719: "unspecified launch failure"}


# --------------------------------------------------------------------------- errors


@lru_cache(maxsize=1)
def _cudart() -> ctypes.CDLL | None:
    """libcudart: the one torch already loaded, torch's bundled copy, or the system's."""
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


def _check_tensor(kernel: str, name: str, value, ndim: tuple[int, ...] | None = None) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{kernel}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype != torch.float32:
        raise TypeError(f"{kernel}: {name} must be torch.float32 (the kernels are fp32), got {value.dtype}")
    if ndim is not None and value.dim() not in ndim:
        wanted = " or ".join(f"{n}-D" for n in ndim)
        raise ValueError(f"{kernel}: {name} must be {wanted}, got shape {tuple(value.shape)}")
    return value


def _check_shape(kernel: str, name: str, value: torch.Tensor, expected: tuple[int, ...], meaning: str) -> None:
    if tuple(value.shape) != tuple(expected):
        raise ValueError(f"{kernel}: {name} must have shape {tuple(expected)} ({meaning}), got {tuple(value.shape)}")


def _check_layout_and_device(kernel: str, **tensors: torch.Tensor) -> torch.device:
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


def _check_int32(kernel: str, **sizes: int) -> None:
    for name, size in sizes.items():
        if size > INT32_MAX:
            raise ValueError(f"{kernel}: {name} = {size} does not fit the kernel's 32-bit int argument")


def _launch(function, device: torch.device, kernel: str, *args) -> None:
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


def bind(loaded: LoadedKernels, export: _Export):
    """The export of ``loaded``'s host library as a callable; the module is passed first where it launches."""
    function = getattr(loaded.host, export.symbol, None)
    if function is None:
        raise RuntimeError(f"the kit's {export.file} has no {export.symbol} (an instructor error)")
    function.argtypes = ((c_void_p,) if export.module else ()) + export.argtypes
    function.restype = export.restype
    return functools.partial(function, loaded.module) if export.module else function


# --------------------------------------------------------------------------- the wrappers

class _FileState(NamedTuple):
    """A student file as last seen, with the tasks a wrapper needs from it: a cache key that changes on edits."""
    path: str
    mtime_ns: int
    size: int
    tasks: tuple[str, ...]


def _file_state(source: Path, tasks: tuple[str, ...]) -> _FileState:
    stat = source.stat()
    return _FileState(str(source), stat.st_mtime_ns, stat.st_size, tasks)


_implemented: set[_FileState] = set()  # files whose tasks have no KIT_TODO left
_functions: dict[tuple, object] = {}  # (file state, symbol, arch override) -> ctypes function


class Kernels:
    """The kernels of one implementation directory (None: whatever ``IMPL`` names, looked up per call).

    ``kit``: an instructor's experiment, a folder whose files are whole variants of the kit's own (host code
    included), each built as its own kit: never a student's folder (its host code would run)."""

    def __init__(self, impl: str | os.PathLike | None = None, kit: str | os.PathLike | None = None):
        self.impl = None if impl is None else str(impl)
        self.kit = None if kit is None else Path(kit)

    def source(self, filename: str) -> Path:
        path = student_dir(self.impl) / filename
        if not path.is_file():
            raise FileNotFoundError(f"{filename} not found in {path.parent} (IMPL={self.impl or os.environ.get('IMPL')})")
        return path

    def _require(self, export: _Export, tasks: tuple[str, ...], kernel: str) -> _FileState:
        """The file's state after refusing a TODO; the source is re-read only when the file changed."""
        source = self.source(export.file)
        state = _file_state(source, tasks)
        if state not in _implemented:
            require_implemented(source, tasks, kernel)
            _implemented.add(state)
        return state

    def _function(self, export: _Export, state: _FileState):
        key = (state, export.symbol, os.environ.get("KIT_CUDA_ARCH"), self.kit)
        if key not in _functions:
            kit = self.kit / export.file if self.kit is not None else None
            _functions[key] = bind(load_kernels(Path(state.path), kit=kit), export)
        return _functions[key]

    # ----------------------------------------------------------------- t2
    def softmax(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Row softmax over the last dimension of ``x`` (any number of leading dims)."""
        kernel, tasks = "t2_softmax_forward", ("t2",)
        state = self._require(SOFTMAX, tasks, kernel)
        _check_tensor(kernel, "x", x)
        if x.dim() == 0:
            raise ValueError(f"{kernel}: x must have at least 1 dimension (rows of the softmax), got a scalar")
        y = torch.empty_like(x) if out is None else _check_tensor(kernel, "out", out)
        _check_shape(kernel, "out", y, tuple(x.shape), "same as x")
        device = _check_layout_and_device(kernel, x=x, out=y)
        cols = x.shape[-1]
        if x.numel() == 0:
            return y
        rows = x.numel() // cols
        _launch(self._function(SOFTMAX, state), device, kernel, x.data_ptr(), y.data_ptr(), rows, cols)
        return y

    # ----------------------------------------------------------------- t3
    def gemm(self, a: torch.Tensor, b: torch.Tensor, trans_a: bool = False, trans_b: bool = False,
             alpha: float = 1.0, out: torch.Tensor | None = None) -> torch.Tensor:
        """``alpha · op(a) @ op(b)``; a is (M, K) or, with trans_a, stored (K, M); b is (K, N) or (N, K).

        2-D, or 3-D batched; a batch of 1 broadcasts (batch stride 0).
        """
        kernel, tasks = "t3_gemm_batched", ("t3",)
        state = self._require(GEMM, tasks, kernel)
        _check_tensor(kernel, "a", a, (2, 3))
        _check_tensor(kernel, "b", b, (2, 3))
        if a.dim() != b.dim():
            raise ValueError(f"{kernel}: a and b must both be 2-D or both 3-D, got {tuple(a.shape)} and {tuple(b.shape)}")
        batched = a.dim() == 3
        a3, b3 = (a, b) if batched else (a.unsqueeze(0), b.unsqueeze(0))
        M, K = (a3.shape[2], a3.shape[1]) if trans_a else (a3.shape[1], a3.shape[2])
        Kb, N = (b3.shape[2], b3.shape[1]) if trans_b else (b3.shape[1], b3.shape[2])
        if K != Kb:
            raise ValueError(f"{kernel}: inner dimensions differ: op(a) is {M}x{K} (trans_a={bool(trans_a)}, a {tuple(a.shape)})"
                             f" but op(b) is {Kb}x{N} (trans_b={bool(trans_b)}, b {tuple(b.shape)})")
        batch = max(a3.shape[0], b3.shape[0])
        for t in (a3, b3):
            if t.shape[0] not in (1, batch):
                raise ValueError(f"{kernel}: batch sizes differ: a has {a3.shape[0]}, b has {b3.shape[0]} (1 broadcasts)")
        shape = (batch, M, N) if batched else (M, N)
        c = torch.empty(shape, dtype=torch.float32, device=a.device) if out is None else _check_tensor(kernel, "out", out)
        _check_shape(kernel, "out", c, shape, "alpha·op(a)·op(b)")
        device = _check_layout_and_device(kernel, a=a, b=b, out=c)
        _check_int32(kernel, batch=batch, M=M, N=N, K=K)
        if c.numel() == 0:
            return c
        if K == 0:
            return c.zero_()
        stride_a = 0 if a3.shape[0] == 1 else M * K
        stride_b = 0 if b3.shape[0] == 1 else K * N
        _launch(self._function(GEMM, state), device, kernel, a.data_ptr(), b.data_ptr(), c.data_ptr(),
                batch, M, N, K, int(bool(trans_a)), int(bool(trans_b)), stride_a, stride_b, M * N, float(alpha))
        return c

    # ----------------------------------------------------------------- t4 / t5
    def flash_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                        scale: float | None = None, out: torch.Tensor | None = None,
                        lse: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """FlashAttention forward: q (B,H,Lq,d), k and v (B,H_kv,Lk,d) -> (o (B,H,Lq,d), lse (B,H,Lq)).

        Grouped-query attention: H_kv divides H and query head h reads KV head h // (H // H_kv), straight
        from k and v (H_kv == H: multi-head attention; H_kv == 1: multi-query attention).
        causal: query i sees keys j <= i + Lk - Lq (bottom-right alignment, t5).
        """
        kernel = "t4_flash_attention_forward"
        tasks = ("t4", "t5") if causal else ("t4",)
        state = self._require(FLASH, tasks, kernel)
        B, H, H_kv, Lq, Lk, d = _attention_shapes(kernel, q, k, v)
        if d not in ATTENTION_HEAD_DIMS:
            raise ValueError(f"{kernel}: head dimension d must be one of {ATTENTION_HEAD_DIMS}, got {d}")
        o = torch.empty_like(q) if out is None else _check_tensor(kernel, "out", out)
        _check_shape(kernel, "out", o, (B, H, Lq, d), "like q")
        lse = torch.empty((B, H, Lq), dtype=torch.float32, device=q.device) if lse is None else _check_tensor(kernel, "lse", lse)
        _check_shape(kernel, "lse", lse, (B, H, Lq), "(B, H, Lq)")
        device = _check_layout_and_device(kernel, q=q, k=k, v=v, out=o, lse=lse)
        _check_int32(kernel, B=B, H=H, Lq=Lq, Lk=Lk, **{"B*H": B * H})
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        if o.numel() == 0 or Lk == 0:  # no query rows, or rows that see no key: zeros and LSE -inf
            return o.zero_(), lse.fill_(float("-inf"))
        _launch(self._function(FLASH, state), device, kernel, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                o.data_ptr(), lse.data_ptr(), B, H, H_kv, Lq, Lk, d, scale, int(bool(causal)))
        return o, lse

    def naive_cuda_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                             scale: float | None = None) -> torch.Tensor:
        """The unfused baseline from this implementation's t2 and t3: S = scale·QKᵀ, P = softmax(S), O = PV.

        Shapes as in ``flash_attention``; with H_kv < H the K/V heads are first repeated to H heads
        (a copy, as an unfused implementation makes one).
        """
        kernel = "naive_cuda_attention"
        self._require(SOFTMAX, ("t2",), kernel)
        self._require(GEMM, ("t3",), kernel)
        B, H, H_kv, Lq, Lk, d = _attention_shapes(kernel, q, k, v)
        _check_layout_and_device(kernel, q=q, k=k, v=v)
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        if q.numel() == 0 or Lk == 0:
            return torch.zeros_like(q)
        if H_kv != H:
            k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
        scores = self.gemm(q.view(B * H, Lq, d), k.view(B * H, Lk, d), trans_b=True, alpha=scale)
        if causal:
            hidden = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).triu_(Lk - Lq + 1)
            scores.masked_fill_(hidden, float("-inf"))
        probs = self.softmax(scores)  # not in place: kernels may declare x and y __restrict__
        return self.gemm(probs, v.view(B * H, Lk, d)).view(B, H, Lq, d)

    # ----------------------------------------------------------------- t6
    def decode_workspace(self, q: torch.Tensor, k_cache: torch.Tensor, num_splits: int | None = None) -> DecodeWorkspace:
        """Scratch memory for ``decode_attention`` calls shaped like (q, k_cache): each split's partial O row
        and LSE for every (batch, query head). ``num_splits``: the kit's choice for this GPU and cache (None),
        or a count of your own (tests, tuning).

        Allocate it once and pass it to every call of that shape (before capturing a CUDA graph, so the graph
        never allocates); it needs no initialisation. One call at a time may use a workspace: calls on
        different streams need one each.
        """
        kernel = "t6_decode_attention"
        state = self._require(DECODE, ("t6",), kernel)
        B, H, H_kv, L_max, d = _decode_shapes(kernel, q, k_cache, k_cache)
        device = _check_layout_and_device(kernel, q=q, k_cache=k_cache)
        if num_splits is None:
            num_splits = self._num_splits(state, device, B, H, H_kv, L_max, d)
        else:
            most = self._function(DECODE_MAX_SPLITS, state)()
            if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 1 <= num_splits <= most:
                raise ValueError(f"{kernel}: num_splits must be an int from 1 to {most}, got {num_splits!r}")
        floats = self._function(DECODE_WORKSPACE, state)(B, H, d, num_splits)
        buffer = torch.empty(max(int(floats), 0), dtype=torch.float32, device=device)
        return DecodeWorkspace(buffer, num_splits, B, H, d)

    def _num_splits(self, state: _FileState, device: torch.device, B: int, H: int, H_kv: int, L_max: int, d: int) -> int:
        """The kit's split count for this shape on ``device`` (its SM count and occupancy), asked once per shape."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        key = (state, index, B, H, H_kv, L_max, d)
        if key not in _decode_splits:
            with torch.cuda.device(index):
                count = self._function(DECODE_SPLITS, state)(B, H, H_kv, L_max, d)
            if count <= 0:
                raise RuntimeError(f"t6_decode_num_splits failed: {cuda_error_string(-count)}")
            _decode_splits[key] = int(count)
        return _decode_splits[key]

    def decode_attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: torch.Tensor,
                         scale: float | None = None, out: torch.Tensor | None = None, lse: torch.Tensor | None = None,
                         workspace: DecodeWorkspace | None = None,
                         num_splits: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Decode attention: one query token per (batch, head) over the first ``lengths[b]`` cache positions.

        q (B, H, d) or (B, H, 1, d); k_cache and v_cache (B, H_kv, L_max, d), the static cache with capacity
        L_max; H_kv divides H and query head h reads KV head h // (H // H_kv). Returns (out like q, lse of
        q's shape without d), LSE in natural log, as ``flash_attention``.

        lengths: an int32 or int64 CUDA tensor, (B,) (row b sees positions 0 .. lengths[b] - 1) or (1,) (every
        row). The kernel reads it on the GPU and the host never looks at it, so a CUDA graph captured once
        replays correctly after ``lengths`` (and the cache, and q) are updated in place. Positions at or past
        a row's length are never read (they may hold anything). Lengths are clamped to [0, L_max]; a row of
        length 0 gets O = 0 and LSE = -inf.

        workspace: from ``decode_workspace`` (reuse it; allocate it before capturing a graph); None allocates
        one for this call. num_splits: the split count (None: the workspace's, else the kit's choice).
        """
        kernel = "t6_decode_attention"
        state = self._require(DECODE, ("t6",), kernel)
        B, H, H_kv, L_max, d = _decode_shapes(kernel, q, k_cache, v_cache)
        if not isinstance(lengths, torch.Tensor):
            raise TypeError(f"{kernel}: lengths must be a torch.Tensor, got {type(lengths).__name__}")
        if lengths.dtype not in DECODE_LENGTH_DTYPES:
            raise TypeError(f"{kernel}: lengths must be torch.int32 or torch.int64 (positions in the cache), "
                            f"got {lengths.dtype}")
        if lengths.dim() != 1 or lengths.shape[0] not in (B, 1):
            raise ValueError(f"{kernel}: lengths must have shape ({B},) (one length per batch row) or (1,) (one for "
                             f"all rows), got {tuple(lengths.shape)}")
        o = torch.empty_like(q) if out is None else _check_tensor(kernel, "out", out)
        _check_shape(kernel, "out", o, tuple(q.shape), "like q")
        lse_shape = tuple(q.shape[:-1])
        lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device) if lse is None else _check_tensor(kernel, "lse", lse)
        _check_shape(kernel, "lse", lse, lse_shape, "q's shape without d")
        device = _check_layout_and_device(kernel, q=q, k_cache=k_cache, v_cache=v_cache, lengths=lengths, out=o, lse=lse)
        _check_int32(kernel, B=B, H=H, L_max=L_max, **{"B*H": B * H})
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        if o.numel() == 0:
            return o, lse
        if workspace is None:
            workspace = self.decode_workspace(q, k_cache, num_splits)
        elif not isinstance(workspace, DecodeWorkspace):
            raise TypeError(f"{kernel}: workspace must come from decode_workspace(q, k_cache), got {type(workspace).__name__}")
        workspace.check(kernel, B, H, d, device, num_splits)
        _check_aligned(kernel, q=q, k_cache=k_cache, v_cache=v_cache, out=o, workspace=workspace.buffer)
        _launch(self._function(DECODE, state), device, kernel, q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                lengths.data_ptr(), int(lengths.dtype == torch.int64), int(lengths.shape[0] != 1),
                o.data_ptr(), lse.data_ptr(), workspace.buffer.data_ptr(), B, H, H_kv, L_max, d,
                workspace.num_splits, scale)
        return o, lse


_decode_splits: dict[tuple, int] = {}  # (file state, GPU, shape) -> the kit's split count


@dataclass(frozen=True)
class DecodeWorkspace:
    """Scratch of ``decode_attention``: ``num_splits`` partial (O row, LSE) per (batch, query head), in one buffer."""
    buffer: torch.Tensor
    num_splits: int
    batch: int
    heads: int
    head_dim: int

    def check(self, kernel: str, B: int, H: int, d: int, device: torch.device, num_splits: int | None) -> None:
        if (self.batch, self.heads, self.head_dim) != (B, H, d):
            raise ValueError(f"{kernel}: the workspace was made for B={self.batch}, H={self.heads}, d={self.head_dim}, "
                             f"this call has B={B}, H={H}, d={d} (make one per shape with decode_workspace)")
        if num_splits is not None and num_splits != self.num_splits:
            raise ValueError(f"{kernel}: num_splits={num_splits} but the workspace holds {self.num_splits} splits")
        if self.buffer.device != device:
            raise ValueError(f"{kernel}: the workspace is on {self.buffer.device}, the tensors on {device}")
        if self.buffer.dtype != torch.float32 or not self.buffer.is_contiguous() \
                or self.buffer.numel() < B * H * self.num_splits * (d + 1):
            raise ValueError(f"{kernel}: the workspace buffer was changed: it must stay the contiguous float32 tensor "
                             "decode_workspace made")


def _check_aligned(kernel: str, **tensors: torch.Tensor) -> None:
    """The decode kernel moves float4s: every pointer must be 16-byte aligned (fresh tensors always are)."""
    for name, value in tensors.items():
        if value.data_ptr() % 16:
            raise ValueError(f"{kernel}: {name} must start on a 16-byte boundary (float4 loads), but it is a view at "
                             f"offset {value.storage_offset()} floats: pass .clone() or a whole tensor")


def _decode_shapes(kernel: str, q, k_cache, v_cache) -> tuple[int, int, int, int, int]:
    """(B, H, H_kv, L_max, d) of q (B, H, d) or (B, H, 1, d) and a cache (B, H_kv, L_max, d), H_kv dividing H."""
    _check_tensor(kernel, "q", q, (3, 4))
    if q.dim() == 4 and q.shape[2] != 1:
        raise ValueError(f"{kernel}: a 4-D q must be (B, H, 1, d): one new token per sequence, got {tuple(q.shape)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        _check_tensor(kernel, name, t, (4,))
    B, H, d = q.shape[0], q.shape[1], q.shape[-1]
    H_kv, L_max = k_cache.shape[1], k_cache.shape[2]
    _check_shape(kernel, "k_cache", k_cache, (B, H_kv, L_max, d), "(B, H_kv, L_max, d) with q's B and d")
    _check_shape(kernel, "v_cache", v_cache, tuple(k_cache.shape), "same as k_cache")
    if d not in ATTENTION_HEAD_DIMS:
        raise ValueError(f"{kernel}: head dimension d must be one of {ATTENTION_HEAD_DIMS}, got {d}")
    if H_kv == 0 or H % H_kv != 0:
        raise ValueError(f"{kernel}: q has H = {H} heads but the cache has H_kv = {H_kv}: grouped-query attention "
                         f"needs H_kv to divide H (query head h reads KV head h // (H // H_kv))")
    return B, H, H_kv, L_max, d


def _attention_shapes(kernel: str, q, k, v) -> tuple[int, int, int, int, int, int]:
    """(B, H, H_kv, Lq, Lk, d) of q (B, H, Lq, d) and k, v (B, H_kv, Lk, d), H_kv dividing H."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(kernel, name, t, (4,))
    B, H, Lq, d = q.shape
    H_kv, Lk = k.shape[1], k.shape[2]
    _check_shape(kernel, "k", k, (B, H_kv, Lk, d), "(B, H_kv, Lk, d) with q's B and d")
    _check_shape(kernel, "v", v, tuple(k.shape), "same as k")
    if (H_kv == 0 and H != 0) or (H_kv != 0 and H % H_kv != 0):
        raise ValueError(f"{kernel}: q has H = {H} heads but k and v have H_kv = {H_kv}: grouped-query attention "
                         f"needs H_kv to divide H (query head h reads KV head h // (H // H_kv))")
    return B, H, H_kv, Lq, Lk, d


# --------------------------------------------------------------------------- the implementation under test (IMPL)

_under_test = Kernels()


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return _under_test.softmax(x, out=out)


def gemm(a, b, trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0, out=None) -> torch.Tensor:
    return _under_test.gemm(a, b, trans_a=trans_a, trans_b=trans_b, alpha=alpha, out=out)


def flash_attention(q, k, v, causal: bool = False, scale: float | None = None, out=None, lse=None):
    return _under_test.flash_attention(q, k, v, causal=causal, scale=scale, out=out, lse=lse)


def naive_cuda_attention(q, k, v, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    return _under_test.naive_cuda_attention(q, k, v, causal=causal, scale=scale)


def decode_workspace(q, k_cache, num_splits: int | None = None) -> DecodeWorkspace:
    return _under_test.decode_workspace(q, k_cache, num_splits=num_splits)


def decode_attention(q, k_cache, v_cache, lengths, scale: float | None = None, out=None, lse=None, workspace=None,
                     num_splits: int | None = None):
    return _under_test.decode_attention(q, k_cache, v_cache, lengths, scale=scale, out=out, lse=lse,
                                        workspace=workspace, num_splits=num_splits)
