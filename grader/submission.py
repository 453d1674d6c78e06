"""Collect a submission's student files (from a folder or a .zip) into a fresh
working directory, so graded code never runs inside the instructor's tree."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from assignment.registry import Registry

MAX_FILE_BYTES = 5 * 1024 * 1024
SKIPPED_PARTS = {"__pycache__", ".git", ".venv", "node_modules", "__MACOSX"}


class SubmissionError(ValueError):
    """The submission cannot be read at all (not a folder or a valid zip)."""


@dataclass
class CollectedSubmission:
    name: str
    student_dir: Path
    found: dict[str, str]  # student file -> where it came from in the submission
    missing: list[str]
    notes: list[str]


def _candidates(names: list[str], wanted: str) -> list[str]:
    hits = [n for n in names if PurePosixPath(n).name == wanted and not (set(PurePosixPath(n).parts) & SKIPPED_PARTS)]
    # Prefer the shallowest copy: a zip of the whole bundle holds starter/<file>.
    return sorted(hits, key=lambda n: (len(PurePosixPath(n).parts), n))


def collect(source: Path, workdir: Path, registry: Registry) -> CollectedSubmission:
    source = Path(source)
    student_dir = workdir / "student"
    student_dir.mkdir(parents=True, exist_ok=True)
    found: dict[str, str] = {}
    notes: list[str] = []
    wanted = registry.student_files
    if source.is_dir():
        names = [p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file()]
        reader = lambda n: (source / n).read_bytes()  # noqa: E731
        size_of = lambda n: (source / n).stat().st_size  # noqa: E731
    elif source.is_file() and zipfile.is_zipfile(source):
        archive = zipfile.ZipFile(source)
        infos = {i.filename: i for i in archive.infolist() if not i.is_dir()}
        names = list(infos)
        reader = archive.read
        size_of = lambda n: infos[n].file_size  # noqa: E731
    elif source.exists():
        raise SubmissionError(f"{source} is neither a folder nor a .zip archive")
    else:
        raise SubmissionError(f"{source} does not exist")
    for filename in wanted:
        hits = _candidates(names, filename)
        if not hits:
            continue
        chosen = hits[0]
        if len(hits) > 1:
            notes.append(f"{filename}: several copies found, graded {chosen}")
        if size_of(chosen) > MAX_FILE_BYTES:
            notes.append(f"{filename}: {chosen} is larger than {MAX_FILE_BYTES} bytes and was not graded")
            continue
        (student_dir / filename).write_bytes(reader(chosen))
        found[filename] = chosen
    missing = [f for f in wanted if f not in found]
    return CollectedSubmission(source.stem if source.is_file() else source.name, student_dir, found, missing, notes)

