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

**Leaderboard opt-in**: a file ``leaderboard.txt`` in the submission (at any depth; the shallowest copy,
read as the grader reads student files: from a zip without extracting, capped, never through a link).
Its first non-empty line is the name shown (at most 40 characters; none: "anonymous"); a first line
"no" opts out (grader/grade/report.py's ``leaderboard_alias``, which also decides the Gradescope leaderboard
entries of each results.json). A student's metric is shown only when the task's every correctness check
passed.

A submission's status: **graded** (its done-marker matches its current contents and this grader's
version), **stale** (graded, but the submission or the grader changed since: its old scores are
shown in the gradebook, flagged, and left out of the upload CSV), **failed** (the last attempt failed:
the reason), **not graded**.
"""

from __future__ import annotations

import base64
import csv
import io
import json
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from assignment.atomic import write_atomic
from assignment.registry import Registry, load_registry
from grader.classroom import ledger
from grader.classroom.feedback_summary import describe, figure, png
from grader.grade.report import LEADERBOARD, OPT_IN_BYTES, OPT_IN_FILE, csv_cell, leaderboard_alias, points_cell
from grader.grade.scoring import NOT_RUN_TAG
from grader.classroom.roster import Student, Submission, scan
from grader.grade.submission import SubmissionError, _candidates, _Folder, _Zip

CLASS_DIR = "class"
TEMPLATES = Path(__file__).resolve().parent / "templates"
MAX_JSON_BYTES = 16 * 2**20
STATUSES = ("graded", "unreadable", "stale", "failed", "pending")
UPLOAD_HEADER = ["Name", "SID", "Email", "Total Score"]


@dataclass
class Record:
    sub: Submission
    status: str
    why: str = ""
    score: float | None = None
    max_score: float | None = None
    tasks: dict[str, dict] = field(default_factory=dict)  # id -> score, max_score, status, reason, timing
    tests: list[dict] = field(default_factory=list)  # results.json's tests
    review: list[str] = field(default_factory=list)
    graded_at: str = ""
    wall_s: float | None = None
    version: str = ""
    gpu_warnings: list[str] = field(default_factory=list)
    theory: dict | None = None  # grading.json's theory part (grader/grade/theory.py)
    alias: str | None = None  # opted in to the leaderboard under this name


# --------------------------------------------------------------------------- reading


def _load(path: Path) -> dict | None:
    try:
        if path.is_symlink() or path.stat().st_size > MAX_JSON_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_opt_in(path: Path) -> str | None:
    """The leaderboard name from the submission's leaderboard.txt; None when it has none or opts out."""
    try:
        reader = _Folder(Path(path)) if Path(path).is_dir() else _Zip(Path(path))
    except (SubmissionError, OSError):
        return None
    try:
        hits = _candidates(reader.names, OPT_IN_FILE)
        if not hits or reader.is_link(hits[0]):
            return None
        try:
            data = reader.read(hits[0], OPT_IN_BYTES)
        except OSError:
            return None
    finally:
        if isinstance(reader, _Zip):
            reader.archive.close()
    return leaderboard_alias(data)


def read_record(sub: Submission, out: Path, version: str) -> Record:
    marker = ledger.read_marker(out, sub.id)
    failure = ledger.read_failure(out, sub.id)
    record = Record(sub, "pending")
    if marker:
        current = marker.get("grader_version") == version and marker.get("submission_hash") == ledger.submission_hash(
            sub.path
        )
        folder = ledger.student_dir(out, sub.id)
        results, grading = _load(folder / "results.json"), _load(folder / "grading.json")
        if results is None or grading is None:
            record.why = "the done-marker is there but results.json or grading.json is not readable"
        else:
            record.status = marker.get("status", "graded") if current else "stale"
            if not current:
                record.why = (
                    "graded by another grader version"
                    if marker.get("grader_version") != version
                    else "the submission changed since it was graded"
                )
            record.score, record.max_score = float(results.get("score", 0.0)), marker.get("max_score")
            record.tests = [t for t in results.get("tests", []) if isinstance(t, dict)]
            record.tasks = {tid: t for tid, t in (grading.get("tasks") or {}).items() if isinstance(t, dict)}
            record.review = [str(r) for r in grading.get("review", [])]
            record.graded_at, record.wall_s = marker.get("graded_at", ""), marker.get("wall_s")
            record.version = marker.get("grader_version", "")
            check = (grading.get("batch") or {}).get("gpu_check") or {}
            record.gpu_warnings = [str(w) for w in check.get("warnings", [])]
            record.theory = grading.get("theory") if isinstance(grading.get("theory"), dict) else None
            if record.status == "unreadable":
                record.why = str(grading.get("unreadable", ""))
    if failure:
        reason = f"last attempt failed: {failure.get('reason')}"
        if record.status == "pending":
            record.status, record.why = "failed", reason
        elif record.status == "stale" or str(failure.get("time", "")) > record.graded_at:  # a regrade that failed
            record.why = "; ".join(x for x in (record.why, reason) if x)
    record.alias = read_opt_in(sub.path)
    return record


# --------------------------------------------------------------------------- tables


def task_status(record: Record) -> str:
    bad = [f"{tid}:{t.get('status')}" for tid, t in record.tasks.items() if t.get("status") != "ran"]
    bad += [
        f"{tid}:partly {NOT_RUN_TAG}"
        for tid, t in record.tasks.items()
        if t.get("status") == "ran" and not _ran_whole(t)
    ]
    return ";".join(bad)


def _not_run(task: dict) -> float:
    """Points of a task's grading record that did not run (all of them for a task that could not run at all)."""
    return (
        float(task.get("max_score") or 0.0)
        if task.get("status") == "not_run"
        else float(task.get("not_run_points") or 0.0)
    )


def _ran_whole(task: dict) -> bool:
    return task.get("status") != "not_run" and _not_run(task) <= 1e-9


def task_cell(task: dict) -> str:
    """A gradebook cell from a grading.json task record (grader/grade/report.py's points_cell)."""
    return points_cell(float(task.get("score", 0.0)), _not_run(task), float(task.get("max_score") or 0.0))


def upload_gap(record: Record, tasks: set[str], theory: bool) -> str:
    """'' when the grading holds every task in ``tasks`` (and the theory, when asked), each run whole; else what it
    lacks: an upload would set the student's score to a part of it."""
    gaps = [f"{tid} not graded" for tid in sorted(tasks) if tid not in record.tasks]
    gaps += [
        f"{tid} {NOT_RUN_TAG}" for tid in sorted(tasks) if tid in record.tasks and not _ran_whole(record.tasks[tid])
    ]
    if theory and record.theory is None:
        gaps.append("theory not graded")
    return ", ".join(gaps)


def gradebook_rows(records: list[Record], registry: Registry) -> tuple[list[str], list[list[str]]]:
    task_ids = [t.id for t in registry.tasks]
    header = [
        "id",
        "sid",
        "name",
        "email",
        *task_ids,
        "theory",
        "total",
        "max",
        "late",
        "submitted_at",
        "status",
        "task_status",
        "why",
        "review",
        "graded_at",
        "wall_s",
        "grader_version",
        "gpu_warnings",
    ]
    rows = []
    for r in records:
        graded = r.status in ("graded", "unreadable", "stale")
        for member in r.sub.members():
            cells = [r.sub.id, member.sid, member.name, member.email]
            cells += [task_cell(r.tasks[t]) if graded and t in r.tasks else "" for t in task_ids]
            cells.append(f"{float(r.theory.get('score', 0.0)):.2f}" if graded and r.theory else "")
            cells += [
                f"{r.score:.2f}" if graded and r.score is not None else "",
                f"{r.max_score:g}" if graded and r.max_score is not None else "",
                "" if r.sub.late is None else ("yes" if r.sub.late else "no"),
                r.sub.submitted_at,
                r.status,
                task_status(r),
                r.why,
                " | ".join(r.review),
                r.graded_at,
                "" if r.wall_s is None else f"{r.wall_s:.1f}",
                r.version,
                " | ".join(r.gpu_warnings),
            ]
            rows.append([csv_cell(str(c)) for c in cells])
    return header, rows


def gradescope_rows(
    records: list[Record], tasks: set[str], *, total: bool, theory: bool = False
) -> tuple[list[list[str]], list[str]]:
    """Name, SID, Email, Total Score per student with a current, complete grade of ``tasks`` (and the theory, when
    asked): the total (``total``) or the sum over ``tasks``; and who was left out, and why."""
    chosen: dict[str, tuple[Record, Student]] = {}
    left_out = []
    for r in records:
        if r.status not in ("graded", "unreadable"):
            left_out.append(f"{r.sub.id}: {r.status}" + (f" ({r.why})" if r.why else ""))
            continue
        gap = upload_gap(r, tasks, theory)
        if gap:
            left_out.append(f"{r.sub.id}: {gap}")
            continue
        for member in r.sub.members():
            key = member.email or member.sid
            if not key:
                left_out.append(f"{r.sub.id}: a submitter with neither an email nor a SID")
                continue
            earlier = chosen.get(key)
            if earlier is None or (r.sub.submitted_at, r.sub.id) > (earlier[0].sub.submitted_at, earlier[0].sub.id):
                chosen[key] = (r, member)

    def score(r: Record) -> float:
        if total:
            return r.score or 0.0
        return sum(float(t.get("score", 0.0)) for tid, t in r.tasks.items() if tid in tasks)

    rows = [
        [csv_cell(m.name), csv_cell(m.sid), csv_cell(m.email), f"{score(r):.2f}"]
        for r, m in sorted(chosen.values(), key=lambda rm: (rm[1].name, rm[1].sid, rm[1].email))
    ]
    return rows, left_out


def pass_rates(records: list[Record], registry: Registry) -> list[dict]:
    """Per hidden check (results.json's test names), over the current gradings whose task ran."""
    counts: dict[str, dict] = {}
    order = {t.id: i for i, t in enumerate(registry.tasks)}
    for r in records:
        if r.status != "graded":
            continue
        for test in r.tests:
            tags = test.get("tags") or []
            task = next((t for t in tags if t in order), None)
            if task is None or r.tasks.get(task, {}).get("status") != "ran" or NOT_RUN_TAG in tags:
                continue
            entry = counts.setdefault(
                test.get("name", "?"),
                {
                    "task": task,
                    "check": test.get("name", "?"),
                    "kind": "performance"
                    if "performance" in tags
                    else ("structure" if "structure" in tags else "correctness"),
                    "passed": 0,
                    "ran": 0,
                    "max_score": test.get("max_score", 0),
                },
            )
            entry["ran"] += 1
            entry["passed"] += test.get("status") == "passed"
    rows = sorted(counts.values(), key=lambda e: (order[e["task"]], e["check"]))
    for row in rows:
        row["rate"] = row["passed"] / row["ran"] if row["ran"] else None
    return rows


def _timing_record(record: Record, task_id: str, rule_name: str) -> dict | None:
    for timing in record.tasks.get(task_id, {}).get("timing") or []:
        if isinstance(timing, dict) and timing.get("rule") == rule_name:
            return timing
    return None


def _correct(record: Record, task_id: str) -> bool:
    checks = [t for t in record.tests if task_id in (t.get("tags") or []) and "correctness" in (t.get("tags") or [])]
    return bool(checks) and all(t.get("status") == "passed" for t in checks)


def leaderboard(records: list[Record], registry: Registry) -> tuple[list[dict], list[dict]]:
    """(columns, rows) for the students who opted in; a metric shows only behind a fully correct task."""
    columns = []
    for metric in LEADERBOARD:
        try:
            rule = registry.task(metric.task).timing[metric.rule]
        except (KeyError, IndexError):
            continue
        columns.append(
            {
                "metric": metric,
                "rule": rule.name,
                "title": f"{metric.label} ({metric.unit}, {'higher' if metric.higher_is_better else 'lower'}"
                " is better)",
            }
        )
    rows = []
    for r in records:
        if r.alias is None or r.status != "graded":
            continue
        values = []
        for column in columns:
            metric = column["metric"]
            timing = _timing_record(r, metric.task, column["rule"])
            value = timing.get(metric.field) if timing and _correct(r, metric.task) else None
            values.append(float(value) if isinstance(value, (int, float)) else None)
        if any(v is not None for v in values):
            rows.append({"alias": r.alias, "id": r.sub.id, "values": values})
    if columns:
        first = columns[0]["metric"]
        sign = -1 if first.higher_is_better else 1
        rows.sort(key=lambda row: (row["values"][0] is None, sign * (row["values"][0] or 0.0), row["alias"]))
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
    return columns, rows


def timing_values(records: list[Record], registry: Registry) -> list[dict]:
    """Per timing rule of the registry, the class's measured values (current gradings with a measurement)."""
    rules = []
    for task in registry.tasks:
        for index, rule in enumerate(task.timing):
            values = [
                float(t["value"])
                for r in records
                if r.status == "graded"
                for t in [_timing_record(r, task.id, rule.name)]
                if t and isinstance(t.get("value"), (int, float))
            ]
            rules.append(
                {
                    "task": task.id,
                    "index": index,
                    "rule": rule.name,
                    "metric": rule.metric,
                    "thresholds": [(th.at, th.points) for th in rule.thresholds],
                    "values": values,
                    **describe(values),
                }
            )
    return rules


def task_summary(records: list[Record], registry: Registry) -> list[dict]:
    rows = []
    for task in registry.tasks:
        # A task that did not run whole is no score of it: it is counted under its status, not drawn as a 0.
        ran = [r.tasks[task.id] for r in records if r.status in ("graded", "unreadable") and task.id in r.tasks]
        graded = [t for t in ran if _ran_whole(t)]
        scores = [float(t.get("score", 0.0)) for t in graded]
        statuses: dict[str, int] = {}
        for t in ran:
            status = t.get("status", "?") if t.get("status") == "not_run" or _ran_whole(t) else "partly not run"
            statuses[status] = statuses.get(status, 0) + 1
        rows.append(
            {
                "task": task.id,
                "title": task.title,
                "max_score": task.points.total,
                "graded": len(graded),
                "full": sum(abs(s - task.points.total) < 1e-6 for s in scores),
                "zero": sum(s == 0 for s in scores),
                "statuses": statuses,
                "scores": scores,
                **describe(scores),
            }
        )
    theory = [r.theory for r in records if r.status in ("graded", "unreadable") and r.theory]
    if theory:  # the numeric answers; the written proof is graded by hand later (its points pending here)
        top = max(float(t.get("max_score", 0.0)) for t in theory)
        scores = [float(t.get("score", 0.0)) for t in theory]
        rows.append(
            {
                "task": "theory",
                "title": "Theory questions (the proof: by hand)",
                "max_score": top,
                "graded": len(scores),
                "full": sum(abs(s - top) < 1e-6 for s in scores),
                "zero": sum(s == 0 for s in scores),
                "statuses": {},
                "scores": scores,
                **describe(scores),
            }
        )
    return rows


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


# --------------------------------------------------------------------------- GPU workers


def worker_checks(out: Path) -> list[dict]:
    """Every batch run's GPU worker checks (OUT/workers/*.json), oldest first."""
    runs = []
    for path in sorted((Path(out) / "workers").glob("*.json")):
        data = _load(path)
        if data:
            runs.append(data)
    return sorted(runs, key=lambda r: r.get("time", ""))


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
    saved = _load(out / "batch.json") or {}
    if not subs or not (saved.get("due") or saved.get("roster")) or not saved.get("submissions"):
        return subs
    from grader.classroom.roster import RosterError, parse_due

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
