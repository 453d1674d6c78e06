"""The report's steps: what runs (``plan_steps``), whether a task is written yet (``todo_left``), the runner that
runs a step as its own process with a time limit, and the cache of step results (``run_steps`` puts them together).

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

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from assignment import tasks as task_code
from assignment.atomic import write_atomic
from assignment.impl import REPO_ROOT
from assignment.registry import Registry
from assignment.todos import todo_counts

ASSIGNMENT_DIR = Path(__file__).resolve().parents[1]
DEFAULT_BUILD = REPO_ROOT / "build" / "report"
CACHE_VERSION = 1

# Time limits per step, in seconds. On an H100 the solutions take under a minute for a kernel task's bench, a few
# minutes for t6's (its model table times four paths of a 1B model at two prompts, then a context sweep) and for
# a full scaling sweep (five candidates at 16 points); the limits leave room for a slower GPU and for a correct
# but slow student kernel, while a hang still ends.
BENCH_TIMEOUT_S = 600.0  # a task's code may give its bench more (TaskCode.bench_timeout_s)
SCALING_TIMEOUT_S = 900.0
PROFILE_TIMEOUT_S = 300.0
GENERATE_TIMEOUT_S = 300.0
TIMEOUT_RC = 124  # what a runner returns for a step it stopped at its time limit (as timeout(1) does)
NO_GPU = "no CUDA GPU (torch.cuda.is_available() is False; run make report on a GPU node)"
GPU_PROBE = "import json; from assignment.perf.timing import gpu_info; print(json.dumps(gpu_info()))"
GPU_PROBE_TIMEOUT_S = 120.0
TAIL_LINES = 30
DEFAULT_PROMPT = "The history of"

# runner(argv, timeout_s=..., env=..., cwd=...) -> (returncode, stdout, stderr); TIMEOUT_RC when stopped at the limit
Runner = Callable[..., tuple[int, str, str]]


# --------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class Step:
    name: str  # bench_t4, scaling_t4, profile_t4, generate_t7
    task: str
    kind: str  # bench, scaling, profile, generate
    argv: tuple[str, ...]
    out_dir: Path | None  # where the step writes its files (emptied before it runs)
    timeout_s: float
    inputs: tuple[str, ...]  # the tasks whose student files it runs
    gpu: bool = True


@dataclass
class StepResult:
    step: str
    task: str
    kind: str
    status: str  # ok, failed, timeout, skipped
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
    tasks: tuple[str, ...] = ()  # the tasks whose steps may run; () is every task
    refresh: bool = False
    max_tokens: int = 100
    quick_scaling: bool = False


def plan_steps(registry: Registry, settings: Settings, have_gpu: bool) -> list[Step]:
    """Every step of every available task, in the order they run (the model and text last)."""
    python, runs = sys.executable, settings.build / "runs"
    steps: list[Step] = []
    text: list[Step] = []  # the generation steps, after every kernel's
    for task in registry.available:
        t, code = task.id, task_code.code(task.id)
        if code.bench_cases is not None:
            out = runs / f"bench_{t}"
            steps.append(
                Step(
                    f"bench_{t}",
                    t,
                    "bench",
                    (python, "-m", "assignment.commands.bench", "--task", t, "--out", str(out)),
                    out,
                    code.bench_timeout_s or BENCH_TIMEOUT_S,
                    _inputs(code, code.bench_needs),
                )
            )
        if code.scaling_causal is not None:
            out = runs / f"scaling_{t}"
            argv = (python, "-m", "assignment.commands.scaling", "--task", t, "--out", str(out))
            steps.append(
                Step(
                    f"scaling_{t}",
                    t,
                    "scaling",
                    argv + (("--quick",) if settings.quick_scaling else ()),
                    out,
                    SCALING_TIMEOUT_S,
                    _inputs(code, code.bench_needs),
                )
            )
        if code.report_profile:
            steps.append(
                Step(
                    f"profile_{t}",
                    t,
                    "profile",
                    (python, "-m", "assignment.commands.profile", "--task", t),
                    None,
                    PROFILE_TIMEOUT_S,
                    _inputs(code),
                )
            )
        if code.generates:
            argv = (
                python,
                "-m",
                "assignment.commands.generate",
                "--prompt",
                registry.report_prompt or DEFAULT_PROMPT,
                "--temperature",
                "0",
                "--max-tokens",
                str(settings.max_tokens),
                "--device",
                "cuda" if have_gpu else "cpu",
            )
            text.append(Step(f"generate_{t}", t, "generate", argv, None, GENERATE_TIMEOUT_S, _inputs(code), gpu=False))
    return steps + text


def _inputs(code: task_code.TaskCode, also_runs: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The tasks whose student code a step runs: those it also runs (t4's tables time the naive CUDA composition
    of t2 and t3), those its task builds on, and the task."""
    return tuple(dict.fromkeys((*also_runs, *code.regions)))


# --------------------------------------------------------------------------- is a task written yet?


def todo_left(task_id: str, registry: Registry, impl: Path) -> str | None:
    """Why ``task_id`` cannot run yet (its own TODO regions, a task it needs, a missing file), or None."""
    for needed in (task_id, *task_code.code(task_id).builds_on):
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
        held = _HeldSignals()
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                bufsize=1,
                start_new_session=True,
            )
        except OSError as exc:
            held.release()
            return 127, "", f"cannot start {argv[0]}: {exc}\n"
        except BaseException:
            held.release()
            raise
        captured: dict[str, list[str]] = {"out": [], "err": []}

        def pump(stream, key: str) -> None:
            for line in stream:
                captured[key].append(line)
                if echo:
                    print(f"    | {line}", end="" if line.endswith("\n") else "\n", flush=True)

        readers = [
            threading.Thread(target=pump, args=(proc.stdout, "out"), daemon=True),
            threading.Thread(target=pump, args=(proc.stderr, "err"), daemon=True),
        ]
        for reader in readers:
            reader.start()
        returncode: int | None
        try:
            held.release()  # a SIGTERM or ^C that came while the step started is raised here, where it is killed
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


class _HeldSignals:
    """SIGINT and SIGTERM held back while a step starts, then delivered to the handlers they were held from.

    The report's SIGTERM handler (and ^C) raise ``KeyboardInterrupt``. Raised inside ``Popen``, after the fork,
    it would leave a started step that no one knows the pid of, alive in a session of its own. Held, it is
    delivered by ``release`` once the step is known and its group can be killed. Signals can be held only on
    the main thread (where Python runs their handlers); elsewhere nothing is held.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.came: list[int] = []
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.SIGNALS:
            if signal.getsignal(signum) is None:  # a handler set outside Python: leave it alone
                continue
            self.previous[signum] = signal.signal(signum, self._hold)

    def _hold(self, signum: int, frame: Any) -> None:
        self.came.append(signum)

    def release(self) -> None:
        """Put the handlers back, then deliver what came meanwhile (once each, in the order it came)."""
        previous, self.previous = self.previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(self.came):
            signal.raise_signal(signum)


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
    return "\n".join(out[len(out) - out_kept :] + err[len(err) - err_kept :])


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
    payload = {
        "version": CACHE_VERSION,
        "step": step.name,
        "argv": list(step.argv),
        "gpu": gpu_name or "no GPU",
        "kit": kit,
        "student_files": files,
    }
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
    returncode, stdout, stderr = runner(
        list(step.argv), timeout_s=step.timeout_s, env=step_env(settings.impl), cwd=REPO_ROOT
    )
    seconds = time.monotonic() - start
    log = settings.build / "logs" / f"{step.name}.log"
    write_atomic(
        log,
        f"$ {command}\n# exit status {returncode} after {seconds:.1f} s\n\n== stdout ==\n{stdout}\n"
        f"== stderr ==\n{stderr}",
    )
    data, files, problem = collect(step, stdout, stderr)
    result = StepResult(
        step.name,
        step.task,
        step.kind,
        "ok",
        command,
        seconds=round(seconds, 1),
        finished=datetime.now().astimezone().isoformat(timespec="seconds"),
        returncode=returncode,
        log=str(log),
        data=data,
        files=files,
    )
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
        say(f"{step.name}: {result.reason} (log: {shown_path(log)})")
        return result
    record = {"version": CACHE_VERSION, "key": key} | {
        f.name: getattr(result, f.name) for f in fields(StepResult) if f.name != "cached"
    }
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


def shown_path(path: Path | str) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- the whole run


def detect_gpu(runner: Runner | None = None) -> dict[str, Any]:
    """``assignment.perf.timing.gpu_info()``, asked in a process of its own: the report's own process never holds
    a CUDA context (a GPU in exclusive-process mode would refuse the steps one), and a broken driver that hangs
    costs the probe's time limit, not the report."""
    code, out, err = (runner or command_runner())(
        [sys.executable, "-c", GPU_PROBE], timeout_s=GPU_PROBE_TIMEOUT_S, env=step_env(None), cwd=REPO_ROOT
    )
    try:
        info = json.loads(out.strip().splitlines()[-1])
        if code == 0 and isinstance(info, dict):
            return info
    except (ValueError, IndexError):
        pass
    last = (err.strip().splitlines() or [f"exit status {code}"])[-1]
    return {"name": None, "torch": None, "error": f"the GPU probe failed ({exit_description(code)}): {last}"}


def run_steps(
    registry: Registry,
    settings: Settings,
    runner: Runner,
    gpu: dict[str, Any],
    have_ncu: bool,
    say: Callable[[str], None],
) -> tuple[list[StepResult], dict[str, str | None]]:
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
        elif step.gpu and registry.task(step.task).needs_hopper and gpu.get("capability") != "sm_90":
            result.reason = (
                f"{step.task} is not available on this GPU: it runs on Hopper GPUs only (compute capability 9.0: H100, "
                f"H200), and this one is {gpu_name} ({gpu.get('capability', 'capability unknown')})"
            )
        elif step.kind == "profile" and not have_ncu:
            result.reason = (
                "ncu (Nsight Compute) is not on PATH: the profiler table needs it (it ships with the CUDA toolkit)"
            )
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
                result.reason = (
                    f"not run: this report was limited to {tasks}, and no cached result matches "
                    f"(make report T={step.task} runs it)"
                )
        if result.status == "skipped":
            note(f"{step.name}: skipped: {result.reason}")
        results.append(result)
    return results, todo


def no_gpu_reason(gpu: dict[str, Any]) -> str:
    return f"no usable CUDA GPU: {gpu['error']}" if gpu.get("error") else NO_GPU
