"""The model table printed and plotted: a prompt's rows as text, the whole table, and its two plots (no GPU).

What it reads is the report ``model_bench.run`` returns (and a bench JSON keeps under "model"), so a saved table
can be printed and plotted again on any machine (``python -m assignment.perf.model_bench --plot-only``).
"""

from __future__ import annotations

from pathlib import Path

PATHS = ("naive", "student", "reference", "transformers")  # table order
COLORS = {"naive": "tab:blue", "student": "tab:orange", "reference": "tab:green", "transformers": "tab:red"}


def plot_names(task: str) -> tuple[str, str]:
    """The two plots of ``task``'s model table: TBT against context, and the decode step against the roofline."""
    return f"{task}_model_tbt.png", f"{task}_model_roofline.png"


def cell(value, spec: str, suffix: str = "") -> str:
    """A table cell: the value formatted, "-" when there is none."""
    return "-" if value is None else format(value, spec) + suffix


def format_prompt(entry: dict, labels: dict[str, str] | None = None) -> str:
    """The table of one prompt length (what ``make bench T=t6`` prints)."""
    labels = labels or {}
    rows = entry["rows"]
    intervals = max((len(r.get("intervals_ms", [])) for r in rows.values()), default=0)
    title = (
        f"\nmodel, prompt {entry['prompt']} tokens: TTFT = prefill + first token; TBT = median of {intervals} "
        f"intervals; roofline TBT {entry['roofline_tbt_ms']:.3f} ms at context {entry['context']}"
    )
    header = (
        f"  {'path':<28} {'TTFT ms':>9} {'xnaive':>7} {'TBT ms':>8} {'xnaive':>7} {'xHF':>6} {'tok/s':>7} "
        f"{'%roof':>6} {'|dlogits|':>10} {'tokens=naive':>13}"
    )
    lines = [title, header]
    for name, row in rows.items():
        label = labels.get(name, name)
        if "skipped" in row:
            lines.append(f"  {label:<28} skipped: {row['skipped']}")
            continue
        if "logits_max_abs_diff" in row:
            agree = f"{row['logits_max_abs_diff']:.1e}" + ("" if row["agrees"] else " DIFFERS")
            tokens = f"{row['tokens_equal_naive']}/{row['tokens_compared']}"
        else:
            agree = tokens = "(baseline)" if name == "naive" else "-"
        lines.append(
            f"  {label:<28} {cell(row['ttft_ms'], '.2f'):>9} {cell(row['ttft_speedup_naive'], '.2f', 'x'):>7} "
            f"{cell(row['tbt_ms'], '.3f'):>8} {cell(row['tbt_speedup_naive'], '.2f', 'x'):>7} "
            f"{cell(row['tbt_speedup_transformers'], '.2f', 'x'):>6} {cell(row['tokens_per_s'], '.1f'):>7} "
            f"{cell(row['percent_roofline'], '.0f', '%'):>6} {agree:>10} {tokens:>13}"
        )
    return "\n".join(lines)


def format_header(report: dict) -> str:
    model = (
        f"model: {report['preset']} shape, {report['parameters']:,} parameters (random float32 weights, tied "
        f"embeddings once), batch {report['batch']}, greedy, {report['new_tokens']} new tokens"
    )
    roofline = (
        f"roofline of a decode step: {report['weight_bytes'] / 1e9:.3f} GB of weights + "
        f"{report['kv_bytes_per_token']:,} B of K/V per token of context, at the device copy bandwidth "
        f"{report['copy_gbps']:.0f} GB/s"
    )
    return f"{model}\n{roofline}"


def format_report(report: dict, header: bool = True) -> str:
    """The whole model table: its header, every prompt, the notes."""
    labels = {name: info["label"] for name, info in report.get("paths", {}).items()}
    lines = [format_header(report)] if header else []
    lines += [format_prompt(entry, labels) for entry in report["prompts"]]
    lines += [f"  note: {note}" for note in dict.fromkeys(report.get("notes", []))]
    return "\n".join(lines)


def plot(report: dict, out: Path) -> list[Path]:
    """``plot_names(report["task"])``: t6_model_tbt.png (TBT against context, the four paths and the roofline) and
    t6_model_roofline.png (the cached paths' TBT against the roofline line, and every path's % of it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    task = report["task"]
    names = plot_names(task)
    labels = {name: info["label"] for name, info in report.get("paths", {}).items()}
    by_path = {name: [p for p in report["sweep"] if p["path"] == name and p.get("tbt_ms")] for name in PATHS}
    by_path = {name: sorted(points, key=lambda p: p["context"]) for name, points in by_path.items() if points}
    contexts = sorted({p["context"] for points in by_path.values() for p in points})
    gpu = report.get("gpu_name") or ""
    roof_label = f"memory roofline ({report['copy_gbps']:.0f} GB/s copy)"

    def roofline_line(ax):
        if contexts:
            xs = [contexts[0] * (contexts[-1] / contexts[0]) ** (i / 49) for i in range(50)]
            bandwidth = report["copy_gbps"] * 1e9
            ys = [(report["weight_bytes"] + report["kv_bytes_per_token"] * x) / bandwidth * 1e3 for x in xs]
            ax.plot(xs, ys, color="black", linestyle="--", label=roof_label)

    def plot_paths(ax, value, skip=()) -> None:
        """Each path's ``value`` of a point against the context, in its colour and label."""
        for name, points in by_path.items():
            if name not in skip:
                xs = [p["context"] for p in points]
                ax.plot(xs, [value(p) for p in points], marker="o", color=COLORS[name], label=labels.get(name, name))

    written = []
    fig, ax = plt.subplots(figsize=(7.5, 5))
    plot_paths(ax, lambda p: p["tbt_ms"])
    roofline_line(ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens in the sequence)")
    ax.set_ylabel("time between tokens (ms)")
    ax.set_title(f"{task}: {report['preset']} fp32, batch 1, decode step {gpu}".strip())
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    written.append(_save(fig, out / names[0], plt))

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    # naive and transformers: many times the roofline, they would flatten the cached paths' gap
    plot_paths(left, lambda p: p["tbt_ms"], skip=("naive", "transformers"))
    roofline_line(left)
    left.set_xscale("log", base=2)
    left.set_ylim(bottom=0)
    left.set_xlabel("context (tokens in the sequence)")
    left.set_ylabel("time between tokens (ms)")
    left.set_title(f"{task} paths against the roofline: (weights + KV cache) / copy bandwidth", fontsize=10)
    plot_paths(right, lambda p: 100 * p["roofline_tbt_ms"] / p["tbt_ms"])
    right.axhline(100, color="black", linestyle="--", label="roofline")
    right.set_xscale("log", base=2)
    right.set_ylim(0, 110)
    right.set_xlabel("context (tokens in the sequence)")
    right.set_ylabel("% of the memory roofline (roofline TBT / TBT)")
    right.set_title(f"{report['preset']} fp32 {gpu}".strip())
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    written.append(_save(fig, out / names[1], plt))
    return written


def _save(fig, path: Path, plt) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
