"""Turn test outcomes into points through the registry."""

from __future__ import annotations

from dataclasses import dataclass, field

from assignment.registry import Registry, Task
from grader.runner import TaskRun, TestOutcome


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

    @property
    def score(self) -> float:
        return self.correctness + self.performance

    @property
    def max_score(self) -> float:
        return self.task.points.total


def student_output(task: Task, test: TestOutcome) -> str:
    """What a student sees for a hidden test: never its source, shapes or expected values."""
    if test.outcome == "passed":
        return "passed"
    message = test.message.strip()
    if message.startswith("NotImplementedError"):
        return message.splitlines()[0]
    if test.outcome == "skipped":
        return f"skipped: {message.splitlines()[-1] if message else 'no reason given'}"
    kind = message.split(":", 1)[0] if message else "failure"
    kind = kind if kind.isidentifier() else "AssertionError"
    return f"A hidden check failed ({kind}). Hint: {task.hint}"


def score_task(task: Task, run: TaskRun) -> TaskScore:
    if run.status != "ran":
        output = f"{run.status.replace('_', ' ')}: {run.reason}"
        return TaskScore(task, run.status, run.reason, 0.0, 0.0, [
            ScoredTest(f"{task.id} {task.title}", 0.0, task.points.total, False, output, [task.id])
        ])
    correctness_tests = [t for t in run.tests if not t.is_perf]
    perf_tests = [t for t in run.tests if t.is_perf]
    share = task.points.correctness / len(correctness_tests) if correctness_tests else 0.0
    scored: list[ScoredTest] = []
    passed = 0
    for test in correctness_tests:
        ok = test.outcome == "passed"
        passed += ok
        scored.append(ScoredTest(f"{task.id} {test.display_name}", share if ok else 0.0, share, ok,
                                 student_output(task, test), [task.id, "correctness"]))
    correctness = share * passed
    all_correct = passed == len(correctness_tests)
    performance = 0.0
    rules = {rule.name: rule for rule in task.timing}
    for test in perf_tests:
        rule = rules.get(test.timing.get("rule", ""))
        max_points = rule.max_points if rule else 0.0
        earned, output = 0.0, student_output(task, test)
        if rule and test.outcome == "passed":
            value = test.timing.get("value")
            earned = rule.points_for(value) if all_correct else 0.0
            unit = "x the reference time" if rule.metric == "time_vs_reference" else "x speedup over naive"
            output = f"{rule.name}: {value:.3g}{unit}; {earned:g} of {max_points:g} points"
            if not all_correct:
                output += " (performance points need every correctness check to pass)"
        performance += earned
        scored.append(ScoredTest(f"{task.id} performance: {rule.name if rule else test.display_name}", earned,
                                 max_points, earned > 0, output, [task.id, "performance"]))
    return TaskScore(task, "ran", "", correctness, performance, scored, passed, len(correctness_tests))


@dataclass
class SubmissionScore:
    name: str
    tasks: list[TaskScore]
    notes: list[str]
    duration_s: float

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tasks)

    def max_score(self, registry: Registry) -> float:
        return sum(t.max_score for t in self.tasks)
