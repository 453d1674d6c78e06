"""``make bench T=t2``: time the implementation under test against the reference and PyTorch.

    python -m assignment.commands.bench --task t2|t3|t4|t5|t6 [--quick] [--seed002 | --gqa | --splits]
    python -m assignment.commands.bench --task t6 [--quick] [--model-only | --no-model]
    python -m assignment.commands.bench --task t8 [--quick] [--bf16 | --ttft]

Every case goes through ``assignment.perf.timing.measure`` (the grader's harness), so the numbers
here are the numbers that are graded. Columns: median ms, GB/s (memory-bound t2) or TFLOP/s,
a percentage against the hardware or library bar (copy bandwidth for t2, cuBLAS for t3,
SDPA for t4/t5), and the time ratio against the reference solution. Results also go to
``build/bench/<task>.json``. A new shape is one more ``Case`` in its task's ``bench_cases``
(``assignment/tasks/``). The t4/t5
tables end with grouped-query rows (Llama 3's 32 query heads over 8 KV heads) that time the kernels
on the grouped K/V and on the same K/V repeated to one head per query head (``--gqa``: only those).
t6 times the decode kernel on a full KV cache (Llama 3's 32 query heads over 8 KV heads) in KV bytes
read per second against the device copy, beside a naive PyTorch decode (K/V repeated per query head,
matmul, softmax, matmul), the same without the repeat, and SDPA; ``--splits`` sweeps the split count
around the kit's choice. After the kernel table, t6 times the model (model_bench.py): TTFT and TBT of the
Llama-3.2-1B shape with random weights, naive (no cache) against the student's and the reference's KV cache and
kernels (decode in a CUDA graph) and transformers' generate, with the memory roofline; ``--model-only`` and
``--no-model`` run one half (the model alone writes ``t6_model.json``). t8's tables (fp16, ``--bf16``) end with rows
of the same Llama-3.2-1B shape in bf16 (prefill_bench.py): time to first token at prompts of 1024 and 4096 tokens,
the kit's model with the student's kernel and with SDPA against transformers with SDPA on the same weights
(``--ttft``: only those rows).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from assignment import tasks
from assignment.cuda.toolchain import hopper_absent
from assignment.registry import load_registry
from assignment.kernels import Kernels, reference_kernels
from assignment.perf import targets
from assignment.perf.cases import OUT_DIR, run_case


def _parser(with_bench: list[tasks.TaskCode]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=[c.id for c in with_bench])
    parser.add_argument("--quick", action="store_true", help="smaller shapes and fewer repetitions")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    for option, (help_text, owners) in _variants(with_bench).items():
        parser.add_argument(f"--{option}", action="store_true", help=f"{'/'.join(owners)}: {help_text}")
    parser.add_argument(
        "--model-only",
        action="store_true",
        help=f"{_model_tasks(with_bench)}: only the model table (TTFT and TBT of the Llama-3.2-1B shape, four ways)",
    )
    parser.add_argument("--no-model", action="store_true", help=f"{_model_tasks(with_bench)}: only the kernel table")
    parser.add_argument(
        "--targets",
        action="store_true",
        help="only the registry's timing rules, against the student targets (where you stand)",
    )
    parser.add_argument(
        "--then-scaling",
        action="store_true",
        help="after the default table, the task's scaling sweep where it has one (make bench)",
    )
    return parser


def _variants(with_bench: list[tasks.TaskCode]) -> dict[str, tuple[str, list[str]]]:
    """Each variant table's flag -> (its help, the tasks that have it)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for code in with_bench:
        for variant in code.bench_variants:
            found.setdefault(variant.option, (variant.help, []))[1].append(code.id)
    return found


def _model_tasks(with_bench: list[tasks.TaskCode]) -> str:
    return "/".join(c.id for c in with_bench if c.model_bench) or "no task"


def main(argv: list[str] | None = None) -> int:
    with_bench = tasks.with_bench()
    args = _parser(with_bench).parse_args(argv)
    if args.task is None:
        print(
            f"choose a task: make bench T={with_bench[0].id} (one of {', '.join(c.id for c in with_bench)})",
            file=sys.stderr,
        )
        return 2
    code = tasks.code(args.task)
    variants = _variants(with_bench)
    chosen = [v for v in code.bench_variants if getattr(args, v.option)]
    for option, (_, owners) in variants.items():
        if getattr(args, option) and args.task not in owners:
            print(f"--{option} is a {'/'.join(owners)} option", file=sys.stderr)
            return 2
    if (args.model_only or args.no_model) and not code.model_bench:
        print(f"--model-only and --no-model are {_model_tasks(with_bench)} options", file=sys.stderr)
        return 2
    flags = ["--" + o for o in variants] + ["--model-only", "--no-model", "--targets"]
    if sum(bool(getattr(args, f[2:].replace("-", "_"))) for f in flags) > 1:
        print(f"choose one of {', '.join(flags[:-1])} and {flags[-1]}", file=sys.stderr)
        return 2
    variant = chosen[0] if chosen else None

    import torch

    if not torch.cuda.is_available():
        print(
            "make bench needs a CUDA GPU, and PyTorch sees none (torch.cuda.is_available() is False). "
            "Run it on a GPU node.",
            file=sys.stderr,
        )
        return 2
    if load_registry().task(args.task).needs_hopper and (absent := hopper_absent()):
        print(f"make bench T={args.task}: {args.task} is not available on this GPU: {absent}.", file=sys.stderr)
        return 0
    from assignment.impl import student_dir
    from assignment.perf.timing import copy_bandwidth, format_gpu_info, gpu_info

    torch.backends.cuda.matmul.allow_tf32 = False  # an fp32 contest: cuBLAS and SDPA may not use TF32
    torch.backends.cudnn.allow_tf32 = False
    registry = load_registry()
    student, reference = Kernels(), reference_kernels()
    quick_settings = args.quick or (variant is not None and variant.quick_settings)
    settings = {"max_reps": 30, "time_cap_s": 3.0} if quick_settings else {}
    info = gpu_info()
    print(f"GPU: {format_gpu_info(info)}")
    print(f"implementation under test: {student_dir()}")
    copy = copy_bandwidth(64 * 2**20 if args.quick else 256 * 2**20)
    print(f"device copy bandwidth: {copy.gbps:.0f} GB/s (read + write, {copy.median_ms:.3f} ms)")
    if variant is not None:
        cases = variant.cases(student, reference, args.quick)
    elif args.model_only or args.targets:
        cases = []
    else:
        cases = code.bench_cases(student, reference, args.quick)
    rows = [run_case(case, copy.gbps, settings) for case in cases]
    report = {
        "task": args.task,
        "quick": args.quick,
        "gpu": info,
        "copy_gbps": copy.gbps,
        "implementation": str(student_dir()),
        "cases": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    if code.model_bench and not (variant or args.no_model):
        report["model"] = run_model_table(code.id, copy.gbps, args.quick, args.out)
    if variant is None:
        standings = where_you_stand(
            registry.task(args.task),
            student,
            reference,
            copy.gbps,
            settings,
            report.get("model"),
            info.get("name"),
            skip_model=args.no_model,
        )
        report["targets"] = [s.to_dict() for s in standings]
        print("\n" + targets.format_standings(standings))
    suffix = f"_{variant.option}" if variant else "_model" if args.model_only else "_targets" if args.targets else ""
    path = args.out / f"{args.task}{suffix}.json"
    path.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwrote {path}")
    failed = any(row.get("error") for row in rows) or report.get("model", {}).get("error")
    if args.then_scaling and not failed and code.scaling_causal is not None and suffix == "":
        sys.stdout.flush()  # a process of its own, as make ran it: the sweep starts from a fresh GPU state
        return subprocess.run([sys.executable, "-m", "assignment.commands.scaling", "--task", args.task]).returncode
    return 1 if failed else 0


def where_you_stand(task, student, reference, copy_gbps, settings, model_report, gpu_name, skip_model=False):
    """The task's timing rules against their student targets; t6's model rule reuses the model table (with
    --targets alone, the model table runs for it at its quick settings)."""
    if any(targets.is_model_rule(rule) for rule in task.timing) and model_report is None and not skip_model:
        from assignment.perf.model_bench import TARGETS

        model_report = run_model_table(task.id, copy_gbps, True, None, TARGETS)
    print(f"\ntiming {task.id}'s graded shapes against the student targets:")
    make_case = tasks.code(task.id).rule_case
    return targets.measure_task(task, make_case, student, reference, copy_gbps, settings, model_report, gpu_name)


def run_model_table(task: str, copy_gbps: float, quick: bool, out: Path | None, settings=None) -> dict:
    """``task``'s model table (model_bench.run: t6's), or {"error": ...} when it cannot run at all (the kernel table
    is kept)."""
    import traceback

    from assignment.perf import model_bench

    try:
        return model_bench.run(tasks.code(task).model_attention, copy_gbps, quick=quick, out=out, settings=settings)
    except Exception as exc:  # noqa: BLE001 -- e.g. out of memory building the model: report it, keep the kernels
        traceback.print_exc()
        print(f"\nmodel table FAILED: {exc}", file=sys.stderr)
        return {"error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    sys.exit(main())
