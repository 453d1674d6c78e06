"""The class's tables, from the submissions' records: the gradebook, the Gradescope upload, the pass rates, the
leaderboard, the timing values and the per-task summary.

Pure functions of ``class_records.Record`` lists and the registry; class_outputs.py writes what they return. A
student's leaderboard metric is shown only when the task's every correctness check passed.
"""

from __future__ import annotations

from assignment.registry import Registry
from grader.classroom.class_records import Record
from grader.classroom.feedback_summary import describe
from grader.classroom.roster import Student
from grader.grade.report import LEADERBOARD, csv_cell, points_cell
from grader.grade.scoring import NOT_RUN_TAG


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
