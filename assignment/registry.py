"""Typed loader for the assignment registry (``assignment/tasks.toml``).

Every number the handout, the tests, the grader and the report use comes from
here. ``load_registry()`` validates the file and raises ``RegistryError`` with
the file, the task and the field when something is missing or inconsistent. The schema is
assignment/registry_schema.py (its names are all found here too), where every key declares what it accepts, and
assignment/registry_keys.py checks a table against those declarations; the checks that join keys are made by
assignment/registry_tasks.py (a task's) and assignment/registry_course.py (the course-level parts').
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import tomllib

from assignment.registry_schema import (  # noqa: F401 - the registry's types, where the kit has always found them
    ASSIGNMENT_DIR,
    DEVICES,
    EDITIONS,
    METRICS,
    REGISTRY_PATH,
    SCAFFOLDING,
    STUDENT_BASELINES,
    TASK_ID_PATTERN,
    THEORY_KINDS,
    Chapter,
    divisors,
    Grading,
    HiddenShapes,
    Points,
    PythonRules,
    Registry,
    RegistryError,
    RubricItem,
    StudentTarget,
    Task,
    Theory,
    TheoryKind,
    Threshold,
    TimingRule,
)
from assignment.registry_keys import Where, declared_keys, read_table, read_value
from assignment.registry_tasks import read_tasks
from assignment.registry_course import (  # noqa: F401 - MIN_SALT_CHARS: where the grader finds it
    MIN_SALT_CHARS,
    check_course,
    check_total_points,
    read_chapters,
    read_hidden_seed,
    read_theory,
)

# The file's top-level tables: [course] holds the Registry's own keys, the others are read into its parts.
TABLES = ("course", "task", "chapter", "theory", "hidden_seed")


def parse_registry(data: dict, path: Path) -> Registry:
    """The registry of the parsed file ``data`` (``path`` names it in errors): the edition first (what it requires),
    then the tasks (what the course-level parts name), [course], the theory, the salt and the chapters."""
    unknown = sorted(set(data) - set(TABLES))
    if unknown:
        raise RegistryError(path, None, unknown[0], f"is not a table of the registry (it has {', '.join(TABLES)})")
    for table, kind in (("course", dict), ("task", list)):
        if table not in data:
            raise RegistryError(path, None, table, "is missing")
        if not isinstance(data[table], kind):
            raise RegistryError(path, None, table, f"must be a {'table' if kind is dict else 'array of tables'}")
    course = data["course"]
    edition = read_value(
        declared_keys(Registry)["edition"],
        course.get("edition", "instructor"),
        Where(path=path, prefix="course."),
        "edition",
    )
    tasks = read_tasks(data["task"], path, edition)
    where = Where(path=path, edition=edition, task_ids=tuple(t.id for t in tasks))
    registry = read_table(Registry, course, where.inside("course"), given={"path": path, "tasks": tasks})
    check_course(registry, where)
    theory = (
        read_theory(data["theory"], where, registry.submit_files, {t.id: t.bonus for t in tasks})
        if "theory" in data
        else None
    )
    registry = replace(
        registry,
        theory=theory,
        hidden_seed_salt=read_hidden_seed(data.get("hidden_seed"), where, theory),
        chapters=read_chapters(data.get("chapter", []), where),
    )
    check_total_points(registry, where)
    return registry


def load_registry(path: Path | str | None = None) -> Registry:
    """Load and validate the registry (cached for the default path)."""
    if path is None:
        return _load_default()
    return _load(Path(path))


def _load(path: Path) -> Registry:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RegistryError(path, None, "-", "file not found") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RegistryError(path, None, "-", f"is not valid TOML: {exc}") from None
    return parse_registry(data, path)


@lru_cache(maxsize=1)
def _load_default() -> Registry:
    return _load(REGISTRY_PATH)


def check_markers(marker_names: set[str], registry: Registry, where: str) -> None:
    """Raise when a test uses a task marker (t<N>) the registry does not define."""
    unknown = sorted(m for m in marker_names if TASK_ID_PATTERN.match(m) and m not in registry.ids)
    if unknown:
        raise RegistryError(
            registry.path, unknown[0], "id", f"marker {unknown[0]!r} used by {where} has no task in the registry"
        )
