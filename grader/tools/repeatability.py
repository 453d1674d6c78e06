"""How far the grade of one submission moves when it is graded again (``make repeatability``).

    python -m grader.tools.repeatability SUBMISSION ... [--repeats 5] [--at-once N] [--task t3 ...] [--json FILE]
    python -m grader.tools.repeatability --graded NAME=DIR,DIR,... [--graded ...]

The first form grades each submission ``--repeats`` times in a row on this host (as ``make grade``,
one after the other), or ``--at-once`` of them at a time, each a ``make grade`` process of its own: a busy host
must not cost honest work points (deadlines scale with the host's pace, a check past its deadline is rerun alone,
and timed checks still take turns on the GPU: grader/grade/host_gate.py). The second summarises gradings already
made, for instance the copies of one submission in a ``make grade-all`` class: each DIR holds the
``results.json`` and ``grading.json`` that ``make grade`` writes (``OUT/students/<id>/``).

Per submission and task it reports the correctness and performance points of every grading, and per
timing rule the measured values (ratio to the reference's time, or speedup over the naive path) with
their spread, max/min - 1. The verdict fails (exit 1) when the correctness points differ between
gradings of the same code, or when a timing rule's spread exceeds the allowance (``--allowance``,
default the rubric's 15%: full points up to 1.15x the reference, set from the reference timed against
itself). A rule whose points changed between gradings is named: its values straddle a threshold, and
that threshold, not the harness, decides what a student near it gets.

Identical correctness points are a property of every submission, a buggy one too (not only of the
solutions, which pass whatever the inputs): each task's hidden inputs come from a seed derived from the
course's salt, the student and the task (grader/grade/seeds.py), so each grading of the same files draws the
same inputs. The seeds each grading recorded (grading.json) are compared first: gradings with different
seeds (another salt, another student id such as the copies of one submission in a class, a ``--seed``)
drew different inputs, so their correctness points are not compared (a note says so); their timings are.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from assignment.registry import Registry, load_registry

ALLOWANCE = 0.15  # the t2-t5 rules' noise allowance: full points up to 1.15x the reference's time


@dataclass
class Grading:
    """One grading of one submission, as results.json and grading.json record it."""

    correctness: dict[str, float] = field(default_factory=dict)  # task id -> points
    performance: dict[str, float] = field(default_factory=dict)
    timing: dict[tuple[str, str], float] = field(default_factory=dict)  # (task, rule) -> measured value
    status: dict[str, str] = field(default_factory=dict)
    seeds: dict[str, int] = field(default_factory=dict)  # task id -> the hidden seed it was graded with


def read_grading(folder: Path) -> Grading:
    """A grading from a ``make grade`` output folder (results.json, grading.json)."""
    folder = Path(folder)
    try:
        results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        record = json.loads((folder / "grading.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{folder}: not a graded submission (results.json and grading.json): {exc}") from None
    grading = Grading(seeds={str(k): v for k, v in (record.get("seeds") or {}).items()})
    for task_id, task in record.get("tasks", {}).items():
        grading.status[task_id] = task.get("status", "?")
        grading.correctness[task_id] = 0.0
        grading.performance[task_id] = 0.0
        for timing in task.get("timing") or []:
            if isinstance(timing, dict) and isinstance(timing.get("value"), (int, float)):
                grading.timing[(task_id, timing["rule"])] = float(timing["value"])
    for test in results.get("tests", []):
        tags = test.get("tags") or []
        task_id = next((t for t in tags if t in grading.status), None)
        if task_id is None:
            continue
        kind = grading.performance if "performance" in tags else grading.correctness
        kind[task_id] += float(test.get("score") or 0.0)
    return grading


def spread(values: list[float]) -> float:
    """max/min - 1 of positive values (0 for one value; inf when a value is not positive)."""
    if not values:
        return 0.0
    low = min(values)
    return max(values) / low - 1.0 if low > 0 else math.inf


def summarise(name: str, gradings: list[Grading], registry: Registry, allowance: float = ALLOWANCE) -> dict:
    """Per task and timing rule: every grading's points and values, their spread, and what is off."""
    tasks = sorted({t for g in gradings for t in g.status})
    rows, problems, notes = [], [], []
    for task_id in tasks:
        correctness = [round(g.correctness.get(task_id, 0.0), 4) for g in gradings]
        performance = [round(g.performance.get(task_id, 0.0), 4) for g in gradings]
        statuses = sorted({g.status.get(task_id, "absent") for g in gradings})
        row = {"task": task_id, "status": statuses, "correctness": correctness, "performance": performance, "rules": []}
        seeds = [g.seeds.get(task_id) for g in gradings]
        row["seeds"] = seeds
        if len(set(seeds)) > 1:
            notes.append(
                f"{name} {task_id}: graded with different hidden seeds {seeds} (another salt, student id or "
                "--seed): they drew different inputs, so their correctness points are not compared"
            )
        elif len(set(correctness)) > 1:
            problems.append(f"{name} {task_id}: correctness points differ between gradings: {correctness}")
        if len(statuses) > 1:
            problems.append(f"{name} {task_id}: the grading status differs: {statuses}")
        try:
            task = registry.task(task_id)
        except (KeyError, ValueError):
            task = None
        for rule in task.timing if task else []:
            values = [g.timing[(task_id, rule.name)] for g in gradings if (task_id, rule.name) in g.timing]
            if not values:
                continue
            points = [rule.points_for(v) for v in values]
            rule_row = {
                "rule": rule.name,
                "metric": rule.metric,
                "values": values,
                "median": statistics.median(values),
                "spread": spread(values),
                "points": points,
            }
            row["rules"].append(rule_row)
            if len(values) != len(gradings):
                problems.append(
                    f"{name} {task_id} '{rule.name}': measured in {len(values)} of {len(gradings)} gradings"
                )
            if rule_row["spread"] > allowance:
                problems.append(
                    f"{name} {task_id} '{rule.name}': values spread {rule_row['spread']:.1%}, more than "
                    f"the {allowance:.0%} allowance ({', '.join(f'{v:.3f}' for v in values)})"
                )
            if len(set(points)) > 1:
                notes.append(
                    f"{name} {task_id} '{rule.name}': points moved between gradings "
                    f"({', '.join(f'{p:g}' for p in points)}): the values straddle a threshold"
                )
        rows.append(row)
    return {"submission": name, "gradings": len(gradings), "tasks": rows, "problems": problems, "notes": notes}


def table(summary: dict) -> list[str]:
    lines = [f"{summary['submission']}: {summary['gradings']} gradings"]
    for row in summary["tasks"]:
        corr = sorted(set(row["correctness"]))
        perf = sorted(set(row["performance"]))
        lines.append(
            f"  {row['task']}  {'/'.join(row['status']):<9} correctness "
            f"{' or '.join(f'{c:g}' for c in corr):<12} performance {' or '.join(f'{p:g}' for p in perf)}"
        )
        for rule in row["rules"]:
            unit = "x ref time" if rule["metric"] == "time_vs_reference" else "x speedup"
            values = ", ".join(f"{v:.3f}" for v in rule["values"])
            lines.append(
                f"      {rule['rule'][:58]:<58} {unit:<10} median {rule['median']:.3f}  spread "
                f"{rule['spread']:6.1%}  [{values}]  points {', '.join(f'{p:g}' for p in rule['points'])}"
            )
    return lines


def grade_repeatedly(source: Path, repeats: int, out: Path, registry: Registry, config, host) -> list[Grading]:
    """``repeats`` gradings of one submission with one host check (``grader.grade.grade.check_host``)."""
    from grader.grade.grade import grade_submission

    gradings = []
    for attempt in range(repeats):
        folder = out / f"{Path(source).name}-{attempt + 1}"
        result = grade_submission(Path(source), folder, config, registry, log=lambda *a, **k: None, host=host)
        print(f"  {Path(source).name} #{attempt + 1}: {result.score:.2f} in {result.duration_s:.0f} s", flush=True)
        gradings.append(read_grading(folder))
    return gradings


def grade_side_by_side(source: Path, repeats: int, out: Path, tasks: tuple[str, ...], at_once: int) -> list[Grading]:
    """``repeats`` gradings of one submission, ``at_once`` of them at a time, each a ``python -m grader.grade.grade``
    of its own as an instructor would start them: a busy host must give honest work the same points."""
    import subprocess

    gradings = []
    for first in range(0, repeats, at_once):
        running = []
        for attempt in range(first, min(repeats, first + at_once)):
            folder = out / f"{Path(source).name}-{attempt + 1}"
            command = [sys.executable, "-m", "grader.grade.grade", str(source), "--out", str(folder)]
            command += ["--skip-preflight", *(f"--task={t}" for t in tasks)]
            running.append((attempt, folder, subprocess.Popen(command, stdout=subprocess.PIPE, text=True)))
        for attempt, folder, process in running:
            output, _ = process.communicate()
            total = next((line for line in output.splitlines() if line.startswith("total")), "no total")
            print(f"  {Path(source).name} #{attempt + 1}: {total} (exit {process.returncode})", flush=True)
            gradings.append(read_grading(folder))
    return gradings


def _graded_groups(specs: list[str]) -> list[tuple[str, list[Path]]]:
    groups = []
    for spec in specs:
        name, sep, dirs = spec.partition("=")
        if not sep or not dirs:
            raise SystemExit(f"--graded {spec!r}: write NAME=DIR,DIR,... (the gradings of one submission)")
        groups.append((name, [Path(d) for d in dirs.split(",") if d]))
    return groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", type=Path, nargs="*", help="submissions to grade --repeats times each")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--task", action="append", default=[], help="grade only these tasks (repeatable)")
    parser.add_argument(
        "--graded",
        action="append",
        default=[],
        metavar="NAME=DIR,DIR,...",
        help="summarise gradings already made (make grade output folders) as one submission's",
    )
    parser.add_argument(
        "--allowance",
        type=float,
        default=ALLOWANCE,
        help="the largest timing spread (max/min - 1) that passes (default %(default)s)",
    )
    parser.add_argument(
        "--at-once",
        type=int,
        default=1,
        help="grade this many copies at a time, each in a process of its own (a busy host; default: one after another)",
    )
    parser.add_argument("--out", type=Path, default=None, help="keep the gradings here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = parser.parse_args(argv)
    if not args.submissions and not args.graded:
        parser.error("name submissions to grade, or --graded NAME=DIR,...")
    if args.repeats < 2:
        parser.error("--repeats must be at least 2 (a spread needs two gradings)")
    for source in args.submissions:
        if not source.exists():
            parser.error(f"{source}: no such submission")
    registry = load_registry()
    unknown = [t for t in args.task if t not in {task.id for task in registry.tasks} | {"theory"}]
    if unknown:
        parser.error(f"unknown task(s) {', '.join(unknown)}")
    summaries = []
    for name, folders in _graded_groups(args.graded):
        summaries.append(summarise(name, [read_grading(f) for f in folders], registry, args.allowance))
    if args.submissions:
        from grader.grade import seeds
        from grader.grade.config import GradeConfig
        from grader.grade.grade import check_host

        try:
            seeds.resolve_salt(registry)  # every grading derives its seeds from it
        except seeds.SaltError as exc:
            parser.error(str(exc))

        config = replace(GradeConfig(), tasks=tuple(args.task))
        host = check_host(config, registry)  # once: the host does not change between submissions
        with tempfile.TemporaryDirectory(prefix="kit-repeat-") as tmp:
            for source in args.submissions:
                where = args.out or Path(tmp)
                if args.at_once > 1:
                    gradings = grade_side_by_side(source, args.repeats, where, tuple(args.task), args.at_once)
                else:
                    gradings = grade_repeatedly(source, args.repeats, where, registry, config, host)
                summaries.append(summarise(source.name, gradings, registry, args.allowance))
    for summary in summaries:
        print("\n".join(table(summary)))
    problems = [p for s in summaries for p in s["problems"]]
    for note in (n for s in summaries for n in s["notes"]):
        print(f"note: {note}")
    for problem in problems:
        print(f"NOT REPEATABLE: {problem}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summaries, indent=1), encoding="utf-8")
    print(
        f"repeatable: the same code got the same correctness points, and every timing within {args.allowance:.0%}"
        if not problems
        else f"{len(problems)} problem(s)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
