"""The open scaffolding level's honest, simpler kernels, and the GPU run that calibrates its partial credit.

At the ``open`` level (registry ``scaffolding = "open"``; assignment/markers.py) a student designs a whole
kernel body, so the timing rubric needs levels for designs short of the reference's, measured rather than
guessed. ``grader/fixtures/open/<file stem>.<name>.cu`` holds the body of such a kernel (an open-level
TODO region filled in); each is a submission a student could honestly hand in.

    python -m grader.tools.open_levels --list                  # the fixtures and the open starter they fill in
    python -m grader.tools.open_levels --calibrate [--task t3] [--repeats 3] [--json out.json]   # on a GPU
    python -m grader.tools.open_levels --write DIR             # each fixture as a submission folder, to grade

``--calibrate`` checks each kernel's values against the reference on awkward shapes, then times it
against the reference exactly as the hidden suite's timing check does (the same workload, the kit's
timing harness, interleaved, cold L2) and prints the ratio each reaches and the points the rule's
``open`` thresholds give it. The reference's own open body is timed too: the noise floor. A kernel whose values
are off (or that does not build) is reported and not timed; the others still are.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from assignment.markers import apply_levels, strip_solutions
from assignment.registry import Registry, load_registry
from grader.authoring.starter import levels_for

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "grader" / "fixtures" / "open"
SOLUTIONS = REPO_ROOT / "solutions"


@dataclass(frozen=True)
class OpenFixture:
    task: str
    file: str  # the student file it fills in, e.g. t3_gemm.cu
    name: str  # e.g. no_double_buffer
    body: str  # the TODO region's lines


def open_levels(registry: Registry) -> dict[str, str]:
    """The registry's levels with every task that has OPEN blocks set to open."""
    return levels_for("open", registry, SOLUTIONS)


def fixtures(registry: Registry, task: str | None = None) -> list[OpenFixture]:
    found = []
    for path in sorted(FIXTURES.glob("*.cu")):
        stem, _, name = path.name[: -len(".cu")].partition(".")
        file = stem + ".cu"
        owners = [t.id for t in registry.tasks if file in t.files]
        if not owners or not name:
            raise ValueError(
                f"{path}: name it <student file stem>.<fixture name>.cu (e.g. t3_gemm.no_double_buffer.cu)"
            )
        fixture = OpenFixture(owners[0], file, name, path.read_text(encoding="utf-8"))
        if task is None or fixture.task == task:
            found.append(fixture)
    return found


def reference_body(file: str, task: str, levels: dict[str, str]) -> str:
    """The reference's own body of the task's open TODO region (the solution's OPEN block)."""
    from assignment.cuda.regions import solution_regions

    regions = [
        r for r in solution_regions((SOLUTIONS / file).read_text(encoding="utf-8"), levels, file) if r.task == task
    ]
    if len(regions) != 1:
        raise ValueError(f"{file}: expected one open region of {task}, found {len(regions)}")
    return "".join(regions[0].body)


def student_text(file: str, task: str, body: str, levels: dict[str, str]) -> str:
    """The open-level starter of ``file`` with the task's TODO region filled with ``body``: what a student at the
    open level would submit."""
    from assignment.cuda.regions import student_regions

    starter, _ = strip_solutions((SOLUTIONS / file).read_text(encoding="utf-8"), f"solutions/{file}", levels=levels)
    lines = starter.splitlines(keepends=True)
    regions = [r for r in student_regions(starter, file) if r.task == task]
    if len(regions) != 1:
        raise ValueError(f"{file}: the open starter has {len(regions)} TODO regions of {task}; the fixtures fill one")
    region = regions[0]
    first = region.body_start - 1
    return "".join(lines[:first]) + body + "".join(lines[first + len(region.body) :])


def _check_values(kernels, task: str) -> str:
    """The task's quick values check (``TaskCode.quick_check``) on shapes that catch edge bugs; the hidden suite
    does the thorough one."""
    from assignment.cuda.kernels import Kernels
    from assignment.tasks import code

    check = code(task).quick_check
    if check is None:
        return "no quick check for this task"
    check(kernels, Kernels(SOLUTIONS))
    return "ok"


def calibrate(task_id: str, repeats: int, registry: Registry, only: list[str] | None = None) -> list[dict]:
    from assignment.cuda.kernels import Kernels
    from grader.hidden.workloads import workload

    task = registry.task(task_id)
    levels = open_levels(registry)
    if levels.get(task_id) != "open":
        raise SystemExit(f"{task_id} has no OPEN block in solutions/: nothing to calibrate")
    rows = []
    candidates = [("reference (open body)", reference_body(task.files[0], task_id, levels), task.files[0])]
    kept = fixtures(registry, task_id)
    unknown = sorted(set(only or []) - {f.name for f in kept})
    if unknown:
        raise SystemExit(f"no open-level fixture of {task_id} named {', '.join(unknown)} (--list lists them)")
    candidates += [(f.name, f.body, f.file) for f in kept if not only or f.name in only]
    with tempfile.TemporaryDirectory(prefix="kit-open-") as tmp:
        # The kit's file at the open level (the registry may grade at another): the regions are spliced into it.
        kit = Path(tmp) / "kit"
        kit.mkdir()
        for file in {c[2] for c in candidates}:
            (kit / file).write_text(
                apply_levels((SOLUTIONS / file).read_text(encoding="utf-8"), file, levels), encoding="utf-8"
            )
        for name, body, file in candidates:
            folder = Path(tmp) / name.split()[0]
            folder.mkdir()
            (folder / file).write_text(student_text(file, task_id, body, levels), encoding="utf-8")
            kernels = Kernels(folder, kit=kit)
            row = {"task": task_id, "kernel": name, "values": "", "rules": []}
            try:
                row["values"] = _check_values(kernels, task_id)
            except Exception as exc:  # a wrong (or broken) kernel is reported, not timed: the others still are
                row["values"], row["error"] = "FAIL", f"{type(exc).__name__}: {exc}"[:600]
                rows.append(row)
                print(_row_line(row), flush=True)
                continue
            for rule in task.timing:
                values = []
                for _ in range(repeats):
                    record: dict = {}
                    try:
                        workload(task_id, rule, kernels, task.timed_tolerance()).time(rule, record)
                    except Exception as exc:  # a timed output off, an impossible time: said, and the next kernel
                        row["error"] = f"{rule.name}: {type(exc).__name__}: {exc}"[:600]
                        break
                    values.append(record["timing"]["value"])
                    row.setdefault("student_ms", []).append(record["timing"]["student_ms"])
                if not values:
                    break
                opened = _open_rule(rule)
                row["rules"].append(
                    {
                        "rule": rule.name,
                        "metric": rule.metric,
                        "values": values,
                        "open_points": [opened.points_for(v) if opened else None for v in values],
                        "guided_points": [rule.points_for(v) for v in values],
                    }
                )
            rows.append(row)
            print(_row_line(row), flush=True)
    return rows


def _open_rule(rule):
    """The rule as the open level scores it (None until the registry gives it open thresholds)."""
    return replace(rule, thresholds=rule.open_thresholds) if rule.open_thresholds else None


def _row_line(row: dict) -> str:
    parts = [f"{row['kernel']:<34} values {row['values']:<4}"]
    if "error" in row:
        parts.append(row["error"].replace("\n", " "))
    for rule in row["rules"]:
        values = ", ".join(f"{v:.3f}" for v in rule["values"])
        points = rule["open_points"]
        shown = "no open thresholds yet" if points[0] is None else "open points " + ", ".join(f"{p:g}" for p in points)
        parts.append(f"{rule['rule']}: {values} ({shown}; guided {', '.join(f'{p:g}' for p in rule['guided_points'])})")
    return " | ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the fixtures")
    parser.add_argument("--calibrate", action="store_true", help="time every fixture against the reference (GPU)")
    parser.add_argument("--task", default=None, help="only this task's fixtures")
    parser.add_argument("--repeats", type=int, default=3, help="timing runs per fixture and rule")
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NAME",
        help="with --calibrate: the reference and these fixtures only",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the measurements here")
    parser.add_argument(
        "--write",
        type=Path,
        default=None,
        help="write each fixture as an open-level submission folder DIR/<name>/ (to grade it)",
    )
    args = parser.parse_args(argv)
    registry = load_registry()
    if args.write:
        levels = open_levels(registry)
        for fixture in fixtures(registry, args.task):
            folder = args.write / fixture.name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / fixture.file).write_text(student_text(fixture.file, fixture.task, fixture.body, levels))
            print(f"wrote {folder / fixture.file}")
        return 0
    if args.calibrate:
        import torch

        if not torch.cuda.is_available():
            print("error: --calibrate times kernels: it needs a CUDA GPU", file=sys.stderr)
            return 2
        tasks = [args.task] if args.task else sorted({f.task for f in fixtures(registry)})
        print(f"GPU: {torch.cuda.get_device_name()}; values checked, then each timing rule {args.repeats} times")
        rows = [row for task_id in tasks for row in calibrate(task_id, args.repeats, registry, args.only)]
        if args.json:
            args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=2) + "\n")
        return 0
    for fixture in fixtures(registry, args.task):
        print(f"{fixture.task} {fixture.file} {fixture.name}: {fixture.body.strip().splitlines()[0].strip('/ ')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
