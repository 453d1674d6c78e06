"""Grading phase 4: turn check outcomes into points and into feedback that teaches without leaking.

Points come from the registry. A task's correctness points are shared equally among the checks the
checker collected (the checker's count, not the report's); a check that reported nothing is a
failure. Performance points need every value check of the task to pass; structure checks (tiles
skipped, no score matrix) earn their own share but do not gate performance, so a correct kernel that
skips nothing still earns what the timing rubric gives it. A check skipped on this host (a missing
tool) counts neither way and is flagged for the instructor; the preflight refuses such hosts first.

What a student sees for a failed hidden check: its kind, the size of the error against the
tolerance, the public test or make target that runs the same kind of check, and the task's hint.
Never hidden source, inputs, shapes or raw logs; only the kit's own TODO text passes through
verbatim, everything else is scrubbed of paths and capped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from assignment.checks import CHECK_KINDS
from assignment.registry import Registry, Task
from grader.checker_plugin import scrub
from grader.runner import TaskRun, TestOutcome

if TYPE_CHECKING:  # grader.theory builds on ScoredTest here
    from grader.theory import TheoryScore

OUTPUT_CHARS = 1500
KIND_TEXT = CHECK_KINDS | {
    "not_implemented": "not implemented yet",
    "import": "the file did not import",
    "crash": "the code crashed",
    "timeout": "too slow to finish (an infinite loop or a hang?)",
    "exception": "an error was raised",
    "impossible_time": "faster than the hardware allows (the kernel skipped work)",
}


@dataclass
class ScoredTest:
    name: str
    score: float
    max_score: float
    passed: bool
    output: str
    tags: list[str]


@dataclass
class TaskScore:
    task: Task
    status: str
    reason: str
    correctness: float
    performance: float
    tests: list[ScoredTest] = field(default_factory=list)
    passed: int = 0
    total: int = 0
    notes: list[str] = field(default_factory=list)
    instructor: list[str] = field(default_factory=list)
    run: TaskRun | None = None

    @property
    def score(self) -> float:
        return self.correctness + self.performance

    @property
    def max_score(self) -> float:
        return self.task.points.total


def _cap(text: str, limit: int = OUTPUT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def student_output(task: Task, test: TestOutcome) -> str:
    """What a student sees for a hidden check."""
    if test.outcome == "passed":
        return "passed"
    if test.outcome == "skipped":
        return "not run on this grading host (the instructor has been told; it does not count)"
    kind = test.check.get("kind") or ("not_implemented" if test.message.startswith("NotImplementedError") else "")
    summary = test.check.get("summary", "")
    if kind == "not_implemented":
        text = summary or test.message
        while text.startswith("NotImplementedError: "):
            text = text.removeprefix("NotImplementedError: ")
        return f"NotImplementedError: {text}"
    what = KIND_TEXT.get(kind, "a hidden check failed")
    parts = [f"{what[0].upper()}{what[1:]}"]
    if summary and summary != what:
        parts[0] += f": {scrub(summary, 1200 if kind == 'import' else 400)}"
    parts.append(f"Reproduce this kind of check locally: {test.reproduce or f'make test T={task.id}'}.")
    if kind not in ("import", "forbidden"):
        parts.append(f"Hint: {task.hint}")
    return _cap(" ".join(parts))


def score_task(task: Task, run: TaskRun) -> TaskScore:
    if run.status != "ran":
        output = f"{run.status.replace('_', ' ')}: {run.reason}"
        return TaskScore(task, run.status, run.reason, 0.0, 0.0, [
            ScoredTest(f"{task.id} {task.title}", 0.0, task.points.total, False, _cap(output, 4000), [task.id])
        ], notes=run.notes, instructor=run.instructor, run=run)
    counted = [t for t in run.tests if not t.is_perf and t.outcome != "skipped"]
    skipped = [t for t in run.tests if t.outcome == "skipped"]
    perf_tests = [t for t in run.tests if t.is_perf]
    share = task.points.correctness / len(counted) if counted else 0.0
    scored: list[ScoredTest] = []
    passed = 0
    for test in counted:
        ok = test.outcome == "passed"
        passed += ok
        tags = [task.id, "structure" if test.is_structure else "correctness"]
        scored.append(ScoredTest(f"{task.id} {test.display_name}", share if ok else 0.0, share, ok,
                                 student_output(task, test), tags))
    for test in skipped:
        scored.append(ScoredTest(f"{task.id} {test.display_name}", 0.0, 0.0, True, student_output(task, test),
                                 [task.id, "not run"]))
    correctness = share * passed
    values_correct = all(t.outcome == "passed" for t in counted if not t.is_structure)
    performance = 0.0
    rules = {rule.name: rule for rule in task.timing}
    instructor = list(run.instructor)
    if skipped:
        instructor.append(f"{len(skipped)} check(s) skipped on this host: "
                          + "; ".join(f"{t.display_name}: {scrub(t.message, 200)}" for t in skipped[:5]))
    for test in perf_tests:
        rule = rules.get(test.timing.get("rule", ""))
        max_points = rule.max_points if rule else 0.0
        earned, output = 0.0, student_output(task, test)
        if rule and test.outcome == "passed":
            value = test.timing.get("value")
            earned = rule.points_for(value) if values_correct else 0.0
            unit = "x the reference time" if rule.metric == "time_vs_reference" else "x speedup over naive"
            output = f"{rule.name}: {value:.3g}{unit}; {earned:g} of {max_points:g} points"
            if not values_correct:
                output += " (performance points need every correctness check of the values to pass)"
            if test.timing.get("review"):
                instructor.append(f"review {rule.name}: {test.timing['review']}")
        elif rule and test.outcome == "skipped":
            instructor.append(f"timing rule '{rule.name}' was skipped on this host")
        performance += earned
        scored.append(ScoredTest(f"{task.id} performance: {rule.name if rule else test.display_name}", earned,
                                 max_points, earned > 0, output, [task.id, "performance"]))
    return TaskScore(task, "ran", "", correctness, performance, scored, passed, len(counted), run.notes, instructor,
                     run)


@dataclass
class SubmissionScore:
    name: str
    tasks: list[TaskScore]
    notes: list[str]
    duration_s: float
    grading: dict = field(default_factory=dict)  # instructor-only facts: isolation, seed, host
    theory: TheoryScore | None = None  # None when the theory answers were not graded (a regrade of some tasks)

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tasks) + (self.theory.score if self.theory else 0.0)

    def max_score(self, registry: Registry) -> float:
        return sum(t.max_score for t in self.tasks) + (self.theory.max_score if self.theory else 0.0)

    @property
    def review(self) -> list[str]:
        lines = [f"{t.task.id}: {line}" for t in self.tasks for line in t.instructor if line.startswith("review")]
        return lines + [f"theory: {line}" for line in (self.theory.review if self.theory else [])]
