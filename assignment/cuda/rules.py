"""The rules of a CUDA TODO region, checked on the compiler's own reading of the file.

A student's regions become device code no matter what they hold (``compiler.build_module``: a cubin, loaded
by the kit's host code), so these rules are not what keeps a submission from the host: they say early, at
the student's line, what would not be the kernel the task asks for, and they keep a region inside the
function it belongs to. Four checks, each on a reading the compiler makes (``reading``):

1. **Line splices** (a backslash before a line end): none in a region. Found in the raw text, which is how
   the language defines them (phase 2; gcc joins a backslash followed by spaces too).
2. **The region as written** (``check_regions``): every region line, prefixed by a marker word so that none
   of the student's text starts a line, goes through the host compiler's lexer with comments removed
   (``reading.decommented``). A region must end where its END marker is (a comment or raw string left
   open would swallow the kit's next lines: the marker word after the region would vanish); no directive
   (a line whose first token is ``#`` or ``%:``, after any comment), but ``#pragma unroll [N]``; no
   forbidden name (``FORBIDDEN_IDENTIFIERS``, ``FORBIDDEN_PREFIXES``) and no identifier beyond ASCII
   letters, digits and ``_``; no literal left open; brackets balanced (a region never closes what it did not
   open: it stays inside its function).
3. **The region as the device compiler receives it** (``check_expansion``): the whole file, its regions
   marked, through ``nvcc -E`` for the device. Every macro expanded, no forbidden construct may appear
   between a region's markers (``asm`` reached through a macro, static storage, allocation, runtime calls,
   attributes other than ``shared`` and ``aligned``), and outside the regions the compiler must read
   exactly the tokens it reads when the regions are empty: whatever the regions hold, the kit's code
   around them means what it meant.
4. **The build** (``check_module``): the cubin's own symbols against the kit's build of the same file. No
   variable in global memory (storage that outlives a launch) and no outside function (device malloc,
   the device runtime) that the kit's build does not have; ``printf``'s ``vprintf`` and ``assert``'s
   ``__assertfail`` are allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from assignment.cuda import reading

# Identifiers a region may not use as written, and why (the message a student sees; the handout lists them).
FORBIDDEN_IDENTIFIERS = {
    "asm": "inline assembly",
    "__asm__": "inline assembly",
    "__asm": "inline assembly",
    "static": "storage that outlives a call",
    "thread_local": "storage that outlives a call",
    "__thread": "storage that outlives a call",
    "extern": "declarations outside the region",
    "__device__": "new device functions or variables",
    "__global__": "new kernels",
    "__host__": "host code",
    "__constant__": "constant-memory variables",
    "__managed__": "managed memory",
    "template": "templates (write the code inline)",
    "namespace": "namespaces",
    "malloc": "allocation",
    "free": "allocation",
    "calloc": "allocation",
    "realloc": "allocation",
    "alloca": "allocation",
    "new": "allocation",
    "delete": "allocation",
    "__attribute__": "attributes",
    "__declspec": "attributes",
    "_Pragma": "pragmas",
    "__pragma": "pragmas",
    "__launch_bounds__": "launch configuration (the kit's)",
    "__noinline__": "function attributes",
    "__forceinline__": "function attributes",
    "cub": "library code",
    "thrust": "library code",
    "cutlass": "library code",
    "cute": "library code",
}
# Name prefixes of library APIs, when followed by a capital or an underscore (cudaMalloc, cublasSgemm) or alone
# (the cuda:: namespace).
FORBIDDEN_PREFIXES = {
    "cuda": "CUDA runtime calls (host API)",
    "cublas": "library calls",
    "cudnn": "library calls",
    "cufft": "library calls",
    "cusparse": "library calls",
    "curand": "library calls",
    "nvrtc": "library calls",
    "__nv": "the compiler's internal functions",
}
# After every macro is expanded, between a region's markers (check 3).
EXPANDED_FORBIDDEN = {
    "asm": "inline assembly",
    "__asm__": "inline assembly",
    "__asm": "inline assembly",
    "static": "storage that outlives a call",
    "extern": "declarations outside the region",
    "thread_local": "storage that outlives a call",
    "__thread": "storage that outlives a call",
    "malloc": "allocation",
    "free": "allocation",
    "calloc": "allocation",
    "realloc": "allocation",
    "alloca": "allocation",
    "new": "allocation",
    "delete": "allocation",
}
ALLOWED_ATTRIBUTES = {"shared", "aligned", "__aligned__", "unused", "__unused__"}  # __shared__, __align__(n)
# Outside functions a student's build may call that the kit's may not (check 4).
ALLOWED_EXTERNALS = {"vprintf", "__assertfail"}
_PRAGMA_UNROLL = [("punct", "#"), ("identifier", "pragma"), ("identifier", "unroll")]
_OPENS = {"(": ")", "[": "]", "{": "}", "<:": ":>", "<%": "%>"}
_CLOSES = {v: k for k, v in _OPENS.items()}
_ASCII_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LINE_MARK = "__kit_line__"  # prefixed to every region line in check 2: no student text starts a line


@dataclass(frozen=True)
class Problem:
    line: int  # 1-based line in the student's file (0: the file as a whole)
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


def _named(word: str) -> str | None:
    """Why ``word`` may not appear in a region as written, or None."""
    why = FORBIDDEN_IDENTIFIERS.get(word)
    if why is not None:
        return why
    for prefix, reason in FORBIDDEN_PREFIXES.items():
        if word.startswith(prefix) and (
            len(word) == len(prefix) or word[len(prefix)].isupper() or word[len(prefix)] == "_"
        ):
            return reason
    return None


def _forbidden_message(word: str, why: str) -> str:
    return (
        f"'{word}' is not allowed in a TODO region ({why}): write device code that uses the kit's variables and helpers"
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
    return problems


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
    probe, where = _probe(regions)
    read = reading.decommented(probe, limits=limits)
    if read.errors:  # the lexer stopped: its own errors, at the student's lines
        return [
            _lexer_problem(where.get(line, (0, regions[-1].body_start))[1], message) for line, message in read.errors
        ]
    tokens = reading.tokenize(read.text)
    for index, region in enumerate(regions):
        problems += _check_one(region, index, tokens, where)
    return problems


def _lexer_problem(line: int, message: str) -> Problem:
    if "unterminated comment" in message or "unterminated raw string" in message:
        return Problem(
            line,
            "a /* comment or a raw string literal opened here is not closed inside the region (it "
            "would swallow the kit's code after it)",
        )
    return Problem(line, f"the compiler cannot read this line: {message}")


def _probe(regions: list) -> tuple[str, dict[int, tuple[int, int]]]:
    """The regions, one after the other, each between a begin and an end word and each line prefixed by
    LINE_MARK; and probe line -> (region index, student line)."""
    lines: list[str] = []
    where: dict[int, tuple[int, int]] = {}
    for index, region in enumerate(regions):
        lines.append(f"__kit_begin_{index}__\n")
        for offset, text in enumerate(region.body):
            lines.append(f"{LINE_MARK} {text if text.endswith(chr(10)) else text + chr(10)}")
            where[len(lines)] = (index, region.body_start + offset)
        lines.append(f"__kit_end_{index}__\n")
    return "".join(lines), where


def _check_one(region, index: int, tokens: list[reading.Token], where: dict[int, tuple[int, int]]) -> list[Problem]:
    problems: list[Problem] = []
    begin, end = f"__kit_begin_{index}__", f"__kit_end_{index}__"
    start = next((i for i, t in enumerate(tokens) if t.kind == "identifier" and t.text == begin), None)
    stop = next((i for i, t in enumerate(tokens) if t.kind == "identifier" and t.text == end), None)
    last_line = region.body_start + len(region.body) - 1
    if start is None or stop is None or stop < start:
        opened = _last_visible_line(tokens, where, index) or region.body_start
        return [
            Problem(
                opened,
                "a /* comment or a raw string literal opened here is not closed inside the region "
                "(it would swallow the kit's code after it)",
            )
        ]
    body = tokens[start + 1 : stop]
    stack: list[tuple[str, int]] = []
    at_start = True
    for position, token in enumerate(body):
        line = where.get(token.line, (index, last_line))[1]
        if token.kind == "identifier" and token.text == LINE_MARK:
            at_start = True
            continue
        line_start = at_start or token.first
        at_start = False
        if token.kind == "string" and "\n" in token.text:
            problems.append(Problem(line, "a string literal may not span lines in a TODO region"))
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
        elif token.kind == "punct" and token.text in ("#", "%:", "##", "%:%:"):
            if line_start and token.text in ("#", "%:") and _is_pragma_unroll(body, position):
                pass
            elif line_start and token.text in ("#", "%:"):
                problems.append(
                    Problem(
                        line,
                        "preprocessor lines are not allowed in a TODO region (only "
                        "'#pragma unroll' or '#pragma unroll N')",
                    )
                )
            else:
                problems.append(Problem(line, f"'{token.text}' is not allowed in code"))
        elif token.kind == "identifier":
            if not _ASCII_IDENTIFIER.fullmatch(token.text):
                problems.append(
                    Problem(
                        line,
                        f"the name {_spelled(token.text)!r} is not allowed: names in a TODO "
                        "region are ASCII letters, digits and _ only",
                    )
                )
            elif (why := _named(token.text)) is not None:
                problems.append(Problem(line, _forbidden_message(token.text, why)))
        elif token.kind == "number" and not token.text.isascii():
            problems.append(Problem(line, "non-ASCII characters are not allowed in code (only in comments)"))
        elif token.kind == "punct" and token.text in _OPENS:
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


def _spelled(name: str) -> str:
    """An identifier as the student typed it (the compiler writes non-ASCII letters as universal character names)."""
    return re.sub(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})", lambda m: chr(int(m[1] or m[2], 16)), name)


def _is_pragma_unroll(body: list[reading.Token], at: int) -> bool:
    """``# pragma unroll``, optionally with N or (N), and nothing else on the line."""
    head = body[at : at + 3]
    if [(t.kind, t.text if t.kind != "punct" else "#") for t in head] != _PRAGMA_UNROLL:
        return False
    rest = []
    for token in body[at + 3 :]:
        if token.line != head[0].line or (token.kind == "identifier" and token.text == LINE_MARK):
            break
        rest.append(token.text)
    return (
        rest == []
        or (len(rest) == 1 and rest[0].isdigit())
        or (len(rest) == 3 and rest[0] == "(" and rest[1].isdigit() and rest[2] == ")")
    )


def _last_visible_line(tokens: list[reading.Token], where: dict[int, tuple[int, int]], index: int) -> int | None:
    """The last line of region ``index`` whose marker word the lexer still saw: a comment opened on it (or a
    raw string) swallowed the rest."""
    lines = [
        where[t.line][1]
        for t in tokens
        if t.kind == "identifier" and t.text == LINE_MARK and t.line in where and where[t.line][0] == index
    ]
    return max(lines) if lines else None


# --------------------------------------------------------------------------- check 3: as the device compiler reads it


def check_expansion(
    text: str,
    spans: list[tuple[int, int]],
    filename: str,
    arch: str,
    origin: list[int | None] | None = None,
    *,
    limits=None,
) -> list[Problem]:
    """``text`` (a whole .cu file) with its student regions at ``spans`` (the 1-based lines of each region's
    opening and closing marker comments), through the device preprocessor: what the regions expand to, and
    the kit's code around them read as if they were empty. ``origin`` maps a line of ``text`` to the student's
    (default: the same line). A token belongs to the line it is written on (the preprocessor writes a macro's
    expansion on the line of its name), so nothing is inserted into the text to mark the regions: a marker
    would itself change how a macro call that runs past the region reads."""
    if not spans:
        return []
    emptied = text.splitlines(keepends=True)
    for opening, closing in spans:
        for line in range(opening, closing - 1):
            emptied[line] = "\n"
    read = reading.expanded(text, filename, arch, limits=limits)
    if read.errors:  # the preprocessor stopped (a file it cannot find, an #error): say where
        return [
            Problem(_student_line(line, origin), f"the preprocessor stops here: {message}")
            for line, message in read.errors[:5]
        ]
    kit_read = reading.expanded("".join(emptied), filename, arch, limits=limits)
    if kit_read.errors:
        raise reading.ReadingError(f"the kit's {filename} does not preprocess: {kit_read.errors[0][1]}")
    main = f"/work/{filename}"
    inside, outside = _split(reading.tokenize(read.text, main_file=main), spans)
    _, outside_kit = _split(_kit_tokens(kit_read.text, main), spans)
    problems: list[Problem] = []
    for tokens in inside:
        problems += _expanded_problems(tokens, origin)
    if [t.text for t in outside] != [t.text for t in outside_kit]:
        differ = next((a for a, b in zip(outside, outside_kit) if a.text != b.text), outside[-1] if outside else None)
        after = max((closing for _, closing in spans if differ is None or closing <= differ.line), default=spans[0][1])
        problems.append(
            Problem(
                _student_line(after - 1, origin) or after - 1,
                "the kit's code after your TODO region does not read the same with it in place (a "
                "region must be whole statements: a macro or call left open at its end takes the "
                "kit's next lines)",
            )
        )
    return problems


@lru_cache(maxsize=8)
def _kit_tokens(text: str, main_file: str) -> tuple[reading.Token, ...]:
    """The tokens of ``main_file`` in the kit's expansion: the same for every student file spliced into it."""
    return tuple(reading.tokenize(text, main_file=main_file))


def _split(
    tokens: list[reading.Token] | tuple[reading.Token, ...], spans: list[tuple[int, int]]
) -> tuple[list[list[reading.Token]], list[reading.Token]]:
    """Tokens written on each region's lines, and every other token."""
    inside: list[list[reading.Token]] = [[] for _ in spans]
    outside: list[reading.Token] = []
    for token in tokens:
        index = next((i for i, (opening, closing) in enumerate(spans) if opening < token.line < closing), None)
        (inside[index] if index is not None else outside).append(token)
    return inside, outside


def _student_line(line: int, origin: list[int | None] | None) -> int:
    if origin is None:
        return line
    return origin[line - 1] or 0 if 0 < line <= len(origin) else 0


def _expanded_problems(tokens: list[reading.Token], origin: list[int | None] | None) -> list[Problem]:
    problems: list[Problem] = []
    for position, token in enumerate(tokens):
        if token.kind != "identifier":
            continue
        line = _student_line(token.line, origin)
        why = EXPANDED_FORBIDDEN.get(token.text)
        if why is None and token.text.startswith("cuda") and token.text[4:5].isupper():
            why = "CUDA runtime calls (host API)"
        if why is not None:
            problems.append(
                Problem(line, f"this line expands to '{token.text}' ({why}), which a TODO region may not contain")
            )
        elif token.text == "__attribute__":
            names = [t.text for t in tokens[position + 1 : position + 8] if t.kind == "identifier"]
            if names and names[0] not in ALLOWED_ATTRIBUTES:
                problems.append(
                    Problem(
                        line, f"this line expands to the attribute '{names[0]}', which a TODO region may not contain"
                    )
                )
    return problems


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
