"""Typed grading configuration. Every default is stated here, once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
HIDDEN_DIR = REPO_ROOT / "grader" / "hidden"


@dataclass(frozen=True)
class GradeConfig:
    # Wall-clock limit for one task's hidden suite in its child process.
    cpu_task_timeout_s: float = 600.0
    # GPU tasks compile CUDA and run timing tests, so they get longer.
    gpu_task_timeout_s: float = 900.0
    # Tasks to grade; empty means every task the registry marks available.
    tasks: tuple[str, ...] = ()
    # Seed for the hidden tests' inputs; None draws one per task at grading time.
    seed: int | None = None
    # Compiled libraries are keyed by a hash of their source, so one cache (KIT_CACHE_DIR or
    # .kit_cache) can serve every submission; False gives each submission its own.
    share_cuda_cache: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)

    def timeout_for(self, needs_gpu: bool) -> float:
        return self.gpu_task_timeout_s if needs_gpu else self.cpu_task_timeout_s
