"""Scaling analysis for t4/t5: sweep sequence length, batch and head dimension; table and plots.

    python -m assignment.commands.scaling --task t4|t5 [--quick] [--kv-heads N] [--out build/bench]
    python -m assignment.commands.scaling --task t4 --plot-only build/bench/t4_scaling.json

The sweep and the plots are assignment/perf/scaling.py's; this command picks the task's kernel (causal or not).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from assignment import tasks
from assignment.kernels import Kernels, reference_kernels
from assignment.perf.cases import OUT_DIR
from assignment.perf.scaling import HEADS, plot, run_sweep, stem_of


def swept_tasks() -> list[str]:
    """The tasks whose kernel make scaling sweeps (their code's ``scaling_causal`` is set)."""
    return [c.id for c in tasks.available() if c.scaling_causal is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=swept_tasks(), required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--plot-only", type=Path, help="re-plot a saved <task>_scaling.json")
    parser.add_argument(
        "--kv-heads",
        type=int,
        default=HEADS,
        help=f"K/V heads (a divisor of the {HEADS} query heads; fewer is grouped-query attention)",
    )
    args = parser.parse_args(argv)
    if args.kv_heads < 1 or HEADS % args.kv_heads:
        parser.error(f"--kv-heads must divide {HEADS}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.plot_only:
        data = json.loads(args.plot_only.read_text())
    else:
        import torch

        if not torch.cuda.is_available():
            print("scaling: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
            return 2
        causal, student, reference = tasks.code(args.task).scaling_causal, Kernels(), reference_kernels()
        data = run_sweep(args.task, causal, student, reference, args.quick, args.kv_heads)
        (args.out / f"{stem_of(args.task, args.kv_heads)}_scaling.json").write_text(json.dumps(data, indent=1))
    for path in plot(data, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
