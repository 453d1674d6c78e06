"""The beta-tester feedback form as one web page, rendered from ``feedback.toml``.

    python -m assignment.feedback_html [--out build/feedback/feedback.html]

For testers who would rather click than type in a terminal (``make feedback``). The page is a single file with
its style and script inline and no network use, so it works opened straight from disk (file://) and can be
mailed or copied to a laptop. It saves the same ``feedback.json`` as the terminal form, checked the same way:
the questions are written once, in ``feedback.toml``; this module embeds them in the page as JSON, and the
page's script builds its checks and the saved file from that JSON. A draft is kept in the browser's
localStorage as the tester types, and a saved ``feedback.json`` can be loaded back to go on with it.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import jinja2

from assignment.atomic import write_atomic
from assignment.feedback import SCALE, FeedbackError, Form, load_form

TEMPLATE = Path(__file__).with_name("feedback_form.html.j2")
DEFAULT_OUT = Path("build/feedback/feedback.html")
TITLE = "FlashAttention course kit: beta-tester feedback"
NOT_ATTEMPTED_VALUE = "not-attempted"  # the radio value that stands for a scale's not_attempted answer
# Python's str.strip() removes these; the page uses the same set so that it accepts exactly what
# Question.check accepts (JavaScript's trim() differs on a few characters). None lies outside the BMP.
PYTHON_WHITESPACE = "".join(ch for ch in map(chr, range(0x10000)) if ch.isspace())


def form_schema(form: Form) -> dict:
    """What the page's script needs to know about the form: the questions, in order, as plain JSON values."""
    questions = []
    for q in form.questions:
        entry = {"id": q.id, "text": q.text, "type": q.type, "required": q.required}
        if q.type == "choice":
            entry |= {"choices": list(q.choices), "multiple": q.multiple}
        elif q.type == "scale":
            entry |= {"low": q.low, "high": q.high, "not_attempted": q.not_attempted or None}
        elif q.type == "number":  # JSON has no infinity: an open end is null
            entry |= {"min": q.min if math.isfinite(q.min) else None, "max": q.max if math.isfinite(q.max) else None}
        else:
            entry |= {"max_length": q.max_length}
        questions.append(entry)
    return {
        "schema_version": form.schema_version,
        "scale": list(SCALE),
        "not_attempted_value": NOT_ATTEMPTED_VALUE,
        "whitespace": PYTHON_WHITESPACE,
        "questions": questions,
    }


def render(form: Form | None = None) -> str:
    """The page's HTML."""
    schema = form_schema(form or load_form())
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE.parent),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["g"] = lambda x: format(x, "g")  # 200.0 -> 200, as the terminal form prints bounds
    return env.get_template(TEMPLATE.name).render(
        title=TITLE,
        schema=schema,
        questions=schema["questions"],
        scale=range(SCALE[0], SCALE[1] + 1),
        not_attempted_value=NOT_ATTEMPTED_VALUE,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the page (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        html = render()
    except FeedbackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_atomic(args.out, html)
    print(f"wrote {args.out}: open it in a browser (file://{args.out.resolve()}), answer, and save feedback.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
