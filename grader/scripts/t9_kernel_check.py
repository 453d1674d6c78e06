"""t9 (FlashAttention-3 forward on Hopper): the reference kernel checked and timed on an H100/H200, standalone.

Before t9 has a registry entry, this script loads solutions/t9_flash_attention_hopper.cu itself as the kit would
(the file built as a device module for sm_90a and as the kit's host library, ``wrappers.load_kernels``) and calls
its KIT_API function with ctypes on torch tensors. The checks, the reference, the timing and the SDPA baselines
are t8's (grader/scripts/t8_kernel_check.py): the same rule, so that the two kernels' figures compare.

    python grader/scripts/t9_kernel_check.py --out DIR [--skip correctness,sanitize,bench,variants]
        correctness   t8's cases (odd lengths, Lq != Lk, GQA/MQA, rows that see no key, large logits, a
                      non-default scale, NaN-filled guard-banded outputs, bitwise repeatability) and refusals
        sanitize      compute-sanitizer memcheck and racecheck on ``--sanitize-launch``
        bench         t8's shapes (B 8 H 16 L 4096; B 1 H 32 H_kv 8 L 8192), d 64 and 128, causal or not, fp16 and
                      bf16: this kernel, SDPA's FLASH_ATTENTION (FA2) and CUDNN_ATTENTION backends
        variants      the schedule ablation (no ping-pong, no overlap inside a warpgroup, neither) and other tile
                      configurations, each a copy of the file with its Cfg changed, fp16
    python grader/scripts/t9_kernel_check.py --sanitize-launch      the small launches compute-sanitizer runs
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from ctypes import c_float, c_int, c_void_p
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "grader" / "scripts"))

import t8_kernel_check as t8check  # noqa: E402  (the shared checks and timing)

SOURCE = ROOT / "solutions" / "t9_flash_attention_hopper.cu"
VARIANT_DIR = ROOT / "build" / "t9var"
ARCH = "sm_90a"
INVALID_VALUE = 1  # cudaErrorInvalidValue

# Cfg lines per head dimension: {d: {field: value}} replacing the solution's (the others stay).
VARIANTS = {
    "base": {},
    "no_pingpong": {64: {"PINGPONG": "false"}, 128: {"PINGPONG": "false"}},
    "no_overlap": {64: {"OVERLAP": "false"}, 128: {"OVERLAP": "false"}},
    "plain": {64: {"PINGPONG": "false", "OVERLAP": "false"}, 128: {"PINGPONG": "false", "OVERLAP": "false"}},
    "c2_d64": {64: {"NCWG": "2", "CONSUMER_REGS": "240"}},
    "s2_d64": {64: {"STAGES": "2"}},
    "s3_d128": {128: {"STAGES": "3"}},
    "no_l2_groups": {64: {"L2_MB": "100000"}, 128: {"L2_MB": "100000"}},
    "l2_12mb": {64: {"L2_MB": "12"}, 128: {"L2_MB": "12"}},
    "persistent": {64: {"PERSISTENT": "true"}},
    "per_tile": {128: {"PERSISTENT": "false"}},
}


def variant_source(name: str) -> Path:
    if name == "base":
        return SOURCE
    text = SOURCE.read_text(encoding="utf-8")
    for d, fields in VARIANTS[name].items():
        block = re.search(rf"struct Cfg<{d}> \{{.*?\n\}};", text, re.S)
        if block is None:
            raise SystemExit(f"variant {name}: Cfg<{d}> not found in {SOURCE.name}")
        body = block.group(0)
        for field, value in fields.items():
            body, count = re.subn(rf"\b{field} = [^,;]+", f"{field} = {value}", body)
            if count != 1:
                raise SystemExit(f"variant {name}: {field} not found once in Cfg<{d}>")
        text = text.replace(block.group(0), body)
    path = VARIANT_DIR / name / SOURCE.name
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


class T9:
    """The KIT_API forward of one build of the file (the same call as t8's)."""

    def __init__(self, path: Path):
        from assignment.cuda import wrappers

        loaded = wrappers.load_kernels(path, arch=ARCH, kit=path)
        self.module = loaded.module
        self.fwd = loaded.host.t9_flash_attention_forward
        self.fwd.argtypes = (c_void_p,) * 6 + (c_int,) * 6 + (c_float, c_int, c_int, c_void_p)
        self.fwd.restype = c_int

    def raw(self, q, k, v, o, lse, dims, scale, causal, bf16) -> int:
        import torch

        stream = torch.cuda.current_stream().cuda_stream
        return self.fwd(self.module, q, k, v, o, lse, *dims, c_float(scale), int(causal), int(bf16), c_void_p(stream))

    def __call__(self, q, k, v, causal, scale=None, o=None, lse=None):
        import torch

        B, H, Lq, d = q.shape
        H_kv, Lk = k.shape[1], k.shape[2]
        scale = 1.0 / math.sqrt(d) if scale is None else scale
        o = torch.empty_like(q) if o is None else o
        lse = torch.empty(B, H, Lq, device=q.device, dtype=torch.float32) if lse is None else lse
        dims = (B, H, H_kv, Lq, Lk, d)
        code = self.raw(
            q.data_ptr(),
            k.data_ptr(),
            v.data_ptr(),
            o.data_ptr(),
            lse.data_ptr(),
            dims,
            scale,
            causal,
            q.dtype == torch.bfloat16,
        )
        if code != 0:
            raise RuntimeError(f"t9_flash_attention_forward returned {code}")
        return o, lse


def correctness(t9, log) -> bool:
    import torch

    ok_all, n = True, 0

    def report(ok: bool, text: str) -> None:
        nonlocal ok_all, n
        ok_all &= ok
        n += 1
        log(f"{'ok  ' if ok else 'FAIL'} {text}")

    for dtype in (torch.float16, torch.bfloat16):
        name = str(dtype)[6:]
        for d in (64, 128):
            for i, (B, H, H_kv, Lq, Lk, causal, note) in enumerate(t8check.CASES):
                ok, detail = t8check.check_case(t9, B, H, H_kv, Lq, Lk, d, causal, dtype, seed=1000 + i)
                report(
                    ok,
                    f"{name:8s} d {d:3d} B {B} H {H} H_kv {H_kv} Lq {Lq:5d} Lk {Lk:5d} causal {int(causal)}  "
                    f"{detail}  [{note}]",
                )
            for causal in (False, True):
                ok, detail = t8check.check_case(t9, 2, 4, 2, 333, 517, d, causal, dtype, seed=7, q_mult=8.0, k_mult=2.0)
                report(ok, f"{name:8s} d {d:3d} large logits (q x8, k x2) 333x517 causal {int(causal)}  {detail}")
            ok, detail = t8check.check_case(t9, 1, 2, 2, 190, 190, d, True, dtype, seed=8, scale=0.3)
            report(ok, f"{name:8s} d {d:3d} scale 0.3 190x190 causal 1  {detail}")
            ok, detail = t8check.check_case(t9, 2, 4, 4, 1024, 1024, d, False, dtype, seed=11)
            report(ok, f"{name:8s} d {d:3d} B 2 H 4 L 1024 (several key tiles per stage cycle)  {detail}")
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v = t8check.make_inputs(4, 16, 4, 2048, 2048, 128, dtype, seed=9)
        outs = [t9(q, k, v, True) for _ in range(3)]
        torch.cuda.synchronize()
        same = all(
            torch.equal(a.view(torch.int16), outs[0][0].view(torch.int16)) and torch.equal(b, outs[0][1])
            for a, b in outs
        )
        report(same, f"{str(dtype)[6:]:8s} repeatability, 3 runs of B 4 H 16 H_kv 4 L 2048 d 128 causal: bitwise equal")
    q, k, v = t8check.make_inputs(1, 4, 2, 64, 64, 64, torch.float16, seed=10)
    o = torch.empty_like(q)
    lse = torch.empty(1, 4, 64, device="cuda")
    p = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr())
    calls = {
        "d 32": ((1, 4, 2, 64, 64, 32), INVALID_VALUE, p),
        "d 96": ((1, 4, 2, 64, 64, 96), INVALID_VALUE, p),
        "H 4, H_kv 3": ((1, 4, 3, 64, 64, 64), INVALID_VALUE, p),
        "H_kv 0": ((1, 4, 0, 64, 64, 64), INVALID_VALUE, p),
        "Lq -1": ((1, 4, 2, -1, 64, 64), INVALID_VALUE, p),
        "q misaligned": ((1, 4, 2, 64, 64, 64), INVALID_VALUE, {**p, "q": p["q"] + 2}),
        "B 0": ((0, 4, 2, 64, 64, 64), 0, p),
        "Lq 0": ((1, 4, 2, 0, 64, 64), 0, p),
    }
    for name, (dims, want, ptrs) in calls.items():
        got = t9.raw(ptrs["q"], ptrs["k"], ptrs["v"], ptrs["o"], ptrs["lse"], dims, 0.125, 0, 0)
        report(got == want, f"refusal {name}: returned {got}, expected {want}")
    o.fill_(float("nan"))
    got = t9.raw(p["q"], p["k"], p["v"], p["o"], p["lse"], (1, 4, 2, 64, 0, 64), 0.125, 1, 0)
    torch.cuda.synchronize()
    fine = got == 0 and bool((o == 0).all()) and bool(torch.isneginf(lse).all())
    report(fine, f"Lk 0: returned {got}, O all 0 and LSE all -inf: {fine}")
    log(f"correctness: {'ALL PASS' if ok_all else 'FAILURES'} ({n} checks)")
    return ok_all


def sanitize_launch() -> int:
    import torch

    t9 = T9(SOURCE)
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            for B, H, H_kv, Lq, Lk, causal in [
                (1, 2, 1, 130, 70, True),
                (1, 2, 2, 70, 300, False),
                (1, 1, 1, 3, 200, True),
            ]:
                q, k, v = t8check.make_inputs(B, H, H_kv, Lq, Lk, d, dtype, seed=1)
                t9(q, k, v, causal)
    torch.cuda.synchronize()
    print("sanitize launches done")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "t9_check")
    parser.add_argument("--skip", default="", help="comma-separated: correctness,sanitize,bench,variants")
    parser.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "base"))
    parser.add_argument(
        "--compare", type=Path, action="append", default=[], help="another version of the file, timed beside (variants)"
    )
    parser.add_argument("--sanitize-launch", action="store_true")
    parser.add_argument("--prebuild", action="store_true", help="build base and variants into the cache (no GPU)")
    args = parser.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    if args.prebuild:
        from assignment.cuda import compiler

        for path in [*(variant_source(name) for name in ["base", *names]), *args.compare]:
            compiler.build_module(path, ARCH, kit=path, source_rules=False, quiet=True)
            compiler.build_library(path, ARCH, trusted=True, quiet=True)
            print(f"built {path}", flush=True)
        return 0
    if args.sanitize_launch:
        return sanitize_launch()

    import torch

    skip = set(filter(None, args.skip.split(",")))
    log = t8check.open_log(args.out / "t9_check.log")
    start = time.perf_counter()
    t9 = T9(SOURCE)
    log(f"loaded {SOURCE.name} in {time.perf_counter() - start:.1f} s")
    ok = True
    if "correctness" not in skip:
        log("\n===== correctness")
        ok &= correctness(t9, log)
    if "sanitize" not in skip:
        log("\n===== compute-sanitizer")
        ok &= t8check.sanitize(log, script=__file__)
    if "bench" not in skip:
        log("\n===== bench (ms per call, median of 15 batches)")
        t8check.bench({"t9": t9}, log)
    if "variants" not in skip:
        log(f"\n===== variants (fp16): {', '.join(f'{n}: {VARIANTS[n]}' for n in names)}")
        built = {"base": t9}
        for other in args.compare:  # a whole other version of the file (its folder's name names it)
            built[other.parent.name] = T9(other)
        for name in names:
            try:
                variant = T9(variant_source(name))
            except Exception as error:  # a variant that does not build is a finding, not the end of the run
                log(f"variant {name}: does not build: {str(error)[:300]}")
                continue
            good = all(
                t8check.check_case(variant, 1, 2, 2, 300, 333, d, c, torch.float16, seed=5)[0]
                for d in (64, 128)
                for c in (False, True)
            )
            log(f"variant {name}: quick correctness {'ok' if good else 'FAIL'}")
            if good:
                built[name] = variant
        t8check.bench(built, log, dtypes=(torch.float16,), cudnn=False)
    log(f"\ndone in {time.perf_counter() - start:.0f} s: {'OK' if ok else 'FAILURES'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
