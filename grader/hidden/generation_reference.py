"""What t7's generation loop must produce, computed in the checker's process from the kit's own models.

The scripted model's logits after any history are known without running a loop (``logits_for``), so the
greedy and the seeded sampled continuations, the call log and the streamed text are all derived here from
the definitions. For the shipped checkpoint the checker runs the kit's transformer itself (trusted code) along
the student's tokens. Nothing here imports or runs the student's file.
"""

from __future__ import annotations

from functools import cache

import torch

from assignment.checks import require
from assignment.model import DEFAULT_CHECKPOINT, load_checkpoint
from grader.hidden.sampling_reference import NEG_INF, penalised, top_k_set

REPLACEMENT = "\ufffd"


def next_token_distribution(
    z: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None
) -> torch.Tensor:
    """(V,) float64: temperature, top-k (ties kept), top-p on what top-k left (keep a token while the mass
    before it is below p), renormalised. For continuous logits (no ties), as the scripted model gives."""
    z = z.double() / temperature
    keep = top_k_set(z[None], top_k)[0]
    if top_p is not None and top_p < 1:
        probs = torch.softmax(z.masked_fill(~keep, NEG_INF), dim=-1)
        ranked, order = torch.sort(probs, descending=True)
        before = torch.cumsum(ranked, dim=0) - ranked
        keep[order[before >= top_p]] = False
    return torch.softmax(z.masked_fill(~keep, NEG_INF), dim=-1)


def step_logits(model, history: list[int], penalty: float) -> torch.Tensor:
    """The scripted model's logits after ``history``, penalised over it (float64, (V,))."""
    logits = model.logits_for(history).cpu()
    return penalised(logits[None], torch.tensor([history]), penalty)[0] if penalty != 1.0 else logits.double()


def greedy(model, prompt: list[int], count: int, penalty: float = 1.0, stops=()) -> list[int]:
    """The greedy continuation of a scripted model: the first maximum of each step's (penalised) logits."""
    history, out = list(prompt), []
    for _ in range(count):
        z = step_logits(model, history, penalty)
        token = int(torch.nonzero(z == z.max())[0, 0])
        if token in stops:
            break
        out.append(token)
        history.append(token)
    return out


def sampled(
    model,
    prompt: list[int],
    count: int,
    seed: int,
    device: str,
    *,
    temperature: float,
    top_k: int | None = None,
    top_p: float | None = None,
    penalty: float = 1.0,
    stops=(),
) -> list[int]:
    """The seeded sampled continuation: one torch.multinomial draw per token from the exact distribution, with
    a generator on ``device`` seeded with ``seed`` (what the handout's loop does, draw for draw)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    history, out = list(prompt), []
    for _ in range(count):
        probs = next_token_distribution(step_logits(model, history, penalty), temperature, top_k, top_p)
        token = int(torch.multinomial(probs.float().to(device)[None], 1, generator=generator)[0, 0])
        if token in stops:
            break
        out.append(token)
        history.append(token)
    return out


def expected_calls(prompt: list[int], tokens: list[int], count: int) -> list[dict]:
    """The call log of a right loop: one prefill of the prompt at 0..T-1, then one decode per token that another
    token follows (every token when a stop token ended the loop, all but the last when ``count`` did)."""
    fed = tokens if len(tokens) < count else tokens[:-1]
    return [{"op": "prefill", "positions": list(range(len(prompt))), "tokens": list(prompt)}] + [
        {"op": "decode", "positions": [len(prompt) + k], "tokens": [t]} for k, t in enumerate(fed)
    ]


def check_calls(calls: list | None, prompt: list[int], tokens: list[int], count: int, what: str) -> None:
    """The model's call log (the checker's own record of the steps it served the student's loop: op, positions and
    tokens of each, in order) must show one prefill and then one decode per fed token at the next position."""
    require(
        calls is not None,
        "structure",
        f"{what}: the checker served no model call",
        f"{what}: the model was never called",
    )
    calls = [{key: c[key] for key in ("op", "positions", "tokens")} for c in calls]
    expected = expected_calls(prompt, tokens, count)
    if calls == expected:
        return
    ops = [c["op"] for c in calls]
    if ops.count("prefill") != 1 or ops[:1] != ["prefill"]:
        why = f"{ops.count('prefill')} prefill calls (one, first, is right)"
    elif len(calls) != len(expected):
        why = f"{len(calls)} model calls, a right loop makes {len(expected)} (one per token fed, none after the last)"
    else:
        k = next(i for i, (a, b) in enumerate(zip(calls, expected)) if a != b)
        why = (
            "the prefill did not feed the prompt at positions 0..T-1"
            if k == 0
            else f"decode call {k} did not feed generated token {k - 1} at position T + {k - 1}"
        )
    require(False, "structure", f"{what}: {why}; calls {calls[:6]} ...; expected {expected[:6]} ...", f"{what}: {why}")


def check_stream(pieces, steps, tokens: list[int], decode, what: str) -> None:
    """Streamed ``pieces`` of the generated ``tokens``, with ``steps``: how many model steps the checker had served
    when each piece arrived (it records that itself as the worker forwards each piece it is yielded).

    The pieces must join to the decoded text: a piece cannot be taken back, so none may hold half a character
    that a later token completes. And each piece must arrive while the generation that makes it runs
    (``character_times``): within one model step of the step after which its FIRST character could be shown (a
    right loop yields right after drawing the token, or after feeding it back: one step more), and not before
    the step that drew the token completing its LAST character (text yielded before it was generated was known
    in advance: replayed from an earlier call). Timing a piece by its first character is what catches a stream
    that collects the text and yields it late: a piece holding text that was ready steps ago arrived late,
    however much text it adds."""
    require(
        isinstance(pieces, list) and all(isinstance(p, str) for p in pieces),
        "shape",
        f"{what}: stream must yield strings",
        f"{what}: stream yielded something other than strings",
    )
    text = decode(tokens)
    joined = "".join(pieces)
    require(
        joined == text,
        "mismatch",
        f"{what}: the pieces join to {joined!r}, expected {text!r}",
        f"{what}: the streamed pieces do not join to the decoded text"
        + (" (a piece holds U+FFFD: hold back a half character)" if REPLACEMENT in joined else ""),
    )
    require(
        isinstance(steps, list) and len(steps) == len(pieces) and all(isinstance(s, int) for s in steps),
        "structure",
        f"{what}: no step count per piece",
        f"{what}: the checker could not time the pieces",
    )
    complete, showable = character_times(decode, tokens)
    shown = 0
    for index, (piece, step) in enumerate(zip(pieces, steps)):
        if piece:
            first, last = shown, shown + len(piece) - 1
            require(
                step <= showable[first] + 1,
                "structure",
                f"{what}: piece {index} arrived after {step} model steps; its first character could be shown "
                f"after step {showable[first]}",
                f"{what}: pieces come out after the text is generated, not while it is (yield each piece as "
                "soon as its characters are complete)",
            )
            require(
                step >= complete[last],
                "structure",
                f"{what}: piece {index} arrived after {step} model steps, before step {complete[last]} drew the "
                "token that completes it",
                f"{what}: a piece came out before the model had generated its text "
                "(text known in advance is not streamed)",
            )
        shown += len(piece)


def character_times(decode, tokens: list[int]) -> tuple[list[int], list[int]]:
    """For each character of ``decode(tokens)``: the number of tokens after which it is complete (its last byte
    drawn), and after which a streamer can show it. Both count model steps too: the prefill gives token 0 and each
    decode step one more. A streamer shows the text decoded so far unless it ends in U+FFFD (it cannot tell a cut
    character from a byte that is no UTF-8 at all, so it waits), and only what the whole text keeps (a tokenizer
    may decode a prefix of the tokens into text the whole sequence writes otherwise); after the last token it
    shows everything."""
    final = decode(tokens)
    complete, showable = [len(tokens)] * len(final), [len(tokens)] * len(final)
    agreed = shown = 0
    for j in range(1, len(tokens)):
        text = decode(tokens[:j])
        kept = next((i for i, (a, b) in enumerate(zip(text, final)) if a != b), min(len(text), len(final)))
        complete[agreed:kept] = [j] * max(0, kept - agreed)
        agreed = max(agreed, kept)
        if not text.endswith(REPLACEMENT):
            showable[shown:kept] = [j] * max(0, kept - shown)
            shown = max(shown, kept)
    return complete, showable


@cache
def shipped_checkpoint(device: str):
    """The kit's checkpoint, loaded once per device in the checker's process (trusted code)."""
    return load_checkpoint(DEFAULT_CHECKPOINT, device=device, max_seq_len=1)


@torch.no_grad()
def logits_along(loaded, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """(len(tokens) + 1, V) float32 on the model's device: the kit model's logits after the prompt and after each
    of ``tokens``, from one causal pass over them all (no cache: another code path than the student's loop, the
    same numbers within 2e-5)."""
    model = loaded.model
    sequence = torch.tensor([prompt + tokens], device=model.device)
    return model(sequence)[0, len(prompt) - 1 :]
