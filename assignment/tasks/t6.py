"""t6, decode attention with a KV cache: one query token per head over the cache (split-KV, then a combine),
memory-bound, in KV bytes read per second against the device copy; then the model's decode step (TBT)."""

from __future__ import annotations

import math
from ctypes import c_float, c_int, c_int64, c_void_p
from dataclasses import dataclass
from typing import TYPE_CHECKING

from assignment.cuda import wrappers as kern
from assignment.impl import student_dir
from assignment.model.attention_choice import ModelAttention
from assignment.tasks import BenchVariant, Leaderboard, Profile, Sanitize, TaskCode
from assignment.tasks.t4 import AttentionKernels, causal_model_attention
from assignment.tasks.t6_timing import load_kv_cache_class, timing_workload

if TYPE_CHECKING:  # torch is imported inside the functions: the module loads without it
    import torch

CUDA_FILE = "t6_decode_attention.cu"
DECODE = kern.Export(
    CUDA_FILE,
    "t6_decode_attention",
    (
        c_void_p,
        c_void_p,
        c_void_p,
        c_void_p,
        c_int,
        c_int,
        c_void_p,
        c_void_p,
        c_void_p,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        c_float,
        c_void_p,
    ),
)
DECODE_SPLITS = kern.Export(CUDA_FILE, "t6_decode_num_splits", (c_int, c_int, c_int, c_int, c_int))
DECODE_WORKSPACE = kern.Export(
    CUDA_FILE, "t6_decode_workspace_floats", (c_int, c_int, c_int, c_int), c_int64, module=False
)
DECODE_MAX_SPLITS = kern.Export(CUDA_FILE, "t6_decode_max_splits", (), module=False)
DECODE_LENGTH_DTYPES = ("torch.int32", "torch.int64")  # the dtypes of lengths, as str(dtype) writes them


class Kernels:
    """t6's wrappers: methods of ``assignment.kernels.Kernels``."""

    def decode_workspace(
        self, q: torch.Tensor, k_cache: torch.Tensor, num_splits: int | None = None
    ) -> DecodeWorkspace:
        """Scratch memory for ``decode_attention`` calls shaped like (q, k_cache): each split's partial O row
        and LSE for every (batch, query head). ``num_splits``: the kit's choice for this GPU and cache (None),
        or a count of your own (tests, tuning).

        Allocate it once and pass it to every call of that shape (before capturing a CUDA graph, so the graph
        never allocates); it needs no initialisation. One call at a time may use a workspace: calls on
        different streams need one each.
        """
        import torch

        kernel = "t6_decode_attention"
        state = self.require(DECODE, ("t6",), kernel)
        B, H, H_kv, L_max, d = _decode_shapes(kernel, q, k_cache, k_cache)
        device = kern.check_layout_and_device(kernel, q=q, k_cache=k_cache)
        if num_splits is None:
            num_splits = self._num_splits(state, device, B, H, H_kv, L_max, d)
        else:
            most = self.function(DECODE_MAX_SPLITS, state)()
            if isinstance(num_splits, bool) or not isinstance(num_splits, int) or not 1 <= num_splits <= most:
                raise ValueError(f"{kernel}: num_splits must be an int from 1 to {most}, got {num_splits!r}")
        floats = self.function(DECODE_WORKSPACE, state)(B, H, d, num_splits)
        buffer = torch.empty(max(int(floats), 0), dtype=torch.float32, device=device)
        return DecodeWorkspace(buffer, num_splits, B, H, d)

    def _num_splits(
        self, state: kern.FileState, device: torch.device, B: int, H: int, H_kv: int, L_max: int, d: int
    ) -> int:
        """The kit's split count for this shape on ``device`` (its SM count and occupancy), asked once per shape."""
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        key = (state, index, B, H, H_kv, L_max, d)
        if key not in _decode_splits:
            with torch.cuda.device(index):
                count = self.function(DECODE_SPLITS, state)(B, H, H_kv, L_max, d)
            if count <= 0:
                raise RuntimeError(f"t6_decode_num_splits failed: {kern.cuda_error_string(-count)}")
            _decode_splits[key] = int(count)
        return _decode_splits[key]

    def decode_attention(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        lengths: torch.Tensor,
        scale: float | None = None,
        out: torch.Tensor | None = None,
        lse: torch.Tensor | None = None,
        workspace: DecodeWorkspace | None = None,
        num_splits: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
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
        import torch

        kernel = "t6_decode_attention"
        state = self.require(DECODE, ("t6",), kernel)
        B, H, H_kv, L_max, d = _decode_shapes(kernel, q, k_cache, v_cache)
        if not isinstance(lengths, torch.Tensor):
            raise TypeError(f"{kernel}: lengths must be a torch.Tensor, got {type(lengths).__name__}")
        if str(lengths.dtype) not in DECODE_LENGTH_DTYPES:
            raise TypeError(
                f"{kernel}: lengths must be torch.int32 or torch.int64 (positions in the cache), got {lengths.dtype}"
            )
        if lengths.dim() != 1 or lengths.shape[0] not in (B, 1):
            raise ValueError(
                f"{kernel}: lengths must have shape ({B},) (one length per batch row) or (1,) (one for "
                f"all rows), got {tuple(lengths.shape)}"
            )
        o = torch.empty_like(q) if out is None else kern.check_tensor(kernel, "out", out)
        kern.check_shape(kernel, "out", o, tuple(q.shape), "like q")
        lse_shape = tuple(q.shape[:-1])
        lse = (
            torch.empty(lse_shape, dtype=torch.float32, device=q.device)
            if lse is None
            else kern.check_tensor(kernel, "lse", lse)
        )
        kern.check_shape(kernel, "lse", lse, lse_shape, "q's shape without d")
        device = kern.check_layout_and_device(
            kernel, q=q, k_cache=k_cache, v_cache=v_cache, lengths=lengths, out=o, lse=lse
        )
        kern.check_int32(kernel, B=B, H=H, L_max=L_max, **{"B*H": B * H})
        scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
        if o.numel() == 0:
            return o, lse
        if workspace is None:
            workspace = self.decode_workspace(q, k_cache, num_splits)
        elif not isinstance(workspace, DecodeWorkspace):
            raise TypeError(
                f"{kernel}: workspace must come from decode_workspace(q, k_cache), got {type(workspace).__name__}"
            )
        workspace.check(kernel, B, H, d, device, num_splits)
        _check_aligned(kernel, q=q, k_cache=k_cache, v_cache=v_cache, out=o, workspace=workspace.buffer)
        kern.launch(
            self.function(DECODE, state),
            device,
            kernel,
            q.data_ptr(),
            k_cache.data_ptr(),
            v_cache.data_ptr(),
            lengths.data_ptr(),
            int(lengths.dtype == torch.int64),
            int(lengths.shape[0] != 1),
            o.data_ptr(),
            lse.data_ptr(),
            workspace.buffer.data_ptr(),
            B,
            H,
            H_kv,
            L_max,
            d,
            workspace.num_splits,
            scale,
        )
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
        import torch

        if (self.batch, self.heads, self.head_dim) != (B, H, d):
            raise ValueError(
                f"{kernel}: the workspace was made for B={self.batch}, H={self.heads}, d={self.head_dim}, "
                f"this call has B={B}, H={H}, d={d} (make one per shape with decode_workspace)"
            )
        if num_splits is not None and num_splits != self.num_splits:
            raise ValueError(f"{kernel}: num_splits={num_splits} but the workspace holds {self.num_splits} splits")
        if self.buffer.device != device:
            raise ValueError(f"{kernel}: the workspace is on {self.buffer.device}, the tensors on {device}")
        if (
            self.buffer.dtype != torch.float32
            or not self.buffer.is_contiguous()
            or self.buffer.numel() < B * H * self.num_splits * (d + 1)
        ):
            raise ValueError(
                f"{kernel}: the workspace buffer was changed: it must stay the contiguous float32 tensor "
                "decode_workspace made"
            )


def _check_aligned(kernel: str, **tensors: torch.Tensor) -> None:
    """The decode kernel moves float4s: every pointer must be 16-byte aligned (fresh tensors always are)."""
    for name, value in tensors.items():
        if value.data_ptr() % 16:
            raise ValueError(
                f"{kernel}: {name} must start on a 16-byte boundary (float4 loads), but it is a view at "
                f"offset {value.storage_offset()} floats: pass .clone() or a whole tensor"
            )


def _decode_shapes(kernel: str, q, k_cache, v_cache) -> tuple[int, int, int, int, int]:
    """(B, H, H_kv, L_max, d) of q (B, H, d) or (B, H, 1, d) and a cache (B, H_kv, L_max, d), H_kv dividing H."""
    kern.check_tensor(kernel, "q", q, (3, 4))
    if q.dim() == 4 and q.shape[2] != 1:
        raise ValueError(f"{kernel}: a 4-D q must be (B, H, 1, d): one new token per sequence, got {tuple(q.shape)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        kern.check_tensor(kernel, name, t, (4,))
    B, H, d = q.shape[0], q.shape[1], q.shape[-1]
    H_kv, L_max = k_cache.shape[1], k_cache.shape[2]
    kern.check_shape(kernel, "k_cache", k_cache, (B, H_kv, L_max, d), "(B, H_kv, L_max, d) with q's B and d")
    kern.check_shape(kernel, "v_cache", v_cache, tuple(k_cache.shape), "same as k_cache")
    if d not in kern.ATTENTION_HEAD_DIMS:
        raise ValueError(f"{kernel}: head dimension d must be one of {kern.ATTENTION_HEAD_DIMS}, got {d}")
    if H_kv == 0 or H % H_kv != 0:
        raise ValueError(
            f"{kernel}: q has H = {H} heads but the cache has H_kv = {H_kv}: grouped-query attention "
            f"needs H_kv to divide H (query head h reads KV head h // (H // H_kv))"
        )
    return B, H, H_kv, L_max, d


class CacheKernels(Kernels, AttentionKernels):
    """What a t6_kv_cache.py calls, over one implementation's files: t4's ``flash_attention`` (its prefill) and this
    task's ``decode_workspace`` and ``decode_attention`` (every task's ``Kernels``, assignment/kernels.py, sits above
    the task modules)."""


def kv_cache_class(impl: str | None = None) -> type:
    """The ``KVCache`` class of t6_kv_cache.py in implementation ``impl`` (None: ``IMPL``), running that same
    implementation's kernels."""
    return load_kv_cache_class(impl, CacheKernels(student_dir(impl)))


def bench_cases(student, reference, quick: bool, shapes=None) -> list:
    import torch.nn.functional as F

    from assignment.perf.cases import (
        DECODE_SHAPES,
        DECODE_SHAPES_QUICK,
        Case,
        decode_inputs,
        decode_work,
        decoding_with,
        grouped_pytorch_decode,
        naive_pytorch_decode,
        repeat_kv,
    )

    cases = []
    for B, H, H_kv, L, d in shapes or (DECODE_SHAPES_QUICK if quick else DECODE_SHAPES):
        candidates = {
            "naive pytorch": lambda x: naive_pytorch_decode(*x[:3]),
            "pytorch grouped": lambda x: grouped_pytorch_decode(*x[:3]),
            "SDPA": lambda x: F.scaled_dot_product_attention(x[0][:, :, None], *repeat_kv(x[:3])[1:])[:, :, 0],
            "student": decoding_with(student),
        }
        if reference is not None:
            candidates["reference"] = decoding_with(reference)
        flops, bytes_moved = decode_work(B, H, H_kv, L, d)
        cases.append(
            Case(
                f"decode B{B} H{H} H_kv{H_kv} L{L} d{d} (KV bytes/s)",
                decode_inputs(B, H, H_kv, L, d),
                candidates,
                flops,
                bytes_moved,
                metric="GB/s",
                percent_of="copy",
                speedup_over=("naive pytorch", "pytorch grouped", "SDPA"),
            )
        )
    return cases


def split_cases(student, reference, quick: bool) -> list:
    """The reference (else the student) at split counts around the kit's choice: is the choice near the best?"""
    from assignment.perf.cases import (
        DECODE_SHAPES,
        DECODE_SHAPES_QUICK,
        Case,
        decode_inputs,
        decode_work,
        naive_pytorch_decode,
    )

    kernels = reference or student
    cases = []
    for B, H, H_kv, L, d in DECODE_SHAPES_QUICK if quick else DECODE_SHAPES:
        make = decode_inputs(B, H, H_kv, L, d)
        sample = make(0)
        chosen = kernels.decode_workspace(sample[0], sample[1]).num_splits
        del sample
        counts = sorted(
            {
                n
                for n in (
                    chosen // 4,
                    chosen // 2,
                    chosen - 1,
                    chosen,
                    chosen + 1,
                    chosen + chosen // 2,
                    2 * chosen,
                    4 * chosen,
                )
                if 1 <= n <= 4096
            }
        )
        candidates = {"naive pytorch": lambda x: naive_pytorch_decode(*x[:3])}
        for n in counts:
            label = f"{n} splits" + (" (kit)" if n == chosen else "")
            candidates[label] = lambda x, n=n: kernels.decode_attention(*x, num_splits=n)[0]
        flops, bytes_moved = decode_work(B, H, H_kv, L, d)
        cases.append(
            Case(
                f"decode split sweep B{B} H{H} H_kv{H_kv} L{L} d{d}",
                make,
                candidates,
                flops,
                bytes_moved,
                metric="GB/s",
                percent_of="copy",
            )
        )
    return cases


def rule_case(rule, student, reference):
    """A kernel rule's case (None for the model rule: its figure comes from the model table)."""
    from assignment.perf.cases import Case, decode_inputs, decode_work, decoding_with, grouped_pytorch_decode

    shape = rule.shape
    if "model" in shape:
        return None
    B, H, H_kv, L, d = shape["B"], shape["H"], shape["H_kv"], shape["L"], shape["d"]
    candidates = {"pytorch grouped": lambda x: grouped_pytorch_decode(*x[:3]), "student": decoding_with(student)}
    if reference is not None:
        candidates["reference"] = decoding_with(reference)
    flops, bytes_moved = decode_work(B, H, H_kv, L, d)
    return Case(
        f"{CODE.id} rule: decode B{B} H{H} H_kv{H_kv} L{L} d{d} (KV bytes/s)",
        decode_inputs(B, H, H_kv, L, d),
        candidates,
        flops,
        bytes_moved,
        metric="GB/s",
        percent_of="copy",
    )


def _ideal_bytes(shape) -> float:
    """q and O: d per (batch, head); LSE: 1; the K/V cache: L·d per (batch, KV head) each."""
    B, H, H_kv, L, d = (shape[k] for k in ("B", "H", "H_kv", "L", "d"))
    return 4.0 * (B * H * (2 * d + 1) + 2 * B * H_kv * L * d)


def _launch(kernels, shape, upload) -> None:
    import torch

    B, H, H_kv, L, d = (shape[k] for k in ("B", "H", "H_kv", "L", "d"))
    q, k, v = upload(B, H, d), upload(B, H_kv, L, d), upload(B, H_kv, L, d)
    lengths = torch.tensor([L], dtype=torch.int32).cuda()  # a full cache; a copy, not a fill kernel
    workspace = kernels.decode_workspace(q, k)  # torch.empty: no kernel either
    kernels.decode_attention(
        q, k, v, lengths, out=torch.empty_like(q), lse=torch.empty(B, H, device="cuda"), workspace=workspace
    )


# (B, H, H_kv, L_max, lengths, d): every kind of group (one KV head for 32 query heads: two chunks of 16; 16 over 8;
# 6 over 2; multi-head), a length per row or one for all, int32 and int64 lengths, rows of length 0 and 1, lengths
# off every tile, and a long cache; the positions past each length hold NaN.
QUICK_CHECK_SHAPES = [
    (2, 32, 1, 300, (0, 257), 128),
    (1, 16, 8, 5000, (4097,), 64),
    (3, 6, 2, 1100, (1, 63, 1000), 32),
    (2, 4, 4, 200, (65,), 128),
    (1, 8, 2, 40000, (32768,), 128),
]


def quick_check(student, reference) -> None:
    """O and LSE of the decode kernel against the reference on shapes that catch edge bugs: what
    grader/tools/open_levels.py checks before timing an open-level kernel (the bound: the registry's timing check)."""
    import torch

    from assignment.registry import load_registry
    from assignment.testing import assert_close

    task = load_registry().task("t6")
    gen = torch.Generator(device="cuda").manual_seed(6)
    for index, (B, H, H_kv, L_max, lengths, d) in enumerate(QUICK_CHECK_SHAPES):
        q = torch.randn(B, H, d, device="cuda", generator=gen)
        k, v = (torch.randn(B, H_kv, L_max, d, device="cuda", generator=gen) for _ in range(2))
        for b in range(B):
            n = lengths[b if len(lengths) > 1 else 0]
            k[b, :, n:], v[b, :, n:] = float("nan"), float("nan")  # never read: positions past the length
        dtype = torch.int64 if index % 2 else torch.int32
        length = torch.tensor(lengths, dtype=dtype, device="cuda")
        out, lse = student.decode_attention(q, k, v, length)
        expected, expected_lse = reference.decode_attention(q, k, v, length)
        what = f" (B {B} H {H} H_kv {H_kv} L_max {L_max} lengths {lengths} d {d})"
        assert_close(out, expected, **task.timed_tolerance(), name="O" + what)
        assert_close(lse, expected_lse, **task.timed_tolerance(), name="LSE" + what)


CODE = TaskCode(
    id="t6",
    cuda_file=CUDA_FILE,
    kernels=Kernels,
    # The model prefills through the causal kernel: its bench runs t4/t5's code, and its grading the kit's.
    bench_needs=("t4", "t5"),
    kit_companions=("t5",),
    bench_metric="GB/s",
    bench_cases=bench_cases,
    bench_variants=(
        BenchVariant(
            "splits", "the decode kernel at split counts around the kit's choice", split_cases, quick_settings=True
        ),
    ),
    # Its model table times four paths of a 1B model at two prompts, then a context sweep: minutes more.
    bench_timeout_s=900.0,
    model_bench=True,
    rule_case=rule_case,
    timing_workload=timing_workload,
    # The graded decode shape, a full 32k cache; two kernels per launch (the split kernel and the combine), and
    # the DRAM throughput against its peak (what a decode kernel is judged on).
    profile=Profile(
        {"B": 1, "H": 32, "H_kv": 8, "L": 32768, "d": 128},
        _ideal_bytes,
        _launch,
        kernels_per_launch=2,
        extra_metrics={"dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput (% of peak)"},
        bandwidth_line=True,
    ),
    sanitize=Sanitize("t6_sanitize"),
    quick_check=quick_check,  # the open level's values check of a split kernel body
    leaderboard=Leaderboard(1, "student_ms", "time between tokens", "ms", False),  # the model rule's decode step
    # ATTN=t6: the student's cache attends once the model has caches; a pass without one runs t5's causal kernel.
    model_attention=ModelAttention(
        causal_model_attention,
        label="your KV cache and decode kernel",
        description="your KV cache (`t6_kv_cache.py`): prefill through the causal kernel (t5), each decode step "
        "through your split-KV decode kernel",
        cuda=True,
        head_dims=kern.ATTENTION_HEAD_DIMS,
        dtypes=("float32",),
        cache_class=kv_cache_class,
    ),
)
