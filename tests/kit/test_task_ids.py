"""A task is one unit of code (issue 26): outside its own modules, the kit's code does not name a task id.

The task's own places may: its module (``assignment/tasks/``), files named after it (``t6_driver.py``,
``test_t4_hidden.py``), the registry and its loader, the tests and the texts. Everywhere else in the kit's Python
(``assignment/``, ``grader/``, ``handout/``), a string literal of one word or a name that holds a task id (``"t4"``,
``"t4_flash_attention.cu"``, ``student_t5``) is a branch on one task that the next task would have to extend.
Read with ``ast``: comments, docstrings and prose (a message or a help text that mentions a task) are text.

What a task adds to the kit goes in its ``TaskCode`` (``assignment/tasks/__init__.py``: its kernels, bench, profile,
model attention, sampling loop, quick check, ...) or the registry (its data; ``[[chapter]]`` places the handout's
other chapters among the tasks), and the rest of the kit loops over tasks; no file is allowed an exception.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.kit

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("assignment", "grader", "handout")
TASK_ID = re.compile(r"(?<![A-Za-z0-9])t[1-9][0-9]*(?![0-9])")
# The task's own places, and the registry (it defines the ids and says what they look like in its errors).
OWN = re.compile(
    r"^(assignment/tasks/.*|assignment/registry\.py|.*/t[1-9][0-9]*_[^/]*\.py|.*/test_t[1-9][0-9]*_[^/]*\.py)$"
)
# Tools and records beside the kit's code, not the kit: an instructor's device scripts and notes.
NOT_KIT_CODE = re.compile(r"^grader/(benchmarks|records|scripts|notes)/")


def occurrences(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if re.search(r"\s", node.value):
                continue  # prose: a message, a help text
            text = node.value
        elif isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            text = node.name
        else:
            continue
        if TASK_ID.search(text):
            found.append((node.lineno, text if len(text) < 60 else text[:57] + "..."))
    return found


def kit_code() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            name = path.relative_to(REPO).as_posix()
            if OWN.match(name) or NOT_KIT_CODE.match(name):
                continue
            if hits := occurrences(path):
                found[name] = hits
    return found


def test_the_scan_sees_ids_in_strings_and_names_but_not_in_docstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""t4 in a docstring."""\nFILE = "t4_flash_attention.cu"\ndef student_t5():\n'
        '    """t5 here too."""\n    return t6_cache_class\n# t7 in a comment\nx = "at1" + "t10"\n'
        'print("make bench T=t2 prints it")\n'
    )
    assert sorted(text for _, text in occurrences(sample)) == [
        "student_t5",
        "t10",
        "t4_flash_attention.cu",
        "t6_cache_class",
    ]


def test_no_task_id_in_the_kits_code_outside_the_tasks_own_places():
    found = kit_code()
    assert not found, (
        "a task id in the kit's code (move it into the task's module, assignment/tasks/<id>.py):\n"
        + "\n".join(
            f"  {name}: " + ", ".join(f"line {line} {text!r}" for line, text in hits) for name, hits in found.items()
        )
    )
