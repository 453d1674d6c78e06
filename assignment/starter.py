"""Generate ``starter/`` from ``solutions/``: the single source of student files.

Each region

    # BEGIN SOLUTION t1: short description        (// in CUDA files)
    # PLAN: a line of the plan, kept in the starter
    # STUB: code kept in the starter after the failure (e.g. a return)
    ...solution code, dropped...
    # END SOLUTION

becomes a stub that keeps the description and the plan and fails loudly:
``raise NotImplementedError("t1: ...")`` in Python, ``KIT_TODO(t1);`` in CUDA
(the loader refuses to launch a kernel whose task still has one). A CUDA stub
also ends with ``// END TODO(t1)``: the grader builds a student's CUDA file by
taking the code between ``// TODO(t1): ...`` and that line and splicing it into
the kit's own file (assignment/cuda/regions.py). Everything outside the regions
(signatures, docstrings, launch configurations) is copied unchanged.

Scaffolding levels. The registry picks one per task (``scaffolding``): ``guided`` (the regions above,
with their plans) or ``open``. For ``open`` a solution file marks, around the guided regions of a
kernel body, what the student designs alone:

    // BEGIN OPEN t3: the GEMM kernel body: tiling, shared-memory layout, the k loop
    // GOAL: a line of the goal or a constraint, kept in the open starter
    ...the reference's code, guided regions of t3 inside...
    // END OPEN

At the open level the whole block becomes one stub that keeps only the GOAL lines, and the task's
regions outside every OPEN block are given (their code stays, their markers and plans go); text
between ``BEGIN GUIDED t3`` and ``END GUIDED`` (the reference's design notes) is dropped. At the
guided level the OPEN, GOAL and GUIDED marker lines disappear. ``apply_levels`` does this first, so everything that
reads regions (the starter, the grader's splice, the handout, the release check) sees one level.
An OPEN block holds regions of its own task only, and never another OPEN block.

    python -m assignment.starter            # write starter/
    python -m assignment.starter --check    # exit 1 when starter/ is out of date
    python -m assignment.starter --level open --starter /tmp/open   # every task that has OPEN blocks, open
"""

from __future__ import annotations

import argparse
import ast
import difflib
import sys
from dataclasses import dataclass
from pathlib import Path

from assignment.markers import (BEGIN_GUIDED, BEGIN_OPEN, BEGIN_SOLUTION, COMMENT_FOR_SUFFIX, END_GUIDED, END_OPEN,
                                 END_SOLUTION, GOAL, PLAN, STUB, STUB_MESSAGE, TASK_ID, end_todo_marker, todo_marker)
from assignment.registry import Registry, load_registry

REPO_ROOT = Path(__file__).resolve().parent.parent
LEVELS = ("guided", "open")
IGNORED_NAMES = {"__pycache__", ".pytest_cache"}


class MarkerError(ValueError):
    """A malformed solution region, reported as file:line."""


@dataclass(frozen=True)
class Region:
    task: str
    description: str
    begin_line: int
    end_line: int


def _fail_statement(comment: str, task: str, description: str, filename: str) -> str:
    if comment == "#":
        message = f"{task}: {description} is not implemented yet (TODO({task}) in {filename})"
        return f"raise NotImplementedError({message!r})"
    return f"KIT_TODO({task});"


def task_levels(registry: Registry | None = None) -> dict[str, str]:
    """Task id -> its scaffolding level, from ``registry`` (the default registry when None)."""
    registry = registry or load_registry()
    return {task.id: task.scaffolding for task in registry.tasks}


def open_tasks(text: str) -> set[str]:
    """Task ids with an OPEN block in a solution file's text."""
    return {m["task"] for m in map(BEGIN_OPEN.match, text.splitlines()) if m}


def apply_levels(text: str, filename: str, levels: dict[str, str] | None = None) -> str:
    """The solution text at each task's scaffolding level (``levels``: task id -> "guided" | "open"; the default
    registry's when None): only BEGIN SOLUTION regions remain. A text without OPEN blocks comes back unchanged,
    so the result is a fixed point (``render_starter`` refuses a task set to open whose files have no OPEN block).
    """
    lines = text.splitlines(keepends=True)
    if not any(BEGIN_OPEN.match(line) for line in lines):
        return text
    levels = levels if levels is not None else task_levels()
    out: list[str] = []
    block: tuple[int, str, str, str] | None = None  # line, task, description, indent of the open OPEN block
    goals: list[str] = []
    stubs: list[str] = []
    body: list[str] = []
    in_region: str | None = None  # task of the BEGIN SOLUTION region being read, when inside one
    guided: tuple[int, str] | None = None  # line and task of the open GUIDED block
    for number, line in enumerate(lines, start=1):
        where = f"{filename}:{number}"
        if not line.endswith("\n"):
            line += "\n"
        begin_guided, end_guided = BEGIN_GUIDED.match(line), END_GUIDED.match(line)
        if begin_guided:
            if guided is not None or block is not None or in_region is not None:
                raise MarkerError(f"{where}: BEGIN GUIDED goes outside every other block and region")
            guided = (number, begin_guided["task"])
            continue
        if end_guided:
            if guided is None:
                raise MarkerError(f"{where}: END GUIDED without a matching BEGIN GUIDED")
            guided = None
            continue
        if guided is not None and levels.get(guided[1]) == "open":
            continue  # text for the guided level only (e.g. the reference's design notes)
        begin_open, end_open = BEGIN_OPEN.match(line), END_OPEN.match(line)
        begin, end = BEGIN_SOLUTION.match(line), END_SOLUTION.match(line)
        if begin_open:
            if block is not None:
                raise MarkerError(f"{where}: BEGIN OPEN inside the OPEN block opened at {filename}:{block[0]}")
            if in_region is not None:
                raise MarkerError(f"{where}: BEGIN OPEN inside a BEGIN SOLUTION region (an OPEN block goes around them)")
            task = begin_open["task"]
            if not TASK_ID.fullmatch(task or ""):
                raise MarkerError(f"{where}: BEGIN OPEN needs a task id such as t3, got {task!r}")
            desc = (begin_open["desc"] or "").strip() or f"the {task} kernel"
            block, goals, stubs, body = (number, task, desc, begin_open["indent"]), [], [], []
            continue
        if end_open:
            if block is None:
                raise MarkerError(f"{where}: END OPEN without a matching BEGIN OPEN")
            if in_region is not None:
                raise MarkerError(f"{where}: END OPEN inside a BEGIN SOLUTION region")
            _, task, desc, indent = block
            c = end_open["c"]
            if levels.get(task) == "open":
                out.append(f"{indent}{c} BEGIN SOLUTION {task}: {desc}\n")
                out.extend(goals)
                out.extend(stubs)
                out.extend(body)
                out.append(f"{indent}{c} END SOLUTION\n")
            else:
                out.extend(body)
            block = None
            continue
        if begin:
            in_region = begin["task"]
            if block is not None and in_region != block[1]:
                raise MarkerError(f"{where}: a {in_region} region inside the OPEN block of {block[1]} (an OPEN block "
                                  "holds regions of its own task only)")
        elif end:
            in_region, was = None, in_region
            if block is None and levels.get(was) == "open":
                continue  # a given region at the open level: its code stays, its markers go
        if block is not None:
            goal = GOAL.match(line)
            if goal:
                goals.append(f"{goal['indent']}{goal['c']} PLAN:{goal['text']}\n")
            elif levels.get(block[1]) == "open":
                # the inner regions dissolve into the block; their plans and stubs go (STUB lines written directly
                # in the OPEN block, outside any region, are the block's own)
                if begin or end or PLAN.match(line):
                    continue
                if STUB.match(line):
                    if in_region is None:
                        stubs.append(line)
                    continue
                body.append(line)
            else:
                body.append(line)
            continue
        if in_region is not None and levels.get(in_region) == "open":
            if begin or PLAN.match(line) or STUB.match(line):
                continue  # a given region at the open level
        out.append(line)
    if block is not None:
        raise MarkerError(f"{filename}:{block[0]}: BEGIN OPEN {block[1]} is never closed (END OPEN missing)")
    if guided is not None:
        raise MarkerError(f"{filename}:{guided[0]}: BEGIN GUIDED {guided[1]} is never closed (END GUIDED missing)")
    return "".join(out)


def strip_solutions(text: str, filename: str, registry: Registry | None = None,
                    levels: dict[str, str] | None = None) -> tuple[str, list[Region]]:
    """Return the starter text for one solution file and the regions found, at each task's scaffolding level
    (``levels``; else ``registry``'s; else the default registry's)."""
    text = apply_levels(text, filename, levels if levels is not None else
                        (task_levels(registry) if registry is not None else None))
    suffix = Path(filename).suffix
    comment = COMMENT_FOR_SUFFIX.get(suffix)
    out: list[str] = []
    regions: list[Region] = []
    open_region: tuple[int, str, str, str] | None = None  # line, task, desc, indent
    kept: list[str] = []
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        where = f"{filename}:{number}"
        begin, end = BEGIN_SOLUTION.match(line), END_SOLUTION.match(line)
        if begin or end:
            marker_comment = (begin or end).group("c")
            if comment is None:
                raise MarkerError(f"{where}: solution markers are not supported in {suffix or 'extensionless'} files")
            if marker_comment != comment:
                raise MarkerError(f"{where}: use '{comment}' comments for markers in {suffix} files")
        if begin:
            if open_region is not None:
                raise MarkerError(
                    f"{where}: BEGIN SOLUTION inside the region opened at {filename}:{open_region[0]} (regions cannot nest)"
                )
            task = begin.group("task")
            if not TASK_ID.fullmatch(task or ""):
                raise MarkerError(f"{where}: BEGIN SOLUTION needs a task id such as t1, got {task!r}")
            if registry is not None:
                if task not in registry.ids:
                    raise MarkerError(f"{where}: task {task} is not in the registry {registry.path}")
                if Path(filename).name not in registry.task(task).files:
                    raise MarkerError(
                        f"{where}: region of {task}, but the registry does not list {Path(filename).name} in {task}'s files"
                    )
            desc = (begin.group("desc") or "").strip() or f"the {task} solution"
            open_region = (number, task, desc, begin.group("indent"))
            kept = []
            continue
        if end:
            if open_region is None:
                raise MarkerError(f"{where}: END SOLUTION without a matching BEGIN SOLUTION")
            start, task, desc, indent = open_region
            stub_code = [m for m in kept if STUB.match(m)]
            out.append(f"{indent}{todo_marker(comment, task, desc)}\n")
            out.extend(m for m in kept if PLAN.match(m))
            out.append(f"{indent}{_fail_statement(comment, task, desc, Path(filename).name)}\n")
            for stub_line in stub_code:
                m = STUB.match(stub_line)
                out.append(f"{m.group('indent')}{m.group('code')}\n")
            if comment == "//":
                out.append(f"{indent}{end_todo_marker(comment, task)}\n")
            regions.append(Region(task, desc, start, number))
            open_region = None
            continue
        if open_region is not None:
            if PLAN.match(line) or STUB.match(line):
                kept.append(line if line.endswith("\n") else line + "\n")
            continue
        out.append(line)
    if open_region is not None:
        raise MarkerError(f"{filename}:{open_region[0]}: BEGIN SOLUTION {open_region[1]} is never closed (END SOLUTION missing)")
    return "".join(out), regions


def solution_lines(text: str, filename: str, levels: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """(1-based number, line) of the solution code in ``text`` at each task's scaffolding level: what the starter
    drops (region bodies without their PLAN and STUB lines). Numbers count lines of the levelled text."""
    text = apply_levels(text, filename, levels)
    _, regions = strip_solutions(text, filename, levels={})
    lines = text.splitlines()
    return [(n, lines[n - 1]) for r in regions for n in range(r.begin_line + 1, r.end_line)
            if not PLAN.match(lines[n - 1]) and not STUB.match(lines[n - 1])]


def todo_lines(text: str) -> dict[str, list[int]]:
    """Task id -> the 1-based lines that still call ``KIT_TODO(tN)`` in CUDA code, read as the compiler reads
    the file (a stub in a comment or a literal is not a stub; any spacing of the call is one):
    ``assignment.cuda.reading.todo_lines``."""
    from assignment.cuda.reading import todo_lines as read_todo_lines

    return read_todo_lines(text)


def todo_tasks(text: str) -> set[str]:
    """Task ids that still have a ``KIT_TODO(tN)`` in non-comment CUDA code."""
    return set(todo_lines(text))


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
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "NotImplementedError" \
                and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
            match = STUB_MESSAGE.match(call.args[0].value)
            if match:
                found[match[1]] = found.get(match[1], 0) + 1
    return found


def todo_counts(text: str, filename: str) -> dict[str, int]:
    """Task id -> the starter stubs still in a student file: Python raises, CUDA ``KIT_TODO(tN);`` calls."""
    if filename.endswith(".py"):
        return python_todo_counts(text)
    return {task: len(lines) for task, lines in todo_lines(text).items()}


def _solution_files(solutions: Path) -> list[Path]:
    files = []
    for path in sorted(solutions.rglob("*")):
        if path.is_file() and not any(part in IGNORED_NAMES for part in path.relative_to(solutions).parts):
            if path.suffix in (".pyc",):
                continue
            files.append(path)
    return files


def render_starter(solutions: Path, registry: Registry | None = None,
                   levels: dict[str, str] | None = None) -> dict[str, str | bytes]:
    """Map of relative path -> starter content for every file in ``solutions``, at each task's scaffolding level
    (``levels``, else the registry's)."""
    levels = levels if levels is not None else task_levels(registry)
    result: dict[str, str | bytes] = {}
    opened: set[str] = set()
    for path in _solution_files(solutions):
        rel = path.relative_to(solutions).as_posix()
        if path.suffix in COMMENT_FOR_SUFFIX:
            text = path.read_text(encoding="utf-8")
            opened |= open_tasks(text)
            result[rel], _ = strip_solutions(text, f"solutions/{rel}", registry, levels)
        else:
            result[rel] = path.read_bytes()
    stranded = sorted(t for t, level in levels.items() if level == "open" and t not in opened)
    if stranded:
        raise MarkerError(f"{', '.join(stranded)}: set to the open scaffolding level, but no solution file has a "
                          "BEGIN OPEN block for it (mark what the student designs, or keep it guided)")
    return result


def levels_for(level: str | None, registry: Registry | None = None, solutions: Path | None = None) -> dict[str, str]:
    """The levels to generate: the registry's (``level`` None), or ``level`` for every task that supports it
    (open: the tasks with OPEN blocks in ``solutions``)."""
    levels = task_levels(registry)
    if level is None:
        return levels
    if level not in LEVELS:
        raise MarkerError(f"unknown scaffolding level {level!r} (choose from {', '.join(LEVELS)})")
    supported = set()
    if level == "open":
        for path in _solution_files(solutions or REPO_ROOT / "solutions"):
            if path.suffix in COMMENT_FOR_SUFFIX:
                supported |= open_tasks(path.read_text(encoding="utf-8"))
    return {t: (level if level == "guided" or t in supported else current) for t, current in levels.items()}


class StarterError(RuntimeError):
    """The starter cannot be generated here (no reference solutions to generate it from)."""


def _require_solutions(solutions: Path) -> None:
    if not solutions.is_dir() or not _solution_files(solutions):
        raise StarterError(f"{solutions} is missing or empty: starter/ is generated from the reference solutions, "
                           "so there is nothing to generate here (in a student bundle, starter/ holds your own work "
                           "and nothing rewrites it)")


def write_starter(solutions: Path, starter: Path, registry: Registry | None = None,
                  levels: dict[str, str] | None = None) -> list[str]:
    """Write the starter file of every solution file. Only those paths are written: a file in ``starter`` that
    is not generated from ``solutions`` is left where it is (``check_starter`` names it), never deleted."""
    _require_solutions(solutions)
    expected = render_starter(solutions, registry, levels)
    starter.mkdir(parents=True, exist_ok=True)
    for rel, content in expected.items():
        target = starter / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    return sorted(expected)


def check_starter(solutions: Path, starter: Path, registry: Registry | None = None,
                  levels: dict[str, str] | None = None) -> list[str]:
    """Differences between ``starter`` and what the generator would write."""
    expected = render_starter(solutions, registry, levels)
    actual = {}
    if starter.is_dir():
        for path in _solution_files(starter):
            actual[path.relative_to(starter).as_posix()] = path
    problems = []
    for rel in sorted(set(expected) | set(actual)):
        if rel not in actual:
            problems.append(f"starter/{rel}: missing (run `make starter`)")
            continue
        if rel not in expected:
            problems.append(f"starter/{rel}: not generated from solutions/ (delete it or add it to solutions/)")
            continue
        want = expected[rel]
        if isinstance(want, bytes):
            if actual[rel].read_bytes() != want:
                problems.append(f"starter/{rel}: differs from solutions/{rel}")
            continue
        have = actual[rel].read_text(encoding="utf-8")
        if have != want:
            diff = difflib.unified_diff(
                want.splitlines(), have.splitlines(), f"generated/{rel}", f"starter/{rel}", lineterm="", n=1
            )
            problems.append(f"starter/{rel}: differs from the generated file:\n" + "\n".join(list(diff)[:40]))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when starter/ is out of sync")
    parser.add_argument("--solutions", type=Path, default=REPO_ROOT / "solutions")
    parser.add_argument("--starter", type=Path, default=REPO_ROOT / "starter")
    parser.add_argument("--level", choices=LEVELS, default=None,
                        help="generate this scaffolding level for every task that has it (default: the registry's "
                             "choice per task, which is what starter/ holds)")
    args = parser.parse_args(argv)
    registry = load_registry()
    try:
        if args.level is not None and args.starter.resolve() == (REPO_ROOT / "starter").resolve():
            print("error: starter/ holds the levels the registry chooses (scaffolding = ... per task); write another "
                  "level elsewhere, e.g. --starter build/starter-open", file=sys.stderr)
            return 2
        levels = levels_for(args.level, registry, args.solutions) if args.solutions.is_dir() else None
        if args.check:
            if not args.solutions.is_dir():
                print(f"no {args.solutions.name}/ here (a student bundle): nothing to check starter/ against")
                return 0
            problems = check_starter(args.solutions, args.starter, registry, levels)
            if problems:
                print("starter/ is out of sync with solutions/:", file=sys.stderr)
                for problem in problems:
                    print("  " + problem, file=sys.stderr)
                print("Run `make starter` and commit the result.", file=sys.stderr)
                return 1
            print("starter/ is in sync with solutions/")
            return 0
        written = write_starter(args.solutions, args.starter, registry, levels)
    except (MarkerError, StarterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files to {args.starter}: {', '.join(written)}")
    extra = [problem for problem in check_starter(args.solutions, args.starter, registry, levels) if "not generated" in problem]
    for problem in extra:
        print(f"left alone: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
