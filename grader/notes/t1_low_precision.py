# ruff: noqa: E701, E702  (an experiment script, kept as it was run)
"""How far apart are float32-accumulating and low-precision-accumulating t1 implementations?

For each dtype (fp16, bf16), device, causal flag and seed: the max abs error against a float64
reference of (a) the reference solution (upcast, float32 throughout, one rounding at the end),
(b) variants that keep intermediates in the input dtype, each divided by the error of the ideal
answer rounded to the dtype (the least error any implementation returning that dtype can have),
as the max over elements and as the mean.

    python grader/notes/t1_low_precision.py [SEEDS]      (from the kit's root; on a GPU host it adds CUDA rows)

The result set the t1 rule in the registry ([task.tolerance] float16/bfloat16 max_mean_error_ratio).
"""

import importlib.util
import math
import sys

import torch

sys.path.insert(0, ".")
from assignment.testing import max_abs_error, random_qkv, reference_attention  # noqa: E402

spec = importlib.util.spec_from_file_location("sol", "solutions/t1_attention.py")
sol = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sol)


def mask(lq, lk, device):
    i = torch.arange(lq, device=device)[:, None]
    j = torch.arange(lk, device=device)[None, :]
    return j > i + (lk - lq)


def naive_lowp(q, k, v, causal):  # everything in the input dtype (the old baseline)
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(mask(q.shape[2], k.shape[2], q.device), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def flash_lowp(q, k, v, causal, acc_dtype=None, bq=32, bk=64, stats_dtype=None, p_dtype=None):
    """Online softmax: scores and m, l in stats_dtype, acc in acc_dtype, P cast to p_dtype for P @ V."""
    dt = acc_dtype or q.dtype
    st = stats_dtype or dt
    pt = p_dtype or st
    B, H, lq, d = q.shape
    lk = k.shape[2]
    scale = 1.0 / math.sqrt(d)
    out = torch.empty_like(q)
    for q0 in range(0, lq, bq):
        q1 = min(q0 + bq, lq)
        m = torch.full((B, H, q1 - q0), float("-inf"), dtype=st, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(B, H, q1 - q0, d, dtype=dt, device=q.device)
        for k0 in range(0, lk, bk):
            k1 = min(k0 + bk, lk)
            s = (q[:, :, q0:q1].to(st) @ k[:, :, k0:k1].to(st).transpose(-2, -1)) * scale
            if causal:
                s = s.masked_fill(mask(lq, lk, q.device)[q0:q1, k0:k1], float("-inf"))
            mn = torch.maximum(m, s.amax(-1))
            sh = torch.where(torch.isfinite(mn), mn, torch.zeros_like(mn))
            p = torch.exp(s - sh[..., None])
            c = torch.exp(m - sh)
            l = c * l + p.sum(-1)
            pv = p.to(pt) @ v[:, :, k0:k1].to(pt)
            acc = c.to(dt)[..., None] * acc + pv.to(dt)
            m = mn
        out[:, :, q0:q1] = (acc.to(st) / torch.where(l > 0, l, torch.ones_like(l))[..., None]).to(q.dtype)
    return out


def main():
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    shapes = [(2, 2, 113, 203, 64), (1, 2, 250, 250, 128), (1, 1, 64, 1000, 32)]
    rows = []
    for device in devices:
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                stats = {}
                for seed in range(seeds):
                    shape = shapes[seed % len(shapes)]
                    q, k, v = random_qkv(*shape, seed=seed, device=device, dtype=dtype)
                    ref, _ = reference_attention(q, k, v, causal=causal)
                    rounding = max_abs_error(ref.to(dtype), ref)
                    cands = {
                        "solution_flash": sol.flash_attention_forward(q, k, v, causal=causal, block_q=32, block_k=64)[
                            0
                        ],
                        "solution_naive": sol.naive_attention(q, k, v, causal=causal),
                        "lowp_naive": naive_lowp(q, k, v, causal),
                        "lowp_flash": flash_lowp(q, k, v, causal),
                        "fp32_all_P_lowp": flash_lowp(
                            q, k, v, causal, acc_dtype=torch.float32, stats_dtype=torch.float32, p_dtype=dtype
                        ),
                        "fp32_stats_acc_lowp": flash_lowp(
                            q, k, v, causal, acc_dtype=dtype, stats_dtype=torch.float32, p_dtype=torch.float32
                        ),
                        "lowp_stats_acc_fp32": flash_lowp(
                            q, k, v, causal, acc_dtype=torch.float32, stats_dtype=dtype, p_dtype=dtype
                        ),
                    }
                    for name, out in cands.items():
                        if out is None:
                            continue
                        r = max_abs_error(out, ref) / rounding
                        fin = torch.isfinite(ref)
                        mean_r = float(
                            (out.double() - ref)[fin].abs().mean() / (ref.to(dtype).double() - ref)[fin].abs().mean()
                        )
                        stats.setdefault(name, []).append(r)
                        stats.setdefault(name + " (mean)", []).append(mean_r)
                for name, s in stats.items():
                    rows.append(
                        dict(
                            device=device,
                            dtype=str(dtype)[6:],
                            causal=causal,
                            impl=name,
                            min=min(s),
                            max=max(s),
                            median=sorted(s)[len(s) // 2],
                            n=len(s),
                        )
                    )
    print(
        f"{'device':6} {'dtype':9} {'causal':6} {'impl':22} {'min':>7} {'median':>7} {'max':>7}  (error / error of the rounded float64 answer)"
    )
    for r in rows:
        print(
            f"{r['device']:6} {r['dtype']:9} {str(r['causal']):6} {r['impl']:22} {r['min']:7.3f} {r['median']:7.3f} {r['max']:7.3f}"
        )


main()
