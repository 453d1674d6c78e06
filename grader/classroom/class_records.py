"""Each submission's grading read back from what a batch left (one ``Record`` each), and the GPU workers' checks.

A submission's status: **graded** (its done-marker matches its current contents and this grader's
version), **stale** (graded, but the submission or the grader changed since: its old scores are
shown in the gradebook, flagged, and left out of the upload CSV), **failed** (the last attempt failed:
the reason), **not graded**.

**Leaderboard opt-in**: a file ``leaderboard.txt`` in the submission (at any depth; the shallowest copy,
read as the grader reads student files: from a zip without extracting, capped, never through a link).
Its first non-empty line is the name shown (at most 40 characters; none: "anonymous"); a first line
"no" opts out (grader/grade/report.py's ``leaderboard_alias``, which also decides the Gradescope leaderboard
entries of each results.json).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from grader.classroom import ledger
from grader.classroom.roster import Submission
from grader.grade.report import OPT_IN_BYTES, OPT_IN_FILE, leaderboard_alias
from grader.grade.submission import SubmissionError, _candidates, _Folder, _Zip

MAX_JSON_BYTES = 16 * 2**20
STATUSES = ("graded", "unreadable", "stale", "failed", "pending")


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


def load_json(path: Path) -> dict | None:
    """A JSON object the batch wrote; None when it is missing, unreadable, too large, a link or not an object."""
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
        results, grading = load_json(folder / "results.json"), load_json(folder / "grading.json")
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


def worker_checks(out: Path) -> list[dict]:
    """Every batch run's GPU worker checks (OUT/workers/*.json), oldest first."""
    runs = []
    for path in sorted((Path(out) / "workers").glob("*.json")):
        data = load_json(path)
        if data:
            runs.append(data)
    return sorted(runs, key=lambda r: r.get("time", ""))
