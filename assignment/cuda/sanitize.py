"""compute-sanitizer (memcheck and racecheck) on a task's kernels: ``make sanitize``'s tool and the grader's
(the command is assignment/commands/sanitize.py).

``sanitize_driver.cpp`` loads the student's device module into the kit's host library and calls the task's scenario
there (its ``TaskCode.sanitize``, called ``scenario`` below: a function of the task's CUDA file that launches its
kernels on shapes reaching every path of the kit's host code, buffers allocated to their exact size), so a memory
error or a shared-memory race shows up here first.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assignment.cuda.compiler import build_library, build_module, cache_dir

DRIVER_SOURCE = Path(__file__).resolve().parent / "sanitize_driver.cpp"
TOOLS = ("memcheck", "racecheck")


class SanitizerMissing(RuntimeError):
    """compute-sanitizer is not on PATH."""


@dataclass
class SanitizerResult:
    tool: str
    ok: bool
    summary: str  # the sanitizer's summary line(s), or why it failed
    output: str  # the tail of its output (for the instructor's log, or a student's own run)


def driver() -> Path:
    """Build (once per cache) the host program the sanitizer runs."""
    digest = hashlib.sha1(DRIVER_SOURCE.read_bytes()).hexdigest()[:12]
    path = cache_dir() / f"sanitize_driver_{digest}"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        subprocess.run(["nvcc", "-O1", "-o", str(tmp), str(DRIVER_SOURCE), "-ldl"], check=True, capture_output=True)
        os.replace(tmp, path)
    return path


def driver_command(scenario: Any, source: Path, module: Path | None = None) -> list[str]:
    """The driver's command line for a task's ``scenario``: the kit's host library for ``source``'s file, its device
    module (``module``: a cubin of your own instead, such as a -G build for cuda-gdb) and the scenario."""
    built = build_module(source, quiet=True)
    host = build_library(built.kit, built.arch, quiet=True)
    return [str(driver()), str(host.path), str(module or built.path), scenario.symbol, str(scenario.variant)]


def run(scenario: Any, tool: str, source: Path, timeout_s: float = 600) -> SanitizerResult:
    """``tool`` on a task's ``scenario`` with the student's ``source``: its device module in the kit's host library."""
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        raise SanitizerMissing("compute-sanitizer is not on PATH (it ships with the CUDA toolkit)")
    proc = subprocess.run(
        [sanitizer, "--tool", tool, "--error-exitcode", "97", *driver_command(scenario, source)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    output = (proc.stdout + proc.stderr)[-6000:]
    summary = "\n".join(line for line in output.splitlines() if "SUMMARY" in line or "launches failed" in line)
    clean = "ERROR SUMMARY: 0 errors" in output or "RACECHECK SUMMARY: 0 hazards" in output
    return SanitizerResult(tool, proc.returncode == 0 and clean, summary or f"exit code {proc.returncode}", output)
