"""The marker syntax of the kit's files, in one place, and its two readings: what the starter generator
(grader/authoring/starter.py) writes and the splice (assignment/cuda/regions.py) reads.

In a solution file (``#`` comments in Python, ``//`` in CUDA):

    BEGIN SOLUTION t4: description   ...   END SOLUTION     a region the student writes
    PLAN: ...                                                 kept in the starter (the plan)
    STUB: code                                                kept in the starter as code, after the failure
    BEGIN OPEN t3: description       ...   END OPEN         the open level's block
    GOAL: ...                                                 kept in the open starter (the goal)
    BEGIN GUIDED t3                  ...   END GUIDED       text for the guided level only
    BEGIN UNGUIDED t3                ...   END UNGUIDED     text for the open level only

In a starter or a student's CUDA file, a region reads ``// TODO(t4): description`` ... ``// END TODO(t4)``: the
lines between them are what the kit splices into its own file (assignment/cuda/regions.py). Reading a file's
code itself (a stub left in code, not in a comment) is the compiler's job (assignment/cuda/reading.py).

``strip_solutions`` turns a solution file into its starter: each region becomes a stub that keeps the description
and the plan and fails loudly, ``raise NotImplementedError("t1: ...")`` in Python, ``KIT_TODO(t1);`` in CUDA (the
loader refuses to launch a kernel whose task still has one); a CUDA stub also ends with ``// END TODO(t1)``.
Everything outside the regions (signatures, docstrings, launch configurations) is copied unchanged.

Scaffolding levels. The registry picks one per task (``scaffolding``): ``guided`` (the regions above, with their
plans) or ``open``. For ``open`` a solution file marks, around the guided regions of a kernel body, what the
student designs alone:

    // BEGIN OPEN t3: the GEMM kernel body: tiling, shared-memory layout, the k loop
    // GOAL: a line of the goal or a constraint, kept in the open starter
    ...the reference's code, guided regions of t3 inside...
    // END OPEN

At the open level the whole block becomes one stub that keeps only the GOAL lines, and the task's regions outside
every OPEN block are given (their code stays, their markers and plans go); text between ``BEGIN GUIDED t3`` and
``END GUIDED`` (the reference's design notes) is dropped. At the guided level the OPEN, GOAL and GUIDED marker
lines disappear, and text between ``BEGIN UNGUIDED t3`` and ``END UNGUIDED`` is dropped. ``apply_levels`` does
this first, so everything that reads regions (the starter, the grader's splice, the handout, the release check)
sees one level. An OPEN block holds regions of its own task only, and never another OPEN block.

GUIDED and UNGUIDED blocks go at the top level or directly inside an OPEN block of their task, never inside a
region or each other, in a file that has an OPEN block. The pair lets the two levels differ where the guided
level's design lives in functions of its own (t8: a region cannot define functions, so at the open level the
student writes the kernel body inline): inside the OPEN block, a GUIDED block holds the guided body that calls
those functions (themselves in a GUIDED block at the top level) and an UNGUIDED block the reference's own body at
the open level, the same design written inline. An UNGUIDED block holds code and comments only (no other marker).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from assignment.registry import Registry, load_registry

COMMENT_FOR_SUFFIX = {".py": "#", ".cu": "//", ".cuh": "//", ".h": "//", ".cpp": "//"}
TASK_ID = re.compile(r"t[1-9][0-9]*")


def _begin(word: str) -> re.Pattern:
    """``BEGIN <word> t4: description`` (the task and the description may be missing: the readers say what is
    wrong then)."""
    return re.compile(rf"^(?P<indent>\s*)(?P<c>#|//)\s*BEGIN {word}\b\s*(?P<task>\S*?)\s*(?::\s*(?P<desc>.*?))?\s*$")


def _end(word: str) -> re.Pattern:
    return re.compile(rf"^\s*(?P<c>#|//)\s*END {word}\b.*$")


BEGIN_SOLUTION, END_SOLUTION = _begin("SOLUTION"), _end("SOLUTION")
BEGIN_OPEN, END_OPEN = _begin("OPEN"), _end("OPEN")
PLAN = re.compile(r"^\s*(?:#|//)\s*PLAN:")
STUB = re.compile(r"^(?P<indent>\s*)(?:#|//)\s*STUB:\s?(?P<code>.*)$")
BEGIN_GUIDED = re.compile(r"^\s*(?P<c>#|//)\s*BEGIN GUIDED\b\s*(?P<task>\S*?)\s*(?::.*)?$")
END_GUIDED = _end("GUIDED")
BEGIN_UNGUIDED = re.compile(r"^\s*(?P<c>#|//)\s*BEGIN UNGUIDED\b\s*(?P<task>\S*?)\s*(?::.*)?$")
END_UNGUIDED = _end("UNGUIDED")
GOAL = re.compile(r"^(?P<indent>\s*)(?P<c>#|//)\s*GOAL:(?P<text>.*)$")

# What an UNGUIDED block may not hold (apply_levels).
_MARKERS_OUTSIDE_UNGUIDED = (
    BEGIN_SOLUTION,
    END_SOLUTION,
    BEGIN_OPEN,
    END_OPEN,
    BEGIN_GUIDED,
    END_GUIDED,
    BEGIN_UNGUIDED,
)

# A CUDA region in a starter or student file.
TODO_BEGIN = re.compile(r"^(?P<indent>\s*)//\s*TODO\((?P<task>t[0-9]+)\):\s*(?P<desc>.*?)\s*$")
TODO_END = re.compile(r"^\s*//\s*END TODO\((?P<task>t[0-9]+)\)\s*$")
END_TODO = "END TODO({task})"  # the text of a CUDA region's closing marker

# The message of a Python stub, NotImplementedError("t1: ... (TODO(t1) in t1_attention.py)"); the kit's checks
# that refuse to launch a CUDA file with KIT_TODO left raise the same form.
STUB_MESSAGE = re.compile(r"^(t[0-9]+): ")


def todo_marker(comment: str, task: str, description: str) -> str:
    """The line that opens a stub in a starter file (without indent)."""
    return f"{comment} TODO({task}): {description}"


def end_todo_marker(comment: str, task: str) -> str:
    """The line that closes a CUDA stub (without indent)."""
    return f"{comment} {END_TODO.format(task=task)}"


# --------------------------------------------------------------------------- the readings


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
    unguided: tuple[int, str] | None = None  # line and task of the open UNGUIDED block
    for number, line in enumerate(lines, start=1):
        where = f"{filename}:{number}"
        if not line.endswith("\n"):
            line += "\n"
        begin_unguided, end_unguided = BEGIN_UNGUIDED.match(line), END_UNGUIDED.match(line)
        if unguided is not None and not end_unguided:
            if any(m.match(line) for m in _MARKERS_OUTSIDE_UNGUIDED):
                raise MarkerError(
                    f"{where}: a marker inside the UNGUIDED block opened at {filename}:{unguided[0]} (it holds code "
                    "and comments only)"
                )
            if levels.get(unguided[1]) != "open":
                continue  # text for the open level only (the reference's own open-level code)
        begin_guided, end_guided = BEGIN_GUIDED.match(line), END_GUIDED.match(line)
        if begin_guided or begin_unguided:
            word, found = ("GUIDED", begin_guided) if begin_guided else ("UNGUIDED", begin_unguided)
            if guided is not None or unguided is not None or in_region is not None:
                raise MarkerError(
                    f"{where}: BEGIN {word} goes at the top level or directly inside an OPEN block, outside every "
                    "region and every other GUIDED or UNGUIDED block"
                )
            if block is not None and found["task"] != block[1]:
                raise MarkerError(
                    f"{where}: a {word} block of {found['task'] or '?'} inside the OPEN block of {block[1]}"
                )
            if begin_guided:
                guided = (number, found["task"])
            else:
                if not TASK_ID.fullmatch(found["task"] or ""):
                    raise MarkerError(f"{where}: BEGIN UNGUIDED needs a task id such as t8, got {found['task']!r}")
                unguided = (number, found["task"])
            continue
        if end_guided or end_unguided:
            word, opened = ("GUIDED", guided) if end_guided else ("UNGUIDED", unguided)
            if opened is None:
                raise MarkerError(f"{where}: END {word} without a matching BEGIN {word}")
            guided, unguided = (None, unguided) if end_guided else (guided, None)
            continue
        if guided is not None and (BEGIN_OPEN.match(line) or END_OPEN.match(line)):
            raise MarkerError(f"{where}: an OPEN marker inside the GUIDED block opened at {filename}:{guided[0]}")
        if guided is not None and levels.get(guided[1]) == "open":
            continue  # text for the guided level only (e.g. the reference's design notes)
        begin_open, end_open = BEGIN_OPEN.match(line), END_OPEN.match(line)
        begin, end = BEGIN_SOLUTION.match(line), END_SOLUTION.match(line)
        if begin_open:
            if block is not None:
                raise MarkerError(f"{where}: BEGIN OPEN inside the OPEN block opened at {filename}:{block[0]}")
            if in_region is not None:
                raise MarkerError(
                    f"{where}: BEGIN OPEN inside a BEGIN SOLUTION region (an OPEN block goes around them)"
                )
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
                raise MarkerError(
                    f"{where}: a {in_region} region inside the OPEN block of {block[1]} (an OPEN block "
                    "holds regions of its own task only)"
                )
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
    if unguided is not None:
        raise MarkerError(
            f"{filename}:{unguided[0]}: BEGIN UNGUIDED {unguided[1]} is never closed (END UNGUIDED missing)"
        )
    return "".join(out)


def strip_solutions(
    text: str, filename: str, registry: Registry | None = None, levels: dict[str, str] | None = None
) -> tuple[str, list[Region]]:
    """Return the starter text for one solution file and the regions found, at each task's scaffolding level
    (``levels``; else ``registry``'s; else the default registry's)."""
    text = apply_levels(
        text, filename, levels if levels is not None else (task_levels(registry) if registry is not None else None)
    )
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
        raise MarkerError(
            f"{filename}:{open_region[0]}: BEGIN SOLUTION {open_region[1]} is never closed (END SOLUTION missing)"
        )
    return "".join(out), regions
