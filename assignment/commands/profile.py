"""``make profile T=t4``: Nsight Compute counters of one representative launch.

    python -m assignment.commands.profile --task t2|t3|t4|t5|t6 [--kernel REGEX]
    python -m assignment.commands.profile --launch-one t4      # the driver ncu runs: one launch, nothing else

The driver builds its inputs on the CPU and copies them over, so the task's kernel is the only
kernel in the process and ``--launch-count 1`` catches it whatever the student named it. ncu's CSV is read and
reported by assignment/perf/profile.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from assignment import tasks
from assignment.cuda.toolchain import hopper_absent
from assignment.registry import load_registry
from assignment.impl import REPO_ROOT
from assignment.perf.profile import explain_failure, metrics_for, parse_ncu_csv_kernels, report


def profile_of(task: str) -> tasks.Profile:
    found = tasks.code(task).profile
    if found is None:
        raise ValueError(f"{task} has no profile launch")
    return found


def profiled_tasks() -> list[str]:
    return [c.id for c in tasks.available() if c.profile is not None]


def _default_task() -> str | None:
    return next((c.id for c in tasks.available() if c.report_profile), None)


# --------------------------------------------------------------------------- the driver ncu runs


def launch_one(task: str) -> None:
    import torch

    from assignment.kernels import Kernels

    profile, kernels = profile_of(task), Kernels()
    gen = torch.Generator().manual_seed(0)

    def upload(*dims, dtype=torch.float32):  # CPU random numbers + a memcpy: no CUDA kernel besides the student's
        return torch.randn(*dims, generator=gen).to(dtype).cuda()

    profile.launch(kernels, profile.shape, upload)
    torch.cuda.synchronize()


def ncu_command(ncu: str, task: str, kernel_regex: str) -> list[str]:
    profile = profile_of(task)
    return [
        ncu,
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--kernel-name",
        f"regex:{kernel_regex}",
        "--launch-count",
        str(profile.kernels_per_launch),
        "--metrics",
        ",".join(metrics_for(profile)),
        "--csv",
        "--print-units",
        "base",
        sys.executable,
        "-m",
        "assignment.commands.profile",
        "--launch-one",
        task,
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--task", choices=profiled_tasks(), default=_default_task(), help="default: the task the report profiles"
    )
    parser.add_argument(
        "--kernel", default=".", help="kernel name regex (default: the first kernel the driver launches)"
    )
    parser.add_argument("--launch-one", choices=profiled_tasks(), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("make profile needs a CUDA GPU, and PyTorch sees none. Run it on a GPU node.", file=sys.stderr)
        return 2
    if load_registry().task(args.task).needs_hopper and (absent := hopper_absent()):
        print(f"make profile T={args.task}: {args.task} is not available on this GPU: {absent}.", file=sys.stderr)
        return 0
    if args.launch_one:
        launch_one(args.launch_one)
        return 0
    ncu = shutil.which("ncu")
    if ncu is None:
        print(
            "ncu not found: install Nsight Compute (it ships with the CUDA toolkit, in <cuda>/bin or "
            "/opt/nvidia/nsight-compute) and put it on PATH",
            file=sys.stderr,
        )
        return 2
    try:  # build outside the profiler, and fail on a TODO before ncu starts
        _prebuild(args.task)
    except (NotImplementedError, RuntimeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(ncu_command(ncu, args.task, args.kernel), capture_output=True, text=True, env=env)
    output = proc.stdout + proc.stderr
    metrics = parse_ncu_csv_kernels(proc.stdout)
    if proc.returncode != 0 or not metrics:
        print(output[-4000:], file=sys.stderr)
        print(f"\nerror: {explain_failure(output) or 'ncu failed (its output is above)'}", file=sys.stderr)
        return 1
    print(report(args.task, profile_of(args.task), metrics))
    return 0


def _prebuild(task: str) -> None:
    from assignment.cuda.compiler import build_library, build_module, require_implemented
    from assignment.kernels import Kernels

    code = tasks.code(task)
    source = Kernels().source(code.cuda_file)
    require_implemented(source, code.regions)
    built = build_module(source)
    build_library(built.kit, built.arch)


if __name__ == "__main__":
    sys.exit(main())
