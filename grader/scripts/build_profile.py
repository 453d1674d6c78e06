"""Where a student's build of t4's file spends its time on this host: nvcc alone, nvcc in the compile sandbox, and the
region rules (the compiler's two readings of the file). ``python3 grader/scripts/build_profile.py`` (issue 35)."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from assignment.cuda import compiler, confine, regions, rules

SOURCE = Path(__file__).resolve().parents[2] / "solutions" / "t4_flash_attention.cu"


def seconds(what, *args, **kwargs) -> float:
    began = time.perf_counter()
    what(*args, **kwargs)
    return time.perf_counter() - began


def main() -> None:
    arch = compiler.detect_arch()
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        student = folder / SOURCE.name
        lines = SOURCE.read_text().splitlines(keepends=True)
        first = next(i for i, line in enumerate(lines) if "// BEGIN SOLUTION t4" in line)
        student.write_text(
            "".join(lines[: first + 1] + ["// a comment: this region is a student's\n"] + lines[first + 1 :])
        )
        plain = [compiler.nvcc_real_path(), *compiler.NVCC_FLAGS, "-cubin", f"-arch={arch}"]
        plain += ["-I", str(compiler.INCLUDE_DIR), "-o", str(folder / "plain.cubin"), str(SOURCE)]
        print(f"nvcc -cubin, no sandbox: {seconds(subprocess.run, plain, check=True):.1f} s")
        text = compiler.read_student_text(student)
        spliced = regions.splice(SOURCE.read_text(), text, ("t4",), filename=SOURCE.name)
        took = seconds(rules.check, spliced.regions, spliced.text, spliced.spans, SOURCE.name, arch, spliced.origin)
        print(f"the region rules (the kit's reading not yet made): {took:.1f} s")
        cache = folder / "cache"
        took = seconds(compiler.build_module, SOURCE, arch, cache=cache, kit_cache=cache, quiet=True)
        print(f"the kit's build (sandbox: {confine.isolation_level()}): {took:.1f} s")
        took = seconds(compiler.build_module, student, arch, cache=cache, kit_cache=cache, quiet=True, tasks=("t4",))
        print(f"a student's build (sandbox, rules while it compiles): {took:.1f} s")


if __name__ == "__main__":
    main()
