"""``make bench T=t6``, the model table: time to first token and time between tokens of a 1B model, four ways.

The table belongs to the task whose code has a model bench (``TaskCode.model_bench``: t6), and its student path
runs that task's model attention (``TaskCode.model_attention``), one whose cache attends.

    python -m assignment.commands.bench --task t6 [--quick] [--model-only | --no-model]
    python -m assignment.perf.model_bench --plot-only build/bench/t6.json     # re-plot saved results

The Llama-3.2-1B configuration with random float32 weights made on the GPU (presets.random_model: no
download), batch 1, greedy decoding of 128 new tokens after prompts of 128 and 1024 tokens, four ways over
the same weight tensors (presets.sharing_weights: no copies):

    naive         no KV cache: every step runs model.forward over the whole sequence so far with the reference
                  attention and keeps the last position's logits
    student       attention "t6" (the task's): IMPL's t6_kv_cache.py and kernels (prefill through t5, decode through t6), the
                  decode step captured once in a CUDA graph (GraphDecoder) and replayed; timed eagerly, and said
                  so, if it cannot be captured
    reference     the same with solutions' cache and kernels (absent from a student bundle)
    transformers  LlamaForCausalLM.generate on the same tensors (its default attention and dynamic cache)

Timing is what a user sees: torch.cuda.synchronize() and time.perf_counter() around each token, the argmax
that picks it included. TTFT is the prefill plus the first token, median of a few repetitions after a
warm-up; TBT is the median of the intervals between the new tokens, and tokens/s the decode rate 1000 / TBT.
The memory roofline of a decode step is the bytes it must read (every weight once, the KV cache so far) at
the device's measured copy bandwidth; a row's "% roofline" is roofline TBT / TBT at the median step's context.
The paths must agree: the first logits of each are compared with the naive path's, and the generated
tokens too (reported, not asserted: random weights make near-ties). A TBT-against-context sweep feeds two
plots, t6_model_tbt.png and t6_model_roofline.png (``model_table.plot_names``) beside the bench's JSON, whose
"model" key holds it all.
The student's path runs last, so that a crash in it cannot spoil the others' numbers.

Here: the settings, the roofline, the four contenders and the run, and a prompt's rows; the paths and their timing
are model_paths.py's, the table's printing and plots model_table.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from assignment.model.attention_choice import ModelAttention
from assignment.perf.model_paths import (
    CachedPath,
    Generation,
    NaivePath,
    first_line,
    hf_model,
    hf_timed_generation,
    timed_generation,
)
from assignment.perf.model_table import PATHS, cell, format_header, format_report, plot

PRESET = "llama-3.2-1b"
SEED = 0
BYTES_PER_VALUE = 4  # float32 weights and cache
# First-step logits of a path against the naive path's: the largest |difference| over the largest |logit|.
# Loose on purpose (the tests grade correctness with the registry's tolerance; float32 paths measure ~1e-6):
# the bench flags a fast-but-wrong path, it does not grade one.
MAX_RELATIVE_LOGIT_DIFFERENCE = 1e-3
RUN_ORDER = ("naive", "reference", "transformers", "student")  # the student's code last


@dataclass(frozen=True)
class Settings:
    prompts: tuple[int, ...] = (128, 1024)
    new_tokens: int = 128
    ttft_reps: int = 5
    warmup_steps: int = 3
    sweep_prompts: tuple[int, ...] = (128, 512, 1024, 2048, 4096)
    naive_sweep_prompts: tuple[int, ...] = (128, 512, 1024, 2048)  # a forward over 4096 tokens per step: skipped
    sweep_steps: int = 16
    naive_sweep_steps: int = 4


FULL = Settings()
QUICK = Settings(
    prompts=(128,),
    new_tokens=32,
    ttft_reps=3,
    warmup_steps=2,
    sweep_prompts=(128, 512, 1024),
    naive_sweep_prompts=(128, 512),
    sweep_steps=8,
    naive_sweep_steps=3,
)


# For the decode-step timing rule alone (make bench T=t6 --targets): the rule's context, no sweep.
TARGETS = Settings(
    prompts=(1024,), new_tokens=32, ttft_reps=1, warmup_steps=2, sweep_prompts=(), naive_sweep_prompts=()
)


# --------------------------------------------------------------------------- the roofline (no GPU)


def parameter_count(config) -> int:
    """Parameters of a LLaMA-family model of this config, tied embeddings counted once."""
    h, inner, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    q_out, kv_out = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    attention = h * q_out + 2 * h * kv_out + q_out * h
    if config.attention_bias:
        attention += q_out + 2 * kv_out + h
    mlp = 3 * h * inner + (2 * inner + h if config.mlp_bias else 0)
    per_layer = attention + mlp + 2 * h  # + the two RMSNorm weights
    embeddings = config.vocab_size * h * (1 if config.tie_word_embeddings else 2)
    return embeddings + layers * per_layer + h  # + the final norm


def kv_bytes_per_token(config) -> int:
    """K and V of one position in every layer: what a decode step reads per token of context."""
    return config.num_hidden_layers * 2 * config.num_key_value_heads * config.head_dim * BYTES_PER_VALUE


def decode_bytes(config, context: int) -> int:
    """Bytes one decode step must read: every weight once, and the KV cache of ``context`` positions."""
    return parameter_count(config) * BYTES_PER_VALUE + kv_bytes_per_token(config) * context


def roofline_tbt_ms(config, context: int, bandwidth_gbps: float) -> float:
    """The least time between tokens: ``decode_bytes`` at the device's copy bandwidth (GB/s)."""
    return decode_bytes(config, context) / (bandwidth_gbps * 1e9) * 1e3


# --------------------------------------------------------------------------- the four contenders (GPU)


Runner = Callable[..., Generation]  # (prompt, new_tokens, ttft_reps=, warmup_steps=) -> Generation


@dataclass
class Contender:
    name: str
    label: str
    make: Callable[[int], Runner] | None = None  # max_len -> a runner over caches of that capacity
    mode: str = ""  # the cached paths: "CUDA graph", or "eager" when capture failed
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{self.label}, {self.mode}" if self.mode else self.label


def _cached_contender(name: str, task: str, model, cache_cls) -> Contender:
    """A path of ``task``'s cache: caches of ``cache_cls`` on ``model``, the decode step in a CUDA graph (else eager,
    with a note)."""
    from assignment.model.cuda_graph import GraphCaptureError, GraphDecoder

    contender = Contender(name, f"{name} ({task})", mode="CUDA graph")

    def make(max_len: int) -> Runner:
        model.setup_caches(1, max_len, cache_cls=cache_cls)
        runner = model
        if contender.mode == "CUDA graph":
            try:
                with torch.no_grad():
                    runner = GraphDecoder(model)
            except GraphCaptureError as exc:
                torch.cuda.synchronize()
                contender.mode = "eager"
                contender.notes.append(
                    f"{name}: the decode step could not be captured in a CUDA graph, so it is "
                    f"timed eagerly (one launch per kernel): {first_line(exc)}"
                )
        path = CachedPath(runner, max_len, model.device)
        return lambda prompt, n, **kw: timed_generation(path, prompt, n, **kw)

    contender.make = make
    return contender


def _contenders(base, attention: ModelAttention) -> tuple[dict[str, Contender], dict[str, str]]:
    """The four paths over ``base``'s weights (the student's and the reference's through the task's ``attention``
    and cache), and why any that cannot be set up is left out."""
    from assignment.impl import has_solutions
    from assignment.model.attention import cache_class
    from assignment.model.presets import sharing_weights

    contenders: dict[str, Contender] = {}
    missing: dict[str, str] = {}
    contenders["naive"] = Contender(
        "naive",
        "naive (no cache)",
        make=lambda max_len: lambda prompt, n, **kw: timed_generation(NaivePath(base, max_len), prompt, n, **kw),
    )
    for name, impl in (("student", None), ("reference", "solutions")):
        if name == "reference" and not has_solutions():
            continue  # a student bundle: no reference solutions, and nothing to say about it
        try:
            twin = sharing_weights(base, attention)
            contenders[name] = _cached_contender(name, attention.name, twin, cache_class(attention, impl))
        except Exception as exc:  # noqa: BLE001 -- a missing file, a TODO, a build error: the others still run
            missing[name] = first_line(exc)
    try:
        hf = hf_model(base)
        label = f"transformers ({hf.config._attn_implementation})"
        contenders["transformers"] = Contender(
            "transformers", label, make=lambda max_len: lambda prompt, n, **kw: hf_timed_generation(hf, prompt, n, **kw)
        )
    except ImportError as exc:
        missing["transformers"] = f"{first_line(exc)} (pip install transformers)"
    except Exception as exc:  # noqa: BLE001 -- a transformers version the kit does not know
        missing["transformers"] = first_line(exc)
    return contenders, missing


def random_prompt(length: int, vocab_size: int, device, seed: int = SEED) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed * 100_003 + length)
    return torch.randint(0, vocab_size, (1, length), generator=generator).to(device)


def run(
    attention: ModelAttention,
    copy_gbps: float,
    quick: bool = False,
    out: Path | None = None,
    settings: Settings | None = None,
    *,
    preset: str = PRESET,
    device: str = "cuda",
) -> dict:
    """Time the four paths of the model table of ``attention``'s task (its cache's), print it, write the plots under
    ``out``; the report (JSON-ready).

    One path at a time, its prompts and then its sweep, the student's last: a crash in the student's code (an
    illegal address ends the CUDA context) cannot spoil the others' figures. ``preset`` and ``device`` are for
    the kit's tests (the tiny preset on the CPU, where the t6 paths, which need CUDA, are reported as skipped)."""
    from assignment.model.presets import random_model

    settings = settings or (QUICK if quick else FULL)
    base = random_model(preset, device=device, seed=SEED)
    config = base.config
    report: dict[str, Any] = {
        "task": attention.name,
        "preset": preset,
        "dtype": "float32",
        "batch": 1,
        "seed": SEED,
        "settings": asdict(settings),
        "gpu_name": torch.cuda.get_device_name(device) if base.device.type == "cuda" else str(device),
        "parameters": parameter_count(config),
        "weight_bytes": parameter_count(config) * BYTES_PER_VALUE,
        "kv_bytes_per_token": kv_bytes_per_token(config),
        "copy_gbps": copy_gbps,
        "new_tokens": settings.new_tokens,
        "paths": {},
        "prompts": [],
        "sweep": [],
        "notes": [],
        "plots": [],
    }
    print(
        f"\n{format_header(report)}\ntiming the paths one at a time (the student's last), each at prompts of "
        f"{', '.join(map(str, settings.prompts))} tokens and then against the context:",
        flush=True,
    )
    contenders, missing = _contenders(base, attention)
    prompts = {n: random_prompt(n, config.vocab_size, base.device) for n in settings.prompts}
    runs: dict[int, dict[str, Generation | str]] = {n: dict(missing) for n in settings.prompts}
    for name in RUN_ORDER:
        if name not in contenders:
            print(f"  {name:<28} skipped: {missing[name]}", flush=True)
            continue
        contender = contenders[name]
        for prompt_len, prompt in prompts.items():
            result = _attempt(
                contender,
                prompt_len + settings.new_tokens,
                prompt,
                settings.new_tokens,
                settings.ttft_reps,
                settings.warmup_steps,
            )
            runs[prompt_len][name] = result
            shown = (
                f"TTFT {result.ttft_ms:.2f} ms, TBT {cell(result.tbt_ms, '.3f')} ms"
                if isinstance(result, Generation)
                else f"skipped: {result}"
            )
            print(f"  {contender.title:<28} prompt {prompt_len}: {shown}", flush=True)
        if all(isinstance(runs[n][name], Generation) for n in prompts):
            report["sweep"] += sweep(contender, config, base.device, settings, copy_gbps)
    for prompt_len in settings.prompts:
        context = prompt_len + settings.new_tokens // 2
        report["prompts"].append(summarize_prompt(prompt_len, context, runs[prompt_len], config, copy_gbps))
    report["paths"] = {
        name: {
            "label": contenders[name].title if name in contenders else name,
            "mode": contenders[name].mode if name in contenders else "",
            "skipped": missing.get(name),
        }
        for name in PATHS
        if name in contenders or name in missing
    }
    report["notes"] = list(dict.fromkeys(note for c in contenders.values() for note in c.notes))
    print(format_report(report, header=False), flush=True)
    if out is not None:
        report["plots"] = [str(p) for p in plot(report, out)]
        for path in report["plots"]:
            print(f"wrote {path}")
    del contenders, base
    _free_cuda_cache()
    return report


def _free_cuda_cache() -> None:
    try:
        torch.cuda.empty_cache()
    except RuntimeError:  # a CUDA context ended by an illegal address: the error was reported where it happened
        pass


def _attempt(
    contender: Contender, max_len: int, prompt, new_tokens: int, ttft_reps: int, warmup_steps: int
) -> Generation | str:
    """The contender's timed generation, or why it could not run (its first line)."""
    try:
        return contender.make(max_len)(prompt, new_tokens, ttft_reps=ttft_reps, warmup_steps=warmup_steps)
    except Exception as exc:  # noqa: BLE001 -- a TODO, a crash, out of memory: in the table, the rest goes on
        _free_cuda_cache()
        return first_line(exc)


def sweep(contender: Contender, config, device, settings: Settings, copy_gbps: float) -> list[dict]:
    """TBT at a few context lengths: a prompt of that length, then a few steps (the median of their intervals)."""
    naive = contender.name == "naive"
    prompts = settings.naive_sweep_prompts if naive else settings.sweep_prompts
    steps = settings.naive_sweep_steps if naive else settings.sweep_steps
    points, shown = [], []
    if not prompts:
        return points
    for prompt_len in prompts:
        prompt = random_prompt(prompt_len, config.vocab_size, device)
        result = _attempt(contender, prompt_len + steps + 1, prompt, steps + 1, 1, 2)
        if isinstance(result, str):  # out of memory at a long context, say: the longer ones are left out
            points.append({"path": contender.name, "prompt": prompt_len, "skipped": result})
            shown.append(f"{prompt_len}: {result}")
            break
        context = prompt_len + steps // 2
        points.append(
            {
                "path": contender.name,
                "prompt": prompt_len,
                "context": context,
                "tbt_ms": result.tbt_ms,
                "ttft_ms": result.ttft_ms,
                "roofline_tbt_ms": roofline_tbt_ms(config, context, copy_gbps),
            }
        )
        shown.append(f"{context}: {result.tbt_ms:.3f}")
    print(f"  {contender.title:<28} TBT ms at context " + ", ".join(shown), flush=True)
    return points


# --------------------------------------------------------------------------- a prompt's rows (no GPU)


def summarize_prompt(
    prompt_len: int, context: int, runs: dict[str, Generation | str], config, copy_gbps: float
) -> dict:
    """One prompt's rows: TTFT, TBT, tokens/s, % of the roofline, speedups and agreement with the naive path."""
    roofline = roofline_tbt_ms(config, context, copy_gbps)
    naive = runs.get("naive")
    naive = naive if isinstance(naive, Generation) else None
    hf = runs.get("transformers")
    hf = hf if isinstance(hf, Generation) else None
    rows: dict[str, dict] = {}
    for name in PATHS:
        result = runs.get(name)
        if result is None:
            continue
        if isinstance(result, str):
            rows[name] = {"skipped": result}
            continue
        tbt = result.tbt_ms
        row = {
            "ttft_ms": result.ttft_ms,
            "ttft_reps_ms": result.ttft_reps_ms,
            "tbt_ms": tbt,
            "intervals_ms": result.intervals_ms,
            "tokens_per_s": 1e3 / tbt if tbt else None,
            "percent_roofline": 100 * roofline / tbt if tbt else None,
            "tokens": result.tokens[:16],
            "ttft_speedup_naive": naive.ttft_ms / result.ttft_ms if naive else None,
            "tbt_speedup_naive": naive.tbt_ms / tbt if naive and naive.tbt_ms and tbt else None,
            "tbt_speedup_transformers": hf.tbt_ms / tbt if hf and hf.tbt_ms and tbt else None,
        }
        if naive is not None and name != "naive":
            diff = (result.first_logits.cpu() - naive.first_logits.cpu()).abs().max().item()
            scale = max(naive.first_logits.abs().max().item(), 1e-30)
            same = 0
            for a, b in zip(result.tokens, naive.tokens):
                if a != b:
                    break
                same += 1
            row |= {
                "logits_max_abs_diff": diff,
                "logits_relative_diff": diff / scale,
                "agrees": diff / scale <= MAX_RELATIVE_LOGIT_DIFFERENCE,
                "tokens_equal_naive": same,
                "tokens_compared": min(len(result.tokens), len(naive.tokens)),
            }
        rows[name] = row
    return {"prompt": prompt_len, "context": context, "roofline_tbt_ms": roofline, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Re-plot and re-print the model table of a saved t6 bench JSON "
        "(the timing itself runs from python -m assignment.commands.bench)."
    )
    parser.add_argument("--plot-only", type=Path, required=True, help="a t6.json or t6_model.json from make bench T=t6")
    parser.add_argument("--out", type=Path, help="where to write the plots (default: beside the JSON)")
    args = parser.parse_args(argv)
    saved = json.loads(args.plot_only.read_text())
    report = saved.get("model")
    if not report or not report.get("prompts"):
        print(f"{args.plot_only}: no model table in it (run make bench T=t6 without --no-model)", file=sys.stderr)
        return 2
    report.setdefault("gpu_name", (saved.get("gpu") or {}).get("name"))
    report.setdefault("task", saved.get("task"))  # a JSON from before the model table named its task
    print(format_report(report))
    for path in plot(report, args.out or args.plot_only.parent):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
