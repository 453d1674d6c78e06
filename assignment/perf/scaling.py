"""Scaling analysis for t4/t5: sweep sequence length, batch and head dimension; table and plots (the command that
runs it for a task is assignment/commands/scaling.py).

For each (L, d) it times naive PyTorch, the naive CUDA composition (t3 -> t2 -> t3), the
implementation under test, the reference solution and PyTorch's SDPA through the grader's
harness (assignment.perf.timing.measure), with B = max(1, TOKENS // L) so every point does the same
number of tokens, H = 16 query heads and K/V of ``--kv-heads`` heads (default 16; fewer is grouped-query
attention, which SDPA and the naive versions get repeated to 16 heads inside their timed call). It prints a table and writes <task>_scaling.json and three plots: time against
L, TFLOP/s against L, and a roofline chart (arithmetic intensity against achieved TFLOP/s under
the measured copy-bandwidth roof and the fp32 compute roof).
"""

from __future__ import annotations

import math
from pathlib import Path

from assignment.perf.cases import attention_candidates, attention_work

TOKENS = 16384  # B * L at every point of the sweep
HEADS = 16
MAX_SCORE_BYTES = 6e9  # the naive versions materialise B*H*L*L floats (twice); skip them above this


def sweep_points(quick: bool) -> list[tuple[int, int, int, int]]:
    lengths = [128, 512, 2048, 8192] if quick else [128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    dims = [64, 128]
    return [(max(1, TOKENS // L), HEADS, L, d) for d in dims for L in lengths]


def run_sweep(task: str, causal: bool, student, reference, quick: bool, kv_heads: int = HEADS) -> dict:
    """Time ``task``'s attention kernel (``causal`` or not: its code's ``scaling_causal``) at every point, in the
    ``student`` kernels and the ``reference`` ones (None in a student bundle)."""
    import torch

    from assignment.perf.timing import copy_bandwidth, fp32_peak_flops, gpu_info, measure

    copy = copy_bandwidth()
    points = []
    for B, H, L, d in sweep_points(quick):

        def make(i, B=B, H=H, L=L, d=d):
            gen = torch.Generator(device="cuda").manual_seed(i)
            return (
                torch.randn(B, H, L, d, device="cuda", generator=gen),
                *(torch.randn(B, kv_heads, L, d, device="cuda", generator=gen) for _ in range(2)),
            )

        flops, ideal_bytes = attention_work(B, H, L, L, d, causal, kv_heads)
        results = {}
        for name, fn in attention_candidates(student, reference, causal, B, H, L, MAX_SCORE_BYTES).items():
            try:  # one candidate at a time keeps the naive versions' memory to themselves
                r = measure(
                    {name: fn},
                    make,
                    flops=flops,
                    bytes_moved=ideal_bytes,
                    max_reps=30,
                    time_cap_s=2.0 if quick else 4.0,
                    enforce_floor=False,
                )[name]
                results[name] = {"ms": r.median_ms, "tflops": r.tflops, "rse": r.rse}
            except NotImplementedError as exc:
                results[name] = {"skipped": str(exc).splitlines()[0]}
            except torch.cuda.OutOfMemoryError:
                results[name] = {"skipped": "out of memory"}
            torch.cuda.empty_cache()
        points.append(
            {
                "B": B,
                "H": H,
                "H_kv": kv_heads,
                "L": L,
                "d": d,
                "flops": flops,
                "ideal_bytes": ideal_bytes,
                "results": results,
            }
        )
        row = "  ".join(f"{n} {v['ms']:.3f} ms/{v['tflops']:.1f}" for n, v in results.items() if "ms" in v)
        print(f"B{B:<4} H{H} H_kv{kv_heads} L{L:<6} d{d:<4} {row}", flush=True)
    return {
        "task": task,
        "causal": causal,
        "kv_heads": kv_heads,
        "gpu": gpu_info(),
        "copy_gbps": copy.gbps,
        "points": points,
        "fp32_peak_tflops": (fp32_peak_flops() or 0.0) / 1e12,
    }


def moved_bytes(point: dict, name: str) -> float:
    """Bytes a candidate must move: the naive versions also write and re-read S and P (4 passes of B·H·L² floats)."""
    if name.startswith("naive"):
        return point["ideal_bytes"] + 4 * 4.0 * point["B"] * point["H"] * point["L"] * point["L"]
    return point["ideal_bytes"]


def plot(data: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    task, written = data["task"], []
    stem = stem_of(task, data.get("kv_heads", HEADS))
    names = sorted({n for p in data["points"] for n, v in p["results"].items() if "ms" in v})
    dims = sorted({p["d"] for p in data["points"]})
    heads = f"H = {HEADS}, H_kv = {data.get('kv_heads', HEADS)}"
    causal = "causal " if data["causal"] else ""

    def measured(name: str, d: int) -> list[dict]:
        return [p for p in data["points"] if p["d"] == d and "ms" in p["results"].get(name, {})]

    def per_d_figure(fname: str, what: str, ylabel: str, series, log_y: bool = False, at_one: bool = False) -> None:
        """One panel per head dim d, one line per (label, xs, ys) that ``series(d)`` yields, against L."""
        fig, axes = plt.subplots(1, len(dims), figsize=(6 * len(dims), 4.5), squeeze=False)
        for ax, d in zip(axes[0], dims):
            for label, xs, ys in series(d):
                ax.plot(xs, ys, marker="o", label=label)
            if at_one:
                ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xscale("log", base=2)
            if log_y:
                ax.set_yscale("log")
            ax.set_xlabel("sequence length L")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{task} {causal}{what}, d = {d}, {data['gpu'].get('name')}")
            ax.grid(True, alpha=0.3)
            ax.legend()
        path = out / f"{stem}_{fname}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    for metric, ylabel, fname in (
        ("ms", f"time (ms), B·L = {TOKENS} tokens, {heads}", "time"),
        ("tflops", "TFLOP/s", "tflops"),
    ):
        per_d_figure(
            fname,
            "attention",
            ylabel,
            lambda d, metric=metric: (
                (name, [p["L"] for p in measured(name, d)], [p["results"][name][metric] for p in measured(name, d)])
                for name in names
            ),
            log_y=metric == "ms",
        )
    # Speedup: the student's time over each baseline's, against L (seed 000 reports these speedups).
    baselines = [n for n in names if n not in ("student", "reference")]
    if "student" in names and baselines:

        def speedups(d):
            for name in baselines:
                both = [p for p in measured(name, d) if "ms" in p["results"].get("student", {})]
                yield (
                    f"over {name}",
                    [p["L"] for p in both],
                    [p["results"][name]["ms"] / p["results"]["student"]["ms"] for p in both],
                )

        per_d_figure("speedup", "speedup", "your speedup (baseline time / yours)", speedups, at_one=True)
    # Roofline: intensity = flops / ideal bytes (what a perfect FlashAttention moves).
    fig, ax = plt.subplots(figsize=(7, 5))
    peak, bw = data["fp32_peak_tflops"], data["copy_gbps"] / 1e3  # TB/s
    xs = [2**e for e in range(0, 14)]
    roof = f"roof: {bw:.2f} TB/s copy" + (f", {peak:.0f} TFLOP/s fp32" if peak else " (fp32 peak unknown)")
    ax.plot(xs, [min(peak or math.inf, x * bw) for x in xs], color="black", label=roof)
    for name in names:
        pts = [
            (p["flops"] / moved_bytes(p, name), p["results"][name]["tflops"])
            for p in data["points"]
            if "ms" in p["results"].get(name, {})
        ]
        ax.scatter([x for x, _ in pts], [y for _, y in pts], label=name, s=18)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic, counted)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"{task} roofline ({data['gpu'].get('name')})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    path = out / f"{stem}_roofline.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


def stem_of(task: str, kv_heads: int) -> str:
    """t4, or t4_hkv4 for a grouped-query sweep (file names of the JSON and the plots)."""
    return task if kv_heads == HEADS else f"{task}_hkv{kv_heads}"
