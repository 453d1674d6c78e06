"""The theory answers file (``theory_answers.toml`` by default; the registry's ``[theory] answers_file``).

    student_id = "s1234567"

    [answers]
    q1a = 12582912        # a number in the unit named beside it; "" while not answered
    q1b = "1.2e6"         # a number in a string is read too

    [written]
    q6 = '''
    The proof, as plain text or LaTeX (a literal string: backslashes stay as they are).
    '''

``make theory`` writes it with one empty entry per question and, run again, adds what is missing while
keeping every answer already written (the previous file goes to ``.bak``); a file it cannot read, or one that
belongs to another id, is never touched. ``make submit`` packs it and warns about what is still missing; the
grader reads it with ``parse`` and ``number`` below, so a student checks exactly what the grader will read.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from assignment.atomic import write_atomic
from assignment.registry import Registry, Theory
from assignment.theory.kinds import number_text
from assignment.theory.questions import (
    Question,
    TheoryError,
    normalise_id,
    points_text,
    questions_for,
    tolerance_text,
)


class AnswersError(TheoryError):
    """An answers file that cannot be read as one; the message names the file and what is wrong."""


@dataclass
class Answers:
    student_id: str | None
    answers: dict[str, Any] = field(default_factory=dict)  # numeric answers, as written
    written: dict[str, Any] = field(default_factory=dict)  # the written proof(s)


def parse(text: str, where: str) -> Answers:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AnswersError(
            f'{where} is not valid TOML ({exc}); fix that line (a number, or "" while not '
            "answered; the proof between ''' quotes)"
        ) from None
    student_id = data.get("student_id")
    if student_id is not None and not isinstance(student_id, str):
        raise AnswersError(f"{where}: student_id must be a string in quotes, got {student_id!r}")
    tables = {}
    for name in ("answers", "written"):
        table = data.get(name, {})
        if not isinstance(table, dict):
            raise AnswersError(f"{where}: '{name}' must be a table ([{name}]), got {type(table).__name__}")
        tables[name] = table
    return Answers(student_id, tables["answers"], tables["written"])


def load(path: Path) -> Answers:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AnswersError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise AnswersError(f"{path} cannot be read ({exc.strerror or exc})") from None
    return parse(text, str(path))


_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?([eE][+-]?\d+)?$")


def number(value: Any) -> float | None:
    """An answer as a number; None while it is not answered ("" or absent); ValueError saying why otherwise."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is not a number")  # noqa: TRY004 (one error for every bad answer)
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if _THOUSANDS.match(text):
            text = text.replace(",", "")
        try:
            result = float(text)
        except ValueError:
            raise ValueError(
                f"{value!r} is not a number (write digits only, e.g. 1.5e9; the unit is given by the question)"
            ) from None
    else:
        raise ValueError(f"a {type(value).__name__} is not a number")  # noqa: TRY004
    if not math.isfinite(result):
        raise ValueError(f"{value!r} is not a finite number")
    return result


def problems(answers: Answers, questions: list[Question], student_id: str) -> list[str]:
    """What stops each answer from being graded: missing, empty, not a number, another student's id."""
    found = []
    if not answers.student_id:
        found.append(f"student_id: missing (these are {student_id!r}'s questions)")
    elif not _same_id(answers.student_id, student_id):
        found.append(f"student_id is {answers.student_id!r}, but these are {student_id!r}'s questions")
    for question in questions:
        if question.written:
            text = answers.written.get(question.key)
            if not isinstance(text, str) or not text.strip():
                found.append(f"{question.key}: no proof written yet (Q{question.number}, [written])")
            continue
        for part in question.parts:
            if part.key not in answers.answers:
                found.append(f"{part.key}: missing (Q{question.number} {part.label}; `make theory` adds it back)")
                continue
            try:
                if number(answers.answers[part.key]) is None:
                    found.append(f"{part.key}: not answered yet (Q{question.number} {part.label})")
            except ValueError as exc:
                found.append(f"{part.key}: {exc}")
    return found


def file_problems(text: str, theory: Theory) -> list[str]:
    """Everything that would keep an answer in this file from being graded, read as the grader reads it."""
    try:
        found = parse(text, theory.answers_file)
    except AnswersError as exc:
        return [str(exc)]
    if not found.student_id:
        return ["student_id: missing, so the questions are unknown: `make theory ID=<your id>` puts it back"]
    try:
        student_id = normalise_id(found.student_id)
    except TheoryError as exc:
        return [f"student_id: {exc}"]
    return problems(found, questions_for(student_id, theory), student_id)


def _same_id(recorded: str, student_id: str) -> bool:
    try:
        return normalise_id(recorded) == student_id
    except TheoryError:
        return False


# --------------------------------------------------------------------------- writing the file


HEADER = """\
# Your answers to the theory questions of {title}; `make theory` prints the questions.
# They are drawn from the student_id below: keep it as it is.
# Write each answer as a number in the unit named beside it: 12288, 1.2288e4 and "12288" are all read.
# "" is a question not answered yet. Running `make theory` again keeps every answer written here;
# `make submit` packs this file. `python -m assignment.theory --check` lists what is still missing.
"""


def toml_value(value: Any, key: str) -> str:
    """A kept answer written back as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # 1e+16, inf and nan are TOML too
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    raise AnswersError(f'{key} holds a {type(value).__name__}; write a number (or "") there by hand first')


def written_value(text: str) -> str:
    """A literal multi-line string keeps LaTeX's backslashes as they are; a text holding ''' falls back."""
    if "'''" in text:
        return json.dumps(text)
    return "'''\n" + text.strip("\n") + ("\n" if text.strip("\n") else "") + "'''"


def render(student_id: str, questions: list[Question], registry: Registry, kept: Answers | None = None) -> str:
    kept = kept or Answers(student_id)
    lines = [HEADER.format(title=registry.title), f"student_id = {json.dumps(student_id)}", "", "[answers]"]
    asked: set[str] = set()
    for question in questions:
        if question.written:
            continue
        lines.append(
            f"# Q{question.number} {question.title} ({points_text(question)}, {tolerance_text(question.rtol)})"
        )
        for part in question.parts:
            asked.add(part.key)
            value = toml_value(kept.answers[part.key], part.key) if part.key in kept.answers else '""'
            lines.append(f"{part.key} = {value}  # {part.label} {part.prompt} [{part.unit}]")
    others = [key for key in kept.answers if key not in asked]
    if others:
        lines.append("# Not among the questions above, kept as written:")
        lines += [f"{_key(key)} = {toml_value(kept.answers[key], key)}" for key in others]
    lines += ["", "[written]"]
    for question in questions:
        if question.written:
            asked.add(question.key)
            text = kept.written.get(question.key, "")
            lines.append(
                f"# Q{question.number} {question.title} ({number_text(question.points)} points, graded by "
                "hand): between the ''' quotes, plain text or LaTeX"
            )
            lines.append(f"{question.key} = {written_value(text if isinstance(text, str) else str(text))}")
    for key in (k for k in kept.written if k not in asked):
        value = kept.written[key]
        lines.append(f"{_key(key)} = {written_value(value) if isinstance(value, str) else toml_value(value, key)}")
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def existing_answers(path: Path, student_id: str) -> Answers | None:
    """The answers already in ``path`` (None: no file yet), after refusing a file that cannot be read or that holds
    another student's answers. ``make theory`` asks this first, so that a refusal comes before anything is printed
    or written (the questions file included)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        kept = load(path)
    except AnswersError as exc:
        raise AnswersError(f"{exc}\n{path} was left as it is") from None
    if kept.student_id and not _same_id(kept.student_id, student_id):
        raise AnswersError(
            f"{path} holds the answers of student {kept.student_id!r}, not {student_id!r}; it was "
            f"left as it is, and no questions were written (use ID={kept.student_id}, or move the file away to "
            f"start {student_id!r}'s)"
        )
    return kept


def prepare(path: Path, student_id: str, questions: list[Question], registry: Registry) -> str:
    """Create the answers file, or add what it lacks while keeping every answer; what was done, in a line."""
    path = Path(path)
    kept = existing_answers(path, student_id)
    if kept is None:
        write_atomic(path, render(student_id, questions, registry))
        count = sum(len(q.parts) for q in questions) + sum(q.written for q in questions)
        return f"wrote {path}: {count} answers to fill in; `make submit` packs it"
    missing = missing_entries(kept, questions)
    still_open = len(problems(kept, questions, student_id))
    if not missing:
        return (
            f"kept {path} as it is: {still_open} answer(s) still to give"
            if still_open
            else f"kept {path} as it is: every question answered"
        )
    backup = path.with_name(path.name + ".bak")
    shutil.copy2(path, backup)
    write_atomic(path, render(student_id, questions, registry, kept))
    return (
        f"added {len(missing)} missing entr{'y' if len(missing) == 1 else 'ies'} to {path} "
        f"({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}), keeping every answer "
        f"(the previous file is {backup.name})"
    )


def missing_entries(answers: Answers, questions: list[Question]) -> list[str]:
    """The entries ``make theory`` would add: the id, and the key of every question the file lacks."""
    keys = [] if answers.student_id else ["student_id"]
    for question in questions:
        if question.written:
            keys += [] if question.key in answers.written else [question.key]
        else:
            keys += [part.key for part in question.parts if part.key not in answers.answers]
    return keys
