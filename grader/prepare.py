"""Grading phase 2: turn a collected submission into what one task's checker may run.

Nothing of the student's runs here. For each task:

* Python files are checked against the task's rules (``assignment.policy``) and handed to the
  sandboxed worker through a config file; the checker process never imports them.
* CUDA files are never built as submitted: the student's TODO regions of this task are spliced into
  the kit's own file (``assignment.cuda.regions``), with the kit's regions for every other task, so a
  student who has not done t4 can still be graded on t5, and host code, includes and launches are
  always the kit's. The spliced file is built into the submissions' cache, and the library's exported
  and imported symbols are compared with the reference's built from the same kit file.

A task that cannot run ends here with the reason (rejected, compile error, missing files).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from assignment import policy
from assignment.cuda import compiler, regions
from assignment.registry import Task
from grader.config import REPO_ROOT, GradeConfig

KIT_SOURCES = REPO_ROOT / "solutions"  # the kit's own files: host code, and every region's reference
# CUDA files another task's checks run as the kit wrote them, so that the task is graded on its own: t6's prefill
# goes through the t4/t5 kernel (the student's t6_kv_cache.py calls it), which must not be the student's t4/t5.
KIT_COMPANIONS = {"t6": ("t4_flash_attention.cu",)}


@dataclass
class PreparedTask:
    task: Task
    impl_dir: Path | None = None        # IMPL for the checker process (CUDA: the spliced files)
    python_files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    status: str = "ready"               # ready | rejected | compile_error | missing_files
    reason: str = ""

    def fail(self, status: str, reason: str) -> "PreparedTask":
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
                return prepared.fail("rejected", "the file breaks the task's rules, so none of it was run:\n"
                                     + policy.describe(found, name))
            prepared.python_files.append(name)
        elif name.endswith(".cu"):
            failure = _prepare_cuda(prepared, name, source, workdir, config, build)
            if failure:
                return failure
    for name in KIT_COMPANIONS.get(task.id, ()):
        failure = _add_companion(prepared, name, workdir, config, build)
        if failure:
            return failure
    return prepared


def _add_companion(prepared: PreparedTask, name: str, workdir: Path, config: GradeConfig,
                   build: bool) -> PreparedTask | None:
    """The kit's own ``name`` beside the task's spliced files (built into the submissions' cache, where the
    checker looks for the files of its IMPL)."""
    impl = workdir / "impl" / prepared.task.id
    impl.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(KIT_SOURCES / name, impl / name)
    prepared.impl_dir = impl
    if build:
        try:
            compiler.build(impl / name, cache=config.submission_cache, quiet=True, timeout_s=config.build_timeout_s)
        except compiler.CudaCompileError as exc:
            return prepared.fail("compile_error", f"the kit's {name} did not build (an instructor error): "
                                                  f"{str(exc).splitlines()[0][-300:]}")
    return None


def _prepare_cuda(prepared: PreparedTask, name: str, source: Path, workdir: Path, config: GradeConfig,
                  build: bool) -> PreparedTask | None:
    task = prepared.task
    kit_file = KIT_SOURCES / name
    student_text = source.read_text(encoding="utf-8", errors="replace")
    try:
        spliced = regions.splice(kit_file.read_text(encoding="utf-8"), student_text, (task.id,), filename=name)
    except regions.RegionError as exc:
        return prepared.fail("rejected", str(exc))
    if spliced.ignored_outside:
        prepared.notes.append(f"{name}: lines {regions.line_ranges(spliced.ignored_outside)} are outside the TODO "
                              "regions and differ from the starter; only the regions are graded (the kit's own "
                              "host code ran instead)")
    impl = workdir / "impl" / task.id
    impl.mkdir(parents=True, exist_ok=True)
    target = impl / name
    target.write_text(spliced.text, encoding="utf-8")
    prepared.impl_dir = impl
    todo = compiler.todo_lines(spliced.text)
    if not build or task.id in todo:  # a TODO left: the checks fail cleanly with NotImplementedError
        return None
    try:
        built = compiler.build(target, cache=config.submission_cache, quiet=True, timeout_s=config.build_timeout_s)
    except compiler.CudaCompileError as exc:
        return prepared.fail("compile_error", compile_feedback(exc, spliced, student_text, name))
    reference = compiler.build(kit_file, cache=config.reference_cache, quiet=True)
    problem = compare_symbols(built.library, reference.library)
    if problem:
        return prepared.fail("rejected", f"{name}: the built library {problem}")
    return None


def compile_feedback(exc: "compiler.CudaCompileError", spliced: "regions.Spliced", student_text: str,
                     name: str, limit: int = 5) -> str:
    """nvcc's errors in the student's own lines (regions.student_diagnostics); the kit's code is never quoted."""
    lines, count = regions.student_diagnostics(exc.diagnostics, student_text, name, spliced.origin, limit)
    parts = [f"{name} does not compile (nvcc, {count} error{'s' if count != 1 else ''}):", *lines]
    if not exc.diagnostics:
        parts.append(str(exc).splitlines()[0].split(": ", 1)[-1] if "took longer" in str(exc) else
                     "(nvcc gave no diagnostics the grader could read)")
    return "\n".join(parts)


def _symbols(library: Path, which: str) -> set[str] | None:
    nm = shutil.which("nm")
    if nm is None:
        return None
    proc = subprocess.run([nm, "-D", which, "--format=posix", str(library)], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}


def compare_symbols(student: Path, reference: Path) -> str:
    """'' when the student's library exports and imports what the reference's does (or less)."""
    for which, verb in (("--defined-only", "exports"), ("--undefined-only", "imports")):
        mine, kit = _symbols(student, which), _symbols(reference, which)
        if mine is None or kit is None:
            return ""  # no nm on this host: the splice already keeps host code the kit's
        extra = sorted(mine - kit)
        if extra:
            return f"{verb} symbols the kit's does not: {', '.join(extra[:5])}"
    return ""
