"""The registry's keys whose values have forms of their own, each read by its own function that the schema
(assignment/registry_schema.py) names in the key's declaration: a task's tolerances (a table of named bounds) and
the ranges its hidden shapes are drawn from."""

from __future__ import annotations

import math
from typing import Any

from assignment.registry_keys import Where

# What a [task.tolerance] entry bounds: atol and rtol together (an element-wise comparison), the fp16/bf16
# rule's max_mean_error_ratio (t1), or the FlashAttention repository's rule for fp16/bf16 kernels: the largest
# error at most max_error_ratio times that of PyTorch computing in the same dtype, plus atol (t8). Every test reads
# its bounds by the entry's name (Task.tol).
TOLERANCE_BOUNDS = (
    frozenset({"atol", "rtol"}),
    frozenset({"max_mean_error_ratio"}),
    frozenset({"max_error_ratio", "atol"}),
)


def read_tolerance(raw: Any, where: Where, name: str) -> dict[str, dict[str, float]]:
    """``[task.tolerance]``: each entry a table of one of ``TOLERANCE_BOUNDS``, every bound a finite number >= 0."""
    if not isinstance(raw, dict):
        raise where.error(name, "must be a table ([task.tolerance])")
    parsed = {}
    for entry, bounds in raw.items():
        if not isinstance(bounds, dict) or frozenset(bounds) not in TOLERANCE_BOUNDS:
            raise where.error(
                f"{name}.{entry}",
                "must be a table { atol = ..., rtol = ... } (or { max_mean_error_ratio = ... }, or "
                "{ max_error_ratio = ..., atol = ... })",
            )
        for key, value in bounds.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise where.error(f"{name}.{entry}.{key}", f"must be a number >= 0, got {value!r}")
        parsed[entry] = {key: float(value) for key, value in bounds.items()}
    return parsed


def read_draw_ranges(raw: Any, where: Where, name: str) -> dict[str, Any]:
    """``draw``'s ranges (its ``count`` aside, a key of its own): each ``[lo, hi]`` (integers, inclusive),
    ``{ choice = [...] }``, or ``{ divisor_of = "KEY" }`` naming a key drawn before it from positive integers."""
    if not isinstance(raw, dict):
        raise where.error(name, f"must be a table {{ count = ..., KEY = [lo, hi], ... }}, got {raw!r}")
    ranges = {k: v for k, v in raw.items() if k != "count"}
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
            raise where.error(
                f"{name}.{key}",
                "must be [lo, hi] (integers, lo <= hi), "
                '{ choice = [...] } or { divisor_of = "KEY" } naming an earlier key drawn from '
                "positive integers",
            )
    return ranges


def positive_ints_before(ranges: dict[str, Any], position: int, key: Any) -> bool:
    """Whether ``key`` is drawn before ``position`` and only ever takes positive integers."""
    earlier = dict(list(ranges.items())[:position])
    spec = earlier.get(key) if isinstance(key, str) else None
    if isinstance(spec, list):
        return isinstance(spec[0], int) and spec[0] >= 1
    if isinstance(spec, dict) and "choice" in spec:
        return all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in spec["choice"])
    return isinstance(spec, dict) and "divisor_of" in spec
