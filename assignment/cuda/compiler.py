"""Build a task's CUDA file: the student's regions as a device module, the kit's host code as a library.

Two builds, never mixed (``include/kit.cuh`` says how they meet at run time):

* the DEVICE MODULE (``build_module``): the student's TODO regions spliced into the kit's own copy of the file
  (``regions.splice``: every line outside the regions is the kit's), checked against the region rules, and
  compiled with ``nvcc -cubin`` inside the compile sandbox (``confine``): device code only, so nothing a
  student writes can run on the host, and nvcc sees only that file and the kit's include directory.
* the HOST LIBRARY (``build_library``): the kit's own copy of the file compiled into a shared library, loaded
  with ctypes: the launch code. It is built only from the kit's sources (solutions/ in the instructor's tree;
  in a student bundle assignment/cuda/kit/, the starter as shipped; the model's fused kernels); it refuses
  any other file.

``make test``, ``make bench`` and the grader take this one path. Both builds are cached by content (source,
the kit's headers, flags, nvcc version, architecture), so an unchanged file is never rebuilt, and two implementations
(a student's and the reference) load side by side in one process: each module is its own handle.

The command that checks every .cu file this way is assignment/cuda/check_all.py (``make check-cuda``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from assignment.cuda import confine
from assignment.cuda.reading import todo_lines
from assignment.cuda.toolchain import (  # noqa: F401 - the toolchain's names, where the kit has always found them
    CHECK_ARCHS,
    INCLUDE_DIR,
    KIT_HEADER,
    NVCC_FLAGS,
    TOOLKIT_MAJORS,
    CudaToolkitError,
    detect_arch,
    include_headers,
    include_text,
    normalize_arch,
    nvcc_path,
    nvcc_real_path,
    nvcc_version,
    preprocess_arch,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIR = Path(__file__).resolve().parent
SOLUTIONS_DIR = REPO_ROOT / "solutions"
BUNDLE_KIT_DIR = PACKAGE_DIR / "kit"  # a student bundle's copy of the kit's CUDA files (the starter as shipped)
# Where the kit's own sources live: only these are ever built into a shared library.
KIT_SOURCE_ROOTS = (SOLUTIONS_DIR, REPO_ROOT / "assignment")
MODULE_FLAGS = ("-cubin",)  # the device module: device code only
LIBRARY_FLAGS = ("-Xcompiler", "-fPIC", "-shared")  # the host library
SOURCE_RULES_SETTING = "KIT_CUDA_SOURCE_RULES"  # 0: build without the region rules (the grader's own fixtures)
# Device printf in student modules: "off" compiles the calls out (-DKIT_NO_DEVICE_PRINTF, kit.cuh), the grader's
# setting: a debugging printf left in a kernel then costs nothing (in every thread of a large launch it takes
# minutes, even with its output dropped). Anything else: printf as written.
DEVICE_PRINTF_SETTING = "KIT_DEVICE_PRINTF"
# Lazy module loading keeps context creation cheap when a library holds many kernels.
os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")


class CudaCompileError(RuntimeError):
    """nvcc rejected a file, or ran out of time or memory. The message names the student's lines only."""

    def __init__(self, message: str, source: Path, diagnostics: list[Diagnostic], output: str):
        super().__init__(message)
        self.source, self.diagnostics, self.output = source, diagnostics, output


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    severity: str
    message: str


@dataclass(frozen=True)
class BuildResult:
    path: Path  # the .cubin (a device module) or the .so (a host library)
    arch: str
    seconds: float
    cached: bool


def module_flags(device_printf: bool | None = None) -> tuple[str, ...]:
    """The flags of a device module: MODULE_FLAGS, and printf compiled out unless ``device_printf`` (None:
    ``$KIT_DEVICE_PRINTF`` is not "off")."""
    if device_printf is None:
        device_printf = os.environ.get(DEVICE_PRINTF_SETTING, "").strip().lower() != "off"
    return MODULE_FLAGS + (() if device_printf else ("-DKIT_NO_DEVICE_PRINTF",))


def module_command(source: str, output: str, arch: str, include: str, flags: tuple[str, ...]) -> list[str]:
    """nvcc for a device module (``flags``: module_flags()): ``source`` to a cubin for ``arch``, nothing for the
    host."""
    return [nvcc_real_path(), *NVCC_FLAGS, *flags, f"-arch={normalize_arch(arch)}", "-I", include, "-o", output, source]


def library_command(source: Path, output: Path, arch: str) -> list[str]:
    number = normalize_arch(arch).removeprefix("sm_")
    return [
        nvcc_path() or "nvcc",
        *NVCC_FLAGS,
        *LIBRARY_FLAGS,
        "-I",
        str(INCLUDE_DIR),
        "-gencode",
        f"arch=compute_{number},code=sm_{number}",
        "-o",
        str(output),
        str(source),
    ]


# --------------------------------------------------------------------------- where the kit's own files are


def kit_source(filename: str) -> Path:
    """The kit's own copy of a task's CUDA file: its host code, and every region the student's file does not
    replace. solutions/ in the instructor's tree; in a student bundle, assignment/cuda/kit/."""
    for folder in (SOLUTIONS_DIR, BUNDLE_KIT_DIR):
        if (folder / filename).is_file():
            return folder / filename
    raise CudaToolkitError(f"the kit's own {filename} is missing (looked in {SOLUTIONS_DIR} and {BUNDLE_KIT_DIR})")


def is_kit_source(path: Path) -> bool:
    real = Path(path).resolve()
    return any(real.is_relative_to(root.resolve()) for root in KIT_SOURCE_ROOTS)


# --------------------------------------------------------------------------- cache


def cache_dir(source: Path | None = None) -> Path:
    """Where builds live. The kit's own files (solutions/) have a cache of their own
    (``KIT_REFERENCE_CACHE_DIR``), so nothing built from other sources can stand in for the reference."""
    base = Path(os.environ.get("KIT_CACHE_DIR") or REPO_ROOT / ".kit_cache")
    if source is not None and Path(source).resolve().is_relative_to(SOLUTIONS_DIR.resolve()):
        return Path(os.environ.get("KIT_REFERENCE_CACHE_DIR") or base / "reference")
    return base / "cuda"


def cache_key(
    source_text: str,
    arch: str,
    *,
    flags: tuple[str, ...] = NVCC_FLAGS,
    header_text: str | None = None,
    compiler: str | None = None,
) -> str:
    """Content hash of everything that changes a build (``header_text``: the kit's headers, ``include_text()``)."""
    header_text = include_text() if header_text is None else header_text
    compiler = nvcc_version() if compiler is None else compiler
    digest = hashlib.sha256()
    for part in (source_text, header_text, "\0".join(flags), compiler, normalize_arch(arch)):
        digest.update(part.encode())
        digest.update(b"\0\1\0")  # separator so parts cannot run into each other
    return digest.hexdigest()[:24]


def library_path(source: Path, arch: str, key: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir(source)) / f"{source.stem}-{normalize_arch(arch)}-{key}.so"


def module_path(source: Path, arch: str, key: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir(source)) / "modules" / f"{source.stem}-{normalize_arch(arch)}-{key}.cubin"


# --------------------------------------------------------------------------- compile errors

_NVCC_DIAG = re.compile(
    r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<sev>error|warning|catastrophic error)[^:]*: (?P<msg>.*)$"
)
_GCC_DIAG = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)? (?P<sev>error|fatal error|warning): (?P<msg>.*)$"
)


def parse_nvcc_output(output: str) -> list[Diagnostic]:
    """Diagnostics in nvcc's ``file(line): error: ...`` (and the host compiler's ``file:line:col:``) form."""
    found = []
    for line in output.splitlines():
        match = _NVCC_DIAG.match(line) or _GCC_DIAG.match(line)
        if match:
            found.append(Diagnostic(match["file"], int(match["line"]), match["sev"], match["msg"].strip()))
    return found


def _source_line(file: str, line: int) -> str | None:
    try:
        lines = Path(file).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return lines[line - 1] if 0 < line <= len(lines) else None


def format_compile_error(source: Path, output: str, arch: str) -> tuple[str, list[Diagnostic]]:
    """A kit file's compile error (the host library, the model's kernels): every line may be quoted."""
    diagnostics = parse_nvcc_output(output)
    errors = [d for d in diagnostics if "error" in d.severity] or diagnostics
    parts = [f"{source}: nvcc failed for {arch}"]
    for diag in errors[:5]:  # the first errors are the useful ones; the rest often cascade
        parts.append(f"{diag.file}:{diag.line}: {diag.severity}: {diag.message}")
        text = _source_line(diag.file, diag.line)
        if text is not None:
            parts.append(f"    {diag.line:5d} | {text.rstrip()}")
    if len(errors) > 5:
        parts.append(f"... and {len(errors) - 5} more")
    parts.append("--- full nvcc output ---")
    parts.append(output.strip())
    return "\n".join(parts), diagnostics


# --------------------------------------------------------------------------- the host library (kit sources only)

_announced: set[Path] = set()
_handles: dict[Path, ctypes.CDLL] = {}
_handles_lock = threading.Lock()
_lock = threading.Lock()
_build_locks: dict[Path, threading.Lock] = {}  # one per output path, guarded by _build_locks_guard
_build_locks_guard = threading.Lock()  # not _lock: load_library holds that one while it builds


def _target_lock(target: Path) -> threading.Lock:
    with _build_locks_guard:
        return _build_locks.setdefault(target, threading.Lock())


def build_library(
    source: Path | str,
    arch: str | None = None,
    *,
    use_cache: bool = True,
    quiet: bool = False,
    cache: Path | None = None,
    timeout_s: float | None = None,
    trusted: bool = False,
) -> BuildResult:
    """Compile the kit's ``source`` into a shared library for ``arch`` (cached). Refuses any file outside the
    kit's sources: a student's code becomes a device module (``build_module``), never a library. ``trusted``:
    an instructor's variant of a kit file kept elsewhere (an experiment; never a submission)."""
    source = Path(source).resolve()
    if not trusted and not is_kit_source(source):
        raise CudaToolkitError(
            f"{source} is not one of the kit's sources: only the kit's own code is built into a "
            "shared library (a student's file is compiled to device code by build_module)"
        )
    arch = normalize_arch(arch) if arch else detect_arch()
    text = source.read_text(encoding="utf-8")
    key = cache_key(text, arch, flags=NVCC_FLAGS + LIBRARY_FLAGS)
    target = library_path(source, arch, key, cache)
    with _target_lock(target):  # threads building the same library (the grader's t4 and t5) build it once
        if use_cache and target.is_file():
            return BuildResult(target, arch, 0.0, cached=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Compile to a private name and rename: a reader sees no library or a whole one.
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".so.tmp", dir=target.parent)
        os.close(fd)
        tmp = Path(tmp_name)
        start = time.perf_counter()
        try:
            try:
                proc = subprocess.run(
                    library_command(source, tmp, arch), capture_output=True, text=True, timeout=timeout_s
                )
            except subprocess.TimeoutExpired:
                raise CudaCompileError(
                    f"{source}: nvcc took longer than {timeout_s:.0f} s", source, [], "(timed out)"
                ) from None
            if proc.returncode != 0:
                message, diagnostics = format_compile_error(source, proc.stderr + proc.stdout, arch)
                raise CudaCompileError(message, source, diagnostics, proc.stderr + proc.stdout)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    seconds = time.perf_counter() - start
    if not quiet and source not in _announced:
        _announced.add(source)
        print(f"[kit] built the kit's {source.name} (host code) for {arch} in {seconds:.1f} s", file=sys.stderr)
    return BuildResult(target, arch, seconds, cached=False)


def load_library(source: Path | str, arch: str | None = None) -> ctypes.CDLL:
    """Build (or reuse) and dlopen the kit's library for ``source``."""
    with _lock:
        return open_library(build_library(source, arch).path)


def open_library(path: Path | str) -> ctypes.CDLL:
    """dlopen a built library, once per process (one handle per path: a path holds one build, named by its hash)."""
    path = Path(path)
    with _handles_lock:
        if path not in _handles:
            _handles[path] = ctypes.CDLL(str(path))
        return _handles[path]


# --------------------------------------------------------------------------- the device module (student code)


@dataclass(frozen=True)
class ModuleBuild(BuildResult):
    kit: Path = Path()  # the kit's file the regions were spliced into (its host library launches the module)
    isolation: str = ""  # how nvcc was confined ("" for a cache hit)


def require_implemented(source: Path | str, tasks: tuple[str, ...] | list[str], kernel: str = "") -> None:
    """Raise NotImplementedError when ``source`` still has ``KIT_TODO`` for one of ``tasks``.

    Runs before anything is compiled or launched: a starter's KIT_TODO is a
    __trap(), and a trap would poison the CUDA context of the whole test session.
    """
    source = Path(source)
    missing = todo_lines(read_student_text(source))
    for task in tasks:
        if task in missing:
            lines = [str(i) for i in missing[task]]
            where = f"KIT_TODO({task}) on line{'s' if len(lines) > 1 else ''} {', '.join(lines)}"
            what = f"; {kernel} was not launched" if kernel else ""
            raise NotImplementedError(f"{task}: TODO({task}) in {source.name} is not implemented yet ({where}{what})")


def read_student_text(source: Path) -> str:
    """A student's file as text: UTF-8 (undecodable bytes replaced), a byte-order mark dropped, CRLF and CR line
    ends read as LF (line numbers are unchanged)."""
    text = Path(source).read_bytes().decode("utf-8", errors="replace")
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def build_module(
    source: Path | str,
    arch: str | None = None,
    *,
    kit: Path | None = None,
    use_cache: bool = True,
    quiet: bool = False,
    cache: Path | None = None,
    kit_cache: Path | None = None,
    limits: confine.CompileLimits = confine.DEFAULT_LIMITS,
    source_rules: bool | None = None,
    tasks: tuple[str, ...] | None = None,
    device_printf: bool | None = None,
    reuse_kit_build: bool = False,
) -> ModuleBuild:
    """The device module of a student's CUDA file: its TODO regions (of ``tasks``; all by default) spliced into the
    kit's copy of the file (``kit``: ``kit_source`` of its name by default), checked by the region rules on the
    compiler's reading, compiled to a cubin in the compile sandbox (printf compiled out where ``device_printf`` is False:
    ``module_flags``), and its symbols checked against the kit's own build of the file (``kit_cache``: where that
    one is kept; ``cache_dir(kit)`` by default). ``source_rules=False`` (default: ``$KIT_CUDA_SOURCE_RULES`` != 0)
    skips the rules on the source (the kit's adversarial fixtures show that the device-only build holds without
    them); the check of the build's symbols always runs. ``reuse_kit_build``: a file that splices to the kit's own
    text takes the kit's build (checked when it was made) instead of compiling it again (the grader: the kit's
    t4 beside a graded t6, the self-check's solutions).

    Raises regions.RegionError when the regions cannot be spliced or break a rule, CudaCompileError when nvcc
    rejects the result or runs out of time or memory (the message quotes the student's own lines only)."""
    from assignment.cuda import regions, rules

    source = Path(source).resolve()
    arch = normalize_arch(arch) if arch else detect_arch()
    if source_rules is None:
        source_rules = os.environ.get(SOURCE_RULES_SETTING, "1") != "0"
    kit = Path(kit).resolve() if kit is not None else kit_source(source.name)
    student_text = read_student_text(source)
    if tasks is None:
        tasks = tuple(dict.fromkeys(r.task for r in regions.student_regions(student_text, source.name)))
    spliced = regions.splice(kit.read_text(encoding="utf-8"), student_text, tasks, filename=source.name)
    flags = module_flags(device_printf)
    key = cache_key(spliced.text, arch, flags=NVCC_FLAGS + flags + (() if source_rules else ("unruled",)))
    target = module_path(source, arch, key, cache)
    if use_cache and target.is_file():  # a module is written whole (a rename) and only after every check passed
        return ModuleBuild(target, arch, 0.0, True, kit=kit)
    own = source == kit  # the kit's own file (make check-cuda): every line is the file's to quote
    # The kit's build comes first, outside this module's lock: in a bundle the kit's copy of a file is the starter,
    # so an untouched file's module is the kit's own (one target, one lock, which a nested build would wait on).
    reference = (
        None
        if own
        else build_module(kit, arch, kit=kit, quiet=True, cache=kit_cache, limits=limits, device_printf=device_printf)
    )
    with _target_lock(target):
        if use_cache and target.is_file():  # built meanwhile: by another thread, or as the kit's own build above
            return ModuleBuild(target, arch, 0.0, True, kit=kit)
        if reuse_kit_build and reference is not None and reference.path.name == target.name:
            # The same text, flags and compiler as the kit's own build: that build is this module.
            _copy_into(reference.path, target)
            return ModuleBuild(target, arch, 0.0, True, kit=kit)
        if own:
            spliced.origin = list(range(1, spliced.text.count("\n") + 2))
        # The compiler reads the regions (the rules) while it compiles them: the module goes into the cache only
        # once both are done and the rules found nothing (a build that breaks a rule is never kept).
        with tempfile.TemporaryDirectory(prefix="kit-nvcc-") as work, ThreadPoolExecutor(max_workers=1) as compiling:
            compiled = compiling.submit(
                _compile_module,
                source,
                spliced,
                student_text if not own else spliced.text,
                Path(work),
                arch,
                flags,
                limits,
            )
            problems = (
                rules.check(
                    spliced.regions, spliced.text, spliced.spans, source.name, arch, spliced.origin, limits=limits
                )
                if source_rules
                else []
            )
            if problems:
                compiled.cancel()
                raise regions.problems_error(source.name, problems)
            result, built = compiled.result()
            if reference is not None:
                problems = rules.check_module(built, reference.path)
                if problems:
                    raise regions.problems_error(source.name, problems)
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_into(built, target)
    if not quiet and source not in _announced:
        _announced.add(source)
        print(
            f"[kit] built {source.name} for {arch} in {result.seconds:.1f} s (device code, {result.isolation})",
            file=sys.stderr,
        )
    return ModuleBuild(target, arch, result.seconds, False, kit=kit, isolation=result.isolation)


def _compile_module(
    source: Path,
    spliced,
    student_text: str,
    workdir: Path,
    arch: str,
    flags: tuple[str, ...],
    limits: confine.CompileLimits,
) -> tuple[confine.Confined, Path]:
    """nvcc -cubin on the spliced file in ``workdir``, inside the compile sandbox: (how it ran, the cubin)."""
    from assignment.cuda import regions

    (workdir / source.name).write_text(spliced.text, encoding="utf-8")
    output = f"{source.stem}.cubin"
    command = module_command(
        f"{confine.WORK_MOUNT}/{source.name}", f"{confine.WORK_MOUNT}/{output}", arch, confine.INCLUDE_MOUNT, flags
    )
    result = confine.run(command, workdir, INCLUDE_DIR, nvcc_real_path(), limits)
    built = workdir / output
    if result.timed_out or result.returncode != 0 or not built.is_file():
        diagnostics = parse_nvcc_output(result.output)
        raise CudaCompileError(
            regions.compile_message(
                source.name, diagnostics, student_text, spliced.origin, _resource_trouble(result, limits)
            ),
            source,
            diagnostics,
            result.output,
        )
    return result, built


def _copy_into(built: Path, target: Path) -> None:
    """Copy a cubin into the cache under a private name, then rename: a reader sees no module or a whole one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    shutil.copyfile(built, tmp)
    os.replace(tmp, target)


def _resource_trouble(result: confine.Confined, limits: confine.CompileLimits) -> str:
    """Why nvcc stopped, when it was a limit rather than an error in the code (else '')."""
    if result.timed_out:
        return f"nvcc ran past its {limits.wall_seconds:.0f} s limit and was stopped"
    if result.returncode is not None and result.returncode < 0:
        return f"nvcc was stopped by signal {-result.returncode} (CPU time or memory limit?)"
    if re.search(r"out of memory|std::bad_alloc|Cannot allocate memory|memory exhausted", result.output, re.I):
        return f"nvcc ran out of memory (the limit is {limits.address_space_bytes >> 30} GB of address space)"
    return ""


_STACK = re.compile(r"STACK:(\d+)")
_LOCAL = re.compile(r"LOCAL:(\d+)")


def local_memory_bytes(binary: Path) -> int | None:
    """The largest per-thread stack frame plus local memory of any kernel in ``binary`` (a cubin or a library;
    cuobjdump's resource report), or None where cuobjdump is missing."""
    tool = shutil.which("cuobjdump")
    if tool is None:
        return None
    proc = subprocess.run([tool, "--dump-resource-usage", str(binary)], capture_output=True, text=True)
    sizes = [int(a) + int(b) for a, b in zip(_STACK.findall(proc.stdout), _LOCAL.findall(proc.stdout))]
    return max(sizes, default=0)
