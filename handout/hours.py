"""How long each task takes: the instructor's estimate, or the beta testers' answers once there are enough.

The registry holds the instructor's estimate per task (``estimated_hours = [low, high]``). The feedback form
asks every tester for their hours per task (question ``hours``, asked once per task: ``hours_t1``, ...), and
``make feedback-summary`` aggregates the answers into ``build/feedback-summary/summary.json``. Given that file
(``python -m handout.render --hours build/feedback-summary``), a task with at least ``MIN_ANSWERS`` answers
shows their median and range instead of the estimate.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from assignment.registry import Registry, Task

# The per-task question of assignment/feedback.toml whose answers are hours.
HOURS_QUESTION = "hours"
# Fewer answers than this say more about one tester than about the task: keep the instructor's estimate.
MIN_ANSWERS = 3
SUMMARY_NAME = "summary.json"


class HoursError(ValueError):
    """The feedback summary cannot be read; the message names the file."""


@dataclass(frozen=True)
class TimeEstimate:
    low: float  # hours: the estimate's range, or the answers' minimum and maximum
    high: float
    median: float | None = None  # the testers' median (None: the instructor's estimate)
    answers: int = 0

    @property
    def from_feedback(self) -> bool:
        return self.median is not None


def read_summary(path: Path) -> dict[str, dict]:
    """question id -> its aggregate, from summary.json (or a folder holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / SUMMARY_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HoursError(
            f"{path}: no such file (make feedback-summary writes build/feedback-summary/{SUMMARY_NAME})"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise HoursError(f"{path}: not a readable feedback summary ({exc})") from None
    questions = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(questions, dict):
        raise HoursError(f'{path}: has no "questions": not the summary.json of make feedback-summary')
    return questions


def _answered(aggregate: object) -> TimeEstimate | None:
    """The testers' hours for one task, when there are enough valid ones."""
    if not isinstance(aggregate, dict):
        return None
    n, median, low, high = (aggregate.get(key) for key in ("n", "median", "min", "max"))
    numbers = (median, low, high)
    if not isinstance(n, int) or n < MIN_ANSWERS:
        return None
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in numbers):
        return None
    return TimeEstimate(low=float(low), high=float(high), median=float(median), answers=n)


def time_estimate(task: Task, questions: dict[str, dict] | None = None) -> TimeEstimate | None:
    """The testers' hours for ``task`` when the summary has enough of them, else the instructor's estimate."""
    answered = _answered((questions or {}).get(f"{HOURS_QUESTION}_{task.id}"))
    if answered is not None:
        return answered
    if task.estimated_hours is None:
        return None
    return TimeEstimate(*task.estimated_hours)


def time_estimates(registry: Registry, questions: dict[str, dict] | None = None) -> dict[str, TimeEstimate]:
    found = {task.id: time_estimate(task, questions) for task in registry.tasks}
    return {task_id: estimate for task_id, estimate in found.items() if estimate is not None}


def total(estimates: dict[str, TimeEstimate], registry: Registry) -> TimeEstimate | None:
    """The course's hours over the available tasks: the sum of the ranges, and with testers' answers for some
    task the sum of the typical hours (medians, and the middle of the other estimates) as the median."""
    tasks = registry.available
    if not tasks or any(task.id not in estimates for task in tasks):
        return None
    chosen = [estimates[task.id] for task in tasks]
    low, high = sum(e.low for e in chosen), sum(e.high for e in chosen)
    if not any(e.from_feedback for e in chosen):
        return TimeEstimate(low, high)
    typical = sum(e.median if e.from_feedback else (e.low + e.high) / 2 for e in chosen)
    return TimeEstimate(low, high, median=typical, answers=min(e.answers for e in chosen if e.from_feedback))


def describe(estimate: TimeEstimate) -> str:
    """'4–8 h (instructor's estimate)' or 'median 6.5 h (12 answers, 2–14 h)'."""
    if estimate.from_feedback:
        return (
            f"median {_hours(estimate.median)} h ({estimate.answers} beta-tester answers, "
            f"{_hours(estimate.low)}–{_hours(estimate.high)} h)"
        )
    return f"{_hours(estimate.low)}–{_hours(estimate.high)} h (instructor's estimate)"


def _hours(value: float) -> str:
    return f"{round(value, 1):g}"


def describe_total(estimate: TimeEstimate) -> str:
    """'39–82 hours', or 'about 55 hours' once testers' medians are part of it."""
    if estimate.from_feedback:
        return f"about {_hours(estimate.median)} hours"
    return f"{_hours(estimate.low)}–{_hours(estimate.high)} hours"
