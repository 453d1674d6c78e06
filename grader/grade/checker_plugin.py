"""The grader's pytest plugin, loaded into every hidden-suite process (``-p grader.grade.checker_plugin``).

That process is the checker: it owns the inputs, the expected outputs, the comparisons and the timing, and never
imports student code (Python runs in the sandboxed worker; CUDA is the kit's host code around the student's device
code). The runner (grader/grade/runner.py) starts it for one task and one phase (``KIT_PHASE``: the checks, or the
timing checks), possibly several times (after a hang, the remaining checks in a new process; a check that ran past
its deadline, alone). This plugin makes what it reports complete, precise and in time:

* the ids of every test it collected go to ``KIT_COLLECTED_FILE`` before any runs (so a test that never reports
  counts as a failure), and ``KIT_SELECT_FILE`` keeps this process to some of them (``only`` or ``skip``);
* each test's result is appended to ``KIT_RESULTS_FILE`` (JSON lines) as soon as it is known, so a process that must
  be ended mid-suite has told everything it ran;
* deadlines: one check may run ``KIT_TEST_DEADLINE_S`` seconds (or its ``deadline`` marker's), times
  ``KIT_DEADLINE_SCALE`` (the host's pace, grader/grade/pace.py). A worker call past it fails that check and the
  suite goes on (event ``deadline``); a check stuck in this process (a kernel that never ends) is ended by a watchdog
  that writes which check hung (event ``hang``) and exits, and the runner goes on in a new process. Either way the
  runner reruns the check once alone before it counts;
* who runs when (grader/grade/host_gate.py): each check holds the host's ``checks`` gate shared (not when the runner
  reruns it alone: ``KIT_RUN_ALONE``); the checks phase holds the GPU gate shared; the timing phase waits for its
  turn (``KIT_TIMING_TURN``, a file the runner keeps locked until every check of the grading is done and every
  sandboxed worker has ended), then holds the GPU gate exclusively: a timed check has the GPU to itself; once every
  timed check is over, it ends its workers, drains its GPU work, lets both go and says ``timing_done``, and the runner
  gives the next task its turn while this process exits;
* each failure's kind and a summary that tells its size but not the inputs (``check``), with the public test or make
  target that reproduces it (``reproduce`` marker), and the full text as ``detail`` (grading.json only: exception
  text from the student's code may carry hidden inputs);
* a CUDA fault that poisons the context (illegal address, trap, launch failure), or a student worker that dies, ends
  the session at once with an event: the task scores zero with that reason.

A check writes what it measured into the ``check_record`` fixture (assignment/pytest_plugin.py): the timing checks
their rule's figures (``timing``), t1's memory check what it read; it is kept with the check's result.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from assignment.checks import CheckFailure
from assignment.pytest_plugin import CHECK_RECORD
from grader.grade.host_gate import Gate, gpu_gate_name
from grader.isolation.client import stop_all
from grader.isolation.feedback import CUDA_FAULT

HANG_EXIT_CODE = 86
_PATH = re.compile(r"(?:/[\w.@+-]+)+/([\w.@+-]+)")
SUMMARY_CHARS = 400
DETAIL_CHARS = 4000  # of the full text an instructor gets in grading.json
MESSAGE_CHARS = 2000  # of a phase's failure text kept in a result
CHECKS, TIMING = "checks", "timing"  # KIT_PHASE


def scrub(text: str, limit: int = SUMMARY_CHARS) -> str:
    """One line, no directories (only file names), at most ``limit`` characters."""
    text = _PATH.sub(r"\1", " ".join(str(text).split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def event(kind: str, **fields) -> None:
    path = os.environ.get("KIT_EVENTS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"event": kind, **fields}) + "\n")


def classify(exc: BaseException) -> dict:
    """What the grader may tell a student about a failed check (``summary``), and what only the instructor sees
    (``detail``, kept in grading.json). A summary never quotes text the student's code could have written with the
    hidden inputs in hand: a worker's failure says its ``feedback`` (grader/isolation/feedback.py), an exception
    raised here says its type, with its message only when the kit's own code raised it (numbers masked)."""
    from grader.isolation.client import WorkerFailure

    detail = scrub(
        f"{type(exc).__name__}: {exc}" + (f" | {exc.detail}" if getattr(exc, "detail", "") else ""), DETAIL_CHARS
    )
    if isinstance(exc, CheckFailure):
        return {"kind": exc.kind, "summary": scrub(exc.summary), "detail": scrub(str(exc), DETAIL_CHARS)}
    if isinstance(exc, WorkerFailure):
        kind = {"killed": "crash", "missing": "import", "result": "shape", "protocol": "crash"}.get(exc.kind, exc.kind)
        return {
            "kind": kind,
            "summary": scrub(exc.feedback, 1200 if kind == "import" else SUMMARY_CHARS),
            "detail": detail,
        }
    if isinstance(exc, NotImplementedError):  # the kit's own CUDA wrappers, here: a TODO left in a kernel file
        return {"kind": "not_implemented", "summary": str(exc).splitlines()[0] if str(exc) else "not implemented"}
    name = type(exc).__name__
    if name == "ImpossibleTimeError":
        return {"kind": "impossible_time", "summary": scrub(str(exc))}
    fault = CUDA_FAULT.search(str(exc))
    if fault:
        return {"kind": "memory_error", "summary": f"{name}: {fault[0]}", "detail": detail}
    if isinstance(exc, AssertionError):
        return {"kind": "mismatch", "summary": "a check failed", "detail": detail}
    from grader.isolation.served import masked_numbers, raised_by_kit

    if raised_by_kit(exc) and str(exc):  # the kit's own words; the numbers in them may be hidden inputs
        return {
            "kind": "exception",
            "summary": scrub(f"{name}: {masked_numbers(str(exc).splitlines()[0])}"),
            "detail": detail,
        }
    return {
        "kind": "exception",
        "summary": f"{name} while checking the result (the instructor has the details)",
        "detail": detail,
    }


# --------------------------------------------------------------------------- deadlines


def deadline_of(item: pytest.Item) -> float | None:
    """This check's time limit in seconds (its marker's or the task's, times the host's pace), or None outside a
    grading."""
    base = os.environ.get("KIT_TEST_DEADLINE_S")
    if not base:
        return None
    marker = item.get_closest_marker("deadline")
    seconds = float(marker.args[0]) if marker else float(base)
    return seconds * float(os.environ.get("KIT_DEADLINE_SCALE", "1"))


class _Watchdog:
    """Ends this process when the check it runs is stuck past its deadline (nothing here can interrupt a kernel
    that never ends, nor a wait on one)."""

    def __init__(self):
        self.current: tuple[str, float, float] | None = None  # nodeid, started, seconds allowed
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(0.25)
            current = self.current
            if current and time.monotonic() - current[1] > current[2]:
                event("hang", nodeid=current[0], seconds=round(current[2]))
                os._exit(HANG_EXIT_CODE)


_watchdog: _Watchdog | None = None
_gates: dict[str, object] = {}  # what this process holds: the GPU gate, its timing turn


def die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux's PR_SET_PDEATHSIG): a grader killed with
    kill -9, alone or in a class batch, leaves no checker running (and timing) on the GPU."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the runner's own time limit still ends it


def _phase() -> str:
    return os.environ.get("KIT_PHASE", CHECKS)


def pytest_configure(config: pytest.Config) -> None:
    global _watchdog
    if os.environ.get("KIT_EVENTS_FILE"):  # started by the grader's runner
        die_with_parent()
    if os.environ.get("KIT_TEST_DEADLINE_S"):
        _watchdog = _Watchdog()
    # The GPU gate before any check takes the checks gate (one order for every process: no two wait on each other);
    # a rerun alone's runner holds it for the rerun.
    alone = os.environ.get("KIT_RUN_ALONE") == "1"
    if (
        os.environ.get("KIT_GATES") == "1"
        and _phase() == CHECKS
        and os.environ.get("KIT_USES_GPU") == "1"
        and not alone
    ):
        _gates["gpu"] = Gate(gpu_gate_name()).hold_shared()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session):
    """A checker started before its task's build ended (``KIT_BUILD_GATE``): Python, torch, the collection and the
    CUDA context are paid for while the build runs; its first check waits here until the grader gives the gate (the
    build done, the spliced library in place)."""
    gate = os.environ.get("KIT_BUILD_GATE")
    if gate:
        if os.environ.get("KIT_USES_GPU") == "1":
            _warm_up_cuda()
        os.close(_locked(gate, fcntl.LOCK_SH))  # the grader holds it exclusively until the build is done
        event("built", at=time.time())
    yield


def _locked(path: str, mode: int) -> int:
    """A descriptor of the grader's file at ``path``, locked in ``mode`` (waits while the grader holds it)."""
    handle = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    fcntl.flock(handle, mode)
    return handle


def _take_timing_turn(item: pytest.Item) -> None:
    """Wait for this task's turn to time (the runner releases it when every check of the grading is done), then
    take the GPU from every other grading on this host; both are held until this process ends. Before waiting, the
    suite's own preparation (its module's ``prepare_timing``: the checker's side of its workloads, e.g. t6's model),
    then the ``timing_ready`` event: the grader gives the first turn only when every timing checker is ready, so no
    preparation runs while another task is timed."""
    if "turn" in _gates:
        return
    _warm_up_cuda()
    prepare = getattr(item.module, "prepare_timing", None)
    if prepare is not None:
        try:
            prepare()
        except Exception:  # noqa: BLE001 - the timing check builds what it needs itself and says what went wrong
            pass
    event("timing_ready", at=time.time())
    turn = os.environ.get("KIT_TIMING_TURN")
    if turn:
        _gates["turn"] = _locked(turn, fcntl.LOCK_EX)
        event("timing_turn", at=time.time())
    if os.environ.get("KIT_GATES") == "1":
        _gates["gpu"] = Gate(gpu_gate_name()).hold_exclusive()
    _gates.setdefault("turn", None)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """A timing checker whose turn came hands the GPU on as soon as its timed checks are over, not when its process
    has ended (an exit with torch and a CUDA context takes a second or two, per task): every sandboxed worker it
    started is ended and waited for, its own GPU work drained, the GPU gate and its turn let go, then the
    ``timing_done`` event, on which the grader gives the next task its turn. What is left of this process runs no
    kernel and nothing of the student's."""
    if _phase() != TIMING or "turn" not in _gates:
        return
    stop_all()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    for name in ("gpu", "turn"):
        handle = _gates.pop(name, None)
        if handle is not None:
            os.close(handle)
    event("timing_done", at=time.time())


def _warm_up_cuda() -> None:
    """The CUDA context and the allocator, made before the turn (no kernel runs): what the timing would otherwise
    pay for first, while the GPU is kept for it."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.init()
            torch.empty(1, device="cuda")
    except Exception:  # noqa: BLE001 - the timing check itself will say what is wrong with CUDA
        pass


# --------------------------------------------------------------------------- what runs


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """After -m and -k: this checker's shard of the checks (``KIT_SHARD`` i/n, ``dealt``), recorded as collected;
    then the runner's selection among them."""
    index, _, count = os.environ.get("KIT_SHARD", "0/1").partition("/")
    position = {item.nodeid: i for i, item in enumerate(items)}  # in the whole collection, before the dealing
    if int(count) > 1:
        mine = dealt(items, int(count))[int(index)]
        config.hook.pytest_deselected(items=[i for i in items if i not in mine])
        items[:] = mine
    path = os.environ.get("KIT_COLLECTED_FILE")
    if path:
        mine_ids = [item.nodeid for item in items]
        Path(path).write_text(json.dumps({"ids": mine_ids, "positions": [position[n] for n in mine_ids]}))
    select = os.environ.get("KIT_SELECT_FILE")
    if not select:
        return
    chosen = json.loads(Path(select).read_text())
    only, skip = chosen.get("only"), set(chosen.get("skip", ()))
    keep = [i for i in items if (only is None or i.nodeid in only) and i.nodeid not in skip]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


DEFAULT_COST_S = 0.5  # a check without a cost marker: a values check, about


def cost_of(item: pytest.Item) -> float:
    """About how long ``item`` takes on the reference: its ``cost`` marker's seconds, else ``DEFAULT_COST_S``."""
    marker = item.get_closest_marker("cost")
    return float(marker.args[0]) if marker else DEFAULT_COST_S


def dealt(items: list, count: int) -> list[list]:
    """``items`` dealt to ``count`` checkers, the costliest first, each to the checker with the least cost so far (so
    the slow checks, racecheck's, run side by side and not after each other); each hand in collection order. Every
    checker of a task deals the same collection the same way."""
    loads, hands = [0.0] * count, [[] for _ in range(count)]
    for position, item in sorted(enumerate(items), key=lambda pair: (-cost_of(pair[1]), pair[0])):
        least = min(range(count), key=lambda hand: (loads[hand], hand))
        loads[least] += cost_of(item)
        hands[least].append((position, item))
    return [[item for _, item in sorted(hand, key=lambda pair: pair[0])] for hand in hands]


_RESULT = pytest.StashKey[dict]()
_BEGAN = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    if _phase() == TIMING and "perf" in item.keywords:
        _take_timing_turn(item)
    shared = None
    if os.environ.get("KIT_GATES") == "1" and _phase() == CHECKS and os.environ.get("KIT_RUN_ALONE") != "1":
        shared = Gate("checks").shared()
        shared.__enter__()
    item.stash[_BEGAN] = time.time()  # after the gates: when the check itself began (grading.json's timeline)
    limit = deadline_of(item)
    if _watchdog is not None and limit is not None:
        _watchdog.current = (item.nodeid, time.monotonic(), limit)
    try:
        yield
    finally:
        if _watchdog is not None:
            _watchdog.current = None
        if shared is not None:
            shared.__exit__(None, None, None)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """Each phase's outcome into the test's result; the result written once its teardown is known."""
    outcome = yield
    report = outcome.get_result()
    result = item.stash.setdefault(_RESULT, _new_result(item))
    result["duration_s"] += report.duration
    if report.failed:
        if result["outcome"] in ("passed", "skipped"):
            result["outcome"] = "failed" if report.when == "call" else "error"
            result["message"] = _failure_text(report)
            if call.excinfo is not None:
                result["check"] = _check_of(item, call.excinfo.value)
    elif report.skipped and result["outcome"] == "passed":
        result["outcome"] = "skipped"
        result["message"] = _skip_reason(report)
    if report.when == "teardown":
        result["record"] = item.stash.get(CHECK_RECORD, {})
        _write_result(result)


def _new_result(item: pytest.Item) -> dict:
    marker = item.get_closest_marker("reproduce")
    return {
        "nodeid": item.nodeid,
        "outcome": "passed",
        "message": "",
        "perf": "perf" in item.keywords,
        "structure": "structure" in item.keywords,
        "reproduce": marker.args[0] if marker else "",
        "check": {},
        "duration_s": 0.0,
        "began_at": item.stash.get(_BEGAN, time.time()),
        "shard": os.environ.get("KIT_SHARD", "0/1"),
    }


def _failure_text(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", ""):
        return str(crash.message)[:MESSAGE_CHARS]
    return str(report.longrepr)[-MESSAGE_CHARS:]


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)[:MESSAGE_CHARS]


def _write_result(result: dict) -> None:
    path = os.environ.get("KIT_RESULTS_FILE")
    if not path:
        return
    try:
        line = json.dumps(result)
    except (TypeError, ValueError):  # something a check recorded is no JSON: keep the outcome
        line = json.dumps(dict(result, record={}))
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def _check_of(item: pytest.Item, exc: BaseException) -> dict:
    """The failure's kind and summary; a failure that ends the session says so in an event first."""
    if isinstance(exc, (pytest.skip.Exception, KeyboardInterrupt)):
        return {}
    check = classify(exc)
    if check["kind"] == "memory_error" and not isinstance(exc, CheckFailure):
        event("cuda_fault", nodeid=item.nodeid, summary=check["summary"])
        item.session.shouldstop = "a CUDA fault poisoned the context"
    elif type(exc).__name__ == "WorkerFailure" and exc.kind == "timeout":
        # The student's call ran past the deadline: this check only. The worker was stopped; the next call starts
        # a new one. The runner reruns the check alone before it counts.
        event("deadline", nodeid=item.nodeid, seconds=round(getattr(exc, "seconds", 0) or 0))
    elif type(exc).__name__ == "WorkerFailure" and exc.kind in ("crash", "killed", "protocol"):
        # The student's process died: the task ends here (scored zero, with this reason).
        event("worker_crash", nodeid=item.nodeid, summary=check["summary"])
        item.session.shouldstop = "the student's code crashed"
    return check
