"""t3, GEMM in CUDA: batched matrix multiply (optionally B transposed), in TFLOP/s against cuBLAS."""

from __future__ import annotations

from assignment.tasks import Profile, TaskCode


def bench_cases(student, reference, quick: bool) -> list:
    import torch

    from assignment.perf.cases import Case, randn

    L, d, batch = (512, 64, 16) if quick else (1024, 64, 128)
    big = 2048 if quick else 4096
    # (label, batch, M, N, K, trans_b): a square GEMM, then attention's Q·Kᵀ and P·V.
    shapes = [(f"{big}^3", 1, big, big, big, False), (f"Q·Kᵀ {batch}x{L}x{L}x{d}", batch, L, L, d, True),
              (f"P·V {batch}x{L}x{d}x{L}", batch, L, d, L, False)]
    cases = []
    for label, b, M, N, K, trans_b in shapes:
        def make(i, b=b, M=M, N=N, K=K, trans_b=trans_b):
            return randn(b, M, K, seed=2 * i), randn(b, *((N, K) if trans_b else (K, N)), seed=2 * i + 1)

        def torch_mm(ab, trans_b=trans_b):
            return torch.matmul(ab[0], ab[1].transpose(-1, -2) if trans_b else ab[1])

        candidates = {"cuBLAS": torch_mm, "student": lambda ab, t=trans_b: student.gemm(ab[0], ab[1], trans_b=t)}
        if reference is not None:
            candidates["reference"] = lambda ab, t=trans_b: reference.gemm(ab[0], ab[1], trans_b=t)
        cases.append(Case(f"gemm {label}", make, candidates, flops=2.0 * b * M * N * K,
                          bytes_moved=4.0 * b * (M * K + K * N + M * N), metric="TFLOP/s", percent_of="cuBLAS"))
    return cases


def rule_case(rule, student, reference):
    import torch

    from assignment.perf.cases import Case, randn

    b, M, N, K = (rule.shape[k] for k in ("batch", "M", "N", "K"))
    candidates = {"cuBLAS": lambda ab: torch.matmul(ab[0], ab[1]), "student": lambda ab: student.gemm(*ab)}
    if reference is not None:
        candidates["reference"] = lambda ab: reference.gemm(*ab)
    return Case(f"{CODE.id} rule: gemm {b}x{M}x{N}x{K}",
                lambda i: (randn(b, M, K, seed=2 * i), randn(b, K, N, seed=2 * i + 1)),
                candidates, flops=2.0 * b * M * N * K, bytes_moved=4.0 * b * (M * K + K * N + M * N),
                metric="TFLOP/s", percent_of="cuBLAS")


def _ideal_bytes(shape) -> float:
    b, M, N, K = (shape[k] for k in ("batch", "M", "N", "K"))
    return 4.0 * b * (M * K + K * N + M * N)


def _launch(kernels, shape, upload) -> None:
    import torch

    a, b = upload(shape["batch"], shape["M"], shape["K"]), upload(shape["batch"], shape["K"], shape["N"])
    kernels.gemm(a, b, out=torch.empty(shape["batch"], shape["M"], shape["N"], device="cuda"))


CODE = TaskCode(
    id="t3",
    cuda_file="t3_gemm.cu",
    bench_metric="TFLOP/s",
    bench_cases=bench_cases,
    rule_case=rule_case,
    profile=Profile({"batch": 1, "M": 4096, "N": 4096, "K": 4096}, _ideal_bytes, _launch),
    sanitize_args=("t3",),
)
