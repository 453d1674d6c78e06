"""The model table's ways to generate, each timed as a user sees it: the naive path, a cached path, transformers.

A path is greedy generation through ``prefill`` and ``decode``: ``NaivePath`` runs ``model.forward`` over the
whole sequence at every step (no KV cache), ``CachedPath`` prefills once and then decodes one token at a time
through a model with caches (or a ``GraphDecoder`` replaying the step); ``timed_generation`` times either, and
``hf_timed_generation`` times ``transformers``' own ``generate`` over the same weight tensors (``hf_model``).
Timing is torch.cuda.synchronize() and time.perf_counter() around each token, the argmax that picks it included.
Runs on the CPU too (the kit's tests); model_bench.py sets the paths up on the GPU and makes the table.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass

import torch


@dataclass
class Generation:
    """One timed greedy generation: the new tokens, the first step's logits, TTFT and the intervals after it."""

    tokens: list[int]
    first_logits: torch.Tensor
    ttft_ms: float
    ttft_reps_ms: list[float]
    intervals_ms: list[float]

    @property
    def tbt_ms(self) -> float | None:
        return statistics.median(self.intervals_ms) if self.intervals_ms else None


class NaivePath:
    """(a) No KV cache: each step is ``model.forward`` over the whole sequence so far; the last position's logits."""

    def __init__(self, model, max_len: int):
        self.model = model
        self.sequence = torch.zeros((1, max_len), dtype=torch.long, device=model.device)

    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:  # prompt (1, T) -> logits (1, V)
        T = prompt.shape[1]
        self.sequence[:, :T] = prompt
        return self.model(self.sequence[:, :T])[:, -1]

    def decode(self, token: torch.Tensor, position: int) -> torch.Tensor:  # token (1,) at position -> (1, V)
        self.sequence[:, position] = token
        return self.model(self.sequence[:, : position + 1])[:, -1]


class CachedPath:
    """Prefill once, then one token per step through the KV cache: a Transformer with caches, or a GraphDecoder."""

    def __init__(self, runner, max_len: int, device):
        self.runner = runner
        self.positions = torch.arange(max_len, device=device)  # slices of it: no host-to-device copy per step

    def prefill(self, prompt: torch.Tensor) -> torch.Tensor:
        return self.runner.prefill(prompt, self.positions[: prompt.shape[1]])

    def decode(self, token: torch.Tensor, position: int) -> torch.Tensor:
        return self.runner.decode_one_token(token.view(1, 1), self.positions[position : position + 1])


def _synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def timed_generation(
    path, prompt: torch.Tensor, new_tokens: int, *, ttft_reps: int = 1, warmup_steps: int = 2
) -> Generation:
    """Greedy generation of ``new_tokens`` tokens after ``prompt`` (1, T) through a path (``prefill``, ``decode``).

    Warm-up (a prefill and ``warmup_steps`` steps), then ``ttft_reps`` timed prefills, then the steps after the
    last one, each timed from the previous token on the host to the next (synchronised, argmax included)."""
    device, T = prompt.device, prompt.shape[1]
    with torch.no_grad():
        token = path.prefill(prompt).argmax(-1)
        for i in range(min(warmup_steps, new_tokens - 1)):
            token = path.decode(token, T + i).argmax(-1)
        _synchronize(device)
        ttfts = []
        for _ in range(max(1, ttft_reps)):
            start = time.perf_counter()
            first_logits = path.prefill(prompt)
            token = first_logits.argmax(-1)
            _synchronize(device)
            ttfts.append(_ms_since(start))
        tokens, intervals = [token], []
        for i in range(new_tokens - 1):
            start = time.perf_counter()
            token = path.decode(token, T + i).argmax(-1)
            _synchronize(device)
            intervals.append(_ms_since(start))
            tokens.append(token)
    return Generation(torch.cat(tokens).tolist(), first_logits.float(), statistics.median(ttfts), ttfts, intervals)


def hf_model(model, attn_implementation: str | None = None):
    """``transformers.LlamaForCausalLM`` over the kit model's weight tensors (shared, not copied).

    Module names are Hugging Face's with the ``model.`` prefix for everything but ``lm_head``; the model is made
    on the meta device, its parameters assigned, and its rotary tables (non-persistent buffers) rebuilt."""
    import transformers

    config = transformers.LlamaConfig(**model.config.to_hf())
    if attn_implementation:
        config._attn_implementation = attn_implementation
    with torch.device("meta"):
        hf = transformers.LlamaForCausalLM(config)
    state = {key if key == "lm_head.weight" else f"model.{key}": value for key, value in model.state_dict().items()}
    hf.load_state_dict(state, strict=True, assign=True)
    hf.model.rotary_emb = type(hf.model.rotary_emb)(hf.config).to(model.device)
    if model.config.tie_word_embeddings:
        hf.lm_head.weight = hf.model.embed_tokens.weight
    hf = hf.eval().requires_grad_(False)
    left = [name for name, t in (*hf.named_parameters(), *hf.named_buffers()) if t.is_meta]
    if left:
        raise RuntimeError(
            f"hf_model: transformers {transformers.__version__} has tensors the kit does not set: "
            f"{', '.join(left)} (update hf_model)"
        )
    return hf


def hf_timed_generation(
    hf, prompt: torch.Tensor, new_tokens: int, *, ttft_reps: int = 1, warmup_steps: int = 2
) -> Generation:
    """``hf.generate`` (greedy, exactly ``new_tokens`` tokens), each token's arrival stamped by a stopping criterion
    that synchronises. TTFT: generate(max_new_tokens=1), median of ``ttft_reps``; intervals from a full run."""
    import transformers

    device = prompt.device

    class TokenClock(transformers.StoppingCriteria):
        """Called once per new token, after it is chosen: synchronise, stamp, never stop."""

        def __init__(self):
            self.stamps: list[float] = []

        def __call__(self, input_ids, scores, **kwargs):
            _synchronize(device)
            self.stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def generate(n: int) -> tuple[float, list[float], torch.Tensor]:
        clock = TokenClock()
        _synchronize(device)
        start = time.perf_counter()
        out = hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            num_beams=1,
            pad_token_id=0,
            stopping_criteria=transformers.StoppingCriteriaList([clock]),
        )
        if len(clock.stamps) != n:
            raise RuntimeError(f"transformers generate made {len(clock.stamps)} tokens, not {n}")
        return start, clock.stamps, out[0, prompt.shape[1] :]

    with torch.no_grad():
        generate(warmup_steps + 1)
        ttfts = []
        for _ in range(max(1, ttft_reps)):
            start, stamps, _ = generate(1)
            ttfts.append((stamps[0] - start) * 1e3)
        _, stamps, tokens = generate(new_tokens)
        first_logits = hf(prompt, use_cache=False, logits_to_keep=1).logits[:, -1].float()
    intervals = [(b - a) * 1e3 for a, b in itertools.pairwise(stamps)]
    return Generation(tokens.tolist(), first_logits, statistics.median(ttfts), ttfts, intervals)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
