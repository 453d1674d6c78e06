"""Class grading on Slurm (grader/classroom/slurm.py): the job array and its collect job on a real single-node Slurm
(munged, slurmctld and slurmd on localhost, started by grader/classroom/slurm_local.py), and the scripts' resources.

The cluster test skips, saying which step failed and showing the daemon's log, only where Slurm cannot start
(Debian's slurmctld, slurmd, slurm-client and munge missing, or not root); .ci/run installs them.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import pytest

from assignment.registry import load_registry
from grader.classroom import batch, slurm
from grader.classroom.slurm_local import PACKAGES, LocalSlurm, LocalSlurmError, missing_programs

pytestmark = [pytest.mark.kit, pytest.mark.slow]  # end to end: make test-slow
REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- the scripts, without Slurm


def script_for(task_ids: tuple[str, ...], **options) -> str:
    registry = load_registry()
    tasks = slurm.graded_tasks(registry, task_ids)
    chunks = [["a", "b"], ["c"]]
    limit = slurm.slurm_time(slurm.time_limit_s(tasks, 2))
    return slurm.grade_script(
        submissions=Path("/class"),
        out=Path("/out"),
        run_dir=Path("/out/slurm/r"),
        chunks=chunks,
        tasks=tasks,
        task_ids=task_ids,
        options=slurm.SlurmOptions(**options),
        time_limit=limit,
        gres=slurm.default_gres(tasks),
        keep_done=True,
    )


def test_a_gpu_is_asked_for_only_when_a_gpu_task_is_graded():
    gpu = script_for(())  # every task
    assert "#SBATCH --gres=gpu:1" in gpu and "#SBATCH --cpus-per-task=8" in gpu
    cpu = script_for(("t1", "t7"))
    assert "--gres" not in cpu and "#SBATCH --cpus-per-task=4" in cpu
    assert "#SBATCH --array=0-1\n" in cpu
    assert '/out/slurm/r/chunks/"$SLURM_ARRAY_TASK_ID".txt' in cpu
    assert '--no-collect --task t1 --task t7 --jobs 1 --keep-done --only "${IDS[@]}"' in cpu
    throttled = script_for(("t1",), max_running=3, partition="gpu", account="cs101")
    assert "#SBATCH --array=0-1%3" in throttled and "#SBATCH --partition=gpu" in throttled
    assert "#SBATCH --account=cs101" in throttled


def test_the_time_limit_is_every_graded_task_at_its_registry_limit_times_the_chunk():
    registry = load_registry()
    t1 = [registry.task("t1")]
    per = registry.task("t1").grading.timeout_s + batch.LANE_OVERHEAD_S
    assert slurm.seconds_per_submission(t1) == per
    assert slurm.time_limit_s(t1, 3) == 3 * per + slurm.ELEMENT_MARGIN_S
    assert slurm.time_limit_s(t1, 3, timeout_scale=2.0) > slurm.time_limit_s(t1, 3)
    gpu = [registry.task("t4")]
    assert slurm.seconds_per_submission(gpu) > registry.task("t4").grading.timeout_s + batch.LANE_OVERHEAD_S  # builds
    assert slurm.slurm_time(59) == "0-00:01:00" and slurm.slurm_time(25 * 3600 + 1) == "1-01:01:00"
    assert slurm.chunked(list("abcde"), 2) == [["a", "b"], ["c", "d"], ["e"]]


def test_without_sbatch_the_error_says_where_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(slurm.SlurmError, match="sbatch is not on PATH.*login node"):
        slurm.submit(REPO / "solutions", tmp_path / "out", tasks=("t1",), log=lambda *a: None)


# --------------------------------------------------------------------------- a real single-node Slurm


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    missing = missing_programs()
    if missing:
        pytest.skip(
            f"Slurm is not installed here ({', '.join(missing)} not on PATH): apt-get install "
            f"--no-install-recommends {PACKAGES}"
        )
    if os.geteuid() != 0:
        pytest.skip("a local Slurm needs root (slurmd runs jobs as their owner)")
    local = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        local.start()
    except LocalSlurmError as exc:
        pytest.skip(f"Slurm could not start here: {exc}")
    yield local
    local.stop()


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "class" / "gradebook.csv", newline="") as handle:
        return {row["id"]: row for row in csv.DictReader(handle)}


def gradings(out: Path, student: str) -> int:
    lines = (out / "students" / student / "attempts.jsonl").read_text().splitlines()
    return sum(json.loads(line)["event"] == "graded" for line in lines)


def test_a_class_is_graded_through_a_job_array_and_a_collect_job(cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    submissions, out = tmp_path / "class", tmp_path / "out"
    for student, impl in (("alice", "solutions"), ("bob", "starter")):
        (submissions / student).mkdir(parents=True)
        (submissions / student / "t1_attention.py").write_text((REPO / impl / "t1_attention.py").read_text())
    # One element per submission; each takes every CPU of the node, so the two run one after the other (two
    # gradings side by side on a 2-core machine take longer than one after the other).
    argv = [
        str(submissions),
        "--out",
        str(out),
        "--task",
        "t1",
        "--allow-weak-isolation",
        "--slurm",
        "--chunk-size",
        "1",
        "--cpus-per-task",
        str(cluster.node.cpus),
        "--wait",
    ]
    assert batch.main(argv) == 0, capsys.readouterr()
    first = slurm.last_round(out)
    assert first["chunks"] == [["alice"], ["bob"]] and first["gres"] is None
    assert set(first["states"].values()) == {"COMPLETED"} and len(first["states"]) == 3, first["states"]
    run_dir = Path(first["run_dir"])
    script = (run_dir / "grade.sbatch").read_text()
    assert "#SBATCH --array=0-1" in script and "--gres" not in script and "#SBATCH --time=0-00:" in script
    assert "--collect-only" in (run_dir / "collect.sbatch").read_text()
    assert "--dependency=afterany:" in (run_dir / "submit.sh").read_text()
    assert "1 submission(s): alice" in (run_dir / "logs" / f"grade_{first['array_job']}_0.log").read_text()
    book = gradebook(out)
    assert book["alice"]["t1"] == "10.00" and book["alice"]["status"] == "graded", book["alice"]
    assert book["bob"]["t1"] == "0.00" and book["bob"]["status"] == "graded", book["bob"]

    # A lost element: bob's results never arrived. Submitting again grades him alone; alice stays as she was.
    (out / "students" / "bob" / "done.json").unlink()
    alice_results = (out / "students" / "alice" / "results.json").stat().st_mtime_ns
    assert batch.pending(submissions, out) == ["bob"]
    assert batch.main(argv) == 0, capsys.readouterr()
    second = slurm.last_round(out)
    assert second["run_dir"] != first["run_dir"] and second["chunks"] == [["bob"]]
    assert set(second["states"].values()) == {"COMPLETED"}, second["states"]
    assert gradebook(out)["bob"]["status"] == "graded"
    assert (out / "students" / "alice" / "results.json").stat().st_mtime_ns == alice_results
    assert gradings(out, "alice") == 1 and gradings(out, "bob") == 2

    # Nothing left: no job, the class outputs are collected here.
    capsys.readouterr()
    assert batch.main(argv) == 0
    assert "nothing to submit" in capsys.readouterr().out
    assert slurm.last_round(out)["run_dir"] == second["run_dir"]
    assert slurm.status(out, log=lambda *a: None) == 0
    assert sys.executable in script  # the elements run the submitting Python (the repository is on a shared disk)
