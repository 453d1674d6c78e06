"""Where a student stands against the timing rubric, measured without the reference kernels.

The grader times a student's kernel against the reference solution (``time_vs_reference``) or against a naive
path (``speedup_vs_naive``). A student bundle has no reference, so every timing rule of the registry also says
how fast the reference is against a baseline the bundle has (its ``student`` table: the device copy bandwidth,
cuBLAS or SDPA through PyTorch, the model's naive path). ``make bench`` times the student's code against that
baseline at the rule's own shape and prints, per rule::

    your kernel: 0.62x cuBLAS's speed (3.210 ms; cuBLAS 1.990 ms)
    full points (5) from: 0.74x cuBLAS's speed
    you are here: 3.5 of 5 points

The points are an estimate: the grade is the ratio the grader measures on the course's GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from assignment.registry import Task, TimingRule

RuleCase = Callable[[TimingRule, Any, Any], Any]  # (rule, student, reference) -> assignment.perf.cases.Case


@dataclass
class Standing:
    """One rule: the student's speed against the rule's baseline, and the points it points to."""

    task: str
    rule: str
    baseline: str
    course_gpu: str
    needed: list[tuple[float, float]]  # (points, speed needed), lowest points first
    max_points: float
    speed: float | None = None
    student_ms: float | None = None
    baseline_ms: float | None = None
    points: float | None = None
    reason: str | None = None  # why the student's speed could not be measured
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def new_standing(task: Task, rule: TimingRule) -> Standing:
    target = rule.student
    if target is None:
        raise ValueError(f"{task.id}: the timing rule {rule.name!r} has no student target in the registry")
    needed = sorted(((t.points, target.needed(rule.metric, t.at)) for t in rule.thresholds), key=lambda p: p[0])
    return Standing(task.id, rule.name, target.baseline, target.gpu, needed, rule.max_points)


def settle(
    standing: Standing,
    rule: TimingRule,
    speed: float | None,
    student_ms: float | None = None,
    baseline_ms: float | None = None,
    reason: str | None = None,
) -> Standing:
    if speed is None or not math.isfinite(speed) or speed <= 0:
        standing.reason = reason or "not measured"
        return standing
    standing.speed, standing.student_ms, standing.baseline_ms = speed, student_ms, baseline_ms
    standing.points = rule.student_points_for(speed)
    return standing


# --------------------------------------------------------------------------- the rules' cases (a GPU)


def is_model_rule(rule: TimingRule) -> bool:
    """A rule on the whole model's decode step (timed by the model table), not on one kernel."""
    return "model" in rule.shape


def rule_case(task: Task, rule: TimingRule, make_case: RuleCase | None, student, reference):
    """A bench Case at the rule's shape, made by the task's ``make_case`` (its code's ``rule_case``): a PyTorch
    candidate first (the bench checks every output against it), the baseline, the student and, in an instructor's
    tree, the reference. None for the model rule."""
    if is_model_rule(rule):
        return None
    if make_case is None:
        raise ValueError(
            f"{task.id}: no bench case for the timing rule {rule.name!r} (give assignment/tasks/"
            f"{task.id}.py a rule_case)"
        )
    return make_case(rule, student, reference)


def speed_from_row(
    rule: TimingRule, row: dict, copy_gbps: float | None
) -> tuple[float | None, float | None, float | None, str | None]:
    """(speed, student ms, baseline ms, why not) from a bench row of ``rule_case``."""
    results = row.get("results", {})
    student = results.get("student")
    if student is None:
        why = next((n.split(": ", 1)[-1] for n in row.get("notes", []) if n.startswith("student")), None)
        return None, None, None, f"your kernel did not run: {why or row.get('error') or 'no result'}"
    if row.get("error"):
        return None, student["median_ms"], None, row["error"]
    baseline = rule.student.baseline
    if baseline == "copy":
        if not copy_gbps or not student.get("gbps"):
            return None, student["median_ms"], None, "no copy bandwidth measured"
        return student["gbps"] / copy_gbps, student["median_ms"], None, None
    base = results.get(baseline)
    if base is None:
        return None, student["median_ms"], None, f"{baseline} did not run"
    return base["median_ms"] / student["median_ms"], student["median_ms"], base["median_ms"], None


def model_speed(
    rule: TimingRule, model_report: dict | None
) -> tuple[float | None, float | None, float | None, str | None]:
    """t6's decode-step rule from the model table: the naive path's TBT over the student's (plus the time the
    grader's worker round trip adds to the student's step), at the prompt nearest the rule's context."""
    if not model_report or model_report.get("error"):
        return None, None, None, (model_report or {}).get("error", "the model table did not run")
    entries = [p for p in model_report.get("prompts", []) if "rows" in p]
    if not entries:
        return None, None, None, "the model table has no prompts"
    context = rule.shape.get("context", 1024)
    entry = min(entries, key=lambda p: abs(p["prompt"] - context))
    rows = entry["rows"]
    student, naive = rows.get("student", {}), rows.get("naive", {})
    if not student.get("tbt_ms"):
        return None, None, None, f"your path did not run: {student.get('skipped', 'no result')}"
    if not naive.get("tbt_ms"):
        return None, student["tbt_ms"], None, f"the naive path did not run: {naive.get('skipped', 'no result')}"
    step = student["tbt_ms"] + rule.student.overhead_ms
    return naive["tbt_ms"] / step, student["tbt_ms"], naive["tbt_ms"], None


def measure_task(
    task: Task,
    make_case: RuleCase | None,
    student,
    reference,
    copy_gbps: float | None,
    settings: dict,
    model_report: dict | None = None,
    gpu_name: str | None = None,
) -> list[Standing]:
    """Every timing rule of ``task`` against its student target (bench rows are printed as they run); ``make_case``
    is the task code's ``rule_case``."""
    from assignment.perf import cases

    standings = []
    for rule in task.timing:
        standing = new_standing(task, rule)
        case = rule_case(task, rule, make_case, student, reference)
        if case is None:
            speed, mine, base, why = model_speed(rule, model_report)
            if rule.student.overhead_ms:
                standing.notes.append(
                    f"counts the {rule.student.overhead_ms:g} ms the grader's sandboxed worker adds to your step"
                )
        else:
            row = cases.run_case(case, copy_gbps, settings)
            speed, mine, base, why = speed_from_row(rule, row, copy_gbps)
        settle(standing, rule, speed, mine, base, why)
        if gpu_name and gpu_name != standing.course_gpu:
            standing.notes.append(
                f"measured on {gpu_name}; the targets come from the {standing.course_gpu} the "
                "course grades on: treat the points as a rough guide"
            )
        standings.append(standing)
    return standings


# --------------------------------------------------------------------------- printing (no GPU)


def describe(baseline: str, speed: float) -> str:
    if baseline == "copy":
        return f"{100 * speed:.0f}% of the device copy bandwidth"
    if baseline == "naive path":
        return f"{speed:.3g}x the naive path's speed"
    return f"{speed:.2f}x {baseline}'s speed"


def format_standing(s: Standing) -> str:
    what = "your decode step" if s.baseline == "naive path" else "your kernel"
    lines = [f"{s.task} · {s.rule}"]
    if s.speed is None:
        lines.append(f"  {what}: not measured ({s.reason})")
    else:
        times = f"{s.student_ms:.3f} ms" if s.student_ms is not None else ""
        if s.baseline_ms is not None:
            times += f"; {s.baseline} {s.baseline_ms:.3f} ms"
        lines.append(f"  {what}: {describe(s.baseline, s.speed)}" + (f" ({times})" if times else ""))
    full_points, full_speed = s.needed[-1]
    lines.append(f"  full points ({full_points:g}) from: {describe(s.baseline, full_speed)}")
    lines.append("  points by speed: " + " · ".join(f"{describe(s.baseline, v)} -> {p:g}" for p, v in s.needed))
    if s.points is not None:
        lines.append(f"  you are here: {s.points:g} of {s.max_points:g} points")
    for note in s.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def format_standings(standings: list[Standing]) -> str:
    if not standings:
        return ""
    gpus = sorted({s.course_gpu for s in standings})
    head = (
        f"Where you stand on the timing rubric (an estimate from this run; the course grades on "
        f"{', '.join(gpus)}, timing your code against the reference):"
    )
    return "\n".join([head] + [format_standing(s) for s in standings])
