"""What a task's files may use and what may change outside the TODOs, from the checks that enforce it.

Python files: the registry's ``[task.rules]`` (imports allowed, names forbidden) and the kit-wide rules of
``assignment.policy``. CUDA files: the region rules of ``assignment.cuda.rules`` (what a TODO region may
not contain, and why). The handout prints these lists from the same constants the grader checks with, so
a rule is never described in one place and enforced from another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from assignment import policy
from assignment.cuda import rules as region_rules
from assignment.registry import Task

PUBLIC_TESTS = Path(__file__).resolve().parent.parent / "tests"
# The public test that runs each language's check on a student's file.
RULE_TESTS = {"python": "test_file_uses_only_allowed_operations", "cuda": "test_todo_regions_are_device_code_only"}


@dataclass(frozen=True)
class FileRules:
    name: str
    language: str  # "python" or "cuda"
    imports: tuple[str, ...] = ()  # python: the task's own modules
    standard_imports: tuple[str, ...] = ()  # python: the harmless standard ones every file may use
    forbidden: tuple[str, ...] = ()  # python: names the task forbids
    forbidden_torch: tuple[str, ...] = ()  # python: torch.<name> every task forbids
    dynamic_builtins: tuple[str, ...] = ()  # python: builtins that look code or names up at run time
    region_rules: tuple[tuple[str, tuple[str, ...]], ...] = ()  # cuda: (why, the identifiers it rules out)
    public_test: str | None = None  # the task's public test that runs the same check


def _grouped_region_rules() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The identifiers and prefixes a CUDA region may not use, grouped by the reason the checker gives."""
    groups: dict[str, list[str]] = {}
    for name, why in region_rules.FORBIDDEN_IDENTIFIERS.items():
        groups.setdefault(why, []).append(name)
    for prefix, why in region_rules.FORBIDDEN_PREFIXES.items():
        groups.setdefault(why, []).append(prefix + "…")
    return tuple((why, tuple(names)) for why, names in groups.items())


def public_rule_test(task: Task, language: str, tests: Path = PUBLIC_TESTS) -> str | None:
    """The name of the task's public test that checks a file of ``language`` by the rules, if it has one."""
    name = RULE_TESTS[language]
    for path in sorted(tests.glob(f"test_{task.id}_*.py")):
        if re.search(rf"^def {name}\(", path.read_text(encoding="utf-8"), re.MULTILINE):
            return name
    return None


def file_rules(name: str, task: Task, tests: Path = PUBLIC_TESTS) -> FileRules:
    if name.endswith((".cu", ".cuh")):
        return FileRules(
            name, "cuda", region_rules=_grouped_region_rules(), public_test=public_rule_test(task, "cuda", tests)
        )
    return FileRules(
        name,
        "python",
        public_test=public_rule_test(task, "python", tests),
        imports=task.rules.imports,
        standard_imports=tuple(m for m in policy.KIT_IMPORTS if m != "__future__"),
        forbidden=task.rules.forbidden,
        forbidden_torch=tuple(sorted(policy.KIT_FORBIDDEN_ATTRIBUTES)),
        dynamic_builtins=tuple(sorted(policy.DYNAMIC_BUILTINS - {"__builtins__"})),
    )


def task_rules(task: Task, tests: Path = PUBLIC_TESTS) -> list[FileRules]:
    return [file_rules(name, task, tests) for name in task.files]
