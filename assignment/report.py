"""``make report``: REPORT.md and REPORT.html, the write-up a student hands in, made from the student's own runs.

    python -m assignment.report [--task t4 ...] [--refresh] [--out DIR] [--build DIR] [--max-tokens 100]
                                [--quick-scaling] [--verbose]

The report has seed 000's shape: the t4/t5 attention speedups at batch 4 x length 128 and batch 64 x length
4096, t6's time to first token (TTFT) and time between tokens (TBT) against the naive path, the text t7's
sampling loop generates from the registry's ``report_prompt``, where the student stands on the timing rubric,
the bench tables, the plots, the profiler's counters (when ``ncu`` is on PATH) and the feedback answers. A
header names the GPU, the implementation, the date and every part that was skipped, and why.

Each measurement is a step run as its own process with a time limit (``make bench``'s module, the scaling
sweep, the profiler, ``make generate``), so a crash, an illegal address or a hang in the student's code costs
that step only. A step's output goes to ``<build>/logs/<step>.log``; a failed step's last lines go into the
report, which is written anyway. A step's result is kept in ``<build>/cache/<step>.json`` under a key: the
SHA-256 of the student files it runs, every file of the kit (``assignment/``), the GPU and its command line.
A rerun with nothing changed reuses it (``--refresh`` runs everything again), so the report can be put
together a task at a time: ``--task t4`` runs t4's steps, and the other tasks' sections come from the cache
when it is still valid. Failed steps are never cached.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from assignment.atomic import write_atomic
from assignment.impl import REPO_ROOT, ImplError, student_dir
from assignment.perf.cases import TASKS as BENCH_TASKS
from assignment.registry import Registry, Task, load_registry
from assignment.todos import todo_counts

ASSIGNMENT_DIR = Path(__file__).resolve().parent
MD_TEMPLATE = ASSIGNMENT_DIR / "report.md.j2"
HTML_TEMPLATE = ASSIGNMENT_DIR / "report.html.j2"
DEFAULT_BUILD = REPO_ROOT / "build" / "report"
CACHE_VERSION = 1

# Time limits per step, in seconds. On an H100 the solutions take under a minute for a kernel task's bench, a few
# minutes for t6's (its model table times four paths of a 1B model at two prompts, then a context sweep) and for
# a full scaling sweep (five candidates at 16 points); the limits leave room for a slower GPU and for a correct
# but slow student kernel, while a hang still ends.
BENCH_TIMEOUT_S = 600.0
T6_BENCH_TIMEOUT_S = 900.0
SCALING_TIMEOUT_S = 900.0
PROFILE_TIMEOUT_S = 300.0
GENERATE_TIMEOUT_S = 300.0
TIMEOUT_RC = 124  # what a runner returns for a step it stopped at its time limit (as timeout(1) does)
NO_GPU = "no CUDA GPU (torch.cuda.is_available() is False; run make report on a GPU node)"
GPU_PROBE = "import json; from assignment.perf.timing import gpu_info; print(json.dumps(gpu_info()))"
GPU_PROBE_TIMEOUT_S = 120.0

SCALING_TASKS = ("t4", "t5")
PROFILE_TASKS = ("t4",)
GENERATE_TASK = "t7"
# A task's steps need these tasks' regions too: a causal launch builds t4's and t5's (Kernels.flash_attention).
REQUIRES = {"t5": ("t4",)}
# Student code a step runs besides its task's: t4/t5's tables time the naive CUDA composition (t3's GEMM, t2's
# softmax, t3's GEMM) beside the kernel; t6's model prefills through t4/t5's kernel.
ALSO_RUNS = {("bench", "t4"): ("t2", "t3"), ("scaling", "t4"): ("t2", "t3"), ("bench", "t5"): ("t2", "t3"),
             ("scaling", "t5"): ("t2", "t3"), ("bench", "t6"): ("t4", "t5")}
# Seed 000's shapes (B, H, L, d): rows of assignment.perf.cases.ATTENTION_SHAPES.
SEED000_SHAPES = ((4, 1, 128, 64), (64, 1, 4096, 64))
T6_PROMPTS = (128, 1024)  # model_bench.FULL.prompts
T6_PATHS = ("naive", "student", "reference", "transformers")
TAIL_LINES = 30
DEFAULT_PROMPT = "The history of"
PLOT_CAPTIONS = {"_time.png": "time against sequence length", "_tflops.png": "TFLOP/s against sequence length",
                 "_speedup.png": "your speedup over each baseline against sequence length",
                 "_roofline.png": "roofline: arithmetic intensity against TFLOP/s",
                 "t6_model_tbt.png": "time between tokens against context, every path",
                 "t6_model_roofline.png": "decode step against the memory roofline"}

# runner(argv, timeout_s=..., env=..., cwd=...) -> (returncode, stdout, stderr); TIMEOUT_RC when stopped at the limit
Runner = Callable[..., tuple[int, str, str]]


# --------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Step:
    name: str                  # bench_t4, scaling_t4, profile_t4, generate_t7
    task: str
    kind: str                  # bench, scaling, profile, generate
    argv: tuple[str, ...]
    out_dir: Path | None       # where the step writes its files (emptied before it runs)
    timeout_s: float
    inputs: tuple[str, ...]    # the tasks whose student files it runs
    gpu: bool = True


@dataclass
class StepResult:
    step: str
    task: str
    kind: str
    status: str                # ok, failed, timeout, skipped
    command: str = ""
    reason: str | None = None  # why it was skipped, or how it failed
    cached: bool = False
    seconds: float | None = None
    finished: str | None = None
    returncode: int | None = None
    tail: str = ""
    log: str | None = None
    data: Any = None
    files: list[str] = field(default_factory=list)


@dataclass
class Settings:
    impl: Path
    out: Path = REPO_ROOT
    build: Path = DEFAULT_BUILD
    feedback: Path = REPO_ROOT / "feedback.json"
    tasks: tuple[str, ...] = ()      # the tasks whose steps may run; () is every task
    refresh: bool = False
    max_tokens: int = 100
    quick_scaling: bool = False


def plan_steps(registry: Registry, settings: Settings, have_gpu: bool) -> list[Step]:
    """Every step of every available task, in the order they run (the model and text last)."""
    python, runs = sys.executable, settings.build / "runs"
    steps: list[Step] = []
    for task in registry.available:
        t = task.id
        if t in BENCH_TASKS:
            out = runs / f"bench_{t}"
            steps.append(Step(f"bench_{t}", t, "bench",
                              (python, "-m", "assignment.perf.bench", "--task", t, "--out", str(out)), out,
                              T6_BENCH_TIMEOUT_S if t == "t6" else BENCH_TIMEOUT_S, _inputs("bench", t)))
        if t in SCALING_TASKS:
            out = runs / f"scaling_{t}"
            argv = (python, "-m", "assignment.perf.scaling", "--task", t, "--out", str(out))
            steps.append(Step(f"scaling_{t}", t, "scaling", argv + (("--quick",) if settings.quick_scaling else ()),
                              out, SCALING_TIMEOUT_S, _inputs("scaling", t)))
        if t in PROFILE_TASKS:
            steps.append(Step(f"profile_{t}", t, "profile", (python, "-m", "assignment.perf.profile", "--task", t),
                              None, PROFILE_TIMEOUT_S, _inputs("profile", t)))
        if t == GENERATE_TASK:
            argv = (python, "-m", "assignment.model.generate", "--prompt", registry.report_prompt or DEFAULT_PROMPT,
                    "--temperature", "0", "--max-tokens", str(settings.max_tokens),
                    "--device", "cuda" if have_gpu else "cpu")
            steps.append(Step(f"generate_{t}", t, "generate", argv, None, GENERATE_TIMEOUT_S, _inputs("generate", t),
                              gpu=False))
    return steps


def _inputs(kind: str, task: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*ALSO_RUNS.get((kind, task), ()), *REQUIRES.get(task, ()), task)))


# --------------------------------------------------------------------------- is a task written yet?


def todo_left(task_id: str, registry: Registry, impl: Path) -> str | None:
    """Why ``task_id`` cannot run yet (its own TODO regions, a task it needs, a missing file), or None."""
    for needed in (task_id, *REQUIRES.get(task_id, ())):
        for name in registry.task(needed).files:
            path = impl / name
            if not path.is_file():
                return f"{task_id} not implemented ({name} is missing from {impl})"
            if needed in todo_counts(path.read_text(encoding="utf-8", errors="replace"), name):
                if needed == task_id:
                    return f"{task_id} not implemented (TODO regions left)"
                return f"{task_id} needs {needed}, and {needed} not implemented (TODO regions left)"
    return None


# --------------------------------------------------------------------------- running a step


def command_runner(echo: bool = False) -> Runner:
    """The real runner: the command in its own process group, output captured (and echoed with ``echo``), the
    whole group killed at the time limit or when the report itself is interrupted."""

    def run(argv: Sequence[str], *, timeout_s: float, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
        try:
            proc = subprocess.Popen(list(argv), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1,
                                    start_new_session=True)
        except OSError as exc:
            return 127, "", f"cannot start {argv[0]}: {exc}\n"
        captured: dict[str, list[str]] = {"out": [], "err": []}

        def pump(stream, key: str) -> None:
            for line in stream:
                captured[key].append(line)
                if echo:
                    print(f"    | {line}", end="" if line.endswith("\n") else "\n", flush=True)

        readers = [threading.Thread(target=pump, args=(proc.stdout, "out"), daemon=True),
                   threading.Thread(target=pump, args=(proc.stderr, "err"), daemon=True)]
        for reader in readers:
            reader.start()
        returncode: int | None
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            returncode = None
        except BaseException:
            _kill_group(proc)
            raise
        for reader in readers:
            reader.join(timeout=10)
        out, err = "".join(captured["out"]), "".join(captured["err"])
        if returncode is None:
            return TIMEOUT_RC, out, err + f"\n[report] stopped after {timeout_s:g} s: the step's time limit\n"
        return returncode, out, err

    return run


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the process group the step was started in (its id is the step's pid), then reap the step."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def step_env(impl: Path | None) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
    return env if impl is None else env | {"IMPL": str(impl)}


def shown_command(argv: Sequence[str]) -> str:
    """The command as a person would type it: ``python`` for the interpreter, paths relative to the repository."""
    def shown(arg: str) -> str:
        if arg == sys.executable:
            return "python"
        try:
            return str(Path(arg).relative_to(REPO_ROOT)) if os.path.isabs(arg) else arg
        except ValueError:
            return arg
    return shlex.join(shown(a) for a in argv)


def tail_of(stdout: str, stderr: str, lines: int = TAIL_LINES) -> str:
    """The last lines a failure left: mostly stderr (tracebacks, CUDA errors), a few of stdout before them."""
    out, err = stdout.strip("\n").splitlines(), stderr.strip("\n").splitlines()
    out_kept = min(len(out), max(lines // 3, lines - len(err)))
    err_kept = min(len(err), lines - out_kept)
    return "\n".join(out[len(out) - out_kept:] + err[len(err) - err_kept:])


def collect(step: Step, stdout: str, stderr: str) -> tuple[Any, list[str], str | None]:
    """(data, files, problem) from a step that ran: its JSON, its plots, or its parsed output."""
    files = sorted(str(p) for p in step.out_dir.glob("*.png")) if step.out_dir and step.out_dir.is_dir() else []
    if step.kind == "bench":
        path = step.out_dir / f"{step.task}.json"
        if not path.is_file():
            return None, files, f"wrote no {path.name}"
        try:
            return json.loads(path.read_text(encoding="utf-8")), files, None
        except (OSError, ValueError) as exc:
            return None, files, f"{path.name} is not readable JSON: {exc}"
    if step.kind == "scaling":
        return None, files, None if files else "wrote no plots"
    if step.kind == "profile":
        return {"text": stdout.strip("\n")}, files, None if stdout.strip() else "printed no table"
    prompt = step.argv[step.argv.index("--prompt") + 1]
    text = stdout.removeprefix(prompt).removesuffix("\n")  # generate prints the prompt, the pieces, a newline
    timing = [line[3:] for line in stderr.splitlines() if line.startswith("-- ")]
    return {"prompt": prompt, "text": text, "timing": timing}, files, None


def kit_digest(root: Path = ASSIGNMENT_DIR) -> str:
    """SHA-256 of every file of the kit (names and contents), compiled Python left out."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root)
        if "__pycache__" in rel.parts or path.suffix == ".pyc":
            continue
        digest.update(rel.as_posix().encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def step_key(step: Step, registry: Registry, impl: Path, kit: str, gpu_name: str | None) -> str:
    files = {}
    for task_id in step.inputs:
        for name in registry.task(task_id).files:
            path = impl / name
            files[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    payload = {"version": CACHE_VERSION, "step": step.name, "argv": list(step.argv), "gpu": gpu_name or "no GPU",
               "kit": kit, "student_files": files}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def load_cached(path: Path, key: str) -> StepResult | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("version") != CACHE_VERSION or record.get("key") != key:
        return None
    result = StepResult(**{f.name: record[f.name] for f in fields(StepResult) if f.name in record})
    if any(not Path(p).is_file() for p in result.files):  # its plots were deleted: run it again
        return None
    result.cached = True
    return result


def run_step(step: Step, runner: Runner, settings: Settings, key: str, say: Callable[[str], None]) -> StepResult:
    """Run one step (its out dir emptied first), log its output, collect its results, cache them when it passed."""
    command = shown_command(step.argv)
    if step.out_dir is not None:
        shutil.rmtree(step.out_dir, ignore_errors=True)
        step.out_dir.mkdir(parents=True, exist_ok=True)
    say(f"{step.name}: running {command} (limit {step.timeout_s:g} s)")
    start = time.monotonic()
    returncode, stdout, stderr = runner(list(step.argv), timeout_s=step.timeout_s, env=step_env(settings.impl),
                                        cwd=REPO_ROOT)
    seconds = time.monotonic() - start
    log = settings.build / "logs" / f"{step.name}.log"
    write_atomic(log, f"$ {command}\n# exit status {returncode} after {seconds:.1f} s\n\n== stdout ==\n{stdout}\n"
                      f"== stderr ==\n{stderr}")
    data, files, problem = collect(step, stdout, stderr)
    result = StepResult(step.name, step.task, step.kind, "ok", command, seconds=round(seconds, 1),
                        finished=datetime.now().astimezone().isoformat(timespec="seconds"), returncode=returncode,
                        log=str(log), data=data, files=files)
    if returncode == TIMEOUT_RC:
        result.status, result.reason = "timeout", f"timed out after {step.timeout_s:g} s"
    elif returncode != 0:
        result.status, result.reason = "failed", f"failed: {exit_description(returncode)} after {seconds:.0f} s"
    elif problem:
        result.status, result.reason = "failed", f"failed: it {problem}"
    if result.status != "ok":
        result.tail = tail_of(stdout, stderr)
        if step.kind != "bench":  # a failed bench's JSON still holds the rows it timed; other steps' output does not
            result.data = None
        say(f"{step.name}: {result.reason} (log: {_shown_path(log)})")
        return result
    record = {"version": CACHE_VERSION, "key": key} | {f.name: getattr(result, f.name) for f in fields(StepResult)
                                                       if f.name != "cached"}
    write_atomic(settings.build / "cache" / f"{step.name}.json", json.dumps(record, indent=1, default=str))
    say(f"{step.name}: done in {seconds:.1f} s")
    return result


def exit_description(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _shown_path(path: Path | str) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- the whole run


def detect_gpu(runner: Runner | None = None) -> dict[str, Any]:
    """``assignment.perf.timing.gpu_info()``, asked in a process of its own: the report's own process never holds
    a CUDA context (a GPU in exclusive-process mode would refuse the steps one), and a broken driver that hangs
    costs the probe's time limit, not the report."""
    code, out, err = (runner or command_runner())([sys.executable, "-c", GPU_PROBE], timeout_s=GPU_PROBE_TIMEOUT_S,
                                                  env=step_env(None), cwd=REPO_ROOT)
    try:
        info = json.loads(out.strip().splitlines()[-1])
        if code == 0 and isinstance(info, dict):
            return info
    except (ValueError, IndexError):
        pass
    last = (err.strip().splitlines() or [f"exit status {code}"])[-1]
    return {"name": None, "torch": None, "error": f"the GPU probe failed ({exit_description(code)}): {last}"}


def run_steps(registry: Registry, settings: Settings, runner: Runner, gpu: dict[str, Any], have_ncu: bool,
              say: Callable[[str], None]) -> tuple[list[StepResult], dict[str, str | None]]:
    """Every step's result (run, cached or skipped with the reason), and each available task's TODO state."""
    gpu_name = gpu.get("name")
    todo = {task.id: todo_left(task.id, registry, settings.impl) for task in registry.available}
    steps = plan_steps(registry, settings, gpu_name is not None)
    kit = kit_digest()
    results = []
    for number, step in enumerate(steps, start=1):
        def note(line: str, number=number) -> None:
            say(f"[{number}/{len(steps)}] {line}")

        result = StepResult(step.name, step.task, step.kind, "skipped", shown_command(step.argv))
        selected = not settings.tasks or step.task in settings.tasks
        if todo[step.task]:
            result.reason = todo[step.task]
        elif step.gpu and gpu_name is None:
            result.reason = no_gpu_reason(gpu)
        elif step.kind == "profile" and not have_ncu:
            result.reason = ("ncu (Nsight Compute) is not on PATH: the profiler table needs it "
                             "(it ships with the CUDA toolkit)")
        else:
            key = step_key(step, registry, settings.impl, kit, gpu_name)
            cached = None if settings.refresh else load_cached(settings.build / "cache" / f"{step.name}.json", key)
            if cached is not None:
                result = cached
                note(f"{step.name}: cached (ran {cached.finished}, {cached.seconds:g} s; unchanged since)")
            elif selected:
                result = run_step(step, runner, settings, key, note)
            else:
                tasks = " ".join(f"--task {t}" for t in settings.tasks)
                result.reason = (f"not run: this report was limited to {tasks}, and no cached result matches "
                                 f"(make report T={step.task} runs it)")
        if result.status == "skipped":
            note(f"{step.name}: skipped: {result.reason}")
        results.append(result)
    return results, todo


def no_gpu_reason(gpu: dict[str, Any]) -> str:
    return f"no usable CUDA GPU: {gpu['error']}" if gpu.get("error") else NO_GPU


def make_report(settings: Settings, runner: Runner | None = None, gpu: dict[str, Any] | None = None,
                have_ncu: bool | None = None, say: Callable[[str], None] | None = None) -> tuple[Path, Path]:
    """Run (or reuse) every step and write REPORT.md and REPORT.html into ``settings.out``."""
    say = say or (lambda line: print(f"[report] {line}", flush=True))
    registry = load_registry()
    unknown = [t for t in settings.tasks if t not in registry.ids]
    if unknown:
        raise ValueError(f"unknown task {unknown[0]!r} (the registry has {', '.join(registry.ids)})")
    gpu = detect_gpu() if gpu is None else gpu
    have_ncu = shutil.which("ncu") is not None if have_ncu is None else have_ncu
    say(f"implementation: {settings.impl}; GPU: {gpu.get('name') or 'none'}; cache: {_shown_path(settings.build)}")
    results, todo = run_steps(registry, settings, runner or command_runner(), gpu, have_ncu, say)
    context = build_context(registry, settings, gpu, results, todo)
    markdown_text = render_markdown(context, html_mode=False)
    html_text = render_html(context)
    md_path, html_path = settings.out / "REPORT.md", settings.out / "REPORT.html"
    write_atomic(md_path, markdown_text)
    write_atomic(html_path, html_text)
    say(f"wrote {_shown_path(md_path)} and {_shown_path(html_path)} ({context['counts']})")
    return md_path, html_path


# --------------------------------------------------------------------------- what the report shows


def _num(value: float | None, spec: str, suffix: str = "") -> str:
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    return format(value, spec) + suffix


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return _num(value, ".1f" if value >= 100 else ".3f" if value >= 1 else ".4f")


def _x(value: float | None) -> str:
    return _num(value, ".2f", "×")


def _why_missing(result: StepResult | None) -> str:
    if result is None:
        return "not run"
    if result.status == "skipped":
        return result.reason or "skipped"
    return f"{result.step} {result.reason}" if result.data is None else ""


def attention_label(B: int, H: int, L: int, d: int, causal: bool) -> str:
    """The bench's label of a row of assignment.perf.cases.cases_attention."""
    return f"{'causal ' if causal else ''}attention B{B} H{H} L{L} d{d}"


def _student_note(case: dict) -> str:
    note = next((n for n in case.get("notes", []) if n.startswith("student")), None)
    return note or case.get("error") or "your kernel has no result"


def attention_view(task: Task, result: StepResult | None, causal: bool) -> dict:
    view = {"id": task.id, "title": task.title, "causal": causal, "rows": [], "reason": _why_missing(result)}
    if view["reason"]:
        return view
    cases = {case.get("label"): case for case in result.data.get("cases", [])}
    for B, H, L, d in SEED000_SHAPES:
        row = {"shape": f"batch {B} × length {L}", "batch": B, "length": L, "missing": None, "error": None}
        case = cases.get(attention_label(B, H, L, d, causal))
        students = (case or {}).get("results", {}).get("student")
        if case is None:
            row["missing"] = f"no {attention_label(B, H, L, d, causal)} row in the bench results"
        elif students is None:
            row["missing"] = _student_note(case)
        else:
            mine, results = students["median_ms"], case["results"]
            over = {name: results[name]["median_ms"] / mine if name in results and mine else None
                    for name in ("naive pytorch", "SDPA", "naive cuda")}
            row |= {"ms": _ms(mine), "tflops": _num(students.get("tflops"), ".2f"), "naive": _x(over["naive pytorch"]),
                    "sdpa": _x(over["SDPA"]), "naive_cuda": _x(over["naive cuda"]),
                    "error": case.get("error")}
        view["rows"].append(row)
    return view


def t6_view(task: Task, result: StepResult | None) -> dict:
    view = {"id": task.id, "title": task.title, "reason": _why_missing(result), "model_reason": None, "headline": [],
            "prompts": [], "decode": [], "notes": []}
    if view["reason"]:
        return view
    data = result.data
    model = data.get("model") or {}
    if not model or model.get("error"):
        view["model_reason"] = model.get("error") or "the bench ran without the model table"
    labels = {name: info.get("label", name) for name, info in (model.get("paths") or {}).items()}
    entries = {entry.get("prompt"): entry for entry in model.get("prompts", [])}
    for prompt in T6_PROMPTS:
        entry = entries.get(prompt)
        mine = (entry or {}).get("rows", {}).get("student")
        line = {"prompt": prompt, "missing": None}
        if entry is None:
            line["missing"] = view["model_reason"] or f"no prompt of {prompt} tokens in the model table"
        elif mine is None or "skipped" in mine:
            line["missing"] = f"your path did not run: {(mine or {}).get('skipped', 'no result')}"
        else:
            line |= {"ttft": _ms(mine.get("ttft_ms")), "tbt": _ms(mine.get("tbt_ms")),
                     "ttft_x": _x(mine.get("ttft_speedup_naive")), "tbt_x": _x(mine.get("tbt_speedup_naive"))}
        view["headline"].append(line)
    for prompt, entry in sorted(entries.items(), key=lambda item: item[0] or 0):
        rows = []
        for name in T6_PATHS:
            row = entry.get("rows", {}).get(name)
            if row is None:
                continue
            shown = {"path": labels.get(name, name), "skipped": row.get("skipped")}
            if not row.get("skipped"):
                agrees = row.get("agrees")
                shown |= {"ttft": _ms(row.get("ttft_ms")), "ttft_x": _x(row.get("ttft_speedup_naive")),
                          "tbt": _ms(row.get("tbt_ms")), "tbt_x": _x(row.get("tbt_speedup_naive")),
                          "roofline": _num(row.get("percent_roofline"), ".0f", "%"),
                          "agrees": "baseline" if name == "naive" else "–" if agrees is None
                          else "yes" if agrees else "DIFFERS"}
            rows.append(shown)
        view["prompts"].append({"prompt": prompt, "context": entry.get("context"),
                                "roofline": _ms(entry.get("roofline_tbt_ms")), "rows": rows})
    view["notes"] = list(model.get("notes", []))
    copy = data.get("copy_gbps")
    view["copy_gbps"] = _num(copy, ".0f")
    for case in data.get("cases", []):
        if not str(case.get("label", "")).startswith("decode"):
            continue
        results = case.get("results", {})
        mine = results.get("student")
        row = {"label": case["label"].replace(" (KV bytes/s)", ""), "missing": None}
        if mine is None:
            row["missing"] = _student_note(case)
        else:
            gbps = mine.get("gbps")
            naive = results.get("naive pytorch", {}).get("median_ms")
            row |= {"ms": _ms(mine["median_ms"]), "gbps": _num(gbps, ".0f"),
                    "copy_percent": _num(100 * gbps / copy if gbps and copy else None, ".0f", "%"),
                    "naive_x": _x(naive / mine["median_ms"] if naive else None)}
        view["decode"].append(row)
    return view


def t7_view(task: Task, result: StepResult | None, prompt: str) -> dict:
    view = {"id": task.id, "title": task.title, "prompt": prompt, "reason": _why_missing(result), "text": "",
            "timing": [], "stopped_at_once": False}
    if not view["reason"]:
        view |= {"prompt": result.data["prompt"], "text": result.data["text"], "timing": result.data["timing"]}
        view["stopped_at_once"] = not result.data["text"].strip()
    return view


def standings_view(registry: Registry, by_step: dict[str, StepResult]) -> list[dict]:
    """Each GPU task's timing rules against the student targets (the bench JSON's "targets")."""
    from assignment.perf.targets import Standing, describe

    names = {f.name for f in fields(Standing)}
    tasks = []
    for task in registry.available:
        if not task.needs_gpu or not task.timing:
            continue
        result = by_step.get(f"bench_{task.id}")
        entry = {"id": task.id, "title": task.title, "reason": _why_missing(result), "rows": [], "points": None,
                 "max_points": f"{sum(rule.max_points for rule in task.timing):g}"}
        if not entry["reason"]:
            raw = result.data.get("targets")
            if raw is None:
                entry["reason"] = "the bench wrote no targets"
            earned = 0.0
            for item in raw or []:
                s = Standing(**{k: v for k, v in item.items() if k in names})
                full_points, full_speed = s.needed[-1]
                speed = describe(s.baseline, s.speed) if s.speed is not None else f"not measured ({s.reason})"
                times = []
                if s.student_ms is not None:
                    times.append(f"yours {s.student_ms:.3f} ms")
                if s.baseline_ms is not None:
                    times.append(f"{s.baseline} {s.baseline_ms:.3f} ms")
                earned += s.points or 0.0
                entry["rows"].append({"rule": s.rule, "speed": speed, "times": "; ".join(times),
                                      "full": f"{describe(s.baseline, full_speed)} ({full_points:g} points)",
                                      "points": f"{s.points:g} of {s.max_points:g}" if s.points is not None
                                      else f"– of {s.max_points:g}", "notes": list(s.notes),
                                      "course_gpu": s.course_gpu})
            entry["points"] = f"{earned:g}" if raw else None
        tasks.append(entry)
    return tasks


def bench_tables_view(registry: Registry, by_step: dict[str, StepResult]) -> list[dict]:
    tables = []
    for task in registry.available:
        result = by_step.get(f"bench_{task.id}")
        if result is None:
            continue
        entry = {"id": task.id, "title": task.title, "reason": _why_missing(result), "cases": []}
        if entry["reason"]:
            tables.append(entry)
            continue
        data = result.data
        metric = "GB/s" if task.id in ("t2", "t6") else "TFLOP/s"  # as assignment.perf.cases prints them
        entry |= {"copy_gbps": _num(data.get("copy_gbps"), ".0f"), "metric": metric}
        for case in data.get("cases", []):
            results = case.get("results", {})
            mine = results.get("student", {}).get("median_ms")
            rows = [{"name": name, "ms": _ms(r.get("median_ms")),
                     "value": _num(r.get("gbps") if metric == "GB/s" else r.get("tflops"), ".1f" if metric == "GB/s"
                                   else ".2f"),
                     "yours": _x(r["median_ms"] / mine if mine and r.get("median_ms") else None)}
                    for name, r in results.items()]
            entry["cases"].append({"label": case.get("label", "?"), "rows": rows, "notes": case.get("notes", []),
                                   "error": case.get("error")})
        tables.append(entry)
    return tables


def plots_view(results: list[StepResult], html_mode: bool) -> list[dict]:
    def kind(path: Path) -> int:  # PLOT_CAPTIONS's order: time, TFLOP/s, roofline; t6's two
        names = list(PLOT_CAPTIONS)
        if path.name in PLOT_CAPTIONS:
            return names.index(path.name)
        return next((i for i, suffix in enumerate(names) if path.name.endswith(suffix)), len(names))

    plots = []
    for result in results:
        for path in sorted(map(Path, result.files), key=lambda p: (kind(p), p.name)):
            known = kind(path) < len(PLOT_CAPTIONS)
            caption = list(PLOT_CAPTIONS.values())[kind(path)] if known else path.stem
            plot = {"name": path.name, "step": result.step, "task": result.task, "caption": f"{result.task}: {caption}"}
            if html_mode and path.is_file():
                plot["uri"] = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
            plots.append(plot)
    return plots


def feedback_view(path: Path) -> dict:
    from assignment.feedback import FeedbackError, load_answers, load_form

    view = {"path": _shown_path(path), "present": path.is_file(), "error": None, "answers": [], "problems": []}
    if not view["present"]:
        return view
    try:
        form = load_form()
        answers = load_answers(path, form)
    except FeedbackError as exc:
        view["error"] = str(exc)
        return view
    for q in form.questions:
        if q.id not in answers:
            shown = "(not answered)"
        elif answers[q.id] is None:
            shown = "(skipped)"
        elif isinstance(answers[q.id], list):
            shown = ", ".join(map(str, answers[q.id]))
        elif q.type == "scale" and isinstance(answers[q.id], int):
            shown = f"{answers[q.id]}/5 (1: {q.low}, 5: {q.high})"
        else:
            shown = str(answers[q.id])
        view["answers"].append({"question": q.text, "answer": shown})
    view["problems"] = form.problems(answers)
    return view


def skipped_view(registry: Registry, results: list[StepResult], todo: dict[str, str | None]) -> list[dict]:
    """What is missing from the report and why: tasks not written, steps skipped (grouped), steps that failed."""
    titles = {t.id: t.title for t in registry.tasks}
    items = [{"what": f"{t} {titles[t]}", "command": "", "why": why, "tail": ""} for t, why in todo.items() if why]
    grouped: dict[tuple[str, str], list[str]] = {}
    for r in results:
        if r.status == "skipped" and not todo.get(r.task):
            grouped.setdefault((r.task, r.reason or "skipped"), []).append(r.kind)
    for (task, why), kinds in grouped.items():
        items.append({"what": f"{task} {titles[task]} ({', '.join(kinds)})", "command": "", "why": why, "tail": ""})
    for r in results:
        if r.status in ("failed", "timeout"):
            items.append({"what": f"{r.task} {titles[r.task]}: {r.step}", "command": r.command,
                          "why": f"{r.reason}; {'the rows it timed are shown' if r.data else 'no results from it'}"
                                 f"; log: {_shown_path(r.log) if r.log else '-'}",
                          "tail": r.tail})
    return items


def build_context(registry: Registry, settings: Settings, gpu: dict[str, Any], results: list[StepResult],
                  todo: dict[str, str | None]) -> dict[str, Any]:
    from assignment.perf.timing import format_gpu_info

    by_step = {r.step: r for r in results}
    task_status = []
    for task in registry.available:
        mine = [r for r in results if r.task == task.id]
        if todo.get(task.id):
            status = todo[task.id]
        elif not mine:
            status = f"written (no report step: make test T={task.id} checks it)"
        elif any(r.status in ("failed", "timeout") for r in mine):
            status = "written; a step failed (see Skipped)"
        elif all(r.status == "skipped" for r in mine):
            status = f"written; not measured ({mine[0].reason})"
        else:
            status = "written; measured"
        task_status.append({"id": task.id, "title": task.title, "status": status})
    counts = {status: sum(r.status == status and not r.cached for r in results)
              for status in ("ok", "failed", "timeout", "skipped")}
    cached = sum(r.cached for r in results)
    counts_text = (f"{_plural(counts['ok'], 'step')} run, {cached} reused from the cache, {counts['skipped']} "
                   f"skipped, {counts['failed'] + counts['timeout']} failed")
    tasks = {t.id: t for t in registry.tasks}
    return {
        "title": f"{registry.title}: report",
        "gpu": format_gpu_info(gpu) if gpu.get("name") else no_gpu_reason(gpu),
        "impl": str(settings.impl), "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "torch": gpu.get("torch") or "unknown", "python": platform.python_version(), "counts": counts_text,
        "tasks": task_status, "skipped": skipped_view(registry, results, todo),
        "attention": [attention_view(tasks[t], by_step.get(f"bench_{t}"), causal) for t, causal
                      in (("t4", False), ("t5", True)) if t in tasks and tasks[t].available],
        "t6": t6_view(tasks["t6"], by_step.get("bench_t6")) if "t6" in tasks and tasks["t6"].available else None,
        "t7": t7_view(tasks[GENERATE_TASK], by_step.get(f"generate_{GENERATE_TASK}"),
                      registry.report_prompt or DEFAULT_PROMPT) if tasks.get(GENERATE_TASK) else None,
        "max_tokens": settings.max_tokens,
        "standings": standings_view(registry, by_step), "bench_tables": bench_tables_view(registry, by_step),
        "results": results, "profile": [r for r in results if r.kind == "profile"],
        "feedback": feedback_view(settings.feedback),
        "steps": [{"name": r.step, "command": r.command, "status": _step_status(r),
                   "log": _shown_path(r.log) if r.log else ""} for r in results],
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _step_status(r: StepResult) -> str:
    if r.status == "skipped":
        return "skipped"
    if r.cached:
        return f"cached (ran {r.finished}, {r.seconds:g} s)"
    if r.status == "ok":
        return f"ran in {r.seconds:g} s"
    return r.reason or r.status


# --------------------------------------------------------------------------- rendering


def _fence(text: str) -> str:
    """A fenced code block whose fence is longer than any run of backticks inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def _environment(html_mode: bool):
    import jinja2

    def pre(text: str) -> str:
        if html_mode:  # raw HTML: markdown leaves it alone, so nothing in a log can turn into markup
            return f"<pre>{html.escape(text.rstrip())}</pre>"
        return _fence(text)

    def quote(text: str) -> str:
        if html_mode:
            body = "<br>\n".join(html.escape(line) for line in text.rstrip().splitlines())
            return f'<blockquote class="text">{body or "&nbsp;"}</blockquote>'
        return "\n".join(f"> {line}".rstrip() for line in (text.rstrip().splitlines() or [""]))

    def inline(text: Any) -> str:
        """Plain text inside a line or a table cell: HTML escaped for the page, pipes escaped for the tables."""
        text = str(text).replace("\n", " ")
        return (html.escape(text, quote=False) if html_mode else text).replace("|", "\\|")

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ASSIGNMENT_DIR), undefined=jinja2.StrictUndefined,
                             autoescape=False, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    def code(text: Any) -> str:
        """Inline code (a command, a path): a code span in the text, <code> on the page."""
        text = str(text).replace("\n", " ")
        if html_mode:
            return f"<code>{html.escape(text, quote=False)}</code>".replace("|", "&#124;")
        ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
        return f"{ticks}{text}{ticks}".replace("|", "\\|")

    env.filters |= {"pre": pre, "quote": quote, "t": inline, "c": code}
    return env


def render_markdown(context: dict[str, Any], html_mode: bool) -> str:
    """REPORT.md; with ``html_mode`` the same text made for the page (escaped, images inline)."""
    plots = plots_view(context["results"], html_mode)
    text = _environment(html_mode).get_template(MD_TEMPLATE.name).render(**context, plots=plots, html_mode=html_mode)
    return re.sub(r"\n{3,}", "\n\n", text)


def render_html(context: dict[str, Any]) -> str:
    import markdown

    body = markdown.markdown(render_markdown(context, html_mode=True),
                             extensions=["tables", "fenced_code", "sane_lists"], output_format="html")
    return _environment(True).get_template(HTML_TEMPLATE.name).render(title=html.escape(context["title"]),
                                                                      body=body)


# --------------------------------------------------------------------------- command line


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None, runner: Runner | None = None, gpu: dict[str, Any] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", action="append", default=[], metavar="tN",
                        help="run only this task's steps (repeatable); other tasks come from the cache when valid")
    parser.add_argument("--refresh", action="store_true", help="ignore the cache: run every step again")
    parser.add_argument("--out", type=Path, default=REPO_ROOT, help="where REPORT.md and REPORT.html go")
    parser.add_argument("--build", type=Path, default=DEFAULT_BUILD, help="the steps' outputs, logs and cache")
    parser.add_argument("--impl", help="the implementation (default: IMPL, else the kit's default)")
    parser.add_argument("--feedback", type=Path, default=REPO_ROOT / "feedback.json", help="the feedback answers")
    parser.add_argument("--max-tokens", type=int, default=100, help="tokens t7 generates for the report")
    parser.add_argument("--quick-scaling", action="store_true", help="the shorter scaling sweep (4 lengths)")
    parser.add_argument("--verbose", action="store_true", help="echo every step's output as it runs")
    args = parser.parse_args(argv)
    main_thread = threading.current_thread() is threading.main_thread()
    # A step runs in a session of its own: on SIGTERM (a batch system's time limit) take it down with us.
    previous = signal.signal(signal.SIGTERM, _interrupted) if main_thread else None
    try:
        settings = Settings(impl=student_dir(args.impl), out=args.out.resolve(), build=args.build.resolve(),
                            feedback=args.feedback.resolve(), tasks=tuple(dict.fromkeys(args.task)),
                            refresh=args.refresh, max_tokens=args.max_tokens, quick_scaling=args.quick_scaling)
        make_report(settings, runner or command_runner(echo=args.verbose), gpu)
    except KeyboardInterrupt:
        print("\nreport: interrupted; the report was not written (finished steps are cached)", file=sys.stderr)
        return 1
    except (ValueError, ImplError) as exc:  # an unknown task, no implementation directory: no traceback
        print(f"report: the report could not be written: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 -- whatever stops the write-up: say what, exit 1
        traceback.print_exc()
        print(f"report: the report could not be written: {exc}", file=sys.stderr)
        return 1
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
