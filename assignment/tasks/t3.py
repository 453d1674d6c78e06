"""t3, GEMM in CUDA: batched matrix multiply (optionally B transposed), in TFLOP/s against cuBLAS."""

from __future__ import annotations

from ctypes import c_float, c_int, c_int64, c_void_p
from typing import TYPE_CHECKING

from assignment.cuda import wrappers as kern
from assignment.tasks import Profile, Sanitize, TaskCode

if TYPE_CHECKING:  # torch is imported inside the functions: the module loads without it
    import torch

CUDA_FILE = "t3_gemm.cu"
GEMM = kern.Export(
    CUDA_FILE,
    "t3_gemm_batched",
    (
        c_void_p,
        c_void_p,
        c_void_p,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int,
        c_int64,
        c_int64,
        c_int64,
        c_float,
        c_void_p,
    ),
)


class Kernels:
    """t3's wrapper: a method of ``assignment.kernels.Kernels``."""

    def gemm(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        trans_a: bool = False,
        trans_b: bool = False,
        alpha: float = 1.0,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``alpha · op(a) @ op(b)``; a is (M, K) or, with trans_a, stored (K, M); b is (K, N) or (N, K).

        2-D, or 3-D batched; a batch of 1 broadcasts (batch stride 0).
        """
        import torch

        kernel, tasks = "t3_gemm_batched", ("t3",)
        state = self.require(GEMM, tasks, kernel)
        kern.check_tensor(kernel, "a", a, (2, 3))
        kern.check_tensor(kernel, "b", b, (2, 3))
        if a.dim() != b.dim():
            raise ValueError(
                f"{kernel}: a and b must both be 2-D or both 3-D, got {tuple(a.shape)} and {tuple(b.shape)}"
            )
        batched = a.dim() == 3
        a3, b3 = (a, b) if batched else (a.unsqueeze(0), b.unsqueeze(0))
        M, K = (a3.shape[2], a3.shape[1]) if trans_a else (a3.shape[1], a3.shape[2])
        Kb, N = (b3.shape[2], b3.shape[1]) if trans_b else (b3.shape[1], b3.shape[2])
        if K != Kb:
            raise ValueError(
                f"{kernel}: inner dimensions differ: op(a) is {M}x{K} (trans_a={bool(trans_a)}, a {tuple(a.shape)})"
                f" but op(b) is {Kb}x{N} (trans_b={bool(trans_b)}, b {tuple(b.shape)})"
            )
        batch = max(a3.shape[0], b3.shape[0])
        for t in (a3, b3):
            if t.shape[0] not in (1, batch):
                raise ValueError(
                    f"{kernel}: batch sizes differ: a has {a3.shape[0]}, b has {b3.shape[0]} (1 broadcasts)"
                )
        shape = (batch, M, N) if batched else (M, N)
        c = (
            torch.empty(shape, dtype=torch.float32, device=a.device)
            if out is None
            else kern.check_tensor(kernel, "out", out)
        )
        kern.check_shape(kernel, "out", c, shape, "alpha·op(a)·op(b)")
        device = kern.check_layout_and_device(kernel, a=a, b=b, out=c)
        kern.check_int32(kernel, batch=batch, M=M, N=N, K=K)
        if c.numel() == 0:
            return c
        if K == 0:
            return c.zero_()
        stride_a = 0 if a3.shape[0] == 1 else M * K
        stride_b = 0 if b3.shape[0] == 1 else K * N
        kern.launch(
            self.function(GEMM, state),
            device,
            kernel,
            a.data_ptr(),
            b.data_ptr(),
            c.data_ptr(),
            batch,
            M,
            N,
            K,
            int(bool(trans_a)),
            int(bool(trans_b)),
            stride_a,
            stride_b,
            M * N,
            float(alpha),
        )
        return c


def bench_cases(student, reference, quick: bool) -> list:
    import torch

    from assignment.perf.cases import Case, randn

    L, d, batch = (512, 64, 16) if quick else (1024, 64, 128)
    big = 2048 if quick else 4096
    # (label, batch, M, N, K, trans_b): a square GEMM, then attention's Q·Kᵀ and P·V.
    shapes = [
        (f"{big}^3", 1, big, big, big, False),
        (f"Q·Kᵀ {batch}x{L}x{L}x{d}", batch, L, L, d, True),
        (f"P·V {batch}x{L}x{d}x{L}", batch, L, d, L, False),
    ]
    cases = []
    for label, b, M, N, K, trans_b in shapes:

        def make(i, b=b, M=M, N=N, K=K, trans_b=trans_b):
            return randn(b, M, K, seed=2 * i), randn(b, *((N, K) if trans_b else (K, N)), seed=2 * i + 1)

        def torch_mm(ab, trans_b=trans_b):
            return torch.matmul(ab[0], ab[1].transpose(-1, -2) if trans_b else ab[1])

        candidates = {"cuBLAS": torch_mm, "student": lambda ab, t=trans_b: student.gemm(ab[0], ab[1], trans_b=t)}
        if reference is not None:
            candidates["reference"] = lambda ab, t=trans_b: reference.gemm(ab[0], ab[1], trans_b=t)
        cases.append(
            Case(
                f"gemm {label}",
                make,
                candidates,
                flops=2.0 * b * M * N * K,
                bytes_moved=4.0 * b * (M * K + K * N + M * N),
                metric="TFLOP/s",
                percent_of="cuBLAS",
            )
        )
    return cases


def rule_case(rule, student, reference):
    import torch

    from assignment.perf.cases import Case, randn

    b, M, N, K = (rule.shape[k] for k in ("batch", "M", "N", "K"))
    candidates = {"cuBLAS": lambda ab: torch.matmul(ab[0], ab[1]), "student": lambda ab: student.gemm(*ab)}
    if reference is not None:
        candidates["reference"] = lambda ab: reference.gemm(*ab)
    return Case(
        f"{CODE.id} rule: gemm {b}x{M}x{N}x{K}",
        lambda i: (randn(b, M, K, seed=2 * i), randn(b, K, N, seed=2 * i + 1)),
        candidates,
        flops=2.0 * b * M * N * K,
        bytes_moved=4.0 * b * (M * K + K * N + M * N),
        metric="TFLOP/s",
        percent_of="cuBLAS",
    )


def _ideal_bytes(shape) -> float:
    b, M, N, K = (shape[k] for k in ("batch", "M", "N", "K"))
    return 4.0 * b * (M * K + K * N + M * N)


def _launch(kernels, shape, upload) -> None:
    import torch

    a, b = upload(shape["batch"], shape["M"], shape["K"]), upload(shape["batch"], shape["K"], shape["N"])
    kernels.gemm(a, b, out=torch.empty(shape["batch"], shape["M"], shape["N"], device="cuda"))


def timing_workload(rule, student, reference, tolerance, base: int, student_model=None):
    import math

    import torch

    from assignment.perf.workload import Workload, generator
    from assignment.testing import assert_close

    s = rule.shape

    def make(i):
        gen = generator(base + i)
        return (
            torch.randn(s["batch"], s["M"], s["K"], device="cuda", generator=gen),
            torch.randn(s["batch"], s["K"], s["N"], device="cuda", generator=gen),
        )

    def check(name, ab, c):  # the bound of the values checks (atol grows with sqrt(K)), on the reference's C
        if name == "student":
            limit = tolerance["atol"] * math.sqrt(s["K"])
            assert_close(
                c, reference.gemm(*ab), atol=limit, rtol=tolerance["rtol"], name="timed C", layout="batch, row, col"
            )

    return Workload(
        make,
        lambda ab: student.gemm(*ab),
        lambda ab: reference.gemm(*ab),
        None,
        check,
        flops=2.0 * s["batch"] * s["M"] * s["N"] * s["K"],
    )


def quick_check(student, reference) -> None:
    """The GEMM on a few shapes that catch edge bugs (1x1x1, no tile multiples, K past a tile, a large odd K) against
    the reference: what grader/tools/open_levels.py checks before timing an open-level kernel."""
    import torch

    from assignment.testing import assert_close

    gen = torch.Generator(device="cuda").manual_seed(7)
    for batch, m, n, k in ((1, 1, 1, 1), (3, 77, 131, 45), (2, 256, 64, 300), (1, 1000, 1000, 129)):
        a = torch.randn(batch, m, k, device="cuda", generator=gen)
        b = torch.randn(batch, k, n, device="cuda", generator=gen)
        assert_close(student.gemm(a, b), reference.gemm(a, b), atol=1e-4 * k**0.5, rtol=1e-4, name="C")


CODE = TaskCode(
    id="t3",
    cuda_file=CUDA_FILE,
    kernels=Kernels,
    bench_metric="TFLOP/s",
    bench_cases=bench_cases,
    rule_case=rule_case,
    timing_workload=timing_workload,
    profile=Profile({"batch": 1, "M": 4096, "N": 4096, "K": 4096}, _ideal_bytes, _launch),
    sanitize=Sanitize("t3_sanitize"),
    quick_check=quick_check,
)
