"""What a class grading has done, on disk, so that a killed or rebooted batch resumes where it stopped.

Per submission, in ``OUT/students/<id>/``:

* the files ``make grade`` writes (results.json, report.html, grades.csv, grading.json), each
  written to a temporary name and renamed;
* ``done.json``, the **done-marker**, written last (atomically): the grading's key, a hash of the
  submission's contents, the grader's version and the settings that shape a grade (tasks, lanes,
  time scale, check selection). A submission is done when its marker's key is the key of this run;
* ``.parts/<lane>.pkl`` and ``.json``: a lane (the GPU tasks, or the CPU tasks) that finished
  while the submission's other lane had not yet; kept across runs, reused when its key still holds;
* ``failed.json``: the last failure (a grader crash, the time limit), removed once graded;
* ``attempts.jsonl``: one line per lane started and ended, per grading finished (the audit trail:
  what ran twice shows here).

The **grader version** is a hash of everything that can change a grade: the grader's code (minus the
modules that only schedule, collect or package, listed in ``NOT_GRADING``), the hidden tests, the
assignment package and its registry, the kit's CUDA sources and model, and the reference solutions.
Python and library versions are recorded in grading.json, not hashed. ``KIT_GRADER_VERSION`` overrides it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pickle
import shutil
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from assignment.atomic import write_atomic
from grader.grade.config import REPO_ROOT
from grader.grade.submission import SKIPPED_PARTS

VERSION_ROOTS = ("grader", "assignment", "solutions")
# Paths (relative to the repository) that cannot change one submission's grade: scheduling and class outputs (all of
# grader/classroom/), packaging, the demo and the self-check, the handout's texts, notes, records and device scripts.
# Everything else under VERSION_ROOTS is hashed.
NOT_GRADING = (
    "grader/classroom",
    "grader/release",
    "grader/tools/demo.py",
    "grader/tools/selfcheck.py",
    "grader/records",
    "grader/scripts",
    "grader/notes",
    "assignment/text",
    "assignment/feedback.py",
    "assignment/feedback.toml",
    "assignment/feedback_form.html.j2",
    "assignment/feedback_html.py",
    "assignment/report",
    "assignment/submit.py",
    "assignment/student.mk",
    "assignment/bootstrap.sh",
)
MARKER = "done.json"
FAILED = "failed.json"
ATTEMPTS = "attempts.jsonl"
PARTS = ".parts"
LOCK = ".lock"
_CHUNK = 1 << 20


def _skipped(rel: str) -> bool:
    parts = rel.split("/")
    if any(p.startswith(".") or p == "__pycache__" for p in parts) or rel.endswith(".pyc"):
        return True
    return any(rel == p or rel.startswith(p + "/") for p in NOT_GRADING)


def _hash_file(digest, path: Path) -> None:
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)


def tree_hash(root: Path, roots: tuple[str, ...] = VERSION_ROOTS, skip=_skipped) -> str:
    """sha256 over every file under ``roots`` (relative path and contents, in sorted order)."""
    digest = hashlib.sha256()
    for top in roots:
        base = root / top
        files = []
        for directory, dirs, names in os.walk(base):
            dirs.sort()
            for name in names:
                path = Path(directory) / name
                rel = path.relative_to(root).as_posix()
                if not skip(rel) and path.is_file():
                    files.append((rel, path))
        for rel, path in sorted(files):
            digest.update(rel.encode() + b"\0")
            _hash_file(digest, path)
            digest.update(b"\0")
    return digest.hexdigest()


def grader_version(root: Path = REPO_ROOT) -> str:
    """The grader's version: 16 hex digits of ``tree_hash``, computed once per process; ``KIT_GRADER_VERSION``
    pins it instead (the kit's tests, which must not see a colleague's edit as a new grader; an instructor who
    knows an edit cannot change a grade and will not regrade a class for it)."""
    return os.environ.get("KIT_GRADER_VERSION") or _hashed_version(Path(root))


@cache
def _hashed_version(root: Path) -> str:
    return tree_hash(root)[:16]


def submission_hash(path: Path) -> str:
    """sha256 of a submission: a zip's bytes; a folder's relative paths and contents (links by their target,
    never followed; the folders the grader skips, such as __pycache__ and .git, left out)."""
    path = Path(path)
    digest = hashlib.sha256()
    if not path.exists():
        return hashlib.sha256(b"missing\0" + str(path).encode()).hexdigest()
    if path.is_file():
        digest.update(b"zip\0")
        _hash_file(digest, path)
        return digest.hexdigest()
    digest.update(b"folder\0")
    entries = []
    for directory, dirs, names in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_PARTS)
        for name in names + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            full = Path(directory) / name
            entries.append((full.relative_to(path).as_posix(), full))
    for rel, full in sorted(entries):
        digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        if full.is_symlink():
            digest.update(b"link\0" + os.readlink(full).encode("utf-8", "surrogateescape"))
        elif full.is_file():
            try:
                _hash_file(digest, full)
            except OSError as exc:  # unreadable: the grader says so; the hash still changes when it is fixed
                digest.update(f"unreadable {exc.errno}".encode())
        digest.update(b"\0")
    return digest.hexdigest()


def grading_key(content_hash: str, version: str, settings: dict) -> str:
    blob = json.dumps({"submission": content_hash, "grader": version, "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


# --------------------------------------------------------------------------- per-student files


def student_dir(out: Path, sid: str) -> Path:
    return Path(out) / "students" / sid


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_marker(out: Path, sid: str) -> dict | None:
    return _read_json(student_dir(out, sid) / MARKER)


def read_failure(out: Path, sid: str) -> dict | None:
    return _read_json(student_dir(out, sid) / FAILED)


def write_json(path: Path, data: dict) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def log_attempt(out: Path, sid: str, **event) -> None:
    """Append one event line (a single write of a short line: whole or, after a kill, a torn last line that
    readers skip)."""
    path = student_dir(out, sid) / ATTEMPTS
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"time": now(), **event}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_attempts(out: Path, sid: str) -> list[dict]:
    path = student_dir(out, sid) / ATTEMPTS
    events = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


# --------------------------------------------------------------------------- lanes finished ahead


@dataclass
class Part:
    lane: str
    meta: dict  # key, seed, tasks, wall_s, worker
    result: object  # grader.grade.scoring.SubmissionScore


def part_paths(out: Path, sid: str, lane: str) -> tuple[Path, Path]:
    base = student_dir(out, sid) / PARTS
    return base / f"{lane}.pkl", base / f"{lane}.json"


def read_part(out: Path, sid: str, lane: str, key: str) -> Part | None:
    """A lane graded earlier for this very key (the pickle was written by the grader's own process, from the
    instructor's tree; its metadata, written after it, names the key)."""
    pkl, meta_path = part_paths(out, sid, lane)
    meta = _read_json(meta_path)
    if not meta or meta.get("key") != key or not pkl.is_file():
        return None
    try:
        with open(pkl, "rb") as handle:
            result = pickle.load(handle)
    except Exception:  # noqa: BLE001 - a torn or stale pickle: grade the lane again
        return None
    return Part(lane, meta, result)


def read_part_meta(out: Path, sid: str, lane: str) -> dict | None:
    return _read_json(part_paths(out, sid, lane)[1])


def clear_parts(out: Path, sid: str) -> None:
    shutil.rmtree(student_dir(out, sid) / PARTS, ignore_errors=True)


class StudentLock:
    """An exclusive, non-blocking lock on one student's folder: two batches (two Slurm elements, or an
    instructor starting the command twice) never grade the same submission at once. The kernel drops it
    when the process dies, kill -9 included."""

    def __init__(self, out: Path, sid: str):
        self.path = student_dir(out, sid) / LOCK
        self.fd: int | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
