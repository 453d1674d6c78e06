"""Nsight Compute's counters of a task's launch, read and reported (``make profile``'s command, which runs ncu on
the task's launch, is assignment/commands/profile.py).

The report puts the DRAM traffic next to the ideal (every input read once, every output written once): a
FlashAttention kernel far above that is re-reading K and V. t6's decode launch is two kernels (the split kernel and
the combine), so ncu profiles both and the report adds them up; the point is the memory throughput: the KV cache
read per second against the DRAM peak. ``profile`` below is a task code's ``Profile`` (assignment/tasks/).
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

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


def metrics_for(profile: Any) -> dict[str, str]:
    """The counters ncu reads for a task's launch: the kit's set and the task's own."""
    return METRICS | dict(profile.extra_metrics)


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


def report(task: str, profile: Any, metrics: dict[str, tuple[str, float]] | list[dict[str, tuple[str, float]]]) -> str:
    """The counters of ``task``'s launch (its code's ``profile``): one kernel's, or (t6) each kernel's and their sum."""
    kernels = metrics if isinstance(metrics, list) else [metrics]
    shape = profile.shape
    lines = []
    for i, kernel in enumerate(kernels):
        which = f" {i + 1} of {len(kernels)}" if len(kernels) > 1 else ""
        lines.append(f"{task} kernel{which}: {kernel.get('_kernel', ('?',))[0]}   shape: {shape}")
        for name, label in metrics_for(profile).items():
            unit, value = kernel.get(name, ("", math.nan))
            lines.append(f"  {label:<26} {_human(value, unit):>16}   {name}")

    def total(name: str) -> float:
        return sum(kernel.get(name, ("", math.nan))[1] for kernel in kernels)

    if len(kernels) > 1:
        lines.append(f"all {len(kernels)} kernels of the launch")
        lines.append(f"  {'kernel time':<26} {_human(total('gpu__time_duration.sum'), 'nsecond'):>16}")
    ideal = profile.ideal_bytes(shape)
    moved = total("dram__bytes_read.sum") + total("dram__bytes_write.sum")
    lines.append(f"  {'DRAM read + write':<26} {moved / 2**20:>12,.1f} MiB")
    lines.append(
        f"  {'ideal DRAM traffic':<26} {ideal / 2**20:>12,.1f} MiB   (each input read once, each output written once)"
    )
    if math.isfinite(moved):
        lines.append(f"  {'measured / ideal':<26} {moved / ideal:>12.2f} x")
    seconds = total("gpu__time_duration.sum") / 1e9
    if profile.bandwidth_line and math.isfinite(seconds) and seconds > 0:
        lines.append(
            f"  {'ideal bytes / kernel time':<26} {ideal / seconds / 1e9:>11,.1f} GB/s   (the KV cache "
            "read per second; make bench T=t6 puts it against the device copy)"
        )
    lines.append("  (loads issued with cp.async are not in the 'global load' row; DRAM bytes include them)")
    return "\n".join(lines)
