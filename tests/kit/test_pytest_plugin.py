"""The kit's pytest plugin: a test stopped by a TODO stub is one line, summed up per task, and still a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kit

TESTS = """
import pytest

@pytest.mark.t1
@pytest.mark.parametrize("n", range(3))
def test_stub(n):
    raise NotImplementedError("t1: naive attention is not implemented yet (TODO(t1) in t1_attention.py)")

@pytest.mark.t7
def test_wrong_answer():
    assert 1 + 1 == 3, "a real failure keeps its traceback"

@pytest.mark.t7
def test_other_not_implemented():
    raise NotImplementedError("something else entirely")
"""


def run_pytest(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "IMPL"} | env
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, capture_output=True, text=True, env=environment, cwd=cwd, timeout=300)


def test_todo_failures_are_summed_up_per_task_and_still_fail_the_run(tmp_path):
    (tmp_path / "test_sample.py").write_text(TESTS)
    proc = run_pytest(
        "-p",
        "assignment.pytest_plugin",
        "--rootdir",
        str(tmp_path),
        str(tmp_path / "test_sample.py"),
        cwd=tmp_path,
        PYTHONPATH=str(REPO_ROOT),
    )
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "t1: 3 tests stop at a TODO(t1) region not written yet (first: t1: naive attention" in out
    assert "2 failed" in out and "3 todo" in out, out.splitlines()[-1]
    assert out.count('raise NotImplementedError("t1:') == 0  # no traceback for a stub
    assert "a real failure keeps its traceback" in out and "something else entirely" in out


@pytest.mark.parametrize(
    "command",
    [
        ["make", "--no-print-directory", "test", "T=t10", f"PY={sys.executable}"],
        [sys.executable, "-m", "pytest", "tests", "-m", "t10 and not slow", "-p", "no:cacheprovider"],
    ],
    ids=["make", "pytest"],
)
def test_an_unknown_task_is_named_with_the_valid_ids(command):
    """make test T=t10 (a task that does not exist) says so and lists the tasks, instead of pytest's marker error;
    before the CUDA checks make test runs first."""
    from assignment.registry import load_registry

    env = {k: v for k, v in os.environ.items() if k != "IMPL"}
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, env=env, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "'t10' is not a task of this assignment" in out, out[-2000:]
    assert ", ".join(load_registry().ids) in out and "make test T=t1" in out
    assert "Unknown marker" not in out and "Traceback" not in out and "builds succeeded" not in out


@pytest.mark.parametrize(
    "broken, error",
    [("def broken(:\n    pass\n", "SyntaxError: invalid syntax"), ("_x = undefined_helper(3)\n", "NameError")],
    ids=["syntax-error", "error-at-import"],
)
def test_a_student_file_that_does_not_import_is_reported_once(tmp_path, broken, error):
    """A syntax error in t1_attention.py once printed the same traceback for each of t1's 41 tests: now each test is a
    line, and the error, with its line of the student's file, is shown once."""
    shutil.copytree(REPO_ROOT / "solutions", tmp_path / "impl")
    path = tmp_path / "impl" / "t1_attention.py"
    path.write_text(path.read_text() + "\n" + broken)
    out = (proc := run_pytest("tests/test_t1_attention.py", cwd=REPO_ROOT, IMPL=str(tmp_path / "impl"))).stdout
    assert proc.returncode == 1, out[-3000:]
    line = len(path.read_text().splitlines()) - broken.count("\n") + 1
    assert out.count(f"t1_attention.py does not import: {error}") == 1, out[-3000:]
    assert f"(line {line})" in out and "stopped at import" in out.splitlines()[-1], out[-3000:]
    assert "Traceback" not in out and "exec_module" not in out, "a traceback through the kit"
