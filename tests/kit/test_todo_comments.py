"""A `# TODO(tN)` comment left in a finished Python file never counts as a TODO: only the starter's stub does.

`make submit` and `make report` count the stubs (``assignment.todos``) and the grader runs the file whatever its
comments say, so the public tests must agree with them: a file whose stub is gone passes, comment or not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from assignment.registry import load_registry
from assignment.todos import todo_counts

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
PYTHON_FILES = [
    (task.id, name) for task in REGISTRY.tasks for name in task.files if name.endswith(".py") and task.available
]
LEFT_OVER = "\n# TODO({task}): tidy this up later (a note the student left; the stub above is gone)\n"


def public_tests(task: str) -> list[Path]:
    return sorted(p for p in (REPO / "tests").glob(f"test_{task}_*.py"))


def run_public(task: str, impl: Path, select: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *map(str, public_tests(task)), "-q", "-p", "no:cacheprovider"]
        + ["-m", task, "-k", select, "-c", str(REPO / "pyproject.toml"), "--rootdir", str(REPO)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "IMPL": str(impl)},
        timeout=600,
    )


@pytest.mark.parametrize(("task", "name"), PYTHON_FILES, ids=[f"{t}-{n}" for t, n in PYTHON_FILES])
def test_a_todo_comment_in_a_finished_file_is_not_a_todo(task, name, tmp_path):
    shutil.copytree(REPO / "solutions", tmp_path / "impl")
    path = tmp_path / "impl" / name
    path.write_text(path.read_text(encoding="utf-8") + LEFT_OVER.format(task=task), encoding="utf-8")
    assert todo_counts(path.read_text(encoding="utf-8"), name) == {}, "make submit and make report count no TODO"
    # Every public test that reads the file's text (the rules check) runs it, as the grader does.
    proc = run_public(task, tmp_path / "impl", "allowed_operations or rules or todo")
    assert proc.returncode in (0, 5), proc.stdout[-3000:]  # 5: the task has no such test
    assert " todo" not in proc.stdout.splitlines()[-1], proc.stdout[-3000:]


@pytest.mark.parametrize(("task", "name"), PYTHON_FILES, ids=[f"{t}-{n}" for t, n in PYTHON_FILES])
def test_the_starters_stub_is_still_a_todo(task, name):
    proc = run_public(task, REPO / "starter", "allowed_operations")
    if proc.returncode == 5:
        pytest.skip(f"{task} has no rules test")
    assert proc.returncode == 1 and "todo" in proc.stdout.splitlines()[-1], proc.stdout[-3000:]
    assert todo_counts((REPO / "starter" / name).read_text(encoding="utf-8"), name).get(task)
