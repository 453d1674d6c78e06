"""t9's theory questions: the TMA pipeline's shared memory and mbarrier phases, the registers per warpgroup under
setmaxnreg, FlashAttention at fp8 on the roofline; and their points, which are t9's (bonus while t9 is a bonus task).

The keys are checked against what does not come from them: the reference kernel's own configuration (its Cfg and
Layout, whose register counts ptxas reported as 168 at d = 128 and 128 at d = 64 with `nvcc -arch=sm_90a -Xptxas
-v`, and whose consumers take 240 and 160), a step-by-step model of an mbarrier's phases, and exact rational
arithmetic for the roofline's crossing point.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from pathlib import Path

import pytest

from assignment.registry import REGISTRY_PATH, load_registry
from assignment.theory import answers
from assignment.theory.questions import questions_for, render_text
from grader.grade.theory import BONUS_TAG, answer_key, grade_theory, reference_answers
from grader.grade.theory_hopper import (
    _fp8_work,
    consumer_registers,
    fp8_intensity_key,
    launch_registers,
    pipeline_bytes,
    pipeline_depth_key,
    register_budget_key,
)

from kit_theory import IDS, REGISTRY, graded, outcome, question

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
SOLUTION = (REPO / "solutions" / "t9_flash_attention_hopper.cu").read_text()
THEORY = REGISTRY.theory
KINDS = ("pipeline_depth", "register_budget", "fp8_intensity")


def reference_config(d: int) -> dict[str, int]:
    """The solution's Cfg<d>: NCWG, BN, STAGES, CONSUMER_REGS, PRODUCER_REGS."""
    block = re.search(rf"struct Cfg<{d}> \{{\n\s*static constexpr int (.*?);", SOLUTION).group(1)
    return {name: int(value) for name, value in re.findall(r"(\w+) = (\d+)", block)}


# --------------------------------------------------------------------------- the pipeline


@pytest.mark.parametrize("d", [64, 128])
def test_the_pipeline_bytes_are_the_reference_kernels_carve_up(d):
    cfg = reference_config(d)
    p = {"per_block": 227 * 1024, "d": d, "consumers": cfg["NCWG"], "Bc": cfg["BN"], "stages": cfg["STAGES"]}
    p |= {"Lk": 1000, "iteration": 7}
    # Layout<D>::BYTES: 2 * (Q_ELEMS + 2 * STAGES * KV_ELEMS) + 1024, the mbarriers beside it in static memory.
    assert "BYTES = 2 * (Q_ELEMS + 2 * C::STAGES * KV_ELEMS) + 1024" in SOLUTION
    dynamic = 2 * (64 * cfg["NCWG"] * d + 2 * cfg["STAGES"] * cfg["BN"] * d) + 1024
    assert pipeline_bytes(p, cfg["STAGES"]) == dynamic + 8 * (1 + 4 * cfg["STAGES"])
    key = pipeline_depth_key(p)
    assert key[0] == pipeline_bytes(p, cfg["STAGES"]) <= p["per_block"], "the reference fits"
    assert key[1] >= cfg["STAGES"] and pipeline_bytes(p, key[1] + 1) > p["per_block"] >= pipeline_bytes(p, key[1])
    # The producer announces the whole box (KV_ELEMS two-byte values), the zero fill past Lk included.
    assert "mbarrier_arrive_expect_tx(&bars.k_full[s], L::KV_ELEMS * 2)" in SOLUTION
    assert key[2] == 2 * cfg["BN"] * d


def test_the_pipeline_on_a_case_worked_by_hand():
    # d 128, two consumers, 128-key tiles: Q 32 KiB, a K and V stage 64 KiB; 227 KiB holds 3 stages, not 4.
    p = {"per_block": 232448, "d": 128, "consumers": 2, "Bc": 128, "stages": 2, "Lk": 1000, "iteration": 5}
    assert pipeline_depth_key(p) == [32768 + 131072 + 1024 + 72, 3, 32768, 1, 3, 1]
    assert pipeline_bytes(p, 3) == 32768 + 196608 + 1024 + 104 <= 232448 < pipeline_bytes(p, 4)


class Mbarrier:
    """A model of an mbarrier's phases: try_wait.parity(P) passes when the current (unfinished) phase's parity is
    not P, that is when the most recent phase of parity P has completed (before phase 0: parity 1, completed)."""

    def __init__(self):
        self.completed = 0

    def passes(self, parity: int) -> bool:
        return self.completed % 2 != parity


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_the_stage_phase_and_parity_keys_follow_a_model_of_the_barriers(stages):
    """Run the schedule: the producer may refill a stage for tile i only once the consumers have released it for
    tile i - S, and the consumers' wait on the full barrier passes only once tile i has landed; the key's parities
    must pass exactly then and block one release (one landing) earlier."""
    full = [Mbarrier() for _ in range(stages)]
    empty = [Mbarrier() for _ in range(stages)]
    p = {"per_block": 232448, "d": 64, "consumers": 2, "Bc": 64, "stages": stages, "Lk": 100}
    for i in range(40):
        stage, phases, producer_parity = pipeline_depth_key(p | {"iteration": i})[3:]
        assert stage == i % stages
        if i >= stages:
            empty[stage].completed -= 1  # one release short: the producer must still wait
            assert not empty[stage].passes(producer_parity), (i, stages)
            empty[stage].completed += 1
        assert empty[stage].passes(producer_parity), (i, stages)
        assert not full[stage].passes(phases % 2 ^ 1), "the copy has not landed yet"
        full[stage].completed += 1  # the copy lands
        assert full[stage].completed == phases and full[stage].passes((phases - 1) % 2)
        empty[stage].completed += 1  # the consumers release the stage
    # The solution waits with the same parities.
    assert "const uint32_t phase = (k / STAGES) & 1;" in SOLUTION  # k: the block's key tile count so far
    assert "kit::mbarrier_wait(&bars.k_empty[s], phase ^ 1);" in SOLUTION
    assert "kit::mbarrier_wait(&bars.k_full[s], phase);" in SOLUTION


def test_a_ragged_tiles_rows_announced_instead_of_the_box_score_zero():
    for sid in IDS[:20]:
        q = question(sid, "pipeline_depth")
        p, keys = q.params, list(answer_key(q))
        present = p["Lk"] - (p["Lk"] // p["Bc"]) * p["Bc"]
        assert 0 < present < p["Bc"], "every draw has a ragged last tile"
        wrong = {keys[2]: 2 * present * p["d"], keys[0]: pipeline_bytes(p, p["stages"]) - 8 * (1 + 4 * p["stages"])}
        result = graded(sid, wrong)
        for part, value in wrong.items():
            assert outcome(result, part).score == 0 and outcome(result, part).output.startswith(f"incorrect: {value}")


# --------------------------------------------------------------------------- registers


@pytest.mark.parametrize(("d", "launch"), [(64, 128), (128, 168)])
def test_the_register_keys_give_the_reference_kernels_budget(d, launch):
    cfg = reference_config(d)
    p = {"registers": 65536, "consumers": cfg["NCWG"], "producer": cfg["PRODUCER_REGS"], "d": d, "Bc": cfg["BN"]}
    p["other"] = 32
    assert launch_registers(p) == launch, "what ptxas reported for the reference (Used N registers)"
    assert consumer_registers(p) == cfg["CONSUMER_REGS"], "the reference takes the largest count the pool allows"
    key = register_budget_key(p)
    assert key[1] == 128 * (launch - cfg["PRODUCER_REGS"])
    assert key[1] >= 128 * cfg["NCWG"] * (key[2] - launch) and key[1] < 128 * cfg["NCWG"] * (key[2] + 8 - launch)
    # S (BN/2 fp32), O (d/2 fp32), P (BN/4 packed pairs) per thread, as the solution declares them.
    assert "float s_acc[BN / 2];" in SOLUTION and "float o_acc[D / 2];" in SOLUTION
    assert "uint32_t p[BN / 16][4];" in SOLUTION
    assert key[3] == cfg["BN"] // 2 + d // 2 + cfg["BN"] // 16 * 4


def test_the_register_budget_on_cases_worked_by_hand():
    # Four consumers: 640 threads, 102.4 registers each -> 96; the producer returns 128 * 72; each consumer
    # warpgroup may take 72 / 4 = 18 -> 16 more a thread: 112, not the 120 the SM's whole file would suggest.
    # At d 128 O alone takes 64 of them: 3/4 B_c <= 112 - 32 - 64 leaves 16-key tiles, 0 with 48 kept aside.
    p = {"registers": 65536, "consumers": 4, "producer": 24, "d": 128, "Bc": 64, "other": 32}
    assert register_budget_key(p) == [96, 9216, 112, 32 + 64 + 16, 16]
    assert register_budget_key(p | {"other": 48})[4] == 0
    # Two consumers, d 64: 240 registers; S, O and P of 176 keys take 88 + 32 + 44; 3/4 B_c <= 240 - 32 - 32.
    p = {"registers": 65536, "consumers": 2, "producer": 24, "d": 64, "Bc": 176, "other": 32}
    assert register_budget_key(p) == [168, 18432, 240, 164, 224]


def test_the_register_draws_cover_both_sides_and_a_pool_slip_scores_zero():
    widest = set()
    for sid in IDS:
        q = question(sid, "register_budget")
        key = answer_key(q)
        keys = list(key)
        widest.add(key[keys[4]] > 0)
        p = q.params
        whole_file = (p["registers"] - 128 * p["producer"]) // (128 * p["consumers"]) // 8 * 8
        if whole_file != key[keys[2]]:  # the SM's whole file instead of the block's pool (W = 4)
            assert outcome(graded(sid, {keys[2]: whole_file}), keys[2]).score == 0
    assert widest == {True, False}, "some budgets leave no tile width at all"


# --------------------------------------------------------------------------- fp8 on the roofline


def test_the_fp8_key_on_a_case_worked_by_hand():
    p = {"gpu": "NVIDIA H100 SXM", "peak_fp8": 1979e12, "peak_bf16": 989e12, "bandwidth": 3.35e12}
    p |= {"B": 4, "H": 16, "H_kv": 4, "L": 8192, "d": 128, "causal": False}
    flops = 4 * 128 * 4 * 16 * 8192**2
    fp8 = 4 * 8192 * 128 * (16 + 8) + 2 * 4 * 16 * 8192 * 128 + 4 * 4 * 16 * 8192  # Q, K, V; O in bf16; LSE
    bf16 = fp8 + 4 * 8192 * 128 * (16 + 8)
    t8, t16 = max(flops / 1979e12, fp8 / 3.35e12), max(flops / 989e12, bf16 / 3.35e12)
    key = fp8_intensity_key(p)
    assert key[:5] == pytest.approx([flops / 1e9, fp8 / 1e6, flops / fp8, t8 * 1e6, t16 / t8], rel=1e-12)
    assert key[4] == pytest.approx(1979 / 989), "compute-bound in both: the peaks' ratio"
    # Compute-bound from L on: 4 d H L / (d (H + 2 H_kv) + 2 d H + 4 H) >= 1979 / 3.35.
    per_length = Fraction(4 * 128 * 16, 128 * 24 + 2 * 128 * 16 + 4 * 16)
    assert key[5] == math.ceil(Fraction(1979_000, 3_350) / per_length)


@pytest.mark.parametrize("causal", [False, True])
def test_the_crossing_length_is_the_first_compute_bound_one(causal):
    for sid in IDS[:30]:
        p = question(sid, "fp8_intensity").params | {"causal": causal}
        shortest = fp8_intensity_key(p)[5]
        ridge = Fraction(int(p["peak_fp8"]), int(p["bandwidth"]))
        below, at = (Fraction(*_fp8_work(p, length)[:2]) for length in (shortest - 1, shortest))
        assert below < ridge <= at, (sid, causal)


def test_the_fp8_draws_cover_both_regimes_and_plausible_slips_score_zero():
    regimes = set()
    for sid in IDS:
        q = question(sid, "fp8_intensity")
        p, key = q.params, answer_key(q)
        keys = list(key)
        memory_bound = key[keys[2]] < p["peak_fp8"] / p["bandwidth"]
        regimes.add(memory_bound)
        flops, fp8_bytes, _ = _fp8_work(p, p["L"])
        wrong = {keys[1]: (fp8_bytes - p["B"] * p["H"] * p["L"] * p["d"]) / 1e6}  # O counted in fp8
        if memory_bound:
            wrong[keys[4]] = p["peak_fp8"] / p["peak_bf16"]  # the peaks' ratio where the bytes decide
        result = graded(sid, wrong)
        for part in wrong:
            assert outcome(result, part).score == 0 and "within 1% of the key" in outcome(result, part).output
    assert regimes == {True, False}, "some draws are memory-bound at fp8, some compute-bound"


# --------------------------------------------------------------------------- per student, points


def test_the_numbers_are_pinned_and_differ_between_students():
    if THEORY.salt != "flashattention-from-scratch-2026":
        pytest.skip("the registry's salt changed: every student's numbers changed with it")
    pipeline, registers, fp8 = (question("s0000001", kind) for kind in KINDS)
    assert (pipeline.params["d"], pipeline.params["consumers"], pipeline.params["Bc"]) == (128, 2, 192)
    assert (registers.params["consumers"], registers.params["producer"]) == (3, 40)
    assert (fp8.params["gpu"], fp8.params["H"], fp8.params["L"], fp8.params["causal"]) == (
        "NVIDIA H200 SXM",
        32,
        1024,
        True,
    )
    assert [q.number for q in (pipeline, registers, fp8)] == [10, 11, 12], "after t8's questions"
    for kind in KINDS:
        drawn = {repr(sorted(question(sid, kind).params.items())) for sid in IDS}
        assert len(drawn) >= 0.8 * len(IDS), kind
    for sid in IDS:
        assert list(answer_key(question(sid, "pipeline_depth")).values())[1] >= 2, "two stages always fit"


def test_t9s_questions_are_bonus_points_of_t9_and_regular_once_t9_is(tmp_path):
    assert REGISTRY.task("t9").bonus
    kinds = [k for k in THEORY.kinds if k.task == "t9"]
    assert [k.name for k in kinds] == list(KINDS) and all(k.bonus for k in kinds)
    result = grade_theory(reference_answers("alice", REGISTRY).encode(), REGISTRY)
    t9_tests = [t for t in result.tests if "theory-t9" in t.tags]
    assert len(t9_tests) == 6 + 5 + 6 and all(t.passed and BONUS_TAG in t.tags for t in t9_tests)
    assert sum(t.max_score for t in t9_tests) == pytest.approx(THEORY.task_points("t9"))
    text = " ".join(render_text("alice", questions_for("alice", THEORY), REGISTRY).split())
    assert "(3 bonus points of t9, exact)" in text and "(2.5 bonus points of t9, exact)" in text
    # t9 made a regular task, the total raised by its points and its questions'.
    source = REGISTRY_PATH.read_text()
    block = source.index('id = "t9"')
    raised = REGISTRY.total_points + REGISTRY.task("t9").points.total + THEORY.task_points("t9")
    edited = source[:block] + source[block:].replace("bonus = true\n", "bonus = false\n", 1)
    edited = edited.replace(f"total_points = {REGISTRY.total_points:g}", f"total_points = {raised:g}", 1)
    path = tmp_path / "tasks.toml"
    path.write_text(edited)
    regular = load_registry(path)
    assert not regular.task("t9").bonus and not any(k.bonus for k in regular.theory.kinds if k.task == "t9")
    result = grade_theory(reference_answers("alice", regular).encode(), regular)
    assert not any(BONUS_TAG in t.tags for t in result.tests if "theory-t9" in t.tags)


def test_no_key_value_shows_in_what_a_student_sees():
    for sid in IDS[:10]:
        questions = questions_for(sid, THEORY)
        shown = render_text(sid, questions, REGISTRY) + answers.render(sid, questions, REGISTRY)
        q = question(sid, "fp8_intensity")
        for value in list(answer_key(q).values())[:5]:
            assert f"{value:.4f}" not in shown, (sid, value)
        assert math.isfinite(sum(answer_key(q).values()))
