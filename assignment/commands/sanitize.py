"""``make sanitize T=t4``: run a task's kernels under compute-sanitizer, memcheck and racecheck
(assignment/cuda/sanitize.py runs the tools; the grader runs the same two on the same launches).

    python -m assignment.commands.sanitize --task t2|t3|t4|t5|t6 [--tool memcheck|racecheck]
    python -m assignment.commands.sanitize --task t4 --driver-command [--module my_debug.cubin]
        # prints the driver's command line (for another compute-sanitizer tool, or cuda-gdb on a -G build)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from assignment import tasks
from assignment.cuda.compiler import CudaCompileError, CudaToolkitError, require_implemented
from assignment.cuda.reading import ReadingError
from assignment.cuda.regions import RegionError
from assignment.cuda.sanitize import TOOLS, SanitizerMissing, driver_command, run
from assignment.impl import student_file
from assignment.registry import load_registry


def targets() -> list[str]:
    """The tasks with kernels to sanitize (their code names their scenario)."""
    return [c.id for c in tasks.available() if c.sanitize is not None]


def sanitized_code(task: str) -> tasks.TaskCode:
    code = tasks.code(task)
    if code.sanitize is None:
        raise ValueError(f"{task} has no kernels to sanitize")
    return code


def source_of(task: str) -> Path:
    """The implementation's file of ``task``'s kernels (IMPL's), after checking its regions are written."""
    code = sanitized_code(task)
    source = student_file(code.cuda_file)
    require_implemented(source, code.regions)
    return source


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
        source, scenario = source_of(args.task), sanitized_code(args.task).sanitize
        if args.driver_command:
            print(" ".join(driver_command(scenario, source, args.module)))
            return 0
        failed = 0
        for tool in args.tool or TOOLS:
            result = run(scenario, tool, source)
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
