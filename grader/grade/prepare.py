"""Grading phase 2: turn a collected submission into what one task's checker may run.

Nothing of the student's runs here. For each task:

* Python files are checked against the task's rules (``assignment.policy``) and handed to the
  sandboxed worker through a config file; the checker process never imports them.
* CUDA files are never built as submitted: the student's TODO regions of this task are spliced into
  the kit's own file (``assignment.cuda.regions``), with the kit's regions for every other task, so a
  student who has not done t4 can still be graded on t5. The spliced file is compiled to device code
  only (``compiler.build_module``: a cubin, in the compile sandbox, after the region rules on the
  compiler's reading of it, its symbols checked against the kit's own build); the kit's host library,
  built from the kit's file alone, launches it. Nothing the student wrote can run on the host.

A task that cannot run ends here with the reason (rejected, compile error, missing files).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from assignment import policy
from assignment.cuda import compiler, confine, reading, regions, rules
from assignment.registry import Task
from grader.grade.config import REPO_ROOT, GradeConfig

KIT_SOURCES = REPO_ROOT / "solutions"  # the kit's own files: host code, and every region's reference


@dataclass
class PreparedTask:
    task: Task
    impl_dir: Path | None = None  # IMPL for the checker process (CUDA: the spliced files)
    python_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: str = "ready"  # ready | rejected | compile_error | missing_files
    reason: str = ""

    def fail(self, status: str, reason: str) -> PreparedTask:
        self.status, self.reason = status, reason
        return self


def prepare(task: Task, student_dir: Path, workdir: Path, config: GradeConfig, *, build: bool) -> PreparedTask:
    """Check and splice ``task``'s files; build the CUDA ones when ``build`` (a GPU host)."""
    prepared = PreparedTask(task)
    missing = [f for f in task.files if not (student_dir / f).is_file()]
    if missing:
        return prepared.fail("missing_files", f"file(s) not found in the submission: {', '.join(missing)}")
    rules = policy.Rules(task.id, task.rules.imports, task.rules.forbidden)
    for name in task.files:
        source = student_dir / name
        if name.endswith(".py"):
            found = policy.check_file(source, rules) if config.python_rules else []
            if found:
                return prepared.fail(
                    "rejected",
                    "the file breaks the task's rules, so none of it was run:\n" + policy.describe(found, name),
                )
            prepared.python_files.append(name)
        elif name.endswith(".cu"):
            failure = _prepare_cuda(prepared, name, source, workdir, config, build)
            if failure:
                return failure
    for name in kit_companions(task.id):
        failure = _add_companion(prepared, name, workdir, config, build)
        if failure:
            return failure
    return prepared


def kit_companions(task_id: str) -> list[str]:
    """CUDA files the task's checks run as the kit wrote them, so that the task is graded on its own (t6's prefill
    goes through the causal kernel, which the student's t6_kv_cache.py calls: it must not be the student's)."""
    from assignment import tasks

    own = tasks.code(task_id).cuda_file
    files = [tasks.code(other).cuda_file for other in tasks.code(task_id).kit_companions]
    return list(dict.fromkeys(f for f in files if f and f != own))


# Device printf in every build of a grading: compiled out of the student's module (compiler.DEVICE_PRINTF_SETTING), so
# a debugging printf left in a kernel costs neither time nor output (in every thread of a timed launch it took minutes).
GRADING_DEVICE_PRINTF = False


def compile_isolation(config: GradeConfig) -> str:
    """How nvcc is confined for a submission's files: inside bubblewrap, unless the instructor accepted weak
    isolation (then bubblewrap where it runs, else a plain process with the same limits)."""
    return "auto" if config.allow_weak_isolation or config.isolation == "process" else "bwrap"


def _limits(config: GradeConfig) -> confine.CompileLimits:
    return confine.CompileLimits(wall_seconds=config.build_timeout_s, isolation=compile_isolation(config))


def _build(source: Path, config: GradeConfig, tasks: tuple[str, ...] | None = None) -> compiler.ModuleBuild:
    """The device module of ``source`` (its regions of ``tasks``, all by default, in the kit's file) in the
    submissions' cache (the kit's own build in the reference cache), and the kit's host library for it, with
    nvcc confined as ``compile_isolation`` says. The checker's build of the spliced file is then a cache hit."""
    built = compiler.build_module(
        source,
        cache=config.submission_cache,
        kit_cache=config.reference_cache,
        quiet=True,
        limits=_limits(config),
        source_rules=config.cuda_rules,
        tasks=tasks,
        device_printf=GRADING_DEVICE_PRINTF,
        reuse_kit_build=True,
    )
    compiler.build_library(built.kit, built.arch, cache=config.reference_cache, quiet=True)
    return built


def _add_companion(
    prepared: PreparedTask, name: str, workdir: Path, config: GradeConfig, build: bool
) -> PreparedTask | None:
    """The kit's own ``name`` beside the task's spliced files (built into the submissions' cache, where the
    checker looks for the files of its IMPL)."""
    impl = workdir / "impl" / prepared.task.id
    impl.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(KIT_SOURCES / name, impl / name)
    prepared.impl_dir = impl
    if build:
        try:
            _build(impl / name, config)
        except (compiler.CudaCompileError, regions.RegionError, confine.IsolationUnavailable) as exc:
            return prepared.fail(
                "compile_error",
                f"the kit's {name} did not build (an instructor error): {str(exc).splitlines()[0][-300:]}",
            )
    return None


def _prepare_cuda(
    prepared: PreparedTask, name: str, source: Path, workdir: Path, config: GradeConfig, build: bool
) -> PreparedTask | None:
    task = prepared.task
    kit_file = KIT_SOURCES / name
    student_text = compiler.read_student_text(source)
    try:
        spliced = regions.splice(kit_file.read_text(encoding="utf-8"), student_text, (task.id,), filename=name)
    except regions.RegionError as exc:
        return prepared.fail("rejected", str(exc))
    if spliced.ignored_outside:
        prepared.notes.append(
            f"{name}: lines {regions.line_ranges(spliced.ignored_outside)} are outside the TODO "
            "regions and differ from the starter; only the regions are graded (the kit's own "
            "code ran instead)"
        )
    impl = workdir / "impl" / task.id
    impl.mkdir(parents=True, exist_ok=True)
    target = impl / name
    target.write_text(spliced.text, encoding="utf-8")
    prepared.impl_dir = impl
    will_build = build and task.id not in compiler.todo_lines(spliced.text)  # a TODO left: NotImplementedError
    if not will_build:
        # No build here (no GPU, or the task not written yet): the region rules alone, as the build would run them.
        return _check_rules(prepared, spliced, name, config) if config.cuda_rules else None
    try:
        _build(source, config, (task.id,))  # the student's own file: messages name their lines
    except compiler.CudaCompileError as exc:
        return prepared.fail("compile_error", _student_facing(str(exc), name, source))
    except (regions.RegionError, reading.ReadingError) as exc:
        return prepared.fail("rejected", _student_facing(str(exc), name, source))
    except confine.IsolationUnavailable as exc:
        return prepared.fail("compile_error", f"{name} was not compiled: {exc}")
    return None


def _check_rules(
    prepared: PreparedTask, spliced: regions.Spliced, name: str, config: GradeConfig
) -> PreparedTask | None:
    arch = compiler.preprocess_arch() if compiler.nvcc_path() else None
    try:
        problems = rules.check(
            spliced.regions, spliced.text, spliced.spans, name, arch, spliced.origin, limits=_limits(config)
        )
    except (reading.ReadingError, confine.IsolationUnavailable) as exc:
        return prepared.fail("rejected", f"{name}: {exc}")
    return prepared.fail("rejected", str(regions.problems_error(name, problems))) if problems else None


def _student_facing(message: str, name: str, target: Path) -> str:
    """A build's message as the student sees it: their file's name, never the grader's paths."""
    return message.replace(str(target), name).replace(str(target.parent) + "/", "")
