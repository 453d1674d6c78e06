"""One module per task: the code that makes a task what it is, behind one small interface.

The registry (``assignment/tasks.toml``) holds a task's data: points, files, tolerances, shapes, the timing
rubric. ``assignment/tasks/<id>.py`` holds its code, as ``CODE``, a ``TaskCode``: which tasks it builds on, its
CUDA file, its bench table, each timing rule as a student measures it, its profile launch, its sanitizer target,
the model attention it gives ``ATTN=<id>`` (``attention(name)``, what the model is handed). The rest of the kit
(``make bench``, ``make profile``, ``make sanitize``, ``make generate``, the student targets, the report's steps,
the grader's prepare) loops over these and does not branch on a task id.

A task's module imports nothing heavy at import time (torch inside its functions; ``assignment.cuda.wrappers``, whose
``Export`` names its host functions, loads without torch), so a tool that only asks what a task needs (the handout, say)
loads fast on any machine, torch or not.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from assignment.model.attention_choice import KIT_IMPLEMENTATIONS, Choice, ModelAttention

# (student, reference, quick) -> [assignment.perf.cases.Case]: Kernels objects (reference None in a bundle)
CasesFn = Callable[[Any, Any, bool], list]


@dataclass(frozen=True)
class Profile:
    """``make profile``'s one launch: a shape big enough to be representative and small enough to replay.

    ``launch(kernels, shape, upload)`` runs the task's kernels once on inputs made by ``upload(*dims)`` (CPU
    random numbers and a copy: no CUDA kernel but the student's; ``dtype=``: another element type than float32); ``ideal_bytes(shape)`` is what a perfect
    kernel moves through DRAM (every input read once, every output written once)."""

    shape: Mapping[str, Any]
    ideal_bytes: Callable[[Mapping[str, Any]], float]
    launch: Callable[[Any, Mapping[str, Any], Callable[..., Any]], None]
    kernels_per_launch: int = 1
    extra_metrics: Mapping[str, str] = field(default_factory=dict)  # ncu metric -> what the report calls it
    bandwidth_line: bool = False  # memory-bound: the report adds ideal bytes per kernel second


@dataclass(frozen=True)
class BenchVariant:
    """Another table ``make bench`` can print for a task instead of its default one (``--<option>``)."""

    option: str  # the flag, without its dashes
    help: str
    cases: CasesFn
    quick_settings: bool = False  # timed with the quick repetition settings even without --quick


@dataclass(frozen=True)
class Leaderboard:
    """The figure a class's leaderboard shows for a task: a field of one timing rule's record (grading.json,
    tasks.<id>.timing[rule])."""

    rule: int  # the rule's index in the task's [[task.timing]] list
    field: str  # student_tflops (rules that know their FLOPs), student_ms, value
    label: str  # after the task id: "FlashAttention", "time between tokens"
    unit: str
    higher_is_better: bool


@dataclass(frozen=True)
class Sanitize:
    """``make sanitize``'s and the grader's compute-sanitizer run: a scenario the task's CUDA file exports from its
    host code, ``KIT_API int <symbol>(void* module, int variant)``, which launches the task's kernels on shapes
    that reach every path of the kit's host code, buffers at their exact size, and returns how many launches
    failed (``assignment/cuda/include/kit_sanitize.cuh``). ``assignment/cuda/sanitize_driver.cpp`` calls it."""

    symbol: str  # t4_sanitize
    variant: int = 0  # the scenario's own argument (t4's: causal or not)


@dataclass(frozen=True)
class TaskCode:
    id: str
    cuda_file: str | None = None  # the CUDA file its kernels live in; None for a Python task
    kernels: type | None = None  # its kernels' Python wrappers, methods of assignment.kernels.Kernels
    builds_on: tuple[str, ...] = ()  # tasks whose regions (in the same file) must be written for it to run
    bench_needs: tuple[str, ...] = ()  # tasks whose student code its bench and scaling steps also run
    kit_companions: tuple[str, ...] = ()  # tasks whose kernels its checks call, run as the kit wrote them when
    # it is graded (so it is graded on its own)
    bench_metric: str | None = None  # "GB/s" or "TFLOP/s": what its bench rows report
    bench_cases: CasesFn | None = None  # make bench's table; None: the task has no bench
    bench_variants: tuple[BenchVariant, ...] = ()
    bench_timeout_s: float | None = None  # the report's limit on its bench step (None: the report's default)
    model_bench: bool = False  # make bench times the model after the kernels (model_bench.py)
    rule_case: Callable[[Any, Any, Any], Any] | None = None  # (rule, student, reference) -> Case at its shape
    # (rule, student, reference, tolerance, base seed, student_model=None) -> assignment.perf.workload.Workload:
    # the grader's timed workload of each timing rule (student against reference or naive, every output checked)
    timing_workload: Callable[..., Any] | None = None
    profile: Profile | None = None
    report_profile: bool = False  # the report profiles its launch (make report runs ncu once per step)
    scaling_causal: bool | None = None  # make scaling sweeps its kernel (causal or not); None: no sweep
    sanitize: Sanitize | None = None  # compute-sanitizer's scenario in its CUDA file; None: nothing to sanitize
    # () -> IMPL's module whose stream(model, tokenizer, prompt_tokens, ...) is the sampling loop: make generate and
    # the report's text-generation step run it (None: the task has none)
    generates: Callable[[], Any] | None = None
    leaderboard: Leaderboard | None = None  # its figure on the class leaderboard (None: not on it)
    model_attention: ModelAttention | None = None  # ATTN=<id> runs the model's attention through its code
    # (student, reference) Kernels -> None, raising when the values are off: a few shapes that catch edge bugs, what
    # grader/tools/open_levels.py checks before timing an open-level kernel (None: no such check)
    quick_check: Callable[[Any, Any], None] | None = None

    def __post_init__(self) -> None:
        if self.model_attention is not None and self.model_attention.name != self.id:  # ATTN=<id> names it
            object.__setattr__(self, "model_attention", replace(self.model_attention, name=self.id))

    @property
    def regions(self) -> tuple[str, ...]:
        """The tasks whose TODO regions must be gone before this task's code runs: what it builds on, then it."""
        return (*self.builds_on, self.id)


class TaskCodeError(LookupError):
    pass


def is_task_id(name: str) -> bool:
    """t1, t2, ...: the registry's pattern (its module, not its TOML, which the grader's worker does not carry)."""
    from assignment.registry import TASK_ID_PATTERN

    return TASK_ID_PATTERN.match(name) is not None


@cache
def code(task_id: str) -> TaskCode:
    """The code of task ``task_id`` (its module ``assignment.tasks.<id>``)."""
    if not is_task_id(task_id):
        raise TaskCodeError(f"{task_id!r} is not a task id (t1, t2, ...)")
    try:
        module = importlib.import_module(f"{__name__}.{task_id}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{task_id}":
            raise
        raise TaskCodeError(f"task {task_id} has no module assignment/tasks/{task_id}.py") from None
    found = getattr(module, "CODE", None)
    if not isinstance(found, TaskCode) or found.id != task_id:
        raise TaskCodeError(f"assignment/tasks/{task_id}.py must define CODE = TaskCode(id={task_id!r}, ...)")
    return found


def available() -> list[TaskCode]:
    """The code of every task the registry makes available, in its order."""
    from assignment.registry import load_registry

    return [code(task.id) for task in load_registry().available]


def with_bench() -> list[TaskCode]:
    return [c for c in available() if c.bench_cases is not None]


def with_model_attention() -> list[TaskCode]:
    """The available tasks whose code can run the model's attention (``ATTN=<id>``), in the registry's order."""
    return [c for c in available() if c.model_attention is not None]


def attention_choices() -> tuple[str, ...]:
    """Every name ``ATTN=`` takes: the model's own, then each available task whose code runs the model's attention."""
    return (*KIT_IMPLEMENTATIONS, *(c.id for c in with_model_attention()))


def attention(name: str) -> Choice:
    """What the model takes for ``ATTN=name``: the model's own name as it is, a task's id as the ``ModelAttention``
    its code declares (looked up in the task's module alone: the grader's worker carries no registry TOML).
    ValueError, listing the choices, for anything else."""
    if name in KIT_IMPLEMENTATIONS:
        return name
    found = None
    if is_task_id(name):
        try:
            found = code(name).model_attention
        except TaskCodeError:
            found = None
    if found is None:
        raise ValueError(f"attention implementation {name!r} is unknown (choose from {', '.join(attention_choices())})")
    return found
