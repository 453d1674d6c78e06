"""Write a file whole or not at all: a temporary name in the same folder, then a rename over the target.

A reader (the grader, a browser, a resumed feedback form) sees the old file or the new one, never half of
one; the new file gets the permissions the umask gives a plain file (mkstemp's 0600 would hide it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends without an error it becomes ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, content: str | bytes) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
