"""What the report shows: each view turns the steps' results into what a template section reads.

The report has seed 000's shape: the t4/t5 attention speedups at batch 4 x length 128 and batch 64 x length
4096, t6's time to first token (TTFT) and time between tokens (TBT) against the naive path, the text t7's
sampling loop generates from the registry's ``report_prompt``, where the student stands on the timing rubric,
the bench tables, the plots, the profiler's counters (when ``ncu`` is on PATH) and the feedback answers. A
header names the GPU, the implementation, the date and every part that was skipped, and why.
"""

from __future__ import annotations

import base64
import math
import platform
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from assignment import tasks as task_code
from assignment.registry import Registry, Task
from assignment.report.records import BenchCase, BenchRun, read_bench
from assignment.report.steps import DEFAULT_PROMPT, Settings, StepResult, no_gpu_reason, shown_path

# Seed 000's shapes (B, H, L, d): rows of assignment.perf.cases.ATTENTION_SHAPES.
SEED000_SHAPES = ((4, 1, 128, 64), (64, 1, 4096, 64))
T6_PROMPTS = (128, 1024)  # model_bench.FULL.prompts
T6_PATHS = ("naive", "student", "reference", "transformers")
PLOT_CAPTIONS = {"_time.png": "time against sequence length", "_tflops.png": "TFLOP/s against sequence length",
                 "_speedup.png": "your speedup over each baseline against sequence length",
                 "_roofline.png": "roofline: arithmetic intensity against TFLOP/s",
                 "t6_model_tbt.png": "time between tokens against context, every path",
                 "t6_model_roofline.png": "decode step against the memory roofline"}


def _num(value: float | None, spec: str, suffix: str = "") -> str:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    return format(value, spec) + suffix


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return _num(value, ".1f" if value >= 100 else ".3f" if value >= 1 else ".4f")


def _x(value: float | None) -> str:
    return _num(value, ".2f", "×")


def _why_missing(result: StepResult | None) -> str:
    if result is None:
        return "not run"
    if result.status == "skipped":
        return result.reason or "skipped"
    return f"{result.step} {result.reason}" if result.data is None else ""


@dataclass(frozen=True)
class Bench:
    """A task's bench step as the views see it: why it has nothing to show ("" when it has), and its JSON."""

    missing: str
    run: BenchRun | None = None


NOT_RUN = Bench("not run")


def read_benches(results: list[StepResult]) -> dict[str, Bench]:
    """Each task's bench step, its JSON read once (by task id; a task without a bench step is left out)."""
    return {r.task: Bench(_why_missing(r), None if r.data is None else read_bench(r.data))
            for r in results if r.kind == "bench"}


def attention_label(B: int, H: int, L: int, d: int, causal: bool) -> str:
    """The bench's label of a row of assignment.perf.cases.cases_attention."""
    return f"{'causal ' if causal else ''}attention B{B} H{H} L{L} d{d}"


def _student_note(case: BenchCase) -> str:
    note = next((n for n in case.notes if n.startswith("student")), None)
    return note or case.error or "your kernel has no result"


def attention_view(task: Task, bench: Bench, causal: bool) -> dict:
    view = {"id": task.id, "title": task.title, "causal": causal, "rows": [], "reason": bench.missing}
    if view["reason"]:
        return view
    cases = {case.label: case for case in bench.run.cases}
    for B, H, L, d in SEED000_SHAPES:
        row = {"shape": f"batch {B} × length {L}", "batch": B, "length": L, "missing": None, "error": None}
        case = cases.get(attention_label(B, H, L, d, causal))
        students = case.results.get("student") if case else None
        if case is None:
            row["missing"] = f"no {attention_label(B, H, L, d, causal)} row in the bench results"
        elif students is None:
            row["missing"] = _student_note(case)
        else:
            mine, results = students.median_ms, case.results
            over = {name: results[name].median_ms / mine if name in results and mine else None
                    for name in ("naive pytorch", "SDPA", "naive cuda")}
            row |= {"ms": _ms(mine), "tflops": _num(students.tflops, ".2f"), "naive": _x(over["naive pytorch"]),
                    "sdpa": _x(over["SDPA"]), "naive_cuda": _x(over["naive cuda"]), "error": case.error}
        view["rows"].append(row)
    return view


def decode_view(task: Task, bench: Bench) -> dict:
    view = {"id": task.id, "title": task.title, "reason": bench.missing, "model_reason": None, "headline": [],
            "prompts": [], "decode": [], "notes": []}
    if view["reason"]:
        return view
    run, model = bench.run, bench.run.model
    if not model.present or model.error:
        view["model_reason"] = model.error or "the bench ran without the model table"
    entries = {entry.prompt: entry for entry in model.prompts}
    for prompt in T6_PROMPTS:
        entry = entries.get(prompt)
        mine = entry.rows.get("student") if entry else None
        line = {"prompt": prompt, "missing": None}
        if entry is None:
            line["missing"] = view["model_reason"] or f"no prompt of {prompt} tokens in the model table"
        elif mine is None or mine.skipped is not None:
            line["missing"] = f"your path did not run: {mine.skipped if mine else 'no result'}"
        else:
            line |= {"ttft": _ms(mine.ttft_ms), "tbt": _ms(mine.tbt_ms), "ttft_x": _x(mine.ttft_speedup_naive),
                     "tbt_x": _x(mine.tbt_speedup_naive)}
        view["headline"].append(line)
    for prompt, entry in sorted(entries.items(), key=lambda item: item[0] or 0):
        rows = []
        for name in T6_PATHS:
            row = entry.rows.get(name)
            if row is None:
                continue
            shown = {"path": model.labels.get(name, name), "skipped": row.skipped}
            if not row.skipped:
                shown |= {"ttft": _ms(row.ttft_ms), "ttft_x": _x(row.ttft_speedup_naive), "tbt": _ms(row.tbt_ms),
                          "tbt_x": _x(row.tbt_speedup_naive), "roofline": _num(row.percent_roofline, ".0f", "%"),
                          "agrees": "baseline" if name == "naive" else "–" if row.agrees is None
                          else "yes" if row.agrees else "DIFFERS"}
            rows.append(shown)
        view["prompts"].append({"prompt": prompt, "context": entry.context, "roofline": _ms(entry.roofline_tbt_ms),
                                "rows": rows})
    view["notes"] = list(model.notes)
    copy = run.copy_gbps
    view["copy_gbps"] = _num(copy, ".0f")
    for case in run.cases:
        if not (case.label or "").startswith("decode"):
            continue
        mine = case.results.get("student")
        row = {"label": case.label.replace(" (KV bytes/s)", ""), "missing": None}
        if mine is None:
            row["missing"] = _student_note(case)
        else:
            gbps = mine.gbps
            naive = case.results["naive pytorch"].median_ms if "naive pytorch" in case.results else None
            row |= {"ms": _ms(mine.median_ms), "gbps": _num(gbps, ".0f"),
                    "copy_percent": _num(100 * gbps / copy if gbps and copy else None, ".0f", "%"),
                    "naive_x": _x(naive / mine.median_ms if naive else None)}
        view["decode"].append(row)
    return view


def generation_view(task: Task, result: StepResult | None, prompt: str) -> dict:
    view = {"id": task.id, "title": task.title, "prompt": prompt, "reason": _why_missing(result), "text": "",
            "timing": [], "stopped_at_once": False}
    if not view["reason"]:
        view |= {"prompt": result.data["prompt"], "text": result.data["text"], "timing": result.data["timing"]}
        view["stopped_at_once"] = not result.data["text"].strip()
    return view


def standings_view(registry: Registry, benches: dict[str, Bench]) -> list[dict]:
    """Each GPU task's timing rules against the student targets (the bench JSON's "targets")."""
    from assignment.perf.targets import describe

    tasks = []
    for task in registry.available:
        if not task.needs_gpu or not task.timing:
            continue
        bench = benches.get(task.id, NOT_RUN)
        entry = {"id": task.id, "title": task.title, "reason": bench.missing, "rows": [], "points": None,
                 "max_points": f"{sum(rule.max_points for rule in task.timing):g}"}
        if not entry["reason"]:
            standings = bench.run.targets
            if standings is None:
                entry["reason"] = "the bench wrote no targets"
            earned = 0.0
            for s in standings or []:
                full_points, full_speed = s.needed[-1]
                speed = describe(s.baseline, s.speed) if s.speed is not None else f"not measured ({s.reason})"
                times = []
                if s.student_ms is not None:
                    times.append(f"yours {s.student_ms:.3f} ms")
                if s.baseline_ms is not None:
                    times.append(f"{s.baseline} {s.baseline_ms:.3f} ms")
                earned += s.points or 0.0
                entry["rows"].append({"rule": s.rule, "speed": speed, "times": "; ".join(times),
                                      "full": f"{describe(s.baseline, full_speed)} ({full_points:g} points)",
                                      "points": f"{s.points:g} of {s.max_points:g}" if s.points is not None
                                      else f"– of {s.max_points:g}", "notes": list(s.notes),
                                      "course_gpu": s.course_gpu})
            entry["points"] = f"{earned:g}" if standings else None
        tasks.append(entry)
    return tasks


def bench_tables_view(registry: Registry, benches: dict[str, Bench]) -> list[dict]:
    tables = []
    for task in registry.available:
        bench = benches.get(task.id)
        if bench is None:
            continue
        entry = {"id": task.id, "title": task.title, "reason": bench.missing, "cases": []}
        if entry["reason"]:
            tables.append(entry)
            continue
        metric = task_code.code(task.id).bench_metric or "TFLOP/s"  # as assignment.perf.cases prints them
        entry |= {"copy_gbps": _num(bench.run.copy_gbps, ".0f"), "metric": metric}
        for case in bench.run.cases:
            mine = case.results["student"].median_ms if "student" in case.results else None
            rows = [{"name": name, "ms": _ms(r.median_ms),
                     "value": _num(r.gbps if metric == "GB/s" else r.tflops, ".1f" if metric == "GB/s" else ".2f"),
                     "yours": _x(r.median_ms / mine if mine and r.median_ms else None)}
                    for name, r in case.results.items()]
            entry["cases"].append({"label": "?" if case.label is None else case.label, "rows": rows,
                                   "notes": case.notes, "error": case.error})
        tables.append(entry)
    return tables


def plots_view(results: list[StepResult], html_mode: bool) -> list[dict]:
    def kind(path: Path) -> int:  # PLOT_CAPTIONS's order: time, TFLOP/s, roofline; t6's two
        names = list(PLOT_CAPTIONS)
        if path.name in PLOT_CAPTIONS:
            return names.index(path.name)
        return next((i for i, suffix in enumerate(names) if path.name.endswith(suffix)), len(names))

    plots = []
    for result in results:
        for path in sorted(map(Path, result.files), key=lambda p: (kind(p), p.name)):
            known = kind(path) < len(PLOT_CAPTIONS)
            caption = list(PLOT_CAPTIONS.values())[kind(path)] if known else path.stem
            plot = {"name": path.name, "step": result.step, "task": result.task, "caption": f"{result.task}: {caption}"}
            if html_mode and path.is_file():
                plot["uri"] = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
            plots.append(plot)
    return plots


def feedback_view(path: Path) -> dict:
    from assignment.feedback import FeedbackError, load_answers, load_form

    view = {"path": shown_path(path), "present": path.is_file(), "error": None, "answers": [], "problems": []}
    if not view["present"]:
        return view
    try:
        form = load_form()
        answers = load_answers(path, form)
    except FeedbackError as exc:
        view["error"] = str(exc)
        return view
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
        view["answers"].append({"question": q.text, "answer": shown})
    view["problems"] = form.problems(answers)
    return view


def skipped_view(registry: Registry, results: list[StepResult], todo: dict[str, str | None]) -> list[dict]:
    """What is missing from the report and why: tasks not written, steps skipped (grouped), steps that failed."""
    titles = {t.id: t.title for t in registry.tasks}
    items = [{"what": f"{t} {titles[t]}", "command": "", "why": why, "tail": ""} for t, why in todo.items() if why]
    grouped: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r.status == "skipped" and not todo.get(r.task):
            grouped.setdefault((r.task, r.reason or "skipped"), []).append(r.kind)
    for (task, why), kinds in grouped.items():
        items.append({"what": f"{task} {titles[task]} ({', '.join(kinds)})", "command": "", "why": why, "tail": ""})
    for r in results:
        if r.status in ("failed", "timeout"):
            items.append({"what": f"{r.task} {titles[r.task]}: {r.step}", "command": r.command,
                          "why": f"{r.reason}; {'the rows it timed are shown' if r.data else 'no results from it'}"
                                 f"; log: {shown_path(r.log) if r.log else '-'}",
                          "tail": r.tail})
    return items


def build_context(registry: Registry, settings: Settings, gpu: dict[str, Any], results: list[StepResult],
                  todo: dict[str, str | None]) -> dict[str, Any]:
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
        task_status.append({"id": task.id, "title": task.title, "status": status})
    counts = {status: sum(r.status == status and not r.cached for r in results)
              for status in ("ok", "failed", "timeout", "skipped")}
    cached = sum(r.cached for r in results)
    counts_text = (f"{_plural(counts['ok'], 'step')} run, {cached} reused from the cache, {counts['skipped']} "
                   f"skipped, {counts['failed'] + counts['timeout']} failed")
    available = registry.available

    def code(task: Task) -> task_code.TaskCode:
        return task_code.code(task.id)

    return {
        "title": f"{registry.title}: report",
        "gpu": format_gpu_info(gpu) if gpu.get("name") else no_gpu_reason(gpu),
        "impl": str(settings.impl), "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "torch": gpu.get("torch") or "unknown", "python": platform.python_version(), "counts": counts_text,
        "tasks": task_status, "skipped": skipped_view(registry, results, todo),
        "attention": [attention_view(t, benches.get(t.id, NOT_RUN), code(t).scaling_causal) for t in available
                      if code(t).scaling_causal is not None],
        "decode": next((decode_view(t, benches.get(t.id, NOT_RUN)) for t in available if code(t).model_bench), None),
        "generation": next((generation_view(t, by_step.get(f"generate_{t.id}"), registry.report_prompt
                                            or DEFAULT_PROMPT) for t in available if code(t).generates), None),
        "max_tokens": settings.max_tokens,
        "standings": standings_view(registry, benches), "bench_tables": bench_tables_view(registry, benches),
        "results": results, "profile": [r for r in results if r.kind == "profile"],
        "feedback": feedback_view(settings.feedback),
        "steps": [{"name": r.step, "command": r.command, "status": _step_status(r),
                   "log": shown_path(r.log) if r.log else ""} for r in results],
    }


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
