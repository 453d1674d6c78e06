"""Float64 references for t7's sampling functions, written from the definitions (sort-based) and independent
of the reference solution's code, and the checks a student's kept set of tokens must pass.

Which of several tied tokens a filter keeps is arbitrary, so nothing here compares kept sets with one
expected set where ties could make two answers right: a set is checked against the rules (top-k: every
logit >= the k-th largest; top-p: exactly as many tokens as the nucleus needs, none less probable than a
token it dropped). Random inputs are built so that float32 and float64 agree on every decision: logits on a
grid (distinct values far apart, ties exact) and a top-p threshold at least ``MARGIN`` from every partial sum.
"""

from __future__ import annotations

import random

import torch

# Least distance between a drawn top-p threshold and any partial sum of the sorted probabilities. float32
# cumulative sums of a softmax over 32K tokens are within 6e-7 of float64 (CPU); 1e-5 leaves room for any
# summation order.
MARGIN = 1e-5
# Probabilities below this may underflow to 0 in float32 (exp(-87) is float32's smallest normal).
UNDERFLOW = 1e-30
NEG_INF = float("-inf")


def random_logits(batch: int, vocab: int, seed: int, scale: float) -> torch.Tensor:
    """(batch, vocab) float32 logits on a grid of scale/16: exact ties everywhere, distinct values at least
    1/128 of the largest apart (no float32 rounding merges or swaps them, before or after a temperature), and
    about 5% of the entries -inf (never a row's maximum)."""
    gen = torch.Generator().manual_seed(seed)
    grid = torch.round(torch.randn(batch, vocab, generator=gen) * 32).clamp(-128, 128) / 16
    if vocab > 2:  # copy a few values onto other positions: ties even in short rows
        src = torch.randint(0, vocab, (batch, max(1, vocab // 8)), generator=gen)
        dst = torch.randint(0, vocab, src.shape, generator=gen)
        grid.scatter_(1, dst, grid.gather(1, src))
    logits = (grid * scale).float()
    dropped = torch.rand(batch, vocab, generator=gen) < 0.05
    dropped.scatter_(1, logits.argmax(dim=1, keepdim=True), False)
    return logits.masked_fill(dropped, NEG_INF)


def penalised(logits: torch.Tensor, previous: torch.Tensor, penalty: float) -> torch.Tensor:
    """The repetition penalty in float64: each distinct id of a row's ``previous`` once, by the logit's sign."""
    out = logits.double().clone()
    for row, ids in enumerate(previous.tolist()):
        for i in set(ids):
            z = out[row, i]
            out[row, i] = z / penalty if z > 0 else z * penalty
    return out


def top_k_set(z: torch.Tensor, k: int | None) -> torch.Tensor:
    """(B, V) bool: the finite logits >= the k-th largest of their row (every tie kept); all finite for None."""
    finite = torch.isfinite(z)
    if k is None or k >= z.shape[-1]:
        return finite
    kth = torch.sort(z, dim=-1, descending=True).values[:, k - 1 : k]
    return finite & (z >= kth)


def sorted_partial_sums(z: torch.Tensor, within: torch.Tensor) -> list[torch.Tensor]:
    """Per row, the partial sums of softmax(z over ``within``) sorted from the most probable token (float64)."""
    sums = []
    for row in range(z.shape[0]):
        probs = torch.softmax(z[row, within[row]].double(), dim=-1)
        sums.append(torch.cumsum(torch.sort(probs, descending=True).values, dim=-1))
    return sums


def nucleus_size(partial_sums: torch.Tensor, p: float) -> int:
    """How many tokens the nucleus keeps: the fewest whose probabilities add up to at least p."""
    if p >= 1:
        return len(partial_sums)
    return min(
        int(torch.searchsorted(partial_sums, torch.tensor([p], dtype=partial_sums.dtype))[0]) + 1, len(partial_sums)
    )


def draw_top_p(rng: random.Random, z: torch.Tensor, within: torch.Tensor) -> float:
    """A threshold in [0.05, 0.98] at least MARGIN from every partial sum of every row (no rounding can move
    a token across it)."""
    sums = sorted_partial_sums(z, within)
    for _ in range(2000):
        p = round(rng.uniform(0.05, 0.98), 6)
        if all(bool(((s - p).abs() >= MARGIN).all()) for s in sums):
            return p
    raise RuntimeError("no top-p threshold clear of the partial sums (instructor error: fewer tokens?)")


def nucleus_problem(kept: torch.Tensor, z: torch.Tensor, within: torch.Tensor, p: float) -> str:
    """'' when ``kept`` (B, V bool) is a right top-p set of every row of the logits z over ``within`` (the
    tokens top-k left), else what is wrong (said without the inputs)."""
    for row, sums in enumerate(sorted_partial_sums(z, within)):
        mine, allowed = kept[row], within[row]
        if bool((mine & ~allowed).any()):
            return "kept a token that top-k (or a -inf logit) had already removed"
        wanted, got = nucleus_size(sums, p), int(mine.sum())
        if got != wanted:
            return (
                f"kept {got} tokens where the nucleus has {wanted} (the fewest most probable tokens whose "
                f"probabilities add up to at least p; the token that crosses p is kept)"
            )
        dropped = allowed & ~mine
        if bool(dropped.any()) and float(z[row][dropped].max()) > float(z[row][mine].min()):
            return "kept a token less probable than one it dropped (keep the most probable tokens)"
    return ""


def probs_on(z: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """softmax of z over ``support`` (0 elsewhere), in float64."""
    return torch.softmax(z.double().masked_fill(~support, NEG_INF), dim=-1)


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """P(a chi-square statistic at least this large) for observed ``counts`` against the distribution ``probs``;
    bins expecting fewer than 5 draws are merged into one (the chi-square approximation needs about 5 each)."""
    total = float(counts.sum())
    expected = probs.double() * total
    small = expected < 5
    observed = torch.cat([counts[~small].double(), counts[small].double().sum().reshape(1)])
    expected = torch.cat([expected[~small], expected[small].sum().reshape(1)])
    if float(expected[-1]) < 5:  # the merged bin is still too small: fold it into the largest bin
        largest = int(expected[:-1].argmax())
        observed[largest] += observed[-1]
        expected[largest] += expected[-1]
        observed, expected = observed[:-1], expected[:-1]
    dof = len(expected) - 1
    if dof < 1:
        return 1.0
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return float(
        torch.special.gammaincc(
            torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(statistic / 2, dtype=torch.float64)
        )
    )


def allowed_tokens(
    z: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None, slack: float = 1e-4
) -> torch.Tensor:
    """(V,) bool: the tokens a correct sampler may draw from the logits z (one row, float64), with ``slack`` on
    every decision (logits computed in another order, or in float32, may move a boundary token either way)."""
    z = z.double() / temperature
    within = torch.isfinite(z)
    if top_k is not None and top_k < len(z):
        within &= z >= torch.sort(z, descending=True).values[top_k - 1] - slack
    if top_p is None or top_p >= 1:
        return within
    probs = torch.softmax(z.masked_fill(~within, NEG_INF), dim=-1)
    ascending, order = torch.sort(z)
    mass_from = torch.cat([torch.flip(torch.cumsum(torch.flip(probs[order], [0]), 0), [0]), probs.new_zeros(1)])
    more_probable = mass_from[torch.searchsorted(ascending, z + slack, right=True)]  # mass of tokens clearly above
    return within & (more_probable < top_p + slack)
