"""Typed loader for the assignment registry (``assignment/tasks.toml``).

Every number the handout, the tests, the grader and the report use comes from
here. ``load_registry()`` validates the file and raises ``RegistryError`` with
the file, the task and the field when something is missing or inconsistent. The schema is
assignment/registry_schema.py (its names are all found here too); a task's tables are read by
assignment/registry_tasks.py, the course-level parts by assignment/registry_course.py.
"""

from __future__ import annotations

import math
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
from assignment.registry_tasks import (
    parse_estimated_hours,
    parse_grading,
    parse_hidden,
    parse_objectives,
    parse_rules,
    parse_timing,
    parse_tolerance,
    require_key,
)
from assignment.registry_course import (  # noqa: F401
    MIN_SALT_CHARS,
    parse_chapters,
    parse_hidden_seed,
    parse_notes_file,
    parse_policy,
    parse_submit_files,
    parse_theory,
)


def parse_registry(data: dict, path: Path) -> Registry:
    course = require_key(data, "course", dict, path, None)
    tasks_raw = require_key(data, "task", list, path, None)
    edition = course.get("edition", "instructor")
    if edition not in EDITIONS:
        raise RegistryError(path, None, "course.edition", f"must be one of {EDITIONS}, got {edition!r}")
    tasks: list[Task] = []
    seen_ids: set[str] = set()
    for index, raw in enumerate(tasks_raw):
        task_id = raw.get("id") if isinstance(raw, dict) else None
        label = task_id if isinstance(task_id, str) else f"#{index + 1}"
        task_id = require_key(raw, "id", str, path, label)
        if not TASK_ID_PATTERN.match(task_id):
            raise RegistryError(path, task_id, "id", "must look like t1, t2, ... (unknown task id)")
        if task_id in seen_ids:
            raise RegistryError(path, task_id, "id", "is defined twice")
        seen_ids.add(task_id)
        device = require_key(raw, "device", str, path, task_id)
        if device not in DEVICES:
            raise RegistryError(path, task_id, "device", f"must be one of {DEVICES}, got {device!r}")
        files = require_key(raw, "files", list, path, task_id)
        if not files or not all(isinstance(f, str) and f for f in files):
            raise RegistryError(path, task_id, "files", "must list at least one file name")
        points_raw = require_key(raw, "points", dict, path, task_id)
        points = Points(
            correctness=float(require_key(points_raw, "correctness", float, path, task_id, "points.")),
            performance=float(require_key(points_raw, "performance", float, path, task_id, "points.")),
        )
        if points.correctness < 0 or points.performance < 0:
            raise RegistryError(path, task_id, "points", "must not be negative")
        bonus = raw.get("bonus", False)
        if not isinstance(bonus, bool):
            raise RegistryError(path, task_id, "bonus", f"must be true or false, got {bonus!r}")
        scaffolding = raw.get("scaffolding", "guided")
        if scaffolding not in SCAFFOLDING:
            raise RegistryError(path, task_id, "scaffolding", f"must be one of {SCAFFOLDING}, got {scaffolding!r}")
        timing = parse_timing(raw.get("timing", []), path, task_id, edition, scaffolding)
        timing_points = sum(rule.max_points for rule in timing)
        grading = parse_grading(raw.get("grading", {}), path, task_id, edition)
        if scaffolding == "open" and not timing and edition != "student" and not grading.open_reasoning:
            raise RegistryError(
                path,
                task_id,
                "grading.open_reasoning",
                "is missing: an open task without timing rules says how its checks were run on honest simpler "
                "designs (the open level's fixtures)",
            )
        available = require_key(raw, "available", bool, path, task_id)
        if available and any(rule.student is None for rule in timing):
            raise RegistryError(
                path,
                task_id,
                "timing.student",
                "is missing: every timing rule of an available task "
                "says how a student measures it without the reference (student = {...})",
            )
        if available and not math.isclose(timing_points, points.performance):
            raise RegistryError(
                path,
                task_id,
                "points.performance",
                f"is {points.performance:g} but the timing rubric awards at most {timing_points:g}; they must add up",
            )
        shapes = raw.get("shapes", {})
        tolerance = parse_tolerance(raw.get("tolerance", {}), path, task_id)
        hidden = parse_hidden(raw.get("hidden", {}), path, task_id)
        if available:
            if not shapes.get("public"):
                raise RegistryError(path, task_id, "shapes.public", "is missing (available tasks need test shapes)")
            if not tolerance:
                raise RegistryError(path, task_id, "tolerance", "is missing (available tasks need tolerances)")
        tasks.append(
            Task(
                id=task_id,
                slug=require_key(raw, "slug", str, path, task_id),
                title=require_key(raw, "title", str, path, task_id),
                available=available,
                device=device,
                files=tuple(files),
                text=require_key(raw, "text", str, path, task_id),
                summary=require_key(raw, "summary", str, path, task_id),
                hint=require_key(raw, "hint", str, path, task_id).strip(),
                points=points,
                tolerance=tolerance,
                public_shapes=tuple(dict(s) for s in shapes.get("public", [])),
                hidden=hidden,
                timing=timing,
                rules=parse_rules(raw.get("rules", {}), path, task_id),
                grading=grading,
                scaffolding=scaffolding,
                objectives=parse_objectives(raw.get("objectives"), path, task_id, available),
                estimated_hours=parse_estimated_hours(raw.get("estimated_hours"), path, task_id, available),
                bonus=bonus,
            )
        )
    numbers = sorted(t.number for t in tasks)
    if numbers != list(range(1, len(numbers) + 1)):
        raise RegistryError(path, None, "task", f"task ids must be t1..t{len(numbers)} without gaps, got {numbers}")
    student_files = {name for t in tasks for name in t.files}
    total = float(require_key(course, "total_points", float, path, None, "course."))
    submit_files = parse_submit_files(course.get("submit_files", []), path, student_files)
    theory = (
        parse_theory(data["theory"], path, edition, submit_files, {t.id: t.bonus for t in tasks})
        if "theory" in data
        else None
    )
    policy = parse_policy(course.get("integrity_policy", ""), path)
    summed = sum(t.points.total for t in tasks if not t.bonus)  # bonus points come on top of the total
    if not math.isclose(total, summed + (theory.regular_points if theory else 0.0)):
        with_theory = (
            f" and the theory's to {theory.regular_points:g} ({summed + theory.regular_points:g} in all)"
            if theory
            else ""
        )
        bonus = [t.id for t in tasks if t.bonus]
        aside = f"; bonus tasks and their theory questions aside ({', '.join(bonus)})" if bonus else ""
        raise RegistryError(
            path,
            None,
            "course.total_points",
            f"is {total:g} but the tasks' points add up to {summed:g}{with_theory}{aside}",
        )
    return Registry(
        path=path,
        title=require_key(course, "title", str, path, None, "course."),
        subtitle=course.get("subtitle", ""),
        total_points=total,
        public_seed=int(course.get("public_seed", 0)),
        tasks=tuple(tasks),
        submit_files=submit_files,
        max_file_bytes=int(require_key(course, "max_file_bytes", int, path, None, "course.")),
        edition=edition,
        report_prompt=str(course.get("report_prompt", "")),
        integrity_policy=policy,
        notes_file=parse_notes_file(course.get("notes_file"), path, submit_files, policy),
        theory=theory,
        hidden_seed_salt=parse_hidden_seed(data.get("hidden_seed"), path, theory, edition),
        chapters=parse_chapters(data.get("chapter", []), path, tuple(t.id for t in tasks)),
    )


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
