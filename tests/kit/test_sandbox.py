"""The sandboxed worker: what student Python can see and do, measured from the checker's side."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from grader.isolation import sandbox
from grader.isolation.client import Worker, WorkerConfig, WorkerFailure, student_module

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
FULL, WHY = sandbox.probe(sandbox.find_bwrap())
needs_bwrap = pytest.mark.skipif(not FULL, reason=f"bubblewrap cannot run here: {WHY}")

PROBE = '''
import os
import socket
import torch


def view():
    seen = sorted(os.listdir("{repo}")) if os.path.isdir("{repo}") else []
    return [sorted(os.listdir("/")), os.getuid(), seen, sorted(os.environ)]


def network():
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2).close()
        return "reachable"
    except OSError as exc:
        return str(exc)


def clear_refs():
    try:
        open("/proc/self/clear_refs", "w").write("5")
        return "written"
    except OSError as exc:
        return type(exc).__name__


def allocate(mb):
    block = torch.ones(mb * 2**18)  # mb MiB, touched
    return torch.tensor([float(block.sum())])


def forge():
    for fd in range(3, 64):
        try:
            os.write(fd, b"KITW" + bytes(16))
        except OSError:
            pass
    return torch.zeros(1)


def shout(n):
    print("x" * (n * 2**20), flush=True)
    return torch.ones(1)
'''


@pytest.fixture()
def probe_worker(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "probe.py").write_text(PROBE.replace("{repo}", str(REPO)))
    worker = Worker(WorkerConfig(student_dir=folder, deny=(str(REPO),), call_timeout_s=60), gpu=False)
    yield worker
    worker.stop()


def call(worker, function, *args):
    return worker.call("probe.py", function, args, {}).value


@needs_bwrap
def test_the_worker_sees_only_what_it_needs(probe_worker):
    listing, uid, repo_listing, env = call(probe_worker, "view")
    # Only the kit's virtual environment may show there (mounted at its own path when it lives in the repo).
    assert set(repo_listing) <= {".venv"}, f"the instructor's tree is visible in the sandbox: {repo_listing}"
    assert "submission" in listing and "kit" in listing
    assert not {"home", "var", "srv", "mnt", "boot", "media", "run"} & set(listing), listing
    if os.geteuid() == 0:
        assert uid == sandbox.SANDBOX_UID, "the worker still runs as root"
    assert not [name for name in env if name.startswith(("KIT_", "PYTEST", "IMPL"))], env
    assert call(probe_worker, "network") != "reachable"
    assert call(probe_worker, "clear_refs") in ("OSError", "PermissionError"), "the peak-memory counter can be reset"


@needs_bwrap
def test_peak_memory_is_measured_from_outside(probe_worker):
    small = probe_worker.call("probe.py", "allocate", (1,), {}, measure_memory=True)
    big = probe_worker.call("probe.py", "allocate", (300,), {}, measure_memory=True)
    assert small.peak_bytes is not None and big.peak_bytes is not None
    assert big.peak_bytes > 250 * 2**20 > small.peak_bytes, (small.peak_bytes, big.peak_bytes)


@needs_bwrap
def test_a_forged_reply_is_a_protocol_failure(probe_worker):
    with pytest.raises(WorkerFailure) as info:
        call(probe_worker, "forge")
    assert info.value.kind == "protocol"


@needs_bwrap
def test_output_floods_are_capped_and_the_call_still_answers(probe_worker):
    assert torch.equal(call(probe_worker, "shout", 40), torch.ones(1))
    log = probe_worker.log.text()
    assert len(log) < 100_000 and "bytes not kept" in log


def test_without_bubblewrap_the_fallback_is_stated(monkeypatch):
    sandbox.probe.cache_clear()
    monkeypatch.setenv("KIT_BWRAP", "/nonexistent/bwrap")
    monkeypatch.setenv("PATH", "/nonexistent")
    level, why = sandbox.best_isolation()
    assert level == sandbox.FALLBACK and "not installed" in why
    sandbox.probe.cache_clear()


def test_student_module_runs_the_reference(monkeypatch):
    monkeypatch.setenv("IMPL", "solutions")
    student = student_module("t1_attention.py", gpu=False)
    q = torch.randn(1, 2, 20, 8)
    out = student.naive_attention(q, q, q, causal=True)
    assert type(out) is torch.Tensor and out.shape == q.shape
