"""A generated class for ``make grade-all`` (grader/records/class_h100.txt), and a slower honest variant.

    python grader/scripts/make_class.py CLASS_DIR [--variant DIR]

CLASS_DIR gets 16 submissions named by student id: the solutions five times over (three folders, a
``.zip``, one with a leaderboard name: five gradings of one tree inside one batch, for the fairness
figures), the starter, seven honest bugs and crashes and hangs taken from the adversarial fixtures
(grader/fixtures/fixtures.toml), and a partial submission that did t1-t3 only. ``--variant DIR`` writes
the solutions with two honest edits that keep every answer right: t5 computes every key tile and masks
it instead of skipping the tiles above the diagonal (2.0x the reference's time on an H100, and the hidden
structure checks notice), and t3's multiply-accumulate reads shared memory one float at a time, which
measured 1.000x (nvcc merges the four loads back into one): the control, a source edit the timing must
not see.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from grader.tools.adversarial import build_submission, load_fixtures  # noqa: E402

# student id -> the fixture it hands in (a solutions copy with one planted mistake)
FIXTURES = {
    "s03-t1-max-at-zero": "max-starts-at-zero",
    "s04-t2-race": "t2-race",
    "s05-t3-k-edge": "t3-k-edge-unguarded",
    "s06-t4-lse-base2": "t4-lse-in-base-2",
    "s07-t5-top-left": "t5-top-left",
    "s08-t7-top-k-ties": "t7-top-k-drops-ties",
    "s09-t4-illegal-address": "t4-illegal-address",
    "s10-t2-hang": "t2-hang",
    "s11-t1-infinite-loop": "infinite-loop",
}
KIT_FILES = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")

# The variant's edits: (file, the solutions' text, its replacement). Each must match exactly once.
T3_VECTOR = """#pragma unroll
        for (int s = 0; s < SUBM; ++s) {
          const float4 q = *reinterpret_cast<const float4*>(&as[k * LDA_S + s * STEP_M]);
          a[4 * s + 0] = q.x; a[4 * s + 1] = q.y; a[4 * s + 2] = q.z; a[4 * s + 3] = q.w;
        }
#pragma unroll
        for (int s = 0; s < SUBN; ++s) {
          const float4 q = *reinterpret_cast<const float4*>(&bs[k * LDB_S + s * STEP_N]);
          bv[4 * s + 0] = q.x; bv[4 * s + 1] = q.y; bv[4 * s + 2] = q.z; bv[4 * s + 3] = q.w;
        }"""
T3_SCALAR = """#pragma unroll
        for (int s = 0; s < SUBM; ++s)
#pragma unroll
          for (int e = 0; e < 4; ++e) a[4 * s + e] = as[k * LDA_S + s * STEP_M + e];
#pragma unroll
        for (int s = 0; s < SUBN; ++s)
#pragma unroll
          for (int e = 0; e < 4; ++e) bv[4 * s + e] = bs[k * LDB_S + s * STEP_N + e];"""
T5_SKIP = """    const int last = min(q0 + rows, Lq) - 1 + (Lk - Lq);
    return last < 0 ? 0 : min(n_tiles, last / bc + 1);"""
T5_NO_SKIP = """    // every key tile is computed; the element mask hides the keys a row must not see
    return n_tiles;"""
VARIANT_EDITS = [("t3_gemm.cu", T3_VECTOR, T3_SCALAR), ("t4_flash_attention.cu", T5_SKIP, T5_NO_SKIP)]


def write_variant(dest: Path) -> Path:
    """The solutions with the two slow-downs of VARIANT_EDITS (every answer still right)."""
    shutil.copytree(REPO / "solutions", dest, ignore=KIT_FILES)
    for name, old, new in VARIANT_EDITS:
        text = (dest / name).read_text(encoding="utf-8")
        if text.count(old) != 1:
            raise SystemExit(
                f"{name}: the text the variant replaces is not in solutions/ exactly once "
                f"({text.count(old)} times): update grader/scripts/make_class.py"
            )
        (dest / name).write_text(text.replace(old, new), encoding="utf-8")
    return dest


def write_class(out: Path) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    fixtures = {f.name: f for f in load_fixtures()}
    build = out.parent / (out.name + "-build")
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir()
    for sid, name in FIXTURES.items():
        shutil.move(str(build_submission(fixtures[name], build)), out / sid)
    shutil.rmtree(build)
    for sid in ("s01-solutions", "s14-solutions-again", "s15-solutions-once-more", "s16-solutions-on-the-board"):
        shutil.copytree(REPO / "solutions", out / sid, ignore=KIT_FILES)
    (out / "s16-solutions-on-the-board" / "leaderboard.txt").write_text("Fast Fox\n", encoding="utf-8")
    shutil.copytree(REPO / "starter", out / "s02-starter", ignore=KIT_FILES)
    partial = out / "s12-first-three-tasks"
    shutil.copytree(REPO / "starter", partial, ignore=KIT_FILES)
    for name in ("t1_attention.py", "t2_softmax.cu", "t3_gemm.cu"):
        shutil.copy(REPO / "solutions" / name, partial / name)
    (partial / "leaderboard.txt").write_text("Partial Pat\n", encoding="utf-8")
    with zipfile.ZipFile(out / "s13-zipped-solutions.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted((REPO / "solutions").iterdir()):
            if path.is_file():
                z.write(path, path.name)
    return sorted(p.name for p in out.iterdir())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the class folder to write (must not exist)")
    parser.add_argument("--variant", type=Path, default=None, help="also write the slower honest variant here")
    args = parser.parse_args(argv)
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: choose a new folder (nothing was written)")
    print("\n".join(write_class(args.out)))
    if args.variant:
        print(f"variant: {write_variant(args.variant)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
