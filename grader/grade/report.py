"""Grading phase 5: write a graded submission out.

For the student (Gradescope shows them): results.json, report.html. For the instructor: grades.csv
(cells that a spreadsheet would read as a formula are escaped) and grading.json (the isolation level,
each task's hidden seed and how it was derived, the host, review flags, notes no student sees, each task's
checker log, capped, and the theory part's written answers beside their rubric, for grading by hand).
Files are written to a temporary name and renamed, so a killed grader never leaves a half-written
result behind.

Every output says what happened, in words where a number would mislead:

* a check that did not run on this host is **not run**: in results.json an entry with no score and no
  status (Gradescope shows it without points, neither passed nor failed), in grades.csv a task cell
  ``not run`` (nothing ran) or ``0.80 (19.20 not run)`` (some of it ran) and a ``not_run`` column;
* an entry waiting for a person (the theory proof) or for another machine (grader/classroom/gradescope.py's GPU
  tasks) is **pending**: Gradescope's results.json knows two statuses, passed and failed, and calls an
  entry below its maximum failed when it has none; an entry nobody has graded yet has not failed, so it
  carries ``PENDING_STATUS`` and its name and output say it is pending (a proof left empty is failed: its
  0 is already known);
* the **leaderboard** entries (Gradescope's ``leaderboard``) are the class leaderboard's figures
  (``LEADERBOARD``: each task's figure, from its code), for a submission that opted in with a
  ``leaderboard.txt`` (``OPT_IN_FILE``; its first line is the name the class board shows, "no" opts out)
  and only behind a task whose every correctness check passed.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from assignment.atomic import write_atomic
from assignment.registry import Registry
from grader.grade.scoring import NOT_RUN_TAG, ScoredTest, SubmissionScore
from grader.grade.theory import MANUAL_TAG, TheoryScore

TEMPLATES = Path(__file__).resolve().parent / "templates"


LOG_CHARS = 4000  # of each task's checker log kept for the instructor
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
PENDING_STATUS = "passed"  # see the module docstring: the only status that does not call a pending entry failed
PENDING_TAG = "pending"

# --------------------------------------------------------------------------- the leaderboard's figures

OPT_IN_FILE = "leaderboard.txt"
OPT_IN_BYTES = 1024
ALIAS_CHARS = 40
OPT_OUT = {"no", "false", "0", "opt out", "opt-out", "none"}


@dataclass(frozen=True)
class Metric:
    """A leaderboard figure: a field of one timing rule's record (grading.json, tasks.<id>.timing)."""

    task: str
    rule: int  # the rule's index in the task's [[task.timing]] list
    field: str  # student_tflops (t3-t5 rules that know their FLOPs), student_ms, value
    label: str
    unit: str
    higher_is_better: bool


def _leaderboard() -> tuple[Metric, ...]:
    """Each task's leaderboard figure (its code's ``leaderboard``), in task order; the class board ranks by the
    first."""
    from assignment import tasks

    return tuple(
        Metric(c.id, b.rule, b.field, f"{c.id} {b.label}", b.unit, b.higher_is_better)
        for c in tasks.available()
        if (b := c.leaderboard) is not None
    )


LEADERBOARD = _leaderboard()


def leaderboard_alias(data: bytes | None) -> str | None:
    """The name a submission's leaderboard.txt opts in under; None when there is none or it opts out."""
    if data is None:
        return None
    lines = [line.strip() for line in data[:OPT_IN_BYTES].decode("utf-8", "replace").splitlines() if line.strip()]
    first = "".join(ch for ch in (lines[0] if lines else "") if ch.isprintable())[:ALIAS_CHARS].strip()
    if first.lower() in OPT_OUT:
        return None
    return first or "anonymous"


def _timing(ts, rule_name: str) -> dict | None:
    for test in ts.run.tests if ts.run else []:
        if test.is_perf and test.timing.get("rule") == rule_name:
            return test.timing
    return None


def leaderboard_entries(result: SubmissionScore) -> list[dict]:
    """Gradescope's ``leaderboard``: the opted-in figures measured in this grading, behind fully correct tasks."""
    if result.grading.get("leaderboard") is None:
        return []
    entries = []
    by_id = {ts.task.id: ts for ts in result.tasks}
    for metric in LEADERBOARD:
        ts = by_id.get(metric.task)
        if ts is None or ts.status != "ran" or metric.rule >= len(ts.task.timing):
            continue
        checks = [t for t in ts.tests if "correctness" in t.tags]
        if not checks or not all(t.ran and t.passed for t in checks):
            continue
        value = (_timing(ts, ts.task.timing[metric.rule].name) or {}).get(metric.field)
        if isinstance(value, (int, float)) and math.isfinite(value):
            entries.append(
                {
                    "name": f"{metric.label} ({metric.unit})",
                    "value": round(float(value), 4),
                    "order": "desc" if metric.higher_is_better else "asc",
                }
            )
    return entries


# --------------------------------------------------------------------------- the files


def csv_cell(value: str) -> str:
    """A CSV cell a spreadsheet shows as text, never runs as a formula."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def points_cell(score: float, not_run: float, max_score: float) -> str:
    """A task's points as the gradebooks show them: the points when all of it ran, ``not run`` when none of it did,
    ``0.80 (19.20 not run)`` in between (never a 0 that stands for checks nobody ran)."""
    if not_run <= 1e-9:
        return f"{score:.2f}"
    if not_run >= max_score - 1e-9:
        return NOT_RUN_TAG
    return f"{score:.2f} ({not_run:.2f} {NOT_RUN_TAG})"


def total_line(result: SubmissionScore, registry: Registry) -> str:
    """'total 95.00 / 120', with the bonus tasks' most said apart: they come on top of the maximum."""
    extra = f" (+ up to {result.bonus_max:g} bonus)" if result.bonus_max > 0 else ""
    return f"total {result.score:.2f} / {result.max_score(registry):g}{extra}"


PHASE_WORDS = {  # the builds overlap the checks: "checks" runs from the start of the first build
    "host_s": "host checks",
    "build_s": "longest build",
    "checks_s": "builds and checks",
    "timing_s": "timing",
    "theory_s": "theory",
    "total_s": "total",
}


def phases_text(grading: dict) -> str:
    """What each phase of a grading took, in words (``grading.json``'s ``phases``): "build 12 s, checks 31 s, ..."."""
    phases = grading.get("phases") or {}
    return ", ".join(f"{word} {phases[key]:.0f} s" for key, word in PHASE_WORDS.items() if key in phases)


def summary_lines(result: SubmissionScore) -> list[str]:
    lines = []
    for ts in result.tasks:
        status = {"ran": f"{ts.passed}/{ts.total} checks passed", "not_run": NOT_RUN_TAG}.get(ts.status, ts.status)
        if ts.status == "ran" and not ts.complete:
            status += f"; {ts.not_run:.2f} points not run here"
        if ts.task.bonus:
            status += "; bonus points, on top of the total"
        line = f"{ts.task.id} {ts.task.title:<34} {ts.score:6.2f} / {ts.max_score:<5g} {status}"
        if ts.reason:
            first = ts.reason.strip().splitlines()[0]
            line += f" ({first if len(first) <= 160 else first[:159] + '…'})"
        lines.append(line)
    theory = result.theory
    if theory:
        correct = sum(t.passed for t in theory.numeric)
        bonus = (
            f"; {theory.bonus_max:g} of the points are bonus points (a bonus task's questions), on top of the total"
            if theory.bonus_max
            else ""
        )
        lines.append(
            f"{'Theory questions':<37} {theory.score:6.2f} / {theory.max_score:<5g} {correct}/"
            f"{len(theory.numeric)} answers correct; the proof ({sum(m.max_score for m in theory.manual):g} "
            f"points) is graded by hand{bonus}"
        )
    return lines


def rounded_parts(values: list[float], places: int = 4) -> list[float]:
    """``values`` rounded so that they still add up to their rounded sum (largest remainders first):
    54 checks of 10/54 points each must show 10 points, not 10.0008. A check at full marks shows its
    rounded maximum, so a task at full marks adds up exactly."""
    unit = 10**places
    scaled = [v * unit for v in values]
    floors = [int(x // 1) for x in scaled]
    short = round(sum(scaled)) - sum(floors)
    order = sorted(range(len(values)), key=lambda i: scaled[i] - floors[i], reverse=True)
    for i in order[: max(0, short)]:
        floors[i] += 1
    return [f / unit for f in floors]


def _gradescope_tests(tests: list[ScoredTest], number: int) -> list[dict]:
    ran = [t for t in tests if t.ran]
    maxima = dict(zip(map(id, ran), rounded_parts([t.max_score for t in ran])))
    entries = []
    for test_index, test in enumerate(tests, start=1):
        entry = {
            "name": test.name,
            "number": f"{number}.{test_index}",
            "visibility": "visible",
            "output": test.output,
            "tags": test.tags,
        }
        if not test.ran:
            # No score, no maximum, no status: Gradescope shows it as text, neither passed nor failed nor 0.
            entry["name"] += f" ({NOT_RUN_TAG})"
            entries.append(entry)
            continue
        max_score = maxima[id(test)]
        entry["score"] = max_score if abs(test.score - test.max_score) < 1e-12 else round(test.score, 4)
        entry["max_score"] = max_score
        entry["status"] = "passed" if test.passed else "failed"
        if MANUAL_TAG in test.tags:
            # A written answer a person grades later (the top-level "manual" list names it; grade it in Gradescope as
            # a manually graded question): pending, unless it was left empty.
            answered = not test.output.startswith("no proof written")  # its output says pending either way
            entry["status"] = PENDING_STATUS if answered else "failed"
            entry["tags"] = [*test.tags, PENDING_TAG] if answered else test.tags
        entries.append(entry)
    return entries


def gradescope_results(result: SubmissionScore) -> dict:
    tests = []
    for ts in result.tasks:
        tests += _gradescope_tests(ts.tests, ts.task.number)
    notes = result.notes + [f"{ts.task.id}: {note}" for ts in result.tasks for note in ts.notes]
    manual = []
    if result.theory:
        # Numbered after the last task, so Gradescope lists the theory part last.
        theory_number = 1 + max((ts.task.number for ts in result.tasks), default=0)
        tests += _gradescope_tests(result.theory.tests, theory_number)
        notes += [f"theory: {note}" for note in result.theory.notes]
        manual = [
            {"name": item.name, "key": item.key, "max_score": item.max_score, "status": "pending"}
            for item in result.theory.manual
        ]
    output = "\n".join(["Score by task:"] + summary_lines(result) + notes)
    results = {
        "score": round(result.score, 4),
        "execution_time": round(result.duration_s, 2),
        "output": output,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    if result.theory:
        results["manual"] = manual  # not a Gradescope key (it ignores it): what still needs a person
    board = leaderboard_entries(result)
    if board:
        results["leaderboard"] = board
    return results


def csv_row(result: SubmissionScore, registry: Registry) -> tuple[list[str], list[str]]:
    """One row: the total (what was earned), each task's cell (points_cell; empty: not graded this time), the theory,
    the tasks that did not end "ran", the points that did not run here (``not_run``), the isolation, review flags."""
    header = (
        ["submission", "total"]
        + [f"{t.id}" for t in registry.tasks]
        + ["theory", "status", "isolation", "review", "not_run"]
    )
    by_id = {ts.task.id: ts for ts in result.tasks}
    row = [csv_cell(result.name), f"{result.score:.2f}"]
    statuses = []
    for task in registry.tasks:
        ts = by_id.get(task.id)
        row.append(points_cell(ts.score, ts.not_run, ts.max_score) if ts else "")
        if ts and ts.status != "ran":
            statuses.append(f"{task.id}:{ts.status}")
    row.append(f"{result.theory.score:.2f}" if result.theory else "")  # the numeric answers; the proof comes later
    row.append(";".join(statuses) or "ok")
    row.append(str(result.grading.get("isolation", "")).split(" ")[0])
    row.append(csv_cell(" | ".join(result.review)))
    row.append("; ".join(f"{ts.task.id}: {ts.not_run:.2f} points" for ts in result.tasks if not ts.complete))
    return header, row


def instructor_record(result: SubmissionScore) -> dict:
    """grading.json: what the instructor needs to trust (or question) a grade; never shown to students."""
    tasks = {}
    for ts in result.tasks:
        run = ts.run
        tasks[ts.task.id] = {
            "status": ts.status,
            "reason": ts.reason,
            "score": round(ts.score, 4),
            "max_score": ts.max_score,
            "not_run_points": round(ts.not_run, 4),
            "seed": (result.grading.get("seeds") or {}).get(ts.task.id),
            "notes": ts.notes,
            "instructor": ts.instructor,
            "duration_s": round(run.duration_s, 2) if run else None,
            "phases": {name: round(seconds, 2) for name, seconds in (run.phases if run else {}).items()},
            # Checks that ran past their deadline and were rerun alone (the host was busy): what the rerun gave.
            "rerun_alone": [t.display_name for t in (run.tests if run else []) if t.alone],
            # What each timing rule measured (the class outputs' ratio plots and leaderboard read it).
            "timing": [t.timing for t in (run.tests if run else []) if t.is_perf and t.timing],
            "log_tail": (run.log[-LOG_CHARS:] if run and run.log else ""),
            "failed": [
                {"check": t.display_name, **t.check} for t in (run.tests if run else []) if t.outcome == "failed"
            ],
            "slowest": [
                [t.display_name, round(t.duration_s, 2)]
                for t in sorted(run.tests if run else [], key=lambda t: -t.duration_s)[:5]
            ],
            "timeline": timeline(run, result.grading.get("started_at")),
        }
    record = {
        "submission": result.name,
        "score": round(result.score, 4),
        "duration_s": round(result.duration_s, 2),
        "review": result.review,
        **result.grading,
        "tasks": tasks,
    }
    if result.theory:
        record["theory"] = theory_record(result.theory)
    return record


def timeline(run, started_at: float | None) -> list[list]:
    """Each check of a task as [check, checker, began (seconds from the grading's start), seconds], in the order they
    began: where a grading's time went (the checker: "checks i/n", "timing", or "alone" for a rerun alone)."""
    if run is None or not started_at:
        return []
    rows = [
        [
            t.display_name,
            "alone" if t.alone else ("timing" if t.is_perf else f"checks {t.shard}"),
            round(t.began_at - started_at, 2),
            round(t.duration_s, 2),
        ]
        for t in run.tests
        if t.began_at
    ]
    return sorted(rows, key=lambda row: row[2])


def theory_record(theory: TheoryScore) -> dict:
    """The theory part for the instructor: each answer's outcome, and the written answers with their rubric."""
    return {
        "student_id": theory.student_id,
        "score": round(theory.score, 4),
        "max_score": theory.max_score,
        "bonus_max_score": theory.bonus_max,  # of max_score: a bonus task's questions, on top of the course total
        "notes": theory.notes,
        "review": theory.review,
        "answers": [
            {"name": t.name, "score": round(t.score, 4), "max_score": t.max_score, "output": t.output}
            for t in theory.numeric
        ],
        "manual": [
            {
                "name": m.name,
                "key": m.key,
                "max_score": m.max_score,
                "answer": m.answer,
                "rubric": [{"points": r.points, "criterion": r.criterion} for r in m.rubric],
            }
            for m in theory.manual
        ],
    }


def write_all(result: SubmissionScore, registry: Registry, out: Path) -> dict[str, Path]:
    out = Path(out)
    paths = {
        "results": out / "results.json",
        "csv": out / "grades.csv",
        "html": out / "report.html",
        "grading": out / "grading.json",
    }
    write_atomic(paths["results"], json.dumps(gradescope_results(result), indent=2))
    header, row = csv_row(result, registry)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerow(row)
    write_atomic(paths["csv"], buffer.getvalue())
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("report.html.j2").render(result=result, registry=registry)
    write_atomic(paths["html"], html)
    write_atomic(paths["grading"], json.dumps(instructor_record(result), indent=2, default=str))
    return paths
