"""``make sanitize T=t4``: run a task's kernels under compute-sanitizer, memcheck and racecheck.

The grader runs the same two tools on the same launches: ``sanitize_driver.cpp`` loads the student's device
module into the kit's host library and calls the task's scenario there (its ``TaskCode.sanitize``: a function of
the task's CUDA file that launches its kernels on shapes reaching every path of the kit's host code, buffers
allocated to their exact size), so a memory error or a shared-memory race shows up here first.

    python -m assignment.cuda.sanitize --task t2|t3|t4|t5|t6 [--tool memcheck|racecheck]
    python -m assignment.cuda.sanitize --task t4 --driver-command [--module my_debug.cubin]
        # prints the driver's command line (for another compute-sanitizer tool, or cuda-gdb on a -G build)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from assignment.cuda.compiler import (
    CudaCompileError,
    CudaToolkitError,
    build_library,
    build_module,
    cache_dir,
    require_implemented,
)
from assignment.cuda.reading import ReadingError
from assignment.cuda.regions import RegionError
from assignment.impl import student_file
from assignment.registry import load_registry

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


def targets() -> list[str]:
    """The tasks with kernels to sanitize (their code names their scenario)."""
    from assignment import tasks

    return [c.id for c in tasks.available() if c.sanitize is not None]


def _code(task: str):
    from assignment import tasks

    code = tasks.code(task)
    if code.sanitize is None:
        raise ValueError(f"{task} has no kernels to sanitize")
    return code


def source_of(task: str) -> Path:
    """The implementation's file of ``task``'s kernels (IMPL's), after checking its regions are written."""
    code = _code(task)
    source = student_file(code.cuda_file)
    require_implemented(source, code.regions)
    return source


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


def driver_command(task: str, source: Path, module: Path | None = None) -> list[str]:
    """The driver's command line for ``task``: the kit's host library for ``source``'s file, its device module
    (``module``: a cubin of your own instead, such as a -G build for cuda-gdb) and the task's scenario."""
    built = build_module(source, quiet=True)
    host = build_library(built.kit, built.arch, quiet=True)
    scenario = _code(task).sanitize
    return [str(driver()), str(host.path), str(module or built.path), scenario.symbol, str(scenario.variant)]


def run(task: str, tool: str, source: Path, timeout_s: float = 600) -> SanitizerResult:
    """``tool`` on ``task``'s launches of the student's ``source``: its device module in the kit's host library."""
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        raise SanitizerMissing("compute-sanitizer is not on PATH (it ships with the CUDA toolkit)")
    proc = subprocess.run(
        [sanitizer, "--tool", tool, "--error-exitcode", "97", *driver_command(task, source)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    output = (proc.stdout + proc.stderr)[-6000:]
    summary = "\n".join(line for line in output.splitlines() if "SUMMARY" in line or "launches failed" in line)
    clean = "ERROR SUMMARY: 0 errors" in output or "RACECHECK SUMMARY: 0 hazards" in output
    return SanitizerResult(tool, proc.returncode == 0 and clean, summary or f"exit code {proc.returncode}", output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=targets())
    parser.add_argument("--tool", choices=TOOLS, action="append")
    parser.add_argument(
        "--driver-command",
        action="store_true",
        help="print the sanitize driver's command line for this task instead of running the tools",
    )
    parser.add_argument("--module", type=Path, help="with --driver-command: a cubin of your own (e.g. a -G build)")
    args = parser.parse_args(argv)
    if args.task is None:
        print(f"choose a task: make sanitize T={targets()[0]} (one of {', '.join(targets())})", file=sys.stderr)
        return 2
    load_registry().task(args.task)
    try:
        source = source_of(args.task)
        if args.driver_command:
            print(" ".join(driver_command(args.task, source, args.module)))
            return 0
        failed = 0
        for tool in args.tool or TOOLS:
            result = run(args.task, tool, source)
            print(f"== compute-sanitizer --tool {tool}: {'clean' if result.ok else 'ERRORS'}")
            print(result.output if not result.ok else result.summary)
            failed += not result.ok
    except (
        NotImplementedError,
        CudaCompileError,
        CudaToolkitError,
        RegionError,
        ReadingError,
        SanitizerMissing,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
