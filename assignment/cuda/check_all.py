"""``make check-cuda``: every .cu file as the kit builds it, its TODO regions checked by the grader's rules first
(without nvcc too), then its builds for sm_80 and sm_90a (Hopper's own target); a table of what passed.

    python -m assignment.cuda.check_all [DIR ...]   # default: solutions/, starter/ and the kit's assignment/model/
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from assignment.cuda import confine, regions, rules
from assignment.cuda.compiler import (
    REPO_ROOT,
    CudaCompileError,
    build_library,
    build_module,
    is_kit_source,
    kit_source,
    read_student_text,
)
from assignment.cuda.reading import ReadingError
from assignment.cuda.regions import RegionError
from assignment.cuda.toolchain import CHECK_ARCHS, CudaToolkitError, normalize_arch, nvcc_version


def _check_one(source: Path, arch: str, use_cache: bool) -> tuple[Path, str, float | None, str]:
    """A task's file as the kit builds it: its device module (its regions in the kit's copy of the file, or in
    itself where the kit has no copy of that name) and the kit's host library; a model kernel file: its
    library."""
    start = time.perf_counter()
    cached = []
    try:
        if source.parent.resolve() == (REPO_ROOT / "assignment" / "model").resolve():
            cached.append(build_library(source, arch, use_cache=use_cache, quiet=True).cached)
        else:
            try:
                kit = kit_source(source.name)
            except CudaToolkitError:
                kit = source
            built = build_module(source, arch, kit=kit, use_cache=use_cache, quiet=True)
            cached.append(built.cached)
            if is_kit_source(built.kit):
                cached.append(build_library(built.kit, arch, use_cache=use_cache, quiet=True).cached)
    except (CudaCompileError, RegionError, ReadingError, confine.IsolationUnavailable) as exc:
        return source, arch, None, f"{source}: {exc}"
    return source, arch, time.perf_counter() - start, "cached" if cached and all(cached) else ""


def region_problems(source: Path) -> str:
    """'' when the TODO regions of a task's file splice into the kit's copy of it and pass the region rules as
    written (what ``make submit`` checks first; no nvcc needed), else why, in the file's own lines. '' for the kit's
    own files and for a file the kit has no copy of (nothing is spliced into those)."""
    try:
        kit = kit_source(source.name)
    except CudaToolkitError:
        return ""
    if source.resolve() == kit.resolve():
        return ""
    try:
        text = read_student_text(source)
        tasks = tuple(dict.fromkeys(r.task for r in regions.student_regions(text, source.name)))
        spliced = regions.splice(kit.read_text(encoding="utf-8"), text, tasks, filename=source.name)
        problems = rules.check_regions(spliced.regions)
    except (regions.RegionError, ReadingError) as exc:
        return f"{_display(source)}: {exc}"
    return f"{_display(source)}: " + "; ".join(str(p) for p in problems) if problems else ""


def check_all(dirs: list[Path], archs: tuple[str, ...] = CHECK_ARCHS, jobs: int = 2, use_cache: bool = True) -> int:
    """Check every .cu under ``dirs`` (a .cu file given itself: that file): its TODO regions by the grader's rules
    (without nvcc too), then, where they pass, compile it for every arch; print a table; 0 when all pass and compile,
    2 when nvcc is missing."""
    sources = sorted({p.resolve() for d in map(Path, dirs) for p in ([d] if d.is_file() else d.rglob("*.cu"))})
    if not sources:
        print(f"no .cu files under {', '.join(map(str, dirs))}")
        return 0
    rejected = {s: why for s in sources if (why := region_problems(s))}
    width = max(len(_display(s)) for s in sources)
    try:
        nvcc_version()
    except CudaToolkitError as exc:
        print(f"{'file':<{width}}  TODO regions")
        for source in sources:
            print(f"{_display(source):<{width}}  {'FAILED' if source in rejected else 'regions ok'}")
        for message in rejected.values():
            print("\n" + message, file=sys.stderr)
        if rejected:
            return 1
        print(f"\nerror: {exc}: the TODO regions pass the grader's rules, but nothing was compiled", file=sys.stderr)
        return 2
    jobs_list = [(s, normalize_arch(a)) for s in sources for a in archs if s not in rejected]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:  # nvcc is a subprocess: threads suffice
        results = list(pool.map(lambda job: _check_one(job[0], job[1], use_cache), jobs_list))
    results += [(s, "-", None, why) for s, why in rejected.items()]
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
    unbuilt = f"; {len(rejected)} file(s) not built: their TODO regions break the grader's rules" if rejected else ""
    print(f"{len(jobs_list) - len(failures) + len(rejected)}/{len(jobs_list)} builds succeeded{unbuilt}")
    return 1 if failures else 0


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "dirs",
        nargs="*",
        metavar="DIR",
        help="check every .cu under DIR, or a .cu file itself (default: solutions/, starter/ and the kit's "
        "assignment/model/)",
    )
    parser.add_argument("--arch", action="append", help=f"architecture(s) to check (default: {' '.join(CHECK_ARCHS)})")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-cache", action="store_true", help="recompile even when a cached build exists")
    args = parser.parse_args(argv)
    dirs = [Path(d) for d in args.dirs] or [
        d for d in (REPO_ROOT / "solutions", REPO_ROOT / "starter", REPO_ROOT / "assignment" / "model") if d.is_dir()
    ]
    try:
        return check_all(dirs, tuple(args.arch or CHECK_ARCHS), args.jobs, use_cache=not args.no_cache)
    except (CudaToolkitError, confine.IsolationUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
