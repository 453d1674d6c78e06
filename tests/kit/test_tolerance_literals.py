"""No task test writes its own tolerance: every nonzero atol/rtol of the public and hidden tests comes from the
registry (a task's ``[task.tolerance]`` entry, read with ``TASK.tol(name)``). An exact comparison (0) is no
tolerance, and a bound computed from a registry value (``TOL["atol"] * K ** 0.5``) is read from it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
TOLERANCE_KEYS = ("atol", "rtol")


def number(node: ast.expr) -> float | None:
    """The value of a numeric literal, signed or not; None for anything else."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = number(node.operand)
        return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    return None


def tolerance_literals(source: str) -> list[tuple[int, str]]:
    """(line, ``atol=...``) for each nonzero number written as an atol or rtol: a keyword argument of any call,
    or an entry of a dict display (``{"atol": 3e-4, ...}``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            pairs = [(keyword.arg, keyword.value) for keyword in node.keywords if keyword.arg in TOLERANCE_KEYS]
        elif isinstance(node, ast.Dict):
            pairs = [
                (key.value, value)
                for key, value in zip(node.keys, node.values)
                if isinstance(key, ast.Constant) and key.value in TOLERANCE_KEYS
            ]
        else:
            continue
        for name, value in pairs:
            if number(value):
                found.append((value.lineno, f"{name}={number(value)!r}"))
    return sorted(found)


def task_test_files() -> list[Path]:
    """The public tests (tests/, not the kit's own) and the hidden suites with what they share."""
    public = [p for p in sorted((REPO / "tests").rglob("*.py")) if "kit" not in p.relative_to(REPO / "tests").parts]
    return public + sorted((REPO / "grader" / "hidden").rglob("*.py"))


def test_the_scan_finds_written_bounds_and_passes_exact_and_read_ones():
    source = "\n".join(
        [
            "assert_close(a, b, atol=1e-4, rtol=0, name='O')",
            "assert torch.allclose(a, b, atol=-2e-5)",
            "checks.check_values(shape, d, False, seed, {'atol': 3e-4, 'rtol': 3})",
            "assert_close(a, b, atol=0, rtol=0.0, name='exact')",
            "assert_close(a, b, **TASK.tol('large_logits'), name='O')",
            "tol = {'atol': TOL['atol'] * k ** 0.5, 'rtol': TOL['rtol'], **extra}",
        ]
    )
    assert tolerance_literals(source) == [(1, "atol=0.0001"), (2, "atol=-2e-05"), (3, "atol=0.0003"), (3, "rtol=3")]


def test_no_task_test_writes_a_tolerance_the_registry_should_hold():
    files = task_test_files()
    names = {p.name for p in files}
    assert {"test_t1_attention.py", "test_t1_hidden.py", "attention_checks.py"} <= names, names
    found = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in files
        for line, what in tolerance_literals(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        "tolerances written in a test instead of read from the registry: give each a named entry in "
        "its task's [task.tolerance] (assignment/tasks.toml, with why it is that value) and pass "
        "**TASK.tol(name):\n  " + "\n  ".join(found)
    )
