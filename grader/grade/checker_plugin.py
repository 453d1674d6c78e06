"""The grader's pytest plugin, loaded into every hidden-suite process (``-p grader.grade.checker_plugin``).

That process is the checker: it owns the inputs, the expected outputs, the comparisons and the
timing, and never imports student code (Python runs in the sandboxed worker; CUDA is the kit's host
code around the student's device code). This plugin makes what it reports complete and precise:

* the ids of every test it collected go to ``KIT_COLLECTED_FILE`` before any runs, so the runner
  counts a test that never reported as a failure, never as absent;
* a watchdog ends the process when one check runs past its deadline (``KIT_TEST_DEADLINE_S``, or a
  test's ``deadline`` marker), writing which check hung to ``KIT_EVENTS_FILE``: a hang costs that
  deadline, not the task's whole budget;
* each failure's kind and a summary that tells its size but not the inputs go into the JSON report
  (``check`` metadata), with the public test or make target that reproduces it (``reproduce`` marker), and the
  full text as ``detail`` (grading.json only: exception text from the student's code may carry hidden inputs);
* a CUDA fault that poisons the context (illegal address, trap, launch failure), or a student worker
  that hangs or dies, ends the session at once with an event: the task scores zero with that reason
  instead of failing every later check the same way.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from assignment.checks import CheckFailure
from grader.isolation.feedback import CUDA_FAULT

HANG_EXIT_CODE = 86
_PATH = re.compile(r"(?:/[\w.@+-]+)+/([\w.@+-]+)")
SUMMARY_CHARS = 400
DETAIL_CHARS = 4000  # of the full text an instructor gets in grading.json


def scrub(text: str, limit: int = SUMMARY_CHARS) -> str:
    """One line, no directories (only file names), at most ``limit`` characters."""
    text = _PATH.sub(r"\1", " ".join(str(text).split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _event(kind: str, **fields) -> None:
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


class _Watchdog:
    def __init__(self, default_s: float):
        self.default_s = default_s
        self.current: tuple[str, float, float] | None = None  # nodeid, started, deadline
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(0.25)
            current = self.current
            if current and time.monotonic() - current[1] > current[2]:
                _event("hang", nodeid=current[0], seconds=round(current[2]))
                os._exit(HANG_EXIT_CODE)


_watchdog: _Watchdog | None = None


def die_with_parent() -> None:
    """Have the kernel kill this process when its parent dies (Linux's PR_SET_PDEATHSIG): a grader killed with
    kill -9, alone or in a class batch, leaves no checker running (and timing) on the GPU."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the runner's own time limit still ends it


def pytest_configure(config: pytest.Config) -> None:
    global _watchdog
    if os.environ.get("KIT_EVENTS_FILE"):  # started by the grader's runner
        die_with_parent()
    deadline = os.environ.get("KIT_TEST_DEADLINE_S")
    if deadline:
        _watchdog = _Watchdog(float(deadline))


def pytest_collection_finish(session: pytest.Session) -> None:
    path = os.environ.get("KIT_COLLECTED_FILE")
    if path:
        Path(path).write_text(json.dumps([item.nodeid for item in session.items]))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    if _watchdog is not None:
        marker = item.get_closest_marker("deadline")
        limit = float(marker.args[0]) if marker else _watchdog.default_s
        _watchdog.current = (item.nodeid, time.monotonic(), limit)
    yield
    if _watchdog is not None:
        _watchdog.current = None


def pytest_json_runtest_metadata(item: pytest.Item, call) -> dict:
    marker = item.get_closest_marker("reproduce")
    extra = {"reproduce": marker.args[0]} if marker else {}
    if call.excinfo is None or call.excinfo.errisinstance(pytest.skip.Exception):
        return extra if call.when == "call" else {}
    exc = call.excinfo.value
    check = classify(exc)
    if check["kind"] == "memory_error" and not isinstance(exc, CheckFailure):
        _event("cuda_fault", nodeid=item.nodeid, summary=check["summary"])
        item.session.shouldstop = "a CUDA fault poisoned the context"
    elif type(exc).__name__ == "WorkerFailure" and exc.kind in ("timeout", "crash", "killed", "protocol"):
        # The student's process hung or died: the task ends here (scored zero, with this reason).
        _event(
            "hang" if exc.kind == "timeout" else "worker_crash",
            nodeid=item.nodeid,
            summary=check["summary"],
            seconds=round(getattr(exc, "seconds", 0) or 0),
        )
        item.session.shouldstop = "the student's code hung or crashed"
    return {**extra, "check": check}
