"""The beta-tester feedback form: questions in ``feedback.toml``, answers in ``feedback.json``.

    make feedback                      # answer in the terminal (resumes a half-filled feedback.json)
    python -m assignment.feedback --check feedback.json   # is this answer file complete and valid?

The terminal form asks only what is not yet validly answered, and saves after every answer (a temporary
file, then a rename: an interrupted session loses at most the answer being typed), so it can be left
and resumed on a remote GPU host. An answer file that cannot be read is never overwritten: the form
stops and says what is wrong with it.

``feedback.json``: ``{"schema_version": 2, "answers": {question id: value}, "updated": ISO time}``. Values:
a choice's text (a list of them for a multiple choice), an int 1-5 for a scale (or its ``not_attempted`` text, "did
not attempt", where it has one), a number, a string; null for an optional question skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

import tomllib

from assignment.atomic import write_atomic
from assignment.registry import load_registry

FORM_PATH = Path(__file__).with_name("feedback.toml")
TYPES = ("choice", "scale", "number", "text")
SCALE = (1, 5)
NOT_ATTEMPTED_KEY = "n"  # what a tester types in the terminal for a scale's not_attempted answer
ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")


class FeedbackError(ValueError):
    """The form or an answer file is not valid; the message names the question or the file."""


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    type: str
    required: bool
    choices: tuple[str, ...] = ()
    multiple: bool = False
    low: str = ""
    high: str = ""
    min: float = -math.inf
    max: float = math.inf
    max_length: int = 4000
    # A scale's extra answer for a task the tester never got to ("did not attempt"), saved as this text; "" for none.
    not_attempted: str = ""
    # The registry task this question is about (its difficulty, its hours), or None: lets the feedback summary
    # set the answers beside that task's scores. per_task questions get theirs from the expansion.
    task: str | None = None

    def check(self, value: Any) -> str | None:
        """None when ``value`` is a valid answer, else what is wrong with it."""
        if self.type == "choice":
            picked = value if self.multiple and isinstance(value, list) else [value]
            if self.multiple and not isinstance(value, list):
                return "a list of choices"
            if not picked or any(not isinstance(p, str) or p not in self.choices for p in picked):
                return f"one of {list(self.choices)}" if not self.multiple else f"choices from {list(self.choices)}"
            if len(set(picked)) != len(picked):
                return "each choice once"
            return None
        if self.type == "scale":
            ok = isinstance(value, int) and not isinstance(value, bool) and SCALE[0] <= value <= SCALE[1]
            skipped = bool(self.not_attempted) and value == self.not_attempted
            other = f", or {self.not_attempted!r}" if self.not_attempted else ""
            return (
                None if ok or skipped else f"an integer from {SCALE[0]} ({self.low}) to {SCALE[1]} ({self.high}){other}"
            )
        if self.type == "number":
            ok = (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
                and self.min <= value <= self.max
            )
            return None if ok else f"a number from {self.min:g} to {self.max:g}"
        ok = isinstance(value, str) and value.strip() != "" and len(value) <= self.max_length
        return None if ok else f"text of 1 to {self.max_length} characters"

    def parse(self, typed: str) -> Any:
        """The answer a line typed in the terminal stands for; ValueError says what to type instead."""
        typed = typed.strip()
        if self.type == "choice":
            numbers = [part.strip() for part in typed.split(",")] if self.multiple else [typed]
            try:
                picked = [self.choices[int(n) - 1] for n in numbers if n]
                if any(int(n) < 1 for n in numbers if n):
                    raise IndexError
            except (ValueError, IndexError):
                raise ValueError(
                    f"type the number of a choice (1-{len(self.choices)})"
                    + (", several separated by commas" if self.multiple else "")
                ) from None
            value: Any = picked if self.multiple else (picked[0] if picked else "")
        elif self.type == "scale":
            if self.not_attempted and typed.lower() in (NOT_ATTEMPTED_KEY, self.not_attempted):
                value = self.not_attempted
            else:
                try:
                    value = int(typed)
                except ValueError:
                    other = f", or {NOT_ATTEMPTED_KEY} ({self.not_attempted})" if self.not_attempted else ""
                    raise ValueError(f"type a whole number from {SCALE[0]} to {SCALE[1]}{other}") from None
        elif self.type == "number":
            try:
                value = float(typed)
            except ValueError:
                raise ValueError(f"type a number from {self.min:g} to {self.max:g}") from None
            value = int(value) if value.is_integer() else value
        else:
            value = typed
        problem = self.check(value)
        if problem:
            raise ValueError(f"expected {problem}")
        return value


@dataclass(frozen=True)
class Form:
    schema_version: int
    questions: tuple[Question, ...] = field(default_factory=tuple)

    def question(self, qid: str) -> Question:
        for q in self.questions:
            if q.id == qid:
                return q
        raise KeyError(qid)

    def problems(self, answers: dict) -> list[str]:
        """What keeps ``answers`` from being a complete, valid set (empty: it is one)."""
        found = []
        ids = {q.id for q in self.questions}
        for qid in answers:
            if qid not in ids:
                found.append(f"{qid}: not a question of this form")
        for q in self.questions:
            if q.id not in answers:
                if q.required:
                    found.append(f"{q.id}: not answered yet ({q.text})")
                continue
            if answers[q.id] is None and not q.required:  # skipped on purpose
                continue
            problem = q.check(answers[q.id])
            if problem:
                found.append(f"{q.id}: {answers[q.id]!r} is not valid; expected {problem}")
        return found

    def answered(self, q: Question, answers: dict) -> bool:
        """A valid answer, or an optional question skipped (null)."""
        if q.id not in answers:
            return False
        return (answers[q.id] is None and not q.required) or q.check(answers[q.id]) is None


def load_form(path: Path = FORM_PATH) -> Form:
    """The form, with per-task questions expanded over the registry's tasks; FeedbackError names what is wrong."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise FeedbackError(f"{path}: {exc}") from None
    version = raw.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise FeedbackError(f"{path}: schema_version must be a positive integer, got {version!r}")
    questions: list[Question] = []
    tasks = load_registry().tasks
    task_ids = tuple(t.id for t in tasks)
    for i, item in enumerate(raw.get("question", [])):
        where = f"{path.name}, question {i + 1} ({item.get('id', '?')})"
        question = _question(item, where, task_ids)
        if item.get("per_task"):
            for task in tasks:
                questions.append(
                    Question(
                        **{
                            **question.__dict__,
                            "id": f"{question.id}_{task.id}",
                            "text": f"{question.text}: {task.id} {task.title}",
                            "task": task.id,
                        }
                    )
                )
        else:
            questions.append(question)
    ids = [q.id for q in questions]
    duplicates = sorted({qid for qid in ids if ids.count(qid) > 1})
    if duplicates:
        raise FeedbackError(f"{path}: question ids must be unique; repeated: {', '.join(duplicates)}")
    if not questions:
        raise FeedbackError(f"{path}: no [[question]] entries")
    return Form(version, tuple(questions))


def _question(item: dict, where: str, task_ids: tuple[str, ...]) -> Question:
    known = {
        "id",
        "text",
        "type",
        "required",
        "choices",
        "multiple",
        "low",
        "high",
        "min",
        "max",
        "max_length",
        "per_task",
        "task",
        "not_attempted",
    }
    unknown = sorted(set(item) - known)
    if unknown:
        raise FeedbackError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if "not_attempted" in item and item.get("type") != "scale":
        raise FeedbackError(f"{where}: not_attempted is for a scale question")
    qid, text, kind = item.get("id"), item.get("text"), item.get("type")
    if not isinstance(qid, str) or not ID_PATTERN.match(qid):
        raise FeedbackError(f"{where}: id must be lower_snake_case text, got {qid!r}")
    if not isinstance(text, str) or not text.strip():
        raise FeedbackError(f"{where}: text is missing")
    if kind not in TYPES:
        raise FeedbackError(f"{where}: type must be one of {TYPES}, got {kind!r}")
    if not isinstance(item.get("required"), bool):
        raise FeedbackError(f"{where}: required must be true or false")
    args: dict[str, Any] = {"id": qid, "text": text.strip(), "type": kind, "required": item["required"]}
    if "task" in item:
        if item.get("per_task"):
            raise FeedbackError(f"{where}: a per_task question gets its task from the expansion; remove task")
        if item["task"] not in task_ids:
            raise FeedbackError(
                f"{where}: task must be one of the registry's task ids ({', '.join(task_ids)}), got {item['task']!r}"
            )
        args["task"] = item["task"]
    if kind == "choice":
        choices = item.get("choices")
        if (
            not isinstance(choices, list)
            or len(choices) < 2
            or not all(isinstance(c, str) and c for c in choices)
            or len(set(choices)) != len(choices)
        ):
            raise FeedbackError(f"{where}: a choice question needs at least two distinct choices")
        args |= {"choices": tuple(choices), "multiple": bool(item.get("multiple", False))}
    elif kind == "scale":
        args |= {"low": str(item.get("low", "")), "high": str(item.get("high", ""))}
        if "not_attempted" in item:
            if not isinstance(item["not_attempted"], str) or not item["not_attempted"].strip():
                raise FeedbackError(f'{where}: not_attempted must be the text of that answer, e.g. "did not attempt"')
            args["not_attempted"] = item["not_attempted"].strip()
    elif kind == "number":
        low, high = item.get("min", -math.inf), item.get("max", math.inf)
        if not all(isinstance(x, (int, float)) for x in (low, high)) or low > high:
            raise FeedbackError(f"{where}: min and max must be numbers with min <= max")
        args |= {"min": float(low), "max": float(high)}
    else:
        length = item.get("max_length", 4000)
        if not isinstance(length, int) or length < 1:
            raise FeedbackError(f"{where}: max_length must be a positive integer")
        args |= {"max_length": length}
    return Question(**args)


# --------------------------------------------------------------------------- the answer file


def parse_answers(data: bytes, form: Form) -> dict:
    """The answers in the bytes of an answer file (not checked against the questions: ``form.problems``);
    FeedbackError says why the file cannot be used at all."""
    try:
        payload = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise FeedbackError(f"not a readable answer file: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise FeedbackError(f"not a readable answer file: not valid JSON ({exc})") from None
    except RecursionError:
        raise FeedbackError("not a readable answer file: not valid JSON (nested too deeply)") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("answers"), dict):
        raise FeedbackError('expected an object with "answers"')
    if payload.get("schema_version") != form.schema_version:
        raise FeedbackError(
            f"answers to form version {payload.get('schema_version')!r}; the form is version {form.schema_version}"
        )
    return dict(payload["answers"])


def load_answers(path: Path, form: Form) -> dict:
    """The answers saved in ``path`` ({} when there is no file yet); FeedbackError if it cannot be used."""
    if not path.exists():
        return {}
    try:
        return parse_answers(path.read_bytes(), form)
    except OSError as exc:
        raise FeedbackError(f"{path}: not a readable answer file ({exc}); it was left as it is") from None
    except FeedbackError as exc:
        raise FeedbackError(f"{path}: {exc}; fix or move it aside, it was left as it is") from None


def save_answers(path: Path, form: Form, answers: dict) -> None:
    """Write atomically (assignment.atomic): a reader never sees half an answer file."""
    payload = {
        "schema_version": form.schema_version,
        "answers": answers,
        "updated": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_atomic(path, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------- the terminal form


def _prompt_lines(q: Question, number: int, total: int) -> list[str]:
    lines = [f"[{number}/{total}] {q.text}" + ("" if q.required else "  (optional: Enter skips)")]
    if q.type == "choice":
        lines += [f"    {i}. {c}" for i, c in enumerate(q.choices, 1)]
        lines.append("    type the number" + ("s, separated by commas" if q.multiple else ""))
    elif q.type == "scale":
        skip = f"; {NOT_ATTEMPTED_KEY} = {q.not_attempted}" if q.not_attempted else ""
        lines.append(f"    {SCALE[0]} = {q.low} ... {SCALE[1]} = {q.high}{skip}")
    elif q.type == "number":
        lines.append(f"    a number from {q.min:g} to {q.max:g}")
    return lines


def run_terminal(
    form: Form, path: Path, read: Callable[[str], str] = input, write: Callable[[str], None] = print
) -> bool:
    """Ask every question not yet validly answered; save after each. True when the file is complete."""
    answers = load_answers(path, form)
    todo = [q for q in form.questions if not form.answered(q, answers)]
    if not todo:
        write(f"{path}: every question is answered (delete an answer from it to be asked again)")
        return True
    done = len(form.questions) - len(todo)
    write(
        f"Feedback form: {len(todo)} question(s) to go{f' ({done} answered earlier)' if done else ''}. "
        "Answers are saved as you go; type q to stop and resume later."
    )
    for number, q in enumerate(todo, done + 1):
        write("")
        for line in _prompt_lines(q, number, len(form.questions)):
            write(line)
        while True:
            try:
                typed = read("> ")
            except EOFError:
                write(f"\nstopped; {path} keeps the answers so far")
                return False
            if typed.strip().lower() in ("q", "quit"):
                write(f"stopped; {path} keeps the answers so far: run it again to go on")
                return False
            if not typed.strip() and not q.required:
                answers[q.id] = None  # skipped: not asked again
            else:
                try:
                    answers[q.id] = q.parse(typed)
                except ValueError as exc:
                    write(f"    {exc}")
                    continue
            save_answers(path, form, answers)
            break
    problems = form.problems(answers)
    write("")
    write(f"saved {path}" + (": complete, thank you" if not problems else f"; still missing: {len(problems)}"))
    return not problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--file", type=Path, default=Path("feedback.json"), help="the answer file (default: %(default)s)"
    )
    parser.add_argument("--check", type=Path, metavar="FILE", help="validate an answer file and exit")
    args = parser.parse_args(argv)
    try:
        form = load_form()
        if args.check:
            if not args.check.exists():
                print(f"{args.check}: no such file", file=sys.stderr)
                return 1
            problems = form.problems(load_answers(args.check, form))
            for problem in problems:
                print(f"{args.check}: {problem}", file=sys.stderr)
            if not problems:
                print(f"{args.check}: complete and valid")
            return 1 if problems else 0
        return 0 if run_terminal(form, args.file) else 1
    except FeedbackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nstopped; {args.file} keeps the answers saved so far", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
