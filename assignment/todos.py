"""The starter stubs still left in a student's file, per task: what `make report` and `make submit` count.

A Python stub is the ``raise NotImplementedError("tN: ...")`` the starter generator writes (its message is
``assignment.markers.STUB_MESSAGE``); a CUDA stub is a ``KIT_TODO(tN);`` call in code, read as the compiler reads
the file (``assignment.cuda.reading.todo_lines``: a stub in a comment or a literal is not a stub).
"""

from __future__ import annotations

import ast

from assignment.cuda.reading import todo_lines
from assignment.markers import STUB_MESSAGE


def python_todo_counts(text: str) -> dict[str, int]:
    """Task id -> the ``raise NotImplementedError("tN: ...")`` stubs still in a Python file ({} if it does not
    parse)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        call = node.exc if isinstance(node, ast.Raise) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "NotImplementedError"
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
        ):
            match = STUB_MESSAGE.match(call.args[0].value)
            if match:
                found[match[1]] = found.get(match[1], 0) + 1
    return found


def todo_counts(text: str, filename: str) -> dict[str, int]:
    """Task id -> the starter stubs still in a student file: Python raises, CUDA ``KIT_TODO(tN);`` calls."""
    if filename.endswith(".py"):
        return python_todo_counts(text)
    return {task: len(lines) for task, lines in todo_lines(text).items()}
