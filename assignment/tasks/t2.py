"""t2, softmax in CUDA: a row-wise softmax, memory-bound, measured in GB/s against the device copy."""

from __future__ import annotations

from assignment.tasks import Profile, TaskCode


def bench_cases(student, reference, quick: bool) -> list:
    import torch

    from assignment.perf.cases import Case, randn

    shapes = [(4096, 1024), (4096, 4096), (256, 65536)] if quick else [(65536, 1024), (65536, 4096), (4096, 65536)]
    cases = []
    for rows, cols in shapes:
        def naive(x):  # the textbook formula, one PyTorch kernel per step
            e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
            return e / e.sum(dim=-1, keepdim=True)

        candidates = {"pytorch": lambda x: torch.softmax(x, dim=-1), "naive pytorch": naive,
                      "student": student.softmax}
        if reference is not None:
            candidates["reference"] = reference.softmax
        cases.append(Case(f"softmax {rows}x{cols}", lambda i, r=rows, c=cols: randn(r, c, seed=i, scale=4.0),
                          candidates, flops=None, bytes_moved=8.0 * rows * cols, metric="GB/s", percent_of="copy"))
    return cases


def rule_case(rule, student, reference):
    import torch

    from assignment.perf.cases import Case, randn

    rows, cols = rule.shape["rows"], rule.shape["cols"]
    candidates = {"pytorch": lambda x: torch.softmax(x, dim=-1), "student": student.softmax}
    if reference is not None:
        candidates["reference"] = reference.softmax
    return Case(f"{CODE.id} rule: softmax {rows}x{cols}", lambda i: randn(rows, cols, seed=i, scale=4.0),
                candidates, flops=None, bytes_moved=8.0 * rows * cols, metric="GB/s", percent_of="copy")


def _ideal_bytes(shape) -> float:
    return 4.0 * 2 * shape["rows"] * shape["cols"]


def _launch(kernels, shape, upload) -> None:
    import torch

    x = upload(shape["rows"], shape["cols"])
    kernels.softmax(x, out=torch.empty_like(x))


CODE = TaskCode(
    id="t2",
    cuda_file="t2_softmax.cu",
    bench_metric="GB/s",
    bench_cases=bench_cases,
    rule_case=rule_case,
    profile=Profile({"rows": 16384, "cols": 4096}, _ideal_bytes, _launch),
    sanitize_args=("t2",),
)
