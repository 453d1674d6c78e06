"""Typed grading configuration. Every default is stated here, once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HIDDEN_DIR = REPO_ROOT / "grader" / "hidden"
ISOLATION_CHOICES = ("auto", "bwrap", "process")
# Among the tasks to grade (--task, make grade TASKS=...): the theory answers, graded as a task id grades its task.
THEORY = "theory"


@dataclass(frozen=True)
class GradeConfig:
    # Tasks to grade; empty means every task the registry marks available.
    tasks: tuple[str, ...] = ()
    # Seed for the hidden tests' inputs and drawn shapes, the same for every task; None derives one per task from
    # the course's salt and the grading id (grader/grade/seeds.py), so that a regrade draws the same inputs.
    seed: int | None = None
    # Multiplies every task's time limits from the registry ([task.grading]): a slower host.
    timeout_scale: float = 1.0
    # The pace probe's time on an unloaded host (grader/grade/pace.py: float64 attention on one CPU thread), in ms:
    # the registry's deadlines were set for such a host. At the start of each grading the probe runs again and every
    # deadline is scaled by (its time now / this) when that is above 1. Measured on the 2-core CI machine (AMD EPYC,
    # unloaded, 2026-11-28: 9.6-10.4 ms over ten runs); an H200 host's 16 Xeon cores take about as long.
    pace_reference_ms: float = 10.0
    # Measure the pace at the start of a grading (False: every deadline as the registry says, times timeout_scale).
    pace: bool = True
    # Hidden checks of independent tasks run side by side, this many checker processes at once (their timing checks
    # always run one task at a time, with the GPU to themselves). None: on a host of 8 cores or more all of them (most
    # checkers wait on the GPU or on their sandboxed worker), started with the grading (grader/grade/phases.py); on a
    # smaller one all its cores but two, at least 1.
    parallel: int | None = None
    # Gradings on this host take turns through its gates (grader/grade/host_gate.py): a check rerun alone holds the
    # host's checks, a timing pass its GPU. False only in the kit's own tests of a single grading.
    gates: bool = True
    # Building the spliced CUDA files of one task (nvcc; the reference's too on a cold cache).
    build_timeout_s: float = 300.0
    # How student Python is isolated: "auto" takes bubblewrap where it runs, else the process
    # fallback; "bwrap" insists on bubblewrap.
    isolation: str = "auto"
    # Grading untrusted submissions below full isolation (no bubblewrap) needs this on purpose.
    allow_weak_isolation: bool = False
    # bubblewrap's path (a wrapper script is fine); None: KIT_BWRAP, then PATH.
    bwrap: str | None = None
    # Compiled libraries, content-addressed: submissions and the reference in separate caches that
    # only the grader writes (student code never runs where it could reach them).
    cache_root: Path = REPO_ROOT / ".kit_cache" / "grader"
    # Check the host before grading (GPU, nvcc, compute-sanitizer, the reference's speed).
    preflight: bool = True
    # Only the hidden checks matching this pytest -k expression ("" = all): a targeted regrade.
    select: str = ""
    # Check Python files against their task's rules before running them. False only in the kit's own
    # tests of the layer behind it (the sandbox must hold even for a file the rules would reject).
    python_rules: bool = True
    # The CUDA region rules on the source (the device-only build and its symbol check hold without them).
    cuda_rules: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)
    # Threads of each checker and of its worker (OMP/MKL threads; the worker's sandbox.Limits.threads). None: the
    # sandbox's fixed count for the worker (results that do not depend on the host's cores) and the host's default
    # for the checker. Gradings side by side on few cores (the kit's adversarial fixtures) give 1: more threads than
    # cores leave each of torch's parallel regions waiting for a thread that is not running (3x the CPU time).
    threads: int | None = None
    # The theory answers (grader/grade/theory.py): None grades them when every task is graded (no `tasks`), so a
    # targeted regrade of one task leaves them out; True or False decides.
    theory: bool | None = None
    # The submission's student id, which picks its theory questions and, without a grading_id, its hidden seeds (the
    # batch grader's roster knows it); None takes the student_id written in the answers file.
    student_id: str | None = None
    # Who the submission belongs to for its hidden seeds (the roster's SID, else email; Gradescope's submitter);
    # None: student_id, else the theory answers' student_id, else the submission's name (grader/grade/seeds.py).
    grading_id: str | None = None
    # Where the grading's private working folder (the collected submission, the checks' files) is made; None: the
    # system's temporary folder. Its path is in every sandboxed worker's command line, so a grading given a folder of
    # its own can tell its processes from another grading's (the kit's adversarial fixtures: no worker left behind).
    work_root: Path | None = None

    @property
    def submission_cache_root(self) -> Path:
        return self.cache_root / "submissions"  # the checker's KIT_CACHE_DIR

    @property
    def submission_cache(self) -> Path:
        return self.submission_cache_root / "cuda"

    @property
    def reference_cache(self) -> Path:
        return self.cache_root / "reference"  # the checker's KIT_REFERENCE_CACHE_DIR
