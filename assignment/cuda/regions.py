"""The TODO regions of a student's CUDA file: find them, check them, splice them into the kit's file.

Students write device code only. In a starter file each region reads

    // TODO(t4): what to write
    // PLAN: ...
    KIT_TODO(t4);
    // END TODO(t4)

and the student replaces the lines between the two markers. The grader never compiles the student's
file as it is: it takes the kit's own file (host code, launches, includes), puts the student's
regions where the kit's regions were, and builds that (``splice``). So host code, ``#include``s and
launch configurations are always the kit's, and a change outside the regions has no effect (the
grader says so). ``check_region`` rejects what could reach past device code from inside a region:

* preprocessor lines other than ``#pragma unroll [N]``, and digraphs, trigraphs or backslashes that
  could make one;
* ``asm``, storage that outlives a call (``static``, ``extern``, ``__device__``/``__constant__``/
  ``__managed__`` variables), new functions or kernels (``__global__``, ``__host__``, ``template``),
  allocation (``malloc``, ``new``), any ``cuda*``/``cublas*`` API;
* braces, parentheses or brackets that close what the region did not open (leaving the function),
  and comments or string literals left open at the region's end (swallowing the kit's next lines);
* characters outside ASCII in code (identifiers that only look like the kit's).

Public tests run the same check on a student's file, so a rejection shows up locally first.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import PurePath

from assignment.starter import END_TODO, apply_levels, strip_solutions

_TODO = re.compile(r"^(?P<indent>\s*)//\s*TODO\((?P<task>t[0-9]+)\):\s*(?P<desc>.*?)\s*$")
_END = re.compile(r"^\s*//\s*END TODO\((?P<task>t[0-9]+)\)\s*$")
_BEGIN_SOLUTION = re.compile(r"^\s*//\s*BEGIN SOLUTION\s+(?P<task>t[0-9]+)\b\s*(?::\s*(?P<desc>.*?))?\s*$")
_END_SOLUTION = re.compile(r"^\s*//\s*END SOLUTION\b")
_PRAGMA_UNROLL = re.compile(r"^\s*#\s*pragma\s+unroll(?:\s+\(?\s*[0-9]+\s*\)?)?\s*$")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Identifiers a region may not use, and why (the message a student sees).
FORBIDDEN_IDENTIFIERS = {
    "asm": "inline assembly", "__asm__": "inline assembly", "__asm": "inline assembly",
    "static": "storage that outlives a call", "extern": "declarations outside the region",
    "thread_local": "storage that outlives a call", "__thread": "storage that outlives a call",
    "__device__": "new device functions or variables", "__global__": "new kernels",
    "__host__": "host code", "__constant__": "constant-memory variables", "__managed__": "managed memory",
    "template": "templates (write the code inline)", "namespace": "namespaces",
    "malloc": "allocation", "free": "allocation", "new": "allocation", "delete": "allocation",
    "__attribute__": "attributes", "_Pragma": "pragmas", "__pragma": "pragmas", "__declspec": "attributes",
    "__launch_bounds__": "launch configuration (the kit's)", "__noinline__": "function attributes",
}
FORBIDDEN_PREFIXES = {"cuda": "CUDA runtime calls (host API)", "cublas": "library calls", "cudnn": "library calls",
                      "cufft": "library calls", "cusparse": "library calls", "cutlass": "library code",
                      "cub": "library code", "thrust": "library code"}
_PAIRS = {")": "(", "]": "[", "}": "{"}


class RegionError(ValueError):
    """The student's file cannot be spliced or a region breaks a rule; the message names the line."""


@dataclass(frozen=True)
class Region:
    task: str
    description: str
    marker_line: int       # 1-based line of the opening marker (TODO or BEGIN SOLUTION)
    body_start: int        # 1-based first line of the body (may be past body_end when empty)
    body: tuple[str, ...]  # the lines between the markers, newline-terminated


@dataclass(frozen=True)
class Problem:
    line: int  # 1-based line in the student's file
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass
class Spliced:
    text: str
    origin: list[int | None] = field(default_factory=list)  # spliced line i (0-based) -> student line (1-based)
    ignored_outside: list[int] = field(default_factory=list)  # student lines outside regions that differ


def _lines(text: str) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in text.splitlines()]


def student_regions(text: str, filename: str = "the file") -> list[Region]:
    """The TODO regions of a student (or starter) CUDA file, in order.

    A file graded as a submission may also be the kit's own (``BEGIN SOLUTION`` markers): the
    self-check grades the reference solutions through the same path.
    """
    if any(_BEGIN_SOLUTION.match(line) for line in text.splitlines()):
        return solution_regions(text, filename=filename)
    regions: list[Region] = []
    lines = _lines(text)
    open_at: tuple[int, str, str] | None = None
    for number, line in enumerate(lines, start=1):
        begin, end = _TODO.match(line), _END.match(line)
        if begin:
            if open_at is not None:
                raise RegionError(f"{filename}:{number}: a TODO({begin['task']}) marker inside the region opened at "
                                  f"line {open_at[0]}: keep the '// {END_TODO.format(task=open_at[1])}' line")
            open_at = (number, begin["task"], begin["desc"])
        elif end:
            if open_at is None or end["task"] != open_at[1]:
                raise RegionError(f"{filename}:{number}: '// END TODO({end['task']})' without its '// TODO({end['task']}): "
                                  "...' line above it")
            start, task, desc = open_at
            regions.append(Region(task, desc, start, start + 1, tuple(lines[start:number - 1])))
            open_at = None
    if open_at is not None:
        raise RegionError(f"{filename}:{open_at[0]}: the TODO({open_at[1]}) region is never closed: keep the "
                          f"'// {END_TODO.format(task=open_at[1])}' line after your code")
    return regions


def solution_regions(text: str, levels: dict[str, str] | None = None, filename: str = "the kit's file") -> list[Region]:
    """The ``BEGIN SOLUTION`` regions of the kit's (reference) file, in order, at each task's scaffolding level
    (``levels``; the registry's when None). Line numbers count lines of the levelled text."""
    regions: list[Region] = []
    lines = _lines(apply_levels(text, filename, levels))
    open_at: tuple[int, str, str] | None = None
    for number, line in enumerate(lines, start=1):
        begin = _BEGIN_SOLUTION.match(line)
        if begin:
            open_at = (number, begin["task"], begin["desc"] or "")
        elif _END_SOLUTION.match(line) and open_at is not None:
            start, task, desc = open_at
            regions.append(Region(task, desc, start, start + 1, tuple(lines[start:number - 1])))
            open_at = None
    return regions


# --------------------------------------------------------------------------- the rules


def _code_only(body: list[str], first_line: int) -> tuple[list[tuple[int, str]], list[Problem]]:
    """Each line with comments and literals blanked out, and the lexical problems found on the way.

    Runs like the compiler's first phases: comments and literals are recognised before anything
    else, so what is left is exactly what the compiler reads as code.
    """
    problems: list[Problem] = []
    out: list[tuple[int, str]] = []
    in_block: int | None = None  # line where an open /* started
    for offset, raw in enumerate(body):
        number = first_line + offset
        line = raw.rstrip("\n")
        if line.endswith("\\"):
            problems.append(Problem(number, "a line may not end with a backslash (it would join the next line)"))
        code, i, n = [], 0, len(line)
        while i < n:
            if in_block is not None:
                close = line.find("*/", i)
                if close < 0:
                    code.append(" " * (n - i))
                    i = n
                    continue
                code.append(" " * (close + 2 - i))
                i, in_block = close + 2, None
                continue
            two = line[i:i + 2]
            ch = line[i]
            if two == "//":
                break
            if two == "/*":
                in_block = number
                code.append("  ")
                i += 2
                continue
            if ch in "\"'":
                if ch == '"' and i > 0 and line[i - 1] == "R":
                    problems.append(Problem(number, "raw string literals are not allowed"))
                j = i + 1
                while j < n and line[j] != ch:
                    j += 2 if line[j] == "\\" else 1
                if j >= n:
                    problems.append(Problem(number, "a string or character literal is not closed on its line"))
                code.append(" " * (min(j, n - 1) + 1 - i))
                i = j + 1
                continue
            code.append(ch)
            i += 1
        out.append((number, "".join(code)))
    if in_block is not None:
        problems.append(Problem(in_block, "a /* comment is not closed inside the region (it would swallow the "
                                          "kit's code after it)"))
    return out, problems


def check_region(region: Region) -> list[Problem]:
    """Every rule the region's body breaks (empty: it may be spliced)."""
    code_lines, problems = _code_only(list(region.body), region.body_start)
    stack: list[tuple[str, int]] = []
    for number, code in code_lines:
        stripped = code.strip()
        if stripped.startswith("#"):
            if not _PRAGMA_UNROLL.match(stripped):
                problems.append(Problem(number, "preprocessor lines are not allowed in a TODO region (only "
                                                "'#pragma unroll' or '#pragma unroll N')"))
            continue
        if "#" in code or "%:" in code or "<%" in code or "%>" in code or "??" in code:
            problems.append(Problem(number, "'#', digraphs and trigraphs are not allowed in a TODO region"))
        if "\\" in code:
            problems.append(Problem(number, "backslashes are not allowed in code (only inside literals)"))
        if any(ord(c) > 127 for c in code):
            problems.append(Problem(number, "non-ASCII characters are not allowed in code (only in comments)"))
        for match in _IDENTIFIER.finditer(code):
            word = match.group()
            why = FORBIDDEN_IDENTIFIERS.get(word)
            if why is None:
                why = next((w for p, w in FORBIDDEN_PREFIXES.items() if word.startswith(p)), None)
            if why is not None:
                problems.append(Problem(number, f"'{word}' is not allowed in a TODO region ({why}): write device "
                                                "code that uses the kit's variables and helpers"))
        for ch in code:
            if ch in "([{":
                stack.append((ch, number))
            elif ch in ")]}":
                if not stack or stack[-1][0] != _PAIRS[ch]:
                    problems.append(Problem(number, f"'{ch}' closes something the region did not open (a TODO "
                                                    "region must stay inside its function)"))
                    return problems
                stack.pop()
    for ch, number in stack:
        problems.append(Problem(number, f"'{ch}' opened here is not closed inside the region"))
    return problems


def check_file(text: str, tasks: tuple[str, ...] | list[str] | None = None,
               filename: str = "the file") -> list[Problem]:
    """Problems in the regions of ``tasks`` (all when None) of a student's CUDA file."""
    problems: list[Problem] = []
    for region in student_regions(text, filename):
        if tasks is None or region.task in tasks:
            problems.extend(check_region(region))
    return problems


# --------------------------------------------------------------------------- the splice


def splice(kit_text: str, student_text: str, tasks: tuple[str, ...] | list[str], *,
           filename: str = "the file") -> Spliced:
    """The kit's file with the student's regions of ``tasks``; every other region stays the kit's.

    Raises RegionError when the student's file does not have the kit's regions (same tasks, same
    order) or when a spliced region breaks a rule (the message lists each problem with its line).
    """
    kit_text = apply_levels(kit_text, filename)
    student_text = apply_levels(student_text, filename)  # a solution file graded as a submission (the self-check)
    kit_regions = solution_regions(kit_text, filename=filename)
    mine = student_regions(student_text, filename)
    if [r.task for r in mine] != [r.task for r in kit_regions]:
        want = ", ".join(f"{r.task} '{r.description}'" for r in kit_regions)
        have = ", ".join(f"{r.task} (line {r.marker_line})" for r in mine) or "none"
        raise RegionError(f"{filename}: the TODO regions do not match the starter's (expected, in order: {want}; "
                          f"found: {have}). Keep every '// TODO(tN): ...' and '// END TODO(tN)' line of the starter.")
    problems = [p for kit, student in zip(kit_regions, mine) if kit.task in tasks for p in check_region(student)]
    if problems:
        raise RegionError(f"{filename}: " + "; ".join(str(p) for p in problems[:8])
                          + (f"; ... and {len(problems) - 8} more" if len(problems) > 8 else ""))
    kit_lines = _lines(kit_text)
    out: list[str] = []
    origin: list[int | None] = []
    cursor = 0  # next kit line (0-based) to copy
    for kit, student in zip(kit_regions, mine):
        body_begin = kit.body_start - 1  # 0-based index of the kit body's first line
        out.extend(kit_lines[cursor:body_begin])
        origin.extend([None] * (body_begin - cursor))
        if kit.task in tasks:
            out.extend(student.body)
            origin.extend(range(student.body_start, student.body_start + len(student.body)))
        else:
            out.extend(kit.body)
            origin.extend([None] * len(kit.body))
        cursor = body_begin + len(kit.body)
    out.extend(kit_lines[cursor:])
    origin.extend([None] * (len(kit_lines) - cursor))
    return Spliced("".join(out), origin, _changed_outside(kit_text, student_text, mine, filename))


def _changed_outside(kit_text: str, student_text: str, mine: list[Region], filename: str) -> list[int]:
    """Student lines outside the regions that differ from the starter (they are not graded)."""
    starter, _ = strip_solutions(kit_text, filename)
    reference = kit_text if any(_BEGIN_SOLUTION.match(l) for l in student_text.splitlines()) else starter
    starter_outside = _outside(_lines(reference), student_regions(reference, filename))
    student_outside = _outside(_lines(student_text), mine)
    changed: list[int] = []
    matcher = difflib.SequenceMatcher(a=[t for _, t in starter_outside], b=[t for _, t in student_outside],
                                      autojunk=False)
    for op, _, _, j1, j2 in matcher.get_opcodes():
        if op != "equal":
            changed.extend(student_outside[j][0] for j in range(j1, j2))
    return changed


def _outside(lines: list[str], regions: list[Region]) -> list[tuple[int, str]]:
    inside = set()
    for r in regions:
        inside.update(range(r.body_start, r.body_start + len(r.body)))
    return [(i, line.rstrip()) for i, line in enumerate(lines, start=1) if i not in inside]


def line_ranges(numbers: list[int]) -> str:
    """[3, 4, 5, 9] -> '3-5, 9'."""
    ranges: list[str] = []
    for n in sorted(set(numbers)):
        if ranges and n == int(ranges[-1].split("-")[-1]) + 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{n}"
        else:
            ranges.append(str(n))
    return ", ".join(ranges)


def student_diagnostics(diagnostics: list, student_text: str, name: str,
                        origin: list[int | None] | tuple[int | None, ...] | None = None,
                        limit: int = 5) -> tuple[list[str], int]:
    """nvcc's errors (``compiler.CudaCompileError.diagnostics``) on the student's own lines of ``name``, the
    line quoted; an error in the kit's code is named but never quoted. ``origin`` maps a line of the compiled
    (spliced) file to the student's (None: the kit's); without it the student's file was compiled as it is.
    Returns the lines for the first ``limit`` errors and the number of errors."""
    student_lines = student_text.splitlines()
    errors = [d for d in diagnostics if "error" in d.severity] or list(diagnostics)
    lines: list[str] = []
    for diag in errors[:limit]:
        line = diag.line if PurePath(diag.file).name == name else None
        if line is not None and origin is not None:
            line = origin[line - 1] if 0 < line <= len(origin) else None
        if line is None:
            lines.append(f"{name}: {diag.severity} in the kit's code around your TODO regions: {diag.message} "
                         "(your code declares or uses a name the kit's code conflicts with?)")
            continue
        lines.append(f"{name}:{line}: {diag.severity}: {diag.message}")
        if 0 < line <= len(student_lines):
            lines.append(f"    {line:5d} | {student_lines[line - 1].rstrip()}")
    return lines, len(errors)
