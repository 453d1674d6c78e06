"""The class outputs of a batch grading, from whatever is graded in ``OUT/students/``: ``OUT/class/``.

* ``gradebook.csv``: one row per student (a group submission: one per member): id, SID, name, email,
  each task's score, total, maximum, the late flag (where the export or ``--due`` gives one), the
  submission time, the status (graded, unreadable, stale, failed, not graded) with each task that did
  not run and why, review flags, the grading's time and wall time, and a flag when the GPU worker that
  graded it was warned about (its reference speed).
* ``gradescope_scores.csv``: ``Name,SID,Email,Total Score``, the header of Gradescope's own grade
  export, which its score upload for an assignment matches by email (else SID). Only current, complete
  grades go in: a stale, failed or missing grading, or one in which a task the CSV covers was not graded
  or did not run whole (``--task``, a host without a GPU), leaves the student out, so that an upload
  changes nothing for them (the summary's ``left_out_of_upload`` says why; a 0 would overwrite their
  score). A student in two submissions gets the later one. ``gradescope_gpu_scores.csv``: the same, with
  the GPU tasks' points only: what Gradescope's autograder (grader/classroom/gradescope.py: t1, t7 and the theory,
  no GPU) leaves to the course's GPU machines.
* ``pass_rates.csv``: per hidden check, how many of the submissions whose task ran passed it (a check
  that did not run is in neither count).
* ``leaderboard.csv``: the performance metrics (grader/grade/report.py's ``LEADERBOARD``) of the students who
  opted in.

A task cell of the gradebook is its points, ``not run`` when none of it ran, ``0.80 (19.20 not run)`` when
some of it did not, and empty when the grading did not cover it.
* ``figures/``: per-task score histograms, the total's, and per timing rule the distribution of the
  timing values (ratio to the reference, or speedup over naive) with the rubric's thresholds drawn.
* ``summary.html`` (self-contained: figures embedded; every value escaped) and ``summary.json``.


Each submission's record (its status: graded, stale, failed, not graded; its leaderboard opt-in) is read back by
class_records.py, the tables are made by class_tables.py; here: the figures, and writing it all.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from datetime import datetime, UTC
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from assignment.atomic import write_atomic
from assignment.registry import Registry, load_registry
from grader.classroom import ledger
from grader.classroom.class_records import STATUSES, load_json, read_record, worker_checks
from grader.classroom.class_tables import (
    gradebook_rows,
    gradescope_rows,
    leaderboard,
    pass_rates,
    task_summary,
    timing_values,
)
from grader.classroom.feedback_summary import describe, figure, png
from grader.classroom.roster import RosterError, Submission, parse_due, scan
from grader.grade.report import csv_cell

CLASS_DIR = "class"
TEMPLATES = Path(__file__).resolve().parent / "templates"
UPLOAD_HEADER = ["Name", "SID", "Email", "Total Score"]


# --------------------------------------------------------------------------- figures


def score_histogram(scores: list[float], max_score: float, title: str) -> bytes:
    fig, ax = figure(5.0, 2.8)
    bins = min(20, max(5, int(max_score) if max_score >= 1 else 5))
    ax.hist(scores, bins=bins, range=(0, max_score or 1), color="#4878a8", edgecolor="white")
    ax.set_xlim(0, max_score or 1)
    ax.set_xlabel("score")
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(title, fontsize=10)
    return png(fig)


def timing_histogram(rule: dict) -> bytes:
    from matplotlib.transforms import blended_transform_factory

    fig, ax = figure(5.0, 2.8)
    values = rule["values"]
    marks = [at for at, _ in rule["thresholds"]]
    low, high = min(values + marks), max(values + marks)
    pad = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
    # Bins over the whole axis (values and thresholds), so that a class of near-equal values is a visible bar.
    ax.hist(values, bins=40, range=(low - pad, high + pad), color="#4878a8", edgecolor="white")
    ax.set_xlim(low - pad, high + pad)
    on_top = blended_transform_factory(ax.transData, ax.transAxes)
    for at, points in rule["thresholds"]:
        ax.axvline(at, color="#b42318", linestyle="--", linewidth=1)
        ax.text(at, 1.01, f"{points:g}", transform=on_top, ha="center", va="bottom", fontsize=7, color="#b42318")
    ax.set_xlabel(
        "student time / reference time (lower is better)"
        if rule["metric"] == "time_vs_reference"
        else "speedup over the naive baseline (higher is better)"
    )
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(
        f"{rule['task']}: {rule['rule']}\n(dashed: the rubric's thresholds, with their points)", fontsize=8, pad=12
    )
    return png(fig)


# --------------------------------------------------------------------------- writing


def _csv(header: list[str], rows: list[list[str]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def write_class_outputs(
    subs: list[Submission], out: Path, *, problems: list[str] | tuple = (), registry: Registry | None = None
) -> dict:
    out = Path(out)
    registry = registry or load_registry()
    subs = _with_saved_roster(subs, out)
    version = ledger.grader_version()
    records = [read_record(sub, out, version) for sub in sorted(subs, key=lambda s: s.id)]
    target = out / CLASS_DIR

    header, rows = gradebook_rows(records, registry)
    write_atomic(target / "gradebook.csv", _csv(header, rows))
    upload, left_out = gradescope_rows(
        records, {t.id for t in registry.available}, total=True, theory=registry.theory is not None
    )
    write_atomic(target / "gradescope_scores.csv", _csv(UPLOAD_HEADER, upload))
    gpu_upload, gpu_left_out = gradescope_rows(records, {t.id for t in registry.available if t.needs_gpu}, total=False)
    write_atomic(target / "gradescope_gpu_scores.csv", _csv(UPLOAD_HEADER, gpu_upload))
    rates = pass_rates(records, registry)
    write_atomic(
        target / "pass_rates.csv",
        _csv(
            ["task", "check", "kind", "passed", "ran", "pass_rate", "points"],
            [
                [
                    r["task"],
                    csv_cell(r["check"]),
                    r["kind"],
                    r["passed"],
                    r["ran"],
                    "" if r["rate"] is None else f"{r['rate']:.3f}",
                    f"{r['max_score']:g}",
                ]
                for r in rates
            ],
        ),
    )
    columns, board = leaderboard(records, registry)
    write_atomic(
        target / "leaderboard.csv",
        _csv(
            ["rank", "name", *[c["title"] for c in columns]],
            [
                [row["rank"], csv_cell(row["alias"]), *["" if v is None else f"{v:.4g}" for v in row["values"]]]
                for row in board
            ],
        ),
    )

    tasks = task_summary(records, registry)
    timing = timing_values(records, registry)
    figures: dict[str, bytes] = {}
    for row in tasks:
        if row["scores"]:
            figures[f"score_{row['task']}.png"] = score_histogram(
                row["scores"], row["max_score"], f"{row['task']} {row['title']}: {row['graded']} graded"
            )
    totals = [r.score for r in records if r.status in ("graded", "unreadable") and r.score is not None]
    top = max((r.max_score or 0 for r in records if r.max_score), default=registry.total_points)
    if totals:
        figures["score_total.png"] = score_histogram(totals, float(top), f"total: {len(totals)} graded")
    for rule in timing:
        if rule["values"]:
            figures[f"timing_{rule['task']}_rule{rule['index']}.png"] = timing_histogram(rule)
    for name, image in figures.items():
        write_atomic(target / "figures" / name, image)

    counts = {s: sum(r.status == s for r in records) for s in STATUSES}
    walls = [r.wall_s for r in records if r.status in ("graded", "unreadable") and r.wall_s is not None]
    checks = worker_checks(out)
    summary = {
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "grader_version": version,
        "submissions": len(records),
        "students": sum(len(r.sub.members()) for r in records),
        "counts": counts,
        "late": sum(1 for r in records if r.sub.late),
        "problems": list(problems),
        "left_out_of_upload": left_out,
        "left_out_of_gpu_upload": gpu_left_out,
        "failed": [{"id": r.sub.id, "why": r.why} for r in records if r.status == "failed"],
        "stale": [{"id": r.sub.id, "why": r.why} for r in records if r.status == "stale"],
        "pending": [r.sub.id for r in records if r.status == "pending"],
        "wall_s": describe(walls),
        "tasks": [{k: v for k, v in row.items() if k != "scores"} for row in tasks],
        "timing": [{k: v for k, v in rule.items() if k != "values"} for rule in timing],
        "pass_rates": rates,
        "leaderboard": {
            "columns": [c["title"] for c in columns],
            "rows": [{k: v for k, v in row.items() if k != "id"} for row in board],
        },
        "gpu_workers": checks[-1] if checks else None,
        "gpu_warnings": [
            f"{c.get('run')}: {w.get('name')} ({w.get('gpu')}): {line}"
            for c in checks
            for w in c.get("workers", [])
            for line in w.get("warnings", [])
        ],
        "figures": [f"figures/{name}" for name in figures],
    }
    images = {name: "data:image/png;base64," + base64.b64encode(png).decode("ascii") for name, png in figures.items()}
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("class_summary.html.j2").render(
        registry=registry,
        summary=summary,
        tasks=tasks,
        timing=timing,
        rates=sorted((r for r in rates if r["rate"] is not None), key=lambda r: (r["rate"], r["task"], r["check"])),
        columns=columns,
        board=board,
        images=images,
        records=records,
    )
    write_atomic(target / "summary.html", html)
    write_atomic(target / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def _with_saved_roster(subs: list[Submission], out: Path) -> list[Submission]:
    """A list from discover() (no --due, no --roster: the Slurm collect step) gets what the batch saved."""
    saved = load_json(out / "batch.json") or {}
    if not subs or not (saved.get("due") or saved.get("roster")) or not saved.get("submissions"):
        return subs
    try:
        roster = scan(
            Path(saved["submissions"]),
            due=parse_due(saved["due"]) if saved.get("due") else None,
            roster_csv=Path(saved["roster"]) if saved.get("roster") else None,
        )
    except RosterError:
        return subs
    by_id = {s.id: s for s in roster.submissions}
    return [by_id.get(s.id, s) for s in subs]
