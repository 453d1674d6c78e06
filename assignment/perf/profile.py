"""``make profile T=t4``: Nsight Compute counters of one representative launch.

    python -m assignment.perf.profile --task t2|t3|t4|t5|t6 [--kernel REGEX]
    python -m assignment.perf.profile --launch-one t4      # the driver ncu runs: one launch, nothing else

The driver builds its inputs on the CPU and copies them over, so the task's kernel is the only
kernel in the process and ``--launch-count 1`` catches it whatever the student named it. The
report puts the DRAM traffic next to the ideal (every input read once, every output written once):
a FlashAttention kernel far above that is re-reading K and V. t6's decode launch is two kernels
(the split kernel and the combine), so ncu profiles both and the report adds them up; the point is
the memory throughput: the KV cache read per second against the DRAM peak.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import shutil
import subprocess
import sys

from assignment.impl import REPO_ROOT

METRICS = {
    "gpu__time_duration.sum": "kernel time",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput",
    "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum.per_second": "global load throughput",
    "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum.per_second": "global store throughput",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "shared load wavefronts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": "shared store wavefronts",
    "dram__bytes_read.sum": "DRAM bytes read",
    "dram__bytes_write.sum": "DRAM bytes written",
}
PERMISSION_HELP = (
    "ncu cannot read the GPU performance counters (ERR_NVGPUCTRPERM): the driver lets only admins profile. "
    "Ask for profiling permission (options nvidia NVreg_RestrictProfilingToAdminUsers=0, or run ncu as root); "
    "see https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)
LIBRARY_HELP = (
    "ncu could not load its injection library or the CUDA driver (LibraryNotLoaded / failed to load): "
    "the Nsight Compute version may be too old for this driver, or the process was not a CUDA program; "
    "update Nsight Compute to match the CUDA toolkit"
)


def _profile(task: str):
    from assignment import tasks

    found = tasks.code(task).profile
    if found is None:
        raise ValueError(f"{task} has no profile launch")
    return found


def profiled_tasks() -> list[str]:
    from assignment import tasks

    return [c.id for c in tasks.available() if c.profile is not None]


def _default_task() -> str | None:
    from assignment import tasks

    return next((c.id for c in tasks.available() if c.report_profile), None)


def ideal_bytes(task: str, shape: dict) -> float:
    """Bytes a perfect kernel moves through DRAM: read every input once, write every output once (fp32)."""
    return _profile(task).ideal_bytes(shape)


def metrics_for(task: str) -> dict[str, str]:
    return METRICS | dict(_profile(task).extra_metrics)


# --------------------------------------------------------------------------- the driver ncu runs


def launch_one(task: str) -> None:
    import torch

    from assignment.cuda.kernels import Kernels

    profile, kernels = _profile(task), Kernels()
    gen = torch.Generator().manual_seed(0)

    def upload(*dims, dtype=torch.float32):  # CPU random numbers + a memcpy: no CUDA kernel besides the student's
        return torch.randn(*dims, generator=gen).to(dtype).cuda()

    profile.launch(kernels, profile.shape, upload)
    torch.cuda.synchronize()


# --------------------------------------------------------------------------- ncu and its CSV


def ncu_command(ncu: str, task: str, kernel_regex: str) -> list[str]:
    return [
        ncu,
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--kernel-name",
        f"regex:{kernel_regex}",
        "--launch-count",
        str(_profile(task).kernels_per_launch),
        "--metrics",
        ",".join(metrics_for(task)),
        "--csv",
        "--print-units",
        "base",
        sys.executable,
        "-m",
        "assignment.perf.profile",
        "--launch-one",
        task,
    ]


def parse_ncu_csv(text: str) -> dict[str, tuple[str, float]]:
    """metric name -> (unit, value) of the first profiled kernel, from ``ncu --csv`` output."""
    kernels = parse_ncu_csv_kernels(text)
    return kernels[0] if kernels else {}


def parse_ncu_csv_kernels(text: str) -> list[dict[str, tuple[str, float]]]:
    """One {metric name: (unit, value)} per profiled kernel, in launch order (ncu's ID column)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    by_id: dict[str, dict[str, tuple[str, float]]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        name, raw = row.get("Metric Name"), (row.get("Metric Value") or "").replace(",", "")
        metrics = by_id.setdefault(row.get("ID", ""), {})
        if not name or name in metrics:
            continue
        try:
            metrics[name] = (row.get("Metric Unit", ""), float(raw))
        except ValueError:
            metrics[name] = (row.get("Metric Unit", ""), math.nan)
        metrics.setdefault("_kernel", (row.get("Kernel Name", ""), math.nan))
    return [metrics for metrics in by_id.values() if metrics]


def explain_failure(output: str) -> str | None:
    if "ERR_NVGPUCTRPERM" in output:
        return PERMISSION_HELP
    if "LibraryNotLoaded" in output or "Failed to load" in output or "failed to load" in output:
        return LIBRARY_HELP
    if "No kernels were profiled" in output:
        return "ncu profiled no kernel: the --kernel regex matched nothing (the driver's kernel names are above)"
    return None


def _human(value: float, unit: str) -> str:
    if math.isnan(value):
        return "n/a"
    if unit.startswith("byte"):
        per_second = "/second" in unit
        return f"{value / (1e9 if per_second else 2**20):,.1f} {'GB/s' if per_second else 'MiB'}"
    if unit in ("nsecond", "ns"):
        return f"{value / 1e6:.3f} ms"
    return f"{value:,.1f} {unit}"


def report(task: str, metrics: dict[str, tuple[str, float]] | list[dict[str, tuple[str, float]]]) -> str:
    """The counters of the task's launch: one kernel's, or (t6) each kernel's and their sum."""
    kernels = metrics if isinstance(metrics, list) else [metrics]
    shape = _profile(task).shape
    lines = []
    for i, kernel in enumerate(kernels):
        which = f" {i + 1} of {len(kernels)}" if len(kernels) > 1 else ""
        lines.append(f"{task} kernel{which}: {kernel.get('_kernel', ('?',))[0]}   shape: {shape}")
        for name, label in metrics_for(task).items():
            unit, value = kernel.get(name, ("", math.nan))
            lines.append(f"  {label:<26} {_human(value, unit):>16}   {name}")

    def total(name: str) -> float:
        return sum(kernel.get(name, ("", math.nan))[1] for kernel in kernels)

    if len(kernels) > 1:
        lines.append(f"all {len(kernels)} kernels of the launch")
        lines.append(f"  {'kernel time':<26} {_human(total('gpu__time_duration.sum'), 'nsecond'):>16}")
    ideal = ideal_bytes(task, shape)
    moved = total("dram__bytes_read.sum") + total("dram__bytes_write.sum")
    lines.append(f"  {'DRAM read + write':<26} {moved / 2**20:>12,.1f} MiB")
    lines.append(
        f"  {'ideal DRAM traffic':<26} {ideal / 2**20:>12,.1f} MiB   (each input read once, each output written once)"
    )
    if math.isfinite(moved):
        lines.append(f"  {'measured / ideal':<26} {moved / ideal:>12.2f} x")
    seconds = total("gpu__time_duration.sum") / 1e9
    if _profile(task).bandwidth_line and math.isfinite(seconds) and seconds > 0:
        lines.append(
            f"  {'ideal bytes / kernel time':<26} {ideal / seconds / 1e9:>11,.1f} GB/s   (the KV cache "
            "read per second; make bench T=t6 puts it against the device copy)"
        )
    lines.append("  (loads issued with cp.async are not in the 'global load' row; DRAM bytes include them)")
    return "\n".join(lines)


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
    print(report(args.task, metrics))
    return 0


def _prebuild(task: str) -> None:
    from assignment.cuda.compiler import build_library, build_module, require_implemented
    from assignment import tasks
    from assignment.cuda.kernels import Kernels

    code = tasks.code(task)
    source = Kernels().source(code.cuda_file)
    require_implemented(source, code.regions)
    built = build_module(source)
    build_library(built.kit, built.arch)


if __name__ == "__main__":
    sys.exit(main())
