"""t2, softmax in CUDA: a row-wise softmax, memory-bound, measured in GB/s against the device copy."""

from __future__ import annotations

from ctypes import c_int64, c_void_p
from typing import TYPE_CHECKING

from assignment.cuda import wrappers as kern
from assignment.tasks import Profile, Sanitize, TaskCode

if TYPE_CHECKING:  # torch is imported inside the functions: the module loads without it
    import torch

CUDA_FILE = "t2_softmax.cu"
SOFTMAX = kern.Export(CUDA_FILE, "t2_softmax_forward", (c_void_p, c_void_p, c_int64, c_int64, c_void_p))


class Kernels:
    """t2's wrapper: a method of ``assignment.kernels.Kernels``."""

    def softmax(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Row softmax over the last dimension of ``x`` (any number of leading dims)."""
        import torch

        kernel, tasks = "t2_softmax_forward", ("t2",)
        state = self.require(SOFTMAX, tasks, kernel)
        kern.check_tensor(kernel, "x", x)
        if x.dim() == 0:
            raise ValueError(f"{kernel}: x must have at least 1 dimension (rows of the softmax), got a scalar")
        y = torch.empty_like(x) if out is None else kern.check_tensor(kernel, "out", out)
        kern.check_shape(kernel, "out", y, tuple(x.shape), "same as x")
        device = kern.check_layout_and_device(kernel, x=x, out=y)
        cols = x.shape[-1]
        if x.numel() == 0:
            return y
        rows = x.numel() // cols
        kern.launch(self.function(SOFTMAX, state), device, kernel, x.data_ptr(), y.data_ptr(), rows, cols)
        return y


def bench_cases(student, reference, quick: bool) -> list:
    import torch

    from assignment.perf.cases import Case, randn

    shapes = [(4096, 1024), (4096, 4096), (256, 65536)] if quick else [(65536, 1024), (65536, 4096), (4096, 65536)]
    cases = []
    for rows, cols in shapes:

        def naive(x):  # the textbook formula, one PyTorch kernel per step
            e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
            return e / e.sum(dim=-1, keepdim=True)

        candidates = {"pytorch": lambda x: torch.softmax(x, dim=-1), "naive pytorch": naive, "student": student.softmax}
        if reference is not None:
            candidates["reference"] = reference.softmax
        cases.append(
            Case(
                f"softmax {rows}x{cols}",
                lambda i, r=rows, c=cols: randn(r, c, seed=i, scale=4.0),
                candidates,
                flops=None,
                bytes_moved=8.0 * rows * cols,
                metric="GB/s",
                percent_of="copy",
            )
        )
    return cases


def rule_case(rule, student, reference):
    import torch

    from assignment.perf.cases import Case, randn

    rows, cols = rule.shape["rows"], rule.shape["cols"]
    candidates = {"pytorch": lambda x: torch.softmax(x, dim=-1), "student": student.softmax}
    if reference is not None:
        candidates["reference"] = reference.softmax
    return Case(
        f"{CODE.id} rule: softmax {rows}x{cols}",
        lambda i: randn(rows, cols, seed=i, scale=4.0),
        candidates,
        flops=None,
        bytes_moved=8.0 * rows * cols,
        metric="GB/s",
        percent_of="copy",
    )


def _ideal_bytes(shape) -> float:
    return 4.0 * 2 * shape["rows"] * shape["cols"]


def _launch(kernels, shape, upload) -> None:
    import torch

    x = upload(shape["rows"], shape["cols"])
    kernels.softmax(x, out=torch.empty_like(x))


def timing_workload(rule, student, reference, tolerance, base: int, student_model=None):
    import torch

    from assignment.perf.workload import Workload, generator
    from assignment.testing import assert_close

    s = rule.shape

    def make(i):
        return torch.randn(s["rows"], s["cols"], device="cuda", generator=generator(base + i))

    def check(name, x, y):  # the bound of the values checks (float32), on the reference kernel's output
        if name == "student":
            assert_close(y, reference.softmax(x), **tolerance, name="timed softmax", layout="row, col")

    return Workload(make, student.softmax, reference.softmax, None, check, bytes_moved=8.0 * s["rows"] * s["cols"])


CODE = TaskCode(
    id="t2",
    cuda_file=CUDA_FILE,
    kernels=Kernels,
    bench_metric="GB/s",
    bench_cases=bench_cases,
    rule_case=rule_case,
    timing_workload=timing_workload,
    profile=Profile({"rows": 16384, "cols": 4096}, _ideal_bytes, _launch),
    sanitize=Sanitize("t2_sanitize"),
)
