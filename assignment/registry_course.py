"""Reading the registry's course-level parts (assignment/tasks.toml) into the schema's types
(assignment/registry_schema.py): the handout's chapters, the hidden seeds' salt, the theory part, the integrity
policy, the notes file and the extra files a submission carries."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


from assignment.registry_schema import (
    THEORY_KINDS,
    Chapter,
    RegistryError,
    RubricItem,
    Theory,
    TheoryKind,
)
from assignment.registry_tasks import (
    require_key,
)


def parse_chapters(raw: Any, path: Path, task_ids: tuple[str, ...]) -> tuple[Chapter, ...]:
    if not isinstance(raw, list):
        raise RegistryError(path, None, "chapter", "must be an array of tables ([[chapter]])")
    chapters: list[Chapter] = []
    for index, item in enumerate(raw):
        where = f"chapter[{index}]."
        if not isinstance(item, dict):
            raise RegistryError(path, None, where[:-1], "must be a table { anchor, title, text, before }")
        unknown = set(item) - {"anchor", "title", "text", "before"}
        if unknown:
            raise RegistryError(path, None, where[:-1], f"unknown field {sorted(unknown)[0]!r}")
        chapter = Chapter(
            require_key(item, "anchor", str, path, None, where),
            require_key(item, "title", str, path, None, where),
            require_key(item, "text", str, path, None, where),
            item.get("before"),
        )
        if chapter.before is not None and chapter.before not in task_ids:
            raise RegistryError(
                path,
                None,
                where + "before",
                f"{chapter.before!r} is not a task id ({', '.join(task_ids)}); leave it out to place the chapter "
                "after the last task",
            )
        if chapter.anchor in task_ids or chapter.anchor in (c.anchor for c in chapters):
            raise RegistryError(path, None, where + "anchor", f"{chapter.anchor!r} is taken (a task or a chapter)")
        chapters.append(chapter)
    return tuple(chapters)


# A hidden-seed salt shorter than this is refused: it is the only secret between a student's id and their hidden inputs.
MIN_SALT_CHARS = 16


def parse_hidden_seed(raw: Any, path: Path, theory: Theory | None, edition: str) -> str | None:
    if raw is None:
        return None
    if edition == "student":
        raise RegistryError(path, None, "hidden_seed", "is in a student edition: the salt must never ship")
    if not isinstance(raw, dict) or set(raw) != {"salt"}:
        raise RegistryError(path, None, "hidden_seed", "must be a table with one field, salt")
    salt = require_key(raw, "salt", str, path, None, "hidden_seed.")
    if len(salt.strip()) < MIN_SALT_CHARS:
        raise RegistryError(
            path,
            None,
            "hidden_seed.salt",
            f"must be a secret of {MIN_SALT_CHARS} characters or "
            "more (python -c 'import secrets; print(secrets.token_hex(16))' makes one)",
        )
    if theory is not None and salt.strip() == theory.salt.strip():
        raise RegistryError(path, None, "hidden_seed.salt", "must differ from theory.salt, which ships to students")
    return salt


def parse_theory(
    raw: Any, path: Path, edition: str, submit_files: tuple[str, ...], task_bonus: dict[str, bool]
) -> Theory:
    """``task_bonus``: each task id and its bonus flag, which a kind that names the task takes on."""
    if not isinstance(raw, dict):
        raise RegistryError(path, None, "theory", "must be a table ([theory])")
    salt = require_key(raw, "salt", str, path, None, "theory.")
    if len(salt.strip()) < 4:
        raise RegistryError(path, None, "theory.salt", "must be a string of 4 characters or more")
    answers_file = require_key(raw, "answers_file", str, path, None, "theory.")
    if answers_file not in submit_files:
        raise RegistryError(
            path,
            None,
            "theory.answers_file",
            f"{answers_file!r} must be in course.submit_files, or `make submit` would not pack it",
        )
    questions = require_key(raw, "questions", dict, path, None, "theory.")
    kinds = []
    for name, spec in questions.items():
        where = f"theory.questions.{name}."
        if name not in THEORY_KINDS:
            raise RegistryError(path, None, where[:-1], f"is not a kind of question: one of {THEORY_KINDS}")
        if not isinstance(spec, dict):
            raise RegistryError(path, None, where[:-1], "must be a table { title, points, count, rtol[, task] }")
        unknown = set(spec) - {"title", "points", "count", "rtol", "task"}
        if unknown:
            raise RegistryError(path, None, where[:-1], f"unknown field {sorted(unknown)[0]!r}")
        count = spec.get("count", 1)
        task = spec.get("task")
        if task is not None and (not isinstance(task, str) or task not in task_bonus):
            raise RegistryError(
                path,
                None,
                f"{where}task",
                f"names no task of the registry ({task!r}; the tasks: {', '.join(task_bonus)})",
            )
        kind = TheoryKind(
            name,
            require_key(spec, "title", str, path, None, where),
            float(require_key(spec, "points", float, path, None, where)),
            count if isinstance(count, int) and not isinstance(count, bool) else 0,
            float(require_key(spec, "rtol", float, path, None, where)),
            task,
            task_bonus.get(task, False),
        )
        if kind.points <= 0 or kind.count < 1 or not 0 <= kind.rtol < 0.5:
            raise RegistryError(path, None, where[:-1], "needs points > 0, count >= 1 (an integer) and 0 <= rtol < 0.5")
        kinds.append(kind)
    if not kinds:
        raise RegistryError(path, None, "theory.questions", "must name at least one kind of question")
    proof = require_key(raw, "proof", dict, path, None, "theory.")
    proof_points = float(require_key(proof, "points", float, path, None, "theory.proof."))
    if proof_points < 0:
        raise RegistryError(path, None, "theory.proof.points", "must not be negative")
    rubric = []
    if edition != "student":  # the bundle's copy has no rubric: it stays with the instructor
        items = require_key(
            require_key(raw, "rubric", dict, path, None, "theory."), "items", list, path, None, "theory.rubric."
        )
        for i, item in enumerate(items):
            where = f"theory.rubric.items[{i}]."
            if not isinstance(item, dict):
                raise RegistryError(path, None, where[:-1], "must be a table { points, criterion }")
            rubric.append(
                RubricItem(
                    float(require_key(item, "points", float, path, None, where)),
                    require_key(item, "criterion", str, path, None, where).strip(),
                )
            )
        if not math.isclose(sum(item.points for item in rubric), proof_points):
            raise RegistryError(
                path,
                None,
                "theory.rubric.items",
                f"award {sum(i.points for i in rubric):g} points but the proof is worth {proof_points:g}",
            )
    return Theory(
        salt,
        answers_file,
        tuple(kinds),
        require_key(proof, "title", str, path, None, "theory.proof."),
        proof_points,
        tuple(rubric),
    )


def parse_policy(raw: Any, path: Path) -> str:
    if not isinstance(raw, str):
        raise RegistryError(path, None, "course.integrity_policy", "must be a string (Markdown)")
    return raw.strip()


def parse_notes_file(raw: Any, path: Path, submit_files: tuple[str, ...], policy: str) -> str | None:
    """The integrity note's file name: packed by `make submit` (so in submit_files) and named by the policy that
    asks for it (so a student reading the policy knows where the note goes)."""
    if raw is None:
        return None
    if not isinstance(raw, str) or raw not in submit_files:
        raise RegistryError(
            path,
            None,
            "course.notes_file",
            f"{raw!r} must be in course.submit_files, or `make submit` would not pack it",
        )
    if policy and f"`{raw}`" not in policy:
        raise RegistryError(
            path,
            None,
            "course.notes_file",
            f"the integrity policy must name `{raw}`, so students know where the note goes",
        )
    return raw


def parse_submit_files(raw: Any, path: Path, student_files: set[str]) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(f, str) and f and "/" not in f for f in raw):
        raise RegistryError(path, None, "course.submit_files", "must list plain file names")
    clash = sorted(set(raw) & student_files)
    if clash:
        raise RegistryError(path, None, "course.submit_files", f"{clash[0]} is already a task's student file")
    return tuple(raw)
