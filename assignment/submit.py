"""Pack a submission: ``python -m assignment.submit`` (``make submit``) writes ``submission.zip``.

    python -m assignment.submit [--impl DIR] [--root DIR] [--out FILE]

The zip holds, at its top level (where the grader looks first), the registry's student files from the
implementation folder (``--impl``; default as for the tests: ``IMPL``, else ``starter/`` in a bundle), the
registry's ``submit_files`` (REPORT.md, REPORT.html, feedback.json, theory_answers.toml, and NOTES.md, the note
the integrity policy asks for) found in the bundle's root (``--root``; default the folder holding ``assignment/``,
where ``make feedback`` writes feedback.json and ``make theory`` theory_answers.toml), and
``MANIFEST.json``: each file's name, size and SHA-256, the kit's version, the registry's hash, the time and
the TODO regions left per task.

Nothing is written until the files pass the checks the grader applies before it runs anything:

* errors (exit 1, no zip; an existing one is left untouched): a student file missing, a file over the
  grader's size cap (``course.max_file_bytes``), a Python file that breaks its task's rules
  (``assignment.policy``; read as Python's import reads it, so a byte-order mark and CR LF line endings are
  fine), a CUDA file whose TODO regions the grader cannot splice into its own file or
  whose spliced build nvcc rejects;
* warnings (the zip is still written): TODO regions left, per task (partial work may be submitted),
  a missing REPORT.md, REPORT.html, feedback.json or NOTES.md (what belongs in the note, by name), an unfinished
  feedback.json, theory answers missing or
  unreadable (``theory_answers.toml``, read as the grader reads it), no nvcc to compile with.

CUDA files are checked as the grader builds them: for each task that owns the file, the student's regions
of that task spliced into the kit's copy of the file (``assignment.cuda.regions.splice``; the reference
solutions here, the starter as shipped in a student bundle), built as a device module unless that task still
has a TODO (the grader does not build those either; their regions are checked against the rules). Builds go
through ``assignment.cuda.compiler.build_module`` (cached by content) for ``KIT_CUDA_ARCH``, else this
machine's GPU, else every architecture ``make check-cuda`` checks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path

from assignment import feedback, policy
from assignment.atomic import replacing
from assignment.cuda import compiler, confine, reading, regions, rules
from assignment.impl import REPO_ROOT, ImplError, student_dir
from assignment.registry import Registry, load_registry
from assignment.todos import todo_counts
from assignment.theory import answers as theory_answers

import tomllib

MANIFEST_NAME = "MANIFEST.json"
DEFAULT_OUT_NAME = "submission.zip"
COMPILE_ERROR_LINES = 3  # nvcc's first errors are the useful ones; the rest often cascade


@dataclass
class PackedFile:
    """One file the zip would hold (``data`` is None when it is missing or refused)."""

    name: str
    tasks: tuple[str, ...]  # the tasks that own it; () for a report file
    path: Path
    data: bytes | None = None
    size: int | None = None
    check: str = ""  # what the table shows in its "check" column
    todo: dict[str, int] = field(default_factory=dict)  # task -> TODO regions left


@dataclass
class Checks:
    files: list[PackedFile]
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- reading


def read_files(impl: Path, root: Path, registry: Registry, checks: Checks) -> None:
    """Read every student and report file, refusing those over the grader's size cap."""
    required = {name for task in registry.available for name in task.files}
    limit = registry.max_file_bytes
    for name in registry.student_files:
        owners = tuple(t.id for t in registry.tasks if name in t.files)
        packed = PackedFile(name, owners, impl / name)
        checks.files.append(packed)
        if not packed.path.is_file():
            packed.check = "MISSING"
            if name in required:
                checks.errors.append(f"{name}: not found in {_shown(impl)} (a file of {', '.join(owners)})")
            continue
        _read_capped(packed, limit, checks)
    for name in registry.submit_files:
        packed = PackedFile(name, (), root / name)
        checks.files.append(packed)
        if not packed.path.is_file():
            packed.check = "not found"
            checks.warnings.append(f"{name}: not found in {_shown(root)} ({_how_to_add(name, registry)})")
            continue
        if _read_capped(packed, limit, checks):
            packed.check = "ok"


def _how_to_add(name: str, registry: Registry) -> str:
    if name == registry.notes_file:
        return (
            "the integrity policy asks for this note: the people you discussed the assignment with, your sources and "
            f"each AI tool you used, for what; write it in {name} next to the Makefile and run make submit again"
        )
    return "packed when it is there"


def _read_capped(packed: PackedFile, limit: int, checks: Checks) -> bool:
    try:
        with open(packed.path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        packed.check = "UNREADABLE"
        checks.errors.append(f"{packed.name}: cannot be read ({exc.strerror or exc})")
        return False
    packed.size = len(data) if len(data) <= limit else packed.path.stat().st_size
    if len(data) > limit:
        packed.check = "TOO LARGE"
        checks.errors.append(
            f"{packed.name}: {packed.size:,} bytes; the grader takes at most {limit:,} bytes "
            "per file (course.max_file_bytes in the registry)"
        )
        return False
    packed.data = data
    return True


# --------------------------------------------------------------------------- TODO regions left


# --------------------------------------------------------------------------- Python files


def check_python(packed: PackedFile, text: str, registry: Registry, checks: Checks) -> None:
    """The task rules the grader checks before it runs any of the file (a syntax error is one of them)."""
    found = []
    for task_id in packed.tasks:
        task = registry.task(task_id)
        found += policy.check_source(text, policy.Rules(task.id, task.rules.imports, task.rules.forbidden), packed.name)
    if found:
        packed.check = "REJECTED"
        checks.errors.append(
            f"{packed.name}: breaks the task rules, so the grader would run none of it:\n"
            + _indent(policy.describe(sorted(set(found), key=lambda v: v.line), packed.name))
        )
    else:
        packed.check = "ok: task rules"


# --------------------------------------------------------------------------- CUDA files


@dataclass(frozen=True)
class Build:
    """One device module nvcc must accept: the student's regions of one task in the kit's file."""

    name: str
    label: str  # the task whose regions are the student's ("t4")
    student_text: str
    kit: Path


def cuda_builds(packed: PackedFile, text: str, checks: Checks) -> tuple[list[Build], str]:
    """What to compile for one CUDA file, and how it was checked; a region the grader refuses is an error.

    As the grader: for each task that owns the file, its regions spliced into the kit's copy of the file
    (solutions/ here, assignment/cuda/kit/ in a bundle), built unless that task still has a TODO; the rules of
    what a region holds checked either way."""
    try:
        kit_file = compiler.kit_source(packed.name)
    except compiler.CudaToolkitError as exc:
        checks.errors.append(f"{packed.name}: {exc}")
        return [], "REJECTED"
    kit_text = kit_file.read_text(encoding="utf-8")
    todo = todo_counts(text, packed.name)
    builds = []
    for task in packed.tasks:
        try:
            spliced = regions.splice(kit_text, text, (task,), filename=packed.name)
            problems = rules.check_regions(spliced.regions) if task in todo else []
        except (regions.RegionError, reading.ReadingError) as exc:
            checks.errors.append(
                f"{packed.name}: the grader cannot splice its TODO regions into the kit's file:\n{_indent(str(exc))}"
            )
            return [], "REJECTED"
        if problems:
            checks.errors.append(
                f"{packed.name}: the grader splices only the TODO regions into its own file and "
                "rejects:\n" + _indent("\n".join(str(p) for p in problems))
            )
            return [], "REJECTED"
        if task not in todo:  # as the grader: a task with a TODO left is not built (its rules ran above)
            builds.append(Build(packed.name, task, text, kit_file))
    return builds, "spliced"


def build_archs() -> tuple[str, ...]:
    """KIT_CUDA_ARCH, else this machine's GPU, else every architecture ``make check-cuda`` checks."""
    if os.environ.get("KIT_CUDA_ARCH"):
        return (compiler.detect_arch(),)  # a bad value raises, naming it
    try:
        return (compiler.detect_arch(),)
    except compiler.CudaToolkitError:
        return compiler.CHECK_ARCHS


def compile_one(build: Build, arch: str, workdir: Path) -> str:
    """'' when the grader's build of it succeeds (region rules, nvcc, the build's symbols), else why, in the
    student's own lines."""
    folder = workdir / f"{build.label}-{arch}"
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / build.name  # the module is named after the file; the cache is keyed by content
    source.write_text(build.student_text, encoding="utf-8")
    try:
        compiler.build_module(source, arch, kit=build.kit, tasks=(build.label,), quiet=True)
    except compiler.CudaCompileError as exc:
        return f"{build.name}: nvcc rejects your {build.label} regions in the kit's file ({arch}):\n" + _indent(
            _first_lines(str(exc))
        )
    except (regions.RegionError, reading.ReadingError) as exc:
        return f"{build.name}: the grader rejects your {build.label} regions ({arch}):\n" + _indent(str(exc))
    except confine.IsolationUnavailable as exc:
        return f"{build.name}: cannot compile here: {exc}"
    return ""


def _first_lines(message: str) -> str:
    """A compile message cut to its first errors (each quotes a line: two lines per error)."""
    lines = message.splitlines()
    kept = lines[: 1 + 2 * COMPILE_ERROR_LINES]
    return "\n".join(kept + ([f"... and more ({len(lines) - len(kept)} lines)"] if len(lines) > len(kept) else []))


def check_cuda(files: list[tuple[PackedFile, str]], checks: Checks) -> None:
    """Splice (or read) every CUDA file's regions, then compile what the grader would build, side by side."""
    planned = []
    for packed, text in files:
        builds, how = cuda_builds(packed, text, checks)
        packed.check = how if how == "REJECTED" else f"ok: {how}"
        if how != "REJECTED":
            planned.append((packed, builds))
    jobs = [(packed, build) for packed, builds in planned for build in builds]
    archs: tuple[str, ...] = ()
    if jobs and compiler.nvcc_path() is None:
        checks.warnings.append(
            "nvcc not found: the CUDA files were checked for the region rules but not compiled "
            "(the grader compiles them; install the CUDA toolkit to check here)"
        )
        jobs = []
    if jobs:
        try:
            archs = build_archs()
        except compiler.CudaToolkitError as exc:
            checks.errors.append(f"cannot compile the CUDA files: {exc}")
            return
        with (
            tempfile.TemporaryDirectory(prefix="kit-submit-") as tmp,
            ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool,
        ):
            runs = [
                (packed, pool.submit(compile_one, build, arch, Path(tmp))) for packed, build in jobs for arch in archs
            ]
            for packed, future in runs:
                failure = future.result()
                if failure:
                    packed.check = "COMPILE ERROR"
                    checks.errors.append(failure)
    for packed, builds in planned:
        if packed.check.startswith("ok"):
            packed.check += (
                ", not built (TODO left)"
                if not builds
                else f", compiled ({' '.join(archs)})"
                if archs
                else ", not compiled (no nvcc)"
            )


# --------------------------------------------------------------------------- all checks


def run_checks(impl: Path, root: Path, registry: Registry) -> Checks:
    checks = Checks([])
    read_files(impl, root, registry, checks)
    cuda_files = []
    for packed in checks.files:
        if packed.data is None or not packed.tasks:
            continue
        if packed.name.endswith(".py"):
            try:  # read as Python's import reads it: a byte-order mark and CR LF line endings are fine
                text = policy.python_text(packed.data)
            except policy.UndecodableSource as exc:
                packed.check = "REJECTED"
                checks.errors.append(f"{packed.name}: {exc}; save it as UTF-8")
                continue
            packed.todo = todo_counts(text, packed.name)
            check_python(packed, text, registry, checks)
            continue
        text = packed.data.decode("utf-8", errors="replace")
        if packed.name.endswith(".cu"):
            packed.todo = todo_counts(text, packed.name)
            cuda_files.append((packed, text))
        else:
            packed.check = "ok"
    check_cuda(cuda_files, checks)
    checks.warnings[:0] = todo_warnings(checks.files, registry)
    feedback_warning(checks)
    theory_warning(checks, registry)
    return checks


def todo_warnings(files: list[PackedFile], registry: Registry) -> list[str]:
    lines = []
    for task in registry.tasks:
        per_file = {f.name: f.todo[task.id] for f in files if f.todo.get(task.id)}
        if per_file:
            total = sum(per_file.values())
            where = ", ".join(f"{name}: {count}" if len(per_file) > 1 else name for name, count in per_file.items())
            lines.append(f"{task.id}: {total} TODO region{'s' if total != 1 else ''} not implemented ({where})")
    return lines


def feedback_warning(checks: Checks) -> None:
    """An incomplete feedback.json is still packed, with a warning (``make feedback`` resumes it)."""
    packed = next((f for f in checks.files if f.name == "feedback.json" and f.data is not None), None)
    if packed is None:
        return
    try:
        form = feedback.load_form()
        problems = form.problems(feedback.load_answers(packed.path, form))
    except feedback.FeedbackError as exc:
        problems = [str(exc)]
    if problems:
        packed.check = "ok: incomplete"
        checks.warnings.append(
            f"feedback.json: {len(problems)} answer(s) missing or invalid "
            f"(`make feedback` resumes it), e.g. {problems[0]}"
        )


def theory_warning(checks: Checks, registry: Registry) -> None:
    """The theory answers are packed as they are, with a warning when some would not be graded (missing, empty,
    not a number, a file that is not valid TOML); a missing file gets the command that writes it."""
    theory = registry.theory
    packed = next((f for f in checks.files if theory and f.name == theory.answers_file), None)
    if packed is None:
        return
    if packed.data is None:
        if packed.check == "not found":
            checks.warnings.append(
                f"{packed.name}: the theory part ({theory.points:g} points) has no answers yet: "
                "`make theory ID=<your id>` prints your questions and writes the file"
            )
        return
    problems = theory_answers.file_problems(packed.data.decode("utf-8", errors="replace"), theory)
    if problems:
        packed.check = "ok: incomplete"
        shown = "\n".join(f"  {problem}" for problem in problems[:5])
        more = f"\n  ... and {len(problems) - 5} more" if len(problems) > 5 else ""
        checks.warnings.append(
            f"{packed.name}: {len(problems)} theory answer(s) would not be graded as they are "
            f"(`python -m assignment.theory --check` lists them all):\n{shown}{more}"
        )


# --------------------------------------------------------------------------- the zip


def manifest(files: list[PackedFile], registry: Registry) -> dict:
    todo: dict[str, int] = {}
    for packed in files:
        for task, count in packed.todo.items():
            todo[task] = todo.get(task, 0) + count
    return {
        "course": registry.title,
        "kit_version": kit_version(),
        "registry_sha256": hashlib.sha256(registry.path.read_bytes()).hexdigest(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": [
            {"name": f.name, "bytes": len(f.data), "sha256": hashlib.sha256(f.data).hexdigest(), "tasks": list(f.tasks)}
            for f in files
            if f.data is not None
        ],
        "todo_regions_left": {task: todo[task] for task in registry.ids if task in todo},
    }


def kit_version() -> str | None:
    try:
        return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None


def write_zip(out: Path, files: list[PackedFile], meta: dict) -> None:
    """Write ``out`` whole or not at all: a temporary file beside it, then a rename over it."""
    stamp = datetime.now().timetuple()[:6]
    with replacing(out) as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            entries = [(MANIFEST_NAME, (json.dumps(meta, indent=2) + "\n").encode())]
            entries += [(f.name, f.data) for f in files if f.data is not None]
            for name, data in entries:
                info = zipfile.ZipInfo(name, date_time=stamp)
                info.external_attr = 0o644 << 16  # a plain file
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)


# --------------------------------------------------------------------------- printing


def print_table(checks: Checks) -> None:
    rows = [("file", "bytes", "tasks", "check", "TODO regions left")]
    for f in checks.files:
        todo = ", ".join(f"{task}: {count}" for task, count in f.todo.items()) or "-"
        rows.append(
            (
                f.name,
                "-" if f.size is None else f"{f.size:,}",
                " ".join(f.tasks) or "-",
                f.check,
                todo if f.tasks else "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print(
            f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]:<{widths[3]}}  "
            f"{row[4]}".rstrip()
        )


def print_manifest(meta: dict) -> None:
    print(
        f"{MANIFEST_NAME}: {meta['course']}, kit {meta['kit_version'] or '?'}, registry sha256 "
        f"{meta['registry_sha256'][:16]}..., {meta['created']}"
    )
    width = max(len(f["name"]) for f in meta["files"])
    for f in meta["files"]:
        print(f"  {f['name']:<{width}}  {f['bytes']:>10,}  sha256 {f['sha256']}")


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", help="the folder holding your files (default: IMPL, else starter/ in a bundle)")
    parser.add_argument(
        "--root",
        type=Path,
        default=REPO_ROOT,
        help="where REPORT.md, REPORT.html and feedback.json are (default: the bundle's root)",
    )
    parser.add_argument("--out", type=Path, help=f"the zip to write (default: ROOT/{DEFAULT_OUT_NAME})")
    args = parser.parse_args(argv)
    registry = load_registry()
    try:
        impl = student_dir(args.impl)
    except ImplError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = args.out or args.root / DEFAULT_OUT_NAME
    print(f"checking the student files in {_shown(impl)} and the report files in {_shown(args.root)}\n")
    checks = run_checks(impl, args.root, registry)
    print_table(checks)
    if checks.warnings:
        print("\nwarnings:")
        for warning in checks.warnings:
            print(_indent(warning))
    if checks.errors:
        print("\nerrors:")
        for error in checks.errors:
            print(_indent(error))
        kept = f"; {_shown(out)} was left as it was" if out.exists() else ""
        print(f"\n{len(checks.errors)} error(s): no zip written{kept}", file=sys.stderr)
        return 1
    meta = manifest(checks.files, registry)
    write_zip(out, checks.files, meta)
    print(f"\nwrote {_shown(out)} ({out.stat().st_size:,} bytes)")
    print_manifest(meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
