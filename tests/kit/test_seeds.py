"""Hidden seeds (grader/grade/seeds.py): derived from the course's salt, the student and the task, so a regrade draws
the same inputs; the salt has one home the student never gets, a missing or weak one is an error, and no output but
the instructor's fingerprint says anything about it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from assignment.registry import REGISTRY_PATH, load_registry
from grader.grade import seeds
from grader.grade.config import GradeConfig
from grader.grade.grade import PreflightError, grade_submission

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
# t1 is graded on a submission without its file: it ends as missing_files before any checker runs, and the grading
# still records its seed.
QUICK = replace(GradeConfig(), tasks=("t1",), preflight=False, allow_weak_isolation=True, theory=False)


@pytest.fixture
def no_env_salt(monkeypatch):
    monkeypatch.delenv(seeds.SALT_ENV, raising=False)


def registry_without_salt(tmp_path: Path):
    text = REGISTRY_PATH.read_text()
    path = tmp_path / "tasks.toml"
    path.write_text(text[: text.index("\n[hidden_seed]\n")])
    return load_registry(path)


def answers_of(student_id: str) -> str:
    from grader.grade.theory import reference_answers

    return reference_answers(student_id, load_registry())


def test_a_seed_is_the_same_for_the_same_student_and_task_and_differs_otherwise(no_env_salt):
    salt = seeds.resolve_salt(load_registry())
    seed = seeds.derive(salt, "s1234567", "t1")
    assert seed == seeds.derive(salt, "  S1234567 ", "t1")  # ids are trimmed and lower-cased
    assert 0 <= seed < 2**31
    others = {
        seeds.derive(salt, "s1234568", "t1"),
        seeds.derive(salt, "s1234567", "t2"),
        seeds.derive(seeds.Salt("another salt of the course 2027", "test"), "s1234567", "t1"),
    }
    assert seed not in others and len(others) == 3
    many = {seeds.derive(salt, f"s{i}", "t1") for i in range(2000)}
    assert len(many) == 2000  # no collisions among a class


def test_the_salt_comes_from_the_environment_else_the_registry(monkeypatch, tmp_path, no_env_salt):
    registry = load_registry()
    assert seeds.resolve_salt(registry).source.endswith("[hidden_seed]")
    monkeypatch.setenv(seeds.SALT_ENV, "a-course-salt-kept-out-of-git")
    assert seeds.resolve_salt(registry) == seeds.Salt("a-course-salt-kept-out-of-git", seeds.SALT_ENV)
    monkeypatch.setenv(seeds.SALT_ENV, "short")
    with pytest.raises(seeds.SaltError, match="shorter than 16"):
        seeds.resolve_salt(registry)
    monkeypatch.setenv(seeds.SALT_ENV, registry.theory.salt)
    with pytest.raises(seeds.SaltError, match="ships to students"):
        seeds.resolve_salt(registry)
    monkeypatch.delenv(seeds.SALT_ENV)
    with pytest.raises(seeds.SaltError, match=rf"set {seeds.SALT_ENV}.*\[hidden_seed\] salt.*--seed"):
        seeds.resolve_salt(registry_without_salt(tmp_path))
    plan = seeds.plan(["t1"], registry_without_salt(tmp_path), fixed=7, grading_id="x", id_from="test")
    assert plan.seeds == {"t1": 7} and "--seed" in plan.record["how"]  # a fixed seed needs no salt


def test_grading_records_the_seeds_and_where_the_id_came_from_never_the_salt(tmp_path, no_env_salt):
    registry = load_registry()
    salt = seeds.resolve_salt(registry)
    sub = tmp_path / "bob"
    sub.mkdir()
    (sub / registry.theory.answers_file).write_text(answers_of("s7654321"))
    cases = [
        (QUICK, "s7654321", "the student_id of"),  # the theory answers name the submission
        (replace(QUICK, student_id="S1"), "s1", "--student-id"),
        (replace(QUICK, student_id="s1", grading_id="ada@example.edu"), "ada@example.edu", "the grader's caller"),
    ]
    for config, grading_id, id_from in cases:
        out = tmp_path / f"out-{grading_id}"
        result = grade_submission(sub, out, config, registry, log=lambda *a, **k: None)
        assert result.tasks[0].status == "missing_files"
        grading = json.loads((out / "grading.json").read_text())
        assert grading["seeds"] == {"t1": seeds.derive(salt, grading_id, "t1")}
        assert grading["seeding"]["grading_id"] == grading_id
        assert grading["seeding"]["grading_id_from"].startswith(id_from)
        assert grading["seeding"]["salt_fingerprint"] == salt.fingerprint
        for name in ("results.json", "grades.csv", "report.html", "grading.json"):
            assert salt.value not in (out / name).read_text(), name
        assert str(grading["seeds"]["t1"]) not in (out / "results.json").read_text()
    (sub / registry.theory.answers_file).unlink()
    result = grade_submission(sub, tmp_path / "named", QUICK, registry, log=lambda *a, **k: None)
    assert result.grading["seeding"]["grading_id"] == "bob"  # no id anywhere: the submission's name
    fixed = grade_submission(sub, tmp_path / "fixed", replace(QUICK, seed=99), registry, log=lambda *a, **k: None)
    assert fixed.grading["seeds"] == {"t1": 99} and "salt_fingerprint" not in fixed.grading["seeding"]


def test_without_a_usable_salt_nothing_is_graded(tmp_path, no_env_salt):
    with pytest.raises(PreflightError, match=r"\[hidden_seed\] salt"):
        grade_submission(tmp_path, tmp_path / "out", QUICK, registry_without_salt(tmp_path), log=lambda *a, **k: None)
    assert not (tmp_path / "out").exists()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.grade.grade",
            str(tmp_path),
            "--out",
            str(tmp_path / "cli"),
            "--task",
            "t1",
            "--skip-preflight",
            "--allow-weak-isolation",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, seeds.SALT_ENV: "too short"},
    )
    assert proc.returncode == 3 and f"{seeds.SALT_ENV} is set but shorter" in proc.stderr, proc.stderr
