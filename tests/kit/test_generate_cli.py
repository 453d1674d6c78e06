"""make generate's command line: settings a host cannot honour end in one line that says what to type instead (never
a traceback), and on a CPU it runs with a thread count that suits the model, not one thread per core of the host.

Seed 000's tester saw `make generate` take 183 ms between tokens on a shared CPU host and 7 ms with one thread:
the shipped model's matrix-vector products are far too small to split over every core PyTorch sees.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from assignment.impl import REPO_ROOT
from assignment.commands import generate

pytestmark = pytest.mark.kit
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="what a host without a GPU says")


def make_generate(*settings: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("IMPL", "KIT_CPU_THREADS", "OMP_NUM_THREADS")}
    command = ["make", "--no-print-directory", "generate", "PROMPT=The history of", "MAX_TOKENS=3"]
    return subprocess.run(
        [*command, f"PY={sys.executable}", *settings],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=300,
    )


@no_gpu
@pytest.mark.parametrize(
    "setting, says",
    [
        ("DEVICE=cuda", "DEVICE=cuda needs a CUDA GPU"),
        ("DEVICE=gpu", "DEVICE=gpu is not a device"),
        ("ATTN=t5", "ATTN=t5 (your CUDA kernel) needs a CUDA GPU"),
        ("ATTN=t6", "needs a CUDA GPU"),
    ],
)
def test_settings_a_cpu_host_cannot_run_say_what_to_type_instead(setting, says):
    done = make_generate(setting)
    assert done.returncode != 0 and says in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "AssertionError" not in done.stderr, done.stderr[-2000:]
    if setting.startswith("ATTN"):
        assert "ATTN=t1" in done.stderr and "ATTN=reference" in done.stderr  # what runs here instead
    else:
        assert "DEVICE=cpu" in done.stderr


def test_cpu_threads_follow_the_model_and_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.delenv("KIT_CPU_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(generate, "available_cores", lambda: 64)
    assert generate.cpu_threads(6_000_000) == 1  # the shipped model: one thread
    assert generate.cpu_threads(1_000_000_000) == 40  # a 1B model: a thread per 25M parameters
    assert generate.cpu_threads(100_000_000_000) == 64  # never more than the cores
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert generate.cpu_threads(6_000_000) == 3  # the user's own setting wins
    monkeypatch.setenv("KIT_CPU_THREADS", "2")
    assert generate.cpu_threads(6_000_000) == 2


def test_available_cores_count_the_affinity_and_the_cgroup_quota(tmp_path, monkeypatch):
    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")  # 1.5 CPUs
    monkeypatch.setattr(generate, "CGROUP_CPU_MAX", quota)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(32)), raising=False)
    assert generate.available_cores() == 2
    quota.write_text("max 100000\n")
    assert generate.available_cores() == 32


def test_make_generate_on_a_cpu_reports_its_threads():
    if torch.cuda.is_available():
        pytest.skip("runs on the GPU here")
    done = make_generate("TEMPERATURE=0", "DEVICE=cpu")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "seed 0, 1 CPU thread" in done.stderr, done.stderr[-500:]
    threads = make_generate("TEMPERATURE=0", "DEVICE=cpu", "THREADS=2")
    assert threads.returncode == 0 and "seed 0, 2 CPU threads" in threads.stderr, threads.stderr[-500:]
