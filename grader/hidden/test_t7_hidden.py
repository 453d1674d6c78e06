"""Hidden tests for task t7 (instructor-only; never shipped).

The student's file runs only in the sandboxed worker (``grader.isolation``). Logits cross as plain tensors.
The model and the tokenizer the loop takes live in this process (``KitObject``: grader/isolation/served.py):
the worker holds stand-ins that ask for every model step over the channel, so the call log the loop checks
judge and the model steps behind each streamed piece are recorded here, as they happen, and nothing in the
student's process knows what the model would answer. The random generator is built in the worker
(``SeededGenerator``). Everything expected is computed here: float64 references of the sampling functions
(sampling_reference.py) and the kit's own models run by the checker (generation_reference.py). Seeds, drawn
shapes, scripted models and prompts change with every grading; test ids carry none of them.
"""

from __future__ import annotations

import random

import pytest
import torch

from assignment.checks import CheckFailure, require
from assignment.model.scripted import ByteTokenizer, ScriptedModel
from assignment.registry import load_registry
from assignment.testing import assert_close
from grader.hidden import generation_reference as gen
from grader.hidden.common import cases
from grader.hidden.sampling_reference import (
    NEG_INF,
    UNDERFLOW,
    allowed_tokens,
    chi_square_p_value,
    draw_top_p,
    nucleus_problem,
    penalised,
    probs_on,
    random_logits,
    top_k_set,
)
from grader.isolation.client import KitObject, SeededGenerator, WorkerFailure, student_module

pytestmark = pytest.mark.t7
TASK = load_registry().task("t7")
CASES = cases(TASK)
SHAPES = [case.values[0] for case in CASES]
PUBLIC = "make test T=t7"
LAYOUT = "row, token"
TOL = TASK.tol("float32")
SCALES = (1e-3, 1.0, 40.0)  # nearly uniform rows; ordinary ones; rows whose float32 exponentials underflow
# A correct sampler fails one frequency check with this probability. The seed changes with every grading, so
# it is a real false-alarm rate: the four checks on CPU and GPU together, under 1e-3 a grading.
FALSE_ALARM_RATE = 1e-4
DRAWS = 40_000
# Greedy on the checkpoint: a token within TIE of the best logit is as right as the best. The checker's logits
# come from one causal pass, the student's from prefill and decode (served by this process, on another copy of
# the weights): on the shipped checkpoint (logits up to 20) the two differ by at most 1.1e-5 (2026-11-23, CPU), and
# the smallest gap between the two best logits over 264 greedy steps of the PROMPTS was 6e-4.
TIE = 1e-4
BYTES = ByteTokenizer()
PROMPTS = (
    "The history of",
    "Once upon a time",
    "In the morning, the",
    "It is a truth universally",
    "The first thing to do is",
    "She looked at the",
    "When the war was over,",
    "The weather",
)


def student():
    return student_module("t7_generate.py", forbidden=TASK.rules.forbidden)


@pytest.fixture(scope="module", autouse=True)
def _worker_started():
    student().worker.prestart()


def rng_for(seed: int, *labels) -> random.Random:
    """This grading's random choices for one check (the same on every device)."""
    return random.Random(":".join(map(str, (seed, *labels))))


def scripted(**kwargs) -> tuple[KitObject, ScriptedModel]:
    """The scripted model served to the call (built on the call's device, in this process, for that call only),
    and the checker's own copy on the CPU to judge with (the same logits: the scripted model draws them on the CPU
    wherever it lives)."""
    return KitObject("scripted_model", kwargs), ScriptedModel(**kwargs)


def check_tensor(out, shape, dtype, name: str) -> None:
    require(
        isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(shape) and out.dtype == dtype,
        "shape",
        f"{name}: expected a {dtype} tensor of shape {tuple(shape)}, got "
        f"{getattr(out, 'dtype', type(out).__name__)} {tuple(getattr(out, 'shape', ()))}",
        f"{name}: wrong shape or dtype",
    )


def kept_of(out, logits: torch.Tensor, name: str) -> torch.Tensor:
    """The tokens a filter kept; kept logits must keep their values and the others be -inf."""
    check_tensor(out, logits.shape, logits.dtype, name)
    out = out.cpu()
    kept = torch.isfinite(out)
    require(
        bool((out[~kept] == NEG_INF).all()) and torch.equal(out[kept], logits[kept]),
        "mismatch",
        f"{name}: a kept logit changed value, or a removed one is not -inf",
        f"{name}: a kept logit changed value, or a removed one is not -inf",
    )
    return kept


def check_probs(probs, z: torch.Tensor, within: torch.Tensor, top_p: float | None, name: str) -> None:
    """next_token_probs against softmax over the right support: top-k exactly, a valid nucleus (its tied tokens
    are the student's pick), nothing else; a token may get 0 only where float32 underflows."""
    check_tensor(probs, z.shape, torch.float32, name)
    probs = probs.cpu().double()
    require(bool(torch.isfinite(probs).all()), "nan", f"{name}: NaN or inf", f"{name}: NaN or inf probabilities")
    support = probs > 0
    chosen = within
    if top_p is not None and top_p < 1:
        problem = nucleus_problem(support, z, within, top_p)
        require(not problem, "mismatch", f"{name}: {problem}", f"{name}: {problem}")
        chosen = support
    expected = probs_on(z, chosen)
    require(
        not bool((support & ~chosen).any()),
        "mismatch",
        f"{name}: probability on a token the filters remove",
        f"{name}: probability on a token the filters remove",
    )
    require(
        not bool((chosen & (expected > UNDERFLOW) & ~support).any()),
        "mismatch",
        f"{name}: probability 0 for a token the filters keep",
        f"{name}: probability 0 for a token the filters keep",
    )
    assert_close(probs, expected, **TOL, name=name, layout=LAYOUT)


def expect_value_error(function: str, *args, why: str, **kwargs) -> None:
    """The call must raise ValueError; a TODO left (NotImplementedError), a crash or a hang is reported as such."""
    try:
        student().call(function, *args, **kwargs)
    except WorkerFailure as exc:
        if exc.kind == "exception" and str(exc).startswith("ValueError"):
            return
        if exc.kind != "exception":
            raise
        raise CheckFailure(
            "mismatch",
            f"{function} with {why}: expected a ValueError, got {exc}",
            f"{function} with {why} raised something other than a ValueError",
        ) from None
    raise CheckFailure(
        "mismatch", f"{function} with {why}: expected a ValueError", f"{function} with {why} raised no ValueError"
    )


def check_token_list(tokens, count: int, vocab: int, stops, name: str) -> None:
    require(
        isinstance(tokens, list) and all(type(t) is int for t in tokens),
        "shape",
        f"{name}: generate must return a list of Python ints, got {type(tokens).__name__}",
        f"{name}: generate must return a list of Python ints",
    )
    require(
        len(tokens) <= count and all(0 <= t < vocab and t not in stops for t in tokens),
        "mismatch",
        f"{name}: {len(tokens)} tokens for max_new_tokens={count}: {tokens}",
        f"{name}: more tokens than max_new_tokens, ids outside the vocabulary, or a stop token returned",
    )


def first_difference(got: list, expected: list) -> str:
    k = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    return f"token {k} differs" if k is not None else f"{len(got)} tokens where {len(expected)} were expected"


# ------------------------------------------------------------------------------------------ the sampling functions


@pytest.mark.cost(4)
@pytest.mark.reproduce(
    f"{PUBLIC} (test_top_k_keeps_every_tie_at_the_kth_value, test_top_p_keeps_the_token_that_crosses_p)"
)
@pytest.mark.parametrize("shape", CASES)
def test_filters_on_random_logits(shape, seed, devices):
    B, V = shape["B"], shape["vocab"]
    rng = rng_for(seed, "filters", B, V)
    for scale in SCALES:
        logits = random_logits(B, V, rng.getrandbits(31), scale)
        z = logits.double()
        k = rng.choice([1, 2, max(1, V // 3), max(1, V - 1), V, V + 7])
        p = draw_top_p(rng, z, torch.isfinite(z))
        for device in devices:
            kept = kept_of(student().top_k_filter(logits.to(device), k), logits, "top_k_filter")
            require(
                torch.equal(kept, top_k_set(z, k)),
                "mismatch",
                f"top_k_filter(k={k}, scale {scale}, {device}): the kept set is not every logit >= the k-th largest",
                "top_k_filter: the kept set is not every logit >= the k-th largest (ties kept)",
            )
            kept = kept_of(student().top_p_filter(logits.to(device), p), logits, "top_p_filter")
            problem = nucleus_problem(kept, z, torch.isfinite(z), p)
            require(
                not problem,
                "mismatch",
                f"top_p_filter(p={p}, scale {scale}, {device}): {problem}",
                f"top_p_filter: {problem}",
            )


@pytest.mark.reproduce(f"{PUBLIC} (test_next_token_probs_match_the_definition)")
@pytest.mark.parametrize("shape", CASES)
def test_next_token_probs_on_random_logits(shape, seed, devices):
    B, V = shape["B"], shape["vocab"]
    rng = rng_for(seed, "probs", B, V)
    for scale in SCALES:
        logits = random_logits(B, V, rng.getrandbits(31), scale)
        temperature = rng.choice([0.4, 0.7, 1.0, 1.6])
        top_k = rng.choice([None, 1, 3, max(1, V // 2), V + 1])
        z = logits.double() / temperature
        within = top_k_set(z, top_k)
        top_p = rng.choice([None, 1.0, draw_top_p(rng, z, within), draw_top_p(rng, z, within)])
        for device in devices:
            probs = student().next_token_probs(logits.to(device), temperature, top_k, top_p)
            check_probs(probs, z, within, top_p, f"next_token_probs(T={temperature}, top_k={top_k}, top_p={top_p})")


@pytest.mark.reproduce(f"{PUBLIC} (test_repetition_penalty_divides_positive_and_multiplies_negative_logits)")
def test_repetition_penalty_on_random_logits(seed, devices):
    rng = rng_for(seed, "penalty")
    for B, V in ((s["B"], s["vocab"]) for s in SHAPES):
        logits = random_logits(B, V, rng.getrandbits(31), rng.choice(SCALES))
        previous = torch.randint(
            0, V, (B, rng.randint(0, min(2 * V, 300))), generator=torch.Generator().manual_seed(rng.getrandbits(31))
        )
        penalty = rng.choice([1.0, 1.2, 2.0, 3.5])
        expected = penalised(logits, previous, penalty)
        for device in devices:
            out = student().apply_repetition_penalty(logits.to(device), previous.to(device), penalty)
            check_tensor(out, logits.shape, torch.float32, "apply_repetition_penalty")
            assert_close(
                out,
                expected,
                **TASK.tol("repetition_penalty"),
                name=f"repetition penalty {penalty}",
                layout=LAYOUT,
                hint="z / penalty if z > 0, else z * penalty, once per distinct token seen",
            )


@pytest.mark.reproduce(f"{PUBLIC} (test_top_k_keeps_every_tie_at_the_kth_value)")
def test_top_k_ties_by_hand(devices):
    logits = torch.tensor(
        [[2.0, 7.0, 7.0, 7.0, 1.0, 7.0], [0.0, -1.0, -1.0, NEG_INF, -1.0, -5.0], [3.0, 3.0, 1.0, NEG_INF, NEG_INF, 0.5]]
    )
    expected = {
        1: [{1, 2, 3, 5}, {0}, {0, 1}],
        2: [{1, 2, 3, 5}, {0, 1, 2, 4}, {0, 1}],
        5: [{0, 1, 2, 3, 5}, {0, 1, 2, 4, 5}, {0, 1, 2, 5}],
    }
    for device in devices:
        for k, rows in expected.items():
            kept = kept_of(student().top_k_filter(logits.to(device), k), logits, f"top_k_filter(k={k})")
            got = [set(torch.nonzero(row).flatten().tolist()) for row in kept]
            require(
                got == rows,
                "mismatch",
                f"top_k_filter(k={k}) kept {got}, expected {rows}",
                "top_k_filter: ties at the k-th largest value must all be kept",
            )


def log_probs(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64).log().float()


@pytest.mark.reproduce(f"{PUBLIC} (test_top_p_keeps_the_token_that_crosses_p)")
def test_top_p_crossing_token_by_hand(devices):
    # Row 0 out of probability order; row 1 with three tied tokens, of which any may be the ones kept.
    logits = log_probs([[0.05, 0.6, 0.25, 0.1], [0.28, 0.28, 0.28, 0.16]])
    for device in devices:
        for p, first_row in ((0.05, {1}), (0.7, {1, 2}), (0.9, {1, 2, 3}), (0.96, {0, 1, 2, 3})):
            kept = kept_of(student().top_p_filter(logits.to(device), p), logits, f"top_p_filter(p={p})")
            got = set(torch.nonzero(kept[0]).flatten().tolist())
            require(
                got == first_row,
                "mismatch",
                f"top_p_filter(p={p}) kept {got}, expected {first_row}",
                "top_p_filter: the token whose probability crosses p must be kept, and no more",
            )
            problem = nucleus_problem(kept[1:], logits[1:].double(), torch.ones(1, 4, dtype=torch.bool), p)
            require(not problem, "mismatch", f"top_p_filter(p={p}), tied row: {problem}", f"top_p_filter: {problem}")


@pytest.mark.reproduce(f"{PUBLIC} (test_top_p_stops_where_a_partial_sum_lands_exactly_on_p)")
def test_top_p_exactly_on_a_partial_sum(devices):
    # 8 and 16 equally likely tokens: probabilities 1/8 and 1/16, exact in float32 (softmax of zeros), so every
    # partial sum is exact and p = 3/8, 5/8, 1/2 lands on one. The set stops there: 3, 5, 4 of the 8 and 6, 10,
    # 8 of the 16 (a set that stops one later keeps 4, 6, 5 and 7, 11, 9).
    eight = torch.full((1, 16), NEG_INF)
    eight[0, ::2] = 0.0
    logits = torch.cat([eight, torch.zeros(1, 16)])
    for device in devices:
        for p, counts in ((0.375, (3, 6)), (0.625, (5, 10)), (0.5, (4, 8))):
            kept = kept_of(student().top_p_filter(logits.to(device), p), logits, f"top_p_filter(p={p})")
            got = tuple(int(row.sum()) for row in kept)
            require(
                got == counts and not bool((kept & ~torch.isfinite(logits)).any()),
                "mismatch",
                f"top_p_filter(p={p}) on 8 and 16 equally likely tokens kept {got} tokens, expected {counts}",
                "top_p_filter: where a partial sum equals p exactly, the set must stop there",
            )


@pytest.mark.reproduce(f"{PUBLIC} (test_temperature_is_applied_before_top_p, test_top_p_works_on_what_top_k_left)")
def test_order_of_temperature_and_filters_by_hand(devices):
    # T = 0.4 sharpens [0.6, 0.25, 0.15] to [0.875, 0.098, 0.027]: p = 0.8 keeps one token (filtering before the
    # temperature keeps two). T = 3 flattens it to [0.421, 0.314, 0.265]: p = 0.8 needs all three. Top-k = 3 of
    # [0.35, 0.3, 0.2, 0.15] leaves [0.41, 0.35, 0.24]: p = 0.7 keeps two (top-p on the original keeps three).
    cases = (
        ([[0.6, 0.25, 0.15]], 0.4, None, 0.8, [[1.0, 0.0, 0.0]]),
        ([[0.6, 0.25, 0.15]], 3.0, None, 0.8, [[0.42067, 0.31427, 0.26506]]),
        ([[0.35, 0.3, 0.2, 0.15]], 1.0, 3, 0.7, [[0.53846, 0.46154, 0.0, 0.0]]),
    )
    for device in devices:
        for probs, temperature, top_k, top_p, expected in cases:
            out = student().next_token_probs(log_probs(probs).to(device), temperature, top_k, top_p)
            check_tensor(out, (1, len(probs[0])), torch.float32, "next_token_probs")
            assert_close(
                out,
                torch.tensor(expected),
                **TASK.tol("probs_by_hand"),
                layout=LAYOUT,
                name=f"next_token_probs(T={temperature}, top_k={top_k}, top_p={top_p})",
                hint="divide by T, then top-k, then top-p on what top-k left, then renormalise",
            )


@pytest.mark.reproduce(f"{PUBLIC} (test_repetition_penalty_divides_positive_and_multiplies_negative_logits)")
def test_repetition_penalty_signs_by_hand(devices):
    logits = torch.tensor([[3.0, -3.0, 0.25, -0.25, 0.0, 1.5], [NEG_INF, 4.5, -0.5, 2.0, -1.0, 0.75]])
    previous = torch.tensor([[0, 1, 1, 3, 4, 4, 3], [0, 1, 2, 2, 2, 2, 5]])
    expected = torch.tensor([[2.0, -4.5, 0.25, -0.375, 0.0, 1.5], [NEG_INF, 3.0, -0.75, 2.0, -1.0, 0.5]])
    for device in devices:
        out = student().apply_repetition_penalty(logits.to(device), previous.to(device), 1.5)
        check_tensor(out, logits.shape, torch.float32, "apply_repetition_penalty")
        assert_close(
            out,
            expected,
            **TASK.tol("repetition_penalty"),
            name="repetition penalty 1.5",
            layout=LAYOUT,
            hint="positive logits are divided by the penalty, negative ones multiplied, each token once",
        )


@pytest.mark.reproduce(f"{PUBLIC} (test_greedy_picks_the_first_maximum)")
def test_greedy_first_maximum_by_hand(devices):
    logits = torch.tensor([[NEG_INF, 2.0, 5.0, 5.0], [1.0, 1.0, 1.0, 1.0], [-3.0, NEG_INF, -3.5, -3.0]])
    for device in devices:
        for top_k, top_p in ((None, None), (1, 0.3)):
            tokens = student().sample_next_token(logits.to(device), 0.0, top_k, top_p)
            check_tensor(tokens, (3,), torch.long, "sample_next_token")
            require(
                tokens.tolist() == [2, 0, 0],
                "mismatch",
                f"greedy picked {tokens.tolist()}, expected [2, 0, 0]",
                "greedy (temperature 0) must pick the first maximum of each row",
            )


@pytest.mark.reproduce(
    f"{PUBLIC} (test_top_k_keeps_every_tie_at_the_kth_value, "
    "test_top_p_keeps_the_token_that_crosses_p, test_next_token_probs_match_the_definition)"
)
def test_sampling_arguments_that_cannot_work():
    logits = torch.randn(2, 9)
    for k in (0, -2):
        expect_value_error("top_k_filter", logits, k, why=f"k = {k}")
    for p in (0.0, -0.5, 1.25):
        expect_value_error("top_p_filter", logits, p, why=f"p = {p}")
    for temperature in (0.0, -1.0):
        expect_value_error("next_token_probs", logits, temperature, why=f"temperature {temperature}")
    expect_value_error("sample_next_token", logits, -0.5, why="temperature -0.5")


# ------------------------------------------------------------------------------------------ sampling


SAMPLING_CONFIGS = {
    "plain": (1.0, False, False),
    "temperature_and_top_k": (0.6, True, False),
    "temperature_and_top_p": (1.4, False, True),
    "all": (0.9, True, True),
}


@pytest.mark.reproduce(f"{PUBLIC} (test_sampling_frequencies_match_the_distribution)")
@pytest.mark.parametrize("config", list(SAMPLING_CONFIGS))
def test_sampling_frequencies(config, seed, devices):
    """DRAWS draws in one batched call against the exact distribution: no draw outside the support, and a
    chi-square test at FALSE_ALARM_RATE."""
    temperature, use_k, use_p = SAMPLING_CONFIGS[config]
    rng = rng_for(seed, "frequencies", config)
    V = rng.randint(10, 24)
    logits = torch.randn(V, generator=torch.Generator().manual_seed(rng.getrandbits(31))) * 1.5
    z = logits.double()[None] / temperature
    top_k = rng.randint(3, V // 2) if use_k else None
    top_p = draw_top_p(rng, z, top_k_set(z, top_k)) if use_p else None
    probs = gen.next_token_distribution(logits, temperature, top_k, top_p)
    draw_seed = rng.getrandbits(31)
    for device in devices:
        tokens = student().sample_next_token(
            logits[None].repeat(DRAWS, 1).to(device), temperature, top_k, top_p, generator=SeededGenerator(draw_seed)
        )
        check_tensor(tokens, (DRAWS,), torch.long, "sample_next_token")
        tokens = tokens.cpu()
        require(
            bool(((tokens >= 0) & (tokens < V)).all()),
            "mismatch",
            "token ids outside the vocabulary",
            "sample_next_token: token ids outside the vocabulary",
        )
        counts = torch.bincount(tokens, minlength=V)
        require(
            not bool(counts[probs == 0].any()),
            "mismatch",
            f"drew tokens the filters remove ({config}, {device})",
            "sample_next_token: drew tokens the filters remove (draw from next_token_probs)",
        )
        p_value = chi_square_p_value(counts, probs)
        require(
            p_value >= FALSE_ALARM_RATE,
            "mismatch",
            f"frequencies ({config}, {device}): chi-square p-value {p_value:.2g} < {FALSE_ALARM_RATE:g}; counts "
            f"{counts.tolist()}, expected {(probs * DRAWS).round().tolist()}",
            f"sample_next_token: the frequencies do not follow the distribution (chi-square p-value "
            f"{p_value:.1g}, false-alarm rate {FALSE_ALARM_RATE:g})",
        )


@pytest.mark.reproduce(f"{PUBLIC} (test_same_generator_seed_same_draws)")
def test_same_generator_seed_same_draws(seed, devices):
    rng = rng_for(seed, "seeds")
    logits = torch.randn(500, 20, generator=torch.Generator().manual_seed(rng.getrandbits(31)))
    draw_seed = rng.getrandbits(31)
    for device in devices:
        first, again, other = (
            student().sample_next_token(logits.to(device), 1.0, None, 0.95, generator=SeededGenerator(s))
            for s in (draw_seed, draw_seed, draw_seed + 1)
        )
        require(
            torch.equal(first, again),
            "not_repeatable",
            f"two calls with generators seeded alike drew different tokens ({device})",
            "sample_next_token: generators seeded alike drew different tokens (pass the generator on)",
        )
        require(
            not torch.equal(first, other),
            "mismatch",
            f"generators with different seeds drew the same 500 tokens ({device})",
            "sample_next_token: generators with different seeds drew the same tokens",
        )
        # The same seed again, a fresh generator, on other logits: each row's first draw made impossible (-inf). Draws
        # kept from an earlier call with that seed (or that generator state) would be exactly those tokens.
        check_tensor(first, (500,), torch.long, "sample_next_token")
        removed = logits.scatter(1, first.cpu()[:, None], NEG_INF)
        redrawn = student().sample_next_token(removed.to(device), 1.0, None, 0.95, generator=SeededGenerator(draw_seed))
        check_tensor(redrawn, (500,), torch.long, "sample_next_token")
        require(
            not bool((redrawn.cpu() == first.cpu()).any()),
            "mismatch",
            f"the same seed on logits without the earlier draws drew them again ({device}): draws kept across calls?",
            "sample_next_token: a seed used again on other logits gave the earlier call's draws (each call must draw "
            "from its own logits with its own generator)",
        )


# ------------------------------------------------------------------------------------------ the loop


@pytest.mark.reproduce(
    f"{PUBLIC} (test_greedy_generation_follows_the_model, test_calls_prefill_once_then_decode_at_the_next_positions)"
)
@pytest.mark.parametrize("shape", CASES)
def test_greedy_generation(shape, seed, devices):
    vocab, count = shape["vocab"], shape["new"]
    rng = rng_for(seed, "greedy", vocab, shape["prompt"], count)
    prompt = [rng.randrange(vocab) for _ in range(shape["prompt"])]
    settings = {
        "vocab_size": vocab,
        "seed": rng.getrandbits(31),
        "max_seq_len": len(prompt) + count + rng.randint(0, 3),
    }
    for device in devices:
        model, local = scripted(**settings)
        expected = gen.greedy(local, prompt, count)
        result = student().call("generate", model, prompt, count, temperature=0.0, device=device)
        check_token_list(result.value, count, vocab, (), "greedy generation")
        require(
            result.value == expected,
            "mismatch",
            f"greedy generation ({device}): {first_difference(result.value, expected)}",
            "greedy generation on the scripted model differs from the model's greedy continuation",
        )
        gen.check_calls(result.calls, prompt, expected, count, "greedy generation")


@pytest.mark.reproduce(f"{PUBLIC} (test_stop_token_ends_generation_and_is_neither_returned_nor_fed)")
def test_stop_tokens(seed, devices):
    rng = rng_for(seed, "stop")
    prompt = [rng.randrange(64) for _ in range(rng.randint(1, 8))]
    settings = {"vocab_size": 64, "seed": rng.getrandbits(31), "max_seq_len": 64}
    plain = gen.greedy(ScriptedModel(**settings), prompt, 40)
    middle = plain[rng.randint(1, len(plain) - 1)]
    unused = next(t for t in range(64) if t not in plain)
    for device in devices:
        for stops in ((unused, middle), (plain[0],), (unused,)):
            model, local = scripted(**settings)
            expected = gen.greedy(local, prompt, 40, stops=stops)
            result = student().call(
                "generate", model, prompt, 40, temperature=0.0, stop_tokens=list(stops), device=device
            )
            check_token_list(result.value, 40, 64, stops, "generation with stop tokens")
            require(
                result.value == expected,
                "mismatch",
                f"stop tokens {stops} ({device}): {first_difference(result.value, expected)}",
                "generation must end at the first stop token drawn, without returning it",
            )
            gen.check_calls(result.calls, prompt, expected, 40, "generation with stop tokens")


@pytest.mark.reproduce(f"{PUBLIC} (test_max_new_tokens_is_exact, test_arguments_that_cannot_work_raise_value_error)")
def test_lengths_and_cache_capacity(seed, devices):
    rng = rng_for(seed, "lengths")
    prompt = [rng.randrange(32) for _ in range(rng.randint(2, 12))]
    for device in devices:
        for count, room in ((0, 4), (1, 0), (rng.randint(5, 20), 0)):
            model, _ = scripted(vocab_size=32, seed=rng.getrandbits(31), max_seq_len=len(prompt) + count + room)
            result = student().call(
                "generate",
                model,
                prompt,
                count,
                temperature=0.7,
                device=device,
                generator=SeededGenerator(rng.getrandbits(31)),
            )
            check_token_list(result.value, count, 32, (), "generation")
            require(
                len(result.value) == count,
                "mismatch",
                f"max_new_tokens={count}: {len(result.value)} tokens",
                "generation must return exactly max_new_tokens tokens when no stop token is drawn"
                + (" (prompt and tokens filling the cache exactly must work)" if room == 0 else ""),
            )
            if count:
                gen.check_calls(result.calls, prompt, result.value, count, "generation")
        model, _ = scripted(vocab_size=32, max_seq_len=len(prompt) + 5)
        expect_value_error("generate", model, prompt, 6, device=device, why="a prompt and tokens past max_seq_len")


@pytest.mark.reproduce(f"{PUBLIC} (test_arguments_that_cannot_work_raise_value_error)")
def test_generation_arguments_that_cannot_work(devices):
    for device in devices:
        model, _ = scripted(vocab_size=16)
        expect_value_error("generate", model, [], 4, device=device, why="an empty prompt")
        expect_value_error("generate", model, [1, 2], -2, device=device, why="max_new_tokens < 0")
        expect_value_error("generate", model, [1, 2], 4, temperature=-0.1, device=device, why="temperature < 0")


@pytest.mark.reproduce(f"{PUBLIC} (test_repetition_penalty_covers_the_prompt_and_the_generated_tokens)")
def test_repetition_penalty_in_generation(seed, devices):
    """A scripted model (searched from this grading's seed) on which no penalty, and the sign rule reversed (the
    right rule with 1 / penalty), give other greedy texts. (Dividing every seen logit, whatever its sign, moves
    the greedy choice only when every logit of a step is negative: the sampling checks catch that mistake.)"""
    rng = rng_for(seed, "penalty-loop")
    vocab, penalty = rng.choice([8, 12, 16]), rng.choice([1.3, 1.8, 2.5])
    prompt = [rng.randrange(vocab) for _ in range(rng.randint(3, 8))]
    for _ in range(500):
        settings = {"vocab_size": vocab, "seed": rng.getrandbits(31), "max_seq_len": 64}
        local = ScriptedModel(**settings)
        expected = gen.greedy(local, prompt, 24, penalty)
        if expected not in (gen.greedy(local, prompt, 24), gen.greedy(local, prompt, 24, 1 / penalty)):
            break
    for device in devices:
        model, _ = scripted(**settings)
        result = student().call(
            "generate", model, prompt, 24, temperature=0.0, repetition_penalty=penalty, device=device
        )
        check_token_list(result.value, 24, vocab, (), "generation with a repetition penalty")
        require(
            result.value == expected,
            "mismatch",
            f"penalty {penalty} ({device}): {first_difference(result.value, expected)}",
            "greedy generation with a repetition penalty differs: "
            "penalise every distinct token of the prompt and of the tokens so far, by the logit's sign",
        )
        gen.check_calls(result.calls, prompt, expected, 24, "generation with a repetition penalty")


LOOP_CONFIGS = ("plain", "top_k_top_p", "top_p_penalty")


def sampling_of(config: str, rng: random.Random) -> dict:
    temperature = rng.choice([0.6, 0.9, 1.0, 1.3])
    return {
        "plain": {"temperature": temperature},
        "top_k_top_p": {"temperature": temperature, "top_k": rng.randint(4, 20), "top_p": rng.choice([0.8, 0.9, 0.95])},
        "top_p_penalty": {
            "temperature": temperature,
            "top_p": rng.choice([0.7, 0.85]),
            "repetition_penalty": rng.choice([1.2, 1.5]),
        },
    }[config]


@pytest.mark.reproduce(f"{PUBLIC} (test_sampled_generation_matches_the_reference_loop_draw_for_draw)")
@pytest.mark.parametrize("config", LOOP_CONFIGS)
def test_sampled_generation(config, seed, devices):
    """Draw for draw against the reference loop with the same seed; a token outside the step's support is
    named as such (the most specific reason)."""
    rng = rng_for(seed, "sampled", config)
    sampling = sampling_of(config, rng)
    prompt = [rng.randrange(64) for _ in range(rng.randint(1, 10))]
    settings = {"vocab_size": 64, "seed": rng.getrandbits(31), "max_seq_len": len(prompt) + 30}
    draw_seed = rng.getrandbits(31)
    penalty = sampling.get("repetition_penalty", 1.0)
    for device in devices:
        model, local = scripted(**settings)
        expected = gen.sampled(
            local,
            prompt,
            30,
            draw_seed,
            device,
            temperature=sampling["temperature"],
            top_k=sampling.get("top_k"),
            top_p=sampling.get("top_p"),
            penalty=penalty,
        )
        result = student().call(
            "generate", model, prompt, 30, generator=SeededGenerator(draw_seed), device=device, **sampling
        )
        tokens = result.value
        check_token_list(tokens, 30, 64, (), "sampled generation")
        for i, token in enumerate(tokens):
            allowed = allowed_tokens(
                gen.step_logits(local, prompt + tokens[:i], penalty),
                sampling["temperature"],
                sampling.get("top_k"),
                sampling.get("top_p"),
            )
            require(
                bool(allowed[token]),
                "mismatch",
                f"sampled generation ({config}, {device}): token {i} is outside the step's support",
                "sampled generation drew a token the step's filters remove",
            )
        require(
            tokens == expected,
            "mismatch",
            f"sampled generation ({config}, {device}): "
            f"{first_difference(tokens, expected)} from the reference loop with the same seed",
            "sampled generation differs from the reference loop with the same seed (one draw per token from "
            "next_token_probs with the generator, every sampling argument passed on)",
        )
        gen.check_calls(result.calls, prompt, tokens, 30, "sampled generation")


@pytest.mark.reproduce(f"{PUBLIC} (test_same_seed_same_text_and_different_seeds_differ)")
def test_generation_seeds(seed, devices):
    rng = rng_for(seed, "generation-seeds")
    settings = {"vocab_size": 64, "seed": rng.getrandbits(31)}
    draw_seed = rng.getrandbits(31)
    model, local = scripted(**settings)
    other_prompt = [rng.randrange(4, 64) for _ in range(rng.randint(2, 8))]

    def generated(prompt: list[int], device: str, seed_of_call: int) -> list[int]:
        call = student().call(
            "generate", model, prompt, 30, temperature=1.0, device=device, generator=SeededGenerator(seed_of_call)
        )
        check_token_list(call.value, 30, 64, (), "generation with a seeded generator")
        return call.value

    for device in devices:
        first, again, other = (generated([1, 2, 3], device, s) for s in (draw_seed, draw_seed, draw_seed + 1))
        require(
            again == first,
            "not_repeatable",
            f"same seed, different tokens ({device})",
            "generation with generators seeded alike gave different tokens",
        )
        require(
            other != first,
            "mismatch",
            f"different seeds, same tokens ({device})",
            "generation with different seeds gave the same tokens",
        )
        # The seed once more, a fresh generator, on another prompt: that prompt's draws (the reference loop's), never
        # the text kept from the calls above.
        elsewhere = generated(other_prompt, device, draw_seed)
        expected = gen.sampled(local, other_prompt, 30, draw_seed, device, temperature=1.0)
        require(
            elsewhere == expected,
            "mismatch",
            f"a seed used again on another prompt ({device}): {first_difference(elsewhere, expected)} from the "
            "reference loop with that seed",
            "generation with a seed used before, on another prompt, differs from the reference loop with that seed "
            "(each call draws from its own logits with its own generator)",
        )


# ------------------------------------------------------------------------------------------ streaming


def cut_inside_a_character(tokens: list[int]) -> int:
    """A length at which the byte text ends with the first bytes of a character a later token completes, after
    a whole 2-byte and a whole 3- or 4-byte character (0: there is none)."""
    for j in range(len(tokens) - 1, 0, -1):
        text = BYTES.decode(tokens[:j])
        sizes = {len(c.encode()) for c in text[:-1] if c != gen.REPLACEMENT}
        if not (text.endswith(gen.REPLACEMENT) and 2 in sizes and sizes & {3, 4}):
            continue
        for later in range(j + 1, min(j + 4, len(tokens) + 1)):
            whole = BYTES.decode(tokens[:later])
            if len(whole) == len(text) and whole[:-1] == text[:-1] and len(whole[-1].encode()) >= 2:
                return j
    return 0


def multibyte_text(rng: random.Random, prompt: list[int]) -> tuple[int, int]:
    """(seed, length): a scripted byte model whose greedy text of that length has whole multi-byte characters and
    ends inside one (random bytes give this within 80 tokens for about one seed in ten)."""
    for _ in range(2000):
        model_seed = rng.getrandbits(31)
        tokens = gen.greedy(ScriptedModel(BYTES.vocab_size, seed=model_seed), prompt, 80, stops=BYTES.stop_ids)
        length = cut_inside_a_character(tokens)
        if length:
            return model_seed, length
    raise RuntimeError("no scripted byte model writes multi-byte characters (instructor error)")


@pytest.mark.reproduce(
    f"{PUBLIC} (test_stream_yields_whole_characters_that_join_to_the_text, "
    "test_stream_yields_each_character_as_soon_as_it_is_complete, "
    "test_stream_flushes_an_incomplete_last_character)"
)
def test_stream_greedy_multibyte_text(seed, devices):
    rng = rng_for(seed, "stream")
    prompt = BYTES.encode(rng.choice(PROMPTS))
    model_seed, count = multibyte_text(rng, prompt)
    settings = {"vocab_size": BYTES.vocab_size, "seed": model_seed, "max_seq_len": 256}
    for device in devices:
        model, local = scripted(**settings)
        expected = gen.greedy(local, prompt, count, stops=BYTES.stop_ids)
        result = student().call(
            "stream",
            model,
            KitObject("byte_tokenizer"),
            prompt,
            count,
            temperature=0.0,
            stop_tokens=list(BYTES.stop_ids),
            drain=True,
            device=device,
        )
        gen.check_stream(result.value, result.steps, expected, BYTES.decode, "streaming greedy text")
        gen.check_calls(result.calls, prompt, expected, count, "streaming")


@pytest.mark.reproduce(f"{PUBLIC} (test_stream_equals_generate_with_the_same_seed)")
@pytest.mark.parametrize("top_p", [None, 0.9], ids=["plain", "top_p"])
def test_stream_sampled_bytes(top_p, seed, devices):
    # Random bytes: multi-byte characters, bytes that are no UTF-8 at all, and the EOS stop token.
    rng = rng_for(seed, "stream-sampled", top_p)
    prompt = BYTES.encode(rng.choice(PROMPTS))
    settings = {"vocab_size": BYTES.vocab_size, "seed": rng.getrandbits(31), "max_seq_len": 256, "sharpness": 1.0}
    draw_seed = rng.getrandbits(31)
    for device in devices:
        model, local = scripted(**settings)
        expected = gen.sampled(
            local, prompt, 150, draw_seed, device, temperature=1.0, top_p=top_p, penalty=1.1, stops=BYTES.stop_ids
        )
        result = student().call(
            "stream",
            model,
            KitObject("byte_tokenizer"),
            prompt,
            150,
            temperature=1.0,
            top_p=top_p,
            repetition_penalty=1.1,
            stop_tokens=list(BYTES.stop_ids),
            generator=SeededGenerator(draw_seed),
            drain=True,
            device=device,
        )
        gen.check_stream(result.value, result.steps, expected, BYTES.decode, "streaming sampled text")


# ------------------------------------------------------------------------------------------ the shipped checkpoint


def checkpoint_call(function: str, device: str, prompt: list[int], count: int, max_seq_len: int, *extra, **kwargs):
    model = KitObject("checkpoint_model", {"max_seq_len": max_seq_len})
    return student().call(function, model, *extra, prompt, count, device=device, **kwargs)


def check_greedy_on_checkpoint(loaded, tokens, prompt: list[int], count: int) -> None:
    """Each token is the kit model's best (within TIE) after the prompt and the tokens before it, and a text
    shorter than ``count`` ended where the best token is a stop token."""
    stops = tuple(loaded.tokenizer.stop_ids)
    check_token_list(tokens, count, loaded.model.vocab_size, stops, "greedy generation on the checkpoint")
    logits = gen.logits_along(loaded, prompt, tokens)
    for i, token in enumerate(tokens):
        require(
            float(logits[i, token]) >= float(logits[i].max()) - TIE,
            "mismatch",
            f"greedy token {i} is not the best after the prompt and the tokens before it",
            "greedy generation on the kit's checkpoint differs from the kit's own greedy continuation",
        )
    if len(tokens) < count:
        row = logits[len(tokens)]
        require(
            max(float(row[s]) for s in stops) >= float(row.max()) - TIE,
            "mismatch",
            f"stopped after {len(tokens)} of {count} tokens where no stop token is the best",
            "greedy generation on the checkpoint stopped early, without a stop token",
        )


@pytest.mark.cost(14)
@pytest.mark.reproduce(f"{PUBLIC} (test_generation_on_the_shipped_model)")
def test_greedy_on_the_checkpoint(seed, devices):
    rng = rng_for(seed, "checkpoint-greedy")
    runs = [(text, rng.randint(8, 24), rng.randint(0, 8)) for text in rng.sample(PROMPTS, 2)]
    for device in devices:
        loaded = gen.shipped_checkpoint(device)
        for text, count, room in runs:
            prompt = loaded.tokenizer.encode(text)
            max_seq_len = len(prompt) + count + room
            result = checkpoint_call(
                "generate",
                device,
                prompt,
                count,
                max_seq_len,
                temperature=0.0,
                stop_tokens=list(loaded.tokenizer.stop_ids),
            )
            check_greedy_on_checkpoint(loaded, result.value, prompt, count)
            gen.check_calls(result.calls, prompt, result.value, count, "greedy generation on the checkpoint")


@pytest.mark.cost(14)
@pytest.mark.reproduce(f"{PUBLIC} (test_generation_on_the_shipped_model)")
def test_sampled_on_the_checkpoint(seed, devices):
    rng = rng_for(seed, "checkpoint-sampled")
    text, count = rng.choice(PROMPTS), rng.randint(16, 32)
    sampling = {
        "temperature": rng.choice([0.7, 1.0]),
        "top_k": rng.randint(20, 60),
        "top_p": rng.choice([0.8, 0.9]),
        "repetition_penalty": 1.1,
    }
    draw_seed = rng.getrandbits(31)
    for device in devices:
        loaded = gen.shipped_checkpoint(device)
        prompt, stops = loaded.tokenizer.encode(text), tuple(loaded.tokenizer.stop_ids)
        tokens, again = (
            checkpoint_call(
                "generate",
                device,
                prompt,
                count,
                len(prompt) + count,
                stop_tokens=list(stops),
                generator=SeededGenerator(draw_seed),
                **sampling,
            ).value
            for _ in range(2)
        )
        check_token_list(tokens, count, loaded.model.vocab_size, stops, "sampled generation on the checkpoint")
        logits = gen.logits_along(loaded, prompt, tokens).cpu()
        for i, token in enumerate(tokens):
            z = penalised(logits[i][None], torch.tensor([prompt + tokens[:i]]), sampling["repetition_penalty"])[0]
            allowed = allowed_tokens(z, sampling["temperature"], sampling["top_k"], sampling["top_p"])
            require(
                bool(allowed[token]),
                "mismatch",
                f"sampled token {i} ({device}) is outside the step's support",
                "sampled generation on the checkpoint drew a token the step's filters remove",
            )
        require(
            again == tokens,
            "not_repeatable",
            f"same seed, different text on the checkpoint ({device})",
            "sampled generation on the checkpoint: the same seed gave a different text",
        )


@pytest.mark.cost(14)
@pytest.mark.reproduce(f"{PUBLIC} (test_generation_on_the_shipped_model)")
def test_stream_on_the_checkpoint(seed, devices):
    rng = rng_for(seed, "checkpoint-stream")
    text, count = rng.choice(PROMPTS), rng.randint(12, 24)
    for device in devices:
        loaded = gen.shipped_checkpoint(device)
        tokenizer = loaded.tokenizer
        prompt, stops = tokenizer.encode(text), list(tokenizer.stop_ids)
        max_seq_len = len(prompt) + count
        tokens = checkpoint_call(
            "generate", device, prompt, count, max_seq_len, temperature=0.0, stop_tokens=stops
        ).value
        check_greedy_on_checkpoint(loaded, tokens, prompt, count)
        result = checkpoint_call(
            "stream",
            device,
            prompt,
            count,
            max_seq_len,
            KitObject("checkpoint_tokenizer"),
            temperature=0.0,
            stop_tokens=stops,
            drain=True,
        )
        gen.check_stream(result.value, result.steps, tokens, tokenizer.decode, "streaming on the checkpoint")
        gen.check_calls(result.calls, prompt, tokens, count, "streaming on the checkpoint")
