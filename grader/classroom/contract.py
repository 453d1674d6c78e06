"""The batch's contract with whatever drives it (grader/classroom/batch.py's own command, a Slurm job array:
grader/classroom/slurm.py, a resumed run): the class's submissions, which of them still need grading, and the class
outputs written from whatever is graded. Below both: neither the batch's command nor Slurm's is imported here."""

from __future__ import annotations

import json
from pathlib import Path

from grader.classroom import ledger
from grader.classroom.roster import Submission, parse_due, scan
from grader.classroom.roster import discover as _discover


def discover(submissions: Path) -> list[Submission]:
    """The class's submissions (each with .id, .path and, where known, .name, .email, .late)."""
    return _discover(Path(submissions))


def _as_submissions(submissions) -> list[Submission]:
    return list(submissions) if isinstance(submissions, (list, tuple)) else discover(Path(submissions))


def pending(submissions, out: Path, settings: dict | None = None) -> list[str]:
    """Ids not yet graded with their current contents and this grader's version (and, given ``settings``,
    those settings): new, changed, failed or never finished. ``submissions``: the folder, or discover()'s list."""
    version = ledger.grader_version()
    todo = []
    for sub in _as_submissions(submissions):
        marker = ledger.read_marker(Path(out), sub.id)
        if (
            not marker
            or marker.get("grader_version") != version
            or marker.get("submission_hash") != ledger.submission_hash(sub.path)
            or (settings is not None and marker.get("settings") != settings)
        ):
            todo.append(sub.id)
    return todo


def collect(submissions, out: Path, **kwargs):
    """Write the class outputs (OUT/class/) from whatever is graded; returns the summary (a dict)."""
    from grader.classroom.class_outputs import write_class_outputs

    out = Path(out)
    if isinstance(submissions, (list, tuple)):
        subs, problems = list(submissions), []
    else:
        roster = scan(Path(submissions), **_saved_roster_options(out))
        subs, problems = roster.submissions, roster.problems
    return write_class_outputs(subs, out, problems=problems, **kwargs)


def batch_file(out: Path) -> Path:
    """The last run's saved options (--due, --roster): OUT/batch.json."""
    return Path(out) / "batch.json"


def _saved_roster_options(out: Path | None) -> dict:
    """--due and --roster as the last run saved them, so that a later --collect-only reads the class the same."""
    if out is None:
        return {}
    try:
        saved = json.loads(batch_file(out).read_text())
    except (OSError, ValueError):
        return {}
    options = {}
    if saved.get("due"):
        options["due"] = parse_due(saved["due"])
    if saved.get("roster"):
        options["roster_csv"] = Path(saved["roster"])
    return options
