"""The TODO regions of a student's CUDA file: find them and splice them into the kit's file.

Students write device code only. In a starter file each region reads

    // TODO(t4): what to write
    // PLAN: ...
    KIT_TODO(t4);
    // END TODO(t4)

and the student replaces the lines between the two markers. Nothing compiles the student's file as it is:
the kit takes its own copy of the file (its host code, launches, includes), puts the student's regions where
its regions were, and compiles that to device code (``splice``, then ``compiler.build_module``). So host code,
``#include``s and launch configurations are always the kit's, and a change outside the regions has no
effect (the grader says so). What a region may contain is checked on the compiler's own reading of it
(``assignment.cuda.rules``); public tests run the same checks on a student's file, so a rejection shows up
locally first.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import PurePath

from assignment.markers import (
    BEGIN_SOLUTION,
    END_SOLUTION,
    END_TODO,
    TODO_BEGIN,
    TODO_END,
    MarkerError,
    apply_levels,
    strip_solutions,
)


class RegionError(ValueError):
    """The student's file cannot be spliced or a region breaks a rule; the message names the line."""


@dataclass(frozen=True)
class Region:
    task: str
    description: str
    marker_line: int  # 1-based line of the opening marker (TODO or BEGIN SOLUTION)
    body_start: int  # 1-based first line of the body (may be past body_end when empty)
    body: tuple[str, ...]  # the lines between the markers, newline-terminated


@dataclass
class Spliced:
    text: str
    origin: list[int | None] = field(default_factory=list)  # spliced line i (0-based) -> student line (1-based)
    ignored_outside: list[int] = field(default_factory=list)  # student lines outside regions that differ
    spans: list[tuple[int, int]] = field(default_factory=list)  # the student's regions: marker lines in text
    regions: list[Region] = field(default_factory=list)  # the student's regions spliced in (student lines)


def problems_error(filename: str, problems: list) -> RegionError:
    """One RegionError listing ``problems`` (rules.Problem), the first eight of them."""
    return RegionError(
        f"{filename}: "
        + "; ".join(str(p) for p in problems[:8])
        + (f"; ... and {len(problems) - 8} more" if len(problems) > 8 else "")
    )


def _lines(text: str) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in text.splitlines()]


def student_regions(text: str, filename: str = "the file") -> list[Region]:
    """The TODO regions of a student (or starter) CUDA file, in order.

    A file graded as a submission may also be the kit's own (``BEGIN SOLUTION`` markers): the
    self-check grades the reference solutions through the same path.
    """
    if any(BEGIN_SOLUTION.match(line) for line in text.splitlines()):
        return solution_regions(text, filename=filename)
    regions: list[Region] = []
    lines = _lines(text)
    open_at: tuple[int, str, str] | None = None
    for number, line in enumerate(lines, start=1):
        begin, end = TODO_BEGIN.match(line), TODO_END.match(line)
        if begin:
            if open_at is not None:
                raise RegionError(
                    f"{filename}:{number}: a TODO({begin['task']}) marker inside the region opened at "
                    f"line {open_at[0]}: keep the '// {END_TODO.format(task=open_at[1])}' line"
                )
            open_at = (number, begin["task"], begin["desc"])
        elif end:
            if open_at is None or end["task"] != open_at[1]:
                raise RegionError(
                    f"{filename}:{number}: '// END TODO({end['task']})' without its '// TODO({end['task']}): "
                    "...' line above it"
                )
            start, task, desc = open_at
            regions.append(Region(task, desc, start, start + 1, tuple(lines[start : number - 1])))
            open_at = None
    if open_at is not None:
        raise RegionError(
            f"{filename}:{open_at[0]}: the TODO({open_at[1]}) region is never closed: keep the "
            f"'// {END_TODO.format(task=open_at[1])}' line after your code"
        )
    return regions


def solution_regions(text: str, levels: dict[str, str] | None = None, filename: str = "the kit's file") -> list[Region]:
    """The ``BEGIN SOLUTION`` regions of the kit's (reference) file, in order, at each task's scaffolding level
    (``levels``; the registry's when None). Line numbers count lines of the levelled text."""
    regions: list[Region] = []
    lines = _lines(apply_levels(text, filename, levels))
    open_at: tuple[int, str, str] | None = None
    for number, line in enumerate(lines, start=1):
        begin = BEGIN_SOLUTION.match(line)
        if begin:
            open_at = (number, begin["task"], begin["desc"] or "")
        elif END_SOLUTION.match(line) and open_at is not None:
            start, task, desc = open_at
            regions.append(Region(task, desc, start, start + 1, tuple(lines[start : number - 1])))
            open_at = None
    return regions


def levelled(text: str, filename: str) -> str:
    """A file that may be a student's at its task's level (``apply_levels``: a solution file graded as a submission
    reads as its level's file). Solution markers a student wrote that do not read as the kit's (an OPEN block never
    closed, say) are a RegionError that names the line, as every other problem of a student's file is."""
    try:
        return apply_levels(text, filename)
    except MarkerError as exc:
        raise RegionError(f"{exc}: the kit's solution markers have no place in your file; remove that line") from None


# --------------------------------------------------------------------------- the rules


def check_file(
    text: str, tasks: tuple[str, ...] | list[str] | None = None, filename: str = "the file", arch: str | None = None
) -> list:
    """Problems in the regions of ``tasks`` (all when None) of a student's CUDA file, by the region rules
    (``rules``); with ``arch``, also as the device compiler receives the file as it is (nvcc -E)."""
    from assignment.cuda import rules

    text = levelled(text, filename)  # the kit's own file: regions count lines of the levelled text
    mine = [r for r in student_regions(text, filename) if tasks is None or r.task in tasks]
    return rules.check(mine, text, [(r.marker_line, r.body_start + len(r.body)) for r in mine], filename, arch)


# --------------------------------------------------------------------------- the splice


def splice(
    kit_text: str, student_text: str, tasks: tuple[str, ...] | list[str], *, filename: str = "the file"
) -> Spliced:
    """The kit's file with the student's regions of ``tasks``; every other region stays the kit's.

    Raises RegionError when the student's file does not have the kit's regions (same tasks, same order).
    The rules of what a region holds are ``rules``' (``compiler.build_module`` runs them on the result).
    """
    kit_text = apply_levels(kit_text, filename)
    student_text = levelled(student_text, filename)  # a solution file graded as a submission (the self-check)
    kit_regions = student_regions(kit_text, filename)  # the reference (solutions/) or a bundle's starter copy
    mine = student_regions(student_text, filename)
    if [r.task for r in mine] != [r.task for r in kit_regions]:
        want = ", ".join(f"{r.task} '{r.description}'" for r in kit_regions)
        have = ", ".join(f"{r.task} (line {r.marker_line})" for r in mine) or "none"
        raise RegionError(
            f"{filename}: the TODO regions do not match the starter's (expected, in order: {want}; "
            f"found: {have}). Keep every '// TODO(tN): ...' and '// END TODO(tN)' line of the starter."
        )
    kit_lines = _lines(kit_text)
    out: list[str] = []
    origin: list[int | None] = []
    spans: list[tuple[int, int]] = []
    cursor = 0  # next kit line (0-based) to copy
    for kit, student in zip(kit_regions, mine):
        body_begin = kit.body_start - 1  # 0-based index of the kit body's first line
        out.extend(kit_lines[cursor:body_begin])
        origin.extend([None] * (body_begin - cursor))
        if kit.task in tasks:
            spans.append((len(out), len(out) + len(student.body) + 1))  # the opening and closing marker lines
            out.extend(student.body)
            origin.extend(range(student.body_start, student.body_start + len(student.body)))
        else:
            out.extend(kit.body)
            origin.extend([None] * len(kit.body))
        cursor = body_begin + len(kit.body)
    out.extend(kit_lines[cursor:])
    origin.extend([None] * (len(kit_lines) - cursor))
    return Spliced(
        "".join(out),
        origin,
        _changed_outside(kit_text, student_text, mine, filename),
        spans,
        [r for r in mine if r.task in tasks],
    )


def _changed_outside(kit_text: str, student_text: str, mine: list[Region], filename: str) -> list[int]:
    """Student lines outside the regions that differ from the starter (they are not graded)."""
    starter, _ = strip_solutions(kit_text, filename)
    reference = kit_text if any(BEGIN_SOLUTION.match(l) for l in student_text.splitlines()) else starter
    starter_outside = _outside(_lines(reference), student_regions(reference, filename))
    student_outside = _outside(_lines(student_text), mine)
    changed: list[int] = []
    matcher = difflib.SequenceMatcher(
        a=[t for _, t in starter_outside], b=[t for _, t in student_outside], autojunk=False
    )
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


def student_diagnostics(
    diagnostics: list,
    student_text: str,
    name: str,
    origin: list[int | None] | tuple[int | None, ...] | None = None,
    limit: int = 5,
) -> tuple[list[str], int]:
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
            lines.append(
                f"{name}: {diag.severity} in the kit's code around your TODO regions: {diag.message} "
                "(your code declares or uses a name the kit's code conflicts with?)"
            )
            continue
        lines.append(f"{name}:{line}: {diag.severity}: {diag.message}")
        if 0 < line <= len(student_lines):
            lines.append(f"    {line:5d} | {student_lines[line - 1].rstrip()}")
    return lines, len(errors)


def compile_message(
    name: str, diagnostics: list, student_text: str, origin: list[int | None] | None, trouble: str = "", limit: int = 5
) -> str:
    """What a student is told when their file does not compile: nvcc's errors on their own lines
    (``student_diagnostics``), or why nvcc was stopped (``trouble``: a time or memory limit)."""
    lines, count = student_diagnostics(diagnostics, student_text, name, origin, limit)
    if trouble:
        return "\n".join([f"{name} did not compile: {trouble}", *lines])
    parts = [f"{name} does not compile (nvcc, {count} error{'s' if count != 1 else ''}):", *lines]
    if not diagnostics:
        parts.append("(nvcc gave no diagnostics the kit could read)")
    return "\n".join(parts)
