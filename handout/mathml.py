"""Markdown with LaTeX math ($...$ inline, $$...$$ display) to HTML with MathML.

Math is converted to MathML *before* Markdown runs and replaced by opaque
placeholders, because Markdown would otherwise eat underscores and asterisks
inside formulas. Code spans and fenced blocks are set aside first so that a `$`
in shell or CUDA code is never taken for math.
"""

from __future__ import annotations

import re

import markdown
from latex2mathml.converter import convert as latex_to_mathml
from markdown.extensions.toc import TocExtension, slugify_unicode

# One pass over the text; the first alternative that matches at a position wins,
# so code is recognised before anything that looks like math inside it.
_TOKENS = re.compile(
    r"(?P<fence>^(?P<ticks>`{3,}|~{3,})[^\n]*\n.*?^(?P=ticks)[ \t]*$)"
    r"|(?P<code>(?P<bt>`+).+?(?P=bt))"
    r"|(?P<display>(?<!\\)\$\$(?P<dbody>.+?)\$\$)"
    r"|(?P<inline>(?<![\\$])\$(?P<ibody>[^\s$](?:[^$\n]*?[^\s$\\])?)\$(?!\d))",
    re.MULTILINE | re.DOTALL,
)
# latex2mathml passes unknown commands through as text (<mi>\foo</mi>); treat
# that as a failure rather than printing a backslash in the handout.
_UNCONVERTED_COMMAND = re.compile(r">\\[A-Za-z]+<")
_PLACEHOLDER = "KITMATH{}X"
_PLACEHOLDER_RE = re.compile(r"(<p>)?KITMATH(\d+)X(</p>)?")
MARKDOWN_EXTENSIONS = ["fenced_code", "tables", "sane_lists", "attr_list"]


class MathError(ValueError):
    """A formula that does not convert, naming the source file and the formula."""


def formula_to_mathml(latex: str, display: bool, source: str) -> str:
    try:
        mathml = latex_to_mathml(latex, display="block" if display else "inline")
    except Exception as exc:  # latex2mathml raises many types (StopIteration included)
        raise MathError(f"{source}: cannot convert formula ${latex}$ to MathML: {type(exc).__name__} {exc}") from None
    unknown = _UNCONVERTED_COMMAND.search(mathml)
    if unknown:
        raise MathError(f"{source}: unknown LaTeX command {unknown.group(0)[1:-1]} in formula ${latex}$")
    # A bare '&' (e.g. from an alignment outside an environment) would be invalid HTML.
    return _prefix_minus(mathml.replace("<mi>&</mi>", "<mi>&amp;</mi>"))


_MINUS = "<mo>&#x02212;</mo>"
_AFTER_OPERATOR = re.compile(r"(<mrow>|<mo(?: [^>]*)?>(?P<op>[^<]*)</mo>)\s*$")
_CLOSING = ("&#x00029;", "&#x0005D;", "&#x0007D;", "&#x0007C;", ")", "]", "}", "|")


def _prefix_minus(mathml: str) -> str:
    """A minus that opens a group or follows another operator (``= -\\infty``, ``(-1``) is a sign, not a
    subtraction: mark it ``form="prefix"`` so the browser does not space it like a binary minus. latex2mathml
    leaves the form to the position in the row, which is only right when the minus comes first."""
    parts = mathml.split(_MINUS)
    out = [parts[0]]
    for part in parts[1:]:
        before = _AFTER_OPERATOR.search(out[-1])
        sign = before is not None and (before["op"] is None or before["op"] not in _CLOSING)
        out.append('<mo form="prefix">&#x02212;</mo>' if sign else _MINUS)
        out.append(part)
    return "".join(out)


def protect_math(text: str, source: str) -> tuple[str, list[str]]:
    """Replace every formula by a placeholder; return the text and the MathML list."""
    formulas: list[str] = []

    def replace(match: re.Match) -> str:
        if match.group("fence") or match.group("code"):
            return match.group(0)
        display = match.group("display") is not None
        latex = (match.group("dbody") if display else match.group("ibody")).strip()
        formulas.append(formula_to_mathml(latex, display, source))
        placeholder = _PLACEHOLDER.format(len(formulas) - 1)
        # A display formula becomes its own paragraph, unwrapped again below.
        return f"\n\n{placeholder}\n\n" if display else placeholder

    return _TOKENS.sub(replace, text), formulas


def restore_math(html: str, formulas: list[str]) -> str:
    def replace(match: re.Match) -> str:
        mathml = formulas[int(match.group(2))]
        if 'display="block"' in mathml:
            return mathml  # drop the <p> Markdown wrapped around the placeholder
        return (match.group(1) or "") + mathml + (match.group(3) or "")

    return _PLACEHOLDER_RE.sub(replace, html)


def markdown_to_html(text: str, source: str, id_prefix: str = "", heading_base: int = 3) -> str:
    """Render Markdown with math; ``source`` names the file in error messages.

    Texts start their sections at `##`; ``heading_base`` = 3 makes those <h3>,
    below the <h2> the template gives each task. ``id_prefix`` keeps heading ids
    unique when several texts share one page (t1-common-mistakes, t4-common-mistakes).
    """
    protected, formulas = protect_math(text, source)

    def slugify(value: str, separator: str) -> str:
        return id_prefix + slugify_unicode(value, separator)

    toc = TocExtension(baselevel=heading_base - 1, slugify=slugify, toc_depth="2-6")
    html = markdown.markdown(protected, extensions=[*MARKDOWN_EXTENSIONS, toc], output_format="html")
    return restore_math(html, formulas)
