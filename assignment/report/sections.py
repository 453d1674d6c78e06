"""What every section of the report starts from: the numbers as the report writes them, a task's bench step as
the views see it, and the fields each task's section begins with. The views (``views.py``, ``decode_view.py``) read
these; nothing here knows a section."""

from __future__ import annotations

import math
from dataclasses import dataclass

from assignment.report.records import BenchCase, BenchRun
from assignment.report.steps import StepResult


def shown(value: float | None, spec: str, suffix: str = "") -> str:
    """``value`` in ``spec`` with ``suffix``; a dash for a value that is missing or not finite."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    return format(value, spec) + suffix


def shown_ms(value: float | None) -> str:
    """Milliseconds to four significant figures or so."""
    if value is None:
        return "–"
    return shown(value, ".1f" if value >= 100 else ".3f" if value >= 1 else ".4f")


def shown_times(value: float | None) -> str:
    """A speedup: 1.23×."""
    return shown(value, ".2f", "×")


def why_missing(result: StepResult | None) -> str:
    """Why a step has nothing to show ("" when it has)."""
    if result is None:
        return "not run"
    if result.status == "skipped":
        return result.reason or "skipped"
    return f"{result.step} {result.reason}" if result.data is None else ""


@dataclass(frozen=True)
class Bench:
    """A task's bench step as the views see it: why it has nothing to show ("" when it has), and its JSON."""

    missing: str
    run: BenchRun | None = None  # set whenever ``missing`` is empty


NOT_RUN = Bench(why_missing(None))


def student_note(case: BenchCase) -> str:
    """Why a bench row has no time of the student's kernel (the bench's own note, else its error)."""
    note = next((n for n in case.notes if n.startswith("student")), None)
    return note or case.error or "your kernel has no result"


@dataclass(frozen=True)
class TaskSection:
    """What a task's section of the report starts with."""

    id: str
    title: str
    reason: str  # why the section has nothing to show ("" when it has)
