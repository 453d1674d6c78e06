"""The layout stays what ARCHITECTURE.md says: measured records apart from the code, each one indexed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
RECORDS = REPO / "grader" / "records"


def test_every_record_has_a_line_in_the_index():
    index = (RECORDS / "README.md").read_text(encoding="utf-8")
    indexed = set(re.findall(r"^\| `([^`]+)` \|", index, re.MULTILINE))
    present = {p.name + ("/" if p.is_dir() else "") for p in RECORDS.iterdir() if p.name != "README.md"}
    assert present - indexed == set(), "records without a line in grader/records/README.md's index"
    assert indexed - present == set(), "index lines of records that are not in grader/records/"


def test_records_hold_no_code():
    code = [p.relative_to(REPO).as_posix() for p in RECORDS.rglob("*") if p.suffix in (".py", ".sh", ".patch")]
    assert not code, f"code among the records (device scripts go to grader/scripts/): {code}"


# --------------------------------------------------------------------------- the direction of imports

# The kit's packages from the top down: a module imports from its own package or from a layer below its own, never
# from a layer above, nor from another package of its own layer. `grader/scripts/` and `grader/notes/` are scripts
# run by hand, `grader/fixtures/` submissions the tools read as text; `grader` and `assignment` alone are the
# packages' (empty) __init__, so every other module of theirs must be placed here. Inside `assignment/`: the
# commands a student runs (and the pytest plugin, the report, the submission) sit above the kernels composed of every
# task's wrappers, above the task modules, which sit above the layers they plug into (the harness, the model, the test
# helpers, the CUDA plumbing), which sit above the registry and the small modules everything reads.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("grader.scripts", "grader.notes", "grader.fixtures"),
    ("grader.tools",),  # instructor tools that exercise the grader
    ("grader.classroom", "grader.release"),  # a class; the student bundle
    ("handout",),  # the handout (its facts read grader.grade.config's defaults)
    ("grader.grade",),  # one submission
    ("grader.hidden",),  # the hidden suites the checker runs
    ("grader.isolation",),  # the sandboxed worker and what a student is told (the starter's stubs)
    ("grader.authoring",),  # the starter generator, the shipped model's corpus, training and card
    # what students get, and what everything runs on:
    (  # what loops over the tasks or looks one up: make bench/profile/sanitize/generate, the report, the submission
        "assignment.commands",
        "assignment.report",
        "assignment.submit",
        "assignment.pytest_plugin",
        "assignment.feedback_html",
    ),
    ("assignment.kernels",),  # every task's wrappers composed: the kernels students, tests and the grader call
    ("assignment.tasks",),  # one module per task, on the layers below
    ("assignment.perf",),  # bench cases, timed workloads, the model bench, scaling, profile report, student targets
    # the model; the test helpers (they time with perf.timing); the feedback form; the theory questions
    ("assignment.model", "assignment.testing", "assignment.feedback", "assignment.theory"),
    ("assignment.perf.timing", "assignment.todos", "assignment.policy"),  # the harness; TODO counts; Python rules
    ("assignment.cuda",),  # building, checking and loading CUDA files
    ("assignment.markers",),  # the solution/starter marker syntax
    ("assignment.registry",),  # the registry's loader, on its parts:
    ("assignment.registry_course",),
    ("assignment.registry_tasks",),
    ("assignment.registry_schema",),  # the typed schema, each key declared with what it accepts
    ("assignment.registry_forms",),  # the keys with forms of their own (tolerances, drawn ranges)
    ("assignment.registry_keys",),  # the declaration and the one reader of a table
    ("assignment.impl", "assignment.checks", "assignment.atomic"),  # IMPL's folder; CheckFailure; atomic writes
    ("assignment",),
    ("grader",),
)
ROOTS = ("assignment", "grader")  # a root names its __init__ alone: its modules are placed by their own packages
# Upward imports the layers still carry, each with why it is not yet gone; the test fails on any other, and on one
# of these once it is gone (strike it here then).
PENDING: dict[tuple[str, str], str] = {}
SCANNED = ("assignment", "grader", "handout")


def _package_of(name: str) -> tuple[int, str] | None:
    """(layer index, package prefix) of a dotted module name, or None when it is none of the kit's."""
    best = None
    for index, packages in enumerate(LAYERS):
        for package in packages:
            if (name == package or (name.startswith(package + ".") and package not in ROOTS)) and (
                best is None or len(package) > len(best[1])
            ):
                best = (index, package)
    return best


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in ``source`` (the text of ``module``), function-level and TYPE_CHECKING
    ones included; for ``from X import a`` the name is ``X.a`` (a submodule or a name of X: either lives in X's
    package), a relative import resolved against ``module``'s package."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def test_imports_flow_down_the_layers():
    files = sorted(p for top in SCANNED for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > 100, f"only {len(files)} modules found: has the layout moved?"
    unplaced, upward, pending_seen = [], [], set()
    for path in files:
        module = _module_name(path)
        home = _package_of(module)
        if home is None:
            unplaced.append(path.relative_to(REPO).as_posix())
            continue
        for line, name in _imports(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
            target = _package_of(name)
            if not name.startswith(SCANNED) or target is None or target[1] == home[1]:
                continue
            if target[0] <= home[0]:
                if (module, target[1]) in PENDING:
                    pending_seen.add((module, target[1]))
                    continue
                upward.append(f"{path.relative_to(REPO)}:{line} imports {name} ({home[1]} may not use {target[1]})")
    assert not unplaced, f"modules in no layer (place their package in LAYERS): {unplaced}"
    assert not upward, (
        "imports against the layers (top down: " + " > ".join("/".join(p) for p in LAYERS) + "):\n" + "\n".join(upward)
    )
    assert pending_seen == set(PENDING), f"upward imports gone: strike them from PENDING: {set(PENDING) - pending_seen}"


def test_the_layer_check_sees_every_kind_of_import():
    source = (
        "from grader.classroom import batch\nimport grader.tools.demo\n\ndef f():\n    from ..classroom import ledger\n"
    )
    assert _imports(source, "grader.grade.probe") == [
        (1, "grader.classroom.batch"),
        (2, "grader.tools.demo"),
        (5, "grader.classroom.ledger"),
    ]
    assert _imports("from . import seeds\n", "grader.grade", is_package=True) == [(1, "grader.grade.seeds")]
    assert _package_of("grader.grade.seeds") == (LAYERS.index(("grader.grade",)), "grader.grade")
    assert _package_of("grader.seeds") is None and _package_of("torch.nn") is None
    assert _package_of("assignment.perf.timing")[1] == "assignment.perf.timing"  # the longest package wins
    assert _package_of("assignment.newcomer") is None  # a new module of a root is placed before it is let in


def _module_graph() -> dict[str, set[str]]:
    """The kit's modules, each with the kit's modules it imports (any import, function-level and TYPE_CHECKING ones
    included; ``from X import a`` counts as importing X.a when that is a module, else X)."""
    files = {_module_name(p): p for top in SCANNED for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        for _, target in _imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py"):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a circle (Tarjan's strongly connected
    components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    circles.append(sorted(group))
    return circles


def test_no_import_circles():
    circles = import_circles(_module_graph())
    assert not circles, "modules that import each other round a circle (move what both need below them):\n" + "\n".join(
        " <-> ".join(group) for group in circles
    )


def test_the_circle_check_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


# --------------------------------------------------------------------------- the size of a module

MAX_MODULE_LINES = 600
# The hidden suites are long lists of a task's graded checks, and the records are measurements kept beside the code:
# neither is a module of the kit's to read in one sitting.
SIZE_EXEMPT = ("grader/hidden/", "grader/records/")


def oversized_modules(root: Path) -> list[tuple[str, int]]:
    """(path, lines) of every module under ``root``'s assignment/, grader/ and handout/ over MAX_MODULE_LINES, longest
    first, the exempt folders aside."""
    found = []
    for top in SCANNED:
        for path in (root / top).rglob("*.py"):
            name = path.relative_to(root).as_posix()
            if "__pycache__" in path.parts or name.startswith(SIZE_EXEMPT):
                continue
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_MODULE_LINES:
                found.append((name, lines))
    return sorted(found, key=lambda item: (-item[1], item[0]))


def test_no_kit_module_over_600_lines():
    found = oversized_modules(REPO)
    assert not found, (
        f"kit modules over {MAX_MODULE_LINES} lines (split each along its seams: one job per module, a docstring "
        "saying what it holds, its importers and ARCHITECTURE.md updated):\n"
        + "\n".join(f"  {name}: {lines} lines" for name, lines in found)
    )


def test_the_size_check_counts_lines_and_spares_the_hidden_suites(tmp_path):
    for name, lines in (
        ("assignment/long.py", 601),
        ("handout/fits.py", 600),
        ("grader/hidden/test_long_hidden.py", 900),
        ("grader/tools/longer.py", 700),
    ):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n" * lines, encoding="utf-8")
    assert oversized_modules(tmp_path) == [("grader/tools/longer.py", 700), ("assignment/long.py", 601)]
