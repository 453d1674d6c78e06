"""Grading phase 4: turn check outcomes into points and into feedback that teaches without leaking.

Points come from the registry. A task's correctness points are shared equally among the checks the
checker collected (the checker's count, not the report's); a check that reported nothing is a
failure. Performance points need every value check of the task to pass; structure checks (tiles
skipped, no score matrix) earn their own share but do not gate performance, so a correct kernel that
skips nothing still earns what the timing rubric gives it.

A check or a timing rule that did not run on this host (a GPU check on a host without a GPU, a missing
tool) is **not run**: it keeps its share, earns nothing and loses nothing, and the task says how many of
its points did not run (``TaskScore.not_run``), so a grade with checks left out never reads as complete
and a check's worth does not depend on the host. A task that could not run at all (no GPU) is all not
run. Every output says so in words (grader/grade/report.py); the instructor is told, and the preflight refuses
such hosts for real grading.

What a student sees for a failed hidden check: its kind, the size of the error against the
tolerance, the public test or make target that runs the same kind of check, and the task's hint.
Never hidden source, inputs, shapes or raw logs; only the kit's own TODO text passes through
verbatim, everything else is scrubbed of paths and capped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from assignment.checks import CHECK_KINDS
from assignment.registry import Registry, Task
from grader.grade.checker_plugin import scrub
from grader.grade.runner import TaskRun, TestOutcome
from grader.grade.scored import ScoredTest  # noqa: F401 - where report.py and the tests find it

if TYPE_CHECKING:  # a submission's theory part (grader/grade/theory.py, which builds on ScoredTest too)
    from grader.grade.theory import TheoryScore

OUTPUT_CHARS = 1500
KIND_TEXT = CHECK_KINDS | {
    "not_implemented": "not implemented yet",
    "import": "the file did not import",
    "crash": "the code crashed",
    "timeout": "too slow to finish (an infinite loop or a hang?)",
    "exception": "an error was raised",
    "impossible_time": "faster than the hardware allows (the kernel skipped work)",
}


NOT_RUN_TAG = "not run"  # a check's tag, and the words every output uses for it
RULE_ID = re.compile(r"\[(?:[^\]]*-)?rule(\d+)(?:-[^\]]*)?\]$")


@dataclass(kw_only=True)  # built with keywords only, in one place: _task_score below
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
    not_run: float = 0.0  # points of the checks and timing rules that did not run on this host

    @property
    def score(self) -> float:
        return self.correctness + self.performance

    @property
    def max_score(self) -> float:
        return self.task.points.total

    @property
    def max_ran(self) -> float:
        """The most this grading could give: the task's points less those that did not run."""
        return self.max_score - self.not_run

    @property
    def complete(self) -> bool:
        """Every check and timing rule of the task ran (its score is a grade, not part of one)."""
        return self.not_run <= 1e-9


def _cap(text: str, limit: int = OUTPUT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def student_output(task: Task, test: TestOutcome) -> str:
    """What a student sees for a hidden check."""
    if test.outcome == "passed":
        return "passed"
    if test.outcome == "skipped":
        return "not run on this grading host: its points are neither earned nor lost (the instructor has been told)"
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


def rule_of(task: Task, nodeid: str):
    """The timing rule a performance check's id names (``test_timing[rule1]``: every hidden suite parametrizes its
    timing check so), for a check that ended before it could record its rule (skipped, or failed in its setup)."""
    found = RULE_ID.search(nodeid)
    index = int(found.group(1)) if found else -1
    return task.timing[index] if 0 <= index < len(task.timing) else None


def _task_score(
    task: Task,
    run: TaskRun,
    tests: list[ScoredTest],
    *,
    correctness: float = 0.0,
    performance: float = 0.0,
    passed: int = 0,
    total: int = 0,
    instructor: list[str] | None = None,
    not_run: float = 0.0,
) -> TaskScore:
    """Every ``TaskScore`` is made here: the run's status, notes and instructor lines carried over (a run that ran
    keeps no reason), the points given by keyword."""
    return TaskScore(
        task=task,
        status=run.status,
        reason="" if run.status == "ran" else run.reason,
        correctness=correctness,
        performance=performance,
        tests=tests,
        passed=passed,
        total=total,
        notes=run.notes,
        instructor=run.instructor if instructor is None else instructor,
        run=run,
        not_run=not_run,
    )


def _whole_task(task: Task, output: str, *, ran: bool) -> ScoredTest:
    """The one scored line of a task whose checks never ran (not run here, or stopped before its checks)."""
    return ScoredTest(
        name=f"{task.id} {task.title}",
        score=0.0,
        max_score=task.points.total,
        passed=False,
        output=_cap(output, 4000),
        tags=[task.id] + ([] if ran else [NOT_RUN_TAG]),
        ran=ran,
    )


def score_task(task: Task, run: TaskRun) -> TaskScore:
    if run.status == "not_run":
        line = _whole_task(task, f"not run: {run.reason}", ran=False)
        return _task_score(task, run, [line], not_run=task.points.total)
    if run.status != "ran":
        line = _whole_task(task, f"{run.status.replace('_', ' ')}: {run.reason}", ran=True)
        return _task_score(task, run, [line])
    checks = [t for t in run.tests if not t.is_perf]
    counted = [t for t in checks if t.outcome != "skipped"]
    skipped = [t for t in checks if t.outcome == "skipped"]
    perf_tests = [t for t in run.tests if t.is_perf]
    # Shared over every check collected, run here or not: a check is worth the same on every host.
    share = task.points.correctness / len(checks) if checks else 0.0
    scored: list[ScoredTest] = []
    passed = 0
    for test in checks:
        ran = test.outcome != "skipped"
        ok = ran and test.outcome == "passed"
        passed += ok
        tags = [task.id, "structure" if test.is_structure else "correctness"] + ([] if ran else [NOT_RUN_TAG])
        scored.append(
            ScoredTest(
                name=f"{task.id} {test.display_name}",
                score=share if ok else 0.0,
                max_score=share,
                passed=ok,
                output=student_output(task, test),
                tags=tags,
                ran=ran,
            )
        )
    correctness = share * passed
    not_run = share * len(skipped)
    values_correct = all(t.outcome == "passed" for t in counted if not t.is_structure)
    performance = 0.0
    rules = {rule.name: rule for rule in task.timing}
    instructor = list(run.instructor)
    if skipped:
        instructor.append(
            f"{len(skipped)} check(s) skipped on this host: "
            + "; ".join(f"{t.display_name}: {scrub(t.message, 200)}" for t in skipped[:5])
        )
    for test in perf_tests:
        rule = rules.get(test.timing.get("rule", "")) or rule_of(task, test.nodeid)
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
        elif test.outcome == "skipped":
            instructor.append(f"timing rule '{rule.name if rule else test.display_name}' was not run on this host")
            not_run += max_points
        performance += earned
        ran = test.outcome != "skipped"
        scored.append(
            ScoredTest(
                name=f"{task.id} performance: {rule.name if rule else test.display_name}",
                score=earned,
                max_score=max_points,
                passed=earned > 0,
                output=output,
                tags=[task.id, "performance"] + ([] if ran else [NOT_RUN_TAG]),
                ran=ran,
            )
        )
    return _task_score(
        task,
        run,
        scored,
        correctness=correctness,
        performance=performance,
        passed=passed,
        total=len(counted),
        instructor=instructor,
        not_run=not_run,
    )


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
        """The points this grading could give, bonus tasks' aside (they come on top), their theory questions too."""
        regular = sum(t.max_score for t in self.tasks if not t.task.bonus)
        return regular + (self.theory.regular_max if self.theory else 0.0)

    @property
    def bonus_max(self) -> float:
        """The bonus points this grading could give on top of ``max_score``: bonus tasks and their theory questions."""
        bonus = sum(t.max_score for t in self.tasks if t.task.bonus)
        return bonus + (self.theory.bonus_max if self.theory else 0.0)

    @property
    def review(self) -> list[str]:
        lines = [f"{t.task.id}: {line}" for t in self.tasks for line in t.instructor if line.startswith("review")]
        return lines + [f"theory: {line}" for line in (self.theory.review if self.theory else [])]
