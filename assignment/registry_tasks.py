"""Reading the registry's tasks (the ``[[task]]`` tables of assignment/tasks.toml) into the schema's ``Task``
(assignment/registry_schema.py). Each key is checked by its own declaration there (assignment/registry_keys.py reads
it); what is checked here joins several keys, each check made once: ids without gaps, an open rubric's maximum, a
speedup rule's naive figure, the time limits' order, the drawn shapes against the fixed ones, what an available
task must have, and the points its timing rubric awards."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from assignment.registry_keys import RegistryError, Where, read_table
from assignment.registry_schema import Task, TimingRule


def read_tasks(raw: Any, path: Path, edition: str) -> tuple[Task, ...]:
    """Every ``[[task]]``, in the file's order: ids unique and numbered t1..tN without gaps."""
    if not isinstance(raw, list):
        raise RegistryError(path, None, "task", "must be an array of tables ([[task]])")
    tasks: list[Task] = []
    for index, table in enumerate(raw):
        task_id = table.get("id") if isinstance(table, dict) else None
        label = task_id if isinstance(task_id, str) else f"#{index + 1}"
        task = read_task(table, Where(path=path, task=label, edition=edition))
        if task.id in (t.id for t in tasks):
            raise RegistryError(path, task.id, "id", "is defined twice")
        tasks.append(task)
    numbers = sorted(t.number for t in tasks)
    if numbers != list(range(1, len(numbers) + 1)):
        raise RegistryError(path, None, "task", f"task ids must be t1..t{len(numbers)} without gaps, got {numbers}")
    return tuple(tasks)


def read_task(raw: Any, where: Where) -> Task:
    """One task: its keys as declared, then the checks that join them. An open task's timing rules score with
    their open levels (``thresholds``) and say so first in their reasoning."""
    task = read_table(Task, raw, where)
    raw_rules = raw.get("timing", [])
    timing = tuple(
        _rule_for_level(rule, raw_rules[i], where.inside(f"timing[{i}]"), task.scaffolding)
        for i, rule in enumerate(task.timing)
    )
    task = replace(task, timing=timing)
    _check_grading(task, where)
    _check_hidden(task, where)
    if task.estimated_hours is not None and not task.estimated_hours[0] <= task.estimated_hours[1]:
        raise where.error(
            "estimated_hours", f"must be [low, high] hours with 0 < low <= high, got {list(task.estimated_hours)!r}"
        )
    if task.available:
        _check_available(task, where)
    return task


def _rule_for_level(rule: TimingRule, raw: dict, where: Where, scaffolding: str) -> TimingRule:
    """A rule's open levels checked against its guided ones, its student target against its metric; the open
    levels in force when the task is open."""
    if "open" in raw:
        if not rule.open_thresholds:
            raise where.error("open.thresholds", "is missing (the open level's partial-credit levels)")
        if not math.isclose(max(t.points for t in rule.open_thresholds), rule.max_points):
            raise where.error("open.thresholds", "must award the same maximum as the guided ones")
        if where.edition != "student" and not rule.open_reasoning:
            raise where.error("open_reasoning", "must say which kernels the levels were measured on")
    student = rule.student
    if student and rule.metric == "speedup_vs_naive" and student.baseline != "naive path" and student.naive is None:
        raise where.error(
            "student.naive", "is missing: a speedup rule restated against another baseline needs the naive speed on it"
        )
    if scaffolding != "open":
        return rule
    if "open" not in raw:
        raise where.error(
            "open",
            "is missing: an open task's timing rules need partial-credit levels measured on simpler kernels "
            "(open = { thresholds, reasoning })",
        )
    return replace(rule, thresholds=rule.open_thresholds, reasoning=f"{rule.open_reasoning} {rule.reasoning}".strip())


def _check_grading(task: Task, where: Where) -> None:
    grading = task.grading
    if not grading.test_deadline_s <= grading.timeout_s:
        raise where.error("grading", "needs 0 < test_deadline_s <= timeout_s")
    if task.scaffolding == "open" and not task.timing and where.edition != "student" and not grading.open_reasoning:
        raise where.error(
            "grading.open_reasoning",
            "is missing: an open task without timing rules says how its checks were run on honest simpler "
            "designs (the open level's fixtures)",
        )


def _check_hidden(task: Task, where: Where) -> None:
    """The drawn shapes have the fixed ones' keys, and a fixed shape keeps every ``divisor_of`` the draw keeps."""
    fixed, ranges = task.hidden.fixed, task.hidden.ranges
    if task.hidden.count and fixed and set(ranges) != set(fixed[0]):
        raise where.error("hidden.draw", f"must give a range for each of {sorted(fixed[0])}")
    for key, spec in ranges.items():
        if not (isinstance(spec, dict) and "divisor_of" in spec):
            continue
        of = spec["divisor_of"]
        for i, shape in enumerate(fixed):
            if key in shape and of in shape:
                value = shape[key]
                if not (isinstance(value, int) and value > 0 and shape[of] % value == 0):
                    raise where.error(
                        f"hidden.shapes[{i}].{key}", f"must divide {of} (= {shape[of]}) as the draw does, got {value!r}"
                    )


def _check_available(task: Task, where: Where) -> None:
    """What students need of a task they get: a student target for every timing rule, performance points that the
    rubric awards, test shapes, tolerances, objectives and a time estimate."""
    if any(rule.student is None for rule in task.timing):
        raise where.error(
            "timing.student",
            "is missing: every timing rule of an available task says how a student measures it without the "
            "reference (student = {...})",
        )
    timing_points = sum(rule.max_points for rule in task.timing)
    if not math.isclose(timing_points, task.points.performance):
        raise where.error(
            "points.performance",
            f"is {task.points.performance:g} but the timing rubric awards at most {timing_points:g}; they must add up",
        )
    needed = (
        ("shapes.public", task.public_shapes, "available tasks need test shapes"),
        ("tolerance", task.tolerance, "available tasks need tolerances"),
        ("objectives", task.objectives, "available tasks list their learning objectives"),
        ("estimated_hours", task.estimated_hours, "available tasks need a time estimate"),
    )
    for name, value, why in needed:
        if not value:
            raise where.error(name, f"is missing ({why})")
