"""The graded timing workloads, one per registry timing rule: inputs, candidates, the full check.

Shared by the hidden timing tests (student against reference or naive) and the grader's preflight
(the reference alone, against the time the registry recorded for this GPU). Inputs are made on the
GPU from a seed, so every timed call gets fresh ones cheaply; every student output is compared in
full with the reference kernel's output on the same (unmodified) inputs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable

import torch

from assignment.cuda.kernels import Kernels
from assignment.registry import TimingRule
from assignment.testing import assert_close

LAYOUT = "batch, head, query, dim"


@dataclass
class Workload:
    make_inputs: Callable[[int], Any]
    student: Callable[[Any], Any]
    reference: Callable[[Any], Any]
    naive: Callable[[Any], Any] | None
    check: Callable[[str, Any, Any], None]
    flops: float | None = None
    bytes_moved: float | None = None

    def candidates(self) -> dict[str, Callable[[Any], Any]]:
        found = {"student": self.student, "reference": self.reference}
        if self.naive is not None:
            found["naive"] = self.naive
        return found


def _generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _base_seed() -> int:
    return int(os.environ.get("KIT_SEED", "0")) * 1_000_003


def reference_kernels() -> Kernels:
    return Kernels("solutions")


def workload(task_id: str, rule: TimingRule, student: Kernels, tolerance: dict[str, float]) -> Workload:
    s, ref, base = rule.shape, reference_kernels(), _base_seed()
    if task_id == "t2":
        def make(i):
            return torch.randn(s["rows"], s["cols"], device="cuda", generator=_generator(base + i))

        def check(name, x, y):
            if name == "student":
                assert_close(y, ref.softmax(x), atol=2 * tolerance["atol"], rtol=2 * tolerance["rtol"],
                             name="timed softmax")
        return Workload(make, student.softmax, ref.softmax, None, check, bytes_moved=8.0 * s["rows"] * s["cols"])
    if task_id == "t3":
        def make(i):
            gen = _generator(base + i)
            return (torch.randn(s["batch"], s["M"], s["K"], device="cuda", generator=gen),
                    torch.randn(s["batch"], s["K"], s["N"], device="cuda", generator=gen))

        def check(name, ab, c):
            if name == "student":
                limit = 2 * tolerance["atol"] * math.sqrt(s["K"])
                assert_close(c, ref.gemm(*ab), atol=limit, rtol=2 * tolerance["rtol"], name="timed C")
        return Workload(make, lambda ab: student.gemm(*ab), lambda ab: ref.gemm(*ab), None, check,
                        flops=2.0 * s["batch"] * s["M"] * s["N"] * s["K"])
    if task_id in ("t4", "t5"):
        causal = bool(s.get("causal", False))
        H_kv = s.get("H_kv", s["H"])  # k and v: (B, H_kv, L, d)

        def make(i):
            gen = _generator(base + i)
            return (torch.randn(s["B"], s["H"], s["L"], s["d"], device="cuda", generator=gen),
                    *(torch.randn(s["B"], H_kv, s["L"], s["d"], device="cuda", generator=gen) for _ in range(2)))

        def check(name, qkv, output):
            if name == "student":
                out = output[0] if isinstance(output, tuple) else output
                expected, _ = ref.flash_attention(*qkv, causal=causal)
                assert_close(out, expected, atol=2 * tolerance["atol"], rtol=2 * tolerance["rtol"],
                             name="timed O", layout=LAYOUT)
        flops = 4.0 * s["B"] * s["H"] * s["L"] * s["L"] * s["d"] * (0.5 if causal else 1.0)
        return Workload(make, lambda qkv: student.flash_attention(*qkv, causal=causal),
                        lambda qkv: ref.flash_attention(*qkv, causal=causal),
                        lambda qkv: ref.naive_cuda_attention(*qkv, causal=causal), check, flops=flops)
    raise KeyError(f"no timing workload for {task_id}")
