"""The report's prefill-and-decode section: the view of the task whose bench times the model after its kernels
(``TaskCode.model_bench``): the time to first token (TTFT) and between tokens (TBT) of the student's path against
the naive path at the prompt lengths seed 000 reports, the model table of every path at every prompt, and the
decode kernel's K/V bytes read per second against the device copy.

What it reads is the model bench's (assignment/perf/model_bench.py: its prompts and paths, copied here and checked
against it by tests/kit/test_report.py) and the bench's decode rows, never a task's id: the section is chosen by the
capability, as the attention sections are by ``TaskCode.scaling_causal``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from assignment.registry import Task
from assignment.report.sections import Bench, TaskSection, shown, shown_ms, shown_times, student_note

HEADLINE_PROMPTS = (128, 1024)  # seed 000's prompt lengths: the model bench's (model_bench.FULL.prompts)
PATHS = ("naive", "student", "reference", "transformers")  # model_bench.PATHS, in the table's order


@dataclass(frozen=True)
class HeadlineRow:
    """Your path's TTFT and TBT at one of the prompt lengths seed 000 reports, or why they are missing."""

    prompt: int
    missing: str | None = None
    ttft: str = ""
    tbt: str = ""
    ttft_x: str = ""  # × the naive path
    tbt_x: str = ""


@dataclass(frozen=True)
class PathRow:
    """One path of the model table at one prompt length."""

    path: str  # as the bench labels it
    skipped: str | None
    ttft: str = ""
    ttft_x: str = ""
    tbt: str = ""
    tbt_x: str = ""
    roofline: str = ""  # % of the roofline TBT
    agrees: str = ""  # its logits against the naive path's


@dataclass(frozen=True)
class PromptTable:
    prompt: int | None
    context: int | None
    roofline: str  # the roofline TBT (ms) at that context
    rows: list[PathRow]


@dataclass(frozen=True)
class DecodeKernelRow:
    """A decode-kernel row of the bench: the K/V bytes read per second against the device copy."""

    label: str
    missing: str | None = None
    ms: str = ""
    gbps: str = ""
    copy_percent: str = ""
    naive_x: str = ""  # × naive PyTorch


@dataclass(frozen=True)
class DecodeView(TaskSection):
    """The prefill and decode section: the headline, the model table per prompt and the decode kernel."""

    model_reason: str | None = None  # why the model table is missing
    headline: list[HeadlineRow] = field(default_factory=list)
    prompts: list[PromptTable] = field(default_factory=list)
    decode: list[DecodeKernelRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    copy_gbps: str = ""


def decode_view(task: Task, bench: Bench) -> DecodeView:
    if bench.missing:
        return DecodeView(task.id, task.title, bench.missing)
    run, model = bench.run, bench.run.model
    model_reason = None
    if not model.present or model.error:
        model_reason = model.error or "the bench ran without the model table"
    entries = {entry.prompt: entry for entry in model.prompts}
    headline = []
    for prompt in HEADLINE_PROMPTS:
        entry = entries.get(prompt)
        mine = entry.rows.get("student") if entry else None
        if entry is None:
            headline.append(HeadlineRow(prompt, model_reason or f"no prompt of {prompt} tokens in the model table"))
        elif mine is None or mine.skipped is not None:
            headline.append(HeadlineRow(prompt, f"your path did not run: {mine.skipped if mine else 'no result'}"))
        else:
            headline.append(
                HeadlineRow(
                    prompt,
                    ttft=shown_ms(mine.ttft_ms),
                    tbt=shown_ms(mine.tbt_ms),
                    ttft_x=shown_times(mine.ttft_speedup_naive),
                    tbt_x=shown_times(mine.tbt_speedup_naive),
                )
            )
    prompts = []
    for prompt, entry in sorted(entries.items(), key=lambda item: item[0] or 0):
        rows = []
        for name in PATHS:
            row = entry.rows.get(name)
            if row is None:
                continue
            label = model.labels.get(name, name)
            if row.skipped:
                rows.append(PathRow(label, row.skipped))
                continue
            rows.append(
                PathRow(
                    label,
                    row.skipped,
                    ttft=shown_ms(row.ttft_ms),
                    ttft_x=shown_times(row.ttft_speedup_naive),
                    tbt=shown_ms(row.tbt_ms),
                    tbt_x=shown_times(row.tbt_speedup_naive),
                    roofline=shown(row.percent_roofline, ".0f", "%"),
                    agrees="baseline"
                    if name == "naive"
                    else "–"
                    if row.agrees is None
                    else "yes"
                    if row.agrees
                    else "DIFFERS",
                )
            )
        prompts.append(PromptTable(prompt, entry.context, shown_ms(entry.roofline_tbt_ms), rows))
    copy = run.copy_gbps
    kernels = []
    for case in run.cases:
        if not (case.label or "").startswith("decode"):
            continue
        mine = case.results.get("student")
        label = case.label.replace(" (KV bytes/s)", "")
        if mine is None:
            kernels.append(DecodeKernelRow(label, student_note(case)))
            continue
        gbps = mine.gbps
        naive = case.results["naive pytorch"].median_ms if "naive pytorch" in case.results else None
        kernels.append(
            DecodeKernelRow(
                label,
                ms=shown_ms(mine.median_ms),
                gbps=shown(gbps, ".0f"),
                copy_percent=shown(100 * gbps / copy if gbps and copy else None, ".0f", "%"),
                naive_x=shown_times(naive / mine.median_ms if naive else None),
            )
        )
    return DecodeView(
        task.id, task.title, "", model_reason, headline, prompts, kernels, list(model.notes), shown(copy, ".0f")
    )
