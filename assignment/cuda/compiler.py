"""Build a student's ``.cu`` file into a shared library with nvcc and load it with ctypes.

Why not a PyTorch C++ extension: one nvcc call on one file takes seconds, a
torch extension build takes close to a minute, and the student loop is
edit -> test -> edit. Libraries are cached by content (source, kit.cuh, flags,
nvcc version, architecture), so an unchanged file is never rebuilt, and two
implementations (the student's and the reference) load side by side in one
process: each library is its own ctypes handle.

    python -m assignment.cuda.compiler --check-all [DIR ...]   # compile every .cu for sm_80 and sm_90 (CI)
"""

from __future__ import annotations

import argparse
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
from functools import lru_cache
from pathlib import Path

from assignment.starter import todo_lines

REPO_ROOT = Path(__file__).resolve().parents[2]
INCLUDE_DIR = Path(__file__).resolve().parent / "include"
KIT_HEADER = INCLUDE_DIR / "kit.cuh"
NVCC_FLAGS = ("-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-shared", "-lineinfo")
CHECK_ARCHS = ("sm_80", "sm_90")
# The CUDA toolkits (major versions) the kit is built and tested with; the handout quotes them.
TOOLKIT_MAJORS = (12, 13)
# Lazy module loading keeps context creation cheap when a library holds many kernels.
os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")


class CudaToolkitError(RuntimeError):
    """nvcc is missing, or no architecture can be determined."""


class CudaCompileError(RuntimeError):
    """nvcc rejected a file. The message leads with file:line and the offending source line."""

    def __init__(self, message: str, source: Path, diagnostics: list["Diagnostic"], output: str):
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
    library: Path
    arch: str
    seconds: float
    cached: bool


# --------------------------------------------------------------------------- toolchain


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    nvcc = nvcc_path()
    if nvcc is None:
        versions = " or ".join(f"{major}.x" for major in TOOLKIT_MAJORS)
        raise CudaToolkitError(f"nvcc not found on PATH: install the CUDA toolkit ({versions}) or add its bin/ to PATH")
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout.strip()


def normalize_arch(arch: str) -> str:
    """'sm_90', '90', '9.0' or 'compute_90' -> 'sm_90'."""
    text = arch.strip().lower()
    match = re.fullmatch(r"(?:sm_|compute_)?(\d+)\.?(\d)?([a-z]?)", text)
    if not match:
        raise CudaToolkitError(f"KIT_CUDA_ARCH={arch!r} is not an architecture (expected e.g. sm_80 or sm_90)")
    major, minor, suffix = match.groups()
    return f"sm_{major}{minor or ''}{suffix}"


def detect_arch() -> str:
    """The architecture to build for: $KIT_CUDA_ARCH, else the current GPU's."""
    if os.environ.get("KIT_CUDA_ARCH"):
        return normalize_arch(os.environ["KIT_CUDA_ARCH"])
    import torch

    if not torch.cuda.is_available():
        raise CudaToolkitError("no CUDA GPU visible to PyTorch; set KIT_CUDA_ARCH=sm_90 (for example) to compile without one")
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def nvcc_command(source: Path, output: Path, arch: str) -> list[str]:
    number = arch.removeprefix("sm_")
    return [
        nvcc_path() or "nvcc", *NVCC_FLAGS, "-I", str(INCLUDE_DIR),
        "-gencode", f"arch=compute_{number},code=sm_{number}", "-o", str(output), str(source),
    ]


# --------------------------------------------------------------------------- cache


SOLUTIONS_DIR = REPO_ROOT / "solutions"


def cache_dir(source: Path | None = None) -> Path:
    """Where built libraries live. The reference solutions' builds have a cache of their own
    (``KIT_REFERENCE_CACHE_DIR``), so nothing built from other sources can stand in for them."""
    base = Path(os.environ.get("KIT_CACHE_DIR") or REPO_ROOT / ".kit_cache")
    if source is not None and Path(source).resolve().is_relative_to(SOLUTIONS_DIR.resolve()):
        return Path(os.environ.get("KIT_REFERENCE_CACHE_DIR") or base / "reference")
    return base / "cuda"


def cache_key(source_text: str, arch: str, *, flags: tuple[str, ...] = NVCC_FLAGS,
              header_text: str | None = None, compiler: str | None = None) -> str:
    """Content hash of everything that changes the library."""
    header_text = KIT_HEADER.read_text(encoding="utf-8") if header_text is None else header_text
    compiler = nvcc_version() if compiler is None else compiler
    digest = hashlib.sha256()
    for part in (source_text, header_text, "\0".join(flags), compiler, normalize_arch(arch)):
        digest.update(part.encode())
        digest.update(b"\0\1\0")  # separator so parts cannot run into each other
    return digest.hexdigest()[:24]


def library_path(source: Path, arch: str, key: str, cache: Path | None = None) -> Path:
    return (cache or cache_dir(source)) / f"{source.stem}-{normalize_arch(arch)}-{key}.so"


# --------------------------------------------------------------------------- compile errors

_NVCC_DIAG = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d+)\): (?P<sev>error|warning|catastrophic error)[^:]*: (?P<msg>.*)$")
_GCC_DIAG = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)? (?P<sev>error|fatal error|warning): (?P<msg>.*)$")


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


# --------------------------------------------------------------------------- build and load

_announced: set[Path] = set()
_handles: dict[tuple[Path, Path], ctypes.CDLL] = {}
_lock = threading.Lock()
_build_locks: dict[Path, threading.Lock] = {}  # one per library path, guarded by _build_locks_guard
_build_locks_guard = threading.Lock()  # not _lock: load_library holds that one while it builds


def build(source: Path | str, arch: str | None = None, *, use_cache: bool = True, quiet: bool = False,
          cache: Path | None = None, timeout_s: float | None = None) -> BuildResult:
    """Compile ``source`` for ``arch`` into ``cache`` (default: ``cache_dir(source)``), reusing a build of the
    same content. Raises CudaCompileError on a compile error, or when nvcc runs past ``timeout_s``."""
    source = Path(source).resolve()
    arch = normalize_arch(arch) if arch else detect_arch()
    text = source.read_text(encoding="utf-8")
    key = cache_key(text, arch)
    target = library_path(source, arch, key, cache)
    with _target_lock(target):  # threads building the same library (the grader's t4 and t5) build it once
        if use_cache and target.is_file():
            return BuildResult(target, arch, 0.0, cached=True)
        return _compile(source, target, arch, quiet, timeout_s)


def _target_lock(target: Path) -> threading.Lock:
    with _build_locks_guard:
        return _build_locks.setdefault(target, threading.Lock())


def _compile(source: Path, target: Path, arch: str, quiet: bool, timeout_s: float | None) -> BuildResult:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Compile to a private name and rename: a reader sees no library or a whole one.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".so.tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    start = time.perf_counter()
    try:
        try:
            proc = subprocess.run(nvcc_command(source, tmp, arch), capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise CudaCompileError(f"{source}: nvcc took longer than {timeout_s:.0f} s", source, [],
                                   "(timed out)") from None
        if proc.returncode != 0:
            message, diagnostics = format_compile_error(source, proc.stderr + proc.stdout, arch)
            raise CudaCompileError(message, source, diagnostics, proc.stderr + proc.stdout)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    seconds = time.perf_counter() - start
    if not quiet and source not in _announced:
        _announced.add(source)
        print(f"[kit] built {source.name} for {arch} in {seconds:.1f} s -> {target}", file=sys.stderr)
    return BuildResult(target, arch, seconds, cached=False)


def require_implemented(source: Path | str, tasks: tuple[str, ...] | list[str], kernel: str = "") -> None:
    """Raise NotImplementedError when ``source`` still has ``KIT_TODO`` for one of ``tasks``.

    Runs before anything is compiled or launched: a starter's KIT_TODO is a
    __trap(), and a trap would poison the CUDA context of the whole test session.
    """
    source = Path(source)
    missing = todo_lines(source.read_text(encoding="utf-8"))
    for task in tasks:
        if task in missing:
            lines = [str(i) for i in missing[task]]
            where = f"KIT_TODO({task}) on line{'s' if len(lines) > 1 else ''} {', '.join(lines)}"
            what = f"; {kernel} was not launched" if kernel else ""
            raise NotImplementedError(f"{task}: TODO({task}) in {source.name} is not implemented yet ({where}{what})")


def load_library(source: Path | str, tasks: tuple[str, ...] | list[str] = (), arch: str | None = None) -> ctypes.CDLL:
    """Build (or reuse) and dlopen the library for ``source``; one handle per (file, build)."""
    source = Path(source).resolve()
    require_implemented(source, tasks)
    with _lock:
        result = build(source, arch)
        handle_key = (source, result.library)
        if handle_key not in _handles:
            _handles[handle_key] = ctypes.CDLL(str(result.library))
        return _handles[handle_key]


_STACK = re.compile(r"STACK:(\d+)")
_LOCAL = re.compile(r"LOCAL:(\d+)")


def local_memory_bytes(library: Path) -> int | None:
    """The largest per-thread stack frame plus local memory of any kernel in ``library`` (cuobjdump's
    resource report), or None where cuobjdump is missing."""
    tool = shutil.which("cuobjdump")
    if tool is None:
        return None
    proc = subprocess.run([tool, "--dump-resource-usage", str(library)], capture_output=True, text=True)
    sizes = [int(a) + int(b) for a, b in zip(_STACK.findall(proc.stdout), _LOCAL.findall(proc.stdout))]
    return max(sizes, default=0)


# --------------------------------------------------------------------------- CLI: --check-all


def _check_one(source: Path, arch: str, use_cache: bool) -> tuple[Path, str, float | None, str]:
    start = time.perf_counter()
    try:
        result = build(source, arch, use_cache=use_cache, quiet=True)
    except CudaCompileError as exc:
        return source, arch, None, str(exc)
    return source, arch, time.perf_counter() - start, "cached" if result.cached else ""


def check_all(dirs: list[Path], archs: tuple[str, ...] = CHECK_ARCHS, jobs: int = 2, use_cache: bool = True) -> int:
    """Compile every .cu under ``dirs`` for every arch; print a table; 0 when all compile."""
    sources = sorted({p.resolve() for d in dirs for p in Path(d).rglob("*.cu")})
    if not sources:
        print(f"no .cu files under {', '.join(map(str, dirs))}")
        return 0
    nvcc_version()  # fail early and clearly when nvcc is missing
    jobs_list = [(s, normalize_arch(a)) for s in sources for a in archs]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:  # nvcc is a subprocess: threads suffice
        results = list(pool.map(lambda job: _check_one(job[0], job[1], use_cache), jobs_list))
    width = max(len(_display(s)) for s in sources)
    print(f"{'file':<{width}}  {'arch':<6}  {'seconds':>8}  status")
    failures = []
    for source, arch, seconds, note in results:
        status = "FAILED" if seconds is None else ("ok" + (f" ({note})" if note else ""))
        shown = "-" if seconds is None else f"{seconds:.2f}"
        print(f"{_display(source):<{width}}  {arch:<6}  {shown:>8}  {status}")
        if seconds is None:
            failures.append(note)
    for message in failures:
        print("\n" + message, file=sys.stderr)
    print(f"{len(results) - len(failures)}/{len(results)} builds succeeded")
    return 1 if failures else 0


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check-all", nargs="*", metavar="DIR", default=None,
                        help="compile every .cu under DIR (default: solutions/, starter/ and the kit's assignment/model/)")
    parser.add_argument("--arch", action="append", help=f"architecture(s) to check (default: {' '.join(CHECK_ARCHS)})")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-cache", action="store_true", help="recompile even when a cached build exists")
    args = parser.parse_args(argv)
    if args.check_all is None:
        parser.print_help()
        return 2
    dirs = [Path(d) for d in args.check_all] or [d for d in (REPO_ROOT / "solutions", REPO_ROOT / "starter",
                                                             REPO_ROOT / "assignment" / "model") if d.is_dir()]
    try:
        return check_all(dirs, tuple(args.arch or CHECK_ARCHS), args.jobs, use_cache=not args.no_cache)
    except CudaToolkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
