"""Generate ``starter/`` from ``solutions/``: the single source of student files.

Each solution file becomes its starter by ``assignment.markers.strip_solutions``, at each task's scaffolding
level (the marker syntax and the levels are that module's): every region a stub that keeps the description and
the plan and fails loudly. The grader builds a student's CUDA file by splicing the code between a stub's
``// TODO(t1): ...`` and ``// END TODO(t1)`` lines into the kit's own file (assignment/cuda/regions.py).
Instructor-only: a student bundle has no solutions/ to generate from.

    python -m grader.authoring.starter            # write starter/
    python -m grader.authoring.starter --check    # exit 1 when starter/ is out of date
    python -m grader.authoring.starter --level open --starter /tmp/open   # every task that has OPEN blocks, open
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from assignment.markers import (
    COMMENT_FOR_SUFFIX,
    PLAN,
    STUB,
    MarkerError,
    apply_levels,
    open_tasks,
    strip_solutions,
    task_levels,
)
from assignment.registry import Registry, load_registry

REPO_ROOT = Path(__file__).resolve().parents[2]
LEVELS = ("guided", "open")
IGNORED_NAMES = {"__pycache__", ".pytest_cache"}


def solution_lines(text: str, filename: str, levels: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """(1-based number, line) of the solution code in ``text`` at each task's scaffolding level: what the starter
    drops (region bodies without their PLAN and STUB lines). Numbers count lines of the levelled text."""
    text = apply_levels(text, filename, levels)
    _, regions = strip_solutions(text, filename, levels={})
    lines = text.splitlines()
    return [
        (n, lines[n - 1])
        for r in regions
        for n in range(r.begin_line + 1, r.end_line)
        if not PLAN.match(lines[n - 1]) and not STUB.match(lines[n - 1])
    ]


def _solution_files(solutions: Path) -> list[Path]:
    files = []
    for path in sorted(solutions.rglob("*")):
        if path.is_file() and not any(part in IGNORED_NAMES for part in path.relative_to(solutions).parts):
            if path.suffix in (".pyc",):
                continue
            files.append(path)
    return files


def render_starter(
    solutions: Path, registry: Registry | None = None, levels: dict[str, str] | None = None
) -> dict[str, str | bytes]:
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
        raise MarkerError(
            f"{', '.join(stranded)}: set to the open scaffolding level, but no solution file has a "
            "BEGIN OPEN block for it (mark what the student designs, or keep it guided)"
        )
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
        raise StarterError(
            f"{solutions} is missing or empty: starter/ is generated from the reference solutions, "
            "so there is nothing to generate here (in a student bundle, starter/ holds your own work "
            "and nothing rewrites it)"
        )


def write_starter(
    solutions: Path, starter: Path, registry: Registry | None = None, levels: dict[str, str] | None = None
) -> list[str]:
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


def check_starter(
    solutions: Path, starter: Path, registry: Registry | None = None, levels: dict[str, str] | None = None
) -> list[str]:
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
    parser.add_argument(
        "--level",
        choices=LEVELS,
        default=None,
        help="generate this scaffolding level for every task that has it (default: the registry's "
        "choice per task, which is what starter/ holds)",
    )
    args = parser.parse_args(argv)
    registry = load_registry()
    try:
        if args.level is not None and args.starter.resolve() == (REPO_ROOT / "starter").resolve():
            print(
                "error: starter/ holds the levels the registry chooses (scaffolding = ... per task); write another "
                "level elsewhere, e.g. --starter build/starter-open",
                file=sys.stderr,
            )
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
    extra = [
        problem
        for problem in check_starter(args.solutions, args.starter, registry, levels)
        if "not generated" in problem
    ]
    for problem in extra:
        print(f"left alone: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
