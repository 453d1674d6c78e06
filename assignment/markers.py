"""The marker syntax of the kit's files, in one place, and its two readings: what the starter generator
(grader/authoring/starter.py) writes and the splice (assignment/cuda/regions.py) reads.

A solution file is the reference, read top to bottom; its markers (``#`` comments in Python, ``//`` in CUDA) are
five words, three of them a begin/end pair, one pair per kind of block:

    BEGIN SOLUTION t4: description ... END SOLUTION   a region: what the student writes at the guided level
    BEGIN OPEN t3: description     ... END OPEN       what the student designs at the open level (regions inside)
    BEGIN ONLY t8 guided           ... END ONLY       text of one level only (guided, open) or of no level (reference)
    PLAN: ...                                         kept in the stub of the region or OPEN block it is in
    STUB: code                                        kept in that stub as code, after the failure

In a starter or a student's CUDA file, a region reads ``// TODO(t4): description`` ... ``// END TODO(t4)``: the
lines between them are what the kit splices into its own file (assignment/cuda/regions.py). Reading a file's
code itself (a stub left in code, not in a comment) is the compiler's job (assignment/cuda/reading.py).

``strip_solutions`` turns a solution file into its starter: each region becomes a stub that keeps the description
and the plan and fails loudly, ``raise NotImplementedError("t1: ...")`` in Python, ``KIT_TODO(t1);`` in CUDA (the
loader refuses to launch a kernel whose task still has one); a CUDA stub also ends with ``// END TODO(t1)``.
Everything outside the regions (signatures, docstrings, launch configurations) is copied unchanged.

Scaffolding levels. The registry picks one per task (``scaffolding``): ``guided`` (the regions above, with their
plans) or ``open``. For ``open`` a solution file marks, around the guided regions of a kernel body, what the
student designs alone; the body is written once, and the open level's reference is the guided one, regions filled:

    // BEGIN OPEN t3: the GEMM kernel body: tiling, shared-memory layout, the k loop
    // PLAN: a line of the goal or a constraint (the OPEN block's own plan: the open starter's text)
    ...the reference's code, guided regions of t3 inside, each with its own PLAN lines...
    // END OPEN

At the open level the whole block becomes one stub that keeps only the block's own PLAN (and STUB) lines, and the
task's regions outside every OPEN block are given (their code stays, their markers and plans go). At the guided
level the OPEN block's markers and own PLAN and STUB lines disappear. ``apply_levels`` does this first, so
everything that reads regions (the starter, the grader's splice, the handout, the release check) sees one level.
An OPEN block holds regions of its own task only, and never another OPEN block.

An ONLY block is read at its task's level as if its two marker lines were not there, and dropped at the other:
``guided`` (the reference's design notes, which the open level must not hand out), ``open`` (the open level's own
note); ``reference`` text is at no level (in no starter and no spliced build): a note to whoever edits the file.
ONLY blocks go at the top level or directly inside an OPEN block of their task, never inside a region or each other,
in a file that has an OPEN block. Where the guided design lives in functions of its own (t8: a region cannot define
functions, so at the open level the student writes the kernel body inline), the body is written twice: inside the
OPEN block, a ``guided`` ONLY block holds the body that calls those functions (themselves in a ``guided`` block at
the top level) and an ``open`` one the reference's body at the open level, the same design inline. An ``open`` or
``reference`` block holds code and comments only (no BEGIN or END marker).
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
# ``BEGIN ONLY t8 guided: why`` (any words before the colon: the reader says what is wrong with them).
BEGIN_ONLY = re.compile(r"^\s*(?P<c>#|//)\s*BEGIN ONLY\b(?P<words>[^:]*)(?::.*)?$")
END_ONLY = _end("ONLY")
ONLY_LEVELS = ("guided", "open", "reference")  # "reference": at no level (a note in the solution file alone)

# What an ONLY block of the open level or of the reference may not hold (apply_levels).
_BLOCK_MARKERS = (BEGIN_SOLUTION, END_SOLUTION, BEGIN_OPEN, END_OPEN, BEGIN_ONLY)

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


def only_block(begin: re.Match) -> tuple[str, str]:
    """The task and the level a ``BEGIN_ONLY`` match names ("" where missing; the rest when more words follow)."""
    words = begin["words"].split()
    return (words[0] if words else ""), " ".join(words[1:])


def _level(levels: dict[str, str], task: str | None) -> str:
    return "open" if levels.get(task or "") == "open" else "guided"


def _only_marker(
    line: str,
    number: int,
    filename: str,
    only: tuple[int, str, str] | None,
    block: tuple[int, str, str, str] | None,
    in_region: str | None,
) -> tuple[bool, tuple[int, str, str] | None]:
    """(whether line ``number`` is an ONLY marker, the ONLY block open after it: line, task, level); MarkerError
    where the marker, or a marker inside the block, is misplaced."""
    where = f"{filename}:{number}"
    begin, end = BEGIN_ONLY.match(line), END_ONLY.match(line)
    if begin:
        if only is not None or in_region is not None:
            raise MarkerError(
                f"{where}: BEGIN ONLY goes at the top level or directly inside an OPEN block, outside every region "
                "and every other ONLY block"
            )
        task, level = only_block(begin)
        if not TASK_ID.fullmatch(task):
            raise MarkerError(f"{where}: BEGIN ONLY needs a task id such as t8, got {task!r}")
        if level not in ONLY_LEVELS:
            raise MarkerError(
                f"{where}: BEGIN ONLY {task} needs one level after the task ({', '.join(ONLY_LEVELS)}), got {level!r}"
            )
        if block is not None and task != block[1]:
            raise MarkerError(f"{where}: an ONLY block of {task} inside the OPEN block of {block[1]}")
        return True, (number, task, level)
    if end:
        if only is None:
            raise MarkerError(f"{where}: END ONLY without a matching BEGIN ONLY")
        return True, None
    if only is not None:
        opened = f"the ONLY {only[2]} block opened at line {only[0]}"
        if only[2] != "guided" and any(m.match(line) for m in _BLOCK_MARKERS):
            raise MarkerError(f"{where}: a marker inside {opened} (it holds code and comments only)")
        if BEGIN_OPEN.match(line) or END_OPEN.match(line):
            raise MarkerError(f"{where}: an OPEN marker inside {opened}")
    return False, only


def apply_levels(text: str, filename: str, levels: dict[str, str] | None = None) -> str:
    """The solution text at each task's scaffolding level (``levels``: task id -> "guided" | "open"; the default
    registry's when None): only BEGIN SOLUTION regions, with their PLAN and STUB lines, remain. A text without
    OPEN blocks comes back unchanged, so the result is a fixed point (``render_starter`` refuses a task set to open
    whose files have no OPEN block)."""
    lines = text.splitlines(keepends=True)
    if not any(BEGIN_OPEN.match(line) for line in lines):
        return text
    levels = levels if levels is not None else task_levels()
    out: list[str] = []
    block: tuple[int, str, str, str] | None = None  # line, task, description, indent of the open OPEN block
    plans: list[str] = []  # the OPEN block's own PLAN lines (outside its regions)
    stubs: list[str] = []  # and its own STUB lines
    body: list[str] = []
    in_region: str | None = None  # task of the BEGIN SOLUTION region being read, when inside one
    only: tuple[int, str, str] | None = None  # line, task and level of the open ONLY block
    for number, line in enumerate(lines, start=1):
        where = f"{filename}:{number}"
        if not line.endswith("\n"):
            line += "\n"
        marker, only = _only_marker(line, number, filename, only, block, in_region)
        if marker or (only is not None and only[2] != _level(levels, only[1])):
            continue  # an ONLY marker, or text of another level (or of the reference alone)
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
            block, plans, stubs, body = (number, task, desc, begin_open["indent"]), [], [], []
            continue
        if end_open:
            if block is None:
                raise MarkerError(f"{where}: END OPEN without a matching BEGIN OPEN")
            if in_region is not None:
                raise MarkerError(f"{where}: END OPEN inside a BEGIN SOLUTION region")
            _, task, desc, indent = block
            c = end_open["c"]
            if _level(levels, task) == "open":
                out.append(f"{indent}{c} BEGIN SOLUTION {task}: {desc}\n")
                out.extend(plans)
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
            if block is None and _level(levels, was) == "open":
                continue  # a given region at the open level: its code stays, its markers go
        if block is not None:
            if in_region is None and PLAN.match(line):
                plans.append(line)  # the block's own plan: the open stub's text, nothing at the guided level
            elif in_region is None and STUB.match(line):
                stubs.append(line)  # the block's own stub code, likewise
            elif _level(levels, block[1]) == "open":
                # the inner regions dissolve into the block; their markers, plans and stubs go
                if not (begin or end or PLAN.match(line) or STUB.match(line)):
                    body.append(line)
            else:
                body.append(line)
            continue
        if in_region is not None and _level(levels, in_region) == "open":
            if begin or PLAN.match(line) or STUB.match(line):
                continue  # a given region at the open level
        out.append(line)
    if block is not None:
        raise MarkerError(f"{filename}:{block[0]}: BEGIN OPEN {block[1]} is never closed (END OPEN missing)")
    if only is not None:
        raise MarkerError(f"{filename}:{only[0]}: BEGIN ONLY {only[1]} is never closed (END ONLY missing)")
    return "".join(out)


def strip_solutions(
    text: str, filename: str, registry: Registry | None = None, levels: dict[str, str] | None = None
) -> tuple[str, list[Region]]:
    """Return the starter text for one solution file and the regions found, at each task's scaffolding level
    (``levels``; else ``registry``'s; else the default registry's)."""
    text = apply_levels(
        text, filename, levels if levels is not None else (task_levels(registry) if registry is not None else None)
    )
    leftover = next((n for n, line in enumerate(text.splitlines(), 1) if BEGIN_ONLY.match(line)), None)
    if leftover is not None:
        raise MarkerError(f"{filename}:{leftover}: an ONLY block in a file without an OPEN block (it has one level)")
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
