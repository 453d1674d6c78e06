"""The one timing harness: ``make bench`` and the grader's timing tests both call ``measure``.

What makes a number a grade can rest on (DESIGN.md, "Timing that a grade can rest on"):
  * warm-up calls first (lazy module loading, allocator growth, clocks ramping up);
  * an L2 flush before every timed call, and a fresh input set for every call (new values at a new
    address), so no call finds its inputs in cache or can reuse work done for an earlier call. The
    flush READS twice the L2's size: writing it instead would leave L2 full of dirty lines whose
    write-back to DRAM then runs during, and is charged to, the timed call (measured on an H100:
    3-12 us on a 25-105 us decode kernel);
  * candidates interleaved round-robin in one process (rotating who goes first), so clock and
    thermal drift hit all of them alike; scores are ratios of medians;
  * CUDA events around the call, read after a device-wide synchronize;
  * a stop rule: every candidate's relative standard error under a target (after a minimum),
    or a cap on repetitions or seconds;
  * outputs of timed calls re-checked: the student's every call, in full, after its inputs are
    checked unchanged (a kernel cannot be fast on the checked calls and wrong on the others);
  * a median below the physical floor (bytes / peak bandwidth, flops / peak fp32 rate, with
    generous peaks) is rejected: the kernel skipped work.
"""

from __future__ import annotations

import itertools
import math
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

# Datasheet-level peaks of the fastest part of each architecture, times 1.5 (generous on purpose:
# the floor only catches skipped work, and writes that end in L2 can look faster than DRAM).
# sm_90: H200's 4.8 TB/s (H100 SXM has 3.35) and H100/H200's 67 TFLOP/s fp32, each x 1.5.
# Keyed by compute capability major.
GENEROUS_PEAKS_BY_MAJOR = {7: (1.4e12, 24e12), 8: (3.1e12, 45e12), 9: (7.2e12, 100e12), 10: (12e12, 120e12)}
# The same for fp16/bf16 tensor-core work with fp32 accumulation (dense), times 1.5: V100 125, A100 312, H100/H200
# 989, B200 2250 TFLOP/s. A kernel on tensor cores (t8) is held to these instead of the fp32 rate.
GENEROUS_TENSOR_FLOPS_BY_MAJOR = {7: 190e12, 8: 470e12, 9: 1.5e15, 10: 3.4e15}
GENEROUS_FACTOR = 1.5
FP32_LANES_PER_SM = {(7, 0): 64, (8, 0): 64}  # the rest of the recent archs have 128
MEDIAN_SE_FACTOR = 1.2533  # sqrt(pi/2): standard error of a median vs a mean, for normal noise


class ImpossibleTimeError(RuntimeError):
    """A measured time below what the hardware can do: the kernel skipped work."""

    def __init__(self, message: str, results: dict[str, TimingResult] | None = None):
        super().__init__(message)
        self.results = results or {}


@dataclass
class TimingResult:
    name: str
    median_ms: float
    mean_ms: float
    rse: float
    reps: int
    times_ms: list[float] = field(repr=False)
    gbps: float | None = None
    tflops: float | None = None
    floor_ms: float | None = None
    stop_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ratio(student: TimingResult, reference: TimingResult) -> float:
    """Time ratio student/reference on medians (lower is better; 1.0 = as fast as the reference)."""
    return student.median_ms / reference.median_ms


# --------------------------------------------------------------------------- statistics (no GPU)


def rse_of_median(times: list[float]) -> float:
    """Relative standard error of the median, with sigma from the IQR so one outlier cannot stall the rule."""
    n = len(times)
    if n < 4:
        return math.inf
    q1, _, q3 = statistics.quantiles(times, n=4)
    sigma = (q3 - q1) / 1.349  # IQR of a normal distribution is 1.349 sigma
    median = statistics.median(times)
    return MEDIAN_SE_FACTOR * sigma / math.sqrt(n) / median if median > 0 else math.inf


def rse_of_mean(times: list[float]) -> float:
    n = len(times)
    if n < 2:
        return math.inf
    mean = statistics.fmean(times)
    return statistics.stdev(times) / math.sqrt(n) / mean if mean > 0 else math.inf


def relative_standard_error(times: list[float]) -> float:
    return min(rse_of_median(times), rse_of_mean(times))


def stop_reason(
    times: dict[str, list[float]],
    elapsed_s: float,
    *,
    min_reps: int,
    max_reps: int,
    time_cap_s: float,
    rse_target: float,
) -> str | None:
    """Why to stop now ('converged', 'max_reps', 'time_cap'), or None to keep going."""
    reps = min(len(t) for t in times.values())
    if reps >= min_reps and all(relative_standard_error(t) < rse_target for t in times.values()):
        return "converged"
    if reps >= max_reps:
        return "max_reps"
    if elapsed_s >= time_cap_s and reps >= 1:
        return "time_cap"
    return None


def physical_floor_ms(
    flops: float | None, bytes_moved: float | None, peak_bandwidth: float, peak_flops: float
) -> float:
    """The least time the work can take on this device (with generous peaks)."""
    floor_s = max((bytes_moved or 0.0) / peak_bandwidth, (flops or 0.0) / peak_flops)
    return floor_s * 1e3


def check_physical_floor(name: str, median_ms: float, floor_ms: float, tensor_cores: bool = False) -> None:
    if median_ms < floor_ms:
        peak = "the tensor cores' fp16 peak" if tensor_cores else "peak fp32"
        raise ImpossibleTimeError(
            f"{name}: {median_ms:.4f} ms is below the physical floor of {floor_ms:.4f} ms for this much work "
            f"on this GPU (bytes at 1.5x peak bandwidth, flops at 1.5x {peak}): the kernel skipped work"
        )


def summarize(name: str, times_ms: list[float], flops: float | None, bytes_moved: float | None) -> TimingResult:
    median = statistics.median(times_ms)
    seconds = median / 1e3
    return TimingResult(
        name=name,
        median_ms=median,
        mean_ms=statistics.fmean(times_ms),
        rse=relative_standard_error(times_ms),
        reps=len(times_ms),
        times_ms=list(times_ms),
        gbps=bytes_moved / seconds / 1e9 if bytes_moved and seconds > 0 else None,
        tflops=flops / seconds / 1e12 if flops and seconds > 0 else None,
    )


# --------------------------------------------------------------------------- device facts


def device_peaks(device=None, tensor_cores: bool = False) -> tuple[float, float]:
    """(bytes/s, flop/s) upper bounds: the larger of the table and 1.5x what the properties imply; the flop rate
    of fp16/bf16 tensor cores when ``tensor_cores``."""
    import torch

    props = torch.cuda.get_device_properties(device)
    bandwidth, flops = GENEROUS_PEAKS_BY_MAJOR.get(props.major, GENEROUS_PEAKS_BY_MAJOR[10])
    mem_khz, bus_bits = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    if mem_khz and bus_bits:  # double data rate: two transfers per clock
        bandwidth = max(bandwidth, GENEROUS_FACTOR * 2 * mem_khz * 1e3 * bus_bits / 8)
    if tensor_cores:
        return bandwidth, GENEROUS_TENSOR_FLOPS_BY_MAJOR.get(props.major, GENEROUS_TENSOR_FLOPS_BY_MAJOR[10])
    fp32 = fp32_peak_flops(device)
    if fp32:
        flops = max(flops, GENEROUS_FACTOR * fp32)
    return bandwidth, flops


def fp32_peak_flops(device=None) -> float | None:
    """The FFMA peak: SMs x fp32 lanes x 2 flops x the SM clock (the properties' clock, else nvidia-smi's max)."""
    import torch

    props = torch.cuda.get_device_properties(device)
    sm_khz = getattr(props, "clock_rate", 0) or (_nvidia_smi_max_sm_mhz() or 0) * 1e3
    if not sm_khz:
        return None
    lanes = FP32_LANES_PER_SM.get((props.major, props.minor), 128)
    return props.multi_processor_count * lanes * 2 * sm_khz * 1e3


def _nvidia_smi(query: str) -> list[str] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return [v.strip() for v in out.stdout.splitlines()[0].split(",")]


def _nvidia_smi_max_sm_mhz() -> float | None:
    values = _nvidia_smi("clocks.max.sm")
    try:
        return float(values[0]) if values else None
    except ValueError:
        return None


def gpu_info(device=None) -> dict[str, Any]:
    """What a timing table must be read with: the GPU, its clocks now, and the software."""
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if not torch.cuda.is_available():
        return info | {"name": None}
    props = torch.cuda.get_device_properties(device)
    info |= {
        "name": props.name,
        "capability": f"sm_{props.major}{props.minor}",
        "sm_count": props.multi_processor_count,
        "l2_bytes": props.L2_cache_size,
        "memory_bytes": props.total_memory,
    }
    # nvidia-smi numbers the GPUs as the driver does; CUDA_VISIBLE_DEVICES may renumber. Good enough for a label.
    clocks = _nvidia_smi("clocks.sm,clocks.mem,clocks.max.sm,driver_version")
    if clocks and len(clocks) == 4:
        info |= {
            "sm_clock_mhz": clocks[0],
            "mem_clock_mhz": clocks[1],
            "max_sm_clock_mhz": clocks[2],
            "driver": clocks[3],
        }
    return info


def format_gpu_info(info: dict[str, Any]) -> str:
    if not info.get("name"):
        return f"no CUDA GPU (torch {info['torch']})"
    text = (
        f"{info['name']} ({info['capability']}, {info['sm_count']} SMs, L2 {info['l2_bytes'] / 2**20:.0f} MiB, "
        f"{info['memory_bytes'] / 2**30:.0f} GiB)"
    )
    if "sm_clock_mhz" in info:
        text += f"; clocks now SM {info['sm_clock_mhz']} MHz (max {info['max_sm_clock_mhz']}), memory {info['mem_clock_mhz']} MHz"
        text += f"; driver {info['driver']}"
    return text + f"; torch {info['torch']}, CUDA {info['cuda']}"


# --------------------------------------------------------------------------- the harness (GPU)


def measure(
    candidates: dict[str, Callable[[Any], Any]],
    make_inputs: Callable[[int], Any],
    *,
    check: Callable[[str, Any, Any], None] | None = None,
    check_every: Iterable[str] = (),
    flops: float | None = None,
    bytes_moved: float | None = None,
    min_reps: int = 10,
    max_reps: int = 200,
    time_cap_s: float = 20.0,
    rse_target: float = 0.01,
    warmup: int = 3,
    enforce_floor: bool = True,
    tensor_cores: bool = False,
) -> dict[str, TimingResult]:
    """Time each candidate ``fn(inputs)`` interleaved; see the module docstring for the protocol.

    ``make_inputs(seed)`` builds an input set on the GPU from a seed; every call, warm-up and timed,
    gets a set of its own (fresh values, and a fresh address: the previous set is still alive when
    the next is made), so no call can reuse work done for an earlier one. ``check(name, inputs,
    output)`` raises when an output is wrong: it sees the first and the last timed output of every
    candidate, and every timed output of the candidates named in ``check_every``, whose inputs are
    also rebuilt from their seed and compared bit for bit first (a kernel that writes into its inputs
    fails there). ``flops`` / ``bytes_moved`` are the work of ONE call, used for TFLOP/s, GB/s and
    the physical floor (its flop rate the tensor cores' fp16 peak when ``tensor_cores``, else fp32's).
    """
    import torch

    from assignment.checks import require, same_bits

    if not torch.cuda.is_available():
        raise RuntimeError("measure() needs a CUDA GPU")
    device = torch.cuda.current_device()
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    flush = torch.zeros(max(2 * l2_bytes, 2**20) // 4, dtype=torch.int32, device=device)
    flush_sum = torch.zeros((), dtype=torch.int64, device=device)
    names = list(candidates)
    every = set(check_every)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    seeds = itertools.count(1)
    held: list[Any] = []  # the previous input set stays alive while the next is allocated

    def fresh() -> tuple[int, Any]:
        seed = next(seeds)
        inputs = make_inputs(seed)
        held[:] = [inputs]
        return seed, inputs

    def verify(name: str, seed: int, inputs, output) -> None:
        if name in every:
            pristine = make_inputs(seed)
            same = all(same_bits(a, b) for a, b in zip(_tensors(inputs), _tensors(pristine)))
            require(same, "inputs_modified", f"{name}: an input was modified during a timed call")
        check(name, inputs, output)

    for name in names:  # warm-up; the first output is checked before any time is spent
        for i in range(max(1, warmup)):
            seed, inputs = fresh()
            output = candidates[name](inputs)
            if check is not None and i == 0:
                torch.cuda.synchronize()
                verify(name, seed, inputs, output)
    torch.cuda.synchronize()

    times: dict[str, list[float]] = {name: [] for name in names}
    last: dict[str, tuple[int, Any, Any]] = {}
    began = time.perf_counter()
    reason = None
    rep = 0
    while reason is None:
        order = names[rep % len(names) :] + names[: rep % len(names)]  # rotate who goes first
        for name in order:
            seed, inputs = fresh()
            torch.sum(flush, dim=0, dtype=torch.int64, out=flush_sum)  # reads: evicts L2, leaves no dirty lines
            # Keep the GPU busy while Python runs the candidate's wrapper up to its launch, so the
            # events time the device work and not the host's argument checks (measured on an H200:
            # without this, a 0.13 ms softmax read 0.19-0.22 ms through the ctypes wrapper).
            _hide_launch_overhead(torch)
            start.record()
            output = candidates[name](inputs)
            end.record()
            torch.cuda.synchronize()  # device-wide: work on any stream is done before we read the events
            times[name].append(start.elapsed_time(end))
            if check is not None and (rep == 0 or name in every):
                verify(name, seed, inputs, output)
            last[name] = (seed, inputs, output)
        rep += 1
        reason = stop_reason(
            times,
            time.perf_counter() - began,
            min_reps=min_reps,
            max_reps=max_reps,
            time_cap_s=time_cap_s,
            rse_target=rse_target,
        )
    if check is not None:
        for name, (seed, inputs, output) in last.items():
            if name not in every:  # those were checked as they ran
                verify(name, seed, inputs, output)

    bandwidth, peak_flops = device_peaks(device, tensor_cores)
    floor = physical_floor_ms(flops, bytes_moved, bandwidth, peak_flops)
    results = {}
    for name in names:
        results[name] = summarize(name, times[name], flops, bytes_moved)
        results[name].floor_ms, results[name].stop_reason = floor, reason
    if enforce_floor:
        for result in results.values():
            try:
                check_physical_floor(result.name, result.median_ms, floor, tensor_cores)
            except ImpossibleTimeError as exc:
                raise ImpossibleTimeError(str(exc), results) from None
    return results


def _tensors(inputs) -> list:
    import torch

    if isinstance(inputs, torch.Tensor):
        return [inputs]
    if isinstance(inputs, dict):
        return [t for v in inputs.values() for t in _tensors(v)]
    if isinstance(inputs, (list, tuple)):
        return [t for v in inputs for t in _tensors(v)]
    return []


# ~1 ms at 2 GHz: longer than any wrapper's host work (0.2 ms was not: on an H100 the t6 wrapper's checks
# outlasted it and a 25 us decode read 50-140 us).
LAUNCH_OVERHEAD_SLEEP_CYCLES = 2_000_000


def _hide_launch_overhead(torch) -> None:
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(LAUNCH_OVERHEAD_SLEEP_CYCLES)


def copy_bandwidth(size_bytes: int = 256 * 2**20, **measure_kwargs) -> TimingResult:
    """Device-to-device copy through the same harness; GB/s counts bytes read plus bytes written."""
    import torch

    n = size_bytes // 4

    def make_inputs(i: int):
        return torch.full((n,), float(i + 1), device="cuda"), torch.empty(n, device="cuda")

    results = measure(
        {"copy": lambda io: io[1].copy_(io[0])},
        make_inputs,
        bytes_moved=2 * size_bytes,
        **({"max_reps": 50, "time_cap_s": 5.0} | measure_kwargs),
    )
    return results["copy"]
