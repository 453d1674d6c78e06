"""Task texts: assignment/text/<name>.md, rendered as Jinja, then Markdown with math.

Texts may quote registry numbers through Jinja (``{{ task.points.total | num }}``,
``{{ registry.task('t4').tolerance.float32.atol | num }}``) so that a number
lives only in the registry, and the model's facts through ``model``
(``{% for id, spec in model.task_attentions %}``, see ``ModelFacts``) so that they
live only in assignment/model/ and the task modules, and the toolchain's through ``kit`` (``{{ kit.check_archs | join(", ") }}``,
see handout/facts.py). Undefined names fail loudly (StrictUndefined).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import jinja2

from assignment import tasks
from assignment.model import DEFAULT_CHECKPOINT
from assignment.model.attention_choice import ModelAttention
from assignment.model.config import SUPPORTED_ARCHITECTURES, ModelConfig
from assignment.registry import Registry, Task
from handout.facts import kit_facts
from handout.mathml import markdown_to_html

TEXT_DIR = Path(__file__).resolve().parent.parent / "assignment" / "text"
KIT_TINY = DEFAULT_CHECKPOINT  # the checkpoint whose sizes the model chapter quotes


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


@dataclass(frozen=True)
class ModelFacts:
    """What the texts quote from assignment/model/ and the task modules, read without importing torch (the handout
    never needs it; the task modules load without it)."""

    architectures: tuple[str, ...]  # config.SUPPORTED_ARCHITECTURES
    attention_impls: tuple[str, ...]  # tasks.attention_choices(): the model's own, then each task's
    task_attentions: tuple[tuple[str, ModelAttention], ...]  # (id, TaskCode.model_attention) of each task
    kit_tiny: ModelConfig | None  # the shipped checkpoint's config.json; None until it is trained
    kit_tiny_parameters: int | None  # counted from its model.safetensors header


def model_facts(checkpoint: Path | None = None) -> ModelFacts:
    task_attentions = tuple((code.id, code.model_attention) for code in tasks.with_model_attention())
    checkpoint = checkpoint or KIT_TINY
    config = checkpoint / "config.json"
    kit_tiny = ModelConfig.from_file(config) if config.is_file() else None
    weights = checkpoint / "model.safetensors"
    return ModelFacts(
        architectures=SUPPORTED_ARCHITECTURES,
        attention_impls=tasks.attention_choices(),
        task_attentions=task_attentions,
        kit_tiny=kit_tiny,
        kit_tiny_parameters=safetensors_parameters(weights) if kit_tiny and weights.is_file() else None,
    )


def safetensors_parameters(path: Path) -> int:
    """Elements in a safetensors file, from its header: 8 bytes of length, then JSON name -> dtype, shape, offsets."""
    with path.open("rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(length))
    return sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")


def render_text(path: Path, registry: Registry, task: Task | None = None) -> str:
    """HTML of one text file; ``task`` is None for texts that belong to no task."""
    source = path.read_text(encoding="utf-8")
    try:
        markdown_source = _TEXT_ENV.from_string(source).render(
            task=task, registry=registry, model=model_facts(), kit=kit_facts(registry)
        )
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
