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


def next_token_distribution(z: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None
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


def sampled(model, prompt: list[int], count: int, seed: int, device: str, *, temperature: float,
            top_k: int | None = None, top_p: float | None = None, penalty: float = 1.0, stops=()) -> list[int]:
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
    return ([{"op": "prefill", "positions": list(range(len(prompt))), "tokens": list(prompt)}]
            + [{"op": "decode", "positions": [len(prompt) + k], "tokens": [t]} for k, t in enumerate(fed)])


def check_calls(calls: list | None, prompt: list[int], tokens: list[int], count: int, what: str) -> None:
    """The scripted model's log (read in the student's process: evidence beside the tokens, which are checked
    on their own) must show one prefill and then one decode per fed token at the next position."""
    require(calls is not None, "structure", f"{what}: the scripted model's call log could not be read",
            f"{what}: the model's call log was not a list of calls")
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
        why = "the prefill did not feed the prompt at positions 0..T-1" if k == 0 else \
            f"decode call {k} did not feed generated token {k - 1} at position T + {k - 1}"
    require(False, "structure", f"{what}: {why}; calls {calls[:6]} ...; expected {expected[:6]} ...",
            f"{what}: {why}")


def check_stream(pieces, steps, tokens: list[int], decode, what: str) -> None:
    """Streamed ``pieces`` of the generated ``tokens``: they join to the decoded text (so no piece held a half
    character that a later token completed: a piece cannot be taken back), and each piece came out within one
    model call of the token that released it (``steps``: the model's call count as each piece came out)."""
    require(isinstance(pieces, list) and all(isinstance(p, str) for p in pieces), "shape",
            f"{what}: stream must yield strings", f"{what}: stream yielded something other than strings")
    text = decode(tokens)
    joined = "".join(pieces)
    require(joined == text, "mismatch", f"{what}: the pieces join to {joined!r}, expected {text!r}",
            f"{what}: the streamed pieces do not join to the decoded text"
            + (" (a piece holds U+FFFD: hold back a half character)" if REPLACEMENT in joined else ""))
    require(isinstance(steps, list) and len(steps) == len(pieces) and all(isinstance(s, int) for s in steps),
            "structure", f"{what}: no step count per piece", f"{what}: the worker could not count the model's calls")
    shown, completed_by = "", 0
    for piece, step in zip(pieces, steps):
        shown += piece
        if not piece:
            continue
        while not released(decode, tokens, completed_by, shown):
            completed_by += 1
        require(step <= completed_by + 1, "structure",
                f"{what}: a piece came out after {step} model calls; the token completing it was drawn after call "
                f"{completed_by}", f"{what}: pieces come out after generation, not while it runs (yield each piece "
                "as soon as its characters are complete)")


def released(decode, tokens: list[int], j: int, shown: str) -> bool:
    """Whether a streamer that holds text back while it ends in U+FFFD (it cannot tell a cut character from a
    byte that is no UTF-8 at all) has ``shown`` out after the first ``j`` tokens."""
    text = decode(tokens[:j])
    return text.startswith(shown) and (j == len(tokens) or not text.endswith(REPLACEMENT))


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
    return model(sequence)[0, len(prompt) - 1:]
