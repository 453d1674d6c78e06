"""Task t7: text generation.

A language model gives, for the tokens it has seen, logits z over its vocabulary: one real number
per token, the next token's log-probability up to a constant. This file turns them into text:

* the *sampling* choices, on logits of shape (B, V): a repetition penalty, temperature, top-k and
  top-p (nucleus) filtering, and one draw per row (or the arg-max: greedy);
* the *loop*: feed the prompt once (prefill), then one token per step (decode), each at its own
  position in the model's KV cache, until a stop token or a length limit;
* *streaming*: yield the text piece by piece while the loop runs, never half a character.

The loop talks to the model and the tokenizer only through the small protocols below. The kit's
transformer (with the reference attention) and the test stand-in ``ScriptedModel`` both provide
them; every function works on CPU and CUDA tensors alike (a ``torch.Generator`` must live on the
logits' device).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import torch

REPLACEMENT_CHARACTER = "\ufffd"  # what UTF-8 decoding gives for bytes that are not (yet) a whole character


class GenerationModel(Protocol):
    """What the loop needs from a model with a KV cache (B = 1 here)."""

    max_seq_len: int  # the cache's capacity: prompt and generated tokens must fit
    vocab_size: int
    device: torch.device

    def prefill(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """tokens (B, T), input_pos (T,) -> logits (B, V) of the last one."""

    def decode_one_token(self, token: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """token (B, 1) long, input_pos (1,) long -> float32 logits (B, V)."""


class Tokenizer(Protocol):
    """What streaming needs from a tokenizer."""

    def decode(self, ids: list[int]) -> str:
        """Text of the ids; a character cut off at the end gives U+FFFD."""


def apply_repetition_penalty(logits: torch.Tensor, previous: torch.Tensor, penalty: float) -> torch.Tensor:
    """Make the tokens already in ``previous`` less likely.

    Args:
        logits: (B, V) logits.
        previous: (B, n) long ids of the tokens seen so far in each row
            (n may be 0); an id that appears several times counts once.
        penalty: theta > 0; 1.0 changes nothing, theta > 1 discourages
            repeats.

    Returns:
        A new (B, V) tensor (the input is not modified) with, for every
        distinct id i in a row's ``previous``,

            z_i' = z_i / theta   if z_i > 0,
            z_i' = z_i * theta   otherwise.

    The sign decides because the aim is to push z_i *down* either way:
    dividing a negative logit by theta > 1 would raise it.
    """
    # TODO(t7): the repetition penalty
    # PLAN: 0. Reject penalty <= 0 with a ValueError.
    # PLAN: 1. Gather each row's logits at the ids in `previous` (torch.gather); a repeated id gathers the same value.
    # PLAN: 2. Divide the positive ones by the penalty and multiply the others by it (torch.where).
    # PLAN: 3. Scatter them into a copy of the logits: a repeated id writes the same value twice, so it counts once.
    raise NotImplementedError('t7: the repetition penalty is not implemented yet (TODO(t7) in t7_generate.py)')


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits of each row; set the others to -inf.

    With z_(k) the k-th largest value of a row, keep z_i when z_i >= z_(k).
    Ties at the k-th value are all kept (more than k tokens may survive):
    which of two equal logits to drop would be arbitrary, so neither is.
    k >= V keeps everything; k < 1 raises ValueError. Returns a new (B, V)
    tensor.
    """
    # TODO(t7): top-k filtering
    # PLAN: 0. Reject k < 1 with a ValueError; for k >= V return a copy of the logits.
    # PLAN: 1. The k-th largest value of each row: torch.topk(logits, k, dim=-1).values[:, -1:].
    # PLAN: 2. -inf wherever a logit is strictly below it (masked_fill), so ties with it stay.
    raise NotImplementedError('t7: top-k filtering is not implemented yet (TODO(t7) in t7_generate.py)')


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering: the fewest most probable tokens with mass >= p.

    With the probabilities pi = softmax(z) of a row sorted so that
    pi_(1) >= pi_(2) >= ..., keep the first m tokens, m the smallest with

        pi_(1) + ... + pi_(m) >= p,

    and set the other logits to -inf. Equivalently, keep token (j) exactly
    when the mass of the tokens before it, pi_(1) + ... + pi_(j-1), is
    still below p: the token whose probability crosses p is kept, and the
    most probable token always is. When a partial sum lands exactly on p,
    the set stops there. 0 < p <= 1 (p = 1 keeps everything); anything else
    raises ValueError. Returns a new (B, V) tensor.
    """
    # TODO(t7): top-p (nucleus) filtering
    # PLAN: 0. Reject p <= 0 or p > 1 with a ValueError; for p == 1 return a copy of the logits.
    # PLAN: 1. probs = softmax of the logits (float32), sorted in decreasing order (torch.sort gives the order).
    # PLAN: 2. mass_before = cumsum(sorted probs) - sorted probs: the mass of the more probable tokens.
    # PLAN: 3. Keep a sorted token when mass_before < p; scatter that mask back to vocabulary order.
    # PLAN: 4. -inf where the mask is False.
    raise NotImplementedError('t7: top-p (nucleus) filtering is not implemented yet (TODO(t7) in t7_generate.py)')


def next_token_probs(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """The next token's distribution: (B, V) float32, rows summing to 1.

    In this order:

        z' = z / T                          temperature T > 0
        z' = top_k_filter(z', k)            if top_k is given
        z' = top_p_filter(z', p)            if top_p is given
        q_i = exp(z'_i) / sum_j exp(z'_j)   renormalise over what is left

    Temperature comes first because the filters are defined on the
    distribution that is actually sampled: dividing by T keeps the order of
    the logits (top-k picks the same tokens) but sharpens or flattens the
    probabilities, which changes which tokens reach top-p's mass p. Top-p
    then works on what top-k left (the softmax of the filtered logits), and
    the final softmax gives the removed tokens (-inf) probability 0 and
    renormalises the rest. T <= 0 raises ValueError (greedy, T = 0, is
    ``sample_next_token``'s job).
    """
    # TODO(t7): temperature, filters and renormalisation
    # PLAN: 0. Reject temperature <= 0 with a ValueError.
    # PLAN: 1. z = logits in float32, divided by the temperature.
    # PLAN: 2. top_k_filter if top_k is not None, then top_p_filter if top_p is not None.
    # PLAN: 3. softmax over the last dimension: -inf entries get 0, the rest sum to 1.
    raise NotImplementedError('t7: temperature, filters and renormalisation is not implemented yet (TODO(t7) in t7_generate.py)')


def sample_next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row of ``logits`` (B, V): (B,) long, on their device.

    temperature == 0 is greedy: the index of the row's maximum, the first
    one when several tie (the filters never remove the maximum, so they do
    not matter). Otherwise one draw per row from
    ``next_token_probs(logits, temperature, top_k, top_p)`` with
    ``torch.multinomial(probs, 1, generator=generator)``: the same generator
    state gives the same tokens, which makes a sampled text reproducible.
    temperature < 0 raises ValueError.
    """
    # TODO(t7): greedy or one draw per row
    # PLAN: 0. Reject temperature < 0 with a ValueError.
    # PLAN: 1. temperature == 0: torch.argmax over the last dimension (it returns the first maximum).
    # PLAN: 2. Otherwise probs = next_token_probs(...) and torch.multinomial(probs, 1, generator=generator)[:, 0].
    raise NotImplementedError('t7: greedy or one draw per row is not implemented yet (TODO(t7) in t7_generate.py)')


def generate_tokens(
    model: GenerationModel,
    prompt_tokens: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    stop_tokens: Sequence[int] = (),
    generator: torch.Generator | None = None,
) -> Iterator[int]:
    """Yield the generated token ids one at a time, each as soon as drawn.

    The prompt (T tokens) goes through ``model.prefill`` once, at positions
    0..T-1; the k-th generated token (k = 0, 1, ...) is fed back with
    ``model.decode_one_token`` at position T + k, and only when another
    token is still wanted:

        call      feeds            at positions   gives the logits of
        prefill   prompt[0..T-1]   0 .. T-1       token 0
        decode    token 0          T              token 1
        decode    token k-1        T + k - 1      token k

    Before each draw the repetition penalty covers the prompt and every
    token generated so far. The loop ends after ``max_new_tokens`` tokens,
    or when a token in ``stop_tokens`` is drawn: that token is neither
    yielded nor fed to the model. Raises ValueError, before calling the
    model, for an empty prompt, max_new_tokens < 0, temperature < 0, or a
    prompt and max_new_tokens that do not fit in the cache
    (T + max_new_tokens > model.max_seq_len).
    """
    # TODO(t7): the generation loop (prefill, then one decode per token)
    # PLAN: 0. Check the arguments (ValueError): a non-empty prompt, max_new_tokens >= 0, temperature >= 0,
    # PLAN:    and room in the cache: len(prompt) + max_new_tokens <= model.max_seq_len.
    # PLAN: 1. Prefill once: a (1, T) long tensor at input_pos = arange(T), both on model.device.
    # PLAN: 2. For k = 0 .. max_new_tokens-1: apply the penalty over prompt + tokens so far, sample one token;
    # PLAN:    return if it is a stop token, else yield it, and feed it back at position T + k (not after the last).
    raise NotImplementedError('t7: the generation loop (prefill, then one decode per token) is not implemented yet (TODO(t7) in t7_generate.py)')


def generate(
    model: GenerationModel,
    prompt_tokens: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    stop_tokens: Sequence[int] = (),
    generator: torch.Generator | None = None,
) -> list[int]:
    """The generated ids (no prompt, no stop token); see generate_tokens."""
    return list(generate_tokens(model, prompt_tokens, max_new_tokens, temperature=temperature, top_k=top_k,
                                top_p=top_p, repetition_penalty=repetition_penalty, stop_tokens=stop_tokens,
                                generator=generator))


def stream(
    model: GenerationModel,
    tokenizer: Tokenizer,
    prompt_tokens: Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    stop_tokens: Sequence[int] = (),
    generator: torch.Generator | None = None,
) -> Iterator[str]:
    """Yield the generated text piece by piece, while it is being generated.

    A token is not a character: a byte-level tokenizer may end a token in
    the middle of a multi-byte UTF-8 character (an accented letter takes 2
    bytes, an emoji 4), and decoding then ends in U+FFFD. So after each
    token, decode all the generated tokens; when the text ends in U+FFFD,
    hold it back until a later token completes the character; otherwise
    yield the text not yet yielded. After the last token, yield whatever is
    left. With the same arguments and generator seed,
    ``"".join(stream(...)) == tokenizer.decode(generate(...))``.
    """
    # TODO(t7): streaming text (never half a character)
    # PLAN: 1. For each token from generate_tokens(...) (same arguments): decode all generated tokens so far.
    # PLAN: 2. If the text ends in REPLACEMENT_CHARACTER, a character is incomplete: wait for the next token.
    # PLAN: 3. Otherwise yield the part of the text not yet yielded (skip empty pieces).
    # PLAN: 4. After the loop, yield what is left of the full decode, if anything.
    raise NotImplementedError('t7: streaming text (never half a character) is not implemented yet (TODO(t7) in t7_generate.py)')
