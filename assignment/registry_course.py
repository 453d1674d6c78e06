"""Reading the registry's course-level parts (assignment/tasks.toml) into the schema's types
(assignment/registry_schema.py): the handout's chapters, the hidden seeds' salt, the theory part, and the checks of
[course] that join its keys with others (the notes file, the extra files a submission carries). Each key is checked by
its own declaration in the schema (assignment/registry_keys.py reads it); what is checked here joins several, each
check made once."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from assignment.registry_keys import Where, read_table
from assignment.registry_schema import Chapter, Registry, Theory


def read_chapters(raw: Any, where: Where) -> tuple[Chapter, ...]:
    """``[[chapter]]``: each anchor its own (no task's, no other chapter's)."""
    if not isinstance(raw, list):
        raise where.error("chapter", "must be an array of tables ([[chapter]])")
    chapters: list[Chapter] = []
    for index, table in enumerate(raw):
        inner = where.inside(f"chapter[{index}]")
        chapter = read_table(Chapter, table, inner)
        if chapter.anchor in where.task_ids or chapter.anchor in (c.anchor for c in chapters):
            raise inner.error("anchor", f"{chapter.anchor!r} is taken (a task or a chapter)")
        chapters.append(chapter)
    return tuple(chapters)


# A hidden-seed salt shorter than this is refused: it is the only secret between a student's id and their hidden inputs.
MIN_SALT_CHARS = 16


def read_hidden_seed(raw: Any, where: Where, theory: Theory | None) -> str | None:
    """``[hidden_seed] salt``: instructor-only, a secret long enough, and not the theory's salt (which ships)."""
    if raw is None:
        return None
    if where.edition == "student":
        raise where.error("hidden_seed", "is in a student edition: the salt must never ship")
    if not isinstance(raw, dict) or set(raw) != {"salt"}:
        raise where.error("hidden_seed", "must be a table with one field, salt")
    salt = raw["salt"]
    if not isinstance(salt, str) or len(salt.strip()) < MIN_SALT_CHARS:
        raise where.error(
            "hidden_seed.salt",
            f"must be a secret of {MIN_SALT_CHARS} characters or "
            "more (python -c 'import secrets; print(secrets.token_hex(16))' makes one)",
        )
    if theory is not None and salt.strip() == theory.salt.strip():
        raise where.error("hidden_seed.salt", "must differ from theory.salt, which ships to students")
    return salt


def read_theory(raw: Any, where: Where, submit_files: tuple[str, ...], task_bonus: dict[str, bool]) -> Theory:
    """``[theory]``; ``task_bonus``: each task id and its bonus flag, which a kind that names the task takes on."""
    theory = read_table(Theory, raw, where.inside("theory"))
    if theory.answers_file not in submit_files:
        raise where.error(
            "theory.answers_file",
            f"{theory.answers_file!r} must be in course.submit_files, or `make submit` would not pack it",
        )
    rubric_points = sum(item.points for item in theory.rubric)
    if where.edition != "student" and not math.isclose(rubric_points, theory.proof_points):
        raise where.error(
            "theory.rubric.items",
            f"award {rubric_points:g} points but the proof is worth {theory.proof_points:g}",
        )
    if where.edition == "student":  # the bundle's copy has no rubric: it stays with the instructor
        theory = replace(theory, rubric=())
    kinds = tuple(replace(kind, bonus=task_bonus.get(kind.task, False)) for kind in theory.kinds)
    return replace(theory, kinds=kinds)


def check_course(registry: Registry, where: Where) -> None:
    """[course]'s keys against the tasks and each other: the extra files are no task's, and the integrity note is
    packed by `make submit` and named by the policy that asks for it (so a student reading the policy knows where the
    note goes)."""
    student_files = set(registry.student_files)
    clash = sorted(set(registry.submit_files) & student_files)
    if clash:
        raise where.error("course.submit_files", f"{clash[0]} is already a task's student file")
    note = registry.notes_file
    if note is None:
        return
    if note not in registry.submit_files:
        raise where.error(
            "course.notes_file", f"{note!r} must be in course.submit_files, or `make submit` would not pack it"
        )
    if registry.integrity_policy and f"`{note}`" not in registry.integrity_policy:
        raise where.error(
            "course.notes_file", f"the integrity policy must name `{note}`, so students know where the note goes"
        )


def check_total_points(registry: Registry, where: Where) -> None:
    """course.total_points: the regular tasks' points and the theory's regular ones (bonus points come on top)."""
    tasks, theory, total = registry.tasks, registry.theory, registry.total_points
    summed = sum(t.points.total for t in tasks if not t.bonus)
    if math.isclose(total, summed + (theory.regular_points if theory else 0.0)):
        return
    with_theory = (
        f" and the theory's to {theory.regular_points:g} ({summed + theory.regular_points:g} in all)" if theory else ""
    )
    bonus = [t.id for t in tasks if t.bonus]
    aside = f"; bonus tasks and their theory questions aside ({', '.join(bonus)})" if bonus else ""
    raise where.error(
        "course.total_points", f"is {total:g} but the tasks' points add up to {summed:g}{with_theory}{aside}"
    )
