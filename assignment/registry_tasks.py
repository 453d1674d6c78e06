"""Reading one task's tables of the registry (assignment/tasks.toml) into the schema's types
(assignment/registry_schema.py), each key checked where it is read: its thresholds and timing rules, hidden shapes,
tolerances, Python rules, objectives and grading limits. ``require_key`` is the check every reader shares."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


from assignment.registry_schema import (
    METRICS,
    STUDENT_BASELINES,
    Grading,
    HiddenShapes,
    PythonRules,
    RegistryError,
    StudentTarget,
    Threshold,
    TimingRule,
)


def require_key(table: dict, key: str, kind: type | tuple, path: Path, task: str | None, prefix: str = ""):
    name = f"{prefix}{key}"
    if key not in table:
        raise RegistryError(path, task, name, "is missing")
    value = table[key]
    if kind is float:
        kind = (int, float)
    if isinstance(value, bool) and kind in ((int, float), int):
        raise RegistryError(path, task, name, f"must be a number, not {value!r}")
    if not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise RegistryError(path, task, name, f"must be {expected}, got {type(value).__name__} {value!r}")
    return value


def parse_thresholds(raw: Any, path: Path, task_id: str, prefix: str) -> tuple[Threshold, ...]:
    if not isinstance(raw, list) or not raw:
        raise RegistryError(path, task_id, prefix + "thresholds", "must list at least one threshold")
    thresholds = []
    for j, th in enumerate(raw):
        tprefix = f"{prefix}thresholds[{j}]."
        at = float(require_key(th, "at", float, path, task_id, tprefix))
        pts = float(require_key(th, "points", float, path, task_id, tprefix))
        if at <= 0 or pts < 0:
            raise RegistryError(path, task_id, tprefix[:-1], "needs at > 0 and points >= 0")
        thresholds.append(Threshold(at, pts))
    return tuple(thresholds)


def parse_open_rubric(
    item: dict, thresholds: tuple[Threshold, ...], path: Path, task_id: str, prefix: str, edition: str
) -> tuple[tuple[Threshold, ...], str] | None:
    """A rule's ``open = { thresholds = [...] }`` and ``open_reasoning``: the partial-credit levels for the open
    scaffolding level, calibrated on simpler honest kernels. Same maximum as the guided thresholds."""
    raw = item.get("open")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RegistryError(path, task_id, prefix + "open", "must be a table { thresholds = [...] }")
    opened = parse_thresholds(raw.get("thresholds"), path, task_id, prefix + "open.")
    if not math.isclose(max(t.points for t in opened), max(t.points for t in thresholds)):
        raise RegistryError(path, task_id, prefix + "open.thresholds", "must award the same maximum as the guided ones")
    reasoning = str(item.get("open_reasoning", ""))
    if edition != "student" and len(reasoning.strip()) < 20:
        raise RegistryError(
            path, task_id, prefix + "open_reasoning", "must say which kernels the levels were measured on"
        )
    return opened, reasoning


def parse_timing(
    raw: Any, path: Path, task_id: str, edition: str = "instructor", scaffolding: str = "guided"
) -> tuple[TimingRule, ...]:
    if not isinstance(raw, list):
        raise RegistryError(path, task_id, "timing", "must be an array of tables ([[task.timing]])")
    rules = []
    for i, item in enumerate(raw):
        prefix = f"timing[{i}]."
        metric = require_key(item, "metric", str, path, task_id, prefix)
        if metric not in METRICS:
            raise RegistryError(path, task_id, prefix + "metric", f"must be one of {METRICS}, got {metric!r}")
        thresholds = parse_thresholds(
            require_key(item, "thresholds", list, path, task_id, prefix), path, task_id, prefix
        )
        if edition == "student":  # the bundle's copy: the reasoning stays with the instructor
            reasoning = str(item.get("reasoning", ""))
        else:
            reasoning = require_key(item, "reasoning", str, path, task_id, prefix)
            if len(reasoning.strip()) < 20:
                raise RegistryError(path, task_id, prefix + "reasoning", "must say where the numbers come from")
        opened = parse_open_rubric(item, thresholds, path, task_id, prefix, edition)
        if scaffolding == "open":
            if opened is None:
                raise RegistryError(
                    path,
                    task_id,
                    prefix + "open",
                    "is missing: an open task's timing rules need "
                    "partial-credit levels measured on simpler kernels (open = { thresholds, reasoning })",
                )
            thresholds, reasoning = opened[0], (opened[1] + " " + reasoning).strip()
        student_target = parse_student_target(item.get("student"), metric, path, task_id, prefix)
        rules.append(
            TimingRule(
                name=require_key(item, "name", str, path, task_id, prefix),
                metric=metric,
                shape=dict(require_key(item, "shape", dict, path, task_id, prefix)),
                reference=require_key(item, "reference", str, path, task_id, prefix),
                thresholds=tuple(thresholds),
                reasoning=reasoning,
                reference_ms=parse_reference_ms(item.get("reference_ms", {}), path, task_id, prefix),
                student=student_target,
                open_thresholds=opened[0] if opened else (),
                open_reasoning=opened[1] if opened else "",
            )
        )
    return tuple(rules)


def parse_student_target(raw: Any, metric: str, path: Path, task_id: str, prefix: str) -> StudentTarget | None:
    if raw is None:
        return None
    where = prefix + "student"
    if not isinstance(raw, dict):
        raise RegistryError(path, task_id, where, "must be a table { baseline = ..., reference = ..., gpu = ... }")
    baseline = require_key(raw, "baseline", str, path, task_id, where + ".")
    if baseline not in STUDENT_BASELINES:
        raise RegistryError(path, task_id, where + ".baseline", f"must be one of {STUDENT_BASELINES}, got {baseline!r}")
    reference = float(require_key(raw, "reference", float, path, task_id, where + "."))
    naive = raw.get("naive")
    if metric == "speedup_vs_naive" and baseline != "naive path" and naive is None:
        raise RegistryError(
            path,
            task_id,
            where + ".naive",
            "is missing: a speedup rule restated against another baseline needs the naive speed on it",
        )
    if naive is not None and (isinstance(naive, bool) or not isinstance(naive, (int, float)) or naive <= 0):
        raise RegistryError(path, task_id, where + ".naive", "must be a number > 0")
    overhead = raw.get("overhead_ms", 0.0)
    if isinstance(overhead, bool) or not isinstance(overhead, (int, float)) or overhead < 0:
        raise RegistryError(path, task_id, where + ".overhead_ms", "must be a number >= 0")
    if reference <= 0:
        raise RegistryError(path, task_id, where + ".reference", "must be > 0")
    unknown = set(raw) - {"baseline", "reference", "naive", "overhead_ms", "gpu"}
    if unknown:
        raise RegistryError(path, task_id, where, f"unknown field {sorted(unknown)[0]!r}")
    return StudentTarget(
        baseline=baseline,
        reference=reference,
        gpu=require_key(raw, "gpu", str, path, task_id, where + "."),
        naive=None if naive is None else float(naive),
        overhead_ms=float(overhead),
    )


def parse_reference_ms(raw: Any, path: Path, task_id: str, prefix: str) -> dict[str, float]:
    if not isinstance(raw, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in raw.values()):
        raise RegistryError(path, task_id, prefix + "reference_ms", "must map GPU names to times in ms (> 0)")
    return {str(k): float(v) for k, v in raw.items()}


def parse_hidden(raw: Any, path: Path, task_id: str) -> HiddenShapes:
    if not isinstance(raw, dict):
        raise RegistryError(path, task_id, "hidden", "must be a table ([task.hidden])")
    fixed = tuple(dict(s) for s in raw.get("shapes", []))
    draw = raw.get("draw", {})
    count = int(draw.get("count", 0))
    ranges = {k: v for k, v in draw.items() if k != "count"}
    for position, (key, spec) in enumerate(ranges.items()):
        ok_range = (
            isinstance(spec, list) and len(spec) == 2 and all(isinstance(x, int) for x in spec) and spec[0] <= spec[1]
        )
        ok_choice = (
            isinstance(spec, dict) and set(spec) == {"choice"} and isinstance(spec["choice"], list) and spec["choice"]
        )
        ok_divisor = (
            isinstance(spec, dict)
            and set(spec) == {"divisor_of"}
            and positive_ints_before(ranges, position, spec["divisor_of"])
        )
        if not (ok_range or ok_choice or ok_divisor):
            raise RegistryError(
                path,
                task_id,
                f"hidden.draw.{key}",
                "must be [lo, hi] (integers, lo <= hi), "
                '{ choice = [...] } or { divisor_of = "KEY" } naming an earlier key drawn from '
                "positive integers",
            )
    if count and fixed and set(ranges) != set(fixed[0]):
        raise RegistryError(path, task_id, "hidden.draw", f"must give a range for each of {sorted(fixed[0])}")
    for key, spec in ranges.items():
        if isinstance(spec, dict) and "divisor_of" in spec:
            for i, shape in enumerate(fixed):
                of = spec["divisor_of"]
                if (
                    key in shape
                    and of in shape
                    and not (isinstance(shape[key], int) and shape[key] > 0 and shape[of] % shape[key] == 0)
                ):
                    raise RegistryError(
                        path,
                        task_id,
                        f"hidden.shapes[{i}].{key}",
                        f"must divide {of} (= {shape[of]}) as the draw does, got {shape[key]!r}",
                    )
    return HiddenShapes(fixed, count, ranges)


def positive_ints_before(ranges: dict[str, Any], position: int, key: Any) -> bool:
    """Whether ``key`` is drawn before ``position`` and only ever takes positive integers."""
    earlier = dict(list(ranges.items())[:position])
    spec = earlier.get(key) if isinstance(key, str) else None
    if isinstance(spec, list):
        return isinstance(spec[0], int) and spec[0] >= 1
    if isinstance(spec, dict) and "choice" in spec:
        return all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in spec["choice"])
    return isinstance(spec, dict) and "divisor_of" in spec


# What a [task.tolerance] entry bounds: atol and rtol together (an element-wise comparison), the fp16/bf16
# rule's max_mean_error_ratio (t1), or the FlashAttention repository's rule for fp16/bf16 kernels: the largest
# error at most max_error_ratio times that of PyTorch computing in the same dtype, plus atol (t8). Every test reads
# its bounds by the entry's name (Task.tol).
TOLERANCE_BOUNDS = (
    frozenset({"atol", "rtol"}),
    frozenset({"max_mean_error_ratio"}),
    frozenset({"max_error_ratio", "atol"}),
)


def parse_tolerance(raw: Any, path: Path, task_id: str) -> dict[str, dict[str, float]]:
    if not isinstance(raw, dict):
        raise RegistryError(path, task_id, "tolerance", "must be a table ([task.tolerance])")
    parsed = {}
    for name, bounds in raw.items():
        where = f"tolerance.{name}"
        if not isinstance(bounds, dict) or frozenset(bounds) not in TOLERANCE_BOUNDS:
            raise RegistryError(
                path,
                task_id,
                where,
                "must be a table { atol = ..., rtol = ... } (or { max_mean_error_ratio = ... }, or "
                "{ max_error_ratio = ..., atol = ... })",
            )
        for key, value in bounds.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise RegistryError(path, task_id, f"{where}.{key}", f"must be a number >= 0, got {value!r}")
        parsed[name] = {key: float(value) for key, value in bounds.items()}
    return parsed


def parse_rules(raw: Any, path: Path, task_id: str) -> PythonRules:
    for key in ("imports", "forbidden"):
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise RegistryError(path, task_id, f"rules.{key}", "must be a list of names")
    return PythonRules(tuple(raw.get("imports", [])), tuple(raw.get("forbidden", [])))


def parse_objectives(raw: Any, path: Path, task_id: str, available: bool) -> tuple[str, ...]:
    if raw is None:
        raw = []
    if not isinstance(raw, list) or not all(isinstance(o, str) and o.strip() for o in raw):
        raise RegistryError(path, task_id, "objectives", "must be a list of non-empty strings")
    if available and not raw:
        raise RegistryError(path, task_id, "objectives", "is missing (available tasks list their learning objectives)")
    return tuple(" ".join(o.split()) for o in raw)


def parse_estimated_hours(raw: Any, path: Path, task_id: str, available: bool) -> tuple[float, float] | None:
    if raw is None:
        if available:
            raise RegistryError(path, task_id, "estimated_hours", "is missing (available tasks need a time estimate)")
        return None
    ok = (
        isinstance(raw, list)
        and len(raw) == 2
        and all(isinstance(h, (int, float)) and not isinstance(h, bool) for h in raw)
    )
    if not ok or not 0 < raw[0] <= raw[1]:
        raise RegistryError(
            path, task_id, "estimated_hours", f"must be [low, high] hours with 0 < low <= high, got {raw!r}"
        )
    return float(raw[0]), float(raw[1])


def parse_grading(raw: Any, path: Path, task_id: str, edition: str = "instructor") -> Grading:
    if not raw:
        return Grading()
    timeout = float(require_key(raw, "timeout_s", float, path, task_id, "grading."))
    deadline = float(require_key(raw, "test_deadline_s", float, path, task_id, "grading."))
    if not 0 < deadline <= timeout:
        raise RegistryError(path, task_id, "grading", "needs 0 < test_deadline_s <= timeout_s")
    opened = str(raw.get("open_reasoning", ""))
    shards = raw.get("shards", 1)
    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= 8:
        raise RegistryError(path, task_id, "grading.shards", f"must be a whole number from 1 to 8, got {shards!r}")
    if edition == "student":
        return Grading(timeout, deadline, str(raw.get("reasoning", "")), opened, shards)
    if "open_reasoning" in raw and len(opened.strip()) < 20:
        raise RegistryError(path, task_id, "grading.open_reasoning", "must say which designs the checks were run on")
    return Grading(timeout, deadline, require_key(raw, "reasoning", str, path, task_id, "grading."), opened, shards)
