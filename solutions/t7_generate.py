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
    # BEGIN OPEN t7: the repetition penalty
    # PLAN: The docstring's penalty on a (B, V) batch: each distinct id of a row's `previous` changed once, however
    # PLAN: often it appears there, and no other logit; a new tensor on the logits' device (the caller's logits
    # PLAN: unchanged). A penalty <= 0 raises ValueError.
    # BEGIN SOLUTION t7: the repetition penalty
    # PLAN: 0. A penalty <= 0 is no penalty (it would flip or zero the logits): refuse it with a ValueError.
    # PLAN: 1. A row's ids in `previous` (B, n) pick the logits to change. An id listed twice is still penalised once:
    # PLAN:    compute every new value from the original logit, never from one already penalised.
    # PLAN: 2. The new value is lower whichever the logit's sign: dividing a negative logit by theta > 1 would raise it.
    # PLAN: 3. The result differs from the logits at those ids only, in a new (B, V) tensor: the caller keeps its own.
    if penalty <= 0:
        raise ValueError(f"repetition_penalty must be > 0, got {penalty}")
    seen = logits.gather(-1, previous)
    penalised = torch.where(seen > 0, seen / penalty, seen * penalty)
    return logits.scatter(-1, previous, penalised)
    # END SOLUTION
    # END OPEN


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits of each row; set the others to -inf.

    With z_(k) the k-th largest value of a row, keep z_i when z_i >= z_(k).
    Ties at the k-th value are all kept (more than k tokens may survive):
    which of two equal logits to drop would be arbitrary, so neither is.
    k >= V keeps everything; k < 1 raises ValueError. Returns a new (B, V)
    tensor.
    """
    # BEGIN OPEN t7: top-k filtering
    # PLAN: The docstring's filter on a (B, V) batch: a kept logit keeps its value, every other one becomes -inf, and
    # PLAN: every tie at the k-th largest value stays. A new tensor on the logits' device; k < 1 raises ValueError.
    # BEGIN SOLUTION t7: top-k filtering
    # PLAN: 0. k < 1 would keep nothing (a ValueError); k >= V keeps every token (a copy, never the input itself).
    # PLAN: 1. Each row's threshold is its own k-th largest value z_(k), kept as a (B, 1) column so that it lines up
    # PLAN:    with every logit of its row.
    # PLAN: 2. A logit survives when it is >= its row's threshold: >= keeps every tie at z_(k), as the docstring asks.
    # PLAN:    The others become -inf, which the softmax turns into a probability of exactly 0.
    if k < 1:
        raise ValueError(f"top_k must be >= 1, got {k}")
    if k >= logits.shape[-1]:
        return logits.clone()
    kth_largest = torch.topk(logits, k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth_largest, float("-inf"))
    # END SOLUTION
    # END OPEN


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
    # BEGIN OPEN t7: top-p (nucleus) filtering
    # PLAN: The docstring's nucleus on a (B, V) batch: in each row, the fewest most probable tokens whose mass reaches
    # PLAN: p (the crossing token kept; a partial sum landing exactly on p ends the set), on the softmax of the logits
    # PLAN: in float32; every other logit -inf. A new tensor on the logits' device; p outside (0, 1] raises ValueError.
    # BEGIN SOLUTION t7: top-p (nucleus) filtering
    # PLAN: 0. p outside (0, 1] is an error (ValueError); p = 1 keeps every token (a copy).
    # PLAN: 1. The decision goes in order of decreasing probability (the softmax of the row, in float32), so it needs
    # PLAN:    the row in that order and, for each sorted position, the vocabulary id it came from.
    # PLAN: 2. In that order, the mass *before* a token (the more probable ones, not itself) decides: keep the token
    # PLAN:    while it is < p. So the crossing token is kept, the most probable one always is, and a partial sum
    # PLAN:    landing exactly on p ends the set there (the handout's table works four cases).
    # PLAN: 3. Carry the keep/drop decisions back to vocabulary order (the kept ids are not the first m ids of the
    # PLAN:    vocabulary) and set the dropped logits to -inf.
    if not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    if p == 1:
        return logits.clone()
    sorted_probs, order = torch.sort(torch.softmax(logits.float(), dim=-1), dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    keep = torch.zeros_like(order, dtype=torch.bool).scatter(-1, order, mass_before < p)
    return logits.masked_fill(~keep, float("-inf"))
    # END SOLUTION
    # END OPEN


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
    # BEGIN OPEN t7: temperature, filters and renormalisation
    # PLAN: The docstring's distribution, (B, V) float32 rows summing to 1, in its order of operations (temperature,
    # PLAN: top-k, top-p, one softmax); temperature <= 0 raises ValueError.
    # BEGIN SOLUTION t7: temperature, filters and renormalisation
    # PLAN: 0. T <= 0 is no distribution (greedy, T = 0, is sample_next_token's case): a ValueError.
    # PLAN: 1. Temperature first, on float32 logits: the filters are defined on the distribution that is sampled, and
    # PLAN:    dividing by T changes which tokens reach top-p's mass (the handout's worked example).
    # PLAN: 2. The filters the caller asked for, top-k before top-p: top-p works on what top-k left.
    # PLAN: 3. One normalisation of each row at the end: a removed token (-inf) gets exactly 0, the rest sum to 1.
    if temperature <= 0:
        raise ValueError(f"next_token_probs needs temperature > 0, got {temperature} (0 means greedy)")
    scaled = logits.float() / temperature
    if top_k is not None:
        scaled = top_k_filter(scaled, top_k)
    if top_p is not None:
        scaled = top_p_filter(scaled, top_p)
    return torch.softmax(scaled, dim=-1)
    # END SOLUTION
    # END OPEN


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
    # BEGIN OPEN t7: greedy or one draw per row
    # PLAN: The docstring's (B,) long tokens on the logits' device: at temperature 0 each row's first maximum, else one
    # PLAN: torch.multinomial draw per row from next_token_probs with `generator`. The tests replay those draws with
    # PLAN: the same seed, so another correct sampler would not match them. Temperature < 0 raises ValueError.
    # BEGIN SOLUTION t7: greedy or one draw per row
    # PLAN: 0. A negative temperature is an error (ValueError).
    # PLAN: 1. T = 0 is greedy: each row's first maximum, and no draw at all (the filters never remove the maximum).
    # PLAN: 2. Otherwise one draw per row from next_token_probs, through the caller's generator so that a seed
    # PLAN:    reproduces the tokens (the docstring names the call: the tests replay it draw for draw). Shape (B,).
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return torch.argmax(logits, dim=-1)
    probs = next_token_probs(logits, temperature, top_k, top_p)
    return torch.multinomial(probs, num_samples=1, generator=generator)[:, 0]
    # END SOLUTION
    # END OPEN


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
    # BEGIN OPEN t7: the generation loop (prefill, then one decode per token)
    # PLAN: The docstring's loop, yielding each token as soon as it is drawn: its ValueErrors before any model call;
    # PLAN: one prefill of the whole prompt, then one decode_one_token per further token at the next position, none
    # PLAN: after the last token or a stop token (the tests read the model's call log); the repetition penalty over
    # PLAN: the prompt and every generated token; every sampling argument and the generator passed on; each tensor on
    # PLAN: model.device.
    # BEGIN SOLUTION t7: the generation loop (prefill, then one decode per token)
    # PLAN: 0. Refuse, before any model call, what cannot run (ValueError): an empty prompt, max_new_tokens < 0,
    # PLAN:    temperature < 0, and a prompt plus new tokens that the cache (model.max_seq_len positions) cannot hold.
    # PLAN: 1. The cache must hold every earlier token at its own position before the next one is fed: the prompt goes
    # PLAN:    in once, a (1, T) long batch at positions 0..T-1 (shape (T,)); then each generated token alone, (1, 1)
    # PLAN:    at a (1,) position, the k-th one at T + k. Every tensor on model.device.
    # PLAN: 2. Each step: the penalty sees the whole history (prompt and tokens so far), then one token is drawn.
    # PLAN:    A stop token ends the text: neither yielded nor fed. The last wanted token is yielded but not fed
    # PLAN:    (nothing reads its logits): one prefill and at most max_new_tokens - 1 decodes in all.
    prompt = [int(t) for t in prompt_tokens]
    if not prompt:
        raise ValueError("the prompt is empty: the model needs at least one token (a BOS token, say) to start from")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if len(prompt) + max_new_tokens > model.max_seq_len:
        raise ValueError(f"a prompt of {len(prompt)} tokens plus {max_new_tokens} new tokens does not fit in the "
                         f"model's cache of max_seq_len = {model.max_seq_len} positions")
    if max_new_tokens == 0:
        return
    device = model.device
    history = list(prompt)
    stops = {int(t) for t in stop_tokens}
    logits = model.prefill(torch.tensor([history], dtype=torch.long, device=device),
                           torch.arange(len(history), device=device))
    for k in range(max_new_tokens):
        if repetition_penalty != 1.0:
            seen = torch.tensor([history], dtype=torch.long, device=device)
            logits = apply_repetition_penalty(logits, seen, repetition_penalty)
        token = int(sample_next_token(logits, temperature, top_k, top_p, generator)[0])
        if token in stops:
            return
        yield token
        history.append(token)
        if k + 1 < max_new_tokens:
            logits = model.decode_one_token(torch.tensor([[token]], dtype=torch.long, device=device),
                                            torch.tensor([len(history) - 1], device=device))
    # END SOLUTION
    # END OPEN


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
    # BEGIN OPEN t7: streaming text (never half a character)
    # PLAN: Yield the text of generate_tokens(...) (the same arguments) piece by piece while it runs: the pieces join
    # PLAN: to tokenizer.decode of all the tokens, no piece ends inside a character that a later token completes, each
    # PLAN: piece comes out in the step that completes its first character, and what is left after the last token is
    # PLAN: flushed (even a broken character).
    # BEGIN SOLUTION t7: streaming text (never half a character)
    # PLAN: The invariant: what has been yielded is a prefix of the decoded text and never ends inside a character.
    # PLAN: 1. After each token from generate_tokens (same arguments), decode all the generated tokens so far: a token
    # PLAN:    decoded alone cannot rebuild a character whose bytes span two tokens.
    # PLAN: 2. A text ending in REPLACEMENT_CHARACTER is waiting for a character's last bytes: yield nothing yet.
    # PLAN:    Otherwise yield the new part at once (a piece held back to join later text is late).
    # PLAN: 3. After the loop, yield whatever is left, even a broken character: the pieces must join to the decode.
    tokens: list[int] = []
    shown = 0  # characters of the text already yielded
    for token in generate_tokens(model, prompt_tokens, max_new_tokens, temperature=temperature, top_k=top_k,
                                 top_p=top_p, repetition_penalty=repetition_penalty, stop_tokens=stop_tokens,
                                 generator=generator):
        tokens.append(token)
        text = tokenizer.decode(tokens)
        if len(text) > shown and not text.endswith(REPLACEMENT_CHARACTER):
            yield text[shown:]
            shown = len(text)
    rest = tokenizer.decode(tokens)[shown:]
    if rest:
        yield rest
    # END SOLUTION
    # END OPEN
