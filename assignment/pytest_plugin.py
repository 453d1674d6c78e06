"""The kit's pytest plugin (loaded with ``-p assignment.pytest_plugin`` from pyproject.toml).

* registers one marker per registry task (t1 ... t7), so ``make test T=t4``
  is ``pytest -m t4``;
* rejects a test that uses a task marker the registry does not define;
* skips, with a visible reason, every test of a GPU task when no GPU is found (unless marked ``cpu``);
* provides the ``seed`` fixture: public tests use the registry's fixed seed,
  hidden tests a seed drawn at grading time (``KIT_SEED``, printed on failure).
"""

from __future__ import annotations

import os
import secrets
from functools import lru_cache

import pytest

from assignment.impl import default_impl, student_dir
from assignment.registry import RegistryError, check_markers, load_registry


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


@pytest.fixture
def devices() -> list[str]:
    """The devices a CPU-and-GPU task is checked on here."""
    return ["cpu", "cuda"] if _cuda_available() else ["cpu"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """Print the seed a failing hidden test drew, so the failure can be replayed with KIT_SEED."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for key, value in item.user_properties:
            if key == "seed":
                report.sections.append(("kit", f"replay with KIT_SEED={value}"))
