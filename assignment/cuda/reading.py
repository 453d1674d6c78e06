"""How the compiler reads a CUDA file: its tokens, line by line, with the compiler's own handling of comments
and macros.

C++ is read in phases: line splices, then comments and literals (the preprocessing tokens), then directives
and macros. The kit does not re-implement the hard part. It asks the compiler nvcc uses (its host compiler,
whose preprocessor nvcc runs) for two readings, inside the compile sandbox:

* ``decommented``: ``g++ -fpreprocessed -E``: comments removed by gcc's own lexer, nothing expanded,
  directives left as text, line numbers kept (line markers). This is the file as written, minus comments.
* ``expanded``: ``nvcc -E`` for the device: every directive done, every macro expanded, as the device
  compiler receives it.

What comes back has no comment left, so splitting it into tokens (``tokenize``) is the standard's grammar of
preprocessing tokens and nothing more: identifiers, numbers with digit separators, character and string
literals with their prefixes, raw strings with their delimiters, user-defined-literal suffixes, punctuators
and digraphs. Every token carries the file and line the compiler attributes it to, from its line markers
(``# 12 "file" 1 3``); a line counts as a marker only when it is one whole, from column 0, as the compiler
writes them, so no marker is ever read out of a line of code. Line splices (a backslash before a line end) are
found in the raw text: phase 2 of the language is textual, so that reading is exact. Trigraphs are not read:
C++17 (the kit's standard) has none, in gcc and in the device compiler's front end alike.

Without a host compiler (a machine that cannot build CUDA at all) ``decommented`` returns the text as it is:
a stub in a comment then still counts as a stub, which can only make the kit refuse to run more, never less.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from assignment.cuda import confine
from assignment.cuda.toolchain import (
    INCLUDE_DIR,
    NVCC_FLAGS,
    include_headers,
    normalize_arch,
    nvcc_path,
    nvcc_real_path,
)

HOST_COMPILER = "g++"  # what nvcc runs as its preprocessor and host compiler unless told otherwise (-ccbin)
_STANDARD = "-std=c++17"  # the kit's (compiler.NVCC_FLAGS); trigraphs are not read in C++17


class ReadingError(RuntimeError):
    """The compiler could not read the file (it ran out of time or memory); the message says why."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # identifier | number | string | char | punct | other
    text: str
    line: int  # 1-based line where the token starts, as the compiler numbers it (line markers included)
    first: bool  # the first token on its line (a directive starts with # or %: there)
    file: str = ""  # the file the compiler attributes it to: the last line marker's ("" before any)
    offset: int = 0  # where it starts in the text read


# --------------------------------------------------------------------------- the tokenizer (comment-free text)

_PUNCTUATORS = sorted(
    """%:%: ... <<= >>= ->* <=> :: ## %: <: :> <% %> -> ++ -- << >> <= >= == != && || += -= *= /= %=
&= |= ^= .* { } [ ] ( ) # ; : ? . ~ ! + - * / % ^ & | = < > ,""".split(),
    key=len,
    reverse=True,
)
_PUNCTUATOR = re.compile("|".join(map(re.escape, _PUNCTUATORS)))  # the first of them that matches: the longest
# Identifier characters: letters, _, $ (gcc allows it), anything beyond ASCII, and universal character names (gcc
# writes an identifier's non-ASCII letters as \uXXXX in its output).
_UCN = r"\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}"
_IDENTIFIER = re.compile(rf"(?:[A-Za-z_$\u0080-\U0010ffff]|{_UCN})(?:[A-Za-z0-9_$\u0080-\U0010ffff]|{_UCN})*")
_NUMBER = re.compile(r"\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*")
_ENCODING = re.compile(r"(?:u8|u|U|L)?")
_RAW_OPEN = re.compile(r"(?:u8|u|U|L)?R\"([^()\\\s]{0,16})\(")
# A line marker as the compiler writes it, the whole line: # 12 "file" and its flags (1 enter, 2 return, 3 4 system).
_MARKER = re.compile(r'#[ \t]*(\d+)(?:[ \t]+"((?:[^"\\\n]|\\.)*)"(?:[ \t]+\d+)*)?[ \t]*')
_BLANK = re.compile(r"[ \t\f\v\r]+")
LOOKAHEAD = 32  # characters past its end that can decide where a token ends (a raw string's opening: 21)


def _quoted(text: str, start: int, quote: str) -> int:
    """The index just past the literal opened by ``quote`` at ``start``, or -1 when the line ends first."""
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == quote:
            return i + 1
        if ch == "\n":
            return -1
        i += 1
    return -1


def tokenize(
    text: str,
    first_line: int = 1,
    markers: bool = True,
    *,
    start: int = 0,
    file: str = "",
    at_line_start: bool = True,
) -> list[Token]:
    """The preprocessing tokens of comment-free ``text`` (a compiler's -E output), each with its line and file.

    ``markers``: a line that is a line marker and nothing else (``# 12 "file" 1 3``, from column 0, as the
    compiler writes them) sets the line and file of what follows; any other line is tokens, so a marker is never
    read out of a line that holds code too. ``start``, ``first_line``, ``file`` and ``at_line_start`` resume a
    reading at a token's start with that token's state (``offset``, ``line``, ``file``, ``first``)."""
    tokens: list[Token] = []
    line = first_line
    current_file = file
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            at_line_start = True
            i += 1
            continue
        if ch in " \t\f\v\r":
            i = _BLANK.match(text, i).end()
            continue
        if markers and ch == "#" and (i == 0 or text[i - 1] == "\n"):  # the compiler writes markers at column 0
            end = text.find("\n", i)
            end = n if end < 0 else end
            marker = _MARKER.fullmatch(text, i, end)
            if marker:
                line = int(marker[1])
                if marker[2] is not None:
                    current_file = sys.intern(marker[2])  # one string per file, however many markers name it
                i = end + 1
                continue  # at_line_start stays True: the next line starts fresh
        begin, start_line, first = i, line, at_line_start
        at_line_start = False
        raw = _RAW_OPEN.match(text, i)
        if raw:
            close = text.find(")" + raw[1] + '"', raw.end())
            end = n if close < 0 else close + len(raw[1]) + 2
            kind = "string" if close >= 0 else "other"
        elif (enc := _ENCODING.match(text, i)) and enc.end() < n and text[enc.end()] in "\"'":
            quote = text[enc.end()]
            end = _quoted(text, enc.end(), quote)
            kind = ("string" if quote == '"' else "char") if end >= 0 else "other"
            if end < 0:  # an unterminated quote: gcc reads the quote alone
                end = enc.end() + 1
            elif (suffix := _IDENTIFIER.match(text, end)) is not None:  # a user-defined literal
                end = suffix.end()
        elif number := _NUMBER.match(text, i):
            end, kind = number.end(), "number"
        elif identifier := _IDENTIFIER.match(text, i):
            end, kind = identifier.end(), "identifier"
        else:
            punct = _PUNCTUATOR.match(text, i)
            kind, end = ("punct", punct.end()) if punct else ("other", i + 1)
            if text.startswith("<::", i) and not text.startswith("<:::", i) and not text.startswith("<::>", i):
                kind, end = "punct", i + 1  # C++11: <:: is < followed by ::
        token_text = text[begin:end]
        line += token_text.count("\n")
        tokens.append(Token(kind, token_text, start_line, first, current_file, begin))
        i = end
    return tokens


def tokenize_changed(
    text: str, known_text: str, known: list[Token] | tuple[Token, ...], skipped: int = 0
) -> tuple[int, list[Token]] | None:
    """``tokenize(text)`` as the first ``kept`` tokens of ``known_text`` and the ``rest``: ``(kept, rest)``. Two
    readings of one file with different regions share all that the preprocessor wrote before the first region
    (the headers: most of it), which is then read once. ``known`` holds ``known_text``'s tokens from its
    ``skipped``-th on; None when the texts part before the first of them is past (read ``text`` whole then)."""
    same = _common_prefix(text, known_text)
    if same == len(text) == len(known_text):
        return skipped + len(known), []
    # known[:kept] end, with the lookahead that decided each one, where the two texts still agree
    kept = bisect.bisect_right(known, same, key=lambda t: t.offset + len(t.text) + LOOKAHEAD)
    if kept == 0:
        return (0, tokenize(text)) if skipped == 0 else None
    last = known[kept - 1]
    after = last.offset + len(last.text)
    rest = tokenize(text, last.line + last.text.count("\n"), start=after, file=last.file, at_line_start=False)
    return skipped + kept, rest


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    low, high = 0, min(len(a), len(b))
    while low < high:  # a[:low] == b[:low], and they differ before high when high < both lengths
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


# --------------------------------------------------------------------------- the compiler's readings

_SPLICE = re.compile(r"\\[ \t\f\v]*(?:\r\n|\n|\r)")


def splices(text: str, first_line: int = 1) -> list[int]:
    """Lines that end in a line splice (a backslash, then only spaces, then the line end: gcc joins those too)."""
    return [first_line + text.count("\n", 0, m.start()) for m in _SPLICE.finditer(text)]


def host_compiler() -> str | None:
    return shutil.which(HOST_COMPILER)


@dataclass(frozen=True)
class Reading:
    """What a compiler made of a text: its output (empty when it stopped) and the errors it gave, each with the
    1-based line of the text it read."""

    text: str
    errors: tuple[tuple[int, str], ...] = ()


def decommented(text: str, *, limits: confine.CompileLimits | None = None) -> Reading:
    """``text`` with its comments removed by the host compiler's own lexer (``-fpreprocessed -E``), nothing
    else changed; line markers keep the line numbers. The text as it is where no host compiler is installed.
    Where the lexer fails (an unterminated comment or raw string, a character it cannot read) its errors say
    where. Remembered per process, as ``expanded`` (a file's TODOs are read by several steps)."""
    compiler = host_compiler()
    if compiler is None:
        return Reading(text)
    return _remembered(
        ("read", text),
        lambda: _run(
            lambda src, out: [compiler, _STANDARD, "-fpreprocessed", "-E", "-x", "c++", "-o", out, src],
            text,
            "in.cc",
            limits or confine.CompileLimits(wall_seconds=60),
            what="read",
        ),
    )


def expanded(text: str, filename: str, arch: str, *, limits: confine.CompileLimits | None = None) -> Reading:
    """``text`` (a .cu file with the kit's includes) preprocessed for the device as nvcc does (``nvcc -E``):
    the device compiler's input, with line markers. Remembered per process (the kit's file with its regions
    emptied is read once for every build of it)."""
    return _remembered(("expand", text, filename, arch, _header_stamp()), lambda: _expand(text, filename, arch, limits))


_readings: dict[tuple, Reading] = {}  # the last few readings, by what was read (its text hashed) and how
_READINGS_KEPT = 32


def _remembered(what: tuple, read) -> Reading:
    key = (what[0], hashlib.sha256(what[1].encode()).hexdigest(), *what[2:])
    if key not in _readings:
        _readings[key] = read()
        while len(_readings) > _READINGS_KEPT:
            _readings.pop(next(iter(_readings)))
    return _readings[key]


def _header_stamp() -> tuple[tuple[str, int], ...]:
    return tuple((p.name, p.stat().st_mtime_ns) for p in include_headers())


def _expand(text: str, filename: str, arch: str, limits: confine.CompileLimits | None) -> Reading:
    return _run(
        lambda src, out: [
            nvcc_real_path(),
            *NVCC_FLAGS,
            "-E",
            f"-arch={normalize_arch(arch)}",
            "-I",
            confine.INCLUDE_MOUNT,
            "-o",
            out,
            src,
        ],
        text,
        filename,
        limits or confine.CompileLimits(wall_seconds=120),
        what="preprocess",
    )


_ERROR = re.compile(r"^[^:\s]*:(\d+):(?:\d+:)? (?:fatal )?error: (.*)$", re.MULTILINE)


def _run(command, text: str, filename: str, limits: confine.CompileLimits, what: str) -> Reading:
    with tempfile.TemporaryDirectory(prefix="kit-read-") as work:
        workdir = Path(work)
        (workdir / filename).write_text(text, encoding="utf-8")
        out = "out.ii"
        argv = command(f"{confine.WORK_MOUNT}/{filename}", f"{confine.WORK_MOUNT}/{out}")
        result = confine.run(argv, workdir, INCLUDE_DIR, nvcc_path() or argv[0], limits)
        if result.timed_out:
            raise ReadingError(f"the compiler could not {what} {filename} within {limits.wall_seconds:.0f} s")
        errors = tuple((int(m[1]), m[2].strip()) for m in _ERROR.finditer(result.output))
        produced = workdir / out
        if result.returncode != 0 and not errors:
            raise ReadingError(f"the compiler could not {what} {filename}: {result.output.strip()[-600:]}")
        output = produced.read_text(encoding="utf-8", errors="replace") if produced.is_file() else ""
        return Reading(output if result.returncode == 0 else "", errors)


# --------------------------------------------------------------------------- what the kit reads with them

_TODO_NAME = "KIT_TODO"


def todo_lines(text: str) -> dict[str, list[int]]:
    """Task id -> the 1-based lines where code (not a comment, not a literal) calls ``KIT_TODO(tN)``, with any
    spacing, as the compiler reads the file."""
    read = decommented(text)
    tokens = tokenize(read.text if not read.errors else text)  # a file the lexer cannot read: as written
    found: dict[str, list[int]] = {}
    for at, token in enumerate(tokens):
        if token.kind == "identifier" and token.text == _TODO_NAME and at + 3 < len(tokens):
            paren, task, close = tokens[at + 1], tokens[at + 2], tokens[at + 3]
            if (
                paren.text == "("
                and task.kind == "identifier"
                and re.fullmatch(r"t[0-9]+", task.text)
                and close.text == ")"
            ):
                found.setdefault(task.text, []).append(token.line)
    return found
