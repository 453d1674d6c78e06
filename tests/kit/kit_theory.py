"""What the tests of a task's theory questions share: one student's question of a kind, the grading of an answers
file that holds that student's key but for the answers a test changes, and one part's scored line."""

from __future__ import annotations

import re

from assignment.registry import load_registry
from assignment.theory import answers
from assignment.theory.questions import questions_for
from grader.grade.theory import answer_key, grade_theory

REGISTRY = load_registry()
IDS = [f"s{n:07d}" for n in range(60)] + ["alice", "bob.smith@uni.edu"]


def question(student_id: str, kind: str, registry=REGISTRY):
    return next(q for q in questions_for(student_id, registry.theory) if q.kind == kind)


def graded(student_id: str, change: dict, registry=REGISTRY):
    """The grading of an answers file that holds the key of ``student_id`` but for ``change``."""
    questions = questions_for(student_id, registry.theory)
    values = {k: v for q in questions if not q.written for k, v in answer_key(q).items()}
    values.update(change)
    written = {q.key: "A proof." for q in questions if q.written}
    text = answers.render(student_id, questions, registry, answers.Answers(student_id, values, written))
    return grade_theory(text.encode(), registry)


def outcome(result, part_key: str):
    """The scored line of one part ("q12c") of a grading."""
    number, label = re.fullmatch(r"q(\d+)([a-z])", part_key).groups()
    return next(t for t in result.tests if t.name.startswith(f"theory Q{number} ({label}) "))
