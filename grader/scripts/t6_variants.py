"""Issue 12: variants of the t6 split kernel timed side by side on a GPU (one process, candidates interleaved,
the kit's harness: cold L2, fresh inputs, medians), beside ``torch.sum`` over the same bytes (the read floor).

    python grader/scripts/t6_variants.py OUTDIR [VARIANT ...]      (default: every variant)
    SHAPES="B,H,H_kv,L,d;..." SPLITS=32,64 SPLITVAR=base CAP=6 ...   (shapes, a split sweep of one variant, time cap)
    python grader/scripts/t6_variants.py --calls DIR              (two decode calls per shape: for ncu)

Each variant is solutions/t6_decode_attention.cu with a few lines replaced, written to /tmp/t6var/NAME/ and built
by the kit's compiler; every variant but ``nocompute`` is checked against float64 on its first and last output.
  base       the solution as it is
  nocompute  the tile loop skips everything after its loads: the pipeline's bandwidth, with no arithmetic
  pf128/256  cp.async with an L2 prefetch-size hint (.L2::128B / .L2::256B)
  evict      cp.async with an L2 evict-first policy (the cache is read once)
  stage3/4   three or four pipeline stages instead of two (fewer blocks fit on an SM)
Figures and the findings they led to: grader/records/t6_decode_h100.txt.
"""

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SOURCE = ROOT / "solutions" / "t6_decode_attention.cu"
VARIANT_DIR = Path("/tmp/t6var")
SHAPES = [
    (1, 32, 8, 32768, 64),
    (1, 32, 8, 32768, 128),
    (1, 32, 8, 8192, 64),
    (1, 32, 8, 8192, 128),
    (8, 32, 8, 8192, 64),
    (8, 32, 8, 8192, 128),
]

LOADS = """        cp_async16(Ks + row * KROW + c, kb + off, ok ? 16 : 0);
        cp_async16(Vs + row * D4 + c, vb + off, ok ? 16 : 0);"""


def loads_with(qualifier: str, policy: bool = False) -> str:
    """The tile loads as inline cp.async with a qualifier (and an L2 cache policy operand)."""
    make_policy = (
        "            unsigned long long pol;\n"
        '            asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));\n'
        if policy
        else ""
    )
    extra, operand = (", %3", ', "l"(pol)') if policy else ("", "")
    lines = []
    for dst, src in (("Ks + row * KROW + c", "kb + off"), ("Vs + row * D4 + c", "vb + off")):
        lines.append(
            f'            asm volatile("cp.async.cg.shared.global{qualifier} [%0], [%1], 16, %2{extra};" '
            f':: "r"((unsigned)__cvta_generic_to_shared({dst})), "l"({src}), "r"(ok ? 16 : 0){operand} '
            ': "memory");'
        )
    return "        {\n" + make_policy + "\n".join(lines) + "\n        }"


COMMIT = """        cp_async_commit();
        const float4* Ks = stages + (t % NSTAGE) * STAGE;  // [TK][KROW]"""
STAGES = "constexpr int NSTAGE = 2;"
VARIANTS = {
    "base": [],
    "nocompute": [
        (COMMIT, COMMIT.replace("cp_async_commit();", "cp_async_commit();\n        if (qscale != -1.2345f) continue;"))
    ],
    "pf128": [(LOADS, loads_with(".L2::128B"))],
    "pf256": [(LOADS, loads_with(".L2::256B"))],
    "evict": [(LOADS, loads_with(".L2::cache_hint", policy=True))],
    "stage3": [(STAGES, "constexpr int NSTAGE = 3;")],
    "stage4": [(STAGES, "constexpr int NSTAGE = 4;")],
}


def write_variant(name: str) -> Path:
    text = SOURCE.read_text()
    for old, new in VARIANTS[name]:
        if text.count(old) != 1:
            raise SystemExit(f"variant {name}: the text it replaces is not in {SOURCE} exactly once: {old[:60]!r}")
        text = text.replace(old, new)
    folder = VARIANT_DIR / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "t6_decode_attention.cu").write_text(text)
    return folder


def decode_calls(impl: str) -> None:
    """Two calls per B 1 shape at L 32768 (for ncu -k regex:decode_)."""
    import torch

    from assignment.kernels import Kernels

    kernels = Kernels(impl)
    for B, H, H_kv, L, d in SHAPES[:2]:
        q = torch.randn(B, H, d, device="cuda")
        k, v = (torch.randn(B, H_kv, L, d, device="cuda") for _ in range(2))
        lengths = torch.full((B,), L, dtype=torch.int32, device="cuda")
        workspace = kernels.decode_workspace(q, k)
        for _ in range(2):
            kernels.decode_attention(q, k, v, lengths, workspace=workspace)
    torch.cuda.synchronize()


def float64_check(name, inputs, output) -> None:
    import torch

    if name == "read floor" or name.startswith("nocompute"):
        return
    q, k, v, lengths = inputs[:4]
    L = int(lengths[0])
    d = q.shape[-1]
    group = q.shape[1] // k.shape[1]
    kk = k[:, :, :L].double().repeat_interleave(group, 1)
    vv = v[:, :, :L].double().repeat_interleave(group, 1)
    p = torch.softmax(torch.einsum("bhd,bhld->bhl", q.double(), kk) / d**0.5, -1)
    err = (output.double() - torch.einsum("bhl,bhld->bhd", p, vv)).abs().max().item()
    if not err < 1e-4:
        raise AssertionError(f"{name}: max error {err:.3g} against float64")


def main() -> None:
    if sys.argv[1:2] == ["--calls"]:
        decode_calls(sys.argv[2])
        return
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    names = sys.argv[2:] or list(VARIANTS)
    folders = {name: write_variant(name) for name in names}
    from assignment.cuda.compiler import CudaCompileError, build_library, build_module

    def compile_one(name):
        start = time.time()
        try:
            source, arch = folders[name] / "t6_decode_attention.cu", os.environ.get("ARCH", "sm_90")
            build_module(source, arch, kit=source, quiet=True, source_rules=False)  # the kit's own experiment
            build_library(source, arch, quiet=True, trusted=True)
            return name, f"ok ({time.time() - start:.0f} s)"
        except CudaCompileError as exc:
            return name, f"FAILED\n{exc}"

    with ThreadPoolExecutor(8) as pool:
        built = dict(pool.map(compile_one, names))
    for name, verdict in built.items():
        print(f"build {name}: {verdict}", flush=True)
    names = [n for n in names if built[n].startswith("ok")]

    import torch

    from assignment.kernels import Kernels
    from assignment.perf import timing
    from assignment.perf.cases import decode_inputs, decode_work

    kernels = {name: Kernels(folders[name], kit=folders[name]) for name in names}  # each variant is its own kit
    copy = timing.copy_bandwidth()
    print(f"device copy {copy.gbps:.0f} GB/s (read + write)", flush=True)
    report = {"gpu": timing.gpu_info(), "copy_gbps": copy.gbps, "rows": []}
    shapes = SHAPES
    if os.environ.get("SHAPES"):
        shapes = [tuple(int(x) for x in s.split(",")) for s in os.environ["SHAPES"].split(";")]
    sweep = [int(n) for n in os.environ.get("SPLITS", "").split(",") if n]
    sweep_variant = os.environ.get("SPLITVAR", "base")

    def candidate(kern, splits=None):
        made = {}

        def call(x):
            if "workspace" not in made:
                made["workspace"] = kern.decode_workspace(x[0], x[1], num_splits=splits)
            return kern.decode_attention(*x[:4], workspace=made["workspace"])[0]

        return call

    for B, H, H_kv, L, d in shapes:
        make = decode_inputs(B, H, H_kv, L, d)
        nbytes = 8 * B * H_kv * L * d

        def inputs(i, make=make, nbytes=nbytes):
            return make(i) + (torch.ones(nbytes // 4, device="cuda"),)

        candidates = {name: candidate(kernels[name]) for name in names}
        if sweep_variant in kernels:
            candidates |= {f"{sweep_variant} s{n}": candidate(kernels[sweep_variant], n) for n in sweep}
        candidates["read floor"] = lambda x: torch.sum(x[4])
        flops, bytes_moved = decode_work(B, H, H_kv, L, d)
        results = timing.measure(
            candidates,
            inputs,
            check=float64_check,
            bytes_moved=bytes_moved,
            flops=flops,
            max_reps=60,
            time_cap_s=float(os.environ.get("CAP", "6")),
            enforce_floor=False,
        )
        chosen = {
            n: kernels[n]
            .decode_workspace(torch.empty(B, H, d, device="cuda"), torch.empty(B, H_kv, L, d, device="cuda"))
            .num_splits
            for n in names
        }
        print(f"\nB{B} H{H} H_kv{H_kv} L{L} d{d}  (the kit's split counts: {chosen})", flush=True)
        first = next(iter(results.values())).median_ms
        row = {"shape": [B, H, H_kv, L, d], "splits": chosen, "results": {}}
        for name, r in results.items():
            pct = 100 * r.gbps / copy.gbps
            print(
                f"  {name:<14} {r.median_ms * 1000:8.1f} us {pct:6.1f}% of copy  rse {100 * r.rse:.1f}%  "
                f"{r.median_ms / first:.3f}x {names[0] if names else ''}",
                flush=True,
            )
            row["results"][name] = {"ms": r.median_ms, "percent_of_copy": pct}
        report["rows"].append(row)
    (out / "t6_variants.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
