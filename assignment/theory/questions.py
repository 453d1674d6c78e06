"""The theory questions of one student: the id, every question numbered in the registry's order, the printing.

Every number of a question is drawn from the student's id and the course's salt (``[theory]`` in the
registry) through SHA-256, never Python's ``hash()`` or ``random``: the same id gets the same questions on
every machine and Python version, and two ids get different numbers. The kinds, their points and tolerances
come from the registry; the questions' wording and the ranges their numbers are drawn from are the kinds'
(kinds.py, and kinds_tensor_cores.py and kinds_hopper.py for the tensor-core and Hopper ones).

This package ships to students, so it only *asks*: it computes no answer (nor anything a question could be
checked against). The answer key is the grader's (``grader/grade/theory.py``, instructor-only), computed from the
same ``Question.params``.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import Any

from assignment.registry import Registry, Theory
from assignment.theory.kinds import COURSE_KINDS, Draw, number_text
from assignment.theory.kinds_hopper import HOPPER_KINDS
from assignment.theory.kinds_tensor_cores import TENSOR_CORE_KINDS

ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._@+-]{0,63}$")
PROOF_KIND = "proof"


class TheoryError(ValueError):
    """A student id, an answers file or a question that cannot be used; the message says what to do."""


def normalise_id(raw: str | None) -> str:
    """The id as the questions are drawn from it: trimmed and lower-case, so 'S123 ' and 's123' agree."""
    student_id = (raw or "").strip().lower()
    if not student_id:
        raise TheoryError("no student id: give it as `make theory ID=<your id>` (or set STUDENT_ID)")
    if not ID_PATTERN.match(student_id):
        raise TheoryError(
            f"student id {raw!r} is not usable: letters, digits and . _ @ + - only, "
            "starting with a letter or digit, at most 64 characters"
        )
    return student_id


# --------------------------------------------------------------------------- the questions


@dataclass(frozen=True)
class Part:
    key: str  # the answers file's key, e.g. "q1a"
    label: str  # "(a)"
    prompt: str
    unit: str


@dataclass(frozen=True)
class Question:
    number: int
    kind: str  # a registry kind, or "proof" for the written one
    title: str
    text: str  # the statement, every number in it
    params: dict[str, Any]  # the same numbers, for the grader's answer key
    parts: tuple[Part, ...]  # the numeric answers; () for the written proof
    points: float
    rtol: float | None  # None for the written proof
    task: str | None = None  # the task the question belongs to (its points are the task's), None: the course's
    bonus: bool = False  # bonus points: its task is a bonus task

    @property
    def written(self) -> bool:
        return self.kind == PROOF_KIND

    @property
    def key(self) -> str:
        """The answers file's key of a written answer."""
        return f"q{self.number}"

    @property
    def part_points(self) -> float:
        return self.points / len(self.parts) if self.parts else self.points


PROOF_TEXT = """\
Scores arrive in blocks S_1, …, S_J, each score s with a value vector v_s. Starting from m_0~=~−∞,
l_0~=~0 and acc_0~=~0 (and e^(−∞)~=~0), block j updates
  m_j   = max(m_(j−1), max over s in S_j of s)
  l_j   = e^(m_(j−1) − m_j) · l_(j−1)   + Σ over s in S_j of e^(s − m_j)
  acc_j = e^(m_(j−1) − m_j) · acc_(j−1) + Σ over s in S_j of e^(s − m_j) · v_s
Prove by induction on j that after block j: m_j is the largest score of S_1~∪~…~∪~S_j,
l_j~=~Σ~e^(s~−~m_j) and acc_j~=~Σ~e^(s~−~m_j)~·~v_s, both sums over S_1~∪~…~∪~S_j. Conclude that
acc_J~/~l_J is the softmax-weighted average of the values and that m_J~+~ln~l_J~=~ln~Σ~e^s, and say why no
exponent in the updates is ever positive. Half a page at most; plain text or LaTeX."""

GENERATORS = {**COURSE_KINDS, **TENSOR_CORE_KINDS, **HOPPER_KINDS}


def questions_for(student_id: str, theory: Theory) -> list[Question]:
    """Every question of one student, numbered in the registry's order: the course's own, the written proof, then
    those that belong to a task (the course's keep their numbers, and the proof its key, when a task's are added).
    A question's numbers depend on the salt, the id, its kind and its instance only, never on its position."""
    student_id = normalise_id(student_id)
    questions: list[Question] = []
    course_kinds = [kind for kind in theory.kinds if kind.task is None]
    task_kinds = [kind for kind in theory.kinds if kind.task is not None]
    _add_numeric(questions, course_kinds, theory, student_id)
    questions.append(
        Question(
            len(questions) + 1, PROOF_KIND, theory.proof_title, reflow(PROOF_TEXT), {}, (), theory.proof_points, None
        )
    )
    _add_numeric(questions, task_kinds, theory, student_id)
    return questions


def _add_numeric(questions: list[Question], kinds, theory: Theory, student_id: str) -> None:
    for kind in kinds:
        for instance in range(kind.count):
            number = len(questions) + 1
            params, text, parts = GENERATORS[kind.name](Draw(theory.salt, student_id, kind.name, str(instance)))
            questions.append(
                Question(
                    number,
                    kind.name,
                    kind.title,
                    reflow(text),
                    params,
                    tuple(
                        Part(f"q{number}{chr(97 + i)}", f"({chr(97 + i)})", prompt, unit)
                        for i, (prompt, unit) in enumerate(parts)
                    ),
                    kind.points / kind.count,
                    kind.rtol,
                    kind.task,
                    kind.bonus,
                )
            )


# --------------------------------------------------------------------------- printing


def reflow(text: str, width: int = 98) -> str:
    """Prose lines joined and wrapped to ``width`` (never at a "~", which becomes a space); indented lines (lists,
    formulas) and blank lines kept as they are."""
    out: list[str] = []
    prose: list[str] = []
    for line in text.splitlines() + [""]:
        if line and not line.startswith(" "):
            prose.append(line)
            continue
        if prose:
            out.append(textwrap.fill(" ".join(prose), width, break_on_hyphens=False, break_long_words=False))
            prose = []
        out.append(line)
    return "\n".join(out[:-1]).replace("~", " ")


def tolerance_text(rtol: float | None) -> str:
    if rtol is None:
        return "graded by hand"
    return "exact" if rtol == 0 else f"within {number_text(rtol * 100)}% of the key"


def points_text(question: Question) -> str:
    """'3 points', or '3 bonus points of t8' for a question of a bonus task."""
    if question.bonus:
        return f"{number_text(question.points)} bonus points of {question.task}"
    return f"{number_text(question.points)} points{f' of {question.task}' if question.task else ''}"


def theory_points_text(theory: Theory) -> str:
    """'20 points', or '20 points + 8.5 bonus points (the questions of t8)'."""
    bonus_tasks = sorted({kind.task for kind in theory.kinds if kind.bonus})
    text = f"{number_text(theory.regular_points)} points"
    if bonus_tasks:
        text += f" + {number_text(theory.bonus_points)} bonus points (the questions of {', '.join(bonus_tasks)})"
    return text


def render_text(student_id: str, questions: list[Question], registry: Registry) -> str:
    theory = registry.theory
    lines = [
        textwrap.fill(
            f"Theory questions for student {student_id!r}: {registry.title}, {theory_points_text(theory)}",
            100,
            break_long_words=False,
        ),
        f"Your answers go in {theory.answers_file}; `make submit` packs it.",
        "",
    ]
    for q in questions:
        lines.append(f"Q{q.number}. {q.title} ({points_text(q)}, {tolerance_text(q.rtol)})")
        lines += ["  " + line if line else "" for line in q.text.splitlines()]
        for part in q.parts:
            lines.append(
                textwrap.fill(
                    f"{part.label} {part.prompt} [{part.unit}]  -> {part.key}",
                    100,
                    initial_indent="  ",
                    subsequent_indent="      ",
                )
            )
        if q.written:
            lines.append(f"  Write the proof in {theory.answers_file}, [written] {q.key}.")
        lines.append("")
    return "\n".join(lines)


def render_markdown(student_id: str, questions: list[Question], registry: Registry) -> str:
    theory = registry.theory
    lines = [
        f"# Theory questions for `{student_id}`",
        "",
        (
            f"{registry.title}: {theory_points_text(theory)}. Answers go in `{theory.answers_file}` "
            "(`make theory` writes it); `make submit` packs it."
        ),
        "",
    ]
    for q in questions:
        lines += [
            f"## Q{q.number}. {q.title}",
            "",
            f"*{points_text(q)}, {tolerance_text(q.rtol)}.*",
            "",
            "```text",
            q.text,
            "```",
            "",
        ]
        lines += [f"- {part.label} {part.prompt} [{part.unit}]: `{part.key}`" for part in q.parts]
        if q.written:
            lines.append(f"- Your proof: `[written] {q.key}` in `{theory.answers_file}`.")
        lines.append("")
    return "\n".join(lines)
