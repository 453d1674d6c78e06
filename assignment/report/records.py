"""A bench step's JSON (``<build>/runs/bench_tN/tN.json``, written by ``assignment.commands.bench``) as typed records.

The views read these, never the JSON's keys: ``read_bench`` is the one place that knows the file's layout, and
each bench step's JSON is read once. A key the bench did not write reads as None (or empty), so a partly written
file (a bench that failed after timing some rows) still shows what it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from assignment.perf.targets import Standing


@dataclass(frozen=True)
class Timing:
    """One candidate's medians in a bench row (the JSON of ``assignment.perf.timing.TimingResult``)."""

    median_ms: float | None
    tflops: float | None
    gbps: float | None


@dataclass(frozen=True)
class BenchCase:
    """One row of the bench: a shape, every candidate timed at it, and what went wrong."""

    label: str | None
    results: dict[str, Timing]  # candidate name -> its medians, in the bench's order
    notes: list[str]
    error: str | None  # an impossible time the harness rejected


@dataclass(frozen=True)
class PathRun:
    """One path of the model table (naive, student, reference, transformers) at one prompt length."""

    skipped: str | None  # why it did not run
    ttft_ms: float | None
    tbt_ms: float | None
    ttft_speedup_naive: float | None
    tbt_speedup_naive: float | None
    percent_roofline: float | None
    agrees: bool | None  # its first logits against the naive path's (None: not compared)


@dataclass(frozen=True)
class PromptRuns:
    """The model table at one prompt length (``assignment.perf.model_bench.summarize_prompt``)."""

    prompt: int | None
    context: int | None
    roofline_tbt_ms: float | None
    rows: dict[str, PathRun]  # path name -> its run


@dataclass(frozen=True)
class ModelTable:
    """The bench's model table (a task whose code has a model bench), or why it is missing."""

    present: bool  # the bench wrote one
    error: str | None
    labels: dict[str, str]  # path name -> how the bench names it
    prompts: list[PromptRuns]
    notes: list[str]


@dataclass(frozen=True)
class BenchRun:
    """Everything the report shows from one bench step."""

    copy_gbps: float | None  # the device copy bandwidth the bench measured
    cases: list[BenchCase]
    model: ModelTable
    targets: list[Standing] | None  # where the student stands on each timing rule; None: none written


def read_bench(data: dict[str, Any]) -> BenchRun:
    """The bench JSON ``data`` as records."""
    model = data.get("model") or {}
    targets = data.get("targets")
    return BenchRun(
        copy_gbps=data.get("copy_gbps"),
        cases=[_case(case) for case in data.get("cases", [])],
        model=ModelTable(
            present=bool(model),
            error=model.get("error"),
            labels={name: info.get("label", name) for name, info in (model.get("paths") or {}).items()},
            prompts=[_prompt(entry) for entry in model.get("prompts", [])],
            notes=list(model.get("notes", [])),
        ),
        targets=None if targets is None else [_standing(item) for item in targets],
    )


def _case(case: dict[str, Any]) -> BenchCase:
    results = {
        name: Timing(r.get("median_ms"), r.get("tflops"), r.get("gbps")) for name, r in case.get("results", {}).items()
    }
    return BenchCase(case.get("label"), results, list(case.get("notes", [])), case.get("error"))


def _prompt(entry: dict[str, Any]) -> PromptRuns:
    rows = {
        name: PathRun(
            row.get("skipped"),
            row.get("ttft_ms"),
            row.get("tbt_ms"),
            row.get("ttft_speedup_naive"),
            row.get("tbt_speedup_naive"),
            row.get("percent_roofline"),
            row.get("agrees"),
        )
        for name, row in entry.get("rows", {}).items()
    }
    return PromptRuns(entry.get("prompt"), entry.get("context"), entry.get("roofline_tbt_ms"), rows)


_STANDING_FIELDS = frozenset(f.name for f in fields(Standing))


def _standing(item: dict[str, Any]) -> Standing:
    return Standing(**{k: v for k, v in item.items() if k in _STANDING_FIELDS})
