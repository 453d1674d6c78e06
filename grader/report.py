"""Write a graded submission out: Gradescope results.json, a CSV row, report.html.

Files are written to a temporary name and renamed, so a killed grader never
leaves a half-written result behind.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from assignment.registry import Registry
from grader.scoring import SubmissionScore

TEMPLATES = Path(__file__).resolve().parent / "templates"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def summary_lines(result: SubmissionScore) -> list[str]:
    lines = []
    for ts in result.tasks:
        status = {"ran": f"{ts.passed}/{ts.total} checks passed", "not_run": "not run"}.get(ts.status, ts.status)
        line = f"{ts.task.id} {ts.task.title:<34} {ts.score:6.2f} / {ts.max_score:<5g} {status}"
        if ts.reason:
            line += f" ({ts.reason})"
        lines.append(line)
    return lines


def gradescope_results(result: SubmissionScore) -> dict:
    tests = []
    for ts in result.tasks:
        for test_index, test in enumerate(ts.tests, start=1):
            tests.append({
                "name": test.name,
                "number": f"{ts.task.number}.{test_index}",
                "score": round(test.score, 4),
                "max_score": round(test.max_score, 4),
                "status": "passed" if test.passed else "failed",
                "visibility": "visible",
                "output": test.output,
                "tags": test.tags,
            })
    output = "\n".join(["Score by task:"] + summary_lines(result) + result.notes)
    return {
        "score": round(result.score, 4),
        "execution_time": round(result.duration_s, 2),
        "output": output,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def csv_row(result: SubmissionScore, registry: Registry) -> tuple[list[str], list[str]]:
    header = ["submission", "total"] + [f"{t.id}" for t in registry.tasks] + ["status"]
    by_id = {ts.task.id: ts for ts in result.tasks}
    row = [result.name, f"{result.score:.2f}"]
    statuses = []
    for task in registry.tasks:
        ts = by_id.get(task.id)
        row.append(f"{ts.score:.2f}" if ts else "")
        if ts and ts.status != "ran":
            statuses.append(f"{task.id}:{ts.status}")
    row.append(";".join(statuses) or "ok")
    return header, row


def write_all(result: SubmissionScore, registry: Registry, out: Path) -> dict[str, Path]:
    out = Path(out)
    paths = {"results": out / "results.json", "csv": out / "grades.csv", "html": out / "report.html"}
    _atomic_write(paths["results"], json.dumps(gradescope_results(result), indent=2))
    header, row = csv_row(result, registry)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerow(row)
    _atomic_write(paths["csv"], buffer.getvalue())
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("report.html.j2").render(result=result, registry=registry)
    _atomic_write(paths["html"], html)
    return paths
