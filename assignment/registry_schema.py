"""The registry's schema (assignment/tasks.toml as typed, frozen dataclasses): a task, its timing rules and thresholds,
its hidden shapes and grading limits, the theory part, the course's chapters, and ``Registry`` over them. Read and
validated into these by assignment/registry.py (the task tables: assignment/registry_tasks.py; the course-level parts:
assignment/registry_course.py)."""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


ASSIGNMENT_DIR = Path(__file__).resolve().parent
REGISTRY_PATH = ASSIGNMENT_DIR / "tasks.toml"
TASK_ID_PATTERN = re.compile(r"^t[1-9][0-9]*$")
DEVICES = ("any", "gpu")
SCAFFOLDING = ("guided", "open")
METRICS = ("time_vs_reference", "speedup_vs_naive")


class RegistryError(ValueError):
    """A problem in the registry, naming the file, the task and the field."""

    def __init__(self, path: Path, task: str | None, field_name: str, message: str):
        where = f"{path}"
        if task:
            where += f": task {task}"
        where += f": field '{field_name}'"
        super().__init__(f"{where}: {message}")
        self.path, self.task, self.field_name = path, task, field_name


@dataclass(frozen=True)
class Threshold:
    at: float  # time ratio (lower is better) or speedup (higher is better), per metric
    points: float


# What a student's `make bench` can time without the reference kernels: the device copy bandwidth, cuBLAS
# and SDPA through PyTorch, and the model's naive path.
STUDENT_BASELINES = ("copy", "cuBLAS", "SDPA", "naive path")
# "instructor": this repository's registry; "student": the bundle's copy (no hidden shapes, no reasoning), which
# grader/release/student_edition.py writes.
EDITIONS = ("instructor", "student")


@dataclass(frozen=True)
class StudentTarget:
    """A timing rule restated against a baseline the student bundle has, from the reference's measured figures.

    The student's *speed* is ``baseline ms / student ms`` (for ``copy``: the student's bytes per second over the
    device copy's). ``reference`` is the reference's speed on ``gpu``. A ``time_vs_reference`` threshold ``r``
    becomes ``reference / r``; a ``speedup_vs_naive`` threshold ``s`` becomes ``naive * s``, where ``naive`` is
    the naive baseline's speed (1 when the baseline is the naive path itself). ``overhead_ms`` is time the
    grader's measurement adds to the student's call (the sandboxed worker's round trip) that a local bench does
    not see.
    """

    baseline: str
    reference: float
    gpu: str
    naive: float | None = None
    overhead_ms: float = 0.0

    def needed(self, metric: str, at: float) -> float:
        """The speed (against the baseline) that earns a threshold of the rule."""
        if metric == "time_vs_reference":
            return self.reference / at
        return (1.0 if self.naive is None else self.naive) * at

    def as_rule_value(self, metric: str, speed: float) -> float:
        """The value the rule would measure for a student at ``speed``: the inverse of ``needed``."""
        if metric == "time_vs_reference":
            return self.reference / speed
        return speed / (1.0 if self.naive is None else self.naive)


@dataclass(frozen=True)
class TimingRule:
    name: str
    metric: str
    shape: dict[str, Any]
    reference: str
    thresholds: tuple[Threshold, ...]
    reasoning: str
    # The reference's median time at this shape per GPU model (torch.cuda.get_device_name()), from the
    # runs the thresholds were set with; the grader's preflight refuses a GPU far slower than this.
    reference_ms: dict[str, float] = field(default_factory=dict)
    student: StudentTarget | None = None
    # The open scaffolding level's thresholds and their reasoning (``open``, ``open_reasoning``); when the task is
    # open they are also ``thresholds`` and the front of ``reasoning``.
    open_thresholds: tuple[Threshold, ...] = ()
    open_reasoning: str = ""

    @property
    def max_points(self) -> float:
        return max(t.points for t in self.thresholds)

    def points_for(self, value: float) -> float:
        """Points earned for a measured ratio (time_vs_reference) or speedup."""
        if value is None or not math.isfinite(value):
            return 0.0
        earned = 0.0
        for threshold in self.thresholds:
            passed = value <= threshold.at if self.metric == "time_vs_reference" else value >= threshold.at
            if passed:
                earned = max(earned, threshold.points)
        return earned

    def student_points_for(self, speed: float) -> float:
        """Points a student's locally measured speed against the baseline points to (an estimate of the grade)."""
        if self.student is None or speed is None or not math.isfinite(speed) or speed <= 0:
            return 0.0
        return self.points_for(self.student.as_rule_value(self.metric, speed))


@dataclass(frozen=True)
class Points:
    correctness: float
    performance: float

    @property
    def total(self) -> float:
        return self.correctness + self.performance


@dataclass(frozen=True)
class HiddenShapes:
    """A hidden suite's shapes: fixed edge cases, plus ``count`` drawn from ``ranges`` with the grading seed.

    A range is ``[lo, hi]`` (integers, inclusive), ``{ choice = [...] }``, or ``{ divisor_of = "H" }``:
    a divisor of the value drawn for an earlier key (the KV heads of grouped-query attention divide
    the query heads). The drawn shapes change from one grading to the next, so no list of hidden
    shapes is ever complete.
    """

    fixed: tuple[dict[str, Any], ...] = ()
    count: int = 0
    ranges: dict[str, Any] = field(default_factory=dict)

    def draw(self, seed: int) -> tuple[dict[str, Any], ...]:
        rng = random.Random(seed)
        drawn = []
        for _ in range(self.count):
            shape = {}
            for key, spec in self.ranges.items():
                if isinstance(spec, list):
                    shape[key] = rng.randint(spec[0], spec[1])
                elif "choice" in spec:
                    shape[key] = rng.choice(spec["choice"])
                else:
                    shape[key] = rng.choice(divisors(shape[spec["divisor_of"]]))
            drawn.append(shape)
        return self.fixed + tuple(drawn)

    def __len__(self) -> int:
        return len(self.fixed) + self.count


def divisors(n: int) -> list[int]:
    """The positive divisors of n >= 1, ascending."""
    return [k for k in range(1, n + 1) if n % k == 0]


@dataclass(frozen=True)
class Grading:
    """How long the grader lets a task run: the whole suite, and any one check."""

    timeout_s: float = 600.0
    test_deadline_s: float = 120.0
    reasoning: str = ""
    # The open scaffolding level of a task without timing rules: how its checks (structure bounds, deadlines) were
    # measured on honest simpler designs, the instructor's open-level fixtures. Instructor-only, like reasoning.
    open_reasoning: str = ""
    # On a host with cores to spare, the task's checks are dealt to this many checker processes that run side by side,
    # by their `cost` markers (a long task's slow checks in different ones: grader/grade/phases.py).
    shards: int = 1


@dataclass(frozen=True)
class PythonRules:
    """What a task's Python files may import and must not name (``assignment.policy``)."""

    imports: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()


@dataclass(frozen=True)
class Task:
    id: str
    slug: str
    title: str
    available: bool
    device: str
    files: tuple[str, ...]
    text: str
    summary: str
    hint: str
    points: Points
    tolerance: dict[str, dict[str, float]] = field(default_factory=dict)
    public_shapes: tuple[dict[str, Any], ...] = ()
    hidden: HiddenShapes = field(default_factory=HiddenShapes)
    timing: tuple[TimingRule, ...] = ()
    rules: PythonRules = field(default_factory=PythonRules)
    grading: Grading = field(default_factory=Grading)
    # "guided": the starter's TODO regions with their plans; "open": the student designs the kernel body (the
    # solution's OPEN blocks; assignment/markers.py), and the timing rules use their `open` thresholds.
    scaffolding: str = "guided"
    # What a student can do after the task (the handout lists them; required for available tasks).
    objectives: tuple[str, ...] = ()
    # The instructor's estimate of a student's hours, (low, high); the handout shows the beta testers' median
    # instead once the feedback form has enough answers (handout/hours.py).
    estimated_hours: tuple[float, float] | None = None
    # A bonus task's points come on top of the course's total_points (the instructor's choice: `bonus = true`).
    bonus: bool = False

    def hidden_shapes(self, seed: int) -> tuple[dict[str, Any], ...]:
        """The hidden suite's shapes for one grading (fixed ones first, then those drawn from ``seed``)."""
        return self.hidden.draw(seed)

    @property
    def needs_gpu(self) -> bool:
        return self.device == "gpu"

    @property
    def number(self) -> int:
        return int(self.id[1:])

    def timed_tolerance(self) -> dict[str, float]:
        """The bound on a timed output against the reference's on the same inputs (the grader's timing checks):
        the ``timed`` entry where the task has one (fp16/bf16 kernels, whose outputs differ by a few ulps of the
        dtype), else its ``float32`` one."""
        return self.tol("timed" if "timed" in self.tolerance else "float32")

    def tol(self, name: str) -> dict[str, float]:
        """The bounds of the ``[task.tolerance]`` entry ``name``: a dtype (``float32``) or a named check
        (``large_logits``)."""
        try:
            return self.tolerance[name]
        except KeyError:
            raise KeyError(f"registry: task {self.id} has no tolerance {name!r} ([task.tolerance])") from None


# The theory part's kinds of numeric question (assignment/theory/questions.py words and draws each one).
THEORY_KINDS = (
    "hbm",
    "smem",
    "roofline",
    "online_softmax",
    "split_kv",
    "fragments",
    "bank_conflicts",
    "attention_intensity",
)


@dataclass(frozen=True)
class TheoryKind:
    """One kind of numeric theory question: its points (shared equally by its ``count`` instances and their
    answers) and the relative tolerance of an answer, |answer - key| <= rtol * |key| (0: exact).

    A kind may belong to a task (``task = "t8"``): its points are then that task's, bonus points when the task is a
    bonus task (``bonus``, copied from the task's flag, so that the task's one switch moves both)."""

    name: str
    title: str
    points: float
    count: int
    rtol: float
    task: str | None = None
    bonus: bool = False


@dataclass(frozen=True)
class RubricItem:
    points: float
    criterion: str


@dataclass(frozen=True)
class Theory:
    """``[theory]``: questions drawn per student (``make theory``), graded by ``grader/grade/theory.py``."""

    salt: str  # drawn into every student's numbers with the id: a new salt, new numbers
    answers_file: str  # what `make theory` writes and `make submit` packs (in course.submit_files)
    kinds: tuple[TheoryKind, ...]
    proof_title: str
    proof_points: float
    rubric: tuple[RubricItem, ...] = ()  # the written proof's, instructor-only: () in the student edition

    @property
    def points(self) -> float:
        """Every question's points, a bonus task's included: what a student can earn in the theory part."""
        return sum(kind.points for kind in self.kinds) + self.proof_points

    @property
    def bonus_points(self) -> float:
        """The points of the questions that belong to a bonus task: on top of course.total_points, as its own."""
        return sum(kind.points for kind in self.kinds if kind.bonus)

    @property
    def regular_points(self) -> float:
        """The points the theory part adds to course.total_points."""
        return self.points - self.bonus_points

    @property
    def own_points(self) -> float:
        """The points of the course's own questions (those of no task) and of the proof."""
        return sum(kind.points for kind in self.kinds if kind.task is None) + self.proof_points

    @property
    def task_ids(self) -> tuple[str, ...]:
        """The tasks that have questions here, in the order of their first kind."""
        return tuple(dict.fromkeys(kind.task for kind in self.kinds if kind.task is not None))

    def task_points(self, task_id: str) -> float:
        """The points of the questions that belong to task ``task_id`` (0: it has none)."""
        return sum(kind.points for kind in self.kinds if kind.task == task_id)

    def kind(self, name: str) -> TheoryKind:
        for kind in self.kinds:
            if kind.name == name:
                return kind
        raise KeyError(f"no theory question kind {name!r} (the registry has {', '.join(k.name for k in self.kinds)})")


@dataclass(frozen=True)
class Chapter:
    """``[[chapter]]``: a handout chapter of no task, assignment/text/<text> under its own title, just before task
    ``before`` (None: after the last task, the back matter). Chapters keep the registry's order."""

    anchor: str  # the section's HTML id
    title: str
    text: str
    before: str | None = None


@dataclass(frozen=True)
class Registry:
    path: Path
    title: str
    subtitle: str
    total_points: float
    public_seed: int
    tasks: tuple[Task, ...]
    # What `make submit` packs besides the student files (the report, the feedback answers, ...), and the
    # largest file the grader takes: the same limits on both sides.
    submit_files: tuple[str, ...] = ()
    max_file_bytes: int = 5 * 1024 * 1024
    edition: str = "instructor"
    # The prompt whose generated text the student's report shows (seed 000's report question).
    report_prompt: str = ""
    # The course's academic-integrity and AI-use policy, Markdown, printed verbatim in the handout.
    integrity_policy: str = ""
    # The note on collaboration, sources and AI use the policy asks for (one of submit_files; None: no such note).
    notes_file: str | None = None
    # The theory part (None: the course has none); its points count in total_points with the tasks', but for the
    # questions of a bonus task, which come on top with the task's own (Theory.regular_points, bonus_points).
    theory: Theory | None = None
    # ``[hidden_seed] salt``: the secret the grader derives each student's hidden-test seeds from (grader/grade/seeds.py).
    # Instructor-only: None in the student edition, which leaves the table out.
    hidden_seed_salt: str | None = None
    # The handout's chapters of no task, each placed before a task or after the last one.
    chapters: tuple[Chapter, ...] = ()

    def task(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        known = ", ".join(t.id for t in self.tasks)
        raise KeyError(f"unknown task id {task_id!r} (the registry {self.path} has {known})")

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(t.id for t in self.tasks)

    @property
    def available(self) -> tuple[Task, ...]:
        return tuple(t for t in self.tasks if t.available)

    @property
    def student_files(self) -> tuple[str, ...]:
        seen: list[str] = []
        for task in self.tasks:
            for name in task.files:
                if name not in seen:
                    seen.append(name)
        return tuple(seen)
