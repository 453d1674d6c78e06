"""REPORT.md and REPORT.html from the views: the templates beside this module and the filters they use."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from assignment.report.views import Report, plots_view

TEMPLATE_DIR = Path(__file__).resolve().parent
MD_TEMPLATE = TEMPLATE_DIR / "report.md.j2"
HTML_TEMPLATE = TEMPLATE_DIR / "report.html.j2"


def _fence(text: str) -> str:
    """A fenced code block whose fence is longer than any run of backticks inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def _environment(html_mode: bool):
    import jinja2

    def pre(text: str) -> str:
        if html_mode:  # raw HTML: markdown leaves it alone, so nothing in a log can turn into markup
            return f"<pre>{html.escape(text.rstrip())}</pre>"
        return _fence(text)

    def quote(text: str) -> str:
        if html_mode:
            body = "<br>\n".join(html.escape(line) for line in text.rstrip().splitlines())
            return f'<blockquote class="text">{body or "&nbsp;"}</blockquote>'
        return "\n".join(f"> {line}".rstrip() for line in (text.rstrip().splitlines() or [""]))

    def inline(text: Any) -> str:
        """Plain text inside a line or a table cell: HTML escaped for the page, pipes escaped for the tables."""
        text = str(text).replace("\n", " ")
        return (html.escape(text, quote=False) if html_mode else text).replace("|", "\\|")

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )

    def code(text: Any) -> str:
        """Inline code (a command, a path): a code span in the text, <code> on the page."""
        text = str(text).replace("\n", " ")
        if html_mode:
            return f"<code>{html.escape(text, quote=False)}</code>".replace("|", "&#124;")
        ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
        return f"{ticks}{text}{ticks}".replace("|", "\\|")

    env.filters |= {"pre": pre, "quote": quote, "t": inline, "c": code}
    return env


def render_markdown(context: Report, html_mode: bool) -> str:
    """REPORT.md; with ``html_mode`` the same text made for the page (escaped, images inline)."""
    plots = plots_view(context.results, html_mode)
    text = (
        _environment(html_mode).get_template(MD_TEMPLATE.name).render(**vars(context), plots=plots, html_mode=html_mode)
    )
    return re.sub(r"\n{3,}", "\n\n", text)


def render_html(context: Report) -> str:
    import markdown

    body = markdown.markdown(
        render_markdown(context, html_mode=True),
        extensions=["tables", "fenced_code", "sane_lists"],
        output_format="html",
    )
    return _environment(True).get_template(HTML_TEMPLATE.name).render(title=html.escape(context.title), body=body)
