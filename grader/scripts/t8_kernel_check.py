"""t8 (FlashAttention-2 forward on tensor cores): the reference kernel checked and timed on a GPU, standalone.

No registry entry for t8 exists yet, so this script loads solutions/t8_flash_attention_tc.cu itself, as the kit
would (the file built as a device module and as the kit's host library, ``wrappers.load_kernels``), and calls its
KIT_API function with ctypes on torch tensors.

    python grader/scripts/t8_kernel_check.py --out DIR [--skip correctness,sanitize,bench,variants]
        correctness   against an fp32 reference (torch math on float32 copies, TF32 off). The FlashAttention
                      repository's rule: max |O - ref| <= 2 x the max error of the same computation in the input
                      precision (scores, softmax and P V in fp16/bf16 with torch) + eps(dtype) / 10. LSE (fp32)
                      within 1e-3 + 1e-5 |ref|, -inf exactly where a row sees no key (and O exactly 0 there).
                      Outputs pre-filled with NaN inside guard-banded buffers (every element written, nothing past
                      the end), bitwise repeatability, argument refusals, the config index.
        sanitize      compute-sanitizer memcheck and racecheck on ``--sanitize-launch`` (no caching allocator:
                      every tensor is its own allocation)
        bench         B 8 H 16 L 4096 and B 1 H 32 H_kv 8 L 8192, d 64 and 128, causal or not, fp16 and bf16:
                      this kernel, SDPA's FLASH_ATTENTION backend (FA2) and its CUDNN_ATTENTION backend, in one
                      process, interleaved; CUDA events around batches of calls, median of the batches;
                      TFLOP/s = 4 B H Lq Lk d / t (causal: half)
        variants      other tile configurations of the same file (Cfg lines replaced), fp16, timed the same way
    python grader/scripts/t8_kernel_check.py --sanitize-launch      the small launches compute-sanitizer runs
    python grader/scripts/t8_kernel_check.py --prebuild sm_90       build base and variants into the cache (no GPU)

grader/scripts/t8_kernel_device.sh runs the four phases on a GPU host, one process each; figures and findings:
grader/records/t8_kernel_device.txt.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import time
from ctypes import c_float, c_int, c_void_p
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SOURCE = ROOT / "solutions" / "t8_flash_attention_tc.cu"
VARIANT_DIR = ROOT / "build" / "t8var"
INVALID_VALUE = 1  # cudaErrorInvalidValue

# Tile configurations to compare: {head dim: (NW, MT, BC, NSTAGE, MINB, QREG)} replacing the solution's Cfg<D>.
VARIANTS = {
    "base": {},
    "s3": {64: (4, 2, 64, 3, 2, True), 128: (4, 2, 64, 3, 2, False)},
    "m1bc128": {128: (8, 1, 128, 2, 1, True)},
}
BENCH_SHAPES = [(8, 16, 16, 4096, 4096), (1, 32, 8, 8192, 8192)]  # B, H, H_kv, Lq, Lk


def variant_source(name: str) -> Path:
    if name == "base":
        return SOURCE
    text = SOURCE.read_text(encoding="utf-8")
    for d, (nw, mt, bc, nstage, minb, qreg) in VARIANTS[name].items():
        body = f"static constexpr int NW = {nw}, MT = {mt}, BC = {bc}, NSTAGE = {nstage}, MINB = {minb}; "
        body += f"static constexpr bool QREG = {'true' if qreg else 'false'};"
        text, count = re.subn(rf"struct Cfg<{d}> {{ [^}}]* }};", f"struct Cfg<{d}> {{ {body} }};", text)
        if count != 1:
            raise SystemExit(f"variant {name}: Cfg<{d}> not found once in {SOURCE.name}")
    path = VARIANT_DIR / name / SOURCE.name
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def prebuild(arch: str, names: list[str]) -> None:
    from assignment.cuda import compiler

    for name in names:
        path = variant_source(name)
        start = time.perf_counter()
        compiler.build_module(path, arch, kit=path, source_rules=False, quiet=True)
        compiler.build_library(path, arch, trusted=True, quiet=True)
        print(f"built {name} for {arch} in {time.perf_counter() - start:.1f} s", flush=True)


# --------------------------------------------------------------------------- calling the kernel


class T8:
    """The KIT_API functions of one build of the file."""

    def __init__(self, path: Path):
        from assignment.cuda import wrappers

        loaded = wrappers.load_kernels(path, kit=path)
        self.module = loaded.module
        self.fwd = loaded.host.t8_flash_attention_forward
        self.fwd.argtypes = (c_void_p,) * 5 + (c_void_p,) + (c_int,) * 6 + (c_float, c_int, c_int, c_void_p)
        self.fwd.restype = c_int
        self.config = loaded.host.t8_flash_attention_config
        self.config.argtypes = (c_int,) * 6
        self.config.restype = c_int

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
        code = self.raw(
            q.data_ptr(),
            k.data_ptr(),
            v.data_ptr(),
            o.data_ptr(),
            lse.data_ptr(),
            (B, H, H_kv, Lq, Lk, d),
            scale,
            causal,
            q.dtype == torch.bfloat16,
        )
        if code != 0:
            raise RuntimeError(f"t8_flash_attention_forward returned {code}")
        return o, lse


# --------------------------------------------------------------------------- reference


def reference(q, k, v, causal: bool, scale: float, upcast: bool):
    """O and LSE by plain torch math: fp32 copies (upcast) or the input precision (the same-precision baseline).
    Rows that see no key: O = 0, LSE = -inf."""
    import torch

    dt = torch.float32 if upcast else q.dtype
    H, H_kv = q.shape[1], k.shape[1]
    qf, kf, vf = q.to(dt), k.to(dt).repeat_interleave(H // H_kv, 1), v.to(dt).repeat_interleave(H // H_kv, 1)
    s = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    Lq, Lk = q.shape[2], k.shape[2]
    if causal:
        i = torch.arange(Lq, device=q.device)[:, None]
        j = torch.arange(Lk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (Lk - Lq), float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.matmul(p, vf), lse


def make_inputs(B, H, H_kv, Lq, Lk, d, dtype, seed, q_mult=1.0, k_mult=1.0):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    q = (torch.randn(B, H, Lq, d, device="cuda", generator=g) * q_mult).to(dtype)
    k = (torch.randn(B, H_kv, Lk, d, device="cuda", generator=g) * k_mult).to(dtype)
    v = torch.randn(B, H_kv, Lk, d, device="cuda", generator=g).to(dtype)
    return q, k, v


# (B, H, H_kv, Lq, Lk, causal, note): run for d 64 and 128, fp16 and bf16.
CASES = [
    (2, 4, 4, 128, 128, False, "tile multiples"),
    (2, 4, 4, 128, 128, True, "tile multiples"),
    (1, 3, 3, 77, 133, False, "odd lengths, Lq < Lk"),
    (1, 3, 3, 77, 133, True, "odd lengths, Lq < Lk"),
    (2, 2, 1, 200, 333, False, "MQA, odd"),
    (2, 2, 1, 200, 333, True, "MQA, odd"),
    (1, 4, 2, 100, 300, True, "GQA, causal Lq < Lk"),
    (1, 2, 2, 300, 100, True, "causal Lq > Lk: 200 rows see no key"),
    (1, 2, 2, 300, 100, False, "Lq > Lk"),
    (2, 8, 2, 257, 257, True, "GQA 4:1"),
    (2, 8, 2, 257, 257, False, "GQA 4:1"),
    (1, 1, 1, 1, 1, False, "one row, one key"),
    (1, 1, 1, 1, 17, True, "one row"),
    (1, 1, 1, 5, 3, True, "tiny causal, 2 rows see no key"),
    (1, 2, 1, 129, 1, False, "one key"),
    (1, 2, 2, 1000, 1000, True, "mid-size causal"),
    (1, 2, 2, 1024, 4096, False, "long keys"),
    (1, 2, 2, 513, 2049, True, "long keys causal"),
]


def check_case(t8, B, H, H_kv, Lq, Lk, d, causal, dtype, seed, q_mult=1.0, k_mult=1.0, scale=None) -> tuple[bool, str]:
    import torch

    q, k, v = make_inputs(B, H, H_kv, Lq, Lk, d, dtype, seed, q_mult, k_mult)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    guard = 4096
    o_buf = torch.full((B * H * Lq * d + guard,), float("nan"), device="cuda", dtype=dtype)
    l_buf = torch.full((B * H * Lq + guard,), float("nan"), device="cuda", dtype=torch.float32)
    o = o_buf[: B * H * Lq * d].view(B, H, Lq, d)
    lse = l_buf[: B * H * Lq].view(B, H, Lq)
    t8(q, k, v, causal, scale, o, lse)
    torch.cuda.synchronize()
    o_ref, lse_ref = reference(q, k, v, causal, scale, upcast=True)
    o_pt, _ = reference(q, k, v, causal, scale, upcast=False)
    problems = []
    if not torch.isnan(o_buf[B * H * Lq * d :]).all() or not torch.isnan(l_buf[B * H * Lq :]).all():
        problems.append("wrote past the end")
    if torch.isnan(o).any() or torch.isnan(lse).any():
        problems.append(f"{int(torch.isnan(o).any(-1).sum())} rows unwritten (NaN)")
    err = (o.float() - o_ref).abs().max().item()
    err_pt = (o_pt.float() - o_ref).abs().max().item()
    floor = torch.finfo(dtype).eps / 10
    if not err <= 2 * err_pt + floor:
        problems.append(f"O error {err:.3g} > 2 x {err_pt:.3g} + {floor:.2g}")
    dead = torch.isinf(lse_ref)
    if not torch.equal(torch.isinf(lse) & (lse < 0), dead):
        problems.append("LSE -inf pattern differs")
    if dead.any() and (o[dead] != 0).any():
        problems.append("a row that sees no key has O != 0")
    live = ~dead
    lse_err = (lse[live] - lse_ref[live]).abs().max().item() if live.any() else 0.0
    if live.any() and not ((lse[live] - lse_ref[live]).abs() <= 1e-3 + 1e-5 * lse_ref[live].abs()).all():
        problems.append(f"LSE error {lse_err:.3g}")
    o2, lse2 = t8(q, k, v, causal, scale)
    torch.cuda.synchronize()
    if not (
        torch.equal(o2.view(torch.int16), o.view(torch.int16))
        and torch.equal(lse2.view(torch.int32), lse.view(torch.int32))
    ):
        problems.append("not bitwise repeatable")
    detail = f"err {err:.2e} (pt {err_pt:.2e}, ratio {err / err_pt if err_pt else float('inf'):.2f}) lse {lse_err:.1e}"
    return not problems, detail + ("" if not problems else "  FAIL: " + "; ".join(problems))


def correctness(t8, log) -> bool:
    import torch

    ok_all = True
    n = 0
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            for i, (B, H, H_kv, Lq, Lk, causal, note) in enumerate(CASES):
                ok, detail = check_case(t8, B, H, H_kv, Lq, Lk, d, causal, dtype, seed=1000 + i)
                ok_all &= ok
                n += 1
                log(
                    f"{'ok  ' if ok else 'FAIL'} {str(dtype)[6:]:8s} d {d:3d} B {B} H {H} H_kv {H_kv} Lq {Lq:5d} Lk {Lk:5d} "
                    f"causal {int(causal)}  {detail}  [{note}]"
                )
            # large logits (scores * scale with a standard deviation of ~16), and a non-default scale
            for causal in (False, True):
                ok, detail = check_case(t8, 2, 4, 2, 333, 517, d, causal, dtype, seed=7, q_mult=8.0, k_mult=2.0)
                ok_all &= ok
                n += 1
                log(
                    f"{'ok  ' if ok else 'FAIL'} {str(dtype)[6:]:8s} d {d:3d} large logits (q x8, k x2) 333x517 causal {int(causal)}  {detail}"
                )
            ok, detail = check_case(t8, 1, 2, 2, 190, 190, d, True, dtype, seed=8, scale=0.3)
            ok_all &= ok
            n += 1
            log(f"{'ok  ' if ok else 'FAIL'} {str(dtype)[6:]:8s} d {d:3d} scale 0.3 190x190 causal 1  {detail}")
    # bitwise repeatability on a launch of many blocks (several waves)
    for dtype in (torch.float16, torch.bfloat16):
        q, k, v = make_inputs(4, 16, 4, 2048, 2048, 128, dtype, seed=9)
        outs = [t8(q, k, v, True) for _ in range(3)]
        torch.cuda.synchronize()
        same = all(
            torch.equal(a.view(torch.int16), outs[0][0].view(torch.int16)) and torch.equal(b, outs[0][1])
            for a, b in outs
        )
        ok_all &= same
        n += 1
        log(
            f"{'ok  ' if same else 'FAIL'} {str(dtype)[6:]:8s} repeatability, 3 runs of B 4 H 16 H_kv 4 L 2048 d 128 causal: bitwise equal"
        )
    # refusals and empty calls
    q, k, v = make_inputs(1, 4, 2, 64, 64, 64, torch.float16, seed=10)
    o = torch.empty_like(q)
    lse = torch.empty(1, 4, 64, device="cuda")
    p = dict(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(), lse=lse.data_ptr())
    calls = {
        "d 32": ((1, 4, 2, 64, 64, 32), INVALID_VALUE, p),
        "d 96": ((1, 4, 2, 64, 64, 96), INVALID_VALUE, p),
        "H 4, H_kv 3": ((1, 4, 3, 64, 64, 64), INVALID_VALUE, p),
        "H_kv 0": ((1, 4, 0, 64, 64, 64), INVALID_VALUE, p),
        "Lq -1": ((1, 4, 2, -1, 64, 64), INVALID_VALUE, p),
        "B -1": ((-1, 4, 2, 64, 64, 64), INVALID_VALUE, p),
        "q misaligned": ((1, 4, 2, 64, 64, 64), INVALID_VALUE, {**p, "q": p["q"] + 2}),
        "B 0": ((0, 4, 2, 64, 64, 64), 0, p),
        "Lq 0": ((1, 4, 2, 0, 64, 64), 0, p),
    }
    for name, (dims, want, ptrs) in calls.items():
        got = t8.raw(ptrs["q"], ptrs["k"], ptrs["v"], ptrs["o"], ptrs["lse"], dims, 0.125, 0, 0)
        ok_all &= got == want
        n += 1
        log(f"{'ok  ' if got == want else 'FAIL'} refusal {name}: returned {got}, expected {want}")
    # Lk == 0 does not crash (the Python side handles it; the kernel gives O = 0 and LSE = -inf)
    o.fill_(float("nan"))
    got = t8.raw(p["q"], p["k"], p["v"], p["o"], p["lse"], (1, 4, 2, 64, 0, 64), 0.125, 1, 0)
    torch.cuda.synchronize()
    fine = got == 0 and bool((o == 0).all()) and bool(torch.isneginf(lse).all())
    ok_all &= fine
    n += 1
    log(f"{'ok  ' if fine else 'FAIL'} Lk 0: returned {got}, O all 0 and LSE all -inf: {fine}")
    configs = {t8.config(2, 4, 100, d, c, b) for d in (64, 128) for c in (0, 1) for b in (0, 1)}
    refused = [t8.config(2, 4, 100, 32, 0, 0), t8.config(0, 4, 100, 64, 0, 0), t8.config(2, 4, 0, 64, 0, 0)]
    fine = configs == set(range(8)) and refused == [-1, -1, -1]
    ok_all &= fine
    n += 1
    log(f"{'ok  ' if fine else 'FAIL'} config indices {sorted(configs)}, refusals {refused}")
    log(f"correctness: {'ALL PASS' if ok_all else 'FAILURES'} ({n} checks)")
    return ok_all


# --------------------------------------------------------------------------- sanitize


def sanitize_launch() -> int:
    """Small launches through every path (d, dtype, causal, GQA, partial tiles, rows that see nothing)."""
    import torch

    t8 = T8(SOURCE)
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            for B, H, H_kv, Lq, Lk, causal in [
                (1, 2, 1, 130, 70, True),
                (1, 2, 2, 70, 130, False),
                (1, 1, 1, 3, 200, True),
                (1, 2, 1, 64, 64, True),
            ]:
                q, k, v = make_inputs(B, H, H_kv, Lq, Lk, d, dtype, seed=1)
                t8(q, k, v, causal)
    torch.cuda.synchronize()
    print("sanitize launches done")
    return 0


def sanitize(log, script: str = __file__) -> bool:
    """compute-sanitizer memcheck and racecheck over ``script --sanitize-launch`` (t9's check reuses this)."""
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    ok_all = True
    for tool in ("memcheck", "racecheck"):
        cmd = [
            "compute-sanitizer",
            "--tool",
            tool,
            "--error-exitcode",
            "9",
            sys.executable,
            script,
            "--sanitize-launch",
        ]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400)
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
        ok = proc.returncode == 0
        ok_all &= ok
        log(
            f"{'ok  ' if ok else 'FAIL'} compute-sanitizer --tool {tool}: exit {proc.returncode} in {time.perf_counter() - start:.0f} s\n{tail}"
        )
    return ok_all


# --------------------------------------------------------------------------- timing


def time_batches(fns: dict, samples: int, batch: int, warmup: int = 3) -> dict[str, float]:
    """Median ms per call of each function; calls of one sample are enqueued back to back (the GPU never waits
    on Python), the functions interleaved sample by sample."""
    import torch

    for f in fns.values():
        for _ in range(warmup):
            f()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(samples):
        for name, f in fns.items():
            start.record()
            for _ in range(batch):
                f()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / batch)
    return {name: statistics.median(t) for name, t in times.items()}


def sdpa_fn(backend, q, k, v, causal):
    """A call of SDPA restricted to one backend (GQA natively where it can, else K/V repeated: marked '*')."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    gqa = q.shape[1] != k.shape[1]

    def call(k=k, v=v, gqa=gqa):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    try:
        out = call()
        return call, out, ""
    except RuntimeError:
        if not gqa:
            return None, None, "n/a"
        rep = q.shape[1] // k.shape[1]
        ke, ve = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        try:
            out = call(ke, ve, False)
            return (lambda: call(ke, ve, False)), out, "*"
        except RuntimeError:
            return None, None, "n/a"


def bench(t8_by_name: dict, log, dtypes=None, cudnn=True) -> None:
    """Each shape: the kernels of ``t8_by_name`` and SDPA's FLASH_ATTENTION backend (FA2) timed interleaved, then
    (``cudnn``) the CUDNN_ATTENTION backend on its own: it draws so much power that the kernel timed right after
    it runs at lower clocks for a while (seen on H100: up to 10% off a kernel interleaved with it)."""
    import torch
    from torch.nn.attention import SDPBackend

    dtypes = dtypes or (torch.float16, torch.bfloat16)
    names = list(t8_by_name)
    head = f"{'B':>2} {'H':>3} {'Hkv':>3} {'L':>5} {'d':>3} {'dtype':>8} {'causal':>6} |"
    head += "".join(f" {n + ' ms':>12} {'TFLOP/s':>8} |" for n in names)
    head += f" {'FA2 ms':>8} {'TFLOP/s':>8} |"
    if cudnn:
        head += f" {'cuDNN ms':>8} {'TFLOP/s':>8} |"
    head += "".join(f" {n + '/FA2':>10}" for n in names) + (f" {names[0] + '/cuDNN':>12}" if cudnn else "")
    log(head)
    for B, H, H_kv, L, _ in BENCH_SHAPES:
        for d in (64, 128):
            for dtype in dtypes:
                for causal in (False, True):
                    q, k, v = make_inputs(B, H, H_kv, L, L, d, dtype, seed=3)
                    o = torch.empty_like(q)
                    lse = torch.empty(B, H, L, device="cuda")
                    fns = {n: partial(t, q, k, v, causal, None, o, lse) for n, t in t8_by_name.items()}
                    marks = {}
                    f, ref, marks["FA2"] = sdpa_fn(SDPBackend.FLASH_ATTENTION, q, k, v, causal)
                    if f is not None:
                        fns["FA2"] = f
                    # outputs agree (a timed kernel that computes nonsense is no result)
                    agree = ""
                    if ref is not None:
                        diffs = []
                        for n in names:
                            fns[n]()
                            diffs.append((o.float() - ref.float()).abs().max().item())
                        agree = "  max|O-FA2| " + " ".join(f"{x:.1e}" for x in diffs)
                    flops = 4.0 * B * H * L * L * d * (0.5 if causal else 1.0)
                    batch = 5 if B * L >= 32768 else 10
                    ms = time_batches(fns, samples=15, batch=batch)
                    if cudnn:
                        f, _, marks["cuDNN"] = sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
                        if f is not None:
                            ms.update(time_batches({"cuDNN": f}, samples=15, batch=batch))
                    tf = {n: flops / (t * 1e-3) / 1e12 for n, t in ms.items()}
                    row = f"{B:>2} {H:>3} {H_kv:>3} {L:>5} {d:>3} {str(dtype)[6:]:>8} {int(causal):>6} |"
                    row += "".join(f" {ms[n]:>12.3f} {tf[n]:>8.1f} |" for n in names)
                    for label in ("FA2", "cuDNN") if cudnn else ("FA2",):
                        row += (
                            f" {ms[label]:>8.3f} {tf[label]:>7.1f}{marks[label] or ' '} |"
                            if label in ms
                            else f" {'n/a':>8} {'n/a':>8} |"
                        )
                    row += "".join(f" {ms['FA2'] / ms[n]:>9.2f}x" if "FA2" in ms else f" {'n/a':>10}" for n in names)
                    if cudnn:
                        row += f" {ms['cuDNN'] / ms[names[0]]:>11.2f}x" if "cuDNN" in ms else f" {'n/a':>12}"
                    log(row + agree)
                    fns.clear()
                    torch.cuda.empty_cache()
    log(
        "ratios: time of the reference / time of this kernel (> 1: this kernel is faster). '*': K/V repeated to H "
        "heads for that backend (it refused enable_gqa)."
    )


# --------------------------------------------------------------------------- main


def gpu_line() -> str:
    import torch

    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,clocks.max.sm,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        smi = "?"
    return f"{smi} | torch {torch.__version__} cuda {torch.version.cuda} cudnn {torch.backends.cudnn.version()}"


def open_log(path: Path):
    """float32 matmuls in full precision (no TF32), and a log function that prints and appends to ``path``, after a
    header line (the time, the command) and the GPU's (t9's check uses it too)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    path.parent.mkdir(parents=True, exist_ok=True)
    logfile = open(path, "a")

    def log(text: str) -> None:
        print(text, flush=True)
        logfile.write(text + "\n")
        logfile.flush()

    log(f"===== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(sys.argv)}")
    log(gpu_line())
    return log


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "t8_check")
    parser.add_argument("--skip", default="", help="comma-separated: correctness,sanitize,bench,variants")
    parser.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "base"))
    parser.add_argument("--sanitize-launch", action="store_true")
    parser.add_argument("--prebuild", metavar="ARCH")
    args = parser.parse_args(argv)
    if args.prebuild:
        prebuild(args.prebuild, ["base"] + [v for v in args.variants.split(",") if v])
        return 0
    if args.sanitize_launch:
        return sanitize_launch()

    import torch

    skip = set(filter(None, args.skip.split(",")))
    log = open_log(args.out / "t8_check.log")
    start = time.perf_counter()
    t8 = T8(SOURCE)
    log(f"loaded {SOURCE.name} in {time.perf_counter() - start:.1f} s")
    ok = True
    if "correctness" not in skip:
        log("\n===== correctness")
        ok &= correctness(t8, log)
    if "sanitize" not in skip:
        log("\n===== compute-sanitizer")
        ok &= sanitize(log)
    if "bench" not in skip:
        log("\n===== bench (ms per call, median of 15 batches)")
        bench({"t8": t8}, log)
    if "variants" not in skip:
        names = [v for v in args.variants.split(",") if v]
        log(f"\n===== variants (fp16): {', '.join(f'{n}: {VARIANTS[n]}' for n in names)}")
        built = {"base": t8}
        for name in names:
            path = variant_source(name)
            variant = T8(path)
            good = all(
                check_case(variant, 1, 2, 2, 300, 333, d, c, torch.float16, seed=5)[0]
                for d in (64, 128)
                for c in (False, True)
            )
            log(f"variant {name}: quick correctness {'ok' if good else 'FAIL'}")
            if good:
                built[name] = variant
        bench(built, log, dtypes=(torch.float16,), cudnn=False)
    log(f"\ndone in {time.perf_counter() - start:.0f} s: {'OK' if ok else 'FAILURES'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
