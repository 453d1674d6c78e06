"""Grading phase 5: write a graded submission out.

For the student (Gradescope shows them): results.json, report.html. For the instructor: grades.csv
(cells that a spreadsheet would read as a formula are escaped) and grading.json (the isolation level,
the seed, the host, review flags, notes no student sees, each task's checker log, capped, and the theory
part's written answers beside their rubric, for grading by hand).
Files are written to a temporary name and renamed, so a killed grader never leaves a half-written
result behind.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from assignment.atomic import write_atomic
from assignment.registry import Registry
from grader.scoring import ScoredTest, SubmissionScore
from grader.theory import MANUAL_TAG, TheoryScore

TEMPLATES = Path(__file__).resolve().parent / "templates"


LOG_CHARS = 4000  # of each task's checker log kept for the instructor
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: str) -> str:
    """A CSV cell a spreadsheet shows as text, never runs as a formula."""
    return "'" + value if value.startswith(_FORMULA_START) else value


def summary_lines(result: SubmissionScore) -> list[str]:
    lines = []
    for ts in result.tasks:
        status = {"ran": f"{ts.passed}/{ts.total} checks passed", "not_run": "not run"}.get(ts.status, ts.status)
        line = f"{ts.task.id} {ts.task.title:<34} {ts.score:6.2f} / {ts.max_score:<5g} {status}"
        if ts.reason:
            first = ts.reason.strip().splitlines()[0]
            line += f" ({first if len(first) <= 160 else first[:159] + '…'})"
        lines.append(line)
    theory = result.theory
    if theory:
        correct = sum(t.passed for t in theory.numeric)
        lines.append(f"{'Theory questions':<37} {theory.score:6.2f} / {theory.max_score:<5g} {correct}/"
                     f"{len(theory.numeric)} answers correct; the proof ({sum(m.max_score for m in theory.manual):g} "
                     "points) is graded by hand")
    return lines


def rounded_parts(values: list[float], places: int = 4) -> list[float]:
    """``values`` rounded so that they still add up to their rounded sum (largest remainders first):
    54 checks of 10/54 points each must show 10 points, not 10.0008. A check at full marks shows its
    rounded maximum, so a task at full marks adds up exactly."""
    unit = 10 ** places
    scaled = [v * unit for v in values]
    floors = [int(x // 1) for x in scaled]
    short = round(sum(scaled)) - sum(floors)
    order = sorted(range(len(values)), key=lambda i: scaled[i] - floors[i], reverse=True)
    for i in order[:max(0, short)]:
        floors[i] += 1
    return [f / unit for f in floors]


def _gradescope_tests(tests: list[ScoredTest], number: int) -> list[dict]:
    maxima = rounded_parts([t.max_score for t in tests])
    scores = [m if abs(t.score - t.max_score) < 1e-12 else round(t.score, 4) for t, m in zip(tests, maxima)]
    entries = []
    for test_index, (test, score, max_score) in enumerate(zip(tests, scores, maxima), start=1):
        entry = {
            "name": test.name,
            "number": f"{number}.{test_index}",
            "score": score,
            "max_score": max_score,
            "status": "passed" if test.passed else "failed",
            "visibility": "visible",
            "output": test.output,
            "tags": test.tags,
        }
        if MANUAL_TAG in test.tags:
            # Gradescope's results.json knows only "passed" and "failed": a written answer that a person grades
            # later is neither, so its entry has no status (its points show as pending, 0 of its maximum) and the
            # top-level "manual" list names it. Grade it in Gradescope as a manually graded question.
            del entry["status"]
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
        manual = [{"name": item.name, "key": item.key, "max_score": item.max_score, "status": "pending"}
                  for item in result.theory.manual]
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
    return results


def csv_row(result: SubmissionScore, registry: Registry) -> tuple[list[str], list[str]]:
    header = ["submission", "total"] + [f"{t.id}" for t in registry.tasks] + ["theory", "status", "isolation",
                                                                              "review"]
    by_id = {ts.task.id: ts for ts in result.tasks}
    row = [csv_cell(result.name), f"{result.score:.2f}"]
    statuses = []
    for task in registry.tasks:
        ts = by_id.get(task.id)
        row.append(f"{ts.score:.2f}" if ts else "")
        if ts and ts.status != "ran":
            statuses.append(f"{task.id}:{ts.status}")
    row.append(f"{result.theory.score:.2f}" if result.theory else "")  # the numeric answers; the proof comes later
    row.append(";".join(statuses) or "ok")
    row.append(str(result.grading.get("isolation", "")).split(" ")[0])
    row.append(csv_cell(" | ".join(result.review)))
    return header, row


def instructor_record(result: SubmissionScore) -> dict:
    """grading.json: what the instructor needs to trust (or question) a grade; never shown to students."""
    tasks = {}
    for ts in result.tasks:
        run = ts.run
        tasks[ts.task.id] = {
            "status": ts.status, "reason": ts.reason, "score": round(ts.score, 4), "max_score": ts.max_score,
            "notes": ts.notes, "instructor": ts.instructor,
            "duration_s": round(run.duration_s, 2) if run else None,
            # What each timing rule measured (the class outputs' ratio plots and leaderboard read it).
            "timing": [t.timing for t in (run.tests if run else []) if t.is_perf and t.timing],
            "log_tail": (run.log[-LOG_CHARS:] if run and run.log else ""),
            "failed": [{"check": t.display_name, **t.check} for t in (run.tests if run else []) if t.outcome == "failed"],
            "slowest": [[t.display_name, round(t.duration_s, 2)] for t in
                        sorted(run.tests if run else [], key=lambda t: -t.duration_s)[:5]],
        }
    record = {"submission": result.name, "score": round(result.score, 4), "duration_s": round(result.duration_s, 2),
              "review": result.review, **result.grading, "tasks": tasks}
    if result.theory:
        record["theory"] = theory_record(result.theory)
    return record


def theory_record(theory: TheoryScore) -> dict:
    """The theory part for the instructor: each answer's outcome, and the written answers with their rubric."""
    return {
        "student_id": theory.student_id, "score": round(theory.score, 4), "max_score": theory.max_score,
        "notes": theory.notes, "review": theory.review,
        "answers": [{"name": t.name, "score": round(t.score, 4), "max_score": t.max_score, "output": t.output}
                    for t in theory.numeric],
        "manual": [{"name": m.name, "key": m.key, "max_score": m.max_score, "answer": m.answer,
                    "rubric": [{"points": r.points, "criterion": r.criterion} for r in m.rubric]}
                   for m in theory.manual],
    }


def write_all(result: SubmissionScore, registry: Registry, out: Path) -> dict[str, Path]:
    out = Path(out)
    paths = {"results": out / "results.json", "csv": out / "grades.csv", "html": out / "report.html",
             "grading": out / "grading.json"}
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
