"""Check 3 of the region rules (``assignment.cuda.rules``): a file's TODO regions as the device compiler receives
them, after ``nvcc -E`` has run every directive and expanded every macro.

It holds on its own, whatever the regions did to the readings before it: it compares two whole readings (the
student's file and the kit's with its regions emptied), each token with the file and line the preprocessor gives
it, and nothing in it is a word a region could write. The headers' part of the two readings is the same text, read
once per process (``reading.tokenize_changed``).

* The file as the compiler reads it must be **the kit's file with each region's tokens at that region's place**:
  every token that is not on a region's own lines (the headers' tokens included) reads, in order and with its
  file and line, exactly as in the kit's file with the regions emptied (which keeps every line where it was); a
  region's tokens come in one run, between the kit's last token before the region and its first one after it. So a region that renumbers lines or files
  (``#line``, a line marker) cannot hide a token: one it would move out of a region, or attribute to another
  file, is an extra token in the kit's code, and one of the kit's it would move in leaves a token missing there.
* What a region's own tokens may be: no ``asm`` in any spelling, no static storage, no allocation, no runtime
  calls, no directive but ``#pragma unroll`` (``_Pragma`` arrives as one), no attribute but those ``__shared__``
  and ``__align__`` expand to (every name of every list), no C++11 attribute list, nothing the lexer cannot read,
  and no name reserved to the implementation (``__hmma_...``, a compiler built-in a region could declare itself)
  that the kit's own file does not hold.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import lru_cache

from assignment.cuda import confine, reading
from assignment.cuda.forbidden import (
    ALLOWED_ATTRIBUTES,
    ALLOWED_RESERVED,
    ATTRIBUTE_KEYWORDS,
    ATTRIBUTE_LIST_MESSAGE,
    EXPANDED_FORBIDDEN,
    Problem,
    attribute_names,
    is_directive_start,
    is_reserved,
    opens_attribute_list,
    pragma_unroll_end,
    unique,
)

_RENUMBERED = (
    "your TODO region renumbers the file's lines (a #line directive or a line marker): the compiler would read "
    "the kit's code as yours, or yours as the kit's"
)
_NOT_THE_SAME = (
    "the kit's code after your TODO region does not read the same with it in place (a region must be whole "
    "statements: a macro or call left open at its end takes the kit's next lines)"
)


@dataclass(frozen=True)
class _KitReading:
    """The kit's file, its regions emptied, as the device compiler reads it: its tokens from the ``skipped``-th on
    (those before are the headers', the same in every student's reading: only their names are kept)."""

    text: str
    skipped: int
    tokens: tuple[reading.Token, ...]
    places: tuple[tuple[int, int], ...]  # per region: the first and last index at which its tokens may stand
    names: frozenset[str]  # every identifier the compiler reads in it (the headers' declarations included)
    names_skipped: frozenset[str]  # those of the skipped tokens


# Tokens of the kit's kept before the first region's place: a region changes how the kit's code before it reads by a
# few tokens at most (a macro's name waiting for its '('), and a reading that parts earlier is read whole.
_MARGIN = 4096


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
    (default: the same line). A token belongs to the line the preprocessor attributes it to (it writes a macro's
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
    main = f"{confine.WORK_MOUNT}/{filename}"
    kit = _kit_reading(kit_read.text, main, tuple(spans))
    changed = reading.tokenize_changed(read.text, kit.text, kit.tokens, kit.skipped)
    if changed is None:  # the region changed how the kit's code reads far before it: read the kit's file whole
        kit = _summary(kit.text, tuple(reading.tokenize(kit.text)), 0, frozenset(), main, tuple(spans), keep_all=True)
        changed = reading.tokenize_changed(read.text, kit.text, kit.tokens)
    kept, tokens = changed  # the first `kept` of the kit's tokens, then the student's file's own
    return unique(
        _placement_problems(tokens, kept, kit, main, spans, origin)
        + [
            problem
            for region in _region_tokens(tokens, main, spans)
            for problem in _region_problems(region, origin, kit.names)
        ]
    )


# The last reading of each of the kit's files: the next one (other regions emptied, so other line counts) shares
# its headers, which are then not read again.
_last_kit_reading: dict[str, _KitReading] = {}


@lru_cache(maxsize=8)
def _kit_reading(text: str, main: str, spans: tuple[tuple[int, int], ...]) -> _KitReading:
    """The same for every student file spliced into the kit's whose regions have as many lines."""
    previous = _last_kit_reading.get(main)
    changed = (
        None if previous is None else reading.tokenize_changed(text, previous.text, previous.tokens, previous.skipped)
    )
    if changed is None:
        kit = _summary(text, tuple(reading.tokenize(text)), 0, frozenset(), main, spans)
    else:
        kept, rest = changed
        tokens = previous.tokens[: kept - previous.skipped] + tuple(rest)
        kit = _summary(text, tokens, previous.skipped, previous.names_skipped, main, spans)
    _last_kit_reading[main] = kit
    return kit


def _summary(
    text: str,
    tokens: tuple[reading.Token, ...],
    skipped: int,
    names_skipped: frozenset[str],
    main: str,
    spans: tuple[tuple[int, int], ...],
    keep_all: bool = False,
) -> _KitReading:
    """The kit's reading from its ``tokens`` (those from the ``skipped``-th on, ``names_skipped`` the names of
    the ones before), keeping the tokens from ``_MARGIN`` before the first region's place on (all: ``keep_all``)."""
    own = [(skipped + index, token.line) for index, token in enumerate(tokens) if token.file == main]
    places = []
    for opening, closing in spans:
        if any(opening < line < closing for _, line in own):
            raise reading.ReadingError(f"{main}: the kit's file reads code on the lines of an emptied region")
        first = 1 + max((index for index, line in own if line <= opening), default=skipped - 1)
        last = min((index for index, line in own if index >= first and line >= closing), default=skipped + len(tokens))
        places.append((first, last))
    cut = 0 if keep_all or not places else max(0, places[0][0] - _MARGIN - skipped)
    names_skipped = names_skipped | {token.text for token in tokens[:cut] if token.kind == "identifier"}
    names = names_skipped | {token.text for token in tokens[cut:] if token.kind == "identifier"}
    return _KitReading(text, skipped + cut, tokens[cut:], tuple(places), frozenset(names), frozenset(names_skipped))


def _region_of(token: reading.Token, main: str, spans: list[tuple[int, int]]) -> int | None:
    """The index of the region whose lines hold ``token``, or None for the kit's code (another file's included)."""
    if token.file != main:
        return None
    index = bisect.bisect_left(spans, (token.line,)) - 1
    if index >= 0 and spans[index][0] < token.line < spans[index][1]:
        return index
    return None


def _region_tokens(tokens: list[reading.Token], main: str, spans: list[tuple[int, int]]) -> list[list[reading.Token]]:
    inside: list[list[reading.Token]] = [[] for _ in spans]
    for token in tokens:
        index = _region_of(token, main, spans)
        if index is not None:
            inside[index].append(token)
    return inside


def _placement_problems(
    tokens: list[reading.Token],
    kept: int,
    kit: _KitReading,
    main: str,
    spans: list[tuple[int, int]],
    origin: list[int | None] | None,
) -> list[Problem]:
    """The file must read as the kit's with each region's tokens in one run at the region's place: ``tokens``
    follow the kit's first ``kept`` tokens (the text the two readings share, before any region)."""
    outside: list[reading.Token] = []  # the kit's code after the first `kept` of its tokens
    started: set[int] = set()  # the regions whose run has begun
    previous: int | None = None  # the region of the token before, None for the kit's code
    last_inside: reading.Token | None = None  # the last region token read: where a problem is reported

    def renumbered() -> list[Problem]:
        if last_inside is not None:
            return [Problem(_student_line(last_inside.line, origin), _RENUMBERED)]
        return [Problem(_student_line(spans[_region_at(kit, kept + len(outside))][0] + 1, origin), _RENUMBERED)]

    last_main_line = next(
        (kit.tokens[i].line for i in range(kept - kit.skipped - 1, -1, -1) if kit.tokens[i].file == main), 0
    )
    for token in tokens:
        if token.file == main:
            if token.line < last_main_line:  # the compiler writes a file's lines in order, unless told otherwise
                return renumbered()
            last_main_line = token.line
        index = _region_of(token, main, spans)
        if index is None:
            outside.append(token)
        elif index not in started:
            started.add(index)
            first, last = kit.places[index]
            if not first <= kept + len(outside) <= last:  # not between the kit's code before the region and after it
                return renumbered()
        elif previous != index:  # a second run of one region: the kit's code between was read as the region's
            return renumbered()
        if index is not None:
            last_inside = token
        previous = index
    # The emptied file keeps every line where it was, so each of the kit's tokens keeps its line too.
    theirs = kit.tokens[kept - kit.skipped :]
    differ = next(
        (i for i, (mine, kits) in enumerate(zip(outside, theirs)) if _where_what(mine) != _where_what(kits)),
        None if len(outside) == len(theirs) else min(len(outside), len(theirs)),
    )
    if differ is None:
        return []
    region = _region_at(kit, kept + differ)
    if differ < len(outside):
        mine = outside[differ]
        before = _last_inside_before(tokens, mine, main, spans)
        line = before.line if before is not None else spans[region][0] + 1
        if mine.file != main:
            return [Problem(_student_line(line, origin), _another_file(mine.file))]
        if differ < len(theirs) and (mine.file, mine.text) == (theirs[differ].file, theirs[differ].text):
            return [Problem(_student_line(line, origin), _RENUMBERED)]  # the kit's token, on another line
    return [Problem(_student_line(spans[region][1] - 1, origin) or spans[region][1] - 1, _NOT_THE_SAME)]


def _where_what(token: reading.Token) -> tuple[str, int, str]:
    return token.file, token.line, token.text


def _region_at(kit: _KitReading, kit_tokens_before: int) -> int:
    """The region at or before the place that many of the kit's tokens into the file."""
    return max((i for i, (first, _) in enumerate(kit.places) if first <= kit_tokens_before), default=0)


def _last_inside_before(
    tokens: list[reading.Token], stop: reading.Token, main: str, spans: list[tuple[int, int]]
) -> reading.Token | None:
    last = None
    for token in tokens:
        if token is stop:
            return last
        if _region_of(token, main, spans) is not None:
            last = token
    return last


def _another_file(name: str) -> str:
    return (
        f"your TODO region makes the compiler read the lines after it as another file's ('{name}'): a region may "
        "not hold a #line directive or a line marker"
    )


def _student_line(line: int, origin: list[int | None] | None) -> int:
    if origin is None:
        return line
    return origin[line - 1] or 0 if 0 < line <= len(origin) else 0


def _region_problems(tokens: list[reading.Token], origin: list[int | None] | None, kit_names) -> list[Problem]:
    """What one region's tokens, as the device compiler receives them, may not be."""
    problems: list[Problem] = []
    skip_to = 0
    for position, token in enumerate(tokens):
        if position < skip_to:
            continue
        line = _student_line(token.line, origin)
        message = None
        if token.kind == "other":
            message = f"this line reads as {token.text[:20]!r}, which is not C++ code"
        elif token.kind == "string" and "\n" in token.text:
            message = "a string literal may not span lines in a TODO region"
        elif is_directive_start(token) or token.text in ("##", "%:%:"):
            end = pragma_unroll_end(tokens, position, lambda i: tokens[i].first) if token.first else None
            if end is not None:
                skip_to = end
                continue
            message = (
                "this line expands to a preprocessor directive or a '#', which a TODO region may not contain "
                "(only '#pragma unroll' or '#pragma unroll N')"
            )
        elif opens_attribute_list(tokens, position):
            message, skip_to = ATTRIBUTE_LIST_MESSAGE, position + 2
        elif token.kind == "identifier":
            message, skip_to = _identifier_problem(tokens, position, kit_names)
        if message is not None:
            problems.append(Problem(line, message))
    return problems


def _identifier_problem(tokens: list[reading.Token], at: int, kit_names) -> tuple[str | None, int]:
    """What is wrong with the identifier ``tokens[at]`` of a region's expansion (None: nothing), and the index of
    the next token to read."""
    word = tokens[at].text
    why = EXPANDED_FORBIDDEN.get(word)
    if why is None and word.startswith("cuda") and word[4:5].isupper():
        why = "CUDA runtime calls (host API)"
    if why is not None:
        return f"this line expands to '{word}' ({why}), which a TODO region may not contain", at + 1
    if word in ATTRIBUTE_KEYWORDS:
        read = attribute_names(tokens, at)
        if read is None:
            return f"this line expands to '{word}' with no attribute list the rules can read", at + 1
        names, end = read
        refused = [name for name in names if name not in ALLOWED_ATTRIBUTES]
        if refused:
            return f"this line expands to the attribute '{refused[0]}', which a TODO region may not contain", end
        return None, end
    if is_reserved(word) and word not in kit_names and word not in ALLOWED_RESERVED:
        return (
            f"'{word}' is a name reserved to the compiler that none of the kit's headers declares (a built-in "
            "function): a TODO region may call the intrinsics the kit's headers declare",
            at + 1,
        )
    return None, at + 1
