""" "What to implement": read from the solution and starter files, never retyped.

For a Python file: the signature and docstring of every function that holds a
region of the task, with the TODO descriptions and PLAN lines of its stubs.
For a CUDA file: the TODO description and PLAN lines of each region of the task
(with its line in the starter, so students can jump to it) and the signatures of
the exported ``KIT_API`` functions.

The starter text is generated here with ``strip_solutions`` rather than read
from starter/, so the handout is right even before ``make starter`` has run
(CI keeps the two identical anyway).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from assignment.registry import Registry, Task
from assignment.markers import strip_solutions

REPO_ROOT = Path(__file__).resolve().parent.parent
_TODO = re.compile(r"^\s*(?:#|//)\s*TODO\((?P<task>t\d+)\):\s*(?P<desc>.*?)\s*$")
_PLAN = re.compile(r"^\s*(?:#|//)\s*PLAN:\s?(?P<text>.*?)\s*$")
# `KIT_API <return type> name(args...)` up to the body or the semicolon, across lines.
_KIT_API = re.compile(r"^\s*KIT_API\s+(?P<sig>[^;{]*?\))\s*[{;]", re.MULTILINE | re.DOTALL)


@dataclass
class Todo:
    task: str
    description: str
    plan: list[str]
    starter_line: int  # 1-based line of the TODO in the starter file


@dataclass
class FunctionDoc:
    name: str
    signature: str
    docstring: str
    todos: list[Todo] = field(default_factory=list)


@dataclass
class FileApi:
    name: str
    language: str  # "python" or "cuda"
    present: bool
    source: str = ""  # where it was read from, e.g. "solutions/t1_attention.py"
    functions: list[FunctionDoc] = field(default_factory=list)  # Python
    todos: list[Todo] = field(default_factory=list)  # CUDA: this task's regions, in file order
    exported: list[str] = field(default_factory=list)  # CUDA: KIT_API signatures


def _find_todos(starter_text: str) -> list[Todo]:
    """Every TODO stub with the PLAN lines that follow it."""
    todos: list[Todo] = []
    lines = starter_text.splitlines()
    for number, line in enumerate(lines, start=1):
        match = _TODO.match(line)
        if not match:
            continue
        plan = []
        for following in lines[number:]:
            plan_match = _PLAN.match(following)
            if not plan_match:
                break
            plan.append(plan_match.group("text"))
        todos.append(Todo(match.group("task"), match.group("desc"), plan, number))
    return todos


def _python_signature(source_lines: list[str], node: ast.FunctionDef) -> str:
    """The `def` header exactly as written (multi-line signatures keep their layout)."""
    body_start = node.body[0].lineno
    header = source_lines[node.lineno - 1 : body_start - 1]
    # Decorators are above node.lineno; the header ends at the line with the colon.
    text = "\n".join(header).rstrip()
    return text


def _python_functions(starter_text: str, task_id: str) -> list[FunctionDoc]:
    tree = ast.parse(starter_text)
    lines = starter_text.splitlines()
    todos = [t for t in _find_todos(starter_text) if t.task == task_id]
    functions = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        inside = [t for t in todos if node.lineno <= t.starter_line <= node.end_lineno]
        # Nested functions would list a TODO twice: keep it only on the innermost one.
        if inside and not any(
            isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            and child is not node
            and any(child.lineno <= t.starter_line <= child.end_lineno for t in inside)
            for child in ast.walk(node)
        ):
            functions.append(
                FunctionDoc(node.name, _python_signature(lines, node), ast.get_docstring(node) or "", inside)
            )
    return sorted(functions, key=lambda f: f.todos[0].starter_line)


def _exported_cuda_functions(text: str) -> list[str]:
    return [" ".join(m.group("sig").split()) for m in _KIT_API.finditer(text)]


def _locate(name: str, root: Path) -> tuple[Path, str] | None:
    """The solution file, or the starter file in a student bundle without solutions."""
    for folder in ("solutions", "starter"):
        path = root / folder / name
        if path.is_file():
            return path, folder
    return None


def file_api(name: str, task: Task, registry: Registry | None = None, root: Path = REPO_ROOT) -> FileApi:
    language = "cuda" if name.endswith((".cu", ".cuh")) else "python"
    found = _locate(name, root)
    if found is None:
        return FileApi(name, language, present=False)
    path, folder = found
    text = path.read_text(encoding="utf-8")
    starter_text = strip_solutions(text, f"{folder}/{name}", registry)[0] if folder == "solutions" else text
    api = FileApi(name, language, present=True, source=f"{folder}/{name}")
    if language == "python":
        api.functions = _python_functions(starter_text, task.id)
    else:
        api.todos = [t for t in _find_todos(starter_text) if t.task == task.id]
        api.exported = _exported_cuda_functions(text)
    return api


def task_api(task: Task, registry: Registry | None = None, root: Path = REPO_ROOT) -> list[FileApi]:
    return [file_api(name, task, registry, root) for name in task.files]
