"""Time to first token of a 1B model in bf16, three ways: rows a task whose code runs the model's attention adds to its
bench table.

``ttft_cases(attention)`` gives one ``Case`` per prompt length (1024 and 4096 tokens, batch 1), timed like the kernel
rows by the grader's harness (``assignment.perf.timing.measure``: warm-up, interleaved candidates, CUDA events,
medians, outputs re-checked). One call is the prefill of the whole prompt into a KV cache that holds it, returning
the logits of the next token, of the Llama-3.2-1B configuration with random bf16 weights made on the GPU
(presets.random_model: no download), three ways over the same weight tensors:

    transformers  LlamaForCausalLM with attn_implementation="sdpa" over the kit model's tensors (model_paths.hf_model:
                  shared, not copied), its own dynamic cache; the baseline of the "% transformers" column
    kit SDPA      the kit's model (assignment/model) with ATTN=sdpa: torch's scaled_dot_product_attention
    student       the kit's model with ATTN=<the task>: the task's code under IMPL in every layer's prefill

Only the last position's logits are computed (the kit's ``prefill``, transformers' ``logits_to_keep=1``): the logits
of every position would be a (4096, 128256) matrix, 1 GB in bf16, that a time to first token does not need.
Before a row is timed, each path's logits on one prompt are compared with transformers' (the kit's SDPA path's when
transformers is missing) and the largest difference is noted; a path past ``MAX_RELATIVE_LOGIT_DIFFERENCE`` is left
out as wrong. A path that cannot run (transformers not installed, a TODO, out of memory) is left out with the reason,
and the rest of the bench goes on. The model is built when the first row is timed and freed after the last.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from functools import partial

import torch

from assignment.model.attention_choice import ModelAttention

PRESET = "llama-3.2-1b"
DTYPE = "bfloat16"
PROMPTS = (1024, 4096)
SEED = 0
TRANSFORMERS, KIT_SDPA, STUDENT = "transformers", "kit SDPA", "student"  # the candidates, the baseline first
# The last position's logits of a path against the baseline's: the largest |difference| over the largest |logit|.
# Loose on purpose, as the kernel rows' bound: it flags a fast-but-wrong path; the tests grade correctness. Two correct
# bf16 paths differ by a few units in the last place of the logits: the kit's SDPA and reference paths against
# transformers, measured on the CPU with these random weights, 1.4-2.0% at 4 of the 16 layers and 512 tokens and
# 2.6-3.6% with all 16 at 1024 tokens (each as far from a float32 run); a broken attention (zeros, no causal mask,
# the wrong KV head per query head, the scale left out) moved them by 90-130% (a smaller model of the same kind).
MAX_RELATIVE_LOGIT_DIFFERENCE = 0.2


def prefill_flops(config, tokens: int) -> float:
    """FLOPs of a prefill of ``tokens`` tokens returning one position's logits: every linear layer once per token,
    QKᵀ and PV over the causal pairs (4 d FLOPs per visible query-key pair and query head), the LM head once."""
    h, d, inner = config.hidden_size, config.head_dim, config.intermediate_size
    q_out, kv_out = config.num_attention_heads * d, config.num_key_value_heads * d
    linear = h * q_out + 2 * h * kv_out + q_out * h + 3 * h * inner
    pairs = tokens * (tokens + 1) // 2
    per_layer = 2.0 * linear * tokens + 4.0 * config.num_attention_heads * d * pairs
    return config.num_hidden_layers * per_layer + 2.0 * h * config.vocab_size


class KitPrefill:
    """The kit model's prefill of a prompt (1, T) at positions 0..T-1 into a cache of exactly T positions (set up
    when T changes: not in a timed call) -> the next token's logits (1, V), float32."""

    def __init__(self, model):
        self.model = model

    def __call__(self, prompt: torch.Tensor) -> torch.Tensor:
        T = prompt.shape[1]
        if self.model.max_seq_len != T:
            self.model.setup_caches(1, T)
            self.positions = torch.arange(T, device=self.model.device)
        return self.model.prefill(prompt, self.positions)


def hf_prefill(hf, prompt: torch.Tensor) -> torch.Tensor:
    """transformers' forward over the prompt (1, T), its cache made as generate makes it -> logits (1, V), float32."""
    return hf(input_ids=prompt, use_cache=True, logits_to_keep=1).logits[:, -1].float()


class PrefillModels:
    """The three paths over one set of random weights: built by the first row's ``scope``, freed by the last's."""

    def __init__(
        self, attention: ModelAttention, preset: str = PRESET, dtype: str = DTYPE, device="cuda", seed: int = SEED
    ):
        from assignment.model.presets import preset_config

        self.attention, self.preset, self.dtype, self.device, self.seed = attention, preset, dtype, device, seed
        self.config = replace(preset_config(preset), torch_dtype=dtype)
        self.paths: dict | None = None  # candidate name -> prompt (1, T) -> logits (1, V)
        self.skipped: dict[str, str] = {}  # candidate name -> why it cannot run
        self.transformers_version: str | None = None

    def build(self) -> None:
        if self.paths is not None:
            return
        from assignment.model.presets import random_model, sharing_weights
        from assignment.perf.model_paths import first_line, hf_model

        base = random_model(self.config, device=self.device, dtype=getattr(torch, self.dtype), seed=self.seed)
        self.paths, self.skipped = {}, {}
        try:
            import transformers

            self.paths[TRANSFORMERS] = partial(hf_prefill, hf_model(base, "sdpa"))
            self.transformers_version = transformers.__version__
        except ImportError as exc:  # CI, a laptop: the kit's rows still run
            self.skipped[TRANSFORMERS] = f"{first_line(exc)} (pip install transformers)"
        except Exception as exc:  # noqa: BLE001 -- a transformers version the kit does not know: the rest runs
            self.skipped[TRANSFORMERS] = first_line(exc)
        self.paths[KIT_SDPA] = KitPrefill(sharing_weights(base, "sdpa"))
        self.paths[STUDENT] = KitPrefill(sharing_weights(base, self.attention))

    def run(self, name: str, prompt: torch.Tensor) -> torch.Tensor:
        self.build()
        with torch.no_grad():
            return self.paths[name](prompt)

    def release(self) -> None:
        self.paths = None
        _empty_cuda_cache()

    @contextlib.contextmanager
    def scope(self, case, *, last: bool) -> Iterator[None]:
        """``Case.scope`` of a row: build the paths (once), leave out those that cannot run or disagree, time, and
        free everything after the last row."""
        try:
            self.prepare(case)
            yield
        finally:
            if last:
                self.release()

    def prepare(self, case) -> None:
        """Drop the candidates of ``case`` that cannot run or whose logits are off, with the reason; note how far
        each path's logits are from the baseline's (also in ``case.record``)."""
        from assignment.perf.model_paths import first_line

        try:
            self.build()
        except Exception as exc:  # noqa: BLE001 -- out of memory, say: the kernel rows are kept
            self.release()
            case.notes.append(f"the model could not be built: {first_line(exc)}")
            case.candidates.clear()
            return
        for name, reason in self.skipped.items():
            _leave_out(case, name, reason)
        if self.transformers_version:
            case.notes.append(f"transformers {self.transformers_version}")
        prompt = case.make_inputs(0)
        logits = {}
        for name in list(case.candidates):
            try:
                logits[name] = self.run(name, prompt)
            except Exception as exc:  # noqa: BLE001 -- a TODO, a build error, out of memory: the others still run
                _leave_out(case, name, first_line(exc))
                _empty_cuda_cache()
        if len(logits) < 2:  # nothing to compare with
            return
        baseline, expected = next(iter(logits.items()))
        scale = max(expected.abs().max().item(), 1e-30)
        compared = {}
        for name, values in logits.items():
            if name == baseline:
                continue
            diff = (values - expected).abs().max().item()
            compared[name] = {
                "max_abs_diff": diff,
                "relative_diff": diff / scale,
                "same_next_token": bool(values.argmax(-1).eq(expected.argmax(-1)).all()),
            }
        case.record["logits"] = {"against": baseline, "max_abs_logit": scale, "paths": compared}
        case.notes.append(
            f"next-token logits against those of {baseline} on one prompt (largest |logit| {scale:.2f}): "
            + ", ".join(
                f"{n} max |diff| {c['max_abs_diff']:.3g} ({c['relative_diff']:.1%})" for n, c in compared.items()
            )
            + f"; bound {MAX_RELATIVE_LOGIT_DIFFERENCE:.0%}"
        )
        for name, c in compared.items():
            if not c["relative_diff"] <= MAX_RELATIVE_LOGIT_DIFFERENCE:
                _leave_out(
                    case, name, f"its logits differ from those of {baseline} by {c['relative_diff']:.1%} (wrong)"
                )


def _empty_cuda_cache() -> None:
    if torch.cuda.is_available():
        with contextlib.suppress(RuntimeError):  # a context ended by an illegal address: reported where it was
            torch.cuda.empty_cache()


def _leave_out(case, name: str, reason: str) -> None:
    if name in case.candidates:
        del case.candidates[name]
        case.notes.append(f"{name} skipped: {reason}")


def random_prompt(length: int, vocab_size: int, device, seed: int) -> torch.Tensor:
    """Token ids (1, length), a fresh set per seed, made on ``device``."""
    generator = torch.Generator(device=device).manual_seed(10_007 * seed + length)
    return torch.randint(0, vocab_size, (1, length), generator=generator, device=device)


def ttft_cases(attention: ModelAttention, *, prompts=PROMPTS, preset: str = PRESET, device="cuda") -> list:
    """The rows: one ``Case`` per prompt length, sharing one ``PrefillModels`` (the student's path runs the model's
    attention as a task's code declares it, ``attention``)."""
    from assignment.perf.cases import Case
    from assignment.perf.model_bench import parameter_count

    models = PrefillModels(attention, preset, device=device)
    config = models.config
    what = (
        f"{TRANSFORMERS}: LlamaForCausalLM (attn_implementation='sdpa') over the same weight tensors; {KIT_SDPA}: the "
        f"kit's model with ATTN=sdpa; {STUDENT}: the kit's model with ATTN={attention.name} ({attention.label})"
    )
    memory = (
        "a call: the prefill into a KV cache of the prompt's length and the next token's logits, of the last "
        "position only (the kit's prefill; transformers' logits_to_keep=1)"
    )
    cases = []
    for T in prompts:
        cases.append(
            Case(
                f"time to first token, {preset} shape {DTYPE} (random weights), batch 1, prompt {T}",
                partial(random_prompt, T, config.vocab_size, device),
                {name: partial(models.run, name) for name in (TRANSFORMERS, KIT_SDPA, STUDENT)},
                prefill_flops(config, T),
                parameter_count(config) * torch.finfo(getattr(torch, DTYPE)).bits // 8,  # every weight read once
                metric="TFLOP/s",
                percent_of=TRANSFORMERS,
                notes=[what, memory],
                speedup_over=(TRANSFORMERS,),
                max_relative_error=MAX_RELATIVE_LOGIT_DIFFERENCE,
                tensor_cores=True,
                scope=partial(models.scope, last=T == prompts[-1]),
                record={"model": {"preset": preset, "dtype": DTYPE, "batch": 1, "prompt": T}},
            )
        )
    return cases
