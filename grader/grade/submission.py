"""Grading phase 1: collect a submission's student files (from a folder or a .zip) into a fresh
working directory, so graded code never runs inside the instructor's tree.

Only the files the registry names are taken, each read with the registry's size cap that counts the bytes
actually read (a zip's declared sizes can lie). Symbolic links are never followed, in a folder or in
a zip. A zip that is corrupt, encrypted or uses an unsupported compression gives a clear reason per
file (or for the whole archive), never a traceback.
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from assignment.registry import Registry

MAX_ENTRIES = 20_000  # a folder or archive with more entries than this is not searched further
SKIPPED_PARTS = {"__pycache__", ".git", ".venv", "node_modules", "__MACOSX"}


class SubmissionError(ValueError):
    """The submission cannot be read at all (not a folder or a readable zip)."""


@dataclass
class CollectedSubmission:
    name: str
    student_dir: Path
    found: dict[str, str]  # student file -> where it came from in the submission
    missing: list[str]
    notes: list[str]
    # Files the grader reads itself (the theory answers), never put where student code runs: name -> bytes.
    extra: dict[str, bytes] = field(default_factory=dict)


def _candidates(names: list[str], wanted: str) -> list[str]:
    hits = [n for n in names if PurePosixPath(n).name == wanted and not (set(PurePosixPath(n).parts) & SKIPPED_PARTS)]
    # Prefer the shallowest copy: a zip of the whole bundle holds starter/<file>.
    return sorted(hits, key=lambda n: (len(PurePosixPath(n).parts), n))


class _Folder:
    def __init__(self, root: Path):
        self.root = root
        self.names: list[str] = []
        self.links: set[str] = set()
        for directory, dirs, files in os.walk(root, followlinks=False):
            for name in files + dirs:
                full = os.path.join(directory, name)
                if name in dirs and not os.path.islink(full):
                    continue  # a real folder: walked in its turn
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                if os.path.islink(full):
                    self.links.add(rel)
                self.names.append(rel)
                if len(self.names) > MAX_ENTRIES:
                    return

    def is_link(self, name: str) -> bool:
        return name in self.links

    def read(self, name: str, limit: int) -> bytes:
        fd = os.open(self.root / name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise OSError("not a regular file")
            return handle.read(limit + 1)


class _Zip:
    def __init__(self, path: Path):
        try:
            self.archive = zipfile.ZipFile(path)
            infos = [i for i in self.archive.infolist() if not i.is_dir()][:MAX_ENTRIES]
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError) as exc:
            raise SubmissionError(f"{path.name} is not a readable zip archive ({exc})") from None
        self.infos = {i.filename: i for i in infos}
        self.names = list(self.infos)

    def is_link(self, name: str) -> bool:
        return stat.S_ISLNK(self.infos[name].external_attr >> 16)

    def read(self, name: str, limit: int) -> bytes:
        info = self.infos[name]
        if info.flag_bits & 0x1:
            raise OSError("it is encrypted (zip the files without a password)")
        try:
            with self.archive.open(info) as member:  # decompresses as it reads: the cap counts real bytes
                return member.read(limit + 1)
        except NotImplementedError as exc:
            raise OSError(f"its compression is not supported ({exc}); use a standard zip") from None
        except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, ValueError) as exc:
            raise OSError(f"it is corrupt in the archive ({exc})") from None


def _read_one(reader: _Folder | _Zip, filename: str, limit: int, notes: list[str]) -> tuple[str, bytes] | None:
    """(where, bytes) of the shallowest copy of ``filename``, or None (a note says why when it is there)."""
    hits = _candidates(reader.names, filename)
    if not hits:
        return None
    chosen = hits[0]
    if len(hits) > 1:
        notes.append(f"{filename}: several copies found, graded {chosen}")
    if reader.is_link(chosen):
        notes.append(f"{filename}: {chosen} is a symbolic link and was not followed; submit the file itself")
        return None
    try:
        data = reader.read(chosen, limit)
    except OSError as exc:
        notes.append(f"{filename}: {chosen} could not be read: {exc.strerror or exc}")
        return None
    if len(data) > limit:
        notes.append(f"{filename}: {chosen} is larger than {limit} bytes and was not graded")
        return None
    return chosen, data


def collect(source: Path, workdir: Path, registry: Registry, extra_files: tuple[str, ...] = ()) -> CollectedSubmission:
    """The registry's student files, copied into ``workdir/student``; ``extra_files`` read into memory only."""
    source = Path(source)
    student_dir = workdir / "student"
    student_dir.mkdir(parents=True, exist_ok=True)
    found: dict[str, str] = {}
    notes: list[str] = []
    if source.is_dir():
        reader: _Folder | _Zip = _Folder(source.resolve())
    elif source.is_file() and zipfile.is_zipfile(source):
        reader = _Zip(source)
    elif source.exists():
        raise SubmissionError(f"{source.name} is neither a folder nor a .zip archive")
    else:
        raise SubmissionError(f"{source} does not exist")
    if len(reader.names) > MAX_ENTRIES:
        notes.append(f"the submission holds more than {MAX_ENTRIES} files; only the first were searched")
    for filename in registry.student_files:
        taken = _read_one(reader, filename, registry.max_file_bytes, notes)
        if taken:
            found[filename] = taken[0]
            (student_dir / filename).write_bytes(taken[1])
    extra = {}
    for filename in extra_files:
        taken = _read_one(reader, filename, registry.max_file_bytes, notes)
        if taken:
            extra[filename] = taken[1]
    missing = [f for f in registry.student_files if f not in found]
    return CollectedSubmission(
        source.stem if source.is_file() else source.name, student_dir, found, missing, notes, extra
    )
