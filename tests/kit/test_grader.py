"""Grader v0 end to end on CPU: scores, isolation of crashes and hangs, report formats."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from assignment.registry import load_registry
from grader.config import GradeConfig
from grader.grade import grade_submission

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
CPU_TASKS = GradeConfig(tasks=("t1",), cpu_task_timeout_s=300)


def quiet(*args, **kwargs):
    pass


def make_submission(tmp_path: Path, source: str) -> Path:
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "t1_attention.py").write_text(source)
    return sub


def test_solutions_score_full_and_starter_zero_via_make_grade(tmp_path):
    for impl, expected in (("solutions", 10.0), ("starter", 0.0)):
        out = tmp_path / impl
        proc = subprocess.run(
            ["make", "-s", "grade", f"SUBMISSION={impl}", f"OUT={out}", f"PY={sys.executable}"],
            cwd=REPO, capture_output=True, text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        results = json.loads((out / "results.json").read_text())
        t1_score = sum(t["score"] for t in results["tests"] if "t1" in t["tags"])
        assert t1_score == pytest.approx(expected), results["output"]
        for key in ("score", "execution_time", "output", "tests"):
            assert key in results
        for test in results["tests"]:
            assert set(test) >= {"name", "number", "score", "max_score", "status", "visibility", "output", "tags"}
        assert (out / "grades.csv").read_text().splitlines()[0].startswith("submission,total,t1")
        assert "<table>" in (out / "report.html").read_text()


def test_crash_in_student_code_scores_zero_with_reason(tmp_path):
    sub = make_submission(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    result = grade_submission(sub, tmp_path / "out", CPU_TASKS, log=quiet)
    (task,) = result.tasks
    assert task.score == 0 and task.status == "crashed"
    assert "signal 11" in task.reason


def test_hang_is_killed_by_the_timeout(tmp_path):
    sub = make_submission(tmp_path, "while True:\n    pass\n")
    config = GradeConfig(tasks=("t1",), cpu_task_timeout_s=8)
    result = grade_submission(sub, tmp_path / "out", config, log=quiet)
    (task,) = result.tasks
    assert task.status == "timeout" and task.score == 0 and "timed out after 8 s" in task.reason


def test_wrong_answer_shows_the_hint_but_nothing_hidden(tmp_path):
    solution = (REPO / "solutions" / "t1_attention.py").read_text()
    broken = solution.replace("out = (p @ vf) / torch.where", "out = 1.01 * (p @ vf) / torch.where")
    sub = make_submission(tmp_path, broken)
    result = grade_submission(sub, tmp_path / "out", CPU_TASKS, log=quiet)
    (task,) = result.tasks
    assert 0 < task.score < 10, "only the naive checks should fail"
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    failed = [t for t in results["tests"] if t["status"] == "failed"]
    passed = {t["name"] for t in results["tests"] if t["status"] == "passed"}
    assert failed and all("naive" not in t["name"] for t in results["tests"] if t["name"] in passed)
    assert "t1 flash (case0, full)" in passed, "flash_attention_forward was not broken"
    for test in failed:
        assert load_registry().task("t1").hint in test["output"]
        for leak in ("expected", "Lq", "index", "assert_close", "tensor("):
            assert leak not in test["output"] and leak not in test["name"], test


def test_zip_with_nested_folder_and_missing_file(tmp_path):
    archive = tmp_path / "alice.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(REPO / "solutions" / "t1_attention.py", "bundle/starter/t1_attention.py")
    result = grade_submission(archive, tmp_path / "out", CPU_TASKS, log=quiet)
    assert result.name == "alice" and result.tasks[0].score == pytest.approx(10.0)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = grade_submission(empty, tmp_path / "out2", CPU_TASKS, log=quiet)
    assert result.tasks[0].status == "missing_files" and "t1_attention.py" in result.tasks[0].reason


def test_unreadable_submission_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "grader.grade", str(tmp_path / "nope"), "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
