"""A graded timing workload: one timing rule's inputs, candidates and full check.

Each task's code builds one per timing rule (``TaskCode.timing_workload``, in ``assignment/tasks/``); the
grader's hidden timing tests and its preflight run them. Inputs are made on the
GPU from a seed, so every timed call gets fresh ones cheaply; every student output is compared in full with the
reference kernel's output on the same (unmodified) inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    notes: dict = field(default_factory=dict)  # added to the timing record (how the student's path ran)
    tensor_cores: bool = False  # fp16/bf16 tensor-core work: the physical floor takes their peak
    # The student's path runs in another process (t6's model rule: the sandboxed worker): its calls are timed in a
    # block of their own, then this ends that process (and waits until it has ended), then the baseline is timed.
    # Nothing the student's process leaves queued on the GPU can then run while the baseline is timed.
    end_student: Callable[[], None] | None = None
    # The student's path set up in that process (t6's model rule): called by ``time`` first, so a workload can be
    # built (the checker's side: inputs, the baseline) before the grading gives it the GPU, and the student's
    # process started only once it has.
    start_student: Callable[[], None] | None = None

    def candidates(self) -> dict[str, Callable[[Any], Any]]:
        found = {"student": self.student, "reference": self.reference}
        if self.naive is not None:
            found["naive"] = self.naive
        return found

    def time(self, rule, record: dict, **measure_kwargs) -> float:
        """Time registry rule ``rule`` on these candidates, every student output checked, into ``record``; its
        value (assignment.testing.run_timing_rule)."""
        from assignment.testing import run_timing_rule

        if self.start_student is not None:
            self.start_student()
        return run_timing_rule(
            rule,
            self.candidates(),
            self.make_inputs,
            check=self.check,
            flops=self.flops,
            bytes_moved=self.bytes_moved,
            record=record,
            tensor_cores=self.tensor_cores,
            end_student=self.end_student,
            **measure_kwargs,
        )


def generator(seed: int):
    """A CUDA generator seeded with ``seed``: the inputs of one timed call."""
    import torch

    return torch.Generator(device="cuda").manual_seed(seed)


class StudentDecoder(Protocol):
    """A student's decode path for a model rule, wherever it runs (the hidden suite: the sandboxed worker)."""

    def setup(self, preset: str, seed: int, prompt, max_seq_len: int) -> dict: ...

    def step(self, token): ...

    def close(self) -> None:
        """End the student's process (wait until it has): nothing of it may run while the baseline is timed."""
