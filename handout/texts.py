"""Task texts: assignment/text/<name>.md, rendered as Jinja, then Markdown with math.

Texts may quote registry numbers through Jinja (``{{ task.points.total | num }}``,
``{{ registry.task('t4').tolerance.float32.atol | num }}``) so that a number
lives only in the registry. Undefined names fail loudly (StrictUndefined).
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from assignment.registry import Registry, Task
from handout.mathml import markdown_to_html

TEXT_DIR = Path(__file__).resolve().parent.parent / "assignment" / "text"


def format_number(value: float) -> str:
    """10.0 -> '10', 2e-05 -> '2e-5', 0.25 -> '0.25'."""
    text = f"{float(value):g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def format_shape(shape: dict) -> str:
    return ", ".join(f"{key}={value}" for key, value in shape.items())


def add_filters(env: jinja2.Environment) -> jinja2.Environment:
    env.filters["num"] = format_number
    env.filters["shape"] = format_shape
    return env


_TEXT_ENV = add_filters(
    jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)
)


class TextError(ValueError):
    """A task text that does not render, naming the file."""


def render_text(path: Path, registry: Registry, task: Task | None = None) -> str:
    """HTML of one text file; ``task`` is None for texts that belong to no task."""
    source = path.read_text(encoding="utf-8")
    try:
        markdown_source = _TEXT_ENV.from_string(source).render(task=task, registry=registry)
    except jinja2.TemplateError as exc:
        line = getattr(exc, "lineno", None)
        where = f"{path}:{line}" if line else str(path)
        raise TextError(f"{where}: {type(exc).__name__}: {exc}") from None
    prefix = f"{task.id}-" if task is not None else f"{path.stem}-"
    return markdown_to_html(markdown_source, str(path), id_prefix=prefix)


def task_text_html(task: Task, registry: Registry, text_dir: Path = TEXT_DIR) -> str | None:
    """The task's text as HTML, or None when the file does not exist yet."""
    path = text_dir / task.text
    if not path.is_file():
        return None
    return render_text(path, registry, task)
