"""The rules of a CUDA TODO region, checked on the compiler's own reading of the file.

A student's regions become device code no matter what they hold (``compiler.build_module``: a cubin, loaded
by the kit's host code), so these rules are not what keeps a submission from the host: they say, at the
student's line, what would not be the kernel the task asks for (inline PTX would give an fp32 task tensor-core
instructions), and they keep a region inside the function it belongs to. Four checks, each on a reading the
compiler makes (``reading``); no region can switch one off, since none of them looks for a word a region could
write:

1. **Line splices** (a backslash before a line end): none in a region. Found in the raw text, which is how
   the language defines them (phase 2; gcc joins a backslash followed by spaces too).
2. **The region as written** (``check_regions``): the regions go through the host compiler's lexer with
   comments removed (``reading.decommented``), each between a begin and an end word and every line prefixed
   by a line word, so that none of the student's text starts a line. The words are drawn afresh for every
   reading and begin with ``__kit``, which no region may write: a region cannot forge its own end. A region
   must end where its END marker is (a comment or raw string left open would swallow the kit's next lines:
   the end word would vanish); no directive (a line whose first token is ``#`` or ``%:``, after any comment:
   ``#line`` and ``# 12 "file"`` markers too), but ``#pragma unroll [N]``; no forbidden name
   (``FORBIDDEN_IDENTIFIERS``, ``FORBIDDEN_PREFIXES``: ``asm`` in every spelling, ``__attribute__``,
   ``_Pragma``) and no identifier beyond ASCII letters, digits and ``_``; no C++11 attribute list
   (``[[...]]``); no trigraph; no literal left open; brackets balanced (a region never closes what it did not
   open: it stays inside its function).
3. **The region as the device compiler receives it** (``expansion.check_expansion``): the whole file through
   ``nvcc -E`` for the device, every token with the file and line the preprocessor gives it. The file must read
   as the kit's with each region's tokens at that region's place (so a ``#line`` or a line marker cannot move a
   token out of a region, or into another file, unseen), and a region's tokens may hold no ``asm`` reached
   through a macro, no static storage, allocation or runtime call, no directive but ``#pragma unroll``, no
   attribute but ``shared`` and ``aligned`` (every name of every list), and no compiler built-in that the kit's
   own file does not declare.
4. **The build** (``check_module``): the cubin's own symbols against the kit's build of the same file. No
   variable in global memory (storage that outlives a launch) and no outside function (device malloc,
   the device runtime) that the kit's build does not have; ``printf``'s ``vprintf`` and ``assert``'s
   ``__assertfail`` are allowed.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from assignment.cuda import reading
from assignment.cuda.expansion import check_expansion
from assignment.cuda.forbidden import (
    ALLOWED_ATTRIBUTES,
    ATTRIBUTE_LIST_MESSAGE,
    EXPANDED_FORBIDDEN,
    FORBIDDEN_IDENTIFIERS,
    FORBIDDEN_PREFIXES,
    RESERVED_PREFIX,
    TRIGRAPH,
    Problem,
    forbidden_message,
    is_directive_start,
    named,
    unique,
    opens_attribute_list,
    pragma_unroll_end,
)

__all__ = [  # what the kit reads here (the handout prints the two lists of names)
    "ALLOWED_ATTRIBUTES",
    "ALLOWED_EXTERNALS",
    "EXPANDED_FORBIDDEN",
    "FORBIDDEN_IDENTIFIERS",
    "FORBIDDEN_PREFIXES",
    "ModuleSymbols",
    "Problem",
    "check",
    "check_expansion",
    "check_module",
    "check_regions",
    "module_symbols",
]

# Outside functions a student's build may call that the kit's may not (check 4).
ALLOWED_EXTERNALS = {"vprintf", "__assertfail"}
_OPENS = {"(": ")", "[": "]", "{": "}", "<:": ":>", "<%": "%>"}
_CLOSES = {v: k for k, v in _OPENS.items()}
_ASCII_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SWALLOWED = (
    "a /* comment or a raw string literal opened here is not closed inside the region (it would swallow the "
    "kit's code after it)"
)


def check(
    regions: list,
    text: str,
    spans: list[tuple[int, int]],
    filename: str,
    arch: str | None,
    origin: list[int | None] | None = None,
    *,
    limits=None,
) -> list[Problem]:
    """Checks 1 to 3 on a file's student regions: ``regions`` (with the student's line numbers) as written, then,
    when they pass and ``arch`` is given (nvcc is there), ``text`` with the regions at ``spans`` as the device
    compiler receives it (``check_expansion``)."""
    problems = check_regions(regions, limits=limits)
    if not problems and arch is not None:
        problems = check_expansion(text, spans, filename, arch, origin, limits=limits)
    return unique(problems)


# --------------------------------------------------------------------------- checks 1 and 2: the regions as written


def check_regions(regions: list, *, limits=None) -> list[Problem]:
    """Every rule the student's ``regions`` (assignment.cuda.regions.Region, with student line numbers) break
    as written: line splices, then what the host compiler's lexer reads in them."""
    problems: list[Problem] = []
    for region in regions:
        body = "".join(region.body)
        problems += [
            Problem(line, "a line may not end with a backslash (it would join the next line)")
            for line in reading.splices(body, region.body_start)
        ]
    if problems or not regions:
        return problems  # a splice would move the lexer's lines: the rest reads correctly only without one
    probe = _Probe.of(regions)
    read = reading.decommented(probe.text, limits=limits)
    if read.errors:  # the lexer stopped: its own errors, at the student's lines
        return [
            _lexer_problem(probe.where.get(line, (0, regions[-1].body_start))[1], message)
            for line, message in read.errors
        ]
    tokens = reading.tokenize(read.text)
    if len({token.file for token in tokens}) > 1:  # only the lexer writes line markers: no region text starts a line
        return [Problem(regions[0].body_start, "a line marker ('# 12 \"file\"') is not allowed in a TODO region")]
    for index, region in enumerate(regions):
        problems += _check_one(region, index, tokens, probe)
    return unique(problems)


def _lexer_problem(line: int, message: str) -> Problem:
    if "unterminated comment" in message or "unterminated raw string" in message:
        return Problem(line, _SWALLOWED)
    return Problem(line, f"the compiler cannot read this line: {message}")


@dataclass(frozen=True)
class _Probe:
    """The regions as the lexer reads them: one after the other, each between a begin and an end word, every
    line prefixed by a line word. The words share a beginning drawn afresh for each probe (``RESERVED_PREFIX``
    and random digits), which no region can know, let alone write."""

    text: str
    tag: str
    where: dict[int, tuple[int, int]]  # probe line -> (region index, student line)
    lines: tuple[tuple[int, int], ...]  # per region: the probe lines of its begin and end words

    @classmethod
    def of(cls, regions: list) -> _Probe:
        tag = f"{RESERVED_PREFIX}{secrets.token_hex(8)}"
        lines: list[str] = []
        where: dict[int, tuple[int, int]] = {}
        words: list[tuple[int, int]] = []
        for index, region in enumerate(regions):
            lines.append(f"{tag}b{index}\n")
            begin = len(lines)
            for offset, text in enumerate(region.body):
                lines.append(f"{tag}l {text if text.endswith(chr(10)) else text + chr(10)}")
                where[len(lines)] = (index, region.body_start + offset)
            lines.append(f"{tag}e{index}\n")
            words.append((begin, len(lines)))
        return cls("".join(lines), tag, where, tuple(words))

    def begin(self, index: int) -> str:
        return f"{self.tag}b{index}"

    def end(self, index: int) -> str:
        return f"{self.tag}e{index}"

    @property
    def line_word(self) -> str:
        return f"{self.tag}l"


def _check_one(region, index: int, tokens: list[reading.Token], probe: _Probe) -> list[Problem]:
    problems: list[Problem] = []
    where = probe.where
    last_line = region.body_start + len(region.body) - 1
    start, stop = (
        next((i for i, t in enumerate(tokens) if t.text == word and t.first and t.line == line), None)
        for word, line in zip((probe.begin(index), probe.end(index)), probe.lines[index])
    )
    if start is None or stop is None or stop < start:
        return [Problem(_last_visible_line(tokens, probe, index) or region.body_start, _SWALLOWED)]
    body = tokens[start + 1 : stop]
    mark = probe.line_word

    def starts_line(at: int) -> bool:
        return body[at].first or body[at].text == mark

    stack: list[tuple[str, int]] = []
    at_start = True
    for position, token in enumerate(body):
        line = where.get(token.line, (index, last_line))[1]
        if token.text == mark:
            at_start = True
            continue
        line_start = at_start or token.first
        at_start = False
        if token.kind == "string" and "\n" in token.text:
            problems.append(Problem(line, "a string literal may not span lines in a TODO region"))
        if token.kind in ("string", "char") and (trigraph := TRIGRAPH.search(token.text)):
            problems.append(Problem(line, _trigraph_message(trigraph[0])))
        if token.kind == "other":
            what = token.text
            if what in "\"'":
                problems.append(Problem(line, "a string or character literal is not closed on its line"))
            elif what == "\\":
                problems.append(
                    Problem(
                        line,
                        "a backslash outside a literal is not allowed (universal character "
                        "names spell identifiers the rules cannot see)",
                    )
                )
            else:
                problems.append(Problem(line, f"the character {what!r} is not allowed in code"))
        elif is_directive_start(token) or token.text in ("##", "%:%:"):
            if line_start and is_directive_start(token) and pragma_unroll_end(body, position, starts_line):
                pass
            elif line_start and is_directive_start(token):
                problems.append(
                    Problem(
                        line,
                        "preprocessor lines are not allowed in a TODO region (only "
                        "'#pragma unroll' or '#pragma unroll N'; no #line or line markers)",
                    )
                )
            else:
                problems.append(Problem(line, f"'{token.text}' is not allowed in code"))
        elif token.text == "?" and position + 1 < len(body) and body[position + 1].text == "?":
            problems.append(Problem(line, _trigraph_message("??")))
        elif opens_attribute_list(body, position):
            problems.append(Problem(line, ATTRIBUTE_LIST_MESSAGE))
        elif token.kind == "identifier":
            if not _ASCII_IDENTIFIER.fullmatch(token.text):
                problems.append(
                    Problem(
                        line,
                        f"the name {_spelled(token.text)!r} is not allowed: names in a TODO "
                        "region are ASCII letters, digits and _ only",
                    )
                )
            elif (why := named(token.text)) is not None:
                problems.append(Problem(line, forbidden_message(token.text, why)))
        elif token.kind == "number" and not token.text.isascii():
            problems.append(Problem(line, "non-ASCII characters are not allowed in code (only in comments)"))
        if token.kind == "punct" and token.text in _OPENS:
            stack.append((token.text, line))
        elif token.kind == "punct" and token.text in _CLOSES:
            if not stack or _OPENS[stack[-1][0]] != token.text:
                problems.append(
                    Problem(
                        line,
                        f"'{token.text}' closes something the region did not open (a TODO "
                        "region must stay inside its function)",
                    )
                )
                return problems
            stack.pop()
    for opened, line in stack:
        problems.append(Problem(line, f"'{opened}' opened here is not closed inside the region"))
    return problems


def _trigraph_message(spelled: str) -> str:
    return (
        f"'{spelled}' starts a trigraph ('??=' reads as '#' and '??/' as a backslash in older C++): a TODO "
        "region holds none, since compilers disagree on reading them (write '? ?' or split the string)"
    )


def _spelled(name: str) -> str:
    """An identifier as the student typed it (the compiler writes non-ASCII letters as universal character names)."""
    return re.sub(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})", lambda m: chr(int(m[1] or m[2], 16)), name)


def _last_visible_line(tokens: list[reading.Token], probe: _Probe, index: int) -> int | None:
    """The last line of region ``index`` whose line word the lexer still saw: a comment opened on it (or a raw
    string) swallowed the rest."""
    lines = [
        probe.where[t.line][1]
        for t in tokens
        if t.text == probe.line_word and t.line in probe.where and probe.where[t.line][0] == index
    ]
    return max(lines) if lines else None


# --------------------------------------------------------------------------- check 4: the build


@dataclass(frozen=True)
class ModuleSymbols:
    storage: frozenset[str]  # variables in global memory (writable, they outlive a launch)
    externals: frozenset[str]  # functions the module calls but does not define


def module_symbols(cubin: Path) -> ModuleSymbols:
    """What a cubin keeps in global memory and what it calls outside itself, from its ELF symbol table."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    storage, externals = set(), set()
    with open(cubin, "rb") as handle:
        elf = ELFFile(handle)
        for section in elf.iter_sections():
            if not isinstance(section, SymbolTableSection):
                continue
            for symbol in section.iter_symbols():
                kind, where = symbol["st_info"]["type"], symbol["st_shndx"]
                if kind == "STT_FUNC" and where == "SHN_UNDEF":
                    externals.add(symbol.name)
                elif kind == "STT_OBJECT" and isinstance(where, int):
                    home = elf.get_section(where).name
                    if home.startswith(".nv.global") and not (
                        home == ".nv.global.init" and symbol.name.startswith("$str")
                    ):
                        storage.add(symbol.name)  # $str: the format strings printf and assert read
    return ModuleSymbols(frozenset(storage), frozenset(externals))


def check_module(student: Path, kit: Path) -> list[Problem]:
    """The student's cubin against the kit's build of the same file: no new global-memory variable, no new
    outside function but printf's and assert's."""
    mine, reference = module_symbols(student), module_symbols(kit)
    problems = []
    extra = sorted(mine.storage - reference.storage)
    if extra:
        problems.append(
            Problem(
                0,
                "the build keeps variables in global memory, which outlive a launch "
                f"({', '.join(_readable(s) for s in extra[:5])}): a kernel may not remember an "
                "earlier call (no static, __device__ or __managed__ variables)",
            )
        )
    calls = sorted(mine.externals - reference.externals - ALLOWED_EXTERNALS)
    if calls:
        problems.append(
            Problem(
                0,
                f"the build calls {', '.join(_readable(s) for s in calls[:5])}, outside the kernel: "
                "no device allocation (malloc, new) or device runtime calls",
            )
        )
    return problems


def _readable(symbol: str) -> str:
    """A C++ symbol as the source spelled it where c++filt can say (ELF names are mangled)."""
    import shutil
    import subprocess

    tool = shutil.which("c++filt")
    if tool and symbol.startswith("_Z"):
        proc = subprocess.run([tool, symbol], capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip()
    return symbol
