"""The grader end to end on CPU: scores, formats, the preflight, isolation levels, unreadable submissions."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from assignment.registry import load_registry
from grader.grade.config import GradeConfig
from grader.grade.grade import PreflightError, check_host, grade_submission
from grader.isolation import sandbox

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
CPU_TASKS = replace(GradeConfig(), tasks=("t1",), preflight=False, allow_weak_isolation=True, seed=7)


def quiet(*args, **kwargs):
    pass


def test_solutions_score_full_and_starter_zero_via_make_grade(tmp_path):
    for impl, expected in (("solutions", 10.0), ("starter", 0.0)):
        out = tmp_path / impl
        proc = subprocess.run(
            ["make", "-s", "grade", f"SUBMISSION={impl}", f"OUT={out}", f"PY={sys.executable}", "TASKS=t1"],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        results = json.loads((out / "results.json").read_text())
        t1_score = sum(t["score"] for t in results["tests"] if "t1" in t["tags"])
        assert t1_score == pytest.approx(expected), results["output"]
        for key in ("score", "execution_time", "output", "tests"):
            assert key in results
        for test in results["tests"]:
            assert set(test) >= {"name", "number", "score", "max_score", "status", "visibility", "output", "tags"}
            if impl == "starter":
                assert test["output"].startswith("NotImplementedError: t1:"), test
        header = (out / "grades.csv").read_text().splitlines()[0]
        assert header.startswith("submission,total,t1") and "isolation" in header
        assert "<table>" in (out / "report.html").read_text()
        grading = json.loads((out / "grading.json").read_text())
        level, _ = sandbox.best_isolation()
        seed = grading["seeds"]["t1"]
        assert grading["isolation"].startswith(level) and isinstance(seed, int)
        assert grading["tasks"]["t1"]["seed"] == seed and grading["seeding"]["grading_id"] == impl
        assert grading["seeding"]["grading_id_from"] == "the submission's name"
        assert grading["tasks"]["t1"]["status"] == "ran"
        # What the instructor record holds never reaches the student's files.
        assert str(seed) not in json.dumps(results)


def test_points_are_shared_over_the_checks_the_checker_collected():
    from grader.grade.runner import TaskRun, TestOutcome, reconcile
    from grader.grade.scoring import score_task

    collected = ["a::test_x[1]", "a::test_x[2]", "a::test_y", "a::test_z"]
    reported = [
        TestOutcome("a::test_x[1]", "passed"),
        TestOutcome("a::test_y", "passed"),
        TestOutcome("a::test_z", "passed"),
        TestOutcome("a::test_forged", "passed"),
    ]
    tests, extra = reconcile(collected, reported)
    assert [t.nodeid for t in tests] == collected and extra == ["a::test_forged"]
    assert tests[1].outcome == "failed" and tests[1].check["kind"] == "crash"
    task = load_registry().task("t1")
    scored = score_task(task, TaskRun("t1", "ran", tests=tests))
    assert scored.total == 4 and scored.passed == 3 and scored.score == pytest.approx(7.5)


def test_wrong_answer_shows_the_kind_and_size_but_nothing_hidden(tmp_path):
    solution = (REPO / "solutions" / "t1_attention.py").read_text()
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "t1_attention.py").write_text(
        solution.replace("out = (p @ vf) / torch.where", "out = 1.01 * (p @ vf) / torch.where")
    )
    result = grade_submission(sub, tmp_path / "out", replace(CPU_TASKS, select="(naive or flash) and case0"), log=quiet)
    (task,) = result.tasks
    assert 0 < task.score < 10, "only the naive checks should fail"
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    failed = [t for t in results["tests"] if t["status"] == "failed"]
    assert failed and all("naive" in t["name"] for t in failed)
    for test in failed:
        assert test["output"].startswith("Wrong values: naive O:"), test["output"]
        assert "max abs error" in test["output"] and "Reproduce this kind of check locally" in test["output"]
        assert load_registry().task("t1").hint in test["output"]
        for leak in ("index", "Lq", "tensor(", "assert_close", "/"):
            assert leak not in test["output"].split("Hint:")[0], (leak, test["output"])


def test_zip_with_nested_folder_and_missing_file(tmp_path):
    archive = tmp_path / "alice.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(REPO / "solutions" / "t1_attention.py", "bundle/starter/t1_attention.py")
    result = grade_submission(archive, tmp_path / "out", replace(CPU_TASKS, select="naive and case0"), log=quiet)
    assert result.name == "alice" and result.tasks[0].score == pytest.approx(10.0)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = grade_submission(empty, tmp_path / "out2", CPU_TASKS, log=quiet)
    assert result.tasks[0].status == "missing_files" and "t1_attention.py" in result.tasks[0].reason


def test_unreadable_submission_still_gets_results_and_exit_2(tmp_path):
    bad = tmp_path / "bob.zip"
    bad.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.grade.grade",
            str(bad),
            "--out",
            str(out),
            "--task",
            "t1",
            "--skip-preflight",
            "--allow-weak-isolation",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a readable zip" in proc.stderr or "neither a folder nor" in proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["score"] == 0 and "bob.zip" in results["output"]
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader.grade.grade",
            str(tmp_path / "nope"),
            "--out",
            str(out),
            "--task",
            "t1",
            "--skip-preflight",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_csv_cells_are_never_formulas(tmp_path):
    from grader.grade.report import csv_cell

    assert csv_cell("=HYPERLINK(1)") == "'=HYPERLINK(1)" and csv_cell("+1") == "'+1" and csv_cell("alice") == "alice"
    folder = tmp_path / "=cmd|' -C calc'!A0"
    folder.mkdir()
    grade_submission(folder, tmp_path / "out", CPU_TASKS, log=quiet)
    rows = list(csv.reader((tmp_path / "out" / "grades.csv").read_text().splitlines()))
    assert rows[1][0].startswith("'=")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this host has a GPU")
@pytest.mark.skipif(torch.cuda.is_available(), reason="what a host without a GPU says")
def test_preflight_refuses_gpu_tasks_on_a_host_without_a_gpu_naming_the_make_variables(tmp_path):
    """make grade is how instructors grade: the refusal names its variables (TASKS=, GRADE_FLAGS=), and the tasks
    this host can grade, not the grader's command-line flags alone."""
    registry = load_registry()
    cpu_tasks = " ".join([t.id for t in registry.available if not t.needs_gpu] + ["theory"])
    make = ["make", "-s", "grade", "SUBMISSION=solutions", f"OUT={tmp_path}", f"PY={sys.executable}"]
    every = subprocess.run(make, cwd=REPO, capture_output=True, text=True)
    assert every.returncode != 0 and "t2, t3" in every.stderr and "need a CUDA GPU" in every.stderr, every.stderr
    assert f'TASKS="{cpu_tasks}"' in every.stderr and "GRADE_FLAGS=--skip-preflight" in every.stderr, every.stderr
    some = subprocess.run([*make, "TASKS=t1 t2"], cwd=REPO, capture_output=True, text=True)
    assert "t2 needs a CUDA GPU" in some.stderr and 'TASKS="t1"' in some.stderr, some.stderr


def test_weak_isolation_needs_an_explicit_flag():
    config = replace(GradeConfig(), tasks=("t1",), preflight=False, isolation="process")
    with pytest.raises(PreflightError, match="GRADE_FLAGS=--allow-weak-isolation"):
        check_host(config, load_registry())
    assert check_host(replace(config, allow_weak_isolation=True), load_registry()).isolation == sandbox.FALLBACK


def test_the_process_fallback_grades_the_solutions(tmp_path):
    config = replace(CPU_TASKS, isolation="process", select="naive and case0")
    result = grade_submission(REPO / "solutions", tmp_path / "out", config, log=quiet)
    assert result.tasks[0].score == pytest.approx(10.0)
    assert result.grading["isolation"].startswith("process")


def test_a_check_that_did_not_run_is_not_run_everywhere_never_zero_or_passed(tmp_path):
    from grader.grade.report import write_all
    from grader.grade.runner import TaskRun, TestOutcome
    from grader.grade.scoring import SubmissionScore, score_task

    registry = load_registry()
    t6, t2 = registry.task("t6"), registry.task("t2")
    skipped = "needs a CUDA GPU: torch.cuda.is_available() is False here"
    timing = [TestOutcome(f"a::test_timing[rule{i}]", "skipped", skipped, is_perf=True) for i in range(len(t6.timing))]
    run = TaskRun(
        "t6",
        "ran",
        tests=[TestOutcome("a::test_cache", "passed"), TestOutcome("a::test_values", "skipped", skipped), *timing],
    )
    partly = score_task(t6, run)
    share = t6.points.correctness / 2  # every collected check keeps its share, run here or not
    assert partly.score == pytest.approx(share) and partly.not_run == pytest.approx(share + t6.points.performance)
    assert partly.max_ran == pytest.approx(partly.score) and not partly.complete
    nothing = score_task(t2, TaskRun("t2", "not_run", "this grading host has no CUDA GPU"))
    assert nothing.not_run == t2.points.total and nothing.score == 0
    result = SubmissionScore("alice", [nothing, partly], [], 1.0, {"isolation": "bwrap"})
    write_all(result, registry, tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    not_run = [t for t in results["tests"] if "not run" in t["tags"]]
    assert len(not_run) == 2 + len(t6.timing) and all(t["name"].endswith("(not run)") for t in not_run)
    assert all(not {"score", "max_score", "status"} & set(t) for t in not_run), not_run
    assert results["score"] == pytest.approx(share)
    (row,) = list(csv.DictReader((tmp_path / "grades.csv").read_text().splitlines()))
    assert row["t2"] == "not run" and row["t6"] == f"{share:.2f} ({partly.not_run:.2f} not run)"
    assert row["not_run"] == f"t2: {t2.points.total:.2f} points; t6: {partly.not_run:.2f} points"
    html = (tmp_path / "report.html").read_text()
    assert "points not run on this grading host" in html and "not run / " in html


def test_the_theory_answers_are_gradable_alone_with_make_grade(tmp_path):
    from grader.grade.theory import reference_answers

    registry = load_registry()
    sub = tmp_path / "s7654321"
    sub.mkdir()
    (sub / registry.theory.answers_file).write_text(reference_answers("s7654321", registry))
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            "make",
            "-s",
            "grade",
            f"SUBMISSION={sub}",
            f"OUT={out}",
            f"PY={sys.executable}",
            "TASKS=theory",
            "GRADE_FLAGS=--allow-weak-isolation",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["tests"] and all("theory" in t["tags"] for t in results["tests"])
    assert results["score"] == pytest.approx(registry.theory.points - registry.theory.proof_points)
    (row,) = list(csv.DictReader((out / "grades.csv").read_text().splitlines()))
    assert row["theory"] and all(row[t.id] == "" for t in registry.tasks)


def test_threads_set_the_checkers_and_the_workers_thread_counts(tmp_path, monkeypatch):
    from grader.grade.prepare import PreparedTask
    from grader.grade.runner import checker_environment
    from grader.isolation.client import WorkerConfig

    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    prepared = PreparedTask(load_registry().task("t1"))
    worker = WorkerConfig(student_dir=tmp_path, limits=sandbox.Limits(threads=1))
    env = checker_environment(prepared, tmp_path, replace(CPU_TASKS, threads=1), 7, worker)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert json.loads((tmp_path / "worker_t1.json").read_text())["limits"]["threads"] == 1
    assert checker_environment(prepared, tmp_path, CPU_TASKS, 7, None)["OMP_NUM_THREADS"] == "7"  # the host's


def test_the_total_line_says_the_bonus_apart():
    from types import SimpleNamespace

    from grader.grade.report import total_line
    from grader.grade.scoring import SubmissionScore

    def task(bonus, points):
        return SimpleNamespace(task=SimpleNamespace(bonus=bonus), max_score=points)

    def result(tasks, theory=None):
        regular = sum(t.max_score for t in tasks if not t.task.bonus)
        fake = SimpleNamespace(score=30.0, tasks=tasks, theory=theory, max_score=lambda registry: regular)
        fake.bonus_max = SubmissionScore.bonus_max.fget(fake)
        return fake

    assert total_line(result([task(False, 10), task(False, 20)]), None) == "total 30.00 / 30"
    only_bonus = total_line(result([task(True, 25)]), None)
    assert only_bonus == "total 30.00 / 0 (+ up to 25 bonus)", only_bonus
    theory = SimpleNamespace(bonus_max=8.5)
    assert total_line(result([task(False, 10), task(True, 25)], theory), None).endswith("/ 10 (+ up to 33.5 bonus)")
