"""Who may run what at the same time on this host: locks shared by every grading process (``flock``).

Two gates, each a readers-writer lock between processes, so that gradings side by side (a class batch's lanes, an
instructor's second ``make grade``) still give each check what its deadline assumes and each timing an idle GPU:

* ``checks``: every hidden check holds it shared while it runs; a check that ran past its deadline is rerun
  holding it exclusively, so that rerun runs alone (no other grading's check on the host's cores).
* ``gpu-<devices>``: a checker that may use the GPU holds it shared for its whole life; a timing pass holds it
  exclusively, so nothing of another grading runs on that GPU while it times.

Every process takes them in one order, the GPU gate before the checks gate (a checker holds the GPU gate from its
start; a rerun's runner takes it before the checks gate; a timing checker takes only the GPU gate), so no two
processes ever wait on each other in a circle.

A writer first takes the gate's turnstile and keeps it: readers take the turnstile only for a moment before
their shared lock, so a waiting writer holds new readers back and is not starved by a stream of short checks.
Locks belong to open files, so a process that dies releases its locks with its files: a killed grading never
leaves the host locked. The files live in a folder of this user's (``KIT_GRADING_LOCKS``, else the temporary
folder); a sandboxed worker has a private /tmp and cannot reach them.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCKS_SETTING = "KIT_GRADING_LOCKS"


def locks_dir() -> Path:
    folder = os.environ.get(LOCKS_SETTING) or str(Path(tempfile.gettempdir()) / f"kit-grading-{os.getuid()}")
    path = Path(folder)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def gpu_gate_name() -> str:
    """The GPU gate of the devices this process sees (a class batch gives each GPU worker its own)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "-") or "none"
    return f"gpu-{visible}"


class Gate:
    """A readers-writer lock between processes on this host, named ``name``."""

    def __init__(self, name: str, folder: Path | None = None):
        folder = folder or locks_dir()
        self.path = folder / f"{name}.lock"
        self.turnstile = folder / f"{name}.turnstile"

    @contextmanager
    def shared(self) -> Iterator[None]:
        with _locked(self.turnstile, fcntl.LOCK_EX):
            handle = _open(self.path)
            fcntl.flock(handle, fcntl.LOCK_SH)
        try:
            yield
        finally:
            os.close(handle)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with _locked(self.turnstile, fcntl.LOCK_EX), _locked(self.path, fcntl.LOCK_EX):
            yield

    def hold_shared(self) -> int:
        """Take the gate shared until this process ends (or the returned file is closed)."""
        with _locked(self.turnstile, fcntl.LOCK_EX):
            handle = _open(self.path)
            fcntl.flock(handle, fcntl.LOCK_SH)
        return handle

    def hold_exclusive(self) -> int:
        """Take the gate exclusively until this process ends (or the returned file is closed)."""
        turn = _open(self.turnstile)
        fcntl.flock(turn, fcntl.LOCK_EX)
        handle = _open(self.path)
        fcntl.flock(handle, fcntl.LOCK_EX)
        os.close(turn)  # the lock on the gate itself now keeps readers out
        return handle


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@contextmanager
def _locked(path: Path, how: int) -> Iterator[None]:
    handle = _open(path)
    try:
        fcntl.flock(handle, how)
        yield
    finally:
        os.close(handle)
