"""The kit's pytest plugin (loaded with ``-p assignment.pytest_plugin`` from pyproject.toml).

* registers one marker per registry task (t1 ... t7), so ``make test T=t4``
  is ``pytest -m t4``;
* rejects a test that uses a task marker the registry does not define;
* skips, with a visible reason, every test of a GPU task when no GPU is found (unless marked ``cpu``);
* provides the ``seed`` fixture: public tests use the registry's fixed seed,
  hidden tests a seed drawn at grading time (``KIT_SEED``, printed on failure);
* reports a test stopped by a student file that does not import (a syntax error, say) in one line, and the error
  itself once at the end, instead of the same traceback per test;
* reports a test that fails at a TODO stub (``NotImplementedError("t1: ...")``) in one line instead of a
  traceback, and sums them up per task ("t1: 40 tests stop at a TODO(t1) region not written yet"); they
  still count as failures (the exit status, the JSON report, the grader).
"""

from __future__ import annotations

import os
import re
import secrets
from functools import lru_cache

import pytest

from assignment.cuda.toolchain import hopper_absent
from assignment.impl import StudentImportError, default_impl, student_dir
from assignment.registry import RegistryError, check_markers, load_registry
from assignment.markers import STUB_MESSAGE


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch missing entirely
        return False


def pytest_configure(config: pytest.Config) -> None:
    registry = load_registry()
    for task in registry.tasks:
        config.addinivalue_line("markers", f"{task.id}: {task.title} (task {task.id})")
    problem = selection_problem(config.option.markexpr or "", registry, _marker_names(config.getini("markers")))
    if problem:
        raise pytest.UsageError(problem)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _marker_names(lines: list[str]) -> set[str]:
    return {line.split(":")[0].split("(")[0].strip() for line in lines}


def selection_problem(expression: str, registry, markers: set[str]) -> str:
    """'' when ``expression`` (``make test T=...``, ``pytest -m ...``) names only task ids and markers that exist,
    else what is wrong and what to type instead (pytest's own message names neither the tasks nor T=)."""
    words = [w for w in _WORD.findall(expression) if w not in ("and", "or", "not")]
    unknown = [w for w in dict.fromkeys(words) if w not in markers and w not in registry.ids]
    if not unknown:
        return ""
    ids = ", ".join(registry.ids)
    what = " and ".join(f"'{w}'" for w in unknown)
    return (
        f"{what} is not a task of this assignment (in the test selection {expression!r}); the tasks are {ids}. "
        f"Run one task's tests with e.g. make test T={registry.ids[0]}, or every task's with make test."
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m assignment.pytest_plugin EXPRESSION``: check a T= selection before anything else runs (the
    Makefile's test target asks, so a typo costs a second, not the CUDA checks that run before pytest)."""
    import sys
    import tomllib

    from assignment.impl import REPO_ROOT

    args = sys.argv[1:] if argv is None else argv
    lines = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    problem = selection_problem(" ".join(args), load_registry(), _marker_names(lines))
    if problem:
        print(f"error: {problem}", file=sys.stderr)
    return 2 if problem else 0


def pytest_report_header(config: pytest.Config) -> list[str]:
    impl = os.environ.get("IMPL") or default_impl()
    try:
        where = str(student_dir())
    except Exception as exc:  # shown, then the tests report it
        where = f"unavailable ({exc})"
    gpu = "none"
    if _cuda_available():
        import torch

        gpu = torch.cuda.get_device_name()
    return [f"kit: IMPL={impl} -> {where}", f"kit: GPU: {gpu}"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    registry = load_registry()
    has_gpu = _cuda_available()
    for item in items:
        names = {m.name for m in item.iter_markers()}
        try:
            check_markers(names, registry, item.nodeid)
        except RegistryError as exc:
            raise pytest.UsageError(str(exc)) from None
        task_ids = [n for n in names if n in registry.ids]
        # A GPU task's test needs a GPU unless it is marked cpu (t6's cache writes are plain PyTorch).
        needs_gpu = "gpu" in names or ("cpu" not in names and any(registry.task(t).needs_gpu for t in task_ids))
        if needs_gpu and not has_gpu:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False here"))
        elif has_gpu and "cpu" not in names and (hopper := [t for t in task_ids if registry.task(t).needs_hopper]):
            if absent := hopper_absent():  # asked once per device (toolchain caches it)
                item.add_marker(pytest.mark.skip(reason=f"{hopper[0]} is not available on this GPU: {absent}"))


@lru_cache(maxsize=1)
def grading_seed() -> int:
    """The hidden suites' seed: ``KIT_SEED`` (the grader sets it; set it to replay), else drawn once per run.

    It seeds the inputs and draws the shapes the registry leaves open (``[task.hidden] draw``).
    """
    env = os.environ.get("KIT_SEED")
    return int(env) if env else secrets.randbelow(2**31)


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A seed for random inputs: fixed for public tests, drawn at grading time for hidden ones."""
    hidden = "hidden" in str(request.node.path)
    if not hidden:
        return load_registry().public_seed
    value = grading_seed()
    request.node.user_properties.append(("seed", value))
    return value


CHECK_RECORD = pytest.StashKey[dict]()


@pytest.fixture
def check_record(request: pytest.FixtureRequest) -> dict:
    """What a check measured, as a dict it fills in (a timing rule's figures as ``timing``): the grader keeps it with
    the check's result (grader/grade/checker_plugin.py); elsewhere it is only kept for the test's own use."""
    return request.node.stash.setdefault(CHECK_RECORD, {})


@pytest.fixture
def devices() -> list[str]:
    """The devices a CPU-and-GPU task is checked on here."""
    return ["cpu", "cuda"] if _cuda_available() else ["cpu"]


TODO = "todo"
STOPPED_AT_IMPORT = "stopped at import"  # the terminal's count of the tests a student file that does not import stopped


def _todo_failure(call) -> tuple[str, str] | None:
    """(task, first line of the message) when the call failed at a TODO stub."""
    excinfo = call.excinfo
    if excinfo is None or not excinfo.errisinstance(NotImplementedError):
        return None
    message = str(excinfo.value).strip().splitlines()[0] if str(excinfo.value).strip() else ""
    match = STUB_MESSAGE.match(message)  # a starter stub's message, or the refusal to launch a KIT_TODO
    return (match.group(1), message) if match else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """Print the seed a failing hidden test drew, so the failure can be replayed with KIT_SEED; shorten a failure
    at a TODO stub to one line."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        todo = _todo_failure(call)
        if todo is not None:
            report.longrepr = f"TODO({todo[0]}) not written yet: NotImplementedError: {todo[1]}"
            report.kit_todo = todo
        elif call.excinfo is not None and call.excinfo.errisinstance(StudentImportError):
            report.kit_import = str(call.excinfo.value)
            report.longrepr = report.kit_import.splitlines()[0]
        for key, value in item.user_properties:
            if key == "seed":
                report.sections.append(("kit", f"replay with KIT_SEED={value}"))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per task whose TODO stubs stopped tests, instead of a failure section per test.

    The failures at a TODO move from the terminal's "failed" list to a "todo" one before it prints its
    failure sections and short summary (the final count reads "89 todo"); the exit status, the JSON report and
    the grader still see failures."""
    failed = terminalreporter.stats.get("failed", [])
    todo = [r for r in failed if getattr(r, "kit_todo", None)]
    unimported = [r for r in failed if getattr(r, "kit_import", None)]
    if todo or unimported:
        terminalreporter.stats["failed"] = [r for r in failed if r not in todo and r not in unimported]
        if not terminalreporter.stats["failed"]:
            del terminalreporter.stats["failed"]
        if todo:
            terminalreporter.stats.setdefault(TODO, []).extend(todo)
        if unimported:
            terminalreporter.stats.setdefault(STOPPED_AT_IMPORT, []).extend(unimported)
    yield
    if unimported:
        terminalreporter.section("Student files that do not import", sep="=", red=True)
        for message in dict.fromkeys(r.kit_import for r in unimported):
            count = sum(r.kit_import == message for r in unimported)
            terminalreporter.write_line(message)
            terminalreporter.write_line(
                f"  ({count} test{'s' if count != 1 else ''} stopped there; fix it and run again)"
            )
    if not todo:
        return
    by_task: dict[str, list] = {}
    for report in todo:
        by_task.setdefault(report.kit_todo[0], []).append(report)
    terminalreporter.section("TODO regions not written yet", sep="=", yellow=True)
    for task, found in sorted(by_task.items(), key=lambda kv: int(kv[0][1:])):
        first = found[0].kit_todo[1]
        count = f"{len(found)} test{'s' if len(found) != 1 else ''} stop{'s' if len(found) == 1 else ''}"
        terminalreporter.write_line(f"{task}: {count} at a TODO({task}) region not written yet (first: {first})")


if __name__ == "__main__":
    raise SystemExit(main())
