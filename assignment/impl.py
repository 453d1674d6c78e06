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
import traceback
from functools import cache
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parent.parent
NAMED_IMPLS = ("solutions", "starter")


class ImplError(RuntimeError):
    """The implementation directory or a student file cannot be found."""


class StudentImportError(ImplError):
    """A student's Python file fails to import (a syntax error, an exception at its top level): one message that
    names the file, the error and the line, shown once however many tests stop there (``assignment.pytest_plugin``)."""

    def __init__(self, path: Path, error: BaseException):
        self.path, self.error = path, error
        super().__init__(f"{path.name} does not import: {describe_import_error(path, error)}")


def describe_import_error(path: Path, error: BaseException) -> str:
    """``SyntaxError: invalid syntax (line 12)`` and the line with a caret, or the exception and the line of the
    student's file it was raised from."""
    if isinstance(error, SyntaxError) and Path(error.filename or "").name == path.name:
        where = f" (line {error.lineno})" if error.lineno else ""
        text = (error.text or "").rstrip("\n")
        caret = ""
        if text and error.offset:
            stripped = text.lstrip()
            caret = "\n    " + stripped + "\n    " + " " * max(0, error.offset - 1 - (len(text) - len(stripped))) + "^"
        return f"{type(error).__name__}: {error.msg}{where}{caret}"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if Path(frame.filename) == path]
    where = f" (line {lines[-1]})" if lines else ""
    return f"{type(error).__name__}: {error}{where}"


def has_solutions() -> bool:
    """An instructor checkout has the reference solutions (solutions/); a student bundle only starter/."""
    return (REPO_ROOT / "solutions").is_dir()


def default_impl() -> str:
    return "solutions" if has_solutions() else "starter"


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
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the student's own error, once, in a line: not a traceback through the kit
        del sys.modules[name]
        raise StudentImportError(path, exc) from exc
    return module


def load_python(filename: str, impl: str | None = None) -> ModuleType:
    """Import a student's Python file (for example ``t1_attention.py``)."""
    return _load_module(student_file(filename, impl))
