"""Deadlines a busy host cannot turn against honest work, hangs that cost one check, and the gates between gradings.

The runner is driven on a small suite of its own (planted where the hidden suite would be): a check stuck in the
checker process, a check slow only while the host is busy, checks before and after them.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from assignment.registry import Grading, load_registry
from grader.grade import runner
from grader.grade.config import GradeConfig
from grader.grade.host_gate import Gate
from grader.grade.prepare import PreparedTask
from grader.isolation import sandbox

pytestmark = pytest.mark.kit

SUITE = """
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.t1
BUSY = Path(os.environ["PLANTED_BUSY_FILE"])


def test_before():
    pass


@pytest.mark.parametrize("case", ["case0"])
def test_stuck_in_the_checker(case):
    time.sleep(3600)  # a kernel that never ends: nothing in the process can interrupt it


@pytest.mark.parametrize("case", ["case1"])
def test_slow_while_the_host_is_busy(case):
    if not BUSY.exists():  # the first run: the host is busy
        BUSY.write_text("busy")
        time.sleep(3600)


def test_after(check_record):
    check_record["timing"] = {"value": 1.5}
"""


def _phase(tmp_path: Path, monkeypatch, **grading) -> runner.TaskPhase:
    suite = tmp_path / "test_t1_planted.py"
    suite.write_text(SUITE)
    monkeypatch.setattr(runner, "hidden_suite", lambda task: [suite])
    monkeypatch.setenv("PLANTED_BUSY_FILE", str(tmp_path / "busy"))
    monkeypatch.setenv("KIT_GRADING_LOCKS", str(tmp_path / "locks"))
    task = load_registry().task("t1")
    task = replace(task, grading=Grading(**{"timeout_s": 300.0, "test_deadline_s": 1.0, **grading}))
    config = replace(GradeConfig(), pace=False, pace_reference_ms=1e6)  # a rerun alone measures the pace: 1
    return runner.TaskPhase(PreparedTask(task), tmp_path, config, seed=7)


def test_a_hang_fails_that_check_only_and_a_slow_check_is_rerun_alone(tmp_path, monkeypatch):
    run = _phase(tmp_path, monkeypatch).finish()
    by_name = {t.nodeid.split("::")[-1]: t for t in run.tests}
    assert run.status == "ran" and list(by_name) == [
        "test_before",
        "test_stuck_in_the_checker[case0]",
        "test_slow_while_the_host_is_busy[case1]",
        "test_after",
    ], run.log
    assert by_name["test_before"].outcome == "passed"
    stuck = by_name["test_stuck_in_the_checker[case0]"]
    assert stuck.outcome == "failed" and stuck.check["kind"] == "timeout"
    assert "ran past its time limit" in stuck.check["summary"] and "again when rerun alone" in stuck.check["summary"]
    assert "case0" not in stuck.check["summary"], "a message about a hang must not name the hidden case"
    slow = by_name["test_slow_while_the_host_is_busy[case1]"]
    assert slow.outcome == "passed" and slow.alone, "a check slow only while the host was busy passes when rerun alone"
    after = by_name["test_after"]
    assert after.outcome == "passed" and after.timing == {"value": 1.5}, "the checks after a hang still run"


def test_a_phase_that_uses_up_its_budget_fails_what_it_did_not_run(tmp_path, monkeypatch):
    # A budget the checker's start-up fits in on a loaded 2-core host (it did not at 3 s), a deadline past it: the
    # budget, not the watchdog, ends the stuck check.
    run = _phase(tmp_path, monkeypatch, timeout_s=12.0, test_deadline_s=60.0).finish()
    assert run.status == "ran" and run.tests[0].outcome == "passed"
    assert all(t.outcome == "failed" and t.check["kind"] == "timeout" for t in run.tests[1:]), run.tests


def _hold(gate_dir: str, how: str, started, release, held) -> None:
    gate = Gate("checks", Path(gate_dir))
    with gate.shared() if how == "shared" else gate.exclusive():
        held.put(how)
        started.set()
        release.wait(30)


def test_the_gate_lets_readers_share_and_a_writer_wait_for_them(tmp_path):
    context = multiprocessing.get_context("spawn")
    held, release = context.Queue(), context.Event()
    processes = []
    for how in ("shared", "shared", "exclusive"):
        started = context.Event()
        process = context.Process(target=_hold, args=(str(tmp_path), how, started, release, held))
        process.start()
        processes.append(process)
        if how == "shared":
            assert started.wait(30), "a reader waited for another reader"
    time.sleep(0.5)
    assert held.qsize() == 2, "the writer took the gate while readers held it"
    release.set()
    for process in processes:
        process.join(30)
    assert [held.get(timeout=5) for _ in range(3)][-1] == "exclusive"


def test_ending_a_process_waits_until_it_has_exited(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    start = sandbox.process_start(child.pid)
    assert start is not None and sandbox.end_process(child.pid, start)
    assert child.wait(5) < 0
    assert sandbox.end_process(child.pid, start), "an ended process stays ended (its pid may be reused)"


def test_the_grading_record_says_what_each_phase_took(tmp_path):
    from grader.grade.grade import grade_submission

    config = replace(
        GradeConfig(), tasks=("t1",), preflight=False, allow_weak_isolation=True, seed=7, select="naive and case0"
    )
    grade_submission(Path(__file__).resolve().parents[2] / "solutions", tmp_path, config, log=lambda *a, **k: None)
    grading = json.loads((tmp_path / "grading.json").read_text())
    assert set(grading["phases"]) >= {"host_s", "build_s", "checks_s", "theory_s", "total_s"}
    assert grading["pace"]["deadline_scale"] >= 1.0 and grading["pace"]["probe_ms"] > 0
    assert {"build", "checks"} <= set(grading["tasks"]["t1"]["phases"])
    rows = grading["tasks"]["t1"]["timeline"]
    assert rows, "grading.json's timeline lists the checks that ran"
    for _check, checker, began, seconds in rows:
        assert checker.startswith("checks ") and 0 <= began <= grading["phases"]["total_s"] and seconds >= 0, rows


TIMED = """
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.t1


def prepare_timing():
    time.sleep(1)
    Path(os.environ["PLANTED_TIMED_FILE"] + ".prepared").write_text(str(time.time()))


@pytest.mark.perf
def test_timing():
    Path(os.environ["PLANTED_TIMED_FILE"]).write_text(str(time.time()))
"""


def test_a_timing_checker_waits_for_its_turn(tmp_path, monkeypatch):
    from grader.grade.checker_plugin import TIMING
    from grader.grade.phases import HeldFile

    suite = tmp_path / "test_t1_timed.py"
    suite.write_text(TIMED)
    timed = tmp_path / "timed"
    monkeypatch.setattr(runner, "hidden_suite", lambda task: [suite])
    monkeypatch.setenv("PLANTED_TIMED_FILE", str(timed))
    monkeypatch.setenv("KIT_GRADING_LOCKS", str(tmp_path / "locks"))
    turn = HeldFile(tmp_path / "turn")
    task = load_registry().task("t1")
    phase = runner.TaskPhase(
        PreparedTask(task), tmp_path, replace(GradeConfig(), pace=False), 7, phase=TIMING, turn=turn.path
    )
    assert phase.wait_ready(60), "the timing checker reports ready (its preparation done) before its turn"
    prepared = tmp_path / "timed.prepared"
    assert prepared.exists(), "the suite's prepare_timing ran before the checker reported ready"
    time.sleep(1)
    assert not timed.exists(), "the timing check ran before its turn"
    given = time.time()
    turn.give()
    run = phase.finish()
    assert [t.outcome for t in run.tests] == ["passed"] and run.tests[0].is_perf
    assert float(timed.read_text()) >= given
    assert "timing" in run.phases


SLOW_EXIT = (
    TIMED
    + """

import atexit

atexit.register(time.sleep, 4)  # an exit that takes long, as one with torch and a CUDA context does
"""
)


def test_a_timing_checker_hands_the_gpu_on_before_its_process_exits(tmp_path, monkeypatch):
    import fcntl
    import os

    from grader.grade.checker_plugin import TIMING
    from grader.grade.phases import HeldFile

    suite = tmp_path / "test_t1_timed.py"
    suite.write_text(SLOW_EXIT)
    monkeypatch.setattr(runner, "hidden_suite", lambda task: [suite])
    monkeypatch.setenv("PLANTED_TIMED_FILE", str(tmp_path / "timed"))
    monkeypatch.setenv("KIT_GRADING_LOCKS", str(tmp_path / "locks"))
    turn = HeldFile(tmp_path / "turn")
    task = load_registry().task("t1")
    phase = runner.TaskPhase(
        PreparedTask(task), tmp_path, replace(GradeConfig(), pace=False), 7, phase=TIMING, turn=turn.path
    )
    assert phase.wait_ready(60)
    turn.give()
    assert phase.wait_timed(60), "the checker says its timing is done (timing_done) before it exits"
    assert phase.first.process.poll() is None, "the hand-over came before the process's slow exit, not after it"
    handle = os.open(turn.path, os.O_RDWR)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while the checker still holds its turn
    finally:
        os.close(handle)
    run = phase.finish()
    assert [t.outcome for t in run.tests] == ["passed"], "the results still come back whole after the hand-over"
    assert run.phases["timing"] >= 3, "the phase's time counts from its turn, its exit included"


SHARDED = """
import pytest

pytestmark = pytest.mark.t1


@pytest.mark.parametrize("i", [0, 1, pytest.param(2, marks=pytest.mark.cost(30)), 3, 4])
def test_check(i):
    assert i != 3
"""


def test_checks_dealt_to_shards_come_back_whole_and_in_order(tmp_path, monkeypatch):
    suite = tmp_path / "test_t1_sharded.py"
    suite.write_text(SHARDED)
    monkeypatch.setattr(runner, "hidden_suite", lambda task: [suite])
    monkeypatch.setenv("KIT_GRADING_LOCKS", str(tmp_path / "locks"))
    task = load_registry().task("t1")
    config = replace(GradeConfig(), pace=False)
    shards = [runner.TaskPhase(PreparedTask(task), tmp_path, config, 7, shard=(i, 2)) for i in range(2)]
    run = runner.merged_shards([shard.finish() for shard in shards])
    assert [t.nodeid.split("::")[-1] for t in run.tests] == [f"test_check[{i}]" for i in range(5)]
    assert [t.outcome for t in run.tests] == ["passed"] * 3 + ["failed", "passed"]
    hands = {t.nodeid.split("::")[-1]: t.shard for t in run.tests}
    assert [name for name, shard in hands.items() if shard == hands["test_check[2]"]] == ["test_check[2]"], (
        f"the costly check is dealt a checker of its own, the others share the other: {hands}"
    )


EARLY = """
import os
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.t2, pytest.mark.cpu]
Path(os.environ["PLANTED_EARLY_FILE"] + ".collected").write_text(str(time.time()))


@pytest.mark.parametrize("i", range(3))
def test_check(i):
    Path(os.environ["PLANTED_EARLY_FILE"] + f".{i}").write_text(str(time.time()))
"""


def test_checkers_start_before_the_build_and_wait_for_it(tmp_path, monkeypatch):
    """A CUDA task's checkers start with the grading, pay for their start while the task builds, and run no check
    before the build is done; a build that fails stops them (and the task reports the build's failure)."""
    from grader.grade import phases

    suite = tmp_path / "test_t2_early.py"
    suite.write_text(EARLY)
    planted = tmp_path / "early"
    monkeypatch.setattr(runner, "hidden_suite", lambda task: [suite])
    monkeypatch.setenv("PLANTED_EARLY_FILE", str(planted))
    task = load_registry().task("t2")
    config = replace(GradeConfig(), pace=False, gates=False, parallel=8)
    built: dict[str, float] = {}

    def prepare(task, fail=False):
        deadline = time.time() + 60
        while not Path(f"{planted}.collected").exists() and time.time() < deadline:
            time.sleep(0.1)  # the checker is collecting while this "builds"
        time.sleep(1)
        built[task.id] = time.time()
        expected = phases.expected_preparation(task, tmp_path)
        return expected.fail("compile_error", "it did not build") if fail else expected

    runs, _ = phases.run_tasks([task], prepare, tmp_path, config, {"t2": 7}, lambda item: None, has_gpu=True, scale=1.0)
    assert runs[0].status == "ran" and [t.outcome for t in runs[0].tests] == ["passed"] * 3, runs[0]
    collected = float(Path(f"{planted}.collected").read_text())
    assert collected < built["t2"], "the checker had collected its checks before the build ended"
    assert all(float(Path(f"{planted}.{i}").read_text()) >= built["t2"] for i in range(3)), "no check before the build"

    for path in tmp_path.glob("early.*"):
        path.unlink()
    runs, _ = phases.run_tasks(
        [task], lambda t: prepare(t, fail=True), tmp_path, config, {"t2": 7}, lambda item: None, has_gpu=True, scale=1.0
    )
    assert runs[0].status == "compile_error" and runs[0].reason == "it did not build"
    time.sleep(1)
    assert not any(Path(f"{planted}.{i}").exists() for i in range(3)), "a checker ran a check of a failed build"
