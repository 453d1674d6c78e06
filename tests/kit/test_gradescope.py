"""Gradescope's autograder zip (grader/classroom/gradescope.py): built, unpacked into a stand-in for /autograder (a
temporary folder named by AUTOGRADER_ROOT), and run on real submissions with the kit's own Python (KIT_PYTHON) in place of
what setup.sh installs; setup.sh itself runs in its dry-run mode."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from assignment.registry import load_registry
from grader.classroom import gradescope

pytestmark = [pytest.mark.kit, pytest.mark.slow]  # end to end: make test-slow
REPO = Path(__file__).resolve().parents[2]
SID = "s1234567"
VISIBILITY = "after_due_date"  # not the default: the run must take it from the zip's gradescope.json


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    build = tmp_path_factory.mktemp("build")
    archive = gradescope.build(build, visibility=VISIBILITY)
    assert archive == build / "autograder.zip"
    source = tmp_path_factory.mktemp("zip")
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        modes = {info.filename: info.external_attr >> 16 for info in zf.infolist()}
        zf.extractall(source)
    for script in ("setup.sh", "run_autograder"):
        (source / script).chmod(modes[script] & 0o777)  # extractall drops the modes the zip carries
    return archive, names, modes, source


def test_the_zip_carries_the_scripts_and_only_the_kit_the_grader_needs(unpacked):
    archive, names, modes, _ = unpacked
    assert {
        "setup.sh",
        "run_autograder",
        "requirements.txt",
        "requirements-torch.txt",
        "gradescope.json",
        "pyproject.toml",
    } <= set(names)
    assert modes["run_autograder"] & stat.S_IXUSR and modes["setup.sh"] & stat.S_IXUSR
    assert any(n.startswith("grader/hidden/test_t1") for n in names) and "assignment/tasks.toml" in names
    assert any(n.startswith("assignment/model/checkpoints/") for n in names)  # t7 greedy-decodes the shipped model
    for name in names:
        assert not name.startswith(
            (
                "solutions/",
                "starter/",
                "tests/",
                "build/",
                "dist/",
                ".venv/",
                ".kit_cache/",
                "grader/records/",
                "grader/scripts/",
                "assignment/text/",
            )
        ), name
        assert "__pycache__" not in name and not name.endswith(".pyc"), name
    assert archive.stat().st_size < 20 * 2**20
    info = json.loads(zipfile.ZipFile(archive).read("gradescope.json"))
    gpu = [t.id for t in load_registry().available if t.needs_gpu]
    assert info["graded_here"] == ["t1", "t7"] and info["pending"] == gpu
    assert zipfile.ZipFile(archive).read("requirements-torch.txt").decode() == f"torch=={gradescope.torch_pin()}\n"


def test_setup_installs_python_bubblewrap_and_the_pinned_cpu_torch(unpacked, tmp_path):
    _, _, _, source = unpacked
    root = tmp_path / "autograder"
    root.mkdir()
    (root / "source").symlink_to(source)
    proc = subprocess.run(
        ["bash", str(source / "setup.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AUTOGRADER_ROOT": str(root), "KIT_SETUP_DRY_RUN": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("apt-get install" in line and "bubblewrap" in line and "python3-venv" in line for line in lines)
    assert any(f"torch=={gradescope.torch_pin()}" in line and "whl/cpu" in line for line in lines), proc.stdout
    assert any(f"-r {root}/source/requirements.txt" in line for line in lines), proc.stdout
    requirements = (source / "requirements.txt").read_text()
    assert "pytest-json-report" in requirements and "torch" not in requirements


def run_autograder(source: Path, root: Path, files: dict[str, bytes], sid: str | None = None) -> dict:
    (root / "submission").mkdir(parents=True)
    for name, data in files.items():
        (root / "submission" / name).write_bytes(data)
    if sid:
        (root / "submission_metadata.json").write_text(
            json.dumps({"id": 1, "users": [{"email": "a@example.edu", "name": "A Student", "sid": sid}]})
        )
    (root / "source").symlink_to(source)
    proc = subprocess.run(
        [str(source / "run_autograder")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "AUTOGRADER_ROOT": str(root), "KIT_PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    assert "gradescope: wrote" in proc.stdout, proc.stdout + proc.stderr
    return results


def check_schema(results: dict) -> None:
    """Gradescope's results.json: a numeric score, tests with name, score, max_score, visibility and output."""
    visibilities = set(gradescope.VISIBILITIES)
    assert isinstance(results["score"], (int, float)) and results["visibility"] == VISIBILITY
    assert results["stdout_visibility"] in visibilities and isinstance(results["output"], str)
    for test in results["tests"]:
        assert {"name", "score", "max_score", "visibility", "output"} <= set(test), test
        assert isinstance(test["score"], (int, float)) and isinstance(test["max_score"], (int, float))
        assert test["visibility"] == VISIBILITY and test.get("status", "passed") in ("passed", "failed")
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]), abs=1e-3)


def by_tag(results: dict, tag: str) -> list[dict]:
    return [t for t in results["tests"] if tag in t.get("tags", [])]


def with_bonus(registry) -> float:
    """Every test's points: the course's total, and the bonus tasks' and their theory questions' on top."""
    theory = registry.theory.bonus_points if registry.theory else 0.0
    return registry.total_points + sum(t.points.total for t in registry.available if t.bonus) + theory


def test_a_full_submission_on_a_fake_autograder_root(unpacked, tmp_path):
    _, _, _, source = unpacked
    registry = load_registry()
    files = {name: (REPO / "solutions" / name).read_bytes() for name in ("t1_attention.py", "t7_generate.py")}
    if registry.theory:
        from grader.grade.theory import reference_answers

        files[registry.theory.answers_file] = reference_answers(SID, registry).encode()
    results = run_autograder(source, tmp_path / "autograder", files, sid=SID)
    check_schema(results)
    assert sum(t["max_score"] for t in results["tests"]) == pytest.approx(with_bonus(registry))
    for task_id in ("t1", "t7"):
        graded = [t for t in by_tag(results, task_id) if "pending" not in t["tags"]]
        assert graded and sum(t["score"] for t in graded) == pytest.approx(registry.task(task_id).points.total)
    pending = by_tag(results, "gpu")
    assert sorted(t["tags"][0] for t in pending) == [t.id for t in registry.available if t.needs_gpu]
    for entry in pending:
        task = registry.task(entry["tags"][0])
        assert entry["score"] == 0 and entry["max_score"] == task.points.total
        # Pending, not failed: a status Gradescope shows as not failed, and the name and output say pending.
        assert entry["status"] == "passed" and "pending" in entry["name"] and entry["output"].startswith("Pending")
        assert "graded on the course's GPU machines" in entry["name"] and "NOT in this submission" in entry["output"]
    if registry.theory:  # the proof waits for a person: pending too
        (proof,) = [t for t in by_tag(results, "manual")]
        assert proof["status"] == "passed" and "pending" in proof["output"] and proof["score"] == 0
    expected = 20.0
    if registry.theory:  # the numbers right; the proof waits for a person
        expected += registry.theory.points - registry.theory.proof_points
    assert results["score"] == pytest.approx(expected, abs=1e-3)
    assert "graded on the course's GPU machines after the deadline" in results["output"]
    assert "leaderboard" not in results  # no timed task is graded without a GPU


def test_the_starter_scores_zero_and_still_lists_the_gpu_tasks(unpacked, tmp_path):
    _, _, _, source = unpacked
    # The starter's t1 and t4 files; no t7 file (a task whose file is missing scores 0 with the reason).
    files = {name: (REPO / "starter" / name).read_bytes() for name in ("t1_attention.py", "t4_flash_attention.cu")}
    results = run_autograder(source, tmp_path / "autograder", files)
    check_schema(results)
    assert results["score"] == 0
    assert sum(t["max_score"] for t in results["tests"]) == pytest.approx(with_bonus(load_registry()))
    assert all(t["output"].startswith("NotImplementedError") for t in by_tag(results, "t1"))
    assert any("t7_generate.py" in t["output"] for t in by_tag(results, "t7")), by_tag(results, "t7")
    t4 = next(t for t in by_tag(results, "pending") if t["tags"][0] == "t4")
    assert "t4_flash_attention.cu: received" in t4["output"]


def test_leaderboard_entries_are_the_opted_in_figures_of_fully_correct_tasks():
    from grader.grade.report import LEADERBOARD, gradescope_results, leaderboard_alias
    from grader.grade.runner import TaskRun, TestOutcome
    from grader.grade.scoring import SubmissionScore, score_task

    registry = load_registry()
    t4, t6 = registry.task("t4"), registry.task("t6")
    boards = {metric.task: metric for metric in LEADERBOARD}
    tflops, tbt = boards["t4"], boards["t6"]

    def graded(alias: str | None, t4_correct: bool = True) -> SubmissionScore:
        def run(task, field, value, correct=True):
            rule = task.timing[1]
            return TaskRun(
                task.id,
                "ran",
                tests=[
                    TestOutcome("values", "passed" if correct else "failed"),
                    TestOutcome(
                        "timing[rule1]", "passed", is_perf=True, timing={"rule": rule.name, "value": 1.0, field: value}
                    ),
                ],
            )

        tasks = [score_task(t4, run(t4, tflops.field, 41.257, t4_correct)), score_task(t6, run(t6, tbt.field, 2.5))]
        return SubmissionScore("s", tasks, [], 0.0, {"leaderboard": alias})

    entries = gradescope_results(graded("Speedy"))["leaderboard"]
    assert entries == [
        {"name": "t4 FlashAttention (TFLOP/s)", "value": 41.257, "order": "desc"},
        {"name": "t6 time between tokens (ms)", "value": 2.5, "order": "asc"},
    ]
    assert "leaderboard" not in gradescope_results(graded(None))  # not opted in
    assert [e["name"] for e in gradescope_results(graded("x", t4_correct=False))["leaderboard"]] == [
        "t6 time between tokens (ms)"
    ]  # a figure shows only behind a fully correct task
    assert leaderboard_alias(b"no\n") is None and leaderboard_alias(b"\n\n") == "anonymous"
    assert leaderboard_alias(b"  Ada  \nignored") == "Ada" and leaderboard_alias(None) is None


def test_the_salt_reaches_the_autograder_only_where_the_registry_does_not_carry_it(unpacked, tmp_path, monkeypatch):
    from grader.grade import seeds

    archive, _, _, _ = unpacked
    info = json.loads(zipfile.ZipFile(archive).read("gradescope.json"))
    registry = load_registry()
    assert gradescope.SALT_KEY not in info and info["salt_fingerprint"] == seeds.resolve_salt(registry).fingerprint
    monkeypatch.setenv(seeds.SALT_ENV, "the-course-salt-kept-in-the-environment")
    built = gradescope.build(tmp_path / "env", visibility=VISIBILITY)
    info = json.loads(zipfile.ZipFile(built).read("gradescope.json"))
    assert info[gradescope.SALT_KEY] == "the-course-salt-kept-in-the-environment"
    assert SID not in info and gradescope.grading_id(tmp_path) is None
    (tmp_path / "submission_metadata.json").write_text(json.dumps({"users": [{"email": "a@example.edu", "sid": ""}]}))
    assert gradescope.grading_id(tmp_path) == "a@example.edu" and gradescope.student_id(tmp_path) is None
