"""The open scaffolding level's honest, simpler designs, and the runs that calibrate its rubric.

At the ``open`` level (registry ``scaffolding = "open"``; assignment/markers.py) a student designs a whole
kernel body, or a whole function's body, so the rubric needs to be measured on designs short of the reference's
rather than guessed. Each fixture in ``grader/fixtures/open/`` is a submission a student could honestly hand in:

* ``<file stem>.<name>.cu``: the body of a CUDA task's open TODO region;
* ``<file stem>.<name>.py``: functions of a Python task's file, each one's body (after its docstring) the body of
  that function's open TODO region; the file's other regions keep the reference's body. The bodies run inside
  the student file, so they use its names (helpers, constants) and the variables its given lines set;
* ``<file stem>.<name>.toml``: a CUDA kernel that is the reference's own open body with a few lines changed,
  given as the change: ``note`` (what the design is, a comment atop the body) and ``replace = [[old, new], ...]``,
  each ``old`` found exactly once in the reference's body (one refinement left out, with no copy to drift).

    python -m grader.tools.open_levels --list                  # the fixtures and the open starter they fill in
    python -m grader.tools.open_levels --calibrate [--task t3] [--repeats 3] [--json out.json]
    python -m grader.tools.open_levels --write DIR             # each fixture as a submission folder, to grade

``--calibrate`` on a CUDA task (a GPU) checks each kernel's values against the reference on awkward shapes, then
times it against the reference exactly as the hidden suite's timing check does (the same workload, the kit's
timing harness, interleaved, cold L2) and prints the ratio each reaches and the points the rule's ``open``
thresholds give it. The reference's own open body is timed too: the noise floor. A kernel whose values are off
(or that does not build) is reported and not timed; the others still are.

A timing rule that times the whole model (t6's decode step through the student's cache) needs the student's
decoder, which only the grader's hidden suite builds: ``--calibrate`` lists it as not timed, and
``FIXTURES=1 bash grader/scripts/open_level_device.sh t6`` grades each fixture at the open level instead.

``--calibrate`` on a Python task (where it runs: the CPU, and a GPU when there is one) runs the task's hidden
suite on each candidate, the reference's own bodies first, with one seed (``--seed``), and prints the checks
passed, the slowest check against the task's per-check deadline, the suite's time against its limit, and what
the structure checks measured (their ``measured`` metadata, e.g. t1's peak memory against its bound).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from assignment.markers import PLAN, STUB, apply_levels, strip_solutions
from assignment.registry import Registry, Task, load_registry
from grader.authoring.starter import levels_for

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "grader" / "fixtures" / "open"
SOLUTIONS = REPO_ROOT / "solutions"


@dataclass(frozen=True)
class OpenFixture:
    task: str
    file: str  # the student file it fills in, e.g. t3_gemm.cu
    name: str  # e.g. no_double_buffer
    body: str  # the TODO region's lines (CUDA), or the module whose functions fill the regions (Python)


def open_levels(registry: Registry) -> dict[str, str]:
    """The registry's levels with every task that has OPEN blocks set to open."""
    return levels_for("open", registry, SOLUTIONS)


def fixtures(registry: Registry, task: str | None = None) -> list[OpenFixture]:
    found = []
    for path in sorted([*FIXTURES.glob("*.cu"), *FIXTURES.glob("*.py"), *FIXTURES.glob("*.toml")]):
        stem, _, name = path.name[: -len(path.suffix)].partition(".")
        file = stem + (".cu" if path.suffix == ".toml" else path.suffix)
        owners = [t.id for t in registry.tasks if file in t.files]
        if not owners or not name:
            raise ValueError(
                f"{path}: name it <student file stem>.<fixture name>{path.suffix} (e.g. t3_gemm.no_double_buffer.cu)"
            )
        if path.suffix == ".toml":
            body = _edited_reference(path, file, owners[0], registry)
        else:
            body = path.read_text(encoding="utf-8")
        fixture = OpenFixture(owners[0], file, name, body)
        if task is None or fixture.task == task:
            found.append(fixture)
    return found


def _edited_reference(path: Path, file: str, task: str, registry: Registry) -> str:
    """A ``.toml`` fixture's body: the reference's open body with its ``replace`` pairs applied, under its note."""
    spec = tomllib.loads(path.read_text(encoding="utf-8"))
    body = reference_body(file, task, open_levels(registry))
    for old, new in spec.get("replace", []):
        if body.count(old) != 1:
            raise ValueError(
                f"{path}: {old!r} stands {body.count(old)} times in the reference's open body of {file}, not once"
            )
        body = body.replace(old, new)
    note = textwrap.wrap(spec.get("note", "").strip(), 112)
    return "".join(f"    // {line}\n" for line in note) + body


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
    open level would submit. For a Python file, ``body`` is a fixture module: see ``python_student_text``. In a CUDA
    file the regions of the file's other tasks (t4's file holds t5's) hold the reference's code, as a student who did
    those tasks too would hand them in."""
    from assignment.cuda.regions import solution_regions, student_regions

    if file.endswith(".py"):
        return python_student_text(file, task, body, levels)

    solution = (SOLUTIONS / file).read_text(encoding="utf-8")
    starter, _ = strip_solutions(solution, f"solutions/{file}", levels=levels)
    lines = starter.splitlines(keepends=True)
    found = student_regions(starter, file)
    if sum(r.task == task for r in found) != 1:
        count = sum(r.task == task for r in found)
        raise ValueError(f"{file}: the open starter has {count} TODO regions of {task}; the fixtures fill one")
    references = solution_regions(solution, levels, file)
    if [r.task for r in references] != [r.task for r in found]:
        raise ValueError(f"{file}: the open starter's regions are not the solution's at the same levels")
    out: list[str] = []
    cursor = 0  # next starter line (0-based) to copy
    for region, reference in zip(found, references):
        first = region.body_start - 1
        out.extend(lines[cursor:first])
        out.append(body if region.task == task else "".join(reference.body))
        cursor = first + len(region.body)
    out.extend(lines[cursor:])
    return "".join(out)


def _function_bodies(module_text: str, where: str) -> dict[str, str]:
    """Name -> body (after the docstring, dedented) of each top-level function of a fixture module."""
    lines = module_text.splitlines(keepends=True)
    bodies = {}
    for node in ast.parse(module_text).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1:
            body = body[1:]
        if not body or (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)):
            raise ValueError(f"{where}: {node.name} has no body to fill a region with")
        bodies[node.name] = textwrap.dedent("".join(lines[body[0].lineno - 1 : node.end_lineno]))
    return bodies


def python_student_text(file: str, task: str, module_text: str, levels: dict[str, str]) -> str:
    """The open-level starter of a Python ``file`` with each of the task's TODO regions filled: by the body of the
    fixture module's function of the same name, else by the reference's own body. What a student at the open level
    would submit: the given code as the starter has it, no TODO left, no marker."""
    levelled = apply_levels((SOLUTIONS / file).read_text(encoding="utf-8"), file, levels)
    _, regions = strip_solutions(levelled, file, levels={})
    functions = [n for n in ast.walk(ast.parse(levelled)) if isinstance(n, ast.FunctionDef)]
    bodies = _function_bodies(module_text, file) if module_text.strip() else {}
    lines = levelled.splitlines(keepends=True)
    out, filled, cursor = [], set(), 0
    for region in regions:
        out.extend(lines[cursor : region.begin_line - 1])
        cursor = region.end_line
        inside = [f.name for f in functions if f.lineno <= region.begin_line <= f.end_lineno]
        name = inside[-1] if inside else None
        marker = lines[region.begin_line - 1]
        indent = marker[: len(marker) - len(marker.lstrip())]
        if region.task == task and name in bodies:
            out.append(textwrap.indent(bodies[name], indent))
            filled.add(name)
        else:
            reference = lines[region.begin_line : region.end_line - 1]
            out.extend(line for line in reference if not (PLAN.match(line) or STUB.match(line)))
    out.extend(lines[cursor:])
    unknown = sorted(set(bodies) - filled)
    if unknown:
        raise ValueError(f"{file}: the fixture defines {', '.join(unknown)}, which holds no open region of {task}")
    return "".join(out)


def _check_values(kernels, task: str) -> str:
    """The task's quick values check (``TaskCode.quick_check``) on shapes that catch edge bugs; the hidden suite
    does the thorough one."""
    from assignment.kernels import Kernels
    from assignment.tasks import code

    check = code(task).quick_check
    if check is None:
        return "no quick check for this task"
    check(kernels, Kernels(SOLUTIONS))
    return "ok"


def calibrate(
    task_id: str, repeats: int, registry: Registry, seed: int = 0, only: list[str] | None = None
) -> list[dict]:
    from assignment.kernels import Kernels
    from assignment.perf.targets import is_model_rule
    from grader.hidden.workloads import workload

    task = registry.task(task_id)
    levels = open_levels(registry)
    if levels.get(task_id) != "open":
        raise SystemExit(f"{task_id} has no OPEN block in solutions/: nothing to calibrate")
    if all(file.endswith(".py") for file in task.files):
        return calibrate_python(task, levels, registry, seed)
    rows = []
    kept = [f for f in fixtures(registry, task_id) if f.file.endswith(".cu")]
    unknown = sorted(set(only or []) - {f.name for f in kept})
    if unknown:
        raise SystemExit(f"no open-level fixture of {task_id} named {', '.join(unknown)} (--list lists them)")
    # The CUDA file the fixtures fill (t6 has a Python file too); its reference body is the noise floor.
    file = kept[0].file if kept else next(f for f in task.files if f.endswith(".cu"))
    if any(f.file != file for f in kept):
        raise SystemExit(f"{task_id}: the fixtures fill more than one CUDA file; calibrate one file's at a time")
    candidates = [("reference (open body)", reference_body(file, task_id, levels), file)]
    candidates += [(f.name, f.body, f.file) for f in kept if not only or f.name in only]
    with tempfile.TemporaryDirectory(prefix="kit-open-") as tmp:
        # The kit's file at the open level (the registry may grade at another): the regions are spliced into it.
        kit = Path(tmp) / "kit"
        kit.mkdir()
        for file in {c[2] for c in candidates}:
            (kit / file).write_text(
                apply_levels((SOLUTIONS / file).read_text(encoding="utf-8"), file, levels), encoding="utf-8"
            )
        folders = []
        for name, body, file in candidates:
            folder = Path(tmp) / name.split()[0]
            folder.mkdir()
            (folder / file).write_text(student_text(file, task_id, body, levels), encoding="utf-8")
            folders.append(folder / file)
        _prebuild(folders, kit)
        for (name, _, _), source in zip(candidates, folders):
            kernels = Kernels(source.parent, kit=kit)
            row = {"task": task_id, "kernel": name, "values": "", "rules": []}
            try:
                row["values"] = _check_values(kernels, task_id)
            except Exception as exc:  # a wrong (or broken) kernel is reported, not timed: the others still are
                row["values"], row["error"] = "FAIL", f"{type(exc).__name__}: {exc}"[:600]
                rows.append(row)
                print(_row_line(row), flush=True)
                continue
            for rule in task.timing:
                if is_model_rule(rule):  # the whole model's step through the student's decoder: the grader's job
                    row.setdefault("not_timed", []).append(rule.name)
                    continue
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


def calibrate_python(task: Task, levels: dict[str, str], registry: Registry, seed: int) -> list[dict]:
    """Run the task's hidden suite on the reference's own open bodies and on each fixture (``KIT_SEED=seed``)."""
    from grader.grade.runner import hidden_suite

    candidates = [("reference (open body)", None)] + [(f.name, f) for f in fixtures(registry, task.id)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kit-open-") as tmp:
        for name, fixture in candidates:
            folder = Path(tmp) / name.split()[0]
            folder.mkdir()
            for file in task.files:
                body = fixture.body if fixture is not None and fixture.file == file else ""
                (folder / file).write_text(student_text(file, task.id, body, levels), encoding="utf-8")
            report = Path(tmp) / f"{folder.name}.json"
            env = {k: v for k, v in os.environ.items() if k not in ("KIT_WORKER_CONFIG", "IMPL", "KIT_SEED")}
            env.update(IMPL=str(folder), KIT_SEED=str(seed))
            command = [sys.executable, "-m", "pytest", *map(str, hidden_suite(task)), "-q", "-p", "no:cacheprovider"]
            command += ["--json-report", f"--json-report-file={report}"]
            start = time.monotonic()
            subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=4 * 3600)
            row = {"task": task.id, "kernel": name, "seed": seed, "suite_s": round(time.monotonic() - start, 1)}
            row["load"] = os.getloadavg()[0]  # the suite's times on a shared machine depend on it
            row.update(_suite_figures(report, task))
            rows.append(row)
            print(_python_row_line(row), flush=True)
    return rows


def _suite_figures(report: Path, task: Task) -> dict:
    """Checks passed, the slowest check, and the structure checks' measurements, from a pytest JSON report."""
    if not report.is_file():
        return {"checks": 0, "passed": 0, "failed": ["the suite wrote no report"]}
    tests = json.loads(report.read_text()).get("tests", [])
    seconds = {
        t["nodeid"]: sum((t.get(p) or {}).get("duration", 0.0) for p in ("setup", "call", "teardown")) for t in tests
    }
    slowest = sorted(seconds, key=seconds.get, reverse=True)[:3]
    return {
        "checks": len(tests),
        "passed": sum(t["outcome"] == "passed" for t in tests),
        "failed": [t["nodeid"].split("::")[-1] for t in tests if t["outcome"] not in ("passed", "skipped")],
        "slowest": {nodeid.split("::")[-1]: round(seconds[nodeid], 2) for nodeid in slowest},
        "deadline_s": task.grading.test_deadline_s,
        "timeout_s": task.grading.timeout_s,
        "measured": {
            t["nodeid"].split("::")[-1]: t["metadata"]["measured"]
            for t in tests
            if "measured" in (t.get("metadata") or {})
        },
    }


def _python_row_line(row: dict) -> str:
    slowest = ", ".join(f"{name} {s:.1f} s" for name, s in row.get("slowest", {}).items())
    line = (
        f"{row['kernel']:<34} checks {row['passed']}/{row['checks']} passed | suite {row['suite_s']:.0f} s (limit "
        f"{row.get('timeout_s', 0):g} s; load average {row['load']:.1f}) | slowest checks (deadline "
        f"{row.get('deadline_s', 0):g} s): {slowest}"
    )
    if row["failed"]:
        line += " | failed: " + ", ".join(row["failed"][:6])
    for check, figures in row.get("measured", {}).items():
        line += f"\n    {check}: " + ", ".join(f"{k} {v}" for k, v in figures.items())
    return line


def _prebuild(sources: list[Path], kit: Path) -> None:
    """Build every candidate's device module at once (nvcc runs one file on one core: the first timed call of
    each then finds its module in the kit's cache, built exactly as ``Kernels`` builds it). A build that fails is
    left for that call to report."""
    from concurrent.futures import ThreadPoolExecutor

    from assignment.cuda import compiler

    arch = compiler.detect_arch()

    def build(source: Path | None) -> None:
        try:
            if source is None:  # the kit's host library
                compiler.build_library((kit / sources[0].name).resolve(), arch, trusted=True, quiet=True)
            else:
                compiler.build_module(source, arch, kit=(kit / source.name).resolve(), source_rules=False, quiet=True)
        except Exception:  # reported, with the student's lines, when the values check builds it again
            pass

    jobs = [None, *sources]
    with ThreadPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        list(pool.map(build, jobs))


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
    for name in row.get("not_timed", []):
        parts.append(f"{name}: not timed here (the model's step needs the student's decoder: grade the fixture)")
    return " | ".join(parts)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the fixtures")
    parser.add_argument("--calibrate", action="store_true", help="time every fixture against the reference (GPU)")
    parser.add_argument("--task", default=None, help="only this task's fixtures")
    parser.add_argument("--repeats", type=int, default=3, help="timing runs per fixture and rule (CUDA tasks)")
    parser.add_argument("--seed", type=int, default=0, help="the hidden suites' seed (Python tasks)")
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NAME",
        help="with --calibrate: the reference and these fixtures only (CUDA tasks)",
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
            for file in registry.task(fixture.task).files:  # the task's other files: the reference's bodies
                if file == fixture.file:
                    body = fixture.body
                else:
                    body = "" if file.endswith(".py") else reference_body(file, fixture.task, levels)
                (folder / file).write_text(student_text(file, fixture.task, body, levels), encoding="utf-8")
                print(f"wrote {folder / file}")
        return 0
    if args.calibrate:
        import torch

        tasks = [args.task] if args.task else sorted({f.task for f in fixtures(registry)})
        kernels = [t for t in tasks if not all(file.endswith(".py") for file in registry.task(t).files)]
        if kernels and not torch.cuda.is_available():
            print(f"error: --calibrate times kernels ({', '.join(kernels)}): it needs a CUDA GPU", file=sys.stderr)
            return 2
        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        if kernels:
            print(f"GPU: {gpu}; values checked, then each timing rule {args.repeats} times")
        if len(kernels) < len(tasks):
            print(
                f"CPU: {_cpu_name()}, {os.cpu_count()} cores; GPU: {gpu or 'none'}; hidden suites with KIT_SEED={args.seed}"
            )
        rows = [row for task_id in tasks for row in calibrate(task_id, args.repeats, registry, args.seed, args.only)]
        if args.json:
            machine = {"gpu": gpu, "cpu": _cpu_name(), "cores": os.cpu_count()}
            args.json.write_text(json.dumps({**machine, "rows": rows}, indent=2) + "\n")
        return 0
    for fixture in fixtures(registry, args.task):
        first = fixture.body.strip().splitlines()[0].strip('/#" ')
        print(f"{fixture.task} {fixture.file} {fixture.name}: {first}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
