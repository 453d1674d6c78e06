"""The registry's schema (assignment/tasks.toml as typed, frozen dataclasses): a task, its timing rules and thresholds,
its hidden shapes and grading limits, the theory part, the course's chapters, and ``Registry`` over them.

Each field the file sets declares what it accepts where it is defined (``registry_key``: its description, kind,
range or choices, required or its default), and assignment/registry_keys.py's one reader checks every table against
these declarations. The checks that join several keys (points that add up, an open rubric's maximum) are made by
assignment/registry.py, which loads the file (a task's: assignment/registry_tasks.py; the course-level parts':
assignment/registry_course.py)."""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assignment.registry_forms import read_draw_ranges, read_tolerance
from assignment.registry_keys import RegistryError, registry_key  # noqa: F401 - RegistryError: found here too

ASSIGNMENT_DIR = Path(__file__).resolve().parent
REGISTRY_PATH = ASSIGNMENT_DIR / "tasks.toml"
TASK_ID_PATTERN = re.compile(r"^t[1-9][0-9]*$")
DEVICES = ("any", "gpu", "hopper")  # "hopper": a GPU of compute capability 9.0 (H100, H200) only
SCAFFOLDING = ("guided", "open")
METRICS = ("time_vs_reference", "speedup_vs_naive")


@dataclass(frozen=True, kw_only=True)
class Threshold:
    at: float = registry_key(
        "the time ratio (lower is better) or speedup (higher is better), per metric", "number", above=0
    )
    points: float = registry_key("the points a measured value at or past `at` earns", "number", minimum=0)


# What a student's `make bench` can time without the reference kernels: the device copy bandwidth, cuBLAS
# and SDPA through PyTorch (its cuDNN backend too), and the model's naive path.
STUDENT_BASELINES = ("copy", "cuBLAS", "SDPA", "SDPA cuDNN", "naive path")
# "instructor": this repository's registry; "student": the bundle's copy (no hidden shapes, no reasoning), which
# grader/release/student_edition.py writes.
EDITIONS = ("instructor", "student")


@dataclass(frozen=True, kw_only=True)
class StudentTarget:
    """A timing rule restated against a baseline the student bundle has, from the reference's measured figures.

    The student's *speed* is ``baseline ms / student ms`` (for ``copy``: the student's bytes per second over the
    device copy's). ``reference`` is the reference's speed on ``gpu``. A ``time_vs_reference`` threshold ``r``
    becomes ``reference / r``; a ``speedup_vs_naive`` threshold ``s`` becomes ``naive * s``, where ``naive`` is
    the naive baseline's speed (1 when the baseline is the naive path itself). ``overhead_ms`` is time the
    grader's measurement adds to the student's call (the sandboxed worker's round trip) that a local bench does
    not see.
    """

    baseline: str = registry_key("what the student's speed is measured against", "string", choices=STUDENT_BASELINES)
    reference: float = registry_key("the reference's speed against the baseline on `gpu`", "number", above=0)
    gpu: str = registry_key("the GPU the reference's figures were measured on", "string")
    naive: float | None = registry_key("the naive baseline's speed against `baseline`", "number", above=0, default=None)
    overhead_ms: float = registry_key("time the grader's measurement adds to a call", "number", minimum=0, default=0.0)

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


@dataclass(frozen=True, kw_only=True)
class TimingRule:
    name: str = registry_key("the rule's name, as reports show it", "string")
    metric: str = registry_key("how the time is scored", "string", choices=METRICS)
    shape: dict[str, Any] = registry_key("the timed workload's shape", "table")
    reference: str = registry_key("what the student's time is compared with", "string")
    thresholds: tuple[Threshold, ...] = registry_key(
        "the levels and their points", "tables", item=Threshold, nonempty=True, expects="a list of threshold tables"
    )
    reasoning: str = registry_key(
        "where the numbers come from (the instructor's edition only)",
        "string",
        min_chars=20,
        instructor=True,
        default="",
    )
    # The reference's median time at this shape per GPU model (torch.cuda.get_device_name()), from the
    # runs the thresholds were set with; the grader's preflight refuses a GPU far slower than this.
    reference_ms: dict[str, float] = registry_key(
        "the reference's time per GPU model",
        "table",
        numbers=True,
        above=0,
        expects="a table mapping GPU names to times in ms (> 0)",
        default_factory=dict,
    )
    student: StudentTarget | None = registry_key(
        "how a student measures the rule without the reference", "table", item=StudentTarget, default=None
    )
    # The open scaffolding level's thresholds and their reasoning (``open``, ``open_reasoning``); when the task is
    # open they are also ``thresholds`` and the front of ``reasoning``.
    open_thresholds: tuple[Threshold, ...] = registry_key(
        "the open level's partial-credit levels",
        "tables",
        toml="open.thresholds",
        item=Threshold,
        nonempty=True,
        expects="a list of threshold tables",
        default=(),
    )
    open_reasoning: str = registry_key(
        "which kernels the open levels were measured on", "string", min_chars=20, default=""
    )

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


@dataclass(frozen=True, kw_only=True)
class Points:
    correctness: float = registry_key("the points of the task's checks", "number", minimum=0)
    performance: float = registry_key("the points of its timing rules", "number", minimum=0)

    @property
    def total(self) -> float:
        return self.correctness + self.performance


@dataclass(frozen=True, kw_only=True)
class HiddenShapes:
    """A hidden suite's shapes: fixed edge cases, plus ``count`` drawn from ``ranges`` with the grading seed.

    A range is ``[lo, hi]`` (integers, inclusive), ``{ choice = [...] }``, or ``{ divisor_of = "H" }``:
    a divisor of the value drawn for an earlier key (the KV heads of grouped-query attention divide
    the query heads). The drawn shapes change from one grading to the next, so no list of hidden
    shapes is ever complete.
    """

    fixed: tuple[dict[str, Any], ...] = registry_key(
        "the edge cases every grading runs", "tables", toml="shapes", default=()
    )
    count: int = registry_key("how many shapes each grading draws", "integer", toml="draw.count", minimum=0, default=0)
    ranges: dict[str, Any] = registry_key(
        "what each key of a drawn shape is drawn from",
        "table",
        toml="draw",
        read=read_draw_ranges,
        default_factory=dict,
    )

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


@dataclass(frozen=True, kw_only=True)
class Grading:
    """How long the grader lets a task run: the whole suite, and any one check."""

    # Required when the task has a [task.grading] table; these defaults hold for a task without one.
    timeout_s: float = registry_key("the whole suite's limit", "number", above=0, required=True, default=600.0)
    test_deadline_s: float = registry_key("any one check's limit", "number", above=0, required=True, default=120.0)
    reasoning: str = registry_key(
        "how the limits were measured (the instructor's edition only)", "string", instructor=True, default=""
    )
    # The open scaffolding level of a task without timing rules: how its checks (structure bounds, deadlines) were
    # measured on honest simpler designs, the instructor's open-level fixtures. Instructor-only, like reasoning.
    open_reasoning: str = registry_key("which designs the checks were run on", "string", min_chars=20, default="")
    # On a host with cores to spare, the task's checks are dealt to this many checker processes that run side by side,
    # by their `cost` markers (a long task's slow checks in different ones: grader/grade/phases.py).
    shards: int = registry_key("checker processes side by side", "integer", minimum=1, maximum=8, default=1)


@dataclass(frozen=True, kw_only=True)
class PythonRules:
    """What a task's Python files may import and must not name (``assignment.policy``)."""

    imports: tuple[str, ...] = registry_key("the modules the task's files may import", "strings", default=())
    forbidden: tuple[str, ...] = registry_key("the names they must not use", "strings", default=())


@dataclass(frozen=True, kw_only=True)
class Task:
    id: str = registry_key("the task's id", "string", pattern=TASK_ID_PATTERN, expects="a task id like t1, t2, ...")
    slug: str = registry_key("the task's name in paths", "string")
    title: str = registry_key("the task's title", "string")
    available: bool = registry_key("whether students get the task", "bool")
    device: str = registry_key("where its code runs", "string", choices=DEVICES)
    files: tuple[str, ...] = registry_key("the student's files", "strings", nonempty=True)
    text: str = registry_key("its handout text in assignment/text/", "string")
    summary: str = registry_key("one line on what the student writes", "string")
    hint: str = registry_key("what a failed hidden check tells the student", "string", clean=str.strip)
    points: Points = registry_key("the task's points", "table", item=Points)
    tolerance: dict[str, dict[str, float]] = registry_key(
        "the bounds each check reads by name", "table", read=read_tolerance, default_factory=dict
    )
    public_shapes: tuple[dict[str, Any], ...] = registry_key(
        "the public tests' shapes", "tables", toml="shapes.public", default=()
    )
    hidden: HiddenShapes = registry_key(
        "the hidden suite's shapes", "table", item=HiddenShapes, default_factory=HiddenShapes
    )
    timing: tuple[TimingRule, ...] = registry_key("the timing rubric", "tables", item=TimingRule, default=())
    rules: PythonRules = registry_key(
        "what its Python files may use", "table", item=PythonRules, default_factory=PythonRules
    )
    grading: Grading = registry_key("the grader's time limits", "table", item=Grading, default_factory=Grading)
    # "guided": the starter's TODO regions with their plans; "open": the student designs the kernel body (the
    # solution's OPEN blocks; assignment/markers.py), and the timing rules use their `open` thresholds.
    scaffolding: str = registry_key("the scaffolding level", "string", choices=SCAFFOLDING, default="guided")
    # What a student can do after the task (the handout lists them; required for available tasks).
    objectives: tuple[str, ...] = registry_key(
        "what a student can do after the task", "strings", clean=lambda text: " ".join(text.split()), default=()
    )
    # The instructor's estimate of a student's hours, (low, high); the handout shows the beta testers' median
    # instead once the feedback form has enough answers (handout/hours.py).
    estimated_hours: tuple[float, float] | None = registry_key(
        "the hours a student needs, [low, high]", "numbers", length=2, above=0, default=None
    )
    # A bonus task's points come on top of the course's total_points (the instructor's choice: `bonus = true`).
    bonus: bool = registry_key("whether its points come on top of total_points", "bool", default=False)

    def hidden_shapes(self, seed: int) -> tuple[dict[str, Any], ...]:
        """The hidden suite's shapes for one grading (fixed ones first, then those drawn from ``seed``)."""
        return self.hidden.draw(seed)

    @property
    def needs_gpu(self) -> bool:
        return self.device in ("gpu", "hopper")

    @property
    def needs_hopper(self) -> bool:
        """Whether its code runs only on a Hopper GPU (sm_90a: wgmma, TMA, setmaxnreg)."""
        return self.device == "hopper"

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


# The theory part's kinds of numeric question (assignment/theory/kinds.py, kinds_tensor_cores.py and
# kinds_hopper.py word and draw each one).
THEORY_KINDS = (
    "hbm",
    "smem",
    "roofline",
    "online_softmax",
    "split_kv",
    "fragments",
    "bank_conflicts",
    "attention_intensity",
    "pipeline_depth",
    "register_budget",
    "fp8_intensity",
)


@dataclass(frozen=True, kw_only=True)
class TheoryKind:
    """One kind of numeric theory question: its points (shared equally by its ``count`` instances and their
    answers) and the relative tolerance of an answer, |answer - key| <= rtol * |key| (0: exact).

    A kind may belong to a task (``task = "t8"``): its points are then that task's, bonus points when the task is a
    bonus task (``bonus``, copied from the task's flag, so that the task's one switch moves both)."""

    name: str  # its key in [theory.questions], one of THEORY_KINDS
    title: str = registry_key("the question's title", "string")
    points: float = registry_key("the kind's points", "number", above=0)
    count: int = registry_key("how many questions of the kind", "integer", minimum=1, default=1)
    rtol: float = registry_key("an answer's relative tolerance", "number", minimum=0, below=0.5)
    task: str | None = registry_key("the task whose points these are", "task", default=None)
    bonus: bool = False  # the task's own flag


@dataclass(frozen=True, kw_only=True)
class RubricItem:
    points: float = registry_key("the criterion's points", "number", minimum=0)
    criterion: str = registry_key("what earns them", "string", clean=str.strip)


@dataclass(frozen=True, kw_only=True)
class Theory:
    """``[theory]``: questions drawn per student (``make theory``), graded by ``grader/grade/theory.py``."""

    salt: str = registry_key(
        "drawn into every student's numbers with the id: a new salt, new numbers", "string", min_chars=4
    )
    answers_file: str = registry_key("what `make theory` writes and `make submit` packs", "string")
    kinds: tuple[TheoryKind, ...] = registry_key(
        "the kinds of question asked",
        "table",
        toml="questions",
        item=TheoryKind,
        named="name",
        choices=THEORY_KINDS,
        expects="a kind of question",
        nonempty=True,
    )
    proof_title: str = registry_key("the written proof's title", "string", toml="proof.title")
    proof_points: float = registry_key("the written proof's points", "number", toml="proof.points", minimum=0)
    # The written proof's, instructor-only: () in the student edition.
    rubric: tuple[RubricItem, ...] = registry_key(
        "how the proof is marked (the instructor's edition only)",
        "tables",
        toml="rubric.items",
        item=RubricItem,
        instructor=True,
        default=(),
    )

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


@dataclass(frozen=True, kw_only=True)
class Chapter:
    """``[[chapter]]``: a handout chapter of no task, assignment/text/<text> under its own title, just before task
    ``before`` (None: after the last task, the back matter). Chapters keep the registry's order."""

    anchor: str = registry_key("the section's HTML id", "string")
    title: str = registry_key("the chapter's title", "string")
    text: str = registry_key("its text in assignment/text/", "string")
    before: str | None = registry_key("the task it precedes (left out: after the last task)", "task", default=None)


@dataclass(frozen=True, kw_only=True)
class Registry:
    # The keys of [course]; the other fields come from the file's other tables (assignment/registry.py).
    path: Path
    title: str = registry_key("the course's title", "string")
    subtitle: str = registry_key("the handout's subtitle", "string", default="")
    total_points: float = registry_key("the tasks' points and the theory's, bonus points aside", "number", minimum=0)
    public_seed: int = registry_key("the public tests' seed", "integer", default=0)
    tasks: tuple[Task, ...]
    # What `make submit` packs besides the student files (the report, the feedback answers, ...), and the
    # largest file the grader takes: the same limits on both sides.
    submit_files: tuple[str, ...] = registry_key(
        "what `make submit` packs besides the student files",
        "strings",
        pattern=re.compile(r"^[^/]+$"),
        expects="a list of plain file names",
        default=(),
    )
    max_file_bytes: int = registry_key(
        "the largest file the grader takes", "integer", above=0, required=True, default=5 * 1024 * 1024
    )
    edition: str = registry_key("which copy of the registry this is", "string", choices=EDITIONS, default="instructor")
    # The prompt whose generated text the student's report shows (seed 000's report question).
    report_prompt: str = registry_key("the prompt the student's report generates from", "string", default="")
    # The course's academic-integrity and AI-use policy, Markdown, printed verbatim in the handout.
    integrity_policy: str = registry_key(
        "the integrity policy", "string", clean=str.strip, expects="a string (Markdown)", default=""
    )
    # The note on collaboration, sources and AI use the policy asks for (one of submit_files; None: no such note).
    notes_file: str | None = registry_key("the note the integrity policy asks for", "string", default=None)
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
