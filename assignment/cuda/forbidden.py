"""What a CUDA TODO region may not hold, word by word: the names and constructs the region rules refuse
(``assignment.cuda.rules`` as written, ``assignment.cuda.expansion`` as the device compiler receives it), each
with the reason a student is told, and the ``Problem`` every rule reports.

The handout prints ``FORBIDDEN_IDENTIFIERS`` and ``FORBIDDEN_PREFIXES`` (``handout/rules.py``), so a rule is
stated where it is enforced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from assignment.cuda.reading import Token

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
    "__attribute": "attributes",
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
    "__kit": "the kit's own names, with which its rules read your region",  # any name that begins so, in any case
}
# The rules mark a region's lines and ends with words that begin so (drawn afresh for every reading).
RESERVED_PREFIX = "__kit"
# After every macro is expanded, between a region's markers (expansion.py). Attributes, directives and C++11
# attribute lists are read there too.
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
    "__builtin_alloca": "allocation",
    "__builtin_alloca_with_align": "allocation",
    "__builtin_malloc": "allocation",
    "__builtin_calloc": "allocation",
    "__builtin_realloc": "allocation",
    "__builtin_free": "allocation",
    "new": "allocation",
    "delete": "allocation",
    "_Pragma": "pragmas",
    "__pragma": "pragmas",
    "__declspec": "attributes",
}
# The attributes a region may hold after expansion: __shared__ and __align__(n) expand to them.
ALLOWED_ATTRIBUTES = {"shared", "aligned", "unused"}
ATTRIBUTE_KEYWORDS = {"__attribute__", "__attribute"}
# Names reserved to the implementation (C++ [lex.name]) that a region's expansion may hold though the kit's own
# file may not (expansion.py allows any reserved name the kit's file holds): gcc's spellings of keywords, what the
# headers' macros write (assert, INFINITY, NAN, offsetof) and the optimisation hints CUDA documents.
ALLOWED_RESERVED = {
    *(
        f"__{word}{end}"
        for word in ("typeof", "alignof", "restrict", "inline", "volatile", "const", "signed")
        for end in ("", "__")
    ),
    "__null",
    "__extension__",
    "__PRETTY_FUNCTION__",
    "__FUNCTION__",
    "__func__",
    "__builtin_inff",
    "__builtin_inf",
    "__builtin_nanf",
    "__builtin_nan",
    "__builtin_huge_valf",
    "__builtin_huge_val",
    "__builtin_offsetof",
    "__builtin_expect",
    "__builtin_assume",
    "__builtin_assume_aligned",
    "__builtin_unreachable",
    "__assume",
}
# A trigraph (??= for #, ??/ for a backslash): C++17 reads none, but a reader that did would see other code.
TRIGRAPH = re.compile(r"\?\?[=/'()!<>-]")
_DIRECTIVE_STARTS = ("#", "%:")


@dataclass(frozen=True)
class Problem:
    line: int  # 1-based line in the student's file (0: the file as a whole)
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line else self.message


def unique(problems: list[Problem]) -> list[Problem]:
    """``problems`` in order, each once (a line that breaks one rule twice says so once)."""
    return list(dict.fromkeys(problems))


def named(word: str) -> str | None:
    """Why ``word`` may not appear in a region as written, or None."""
    why = FORBIDDEN_IDENTIFIERS.get(word)
    if why is not None:
        return why
    if word.lower().startswith(RESERVED_PREFIX):
        return FORBIDDEN_PREFIXES[RESERVED_PREFIX]
    for prefix, reason in FORBIDDEN_PREFIXES.items():
        if word.startswith(prefix) and (
            len(word) == len(prefix) or word[len(prefix)].isupper() or word[len(prefix)] == "_"
        ):
            return reason
    return None


def forbidden_message(word: str, why: str) -> str:
    return (
        f"'{word}' is not allowed in a TODO region ({why}): write device code that uses the kit's variables and helpers"
    )


def is_reserved(word: str) -> bool:
    """A name C++ reserves to the implementation: it begins with two underscores, or one and a capital."""
    return word.startswith("__") or (len(word) > 1 and word[0] == "_" and word[1].isupper())


def is_directive_start(token: Token) -> bool:
    return token.kind == "punct" and token.text in _DIRECTIVE_STARTS


def opens_attribute_list(tokens: list[Token], at: int) -> bool:
    """``[[`` (or a digraph spelling of it) starts at ``at``: a C++11 attribute list, wherever it stands."""
    return (
        at + 1 < len(tokens)
        and tokens[at].kind == "punct"
        and tokens[at].text in ("[", "<:")
        and tokens[at + 1].kind == "punct"
        and tokens[at + 1].text in ("[", "<:")
    )


ATTRIBUTE_LIST_MESSAGE = (
    "C++11 attributes ([[...]]) are not allowed in a TODO region: none is needed in device code, and some "
    "change how the kernel is compiled"
)


def pragma_unroll_end(tokens: list[Token], at: int, line_ends) -> int | None:
    """Where the ``#pragma unroll`` line that starts at ``tokens[at]`` (``#`` or ``%:``) ends, when it is one
    (``# pragma unroll``, optionally with N or (N), and nothing else on the line); else None. ``line_ends(i)``
    says whether ``tokens[i]`` starts another line."""
    head = tokens[at : at + 3]
    if (
        len(head) < 3
        or not is_directive_start(head[0])
        or [(t.kind, t.text) for t in head[1:]] != [("identifier", "pragma"), ("identifier", "unroll")]
        or any(line_ends(at + k) for k in (1, 2))
    ):
        return None
    end = at + 3
    while end < len(tokens) and not line_ends(end):
        end += 1
    rest = [t.text for t in tokens[at + 3 : end]]
    if (
        rest == []
        or (len(rest) == 1 and rest[0].isdigit())
        or (len(rest) == 3 and rest[0] == "(" and rest[1].isdigit() and rest[2] == ")")
    ):
        return end
    return None


def attribute_names(tokens: list[Token], at: int) -> tuple[list[str], int] | None:
    """The names of the attribute list ``__attribute__((a, b(x, (y)), c))`` whose keyword is ``tokens[at]``, each
    without the underscores that may wrap it (``__aligned__`` is ``aligned``), and the index just past the list;
    None when what follows the keyword is not a whole list."""
    if at + 2 >= len(tokens) or [t.text for t in tokens[at + 1 : at + 3]] != ["(", "("]:
        return None
    names: list[str] = []
    depth, item_start = 2, True
    for index in range(at + 3, len(tokens)):
        token = tokens[index]
        if depth == 2 and item_start and token.text != ")":
            names.append(token.text.strip("_") or token.text)  # an item's first token: its name, or what stands there
        item_start = depth == 2 and token.text == ","
        if token.text in ("(", "<:", "[", "{", "<%"):
            depth += 1
        elif token.text in (")", ":>", "]", "}", "%>"):
            depth -= 1
            if depth == 0:
                return names, index + 1
            if depth == 1 and (index + 1 == len(tokens) or tokens[index + 1].text != ")"):
                return None  # not the (( list )) form: no reader is sure what it holds
    return None
