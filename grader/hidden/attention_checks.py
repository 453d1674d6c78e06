"""Checks shared by the hidden t4 and t5 suites (the same kernel, with and without the causal mask)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from assignment.cuda import kernels
from assignment.cuda.compiler import build, cache_dir, require_implemented
from assignment.cuda.kernels import Kernels
from assignment.impl import student_file
from assignment.testing import (
    SENTINEL,
    assert_close,
    assert_repeatable,
    random_qkv,
    reference_attention,
    run_timing_rule,
)

LAYOUT = "batch, head, query, dim"


def run_flash(q, k, v, causal, scale=None):
    out = torch.full_like(q, SENTINEL)
    lse = torch.full(q.shape[:3], SENTINEL, device=q.device)
    kernels.flash_attention(q, k, v, causal=causal, scale=scale, out=out, lse=lse)
    torch.cuda.synchronize()
    return out, lse


def check_values(shape, d, causal, seed, tol, magnitude=1.0, scale=None):
    q, k, v = random_qkv(shape["B"], shape["H"], shape["Lq"], shape["Lk"], d, seed=seed, device="cuda",
                         magnitude=magnitude)
    inputs = [t.clone() for t in (q, k, v)]
    out, lse = run_flash(q, k, v, causal, scale)
    assert all(torch.equal(a, b) for a, b in zip(inputs, (q, k, v))), "an input was modified"
    expected, expected_lse = reference_attention(q, k, v, causal=causal, scale=scale)
    assert_close(out, expected, **tol, name="O", layout=LAYOUT)
    lse_tol = {"atol": max(tol["atol"], 1e-4 * magnitude), "rtol": tol["rtol"]}
    assert_close(lse, expected_lse, **lse_tol, name="LSE", layout="batch, head, query")


def check_repeatable(causal, seed, repeats=20):
    q, k, v = random_qkv(2, 3, 333, 517, 64, seed=seed, device="cuda")
    assert_repeatable(lambda: run_flash(q, k, v, causal), repeats,
                      "O or LSE changed between identical runs: a race (a missing __syncthreads?)")


def check_memory(causal, seed):
    source = student_file("t4_flash_attention.cu").read_text()
    code = "\n".join(line.split("//", 1)[0] for line in source.splitlines())
    assert not re.search(r"\b(cudaMalloc\w*|malloc|new\s+float)\s*\(|\bnew\s+float\b", code), (
        "the kernel file allocates memory itself; FlashAttention needs no buffer beyond O and LSE"
    )
    lq = lk = 2048
    q, k, v = random_qkv(1, 4, lq, lk, 64, seed=seed, device="cuda")
    out, lse = torch.empty_like(q), torch.empty(1, 4, lq, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    kernels.flash_attention(q, k, v, causal=causal, out=out, lse=lse)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    assert extra < 4 * lq * lk, f"the call allocated {extra} bytes; an Lq x Lk score matrix would be {4 * lq * lk}"


DRIVER_SOURCE = Path(__file__).resolve().parents[2] / "assignment" / "cuda" / "sanitize_driver.cpp"


def _sanitize_driver() -> Path:
    """Build (once per cache) the host program that launches the kernel under the sanitizer."""
    digest = hashlib.sha1(DRIVER_SOURCE.read_bytes()).hexdigest()[:12]
    driver = cache_dir() / f"sanitize_driver_{digest}"
    if not driver.is_file():
        driver.parent.mkdir(parents=True, exist_ok=True)
        tmp = driver.with_name(driver.name + f".tmp{os.getpid()}")
        subprocess.run(["nvcc", "-O1", "-o", str(tmp), str(DRIVER_SOURCE), "-ldl"], check=True, capture_output=True)
        os.replace(tmp, driver)
    return driver


def check_sanitizer(tool, causal):
    # A starter fails here, cleanly, before anything is built or launched.
    source = student_file("t4_flash_attention.cu")
    require_implemented(source, ("t4", "t5") if causal else ("t4",))
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on PATH on this host")
    library = build(source, quiet=True).library
    proc = subprocess.run(
        [sanitizer, "--tool", tool, "--error-exitcode", "97", str(_sanitize_driver()), str(library), str(int(causal))],
        capture_output=True, text=True, timeout=600,
    )
    report = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, f"compute-sanitizer --tool {tool} reported errors (exit {proc.returncode})"
    assert "ERROR SUMMARY: 0 errors" in report or "RACECHECK SUMMARY: 0 hazards" in report, report[-500:]


def time_rule(rule, record):
    s = rule.shape
    causal = bool(s.get("causal", False))
    reference = Kernels("solutions")

    def make_inputs(i):
        return random_qkv(s["B"], s["H"], s["L"], s["L"], s["d"], seed=i, device="cuda")

    def check(name, inputs, output):
        q, k, v = inputs
        o = output[0] if isinstance(output, tuple) else output
        expected, _ = reference_attention(q[:1, :1], k[:1, :1], v[:1, :1], causal=causal)
        assert_close(o[:1, :1], expected, atol=1e-4, rtol=1e-4, name=f"timed O ({name})", layout=LAYOUT)

    flops = 4.0 * s["B"] * s["H"] * s["L"] * s["L"] * s["d"] * (0.5 if causal else 1.0)
    candidates = {
        "student": lambda qkv: kernels.flash_attention(*qkv, causal=causal),
        "reference": lambda qkv: reference.flash_attention(*qkv, causal=causal),
        "naive": lambda qkv: reference.naive_cuda_attention(*qkv, causal=causal),
    }
    run_timing_rule(rule, candidates, make_inputs, check=check, flops=flops, record=record,
                    max_reps=60, time_cap_s=40.0)
