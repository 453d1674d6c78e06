"""Every kind of hidden check can be run by the student, and the task's handout section says it is graded.

Each hidden test names, in its ``reproduce`` marker, the public test or make target that runs the same kind of
check (the grader shows it with a failure). These tests hold the markers to that: the public tests named exist
in the task's public test files, the make targets exist in the student's Makefile, and the kinds a student could
not guess (compute-sanitizer, bitwise repeatability, unchanged inputs, structure) are stated in the section.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from assignment.registry import load_registry

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
MAKE_TARGET = re.compile(r"make (?P<target>[a-z-]+) T=(?P<task>t[0-9]+)")


def hidden_tests(task_id: str) -> list[tuple[str, str]]:
    """(test name, reproduce text) of the task's hidden suite, read from its source."""
    path = REPO / "grader" / "hidden" / f"test_{task_id}_hidden.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    public = next(
        (
            n.value.value
            for n in tree.body
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PUBLIC" for t in n.targets)
        ),
        "",
    )
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            marks = [d for d in node.decorator_list if "reproduce" in ast.unparse(d)]
            assert marks, (
                f"{path.name}::{node.name} has no @pytest.mark.reproduce(...): which public test or make "
                "target runs this kind of check?"
            )
            text = ast.unparse(marks[0].args[0]) if isinstance(marks[0], ast.Call) else ""
            found.append((node.name, text.replace("{PUBLIC}", public).strip("f'\"")))
    return found


def public_test_names(task_id: str) -> set[str]:
    names = set()
    for path in (REPO / "tests").glob(f"test_{task_id}_*.py"):
        names |= {
            n.name
            for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
        }
    return names


def section_text(task_id: str) -> str:
    text = (REPO / "assignment" / "text" / REGISTRY.task(task_id).text).read_text(encoding="utf-8")
    return " ".join(text.split())  # a phrase may break across lines


STUDENT_TARGETS = set(re.findall(r"^([a-z-]+):", (REPO / "assignment/student.mk").read_text(), re.M)) | {"test"}


@pytest.mark.parametrize("task_id", [t.id for t in REGISTRY.available])
def test_each_hidden_check_names_a_public_test_or_target_the_student_has(task_id):
    for name, reproduce in hidden_tests(task_id):
        target = MAKE_TARGET.search(reproduce)
        assert target, f"{task_id} hidden {name}: reproduce {reproduce!r} names no 'make <target> T=tN'"
        assert target["target"] in STUDENT_TARGETS, (
            f"{task_id} hidden {name}: make {target['target']} is not a student target (assignment/student.mk)"
        )
        publics = public_test_names(target["task"])  # t5's file check may point to t4's public test of the file
        named = re.findall(r"\b(test_[a-z0-9_]+)", reproduce)
        missing = [n for n in named if n not in publics]
        assert not missing, f"{task_id} hidden {name} points students to public tests that do not exist: {missing}"


# A hidden check's kind (recognised from the hidden test's name) -> words its task's section must contain.
DISCLOSED = {
    "sanitizer": ("make sanitize",),
    "repeatable": ("bitwise",),
    "unchanged": ("unchanged",),
    "local_memory": ("local memory",),
}


@pytest.mark.parametrize("task_id", [t.id for t in REGISTRY.available])
def test_the_section_states_the_kinds_of_check_a_student_would_not_guess(task_id):
    text = section_text(task_id).lower()
    for name, _ in hidden_tests(task_id):
        for kind, words in DISCLOSED.items():
            if kind in name:
                assert all(w in text for w in words), (
                    f"{task_id}'s hidden suite has {name}, but its handout "
                    f"section ({REGISTRY.task(task_id).text}) never says {words}"
                )
