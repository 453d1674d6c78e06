"""Typed loader for the assignment registry (``assignment/tasks.toml``).

Every number the handout, the tests, the grader and the report use comes from
here. ``load_registry()`` validates the file and raises ``RegistryError`` with
the file, the task and the field when something is missing or inconsistent.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import tomllib

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


def _require(table: dict, key: str, kind: type | tuple, path: Path, task: str | None, prefix: str = ""):
    name = f"{prefix}{key}"
    if key not in table:
        raise RegistryError(path, task, name, "is missing")
    value = table[key]
    if kind is float:
        kind = (int, float)
    if isinstance(value, bool) and kind in ((int, float), int):
        raise RegistryError(path, task, name, f"must be a number, not {value!r}")
    if not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise RegistryError(path, task, name, f"must be {expected}, got {type(value).__name__} {value!r}")
    return value


def _parse_thresholds(raw: Any, path: Path, task_id: str, prefix: str) -> tuple[Threshold, ...]:
    if not isinstance(raw, list) or not raw:
        raise RegistryError(path, task_id, prefix + "thresholds", "must list at least one threshold")
    thresholds = []
    for j, th in enumerate(raw):
        tprefix = f"{prefix}thresholds[{j}]."
        at = float(_require(th, "at", float, path, task_id, tprefix))
        pts = float(_require(th, "points", float, path, task_id, tprefix))
        if at <= 0 or pts < 0:
            raise RegistryError(path, task_id, tprefix[:-1], "needs at > 0 and points >= 0")
        thresholds.append(Threshold(at, pts))
    return tuple(thresholds)


def _parse_open_rubric(
    item: dict, thresholds: tuple[Threshold, ...], path: Path, task_id: str, prefix: str, edition: str
) -> tuple[tuple[Threshold, ...], str] | None:
    """A rule's ``open = { thresholds = [...] }`` and ``open_reasoning``: the partial-credit levels for the open
    scaffolding level, calibrated on simpler honest kernels. Same maximum as the guided thresholds."""
    raw = item.get("open")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RegistryError(path, task_id, prefix + "open", "must be a table { thresholds = [...] }")
    opened = _parse_thresholds(raw.get("thresholds"), path, task_id, prefix + "open.")
    if not math.isclose(max(t.points for t in opened), max(t.points for t in thresholds)):
        raise RegistryError(path, task_id, prefix + "open.thresholds", "must award the same maximum as the guided ones")
    reasoning = str(item.get("open_reasoning", ""))
    if edition != "student" and len(reasoning.strip()) < 20:
        raise RegistryError(
            path, task_id, prefix + "open_reasoning", "must say which kernels the levels were measured on"
        )
    return opened, reasoning


def _parse_timing(
    raw: Any, path: Path, task_id: str, edition: str = "instructor", scaffolding: str = "guided"
) -> tuple[TimingRule, ...]:
    if not isinstance(raw, list):
        raise RegistryError(path, task_id, "timing", "must be an array of tables ([[task.timing]])")
    rules = []
    for i, item in enumerate(raw):
        prefix = f"timing[{i}]."
        metric = _require(item, "metric", str, path, task_id, prefix)
        if metric not in METRICS:
            raise RegistryError(path, task_id, prefix + "metric", f"must be one of {METRICS}, got {metric!r}")
        thresholds = _parse_thresholds(_require(item, "thresholds", list, path, task_id, prefix), path, task_id, prefix)
        if edition == "student":  # the bundle's copy: the reasoning stays with the instructor
            reasoning = str(item.get("reasoning", ""))
        else:
            reasoning = _require(item, "reasoning", str, path, task_id, prefix)
            if len(reasoning.strip()) < 20:
                raise RegistryError(path, task_id, prefix + "reasoning", "must say where the numbers come from")
        opened = _parse_open_rubric(item, thresholds, path, task_id, prefix, edition)
        if scaffolding == "open":
            if opened is None:
                raise RegistryError(
                    path,
                    task_id,
                    prefix + "open",
                    "is missing: an open task's timing rules need "
                    "partial-credit levels measured on simpler kernels (open = { thresholds, reasoning })",
                )
            thresholds, reasoning = opened[0], (opened[1] + " " + reasoning).strip()
        student_target = _parse_student_target(item.get("student"), metric, path, task_id, prefix)
        rules.append(
            TimingRule(
                name=_require(item, "name", str, path, task_id, prefix),
                metric=metric,
                shape=dict(_require(item, "shape", dict, path, task_id, prefix)),
                reference=_require(item, "reference", str, path, task_id, prefix),
                thresholds=tuple(thresholds),
                reasoning=reasoning,
                reference_ms=_parse_reference_ms(item.get("reference_ms", {}), path, task_id, prefix),
                student=student_target,
                open_thresholds=opened[0] if opened else (),
                open_reasoning=opened[1] if opened else "",
            )
        )
    return tuple(rules)


def _parse_student_target(raw: Any, metric: str, path: Path, task_id: str, prefix: str) -> StudentTarget | None:
    if raw is None:
        return None
    where = prefix + "student"
    if not isinstance(raw, dict):
        raise RegistryError(path, task_id, where, "must be a table { baseline = ..., reference = ..., gpu = ... }")
    baseline = _require(raw, "baseline", str, path, task_id, where + ".")
    if baseline not in STUDENT_BASELINES:
        raise RegistryError(path, task_id, where + ".baseline", f"must be one of {STUDENT_BASELINES}, got {baseline!r}")
    reference = float(_require(raw, "reference", float, path, task_id, where + "."))
    naive = raw.get("naive")
    if metric == "speedup_vs_naive" and baseline != "naive path" and naive is None:
        raise RegistryError(
            path,
            task_id,
            where + ".naive",
            "is missing: a speedup rule restated against another baseline needs the naive speed on it",
        )
    if naive is not None and (isinstance(naive, bool) or not isinstance(naive, (int, float)) or naive <= 0):
        raise RegistryError(path, task_id, where + ".naive", "must be a number > 0")
    overhead = raw.get("overhead_ms", 0.0)
    if isinstance(overhead, bool) or not isinstance(overhead, (int, float)) or overhead < 0:
        raise RegistryError(path, task_id, where + ".overhead_ms", "must be a number >= 0")
    if reference <= 0:
        raise RegistryError(path, task_id, where + ".reference", "must be > 0")
    unknown = set(raw) - {"baseline", "reference", "naive", "overhead_ms", "gpu"}
    if unknown:
        raise RegistryError(path, task_id, where, f"unknown field {sorted(unknown)[0]!r}")
    return StudentTarget(
        baseline=baseline,
        reference=reference,
        gpu=_require(raw, "gpu", str, path, task_id, where + "."),
        naive=None if naive is None else float(naive),
        overhead_ms=float(overhead),
    )


def _parse_reference_ms(raw: Any, path: Path, task_id: str, prefix: str) -> dict[str, float]:
    if not isinstance(raw, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in raw.values()):
        raise RegistryError(path, task_id, prefix + "reference_ms", "must map GPU names to times in ms (> 0)")
    return {str(k): float(v) for k, v in raw.items()}


def _parse_hidden(raw: Any, path: Path, task_id: str) -> HiddenShapes:
    if not isinstance(raw, dict):
        raise RegistryError(path, task_id, "hidden", "must be a table ([task.hidden])")
    fixed = tuple(dict(s) for s in raw.get("shapes", []))
    draw = raw.get("draw", {})
    count = int(draw.get("count", 0))
    ranges = {k: v for k, v in draw.items() if k != "count"}
    for position, (key, spec) in enumerate(ranges.items()):
        ok_range = (
            isinstance(spec, list) and len(spec) == 2 and all(isinstance(x, int) for x in spec) and spec[0] <= spec[1]
        )
        ok_choice = (
            isinstance(spec, dict) and set(spec) == {"choice"} and isinstance(spec["choice"], list) and spec["choice"]
        )
        ok_divisor = (
            isinstance(spec, dict)
            and set(spec) == {"divisor_of"}
            and _positive_ints_before(ranges, position, spec["divisor_of"])
        )
        if not (ok_range or ok_choice or ok_divisor):
            raise RegistryError(
                path,
                task_id,
                f"hidden.draw.{key}",
                "must be [lo, hi] (integers, lo <= hi), "
                '{ choice = [...] } or { divisor_of = "KEY" } naming an earlier key drawn from '
                "positive integers",
            )
    if count and fixed and set(ranges) != set(fixed[0]):
        raise RegistryError(path, task_id, "hidden.draw", f"must give a range for each of {sorted(fixed[0])}")
    for key, spec in ranges.items():
        if isinstance(spec, dict) and "divisor_of" in spec:
            for i, shape in enumerate(fixed):
                of = spec["divisor_of"]
                if (
                    key in shape
                    and of in shape
                    and not (isinstance(shape[key], int) and shape[key] > 0 and shape[of] % shape[key] == 0)
                ):
                    raise RegistryError(
                        path,
                        task_id,
                        f"hidden.shapes[{i}].{key}",
                        f"must divide {of} (= {shape[of]}) as the draw does, got {shape[key]!r}",
                    )
    return HiddenShapes(fixed, count, ranges)


def _positive_ints_before(ranges: dict[str, Any], position: int, key: Any) -> bool:
    """Whether ``key`` is drawn before ``position`` and only ever takes positive integers."""
    earlier = dict(list(ranges.items())[:position])
    spec = earlier.get(key) if isinstance(key, str) else None
    if isinstance(spec, list):
        return isinstance(spec[0], int) and spec[0] >= 1
    if isinstance(spec, dict) and "choice" in spec:
        return all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in spec["choice"])
    return isinstance(spec, dict) and "divisor_of" in spec


# What a [task.tolerance] entry bounds: atol and rtol together (an element-wise comparison), the fp16/bf16
# rule's max_mean_error_ratio (t1), or the FlashAttention repository's rule for fp16/bf16 kernels: the largest
# error at most max_error_ratio times that of PyTorch computing in the same dtype, plus atol (t8). Every test reads
# its bounds by the entry's name (Task.tol).
TOLERANCE_BOUNDS = (
    frozenset({"atol", "rtol"}),
    frozenset({"max_mean_error_ratio"}),
    frozenset({"max_error_ratio", "atol"}),
)


def _parse_tolerance(raw: Any, path: Path, task_id: str) -> dict[str, dict[str, float]]:
    if not isinstance(raw, dict):
        raise RegistryError(path, task_id, "tolerance", "must be a table ([task.tolerance])")
    parsed = {}
    for name, bounds in raw.items():
        where = f"tolerance.{name}"
        if not isinstance(bounds, dict) or frozenset(bounds) not in TOLERANCE_BOUNDS:
            raise RegistryError(
                path,
                task_id,
                where,
                "must be a table { atol = ..., rtol = ... } (or { max_mean_error_ratio = ... }, or "
                "{ max_error_ratio = ..., atol = ... })",
            )
        for key, value in bounds.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise RegistryError(path, task_id, f"{where}.{key}", f"must be a number >= 0, got {value!r}")
        parsed[name] = {key: float(value) for key, value in bounds.items()}
    return parsed


def _parse_rules(raw: Any, path: Path, task_id: str) -> PythonRules:
    for key in ("imports", "forbidden"):
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise RegistryError(path, task_id, f"rules.{key}", "must be a list of names")
    return PythonRules(tuple(raw.get("imports", [])), tuple(raw.get("forbidden", [])))


def _parse_objectives(raw: Any, path: Path, task_id: str, available: bool) -> tuple[str, ...]:
    if raw is None:
        raw = []
    if not isinstance(raw, list) or not all(isinstance(o, str) and o.strip() for o in raw):
        raise RegistryError(path, task_id, "objectives", "must be a list of non-empty strings")
    if available and not raw:
        raise RegistryError(path, task_id, "objectives", "is missing (available tasks list their learning objectives)")
    return tuple(" ".join(o.split()) for o in raw)


def _parse_estimated_hours(raw: Any, path: Path, task_id: str, available: bool) -> tuple[float, float] | None:
    if raw is None:
        if available:
            raise RegistryError(path, task_id, "estimated_hours", "is missing (available tasks need a time estimate)")
        return None
    ok = (
        isinstance(raw, list)
        and len(raw) == 2
        and all(isinstance(h, (int, float)) and not isinstance(h, bool) for h in raw)
    )
    if not ok or not 0 < raw[0] <= raw[1]:
        raise RegistryError(
            path, task_id, "estimated_hours", f"must be [low, high] hours with 0 < low <= high, got {raw!r}"
        )
    return float(raw[0]), float(raw[1])


def _parse_grading(raw: Any, path: Path, task_id: str, edition: str = "instructor") -> Grading:
    if not raw:
        return Grading()
    timeout = float(_require(raw, "timeout_s", float, path, task_id, "grading."))
    deadline = float(_require(raw, "test_deadline_s", float, path, task_id, "grading."))
    if not 0 < deadline <= timeout:
        raise RegistryError(path, task_id, "grading", "needs 0 < test_deadline_s <= timeout_s")
    opened = str(raw.get("open_reasoning", ""))
    shards = raw.get("shards", 1)
    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= 8:
        raise RegistryError(path, task_id, "grading.shards", f"must be a whole number from 1 to 8, got {shards!r}")
    if edition == "student":
        return Grading(timeout, deadline, str(raw.get("reasoning", "")), opened, shards)
    if "open_reasoning" in raw and len(opened.strip()) < 20:
        raise RegistryError(path, task_id, "grading.open_reasoning", "must say which designs the checks were run on")
    return Grading(timeout, deadline, _require(raw, "reasoning", str, path, task_id, "grading."), opened, shards)


def parse_registry(data: dict, path: Path) -> Registry:
    course = _require(data, "course", dict, path, None)
    tasks_raw = _require(data, "task", list, path, None)
    edition = course.get("edition", "instructor")
    if edition not in EDITIONS:
        raise RegistryError(path, None, "course.edition", f"must be one of {EDITIONS}, got {edition!r}")
    tasks: list[Task] = []
    seen_ids: set[str] = set()
    for index, raw in enumerate(tasks_raw):
        task_id = raw.get("id") if isinstance(raw, dict) else None
        label = task_id if isinstance(task_id, str) else f"#{index + 1}"
        task_id = _require(raw, "id", str, path, label)
        if not TASK_ID_PATTERN.match(task_id):
            raise RegistryError(path, task_id, "id", "must look like t1, t2, ... (unknown task id)")
        if task_id in seen_ids:
            raise RegistryError(path, task_id, "id", "is defined twice")
        seen_ids.add(task_id)
        device = _require(raw, "device", str, path, task_id)
        if device not in DEVICES:
            raise RegistryError(path, task_id, "device", f"must be one of {DEVICES}, got {device!r}")
        files = _require(raw, "files", list, path, task_id)
        if not files or not all(isinstance(f, str) and f for f in files):
            raise RegistryError(path, task_id, "files", "must list at least one file name")
        points_raw = _require(raw, "points", dict, path, task_id)
        points = Points(
            correctness=float(_require(points_raw, "correctness", float, path, task_id, "points.")),
            performance=float(_require(points_raw, "performance", float, path, task_id, "points.")),
        )
        if points.correctness < 0 or points.performance < 0:
            raise RegistryError(path, task_id, "points", "must not be negative")
        bonus = raw.get("bonus", False)
        if not isinstance(bonus, bool):
            raise RegistryError(path, task_id, "bonus", f"must be true or false, got {bonus!r}")
        scaffolding = raw.get("scaffolding", "guided")
        if scaffolding not in SCAFFOLDING:
            raise RegistryError(path, task_id, "scaffolding", f"must be one of {SCAFFOLDING}, got {scaffolding!r}")
        timing = _parse_timing(raw.get("timing", []), path, task_id, edition, scaffolding)
        timing_points = sum(rule.max_points for rule in timing)
        grading = _parse_grading(raw.get("grading", {}), path, task_id, edition)
        if scaffolding == "open" and not timing and edition != "student" and not grading.open_reasoning:
            raise RegistryError(
                path,
                task_id,
                "grading.open_reasoning",
                "is missing: an open task without timing rules says how its checks were run on honest simpler "
                "designs (the open level's fixtures)",
            )
        available = _require(raw, "available", bool, path, task_id)
        if available and any(rule.student is None for rule in timing):
            raise RegistryError(
                path,
                task_id,
                "timing.student",
                "is missing: every timing rule of an available task "
                "says how a student measures it without the reference (student = {...})",
            )
        if available and not math.isclose(timing_points, points.performance):
            raise RegistryError(
                path,
                task_id,
                "points.performance",
                f"is {points.performance:g} but the timing rubric awards at most {timing_points:g}; they must add up",
            )
        shapes = raw.get("shapes", {})
        tolerance = _parse_tolerance(raw.get("tolerance", {}), path, task_id)
        hidden = _parse_hidden(raw.get("hidden", {}), path, task_id)
        if available:
            if not shapes.get("public"):
                raise RegistryError(path, task_id, "shapes.public", "is missing (available tasks need test shapes)")
            if not tolerance:
                raise RegistryError(path, task_id, "tolerance", "is missing (available tasks need tolerances)")
        tasks.append(
            Task(
                id=task_id,
                slug=_require(raw, "slug", str, path, task_id),
                title=_require(raw, "title", str, path, task_id),
                available=available,
                device=device,
                files=tuple(files),
                text=_require(raw, "text", str, path, task_id),
                summary=_require(raw, "summary", str, path, task_id),
                hint=_require(raw, "hint", str, path, task_id).strip(),
                points=points,
                tolerance=tolerance,
                public_shapes=tuple(dict(s) for s in shapes.get("public", [])),
                hidden=hidden,
                timing=timing,
                rules=_parse_rules(raw.get("rules", {}), path, task_id),
                grading=grading,
                scaffolding=scaffolding,
                objectives=_parse_objectives(raw.get("objectives"), path, task_id, available),
                estimated_hours=_parse_estimated_hours(raw.get("estimated_hours"), path, task_id, available),
                bonus=bonus,
            )
        )
    numbers = sorted(t.number for t in tasks)
    if numbers != list(range(1, len(numbers) + 1)):
        raise RegistryError(path, None, "task", f"task ids must be t1..t{len(numbers)} without gaps, got {numbers}")
    student_files = {name for t in tasks for name in t.files}
    total = float(_require(course, "total_points", float, path, None, "course."))
    submit_files = _parse_submit_files(course.get("submit_files", []), path, student_files)
    theory = (
        _parse_theory(data["theory"], path, edition, submit_files, {t.id: t.bonus for t in tasks})
        if "theory" in data
        else None
    )
    policy = _parse_policy(course.get("integrity_policy", ""), path)
    summed = sum(t.points.total for t in tasks if not t.bonus)  # bonus points come on top of the total
    if not math.isclose(total, summed + (theory.regular_points if theory else 0.0)):
        with_theory = (
            f" and the theory's to {theory.regular_points:g} ({summed + theory.regular_points:g} in all)"
            if theory
            else ""
        )
        bonus = [t.id for t in tasks if t.bonus]
        aside = f"; bonus tasks and their theory questions aside ({', '.join(bonus)})" if bonus else ""
        raise RegistryError(
            path,
            None,
            "course.total_points",
            f"is {total:g} but the tasks' points add up to {summed:g}{with_theory}{aside}",
        )
    return Registry(
        path=path,
        title=_require(course, "title", str, path, None, "course."),
        subtitle=course.get("subtitle", ""),
        total_points=total,
        public_seed=int(course.get("public_seed", 0)),
        tasks=tuple(tasks),
        submit_files=submit_files,
        max_file_bytes=int(_require(course, "max_file_bytes", int, path, None, "course.")),
        edition=edition,
        report_prompt=str(course.get("report_prompt", "")),
        integrity_policy=policy,
        notes_file=_parse_notes_file(course.get("notes_file"), path, submit_files, policy),
        theory=theory,
        hidden_seed_salt=_parse_hidden_seed(data.get("hidden_seed"), path, theory, edition),
        chapters=_parse_chapters(data.get("chapter", []), path, tuple(t.id for t in tasks)),
    )


def _parse_chapters(raw: Any, path: Path, task_ids: tuple[str, ...]) -> tuple[Chapter, ...]:
    if not isinstance(raw, list):
        raise RegistryError(path, None, "chapter", "must be an array of tables ([[chapter]])")
    chapters: list[Chapter] = []
    for index, item in enumerate(raw):
        where = f"chapter[{index}]."
        if not isinstance(item, dict):
            raise RegistryError(path, None, where[:-1], "must be a table { anchor, title, text, before }")
        unknown = set(item) - {"anchor", "title", "text", "before"}
        if unknown:
            raise RegistryError(path, None, where[:-1], f"unknown field {sorted(unknown)[0]!r}")
        chapter = Chapter(
            _require(item, "anchor", str, path, None, where),
            _require(item, "title", str, path, None, where),
            _require(item, "text", str, path, None, where),
            item.get("before"),
        )
        if chapter.before is not None and chapter.before not in task_ids:
            raise RegistryError(
                path,
                None,
                where + "before",
                f"{chapter.before!r} is not a task id ({', '.join(task_ids)}); leave it out to place the chapter "
                "after the last task",
            )
        if chapter.anchor in task_ids or chapter.anchor in (c.anchor for c in chapters):
            raise RegistryError(path, None, where + "anchor", f"{chapter.anchor!r} is taken (a task or a chapter)")
        chapters.append(chapter)
    return tuple(chapters)


# A hidden-seed salt shorter than this is refused: it is the only secret between a student's id and their hidden inputs.
MIN_SALT_CHARS = 16


def _parse_hidden_seed(raw: Any, path: Path, theory: Theory | None, edition: str) -> str | None:
    if raw is None:
        return None
    if edition == "student":
        raise RegistryError(path, None, "hidden_seed", "is in a student edition: the salt must never ship")
    if not isinstance(raw, dict) or set(raw) != {"salt"}:
        raise RegistryError(path, None, "hidden_seed", "must be a table with one field, salt")
    salt = _require(raw, "salt", str, path, None, "hidden_seed.")
    if len(salt.strip()) < MIN_SALT_CHARS:
        raise RegistryError(
            path,
            None,
            "hidden_seed.salt",
            f"must be a secret of {MIN_SALT_CHARS} characters or "
            "more (python -c 'import secrets; print(secrets.token_hex(16))' makes one)",
        )
    if theory is not None and salt.strip() == theory.salt.strip():
        raise RegistryError(path, None, "hidden_seed.salt", "must differ from theory.salt, which ships to students")
    return salt


def _parse_theory(
    raw: Any, path: Path, edition: str, submit_files: tuple[str, ...], task_bonus: dict[str, bool]
) -> Theory:
    """``task_bonus``: each task id and its bonus flag, which a kind that names the task takes on."""
    if not isinstance(raw, dict):
        raise RegistryError(path, None, "theory", "must be a table ([theory])")
    salt = _require(raw, "salt", str, path, None, "theory.")
    if len(salt.strip()) < 4:
        raise RegistryError(path, None, "theory.salt", "must be a string of 4 characters or more")
    answers_file = _require(raw, "answers_file", str, path, None, "theory.")
    if answers_file not in submit_files:
        raise RegistryError(
            path,
            None,
            "theory.answers_file",
            f"{answers_file!r} must be in course.submit_files, or `make submit` would not pack it",
        )
    questions = _require(raw, "questions", dict, path, None, "theory.")
    kinds = []
    for name, spec in questions.items():
        where = f"theory.questions.{name}."
        if name not in THEORY_KINDS:
            raise RegistryError(path, None, where[:-1], f"is not a kind of question: one of {THEORY_KINDS}")
        if not isinstance(spec, dict):
            raise RegistryError(path, None, where[:-1], "must be a table { title, points, count, rtol[, task] }")
        unknown = set(spec) - {"title", "points", "count", "rtol", "task"}
        if unknown:
            raise RegistryError(path, None, where[:-1], f"unknown field {sorted(unknown)[0]!r}")
        count = spec.get("count", 1)
        task = spec.get("task")
        if task is not None and (not isinstance(task, str) or task not in task_bonus):
            raise RegistryError(
                path,
                None,
                f"{where}task",
                f"names no task of the registry ({task!r}; the tasks: {', '.join(task_bonus)})",
            )
        kind = TheoryKind(
            name,
            _require(spec, "title", str, path, None, where),
            float(_require(spec, "points", float, path, None, where)),
            count if isinstance(count, int) and not isinstance(count, bool) else 0,
            float(_require(spec, "rtol", float, path, None, where)),
            task,
            task_bonus.get(task, False),
        )
        if kind.points <= 0 or kind.count < 1 or not 0 <= kind.rtol < 0.5:
            raise RegistryError(path, None, where[:-1], "needs points > 0, count >= 1 (an integer) and 0 <= rtol < 0.5")
        kinds.append(kind)
    if not kinds:
        raise RegistryError(path, None, "theory.questions", "must name at least one kind of question")
    proof = _require(raw, "proof", dict, path, None, "theory.")
    proof_points = float(_require(proof, "points", float, path, None, "theory.proof."))
    if proof_points < 0:
        raise RegistryError(path, None, "theory.proof.points", "must not be negative")
    rubric = []
    if edition != "student":  # the bundle's copy has no rubric: it stays with the instructor
        items = _require(
            _require(raw, "rubric", dict, path, None, "theory."), "items", list, path, None, "theory.rubric."
        )
        for i, item in enumerate(items):
            where = f"theory.rubric.items[{i}]."
            if not isinstance(item, dict):
                raise RegistryError(path, None, where[:-1], "must be a table { points, criterion }")
            rubric.append(
                RubricItem(
                    float(_require(item, "points", float, path, None, where)),
                    _require(item, "criterion", str, path, None, where).strip(),
                )
            )
        if not math.isclose(sum(item.points for item in rubric), proof_points):
            raise RegistryError(
                path,
                None,
                "theory.rubric.items",
                f"award {sum(i.points for i in rubric):g} points but the proof is worth {proof_points:g}",
            )
    return Theory(
        salt,
        answers_file,
        tuple(kinds),
        _require(proof, "title", str, path, None, "theory.proof."),
        proof_points,
        tuple(rubric),
    )


def _parse_policy(raw: Any, path: Path) -> str:
    if not isinstance(raw, str):
        raise RegistryError(path, None, "course.integrity_policy", "must be a string (Markdown)")
    return raw.strip()


def _parse_notes_file(raw: Any, path: Path, submit_files: tuple[str, ...], policy: str) -> str | None:
    """The integrity note's file name: packed by `make submit` (so in submit_files) and named by the policy that
    asks for it (so a student reading the policy knows where the note goes)."""
    if raw is None:
        return None
    if not isinstance(raw, str) or raw not in submit_files:
        raise RegistryError(
            path,
            None,
            "course.notes_file",
            f"{raw!r} must be in course.submit_files, or `make submit` would not pack it",
        )
    if policy and f"`{raw}`" not in policy:
        raise RegistryError(
            path,
            None,
            "course.notes_file",
            f"the integrity policy must name `{raw}`, so students know where the note goes",
        )
    return raw


def _parse_submit_files(raw: Any, path: Path, student_files: set[str]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(f, str) and f and "/" not in f for f in raw):
        raise RegistryError(path, None, "course.submit_files", "must list plain file names")
    clash = sorted(set(raw) & student_files)
    if clash:
        raise RegistryError(path, None, "course.submit_files", f"{clash[0]} is already a task's student file")
    return tuple(raw)


def load_registry(path: Path | str | None = None) -> Registry:
    """Load and validate the registry (cached for the default path)."""
    if path is None:
        return _load_default()
    return _load(Path(path))


def _load(path: Path) -> Registry:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RegistryError(path, None, "-", "file not found") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(path, None, "-", f"is not valid TOML: {exc}") from None
    return parse_registry(data, path)


@lru_cache(maxsize=1)
def _load_default() -> Registry:
    return _load(REGISTRY_PATH)


def check_markers(marker_names: set[str], registry: Registry, where: str) -> None:
    """Raise when a test uses a task marker (t<N>) the registry does not define."""
    unknown = sorted(m for m in marker_names if TASK_ID_PATTERN.match(m) and m not in registry.ids)
    if unknown:
        raise RegistryError(
            registry.path, unknown[0], "id", f"marker {unknown[0]!r} used by {where} has no task in the registry"
        )
