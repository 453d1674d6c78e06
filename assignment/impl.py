"""Which implementation the tests run: ``IMPL=solutions|starter|<path>``.

Tests and benchmarks never import student files directly; they go through
``student_dir()`` and ``load_python()`` here, the one thin adapter between the
kit and the code under test.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parent.parent
NAMED_IMPLS = ("solutions", "starter")


class ImplError(RuntimeError):
    """The implementation directory or a student file cannot be found."""


def default_impl() -> str:
    # An instructor checkout has solutions/; a student bundle only starter/.
    return "solutions" if (REPO_ROOT / "solutions").is_dir() else "starter"


def student_dir(impl: str | None = None) -> Path:
    """The directory holding the student files under test."""
    impl = impl or os.environ.get("IMPL") or default_impl()
    path = REPO_ROOT / impl if impl in NAMED_IMPLS else Path(impl).expanduser()
    path = path.resolve()
    if not path.is_dir():
        raise ImplError(f"IMPL={impl!r}: {path} is not a directory (use solutions, starter or a path)")
    return path


def student_file(filename: str, impl: str | None = None) -> Path:
    path = student_dir(impl) / filename
    if not path.is_file():
        raise ImplError(
            f"{filename} not found in {path.parent} (IMPL={impl or os.environ.get('IMPL') or default_impl()})"
        )
    return path


@cache
def _load_module(path: Path) -> ModuleType:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"student_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImplError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_python(filename: str, impl: str | None = None) -> ModuleType:
    """Import a student's Python file (for example ``t1_attention.py``)."""
    return _load_module(student_file(filename, impl))
