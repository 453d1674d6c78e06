"""``make bench T=t2``: time the implementation under test against the reference and PyTorch.

    python -m assignment.perf.bench --task t2|t3|t4|t5|t6 [--quick] [--seed002 | --gqa | --splits]
    python -m assignment.perf.bench --task t6 [--quick] [--model-only | --no-model]

Every case goes through ``assignment.perf.timing.measure`` (the grader's harness), so the numbers
here are the numbers that are graded. Columns: median ms, GB/s (memory-bound t2) or TFLOP/s,
a percentage against the hardware or library bar (copy bandwidth for t2, cuBLAS for t3,
SDPA for t4/t5), and the time ratio against the reference solution. Results also go to
``build/bench/<task>.json``. A new shape is one more ``Case`` in a ``cases_*`` function. The t4/t5
tables end with grouped-query rows (Llama 3's 32 query heads over 8 KV heads) that time the kernels
on the grouped K/V and on the same K/V repeated to one head per query head (``--gqa``: only those).
t6 times the decode kernel on a full KV cache (Llama 3's 32 query heads over 8 KV heads) in KV bytes
read per second against the device copy, beside a naive PyTorch decode (K/V repeated per query head,
matmul, softmax, matmul), the same without the repeat, and SDPA; ``--splits`` sweeps the split count
around the kit's choice. After the kernel table, t6 times the model (model_bench.py): TTFT and TBT of the
Llama-3.2-1B shape with random weights, naive (no cache) against the student's and the reference's KV cache and
kernels (decode in a CUDA graph) and transformers' generate, with the memory roofline; ``--model-only`` and
``--no-model`` run one half (the model alone writes ``t6_model.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from assignment.perf import targets
from assignment.perf.cases import (CASES, OUT_DIR, SEED002_SHAPES, TASKS, cases_attention, cases_gqa, cases_t6_splits,
                                   reference_kernels, run_case)

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=TASKS)
    parser.add_argument("--quick", action="store_true", help="smaller shapes and fewer repetitions")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--seed002", action="store_true",
                        help="t4/t5: seed 002's shapes (batch x length x d, one head) instead of the default set")
    parser.add_argument("--gqa", action="store_true",
                        help="t4/t5: only the grouped-query rows (32 query heads over 8 KV heads, GQA against MHA)")
    parser.add_argument("--splits", action="store_true",
                        help="t6: the decode kernel at split counts around the kit's choice")
    parser.add_argument("--model-only", action="store_true",
                        help="t6: only the model table (TTFT and TBT of the Llama-3.2-1B shape, four ways)")
    parser.add_argument("--no-model", action="store_true", help="t6: only the decode-kernel table")
    parser.add_argument("--targets", action="store_true",
                        help="only the registry's timing rules, against the student targets (where you stand)")
    args = parser.parse_args(argv)
    if args.task is None:
        print(f"choose a task: make bench T=t2 (one of {', '.join(TASKS)})", file=sys.stderr)
        return 2
    if (args.seed002 or args.gqa) and args.task not in ("t4", "t5"):
        print("--seed002 and --gqa are t4/t5 options", file=sys.stderr)
        return 2
    if (args.splits or args.model_only or args.no_model) and args.task != "t6":
        print("--splits, --model-only and --no-model are t6 options", file=sys.stderr)
        return 2
    if sum((args.splits, args.model_only, args.no_model, args.seed002, args.gqa, args.targets)) > 1:
        print("choose one of --splits, --model-only, --no-model, --seed002, --gqa and --targets", file=sys.stderr)
        return 2

    import torch

    if not torch.cuda.is_available():
        print("make bench needs a CUDA GPU, and PyTorch sees none (torch.cuda.is_available() is False). "
              "Run it on a GPU node.", file=sys.stderr)
        return 2
    from assignment.cuda.kernels import Kernels
    from assignment.impl import student_dir
    from assignment.perf.timing import copy_bandwidth, format_gpu_info, gpu_info

    torch.backends.cuda.matmul.allow_tf32 = False  # an fp32 contest: cuBLAS and SDPA may not use TF32
    torch.backends.cudnn.allow_tf32 = False
    from assignment.registry import load_registry

    registry = load_registry()
    student, reference = Kernels(), reference_kernels()
    settings = {"max_reps": 30, "time_cap_s": 3.0} if args.quick or args.seed002 or args.splits else {}
    info = gpu_info()
    print(f"GPU: {format_gpu_info(info)}")
    print(f"implementation under test: {student_dir()}")
    copy = copy_bandwidth(64 * 2**20 if args.quick else 256 * 2**20)
    print(f"device copy bandwidth: {copy.gbps:.0f} GB/s (read + write, {copy.median_ms:.3f} ms)")
    if args.seed002:
        cases = cases_attention(student, reference, False, args.task == "t5", shapes=SEED002_SHAPES)
    elif args.gqa:
        cases = cases_gqa(student, reference, args.quick, args.task == "t5")
    elif args.splits:
        cases = cases_t6_splits(student, reference, args.quick)
    elif args.model_only or args.targets:
        cases = []
    else:
        cases = CASES[args.task](student, reference, args.quick)
    rows = [run_case(case, copy.gbps, settings) for case in cases]
    report = {"task": args.task, "quick": args.quick, "gpu": info, "copy_gbps": copy.gbps,
              "implementation": str(student_dir()), "cases": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    if args.task == "t6" and not (args.splits or args.no_model):
        report["model"] = run_model_table(copy.gbps, args.quick, args.out)
    if not (args.seed002 or args.gqa or args.splits):
        standings = where_you_stand(registry.task(args.task), student, reference, copy.gbps, settings,
                                    report.get("model"), info.get("name"), skip_model=args.no_model)
        report["targets"] = [s.to_dict() for s in standings]
        print("\n" + targets.format_standings(standings))
    suffix = ("_seed002" if args.seed002 else "_gqa" if args.gqa else "_splits" if args.splits
              else "_model" if args.model_only else "_targets" if args.targets else "")
    path = args.out / f"{args.task}{suffix}.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwrote {path}")
    return 1 if any(row.get("error") for row in rows) or report.get("model", {}).get("error") else 0


def where_you_stand(task, student, reference, copy_gbps, settings, model_report, gpu_name, skip_model=False):
    """The task's timing rules against their student targets; t6's model rule reuses the model table (with
    --targets alone, the model table runs for it at its quick settings)."""
    if any(targets.is_model_rule(rule) for rule in task.timing) and model_report is None and not skip_model:
        from assignment.perf.model_bench import TARGETS

        model_report = run_model_table(copy_gbps, True, None, TARGETS)
    print(f"\ntiming {task.id}'s graded shapes against the student targets:")
    return targets.measure_task(task, student, reference, copy_gbps, settings, model_report, gpu_name)


def run_model_table(copy_gbps: float, quick: bool, out: Path | None, settings=None) -> dict:
    """t6's model table (model_bench.run), or {"error": ...} when it cannot run at all (the kernel table is kept)."""
    import traceback

    from assignment.perf import model_bench

    try:
        return model_bench.run(copy_gbps, quick=quick, out=out, settings=settings)
    except Exception as exc:  # noqa: BLE001 -- e.g. out of memory building the model: report it, keep the kernels
        traceback.print_exc()
        print(f"\nmodel table FAILED: {exc}", file=sys.stderr)
        return {"error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    sys.exit(main())
