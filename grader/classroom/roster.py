"""Who handed in what: the submissions of a class, from a folder of them or from a Gradescope export.

Two layouts are read (``scan`` tells them apart by ``submission_metadata.yml``):

* **a folder of submissions**: one folder or ``.zip`` per student, named by the student id
  (``alice/``, ``bob.zip``). Names and emails can come from a roster CSV (``--roster``: columns
  Name, or First Name and Last Name; SID; Email; matched on the SID, else the email, against the id).
* **a Gradescope export** ("Download Submissions", unzipped): ``submission_metadata.yml`` and one
  folder per submission, ``submission_<n>/``. The YAML maps each folder to its submitters (Ruby
  symbols as keys: ``:submitters:`` with ``:name:``, ``:sid:``, ``:email:``) and its ``:created_at:``
  time. A group submission is graded once and listed once per member. Gradescope's export has no
  late flag of its own: ``late`` is read from a ``:late:`` key where one is present, else computed from
  ``:created_at:`` against ``--due`` when it is given, else unknown.

Nothing here stops at a bad entry: a folder the YAML lists but the export lacks, a file that is not a
folder or a zip, a ``.zip`` that is not a zip archive (kept: the grader scores it zero with the
reason), two entries for one id, one student in two submissions: each gets a line in ``problems``
and the rest goes on.
"""

from __future__ import annotations

import csv
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path

METADATA_FILE = "submission_metadata.yml"
MAX_METADATA_BYTES = 64 * 2**20  # a class of thousands is a few MB of YAML


class RosterError(ValueError):
    """The class cannot be read at all (no such folder, a metadata file that is not YAML)."""


@dataclass(frozen=True)
class Student:
    name: str = ""
    sid: str = ""
    email: str = ""


@dataclass
class Submission:
    id: str  # the folder name under OUT/students/: the student id, or Gradescope's submission_<n>
    path: Path  # the folder or .zip the grader reads
    students: list[Student] = field(default_factory=list)
    late: bool | None = None  # None: not known (no export flag, no due date)
    submitted_at: str = ""  # ISO 8601, where the export says

    @property
    def name(self) -> str:
        return "; ".join(s.name for s in self.students if s.name)

    @property
    def email(self) -> str:
        return "; ".join(s.email for s in self.students if s.email)

    @property
    def sid(self) -> str:
        return "; ".join(s.sid for s in self.students if s.sid)

    def members(self) -> list[Student]:
        """One entry per student the grade goes to (a submission without names: its id as the SID)."""
        return self.students or [Student(sid=self.id)]

    def matches(self, key: str) -> bool:
        """``--only`` takes a submission id, or a member's SID or email."""
        return key == self.id or any(key in (s.sid, s.email) and key for s in self.students)


@dataclass
class Roster:
    root: Path
    layout: str  # "folders" | "gradescope"
    submissions: list[Submission]
    problems: list[str] = field(default_factory=list)


def scan(root: Path, *, due: datetime | None = None, roster_csv: Path | None = None) -> Roster:
    root = Path(root)
    if root.is_file() and root.suffix.lower() == ".zip":
        raise RosterError(f"{root} is a zip: unzip the export (or the class's folder) first and pass the folder")
    if not root.is_dir():
        raise RosterError(
            f"{root}: no such folder (it should hold one folder or .zip per student, or a Gradescope "
            f"export with {METADATA_FILE})"
        )
    export = _export_root(root)
    result = _gradescope(export, due) if export else _folders(root)
    if roster_csv is not None:
        _apply_roster(result, Path(roster_csv))
    _check_students(result)
    return result


def discover(root: Path, **kwargs) -> list[Submission]:
    return scan(root, **kwargs).submissions


def _export_root(root: Path) -> Path | None:
    """The folder holding submission_metadata.yml: ``root``, or the one subfolder that holds it (an export
    unzipped into ``root``, perhaps beside the grading's output folder)."""
    if (root / METADATA_FILE).is_file():
        return root
    exports = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (p / METADATA_FILE).is_file()]
    return exports[0] if len(exports) == 1 else None


def _entry(path: Path, problems: list[str]) -> bool:
    """Whether ``path`` can be graded as a submission; a line in ``problems`` when not (or when it is odd)."""
    if path.is_symlink():
        problems.append(f"{path.name}: a symbolic link; not followed (copy the submission in)")
        return False
    if path.is_dir():
        return True
    if path.is_file() and path.suffix.lower() == ".zip":
        if not zipfile.is_zipfile(path):
            problems.append(f"{path.name}: not a zip archive; graded as unreadable (zero, with the reason)")
        return True
    problems.append(f"{path.name}: not a folder or a .zip; ignored")
    return False


def _folders(root: Path) -> Roster:
    result = Roster(root, "folders", [])
    seen: dict[str, Path] = {}
    for entry in sorted(root.iterdir(), key=lambda p: (p.suffix.lower() == ".zip", p.name)):
        if entry.name.startswith(".") or entry.name == "__MACOSX" or not _entry(entry, result.problems):
            continue
        sid = entry.stem if entry.is_file() else entry.name
        if sid in seen:
            result.problems.append(
                f"{entry.name}: a second submission for {sid} (besides {seen[sid].name}); "
                f"ignored, {seen[sid].name} is graded"
            )
            continue
        seen[sid] = entry
        result.submissions.append(Submission(sid, entry))
    result.submissions.sort(key=lambda s: s.id)
    return result


def _text(value) -> str:
    return "" if value is None else str(value).strip()


def _get(record: dict, key: str):
    """A Gradescope YAML key, written as a Ruby symbol (``:name``) or plainly."""
    return record.get(f":{key}", record.get(key))


def _gradescope(root: Path, due: datetime | None) -> Roster:
    import yaml

    path = root / METADATA_FILE
    if path.stat().st_size > MAX_METADATA_BYTES:
        raise RosterError(f"{path}: larger than {MAX_METADATA_BYTES} bytes; not a submissions export")
    try:
        metadata = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        raise RosterError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(metadata, dict):
        raise RosterError(
            f"{path}: expected a mapping of submission folders to their submitters, got {type(metadata).__name__}"
        )
    result = Roster(root, "gradescope", [])
    for key in sorted(metadata, key=str):
        folder, record = str(key), metadata[key]
        if not isinstance(record, dict):
            result.problems.append(f"{folder}: its entry in {METADATA_FILE} is not a mapping; skipped")
            continue
        submitters = _get(record, "submitters") or []
        students = [
            Student(_text(_get(s, "name")), _text(_get(s, "sid")), _text(_get(s, "email")))
            for s in submitters
            if isinstance(s, dict)
        ]
        who = ", ".join(s.name or s.email or s.sid for s in students) or "no submitter listed"
        candidates = [root / folder, root / f"{folder}.zip"]
        entry = next((p for p in candidates if p.exists() or p.is_symlink()), None)
        if entry is None:
            result.problems.append(f"{folder} ({who}): listed in {METADATA_FILE} but not in the export; skipped")
            continue
        if not _entry(entry, result.problems):
            continue
        created = _get(record, "created_at")
        submitted_at = _iso(created)
        late = _get(record, "late")
        if not isinstance(late, bool):
            late = _is_late(created, due)
        result.submissions.append(Submission(folder, entry, students, late, submitted_at))
    listed = {s.id for s in result.submissions} | {str(k) for k in metadata}
    for entry in sorted(root.iterdir()):
        name = entry.stem if entry.suffix.lower() == ".zip" else entry.name
        if entry.name.startswith(".") or entry.name in (METADATA_FILE, "__MACOSX") or name in listed:
            continue
        if _entry(entry, result.problems):
            result.problems.append(f"{entry.name}: not in {METADATA_FILE}; graded without names")
            result.submissions.append(Submission(name, entry))
    return result


def _as_datetime(value) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value.strip():
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def _iso(value) -> str:
    moment = _as_datetime(value)
    return moment.isoformat() if moment else _text(value)


def _is_late(created, due: datetime | None) -> bool | None:
    moment = _as_datetime(created)
    if due is None or moment is None:
        return None
    return moment > (due if due.tzinfo else due.replace(tzinfo=UTC))


def parse_due(text: str) -> datetime:
    """``--due``: ISO 8601 (``2026-03-01T23:59:00-08:00``; without a zone, UTC)."""
    moment = _as_datetime(text)
    if moment is None:
        raise RosterError(f"--due {text!r}: not an ISO 8601 date and time (e.g. 2026-03-01T23:59:00-08:00)")
    return moment


def _apply_roster(result: Roster, path: Path) -> None:
    """Names and emails for a folder of submissions named by SID (or by email)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise RosterError(f"--roster {path}: cannot be read ({exc})") from None
    people: dict[str, Student] = {}
    for row in rows:
        cells = {(k or "").strip().lower(): _text(v) for k, v in row.items()}
        name = cells.get("name") or " ".join(p for p in (cells.get("first name", ""), cells.get("last name", "")) if p)
        student = Student(name, cells.get("sid", "") or cells.get("student id", ""), cells.get("email", ""))
        for key in (student.sid, student.email):
            if key:
                people[key] = student
    if not people:
        raise RosterError(f"--roster {path}: no row with a SID or an Email column")
    for submission in result.submissions:
        if submission.students:
            continue
        student = people.get(submission.id)
        if student is None:
            result.problems.append(f"{submission.id}: not in the roster {path.name}; graded without a name")
        else:
            submission.students = [Student(student.name, student.sid or submission.id, student.email)]


def _check_students(result: Roster) -> None:
    """One student in two submissions: both are graded, and the gradebook and the upload CSV say which counts."""
    owner: dict[str, str] = {}
    for submission in result.submissions:
        for student in submission.students:
            key = student.sid or student.email
            if not key:
                continue
            if key in owner:
                result.problems.append(
                    f"{student.name or key} is a submitter of both {owner[key]} and "
                    f"{submission.id}; both are graded, the upload CSV takes the later one"
                )
            owner[key] = submission.id
