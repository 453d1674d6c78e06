"""Public tests for task t7: text generation (``t7_generate.py``).

Run them with ``make test T=t7``. Four kinds of check, each failure saying what went wrong and
giving a hint:

* the sampling functions on hand-made logits whose answer is known exactly (ties, a partial sum
  that lands on p, the order of temperature and the filters);
* sampled tokens against the exact distribution (a chi-square test);
* the loop on ``ScriptedModel``, a stand-in whose logits are a known function of the token history
  and which logs every call: positions, stop tokens, lengths, the repetition penalty, seeds;
* streaming on a model that writes multi-byte UTF-8 text, and generation on the kit's checkpoint.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist

import pytest
import torch

from assignment.impl import load_python
from assignment.model.scripted import ByteTokenizer, ScriptedModel
from assignment.policy import Rules, check_file, describe
from assignment.registry import load_registry
from assignment.testing import assert_close, require_python_implemented

pytestmark = pytest.mark.t7
TASK = load_registry().task("t7")
SHAPES = TASK.public_shapes
TOL = TASK.tol("float32")
NEG_INF = float("-inf")
LAYOUT = "row, token"
# The chance that a correct sampler fails one frequency check with an unlucky seed (the seed is fixed,
# so a run either passes or fails every time; alpha says how unusual a failing seed would be).
FALSE_ALARM_RATE = 1e-4
UNICODE_TEXT = "naïve café ☕ 🙂"  # 1-, 2-, 3- and 4-byte characters


def student():
    return load_python("t7_generate.py")


def logits_of(rows, device="cpu") -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32, device=device)


def log_probs(probs, device="cpu") -> torch.Tensor:
    """Logits whose softmax is exactly ``probs`` (one row per list), up to float32 rounding."""
    return torch.tensor(probs, dtype=torch.float64).log().float().to(device)


def kept_ids(filtered: torch.Tensor) -> list[set[int]]:
    """For each row, the ids a filter left finite."""
    return [set(torch.nonzero(torch.isfinite(row)).flatten().tolist()) for row in filtered.cpu()]


def expect_value_error(why: str, function, *args, **kwargs) -> None:
    try:
        function(*args, **kwargs)
    except ValueError:
        return
    pytest.fail(f"expected a ValueError: {why}")


def reference_probs(logits: torch.Tensor, temperature: float, top_k=None, top_p=None) -> torch.Tensor:
    """The next-token distribution in float64, one row at a time: the definitions of the handout, written plainly."""
    rows = []
    for row in logits.double().cpu() / temperature:
        keep = torch.ones_like(row, dtype=torch.bool)
        if top_k is not None and top_k < len(row):
            keep &= row >= torch.sort(row, descending=True).values[top_k - 1]
        if top_p is not None and top_p < 1:
            probs = torch.softmax(row.masked_fill(~keep, NEG_INF), dim=-1).tolist()
            mass = 0.0
            for token in sorted(range(len(probs)), key=lambda i: -probs[i]):
                if mass >= top_p:
                    keep[token] = False
                mass += probs[token]
        rows.append(torch.softmax(row.masked_fill(~keep, NEG_INF), dim=-1))
    return torch.stack(rows)


# ---------------------------------------------------------------------------------------------------
# The filters on hand-made logits


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits(devices):
    for device in devices:
        logits = logits_of([[2.0, -1.0, 0.5, 0.0, 3.0], [1.0, 1.0, -2.0, 4.0, -0.5]], device)
        before = logits.clone()
        previous = torch.tensor([[0, 1, 1, 3], [4, 4, 2, 2]], device=device)
        out = student().apply_repetition_penalty(logits, previous, 2.0)
        assert torch.equal(logits, before), "apply_repetition_penalty modified its input: work on a copy"
        expected = logits_of([[1.0, -2.0, 0.5, 0.0, 3.0], [1.0, 1.0, -4.0, 4.0, -1.0]], device)
        assert_close(
            out,
            expected,
            **TASK.tol("repetition_penalty"),
            name=f"repetition penalty 2.0 ({device})",
            layout=LAYOUT,
            hint="A logit z of a token seen before becomes z / 2 if z > 0, else z * 2, once per distinct "
            "token however often it was seen; unseen tokens keep their logits.",
        )
        unchanged = student().apply_repetition_penalty(logits, previous, 1.0)
        assert_close(
            unchanged,
            logits,
            atol=0,
            rtol=0,
            name="repetition penalty 1.0",
            layout=LAYOUT,
            hint="A penalty of 1 changes nothing.",
        )
        nothing_seen = student().apply_repetition_penalty(logits, previous[:, :0], 2.0)
        assert_close(
            nothing_seen,
            logits,
            atol=0,
            rtol=0,
            name="repetition penalty, nothing seen",
            layout=LAYOUT,
            hint="An empty history (previous of shape (B, 0)) changes nothing.",
        )


def test_top_k_keeps_every_tie_at_the_kth_value(devices):
    for device in devices:
        logits = logits_of([[1.0, 3.0, 3.0, 2.0, 0.0, 3.0], [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]], device)
        before = logits.clone()
        out = student().top_k_filter(logits, 2)
        assert torch.equal(logits, before), "top_k_filter modified its input: return a new tensor"
        assert kept_ids(out) == [{1, 2, 5}, {0, 1}], (
            f"top_k_filter(k=2) kept {kept_ids(out)}; expected [{{1, 2, 5}}, {{0, 1}}]. Row 0 has three logits "
            "tied at the 2nd largest value (3.0): keep every logit >= the k-th largest, ties included."
        )
        expected = torch.where(
            torch.isin(torch.arange(6, device=device), torch.tensor([1, 2, 5], device=device)), logits[0], NEG_INF
        )
        assert_close(
            out[0],
            expected,
            atol=0,
            rtol=0,
            name="top_k_filter(k=2) row 0",
            layout="token",
            hint="Kept logits keep their values; the others become -inf.",
        )
        for k in (6, 100):
            assert_close(
                student().top_k_filter(logits, k),
                logits,
                atol=0,
                rtol=0,
                name=f"top_k_filter(k={k})",
                layout=LAYOUT,
                hint="k >= V keeps every logit.",
            )
        expect_value_error("top_k_filter with k = 0 keeps nothing", student().top_k_filter, logits, 0)


def test_top_p_keeps_the_token_that_crosses_p(devices):
    # Vocabulary order is not probability order: the kept set must map back to the right ids.
    probs = [[0.15, 0.5, 0.05, 0.3]]
    cases = {0.3: {1}, 0.6: {1, 3}, 0.85: {0, 1, 3}, 0.99: {0, 1, 2, 3}, 1.0: {0, 1, 2, 3}}
    for device in devices:
        logits = log_probs(probs, device)
        before = logits.clone()
        for p, expected in cases.items():
            out = student().top_p_filter(logits, p)
            assert kept_ids(out) == [expected], (
                f"top_p_filter(p={p}) on probabilities {probs[0]} kept ids {sorted(kept_ids(out)[0])}; expected "
                f"{sorted(expected)}. Sort by probability (most probable first) and keep a token while the mass of "
                "the tokens before it is below p: the token that crosses p is kept, the most probable always is."
            )
            assert_close(
                out[0, sorted(expected)],
                logits[0, sorted(expected)],
                atol=0,
                rtol=0,
                name=f"top_p_filter(p={p}) kept logits",
                layout="token",
                hint="Kept logits keep their values.",
            )
        assert torch.equal(logits, before), "top_p_filter modified its input: return a new tensor"
        for p in (0.0, -0.1, 1.5):
            expect_value_error(f"top_p_filter with p = {p} (0 < p <= 1)", student().top_p_filter, logits, p)


def test_top_p_stops_where_a_partial_sum_lands_exactly_on_p(devices):
    # Four equally likely tokens (probability exactly 1/4 each in float32) and two impossible ones: the
    # partial sums are exactly 0.25, 0.5, 0.75, 1. Which of the tied tokens survive is free; how many is not.
    for device in devices:
        logits = logits_of([[0.0, 0.0, 0.0, 0.0, NEG_INF, NEG_INF], [NEG_INF, 0.0, 0.0, NEG_INF, 0.0, 0.0]], device)
        possible = [{0, 1, 2, 3}, {1, 2, 4, 5}]
        for p, count in ((0.25, 1), (0.5, 2), (0.75, 3), (0.5 + 1e-3, 3), (0.5 - 1e-3, 2)):
            kept = kept_ids(student().top_p_filter(logits, p))
            for row, ids in enumerate(kept):
                assert len(ids) == count and ids <= possible[row], (
                    f"top_p_filter(p={p:g}) on four tokens of probability 1/4 kept ids {sorted(ids)} in row {row}; "
                    f"expected {count} of {sorted(possible[row])}. Keep the smallest set whose mass is >= p: when "
                    "a partial sum equals p exactly, the set stops there (compare the mass *before* a token, < p)."
                )


def test_temperature_is_applied_before_top_p(devices):
    # T = 0.5 sharpens [0.5, 0.3, 0.2] to [0.66, 0.24, 0.11]: the first token alone reaches p = 0.65.
    # T = 2 flattens it to [0.42, 0.32, 0.26]: three tokens are needed to reach p = 0.75.
    for device in devices:
        logits = log_probs([[0.5, 0.3, 0.2]], device)
        for temperature, p, expected, wrong in (
            (0.5, 0.65, [1.0, 0.0, 0.0], "[0.74, 0.26, 0]"),
            (2.0, 0.75, [0.4154, 0.3218, 0.2628], "[0.56, 0.44, 0]"),
        ):
            out = student().next_token_probs(logits, temperature, top_p=p)
            assert_close(
                out,
                torch.tensor([expected], device=device),
                **TASK.tol("probs_by_hand"),
                name=f"next_token_probs(T={temperature}, top_p={p})",
                layout=LAYOUT,
                hint=f"Divide the logits by T first, then filter: filtering first gives {wrong}.",
            )


def test_top_p_works_on_what_top_k_left(devices):
    # After top-k = 2, [0.4, 0.3, 0.2, 0.1] becomes [0.57, 0.43]: the first token alone reaches p = 0.55.
    for device in devices:
        out = student().next_token_probs(log_probs([[0.4, 0.3, 0.2, 0.1]], device), 1.0, top_k=2, top_p=0.55)
        assert_close(
            out,
            torch.tensor([[1.0, 0.0, 0.0, 0.0]], device=device),
            **TASK.tol("probs_by_hand"),
            name="next_token_probs(top_k=2, top_p=0.55)",
            layout=LAYOUT,
            hint="Apply top-p to the distribution top-k left (renormalised), not to the original one: "
            "the other order gives [0.57, 0.43, 0, 0].",
        )


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [(1.0, None, None), (0.7, 10, None), (1.3, None, 0.9), (0.8, 20, 0.8), (2.0, 1, None), (0.5, 60, 0.999)],
)
def test_next_token_probs_match_the_definition(temperature, top_k, top_p, seed, devices):
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(seed)) * 3
    expected = reference_probs(logits, temperature, top_k, top_p)
    for device in devices:
        out = student().next_token_probs(logits.to(device), temperature, top_k, top_p)
        assert out.dtype == torch.float32, f"next_token_probs must return float32, got {out.dtype}"
        assert_close(out, expected, **TOL, name=f"next_token_probs ({device})", layout=LAYOUT, hint=TASK.hint)
        sums = out.double().sum(dim=-1)
        assert torch.allclose(sums, torch.ones_like(sums), **TASK.tol("probs_sum")), (
            f"rows of next_token_probs sum to {sums.tolist()}: renormalise over the tokens left after filtering"
        )
    expect_value_error("next_token_probs with temperature 0", student().next_token_probs, logits, 0.0)


def test_greedy_picks_the_first_maximum(devices):
    for device in devices:
        logits = logits_of([[1.0, 3.0, 3.0, 2.0], [0.0, -1.0, 5.0, 5.0], [-3.0, -2.0, -2.5, -9.0]], device)
        tokens = student().sample_next_token(logits, temperature=0.0, top_k=2, top_p=0.5)
        assert tokens.dtype == torch.long and tuple(tokens.shape) == (3,), (
            f"sample_next_token must return a (B,) long tensor, got {tokens.dtype} of shape {tuple(tokens.shape)}"
        )
        assert tokens.tolist() == [1, 2, 1], (
            f"greedy (temperature 0) picked {tokens.tolist()}; expected [1, 2, 1]: the index of each row's maximum, "
            "the first one when several tie (torch.argmax does that)"
        )


# ---------------------------------------------------------------------------------------------------
# Sampling: frequencies and seeds


def chi_square_critical(dof: int, alpha: float) -> float:
    """The upper-alpha quantile of the chi-square distribution with ``dof`` degrees of freedom.

    Wilson-Hilferty: (X / dof)^(1/3) is nearly normal with mean 1 - 2/(9 dof) and variance 2/(9 dof),
    which gives the quantile within about 1% for dof >= 3 (no scipy needed).
    """
    z = NormalDist().inv_cdf(1.0 - alpha)
    c = 2.0 / (9.0 * dof)
    return dof * (1.0 - c + z * math.sqrt(c)) ** 3


def chi_square(counts: torch.Tensor, expected: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic and its degrees of freedom; bins expected to get fewer than 5 draws are pooled."""
    small = expected < 5
    if bool(small.any()):
        counts = torch.cat([counts[~small], counts[small].sum(0, keepdim=True)])
        expected = torch.cat([expected[~small], expected[small].sum(0, keepdim=True)])
    return float(((counts - expected) ** 2 / expected).sum()), len(counts) - 1


@pytest.mark.parametrize(
    "temperature, top_k, top_p", [(1.0, None, None), (0.6, 6, None), (1.5, None, 0.8), (0.9, 8, 0.9)]
)
def test_sampling_frequencies_match_the_distribution(temperature, top_k, top_p, seed, devices):
    """40,000 draws from one batched call, against the exact distribution: a chi-square test at
    false-alarm rate FALSE_ALARM_RATE, and no draw ever of a token the filters removed."""
    draws = 40_000
    logits = torch.linspace(2.0, -2.5, 12)[torch.randperm(12, generator=torch.Generator().manual_seed(seed))]
    probs = reference_probs(logits[None, :], temperature, top_k, top_p)[0]
    for device in devices:
        generator = torch.Generator(device=device).manual_seed(seed)
        batch = logits.to(device)[None, :].repeat(draws, 1)
        tokens = student().sample_next_token(batch, temperature, top_k, top_p, generator=generator)
        assert tuple(tokens.shape) == (draws,), f"sample_next_token must return one token per row, got {tokens.shape}"
        counts = torch.bincount(tokens.cpu(), minlength=12).double()
        removed = probs == 0
        drawn_removed = torch.nonzero(removed & (counts > 0)).flatten().tolist()
        assert not drawn_removed, (
            f"drew tokens the filters removed ({device}): ids {drawn_removed} have probability 0. Draw from "
            "next_token_probs(...), not from the softmax of the raw logits."
        )
        statistic, dof = chi_square(counts[~removed], draws * probs[~removed])
        critical = chi_square_critical(dof, FALSE_ALARM_RATE)
        observed = (counts / draws).tolist()
        assert statistic <= critical, (
            f"sampled frequencies do not follow the distribution ({device}, T={temperature}, top_k={top_k}, "
            f"top_p={top_p}): chi-square {statistic:.1f} > {critical:.1f} ({dof} degrees of freedom, false-alarm "
            f"rate {FALSE_ALARM_RATE:g}).\n  observed {[round(f, 4) for f in observed]}\n  expected "
            f"{[round(float(q), 4) for q in probs]}\nDraw one token per row with torch.multinomial(probs, 1, "
            "generator=generator) from next_token_probs(...)."
        )


def draw_with_seed(logits: torch.Tensor, seed: int) -> torch.Tensor:
    generator = torch.Generator(device=logits.device).manual_seed(seed)
    return student().sample_next_token(logits, 1.0, generator=generator).cpu()


def test_same_generator_seed_same_draws(devices):
    logits = torch.randn(500, 20, generator=torch.Generator().manual_seed(0))
    for device in devices:
        on_device = logits.to(device)
        assert torch.equal(draw_with_seed(on_device, 7), draw_with_seed(on_device, 7)), (
            "two calls with generators seeded alike drew different tokens: pass the generator to torch.multinomial"
        )
        assert not torch.equal(draw_with_seed(on_device, 7), draw_with_seed(on_device, 8)), (
            "generators with different seeds drew the same 500 tokens"
        )
        # Seed 7 once more on other logits, with each row's earlier draw made impossible (-inf): a fresh generator
        # draws from these logits, so none of those tokens may come back.
        first = draw_with_seed(on_device, 7)
        removed = logits.scatter(1, first[:, None], float("-inf")).to(device)
        assert not bool((draw_with_seed(removed, 7) == first).any()), (
            f"seed 7 again, on logits where each row's earlier draw is -inf, drew those tokens again ({device}): "
            "each call draws from its own logits with its own generator (nothing kept from an earlier call)"
        )


# ---------------------------------------------------------------------------------------------------
# The loop, on ScriptedModel


def penalised(logits: torch.Tensor, history: list[int], penalty: float) -> torch.Tensor:
    logits = logits.clone()
    for token in set(history):
        logits[token] = logits[token] / penalty if logits[token] > 0 else logits[token] * penalty
    return logits


def greedy_reference(
    model: ScriptedModel, prompt: list[int], count: int, penalty: float = 1.0, stop_tokens=()
) -> list[int]:
    """The greedy continuation computed from ``model.logits_for`` (no cache, no calls logged)."""
    history, out = list(prompt), []
    for _ in range(count):
        token = int(torch.argmax(penalised(model.logits_for(history), history, penalty)))
        if token in stop_tokens:
            break
        out.append(token)
        history.append(token)
    return out


def first_difference(got: list[int], expected: list[int]) -> str:
    for i, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            return f"token {i} is {a}, expected {b}"
    return f"{len(got)} tokens, expected {len(expected)}"


def show_calls(model: ScriptedModel, limit: int = 4) -> str:
    shown = [f"  {c['op']} positions={c['positions']} tokens={c['tokens']}" for c in model.calls[:limit]]
    more = [f"  ... {len(model.calls) - limit} more"] if len(model.calls) > limit else []
    return "\n".join(["the model's calls:", *shown, *more])


def shape_id(shape: dict) -> str:
    return "V{vocab}_prompt{prompt}_new{new}".format(**shape)


def random_prompt(shape: dict, seed: int) -> list[int]:
    return torch.randint(shape["vocab"], (shape["prompt"],), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_greedy_generation_follows_the_model(shape, seed, devices):
    prompt = random_prompt(shape, seed)
    for device in devices:
        model = ScriptedModel(vocab_size=shape["vocab"], seed=seed, device=device)
        expected = greedy_reference(model, prompt, shape["new"])
        got = student().generate(model, prompt, shape["new"], temperature=0.0)
        assert got == expected, (
            f"greedy generation ({device}) differs from the model's greedy continuation: "
            f"{first_difference(got, expected)}.\n{show_calls(model)}\nPrefill the prompt once at positions 0..T-1, "
            "then feed each token back with decode_one_token at position T + k."
        )


def test_calls_prefill_once_then_decode_at_the_next_positions(seed):
    prompt = [1, 2, 3, 4, 5]
    model = ScriptedModel(vocab_size=64, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    tokens = student().generate(model, prompt, 6, temperature=1.0, generator=generator)
    expected = [{"op": "prefill", "positions": [0, 1, 2, 3, 4], "tokens": prompt}]
    expected += [{"op": "decode", "positions": [5 + k], "tokens": [token]} for k, token in enumerate(tokens[:-1])]
    assert len(tokens) == 6, f"asked for 6 tokens without stop tokens, got {len(tokens)}"
    assert model.calls == expected, (
        f"{show_calls(model, 8)}\nexpected one prefill of the prompt at positions 0..4, then one decode per "
        "generated token at positions 5, 6, ... feeding the token just drawn; the last token is not fed back "
        "(nothing comes after it)."
    )


def test_repetition_penalty_covers_the_prompt_and_the_generated_tokens(devices):
    # A model (seed) whose favourite first token is in the prompt: penalising the generated tokens alone
    # gets the very first token wrong. Eight tokens, so repeats happen within a few steps.
    prompt = [1, 6, 2, 5, 1]
    model_seed = next(
        s
        for s in range(200)
        if greedy_reference(ScriptedModel(8, seed=s), prompt, 1, 1.5)
        != greedy_reference(ScriptedModel(8, seed=s), prompt, 1)
    )
    for device in devices:
        model = ScriptedModel(vocab_size=8, seed=model_seed, device=device)
        expected = greedy_reference(model, prompt, 20, penalty=1.5)
        got = student().generate(model, prompt, 20, temperature=0.0, repetition_penalty=1.5)
        assert got == expected, (
            f"greedy generation with repetition_penalty=1.5 ({device}): {first_difference(got, expected)}. Before "
            "each draw, penalise every distinct token of the prompt and of the tokens generated so far."
        )


def test_stop_token_ends_generation_and_is_neither_returned_nor_fed(seed):
    prompt = [9, 8, 7]
    model = ScriptedModel(vocab_size=64, seed=seed)
    plain = greedy_reference(model, prompt, 30)
    stop = plain[5]
    cut = plain.index(stop)
    got = student().generate(model, prompt, 30, temperature=0.0, stop_tokens=(63 if stop != 63 else 62, stop))
    assert got == plain[:cut], (
        f"with stop token {stop}, generation returned {got}; expected {plain[:cut]} (everything before the first "
        "time the stop token is drawn, without it)"
    )
    fed = [c["tokens"][0] for c in model.calls if c["op"] == "decode"]
    assert stop not in fed and len(model.calls) == 1 + cut, (
        f"{show_calls(model, 8)}\nthe stop token must end the loop at once: it is never fed to the model"
    )


def test_max_new_tokens_is_exact(seed):
    for count in (0, 1, 7):
        model = ScriptedModel(vocab_size=64, seed=seed)
        got = student().generate(model, [3, 1, 4], count, temperature=0.8, generator=torch.Generator().manual_seed(1))
        assert len(got) == count, f"max_new_tokens={count} with no stop token returned {len(got)} tokens: {got}"
        assert all(isinstance(t, int) for t in got), "generate must return a list of Python ints"


def test_arguments_that_cannot_work_raise_value_error():
    model = ScriptedModel(vocab_size=32, max_seq_len=16)
    prompt = list(range(10))
    assert len(student().generate(model, prompt, 6, temperature=0.0)) == 6, (
        "10 prompt tokens + 6 new ones fill a cache of 16 positions exactly (the last token is never fed back): "
        "that must work"
    )
    expect_value_error(
        "10 prompt tokens + 7 new ones do not fit in max_seq_len = 16; check before calling the model",
        student().generate,
        ScriptedModel(32, max_seq_len=16),
        prompt,
        7,
    )
    expect_value_error("an empty prompt", student().generate, ScriptedModel(32), [], 5)
    expect_value_error("max_new_tokens = -1", student().generate, ScriptedModel(32), prompt, -1)
    expect_value_error("temperature = -0.5", student().generate, ScriptedModel(32), prompt, 5, temperature=-0.5)


def reference_sampled_generation(model: ScriptedModel, prompt: list[int], count: int, seed: int, **sampling):
    """The sampling loop written plainly: one torch.multinomial draw per token from the exact distribution."""
    generator = torch.Generator(device=model.device).manual_seed(seed)
    history, out = list(prompt), []
    for _ in range(count):
        logits = penalised(model.logits_for(history), history, sampling.get("repetition_penalty", 1.0))
        probs = reference_probs(logits[None, :], sampling["temperature"], sampling.get("top_k"), sampling.get("top_p"))
        token = int(torch.multinomial(probs.float().to(model.device), 1, generator=generator)[0, 0])
        out.append(token)
        history.append(token)
    return out


@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 12, "top_p": 0.9},
        {"temperature": 1.2, "top_p": 0.8, "repetition_penalty": 1.3},
    ],
    ids=["T1", "T0.7_k12_p0.9", "T1.2_p0.8_penalty1.3"],
)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_sampled_generation_matches_the_reference_loop_draw_for_draw(shape, sampling, seed, devices):
    prompt = random_prompt(shape, seed)
    for device in devices:
        expected = reference_sampled_generation(
            ScriptedModel(shape["vocab"], seed=seed, device=device), prompt, shape["new"], seed, **sampling
        )
        generator = torch.Generator(device=device).manual_seed(seed)
        got = student().generate(
            ScriptedModel(shape["vocab"], seed=seed, device=device),
            prompt,
            shape["new"],
            generator=generator,
            **sampling,
        )
        assert got == expected, (
            f"sampled generation ({device}, {sampling}) differs from the reference loop with the same seed: "
            f"{first_difference(got, expected)}. Each step: the penalty over prompt + tokens so far, then one "
            "torch.multinomial(next_token_probs(...), 1, generator=generator) draw, with every sampling argument "
            "passed on."
        )


def generate_with_seed(device: str, seed: int) -> list[int]:
    generator = torch.Generator(device=device).manual_seed(seed)
    return student().generate(
        ScriptedModel(64, seed=3, device=device), [1, 2], 30, temperature=1.0, top_p=0.95, generator=generator
    )


def test_same_seed_same_text_and_different_seeds_differ(devices):
    for device in devices:
        first = generate_with_seed(device, 100)
        assert generate_with_seed(device, 100) == first, (
            f"two generations with generators seeded alike differ ({device})"
        )
        assert generate_with_seed(device, 101) != first, (
            f"generators seeded 100 and 101 generated the same 30 tokens ({device})"
        )
        # Seed 100 once more, on another prompt: that prompt's draws, as the reference loop makes them.
        model = ScriptedModel(64, seed=3, device=device)
        expected = reference_sampled_generation(model, [9, 40, 17], 30, 100, temperature=1.0, top_p=0.95)
        generator = torch.Generator(device=device).manual_seed(100)
        got = student().generate(model, [9, 40, 17], 30, temperature=1.0, top_p=0.95, generator=generator)
        assert got == expected, (
            f"seed 100 again, on another prompt ({device}): {first_difference(got, expected)} from the reference "
            "loop with that seed. Each call draws from its own logits with its own generator (nothing kept from an "
            "earlier call)."
        )


# ---------------------------------------------------------------------------------------------------
# Streaming


class ByteWritingModel:
    """A test double that, after any prompt, writes ``data`` byte by byte (ByteTokenizer ids), then EOS forever.

    The logits give the next byte 30 and every other id 0, so sampling picks it too. ``steps`` counts
    the calls, so a test sees at which step each piece of streamed text arrives.
    """

    def __init__(self, data: bytes, device="cpu", max_seq_len: int = 128):
        self.script = [*data, ByteTokenizer.eos_id]
        self.vocab_size = ByteTokenizer.vocab_size
        self.max_seq_len = max_seq_len
        self.device = torch.empty(0, device=device).device
        self.steps = 0
        self.prompt_length = 0

    def prefill(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        self.prompt_length = tokens.shape[1]
        return self._logits_of_token(0)

    def decode_one_token(self, token: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        return self._logits_of_token(int(input_pos[0]) - self.prompt_length + 1)

    def _logits_of_token(self, index: int) -> torch.Tensor:
        self.steps += 1
        logits = torch.zeros(1, self.vocab_size, device=self.device)
        logits[0, self.script[min(index, len(self.script) - 1)]] = 30.0
        return logits


def test_stream_yields_whole_characters_that_join_to_the_text(devices):
    tokenizer = ByteTokenizer()
    prompt = tokenizer.encode("Say:")
    for device in devices:
        pieces = list(
            student().stream(
                ByteWritingModel(UNICODE_TEXT.encode(), device),
                tokenizer,
                prompt,
                64,
                temperature=0.0,
                stop_tokens=tokenizer.stop_ids,
            )
        )
        assert "".join(pieces) == UNICODE_TEXT, (
            f"the streamed pieces {pieces} join to {''.join(pieces)!r}, expected {UNICODE_TEXT!r}"
        )
        broken = [piece for piece in pieces if "\ufffd" in piece]
        assert not broken, (
            f"pieces {broken} contain U+FFFD: a token ended inside a multi-byte character. Hold the text back "
            "while it ends in U+FFFD and yield it once a later token completes the character."
        )
        generated = student().generate(
            ByteWritingModel(UNICODE_TEXT.encode(), device), prompt, 64, temperature=0.0, stop_tokens=tokenizer.stop_ids
        )
        assert tokenizer.decode(generated) == UNICODE_TEXT, f"generate decoded to {tokenizer.decode(generated)!r}"


def test_stream_flushes_an_incomplete_last_character():
    # The text stops one byte short of the cup of coffee: the held-back bytes must still come out at the end.
    tokenizer = ByteTokenizer()
    truncated = "ok ☕".encode()[:-1]
    pieces = list(
        student().stream(
            ByteWritingModel(truncated),
            tokenizer,
            tokenizer.encode("Say:"),
            64,
            temperature=0.0,
            stop_tokens=tokenizer.stop_ids,
        )
    )
    assert "".join(pieces) == tokenizer.decode(list(truncated)) == "ok \ufffd", (
        f"the streamed pieces {pieces} should join to 'ok \\ufffd', what tokenizer.decode gives for the whole "
        "output: after the last token, yield whatever is still held back"
    )


def test_stream_yields_each_character_as_soon_as_it_is_complete():
    # No stop token: after the text the model writes EOS (which decodes to nothing) until max_new_tokens.
    tokenizer = ByteTokenizer()
    model = ByteWritingModel(UNICODE_TEXT.encode())
    arrivals = []
    for piece in student().stream(model, tokenizer, tokenizer.encode("Say:"), 40, temperature=0.0):
        arrivals.append((piece, model.steps))
    assert arrivals, "stream yielded nothing"
    text = ""
    for piece, steps in arrivals:
        # The model's call m gives the logits of byte m - 1; one more call (feeding it back) may pass first. A piece
        # is due once its FIRST character is complete: waiting to join it with later text makes it late.
        due = len((text + piece[:1]).encode("utf-8")) + 1
        assert steps <= due, (
            f"the piece {piece!r} arrived after {steps} model calls, but its first character was complete after "
            f"call {due - 1}: stream must yield while generating, each character as soon as it is complete, not "
            "when the loop is over or after more text (iterate over the tokens as they are drawn: a generator "
            "function that yields)"
        )
        text += piece


def byte_model(seed: int, device: str) -> ScriptedModel:
    return ScriptedModel(vocab_size=ByteTokenizer.vocab_size, seed=seed, max_seq_len=256, device=device, sharpness=1.0)


def byte_sampling(top_p: float | None, seed: int, device: str) -> dict:
    return {
        "temperature": 1.0,
        "top_p": top_p,
        "repetition_penalty": 1.1,
        "stop_tokens": ByteTokenizer.stop_ids,
        "generator": torch.Generator(device=device).manual_seed(seed),
    }


@pytest.mark.parametrize("top_p", [None, 0.9])
def test_stream_equals_generate_with_the_same_seed(top_p, seed, devices):
    # Random bytes: multi-byte characters, bytes that are not UTF-8 at all, and the EOS stop token.
    tokenizer = ByteTokenizer()
    prompt = tokenizer.encode("Once upon a time")
    for device in devices:
        pieces = list(
            student().stream(byte_model(seed, device), tokenizer, prompt, 200, **byte_sampling(top_p, seed, device))
        )
        expected = tokenizer.decode(
            student().generate(byte_model(seed, device), prompt, 200, **byte_sampling(top_p, seed, device))
        )
        assert "".join(pieces) == expected, (
            f"''.join(stream(...)) differs from tokenizer.decode(generate(...)) with the same seed ({device}):\n"
            f"  stream:   {''.join(pieces)!r}\n  generate: {expected!r}\nDecode the generated tokens (not the "
            "prompt), pass every sampling argument on, and yield what is left at the end."
        )


# ---------------------------------------------------------------------------------------------------
# The kit's checkpoint


def shipped_checkpoint(device: str, max_seq_len: int):
    """The kit's checkpoint, loaded; skips while the model package or the checkpoint is not in this release."""
    model_package = pytest.importorskip("assignment.model")
    load = getattr(model_package, "load_checkpoint", None)
    path = getattr(model_package, "DEFAULT_CHECKPOINT", None)
    if load is None or path is None:
        pytest.skip("assignment.model has no load_checkpoint / DEFAULT_CHECKPOINT yet: the kit's model is coming")
    if not Path(path).is_dir():
        pytest.skip(f"the kit's checkpoint is not in this release yet ({path})")
    return load(path, device=device, max_seq_len=max_seq_len)


def seeded(device: str) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(1234)


@torch.no_grad()
def check_greedy_against_recomputation(model, prompt: list[int], tokens: list[int], device: str) -> None:
    """Each greedy token is the arg-max of the logits at its position in one plain causal pass over the prompt and
    the tokens (no cache at all), up to the first near tie, where rounding may rightly pick either."""
    everything = torch.tensor([prompt + tokens], device=model.device)
    logits = model(everything)[0, len(prompt) - 1 :]  # row i: the logits that chose token i
    for i, token in enumerate(tokens):
        best, runner_up = torch.topk(logits[i], 2).values.tolist()
        if best - runner_up < 1e-3:
            return
        assert token == int(torch.argmax(logits[i])), (
            f"greedy token {i} on the kit's model ({device}) is {token}, but the model's logits for the prompt and the "
            f"tokens before it pick {int(torch.argmax(logits[i]))}: check the positions and the tokens you feed back"
        )


def test_generation_on_the_shipped_model(devices):
    for device in devices:
        loaded = shipped_checkpoint(device, max_seq_len=64)
        model, tokenizer = loaded.model, loaded.tokenizer
        prompt = tokenizer.encode("The history of")
        stops = tuple(tokenizer.stop_ids)
        tokens = student().generate(model, prompt, 24, temperature=0.0, stop_tokens=stops)
        assert len(tokens) <= 24 and all(0 <= t < model.vocab_size and t not in stops for t in tokens), (
            f"greedy generation on the kit's model ({device}) returned {tokens}: at most 24 ids of the vocabulary, "
            "and no stop token"
        )
        check_greedy_against_recomputation(model, prompt, tokens, device)

        sampling = {"temperature": 0.8, "top_p": 0.9, "stop_tokens": stops}
        text = tokenizer.decode(student().generate(model, prompt, 16, generator=seeded(device), **sampling))
        streamed = "".join(student().stream(model, tokenizer, prompt, 16, generator=seeded(device), **sampling))
        assert streamed == text, (
            f"stream and generate disagree on the kit's model ({device}):\n  stream:   {streamed!r}\n"
            f"  generate: {text!r}"
        )
        again = tokenizer.decode(student().generate(model, prompt, 16, generator=seeded(device), **sampling))
        assert again == text, f"the same seed gave another text on the kit's model ({device})"


def test_file_uses_only_allowed_operations():
    # The grader checks the file before running it; a file that breaks a rule is not run at all.
    path = require_python_implemented("t7_generate.py", "t7")  # the stub counts, never a TODO comment left behind
    rules = Rules("t7", TASK.rules.imports, TASK.rules.forbidden)
    found = check_file(path, rules)
    assert not found, "t7_generate.py breaks the task's rules:\n" + describe(found, path.name)
