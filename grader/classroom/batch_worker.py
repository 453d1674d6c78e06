"""The class grading's units of work, each run by ``grader.classroom.batch`` in a process of its own (so that a crash,
a hang or a leak in one never reaches the batch): ``python -m grader.classroom.batch_worker COMMAND ...``.

    grade SOURCE --part-dir DIR --lane L --key K --task t1 ... [--seed N] [--grading-id ID] [grading options]
        grade one lane of one submission (the grader's own grade_submission, preflight already done by the
        batch) and leave DIR/L.pkl (the SubmissionScore) and DIR/L.json (key, seed, tasks, wall time); the
        hidden seeds are derived for ID (grader/grade/seeds.py) unless --seed fixes one for every task
    host --json FILE --task ... [grading options]
        the host's preflight, once per batch, without timing the reference; plus the GPUs it sees
    gpu-check --json FILE --task ...
        on the GPU in CUDA_VISIBLE_DEVICES: the preflight's reference timing (item 5 of issue 15)

Exit codes: 0 done; 1 the grader raised (the traceback is on stderr, which the batch keeps); 3 the
host refused (as ``python -m grader.grade.grade``).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

from assignment.atomic import replacing, write_atomic
from assignment.registry import load_registry
from grader.grade.config import ISOLATION_CHOICES, GradeConfig


def add_grading_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", action="append", default=[])
    parser.add_argument("--isolation", choices=ISOLATION_CHOICES, default="auto")
    parser.add_argument("--allow-weak-isolation", action="store_true")
    parser.add_argument("--skip-preflight", action="store_true")
    parser.add_argument("--timeout-scale", type=float, default=1.0)
    parser.add_argument("--select", default="")
    parser.add_argument("--parallel", type=int, default=None, help="checker processes at once (default: the host's)")


def config_from(args: argparse.Namespace, **changes) -> GradeConfig:
    for name in ("theory", "student_id", "grading_id"):  # the theory part's and the seeds' ids, where given
        if getattr(args, name, None) is not None:
            changes[name] = getattr(args, name)
    return replace(
        GradeConfig(),
        tasks=tuple(args.task),
        isolation=args.isolation,
        allow_weak_isolation=args.allow_weak_isolation,
        timeout_scale=args.timeout_scale,
        select=args.select,
        parallel=getattr(args, "parallel", None),
        **changes,
    )


def grade(args: argparse.Namespace) -> int:
    from grader.grade.grade import PreflightError, grade_submission

    registry = load_registry()
    # The batch ran the host's preflight once; here only the isolation is decided again (a cheap probe).
    config = config_from(args, seed=args.seed, preflight=False)
    part_dir = Path(args.part_dir)
    part_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        # make grade's files for this lane alone are not kept: the batch writes them once, for every lane.
        with tempfile.TemporaryDirectory(prefix=f".{args.lane}-", dir=part_dir) as scratch:
            result = grade_submission(Path(args.source), Path(scratch), config, registry)
    except PreflightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    with replacing(part_dir / f"{args.lane}.pkl") as tmp:
        tmp.write_bytes(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    meta = {
        "key": args.key,
        "lane": args.lane,
        "seeds": result.grading.get("seeds"),
        "tasks": list(args.task),
        "wall_s": round(time.monotonic() - start, 2),
        "worker": os.environ.get("KIT_BATCH_WORKER", ""),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "pid": os.getpid(),
    }
    write_atomic(part_dir / f"{args.lane}.json", json.dumps(meta, indent=2))
    print(f"graded {args.lane} ({', '.join(args.task)}): {result.score:.2f} in {meta['wall_s']:.1f} s")
    return 0


def host_report(tasks, config: GradeConfig, skip_preflight: bool) -> dict:
    """The host's preflight without timing the reference (the GPU workers do that), and the GPUs it sees."""
    from grader.grade.preflight import isolation_check, run_preflight
    from grader.grade.runner import gpu_available

    result = isolation_check(tasks, config) if skip_preflight else run_preflight(tasks, config, time_reference=False)
    gpus = []
    if gpu_available():
        import torch

        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "ok": result.ok,
        "problems": result.problems,
        "notes": result.notes,
        "facts": result.facts,
        "isolation": result.isolation,
        "gpus": gpus,
    }


def host(args: argparse.Namespace) -> int:
    registry = load_registry()
    tasks = [registry.task(t) for t in args.task] or list(registry.available)
    report = host_report(tasks, config_from(args), args.skip_preflight)
    write_atomic(Path(args.json), json.dumps(report, indent=2, default=str))
    return 0


def gpu_check(args: argparse.Namespace) -> int:
    from grader.grade.preflight import run_preflight

    registry = load_registry()
    tasks = [registry.task(t) for t in args.task] or list(registry.available)
    gpu_tasks = [t for t in tasks if t.needs_gpu]
    start = time.monotonic()
    result = run_preflight(gpu_tasks, config_from(args), time_reference=True)
    write_atomic(
        Path(args.json),
        json.dumps(
            {
                "ok": result.ok,
                "problems": result.problems,
                "notes": result.notes,
                "gpu": result.facts.get("gpu", ""),
                "speeds": result.speeds,
                "wall_s": round(time.monotonic() - start, 2),
            },
            indent=2,
            default=str,
        ),
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_grade = sub.add_parser("grade")
    p_grade.add_argument("source", type=Path)
    p_grade.add_argument("--part-dir", required=True)
    p_grade.add_argument("--lane", required=True)
    p_grade.add_argument("--key", required=True)
    p_grade.add_argument("--seed", type=int, default=None, help="one seed for every task (default: derived)")
    p_grade.add_argument(
        "--grading-id", default=None, help="who the hidden seeds are drawn for (grader/grade/seeds.py)"
    )
    p_grade.add_argument(
        "--theory",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="grade the theory answers in this lane (the batch picks one lane for them)",
    )
    p_grade.add_argument("--student-id", default=None, help="the student id that picks the theory questions")
    for p in (p_grade, sub.add_parser("host"), sub.add_parser("gpu-check")):
        add_grading_options(p)
        if p is not p_grade:
            p.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    from grader.grade.checker_plugin import die_with_parent

    die_with_parent()  # a batch killed with kill -9 leaves no lane grading on (and timing on a GPU)
    try:
        return {"grade": grade, "host": host, "gpu-check": gpu_check}[args.command](args)
    except Exception:  # noqa: BLE001 - the batch records the traceback as the failure's reason
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main())
