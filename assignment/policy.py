"""What a graded Python file may use, checked statically: nothing of the student's runs here.

The grader runs this check on a submitted Python file before anything imports it (and imports it
only inside the sandbox); each Python task's public tests run the same check, so a student sees a
rejection, with its line, before submitting. A file may

* import only the modules its task allows (the registry's ``[task.rules] imports``) and a few
  harmless standard ones (``KIT_IMPORTS``);
* not name what its task forbids (``[task.rules] forbidden``: fused attention, NumPy round trips)
  nor the PyTorch escape hatches every task forbids (``KIT_FORBIDDEN_ATTRIBUTES``);
* not look code or attributes up dynamically (``eval``, ``getattr``, ``__import__``, ...), reach
  private attributes of other objects (``torch._C``), or use dunder attributes beyond a short list of
  harmless ones: those are the ways around the two rules above.

A file is read as Python's own import reads it (``python_text``): a UTF-8 byte-order mark, an encoding
declaration and Windows (CR LF) or old Mac (CR) line endings are all fine, so a file an editor saved that
way is checked, run and graded like any other; bytes that are not text in the file's encoding are one
violation that says so.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

# Standard modules any graded Python file may import.
KIT_IMPORTS = (
    "__future__",
    "math",
    "typing",
    "dataclasses",
    "functools",
    "itertools",
    "collections",
    "collections.abc",
    "enum",
    "abc",
)
# Builtins that evaluate code, look attributes up by string, or touch the file system.
DYNAMIC_BUILTINS = frozenset(
    {
        "eval",
        "exec",
        "compile",
        "__import__",
        "getattr",
        "setattr",
        "delattr",
        "hasattr",
        "globals",
        "locals",
        "vars",
        "open",
        "input",
        "breakpoint",
        "help",
        "exit",
        "quit",
        "memoryview",
        "__builtins__",
    }
)
# PyTorch attributes that load or build other code, spawn processes or switch kernels underneath.
KIT_FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "ops",
        "library",
        "utils",
        "multiprocessing",
        "backends",
        "jit",
        "compile",
        "hub",
        "load",
        "save",
        "cpp_extension",
        "fx",
        "export",
        "classes",
        "distributed",
        "package",
        "overrides",
    }
)
# torch re-exports standard modules as attributes (torch.os, torch.sys, torch.ctypes, torch.importlib, ...):
# an attribute named after a standard module is a way out, except these names that are also PyTorch API
# (tensor.chunk, torch.select, torch.trace, torch.random) or modules a file may import anyway.
STDLIB_NAMES_THAT_ARE_TORCH_API = frozenset({"chunk", "select", "trace", "random", "copy", "types"})
STDLIB_ATTRIBUTES = frozenset(sys.stdlib_module_names) - STDLIB_NAMES_THAT_ARE_TORCH_API - frozenset(KIT_IMPORTS)
ALLOWED_DUNDERS = frozenset(
    {
        "__init__",
        "__post_init__",
        "__name__",
        "__qualname__",
        "__doc__",
        "__call__",
        "__repr__",
        "__str__",
        "__len__",
        "__iter__",
        "__next__",
        "__getitem__",
        "__setitem__",
        "__contains__",
        "__enter__",
        "__exit__",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__hash__",
        "__bool__",
        "__all__",
        "__slots__",
    }
)
OWN_OBJECT_NAMES = ("self", "cls")  # private attributes of the file's own classes are fine


@dataclass(frozen=True)
class Violation:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass(frozen=True)
class Rules:
    """One task's rules for its Python files (from the registry's ``[task.rules]``)."""

    task: str
    imports: tuple[str, ...]
    forbidden: tuple[str, ...]

    @property
    def allowed_imports(self) -> frozenset[str]:
        return frozenset(self.imports) | frozenset(KIT_IMPORTS)


def _import_allowed(module: str, allowed: frozenset[str]) -> bool:
    return module in allowed


class _Checker(ast.NodeVisitor):
    def __init__(self, rules: Rules):
        self.rules = rules
        self.forbidden = frozenset(rules.forbidden)
        self.allowed = rules.allowed_imports
        self.found: list[Violation] = []

    def add(self, node: ast.AST, message: str) -> None:
        self.found.append(Violation(getattr(node, "lineno", 0), message))

    def _name_rule(self, node: ast.AST, name: str, what: str) -> None:
        if name in self.forbidden:
            self.add(
                node,
                f"{what} '{name}' is forbidden in {self.rules.task} (its handout section lists what "
                "the task's files may not use)",
            )
        elif name in KIT_FORBIDDEN_ATTRIBUTES:
            self.add(node, f"{what} '{name}' is not allowed in graded files (it loads or builds other code)")
        elif name in STDLIB_ATTRIBUTES and what == "the attribute":
            self.add(
                node,
                f"{what} '{name}' reaches a standard module; graded files may use only the modules "
                "they are allowed to import",
            )

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not _import_allowed(alias.name, self.allowed):
                self.add(
                    node,
                    f"import of '{alias.name}': {self.rules.task} files may import only "
                    f"{', '.join(sorted(self.allowed))}",
                )
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.add(node, "relative imports are not allowed: a graded file must stand alone")
            return
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if alias.name == "*":
                self.add(node, f"'from {module} import *' is not allowed: import the names you use")
            elif not (_import_allowed(module, self.allowed) or _import_allowed(full, self.allowed)):
                self.add(
                    node,
                    f"import from '{module}': {self.rules.task} files may import only "
                    f"{', '.join(sorted(self.allowed))}",
                )
            else:
                self._name_rule(node, alias.name, "importing")
                if alias.name.startswith("_") and module != "__future__":
                    self.add(node, f"importing the private name '{alias.name}' is not allowed")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in DYNAMIC_BUILTINS:
            self.add(
                node,
                f"'{node.id}' is not allowed in graded files (no dynamic code, attribute lookup "
                "by name or file access)",
            )
        elif node.id in self.forbidden:
            self.add(node, f"'{node.id}' is not allowed in {self.rules.task}")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        own = isinstance(node.value, ast.Name) and node.value.id in OWN_OBJECT_NAMES
        if attr.startswith("__") and attr.endswith("__"):
            if attr not in ALLOWED_DUNDERS:
                self.add(node, f"the attribute '{attr}' is not allowed in graded files")
        elif attr.startswith("_") and not own:
            self.add(node, f"the private attribute '{attr}' is not allowed (only self._x of your own classes)")
        else:
            self._name_rule(node, attr, "the attribute")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            if name in DYNAMIC_BUILTINS:
                self.add(node, f"'{name}' is not allowed in graded files")


class UndecodableSource(ValueError):
    """A file whose bytes are not text in its encoding (UTF-8 unless it declares another)."""


def python_text(data: bytes) -> str:
    """A Python file's text as the interpreter's import reads it: its declared encoding (UTF-8 by default, a
    byte-order mark allowed), universal newlines. UndecodableSource when the bytes are not text."""
    try:
        return importlib.util.decode_source(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        raise UndecodableSource(f"the file is not text in its encoding ({exc})") from None


def check_source(source: str, rules: Rules, filename: str = "<file>") -> list[Violation]:
    """Every rule ``source`` breaks, in line order (a syntax error is one violation). ``source`` is text: a leading
    byte-order mark and any line endings are read as Python reads them."""
    try:
        tree = ast.parse(source.removeprefix("\ufeff"), filename=filename)
    except SyntaxError as exc:
        return [Violation(exc.lineno or 0, f"syntax error: {exc.msg or 'the file is not valid Python'}")]
    checker = _Checker(rules)
    checker.visit(tree)
    return sorted(checker.found, key=lambda v: v.line)


def check_bytes(data: bytes, rules: Rules, filename: str = "<file>") -> list[Violation]:
    """check_source on a file's bytes, decoded as the import that would run them (``python_text``)."""
    try:
        return check_source(python_text(data), rules, filename)
    except UndecodableSource as exc:
        return [Violation(0, str(exc))]


def check_file(path: Path | str, rules: Rules) -> list[Violation]:
    path = Path(path)
    return check_bytes(path.read_bytes(), rules, path.name)


def describe(violations: list[Violation], filename: str, limit: int = 8) -> str:
    shown = [f"{filename}: {v}" for v in violations[:limit]]
    if len(violations) > limit:
        shown.append(f"... and {len(violations) - limit} more")
    return "\n".join(shown)
