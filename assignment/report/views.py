"""What the report shows: each view turns the steps' results into a dataclass that a template section reads.

The report has seed 000's shape: the attention speedups at batch 4 x length 128 and batch 64 x length 4096 (of each
task whose kernel the scaling sweeps), the time to first token (TTFT) and time between tokens (TBT) against the
naive path of the task whose bench times the model (``decode_view.py``), the text the sampling loop generates from
the registry's ``report_prompt``, where the student stands on the timing rubric, the bench tables, the plots, the
profiler's counters (when ``ncu`` is on PATH) and the feedback answers. A header names the GPU, the implementation,
the date and every part that was skipped, and why. Each section is chosen by what a task's code declares, never by
its id; what the views share is ``sections.py``.
"""

from __future__ import annotations

import base64
import platform
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from assignment import tasks as task_code
from assignment.registry import Registry, Task
from assignment.report.decode_view import DecodeView, decode_view
from assignment.report.records import read_bench
from assignment.report.sections import (
    NOT_RUN,
    Bench,
    TaskSection,
    shown,
    shown_ms,
    shown_times,
    student_note,
    why_missing,
)
from assignment.report.steps import DEFAULT_PROMPT, Settings, StepResult, no_gpu_reason, shown_path

# Seed 000's shapes (B, H, L, d): rows of assignment.perf.cases.ATTENTION_SHAPES.
SEED000_SHAPES = ((4, 1, 128, 64), (64, 1, 4096, 64))
PLOT_CAPTIONS = {
    "_time.png": "time against sequence length",
    "_tflops.png": "TFLOP/s against sequence length",
    "_speedup.png": "your speedup over each baseline against sequence length",
    "_roofline.png": "roofline: arithmetic intensity against TFLOP/s",
    "_model_tbt.png": "time between tokens against context, every path",  # model_table.plot_names
    "_model_roofline.png": "decode step against the memory roofline",
}


def read_benches(results: list[StepResult]) -> dict[str, Bench]:
    """Each task's bench step, its JSON read once (by task id; a task without a bench step is left out)."""
    return {
        r.task: Bench(why_missing(r), None if r.data is None else read_bench(r.data))
        for r in results
        if r.kind == "bench"
    }


def attention_label(B: int, H: int, L: int, d: int, causal: bool) -> str:
    """The bench's label of a row of assignment.perf.cases.cases_attention."""
    return f"{'causal ' if causal else ''}attention B{B} H{H} L{L} d{d}"


@dataclass(frozen=True)
class AttentionRow:
    """One of seed 000's shapes: your kernel's time and its speedup over each baseline, or why it is missing."""

    shape: str
    batch: int
    length: int
    missing: str | None = None
    error: str | None = None  # an impossible time the bench rejected at this shape
    ms: str = ""
    tflops: str = ""
    naive: str = ""  # × naive PyTorch
    sdpa: str = ""  # × SDPA
    naive_cuda: str = ""  # × the naive CUDA composition


@dataclass(frozen=True)
class AttentionView(TaskSection):
    """An attention task's speedups at seed 000's shapes."""

    causal: bool
    rows: list[AttentionRow] = field(default_factory=list)


def attention_view(task: Task, bench: Bench, causal: bool) -> AttentionView:
    if bench.missing:
        return AttentionView(task.id, task.title, bench.missing, causal)
    cases = {case.label: case for case in bench.run.cases}
    rows = []
    for B, H, L, d in SEED000_SHAPES:
        shape = f"batch {B} × length {L}"
        case = cases.get(attention_label(B, H, L, d, causal))
        students = case.results.get("student") if case else None
        if case is None:
            rows.append(
                AttentionRow(shape, B, L, missing=f"no {attention_label(B, H, L, d, causal)} row in the bench results")
            )
        elif students is None:
            rows.append(AttentionRow(shape, B, L, missing=student_note(case)))
        else:
            mine, results = students.median_ms, case.results
            over = {
                name: results[name].median_ms / mine if name in results and mine else None
                for name in ("naive pytorch", "SDPA", "naive cuda")
            }
            rows.append(
                AttentionRow(
                    shape,
                    B,
                    L,
                    error=case.error,
                    ms=shown_ms(mine),
                    tflops=shown(students.tflops, ".2f"),
                    naive=shown_times(over["naive pytorch"]),
                    sdpa=shown_times(over["SDPA"]),
                    naive_cuda=shown_times(over["naive cuda"]),
                )
            )
    return AttentionView(task.id, task.title, "", causal, rows)


@dataclass(frozen=True)
class GenerationView(TaskSection):
    """The text the student's sampling loop generated from the report's prompt."""

    prompt: str
    text: str = ""  # what came after the prompt
    timing: list[str] = field(default_factory=list)  # generate's summary lines
    stopped_at_once: bool = False  # the first token was a stop token


def generation_view(task: Task, result: StepResult | None, prompt: str) -> GenerationView:
    reason = why_missing(result)
    if reason:
        return GenerationView(task.id, task.title, reason, prompt)
    data = result.data
    return GenerationView(
        task.id, task.title, "", data["prompt"], data["text"], data["timing"], not data["text"].strip()
    )


@dataclass(frozen=True)
class StandingRow:
    """One timing rule: your speed against its baseline, the speed full points need and the points it points to."""

    rule: str
    speed: str
    times: str
    full: str
    points: str
    notes: list[str]
    course_gpu: str


@dataclass(frozen=True)
class TaskStanding(TaskSection):
    """A GPU task's timing rules: where the student stands on each."""

    max_points: str
    rows: list[StandingRow] = field(default_factory=list)
    points: str | None = None  # the points earned over every rule (None: no rule measured)


def standings_view(registry: Registry, benches: dict[str, Bench]) -> list[TaskStanding]:
    """Each GPU task's timing rules against the student targets (the bench JSON's "targets")."""
    from assignment.perf.targets import describe

    tasks = []
    for task in registry.available:
        if not task.needs_gpu or not task.timing:
            continue
        bench = benches.get(task.id, NOT_RUN)
        max_points = f"{sum(rule.max_points for rule in task.timing):g}"
        if bench.missing:
            tasks.append(TaskStanding(task.id, task.title, bench.missing, max_points))
            continue
        standings = bench.run.targets
        earned, rows = 0.0, []
        for s in standings or []:
            full_points, full_speed = s.needed[-1]
            speed = describe(s.baseline, s.speed) if s.speed is not None else f"not measured ({s.reason})"
            times = []
            if s.student_ms is not None:
                times.append(f"yours {s.student_ms:.3f} ms")
            if s.baseline_ms is not None:
                times.append(f"{s.baseline} {s.baseline_ms:.3f} ms")
            earned += s.points or 0.0
            rows.append(
                StandingRow(
                    s.rule,
                    speed,
                    "; ".join(times),
                    f"{describe(s.baseline, full_speed)} ({full_points:g} points)",
                    f"{s.points:g} of {s.max_points:g}" if s.points is not None else f"– of {s.max_points:g}",
                    list(s.notes),
                    s.course_gpu,
                )
            )
        tasks.append(
            TaskStanding(
                task.id,
                task.title,
                "the bench wrote no targets" if standings is None else "",
                max_points,
                rows,
                f"{earned:g}" if standings else None,
            )
        )
    return tasks


@dataclass(frozen=True)
class CandidateRow:
    name: str
    ms: str
    value: str  # in the table's metric
    yours: str  # its median time over yours


@dataclass(frozen=True)
class CaseTable:
    """One row of ``make bench``: every candidate at one shape."""

    label: str
    rows: list[CandidateRow]
    notes: list[str]
    error: str | None  # an impossible time the bench rejected


@dataclass(frozen=True)
class BenchTable(TaskSection):
    """A task's ``make bench`` output as tables."""

    cases: list[CaseTable] = field(default_factory=list)
    copy_gbps: str = ""
    metric: str = ""  # "GB/s" or "TFLOP/s"


def bench_tables_view(registry: Registry, benches: dict[str, Bench]) -> list[BenchTable]:
    tables = []
    for task in registry.available:
        bench = benches.get(task.id)
        if bench is None:
            continue
        if bench.missing:
            tables.append(BenchTable(task.id, task.title, bench.missing))
            continue
        metric = task_code.code(task.id).bench_metric or "TFLOP/s"  # as assignment.perf.cases prints them
        cases = []
        for case in bench.run.cases:
            mine = case.results["student"].median_ms if "student" in case.results else None
            rows = [
                CandidateRow(
                    name,
                    shown_ms(r.median_ms),
                    shown(r.gbps if metric == "GB/s" else r.tflops, ".1f" if metric == "GB/s" else ".2f"),
                    shown_times(r.median_ms / mine if mine and r.median_ms else None),
                )
                for name, r in case.results.items()
            ]
            cases.append(CaseTable("?" if case.label is None else case.label, rows, case.notes, case.error))
        tables.append(BenchTable(task.id, task.title, "", cases, shown(bench.run.copy_gbps, ".0f"), metric))
    return tables


@dataclass(frozen=True)
class Plot:
    name: str
    step: str
    task: str
    caption: str
    uri: str | None = None  # the PNG as a data URI (the HTML page only)


def plots_view(results: list[StepResult], html_mode: bool) -> list[Plot]:
    def kind(path: Path) -> int:  # PLOT_CAPTIONS's order: time, TFLOP/s, roofline; the model table's two
        names = list(PLOT_CAPTIONS)
        matching = [suffix for suffix in names if path.name.endswith(suffix)]  # the longest: _model_roofline.png
        return names.index(max(matching, key=len)) if matching else len(names)

    plots = []
    for result in results:
        for path in sorted(map(Path, result.files), key=lambda p: (kind(p), p.name)):
            known = kind(path) < len(PLOT_CAPTIONS)
            caption = list(PLOT_CAPTIONS.values())[kind(path)] if known else path.stem
            uri = None
            if html_mode and path.is_file():
                uri = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
            plots.append(Plot(path.name, result.step, result.task, f"{result.task}: {caption}", uri))
    return plots


@dataclass(frozen=True)
class Answer:
    question: str
    answer: str  # as the report shows it


@dataclass(frozen=True)
class FeedbackView:
    path: str
    present: bool  # the answers file exists
    error: str | None = None  # why it could not be read
    answers: list[Answer] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what is left to answer


def feedback_view(path: Path) -> FeedbackView:
    from assignment.feedback import FeedbackError, load_answers, load_form

    if not path.is_file():
        return FeedbackView(shown_path(path), False)
    try:
        form = load_form()
        answers = load_answers(path, form)
    except FeedbackError as exc:
        return FeedbackView(shown_path(path), True, str(exc))
    shown_answers = []
    for q in form.questions:
        if q.id not in answers:
            shown = "(not answered)"
        elif answers[q.id] is None:
            shown = "(skipped)"
        elif isinstance(answers[q.id], list):
            shown = ", ".join(map(str, answers[q.id]))
        elif q.type == "scale" and isinstance(answers[q.id], int):
            shown = f"{answers[q.id]}/5 (1: {q.low}, 5: {q.high})"
        else:
            shown = str(answers[q.id])
        shown_answers.append(Answer(q.text, shown))
    return FeedbackView(shown_path(path), True, None, shown_answers, form.problems(answers))


@dataclass(frozen=True)
class SkippedItem:
    what: str
    command: str
    why: str
    tail: str  # a failed step's last lines


def skipped_view(registry: Registry, results: list[StepResult], todo: dict[str, str | None]) -> list[SkippedItem]:
    """What is missing from the report and why: tasks not written, steps skipped (grouped), steps that failed."""
    titles = {t.id: t.title for t in registry.tasks}
    items = [SkippedItem(f"{t} {titles[t]}", "", why, "") for t, why in todo.items() if why]
    grouped: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r.status == "skipped" and not todo.get(r.task):
            grouped.setdefault((r.task, r.reason or "skipped"), []).append(r.kind)
    for (task, why), kinds in grouped.items():
        items.append(SkippedItem(f"{task} {titles[task]} ({', '.join(kinds)})", "", why, ""))
    for r in results:
        if r.status in ("failed", "timeout"):
            items.append(
                SkippedItem(
                    f"{r.task} {titles[r.task]}: {r.step}",
                    r.command,
                    f"{r.reason}; {'the rows it timed are shown' if r.data else 'no results from it'}"
                    f"; log: {shown_path(r.log) if r.log else '-'}",
                    r.tail,
                )
            )
    return items


@dataclass(frozen=True)
class TaskStatus:
    id: str
    title: str
    status: str  # written or not, measured or not


@dataclass(frozen=True)
class StepLine:
    """A step in the report's last table: how its numbers were made."""

    name: str
    command: str
    status: str
    log: str


@dataclass(frozen=True)
class Report:
    """Everything the templates read (report.md.j2's variables, less the plots, which depend on the page)."""

    title: str
    gpu: str
    impl: str
    date: str
    torch: str
    python: str
    counts: str  # how many steps ran, were reused, skipped, failed
    tasks: list[TaskStatus]
    skipped: list[SkippedItem]
    attention: list[AttentionView]
    decode: DecodeView | None
    generation: GenerationView | None
    max_tokens: int
    standings: list[TaskStanding]
    bench_tables: list[BenchTable]
    results: list[StepResult]
    profile: list[StepResult]  # the profile steps (the template reads their data's text)
    feedback: FeedbackView
    steps: list[StepLine]


def build_context(
    registry: Registry, settings: Settings, gpu: dict[str, Any], results: list[StepResult], todo: dict[str, str | None]
) -> Report:
    from assignment.perf.timing import format_gpu_info

    by_step, benches = {r.step: r for r in results}, read_benches(results)
    task_status = []
    for task in registry.available:
        mine = [r for r in results if r.task == task.id]
        if todo.get(task.id):
            status = todo[task.id]
        elif not mine:
            status = f"written (no report step: make test T={task.id} checks it)"
        elif any(r.status in ("failed", "timeout") for r in mine):
            status = "written; a step failed (see Skipped)"
        elif all(r.status == "skipped" for r in mine):
            status = f"written; not measured ({mine[0].reason})"
        else:
            status = "written; measured"
        task_status.append(TaskStatus(task.id, task.title, status))
    counts = {
        status: sum(r.status == status and not r.cached for r in results)
        for status in ("ok", "failed", "timeout", "skipped")
    }
    cached = sum(r.cached for r in results)
    counts_text = (
        f"{_plural(counts['ok'], 'step')} run, {cached} reused from the cache, {counts['skipped']} "
        f"skipped, {counts['failed'] + counts['timeout']} failed"
    )
    available = registry.available

    def code(task: Task) -> task_code.TaskCode:
        return task_code.code(task.id)

    return Report(
        title=f"{registry.title}: report",
        gpu=format_gpu_info(gpu) if gpu.get("name") else no_gpu_reason(gpu),
        impl=str(settings.impl),
        date=datetime.now().astimezone().isoformat(timespec="seconds"),
        torch=gpu.get("torch") or "unknown",
        python=platform.python_version(),
        counts=counts_text,
        tasks=task_status,
        skipped=skipped_view(registry, results, todo),
        attention=[
            attention_view(t, benches.get(t.id, NOT_RUN), code(t).scaling_causal)
            for t in available
            if code(t).scaling_causal is not None
        ],
        decode=next((decode_view(t, benches.get(t.id, NOT_RUN)) for t in available if code(t).model_bench), None),
        generation=next(
            (
                generation_view(t, by_step.get(f"generate_{t.id}"), registry.report_prompt or DEFAULT_PROMPT)
                for t in available
                if code(t).generates
            ),
            None,
        ),
        max_tokens=settings.max_tokens,
        standings=standings_view(registry, benches),
        bench_tables=bench_tables_view(registry, benches),
        results=results,
        profile=[r for r in results if r.kind == "profile"],
        feedback=feedback_view(settings.feedback),
        steps=[StepLine(r.step, r.command, _step_status(r), shown_path(r.log) if r.log else "") for r in results],
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _step_status(r: StepResult) -> str:
    if r.status == "skipped":
        return "skipped"
    if r.cached:
        return f"cached (ran {r.finished}, {r.seconds:g} s)"
    if r.status == "ok":
        return f"ran in {r.seconds:g} s"
    return r.reason or r.status
