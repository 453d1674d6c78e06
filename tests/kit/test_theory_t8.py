"""t8's theory questions (issue 27): fragments of mma.sync m16n8k16, shared-memory bank conflicts, arithmetic
intensity at 16 bits; and their points, which are t8's: bonus points while t8 is a bonus task, regular ones when
the instructor makes it a regular task.

The fragment layouts are checked against an independent construction: what ldmatrix delivers (its PTX semantics)
from a row-major block when the lanes give the addresses in the orders the t8 solution uses, and what the
solution's pack_p does with the scores. The solution passes t8's GPU tests, so these orders are right, and so is a
key that agrees with them.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from assignment.registry import REGISTRY_PATH, RegistryError, load_registry
from assignment.theory import answers
from assignment.theory.questions import questions_for, render_text
from grader.grade.report import csv_row, gradescope_results, summary_lines
from grader.grade.scoring import SubmissionScore
from grader.grade.theory import (
    BONUS_TAG,
    answer_key,
    attention_intensity_key,
    bank_conflicts_key,
    fragment_a_owner,
    fragment_b_owner,
    fragment_c_position,
    grade_theory,
    reference_answers,
    tile_byte,
    wavefronts,
)

from kit_theory import IDS, REGISTRY, graded, outcome, question

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
SOLUTION = (REPO / "solutions" / "t8_flash_attention_tc.cu").read_text()
THEORY = REGISTRY.theory
KINDS = ("fragments", "bank_conflicts", "attention_intensity")


# --------------------------------------------------------------------------- fragments: an independent construction


def ldmatrix_x4(block, address, trans=False):
    """What ldmatrix.sync.aligned.m8n8.x4(.trans).b16 gives each lane from a 16 x 16 row-major ``block`` (a grid of
    labels): lanes 8i .. 8i+7 give the 8 rows of matrix i, ``address(lane) = (row, chunk)``, chunk = 8 elements;
    register r[i] of lane 4g + t then holds row g, elements 2t and 2t + 1 of matrix i (.trans: column g, rows 2t
    and 2t + 1), the lower one in the low half. -> {(lane, i, half): label}."""
    held = {}
    for i in range(4):
        matrix = [block[r][8 * c : 8 * c + 8] for r, c in (address(lane) for lane in range(8 * i, 8 * i + 8))]
        for lane in range(32):
            g, t = divmod(lane, 4)
            for half in range(2):
                held[lane, i, half] = matrix[2 * t + half][g] if trans else matrix[g][2 * t + half]
    return held


def a_order(lane):  # the solution's FragAddr::off_a: row lane & 15, chunk lane >> 4 (Q; V through .trans)
    return lane & 15, lane >> 4


def b_order(lane):  # the solution's FragAddr::off_b: row (lane & 7) + 8 (lane >> 4), chunk (lane >> 3) & 1 (K)
    return (lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1


def test_the_orders_are_those_of_the_solution():
    assert "swizzle<D>(lane & 15, 2 * c + (lane >> 4))" in SOLUTION
    assert "swizzle<D>((lane & 7) + 8 * (lane >> 4), 2 * c + ((lane >> 3) & 1))" in SOLUTION
    assert "return r * (D / 8) + (c ^ (r & 7));" in SOLUTION  # the swizzle of the bank question


def test_the_a_layout_is_what_ldmatrix_gives_from_q_in_a_order():
    q = [[(r, c) for c in range(16)] for r in range(16)]
    held = ldmatrix_x4(q, a_order)  # a[i] = r[i]: element a(2i + half)
    owners = {}
    for r in range(16):
        for c in range(16):
            lane, index = fragment_a_owner(r, c)
            assert held[lane, index // 2, index % 2] == (r, c), (r, c, lane, index)
            owners[lane, index] = (r, c)
    assert len(owners) == 256, "every lane's a0 .. a7 is one element, and every element has one place"


def test_the_b_layout_is_what_ldmatrix_gives_from_k_and_from_v():
    # S = Q K^T: B = K^T, so B[k][n] is element (key n, dim k) of a 16 keys x 16 dims block of K, in B order;
    # keys 0..7: (b0, b1) = (r[0], r[1]), keys 8..15: (r[2], r[3]).
    k_block = [[("K", key, dim) for dim in range(16)] for key in range(16)]
    from_k = ldmatrix_x4(k_block, b_order)
    # O += P V: B = V, B[k][n] is element (key k, dim n) of a 16 keys x 16 dims block of V, through .trans in A
    # order; dims 0..7: (b0, b1) = (r[0], r[1]), dims 8..15: (r[2], r[3]).
    v_block = [[("V", key, dim) for dim in range(16)] for key in range(16)]
    from_v = ldmatrix_x4(v_block, a_order, trans=True)
    owners = set()
    for half_tile in range(2):  # the two n-tiles one ldmatrix feeds
        for k in range(16):
            for n in range(8):
                lane, index = fragment_b_owner(k, n)
                register = 2 * half_tile + index // 2
                assert from_k[lane, register, index % 2] == ("K", 8 * half_tile + n, k)
                assert from_v[lane, register, index % 2] == ("V", k, 8 * half_tile + n)
                owners.add((lane, index))
    assert len(owners) == 128


def pack_p_sources() -> dict[tuple[int, int], tuple[int, int]]:
    """The solution's pack_p: element a(2 reg + half) of P's A fragment for keys 16j .. 16j + 15 <- (which of the
    n-tiles 2j, 2j + 1, which element of its C fragment)."""
    found = re.findall(
        r"pa\[mt\]\[j\]\[(\d)\] = pack_f32x2<T>\(s\[mt\]\[2 \* j( \+ 1)?\]\[(\d)\], s\[mt\]\[2 \* j( \+ 1)?\]\[(\d)\]\)",
        SOLUTION,
    )
    sources = {}
    for register, odd_lo, lo, odd_hi, hi in found[:4]:  # pack_p's body (the open level's kernel repeats it)
        sources[int(register), 0] = (int(bool(odd_lo)), int(lo))
        sources[int(register), 1] = (int(bool(odd_hi)), int(hi))
    assert len(sources) == 8, found
    return sources


def test_the_c_layout_is_the_a_layout_of_p_the_way_the_solution_packs_it():
    """pack_p hands a lane's scores to the A operand of P V without moving them between lanes: so a C element's
    place is the A place of the element pack_p makes of it, less 8 columns for the odd n-tile."""
    q = [[(r, c) for c in range(16)] for r in range(16)]
    a_place = ldmatrix_x4(q, a_order)
    for (register, half), (odd, element) in pack_p_sources().items():
        for lane in range(32):
            row, col = a_place[lane, register, half]
            assert fragment_c_position(lane, element) == (row, col - 8 * odd), (lane, register, half)


def test_the_fragment_keys_follow_the_layouts_for_many_ids():
    sources = {v: 2 * register + half for (register, half), v in pack_p_sources().items()}
    for sid in IDS:
        q = question(sid, "fragments")
        p, key = q.params, list(answer_key(q).values())
        assert key[:2] == list(fragment_a_owner(p["a_row"], p["a_col"]))
        assert key[2:4] == list(fragment_b_owner(p["b_row"], p["b_col"]))
        assert key[4] == 8 * p["ntile"] + fragment_c_position(p["lane"], p["element"])[1]
        assert key[5] == sources[p["ntile"] % 2, p["element"]]
        assert 0 <= key[0] < 32 and 0 <= key[1] < 8 and 0 <= key[2] < 32 and 0 <= key[3] < 4 and 0 <= key[4] < 64


def test_plausible_wrong_fragment_answers_score_zero():
    """The layout read transposed, the quarters of A in the wrong order, g and t swapped, a register for an
    element: the draws make each of them a different number from the key."""
    for sid in IDS[:30]:
        q = question(sid, "fragments")
        p, keys = q.params, list(answer_key(q))
        r, c, k, n, lane, e, j = (p[x] for x in ("a_row", "a_col", "b_row", "b_col", "lane", "element", "ntile"))
        g, t = divmod(lane, 4)
        wrong = {
            keys[0]: 4 * (c % 8) + (r % 8) // 2,  # A read transposed
            keys[1]: 4 * (r >= 8) + 2 * (c >= 8) + c % 2,  # the quarters bottom-left and top-right swapped
            keys[2]: 4 * (k % 8) + n // 2,  # B read as if it were laid out like A
            keys[4]: 8 * j + 2 * g + e % 2,  # g and t swapped
            keys[5]: 2 * (j % 2) + e // 2,  # the register a[k] instead of the element ai
        }
        key = answer_key(q)
        for part, value in wrong.items():
            if part == keys[5] and value == key[part]:
                continue  # j even, e 0 or 1: the register and the element agree
            assert value != key[part], (sid, part)
            result = outcome(graded(sid, {part: value}), part)
            assert result.score == 0 and result.output.startswith(f"incorrect: {value} [") and "exact" in result.output


# --------------------------------------------------------------------------- bank conflicts


def layout(name: str, pad: int = 0, cols: int = 64) -> dict:
    return {"layout": name, "pad": pad, "rows": 64, "cols": cols}


@pytest.mark.parametrize("cols", [64, 128])
@pytest.mark.parametrize(
    ("name", "pad", "expected"),
    [
        # Rows of 128 (256) bytes start in bank 0: the 8 rows of an ldmatrix matrix share 4 banks (8-way, 4 x 8),
        # the 8 rows g of a0 a1 too (8-way), the 4 rows 2t of V's b0 share theirs (4 words each: 4-way), a column
        # is 32 words in one bank.
        ("padded", 0, (32, 8, 4, 32)),
        # 16 bytes more a row: row r starts 4r banks on, every 8 rows apart in a different group of 4 banks.
        ("padded", 8, (4, 1, 1, 4)),
        # 32 bytes: 8r banks on, rows r and r + 4 collide: 2-way for 8 rows, 8-way for 32.
        ("padded", 16, (8, 2, 2, 8)),
        # 48 bytes: 12r mod 32 banks on, 8 different groups of 4 for 8 consecutive rows.
        ("padded", 24, (4, 1, 1, 4)),
        # 64 bytes: 16r banks on, only 2 starting banks: 4-way for 8 rows, 16-way for 32.
        ("padded", 32, (16, 4, 4, 16)),
        # t8's swizzle: 8 consecutive rows put a chunk in 8 different places; a column still hits 8 banks 4 times.
        ("swizzled", 0, (4, 1, 1, 4)),
    ],
)
def test_the_bank_model_on_layouts_worked_by_hand(name, pad, expected, cols):
    for r0 in (0, 3, 16):  # any starting row: the swizzle mixes r mod 8, 8 consecutive rows cover them all
        p = layout(name, pad, cols) | {"element": (1, 9), "block": (r0, 16), "column": (r0, 5)}
        a = bank_conflicts_key(p | {"fragment": "a"})
        v = bank_conflicts_key(p | {"fragment": "v"})
        assert (a[2], a[3], v[3], a[4]) == expected
        assert a[0] == 2 * 64 * (cols + pad)


def test_the_swizzled_and_padded_addresses_and_the_phases():
    swizzled = layout("swizzled", cols=128)
    for r in range(16):
        for c in range(0, 128, 8):  # the solution's swizzle(): chunk r * (D / 8) + (c ^ (r & 7))
            assert tile_byte(swizzled, r, c) == 16 * (r * 16 + ((c // 8) ^ (r & 7)))
    assert tile_byte(layout("padded", 8), 2, 3) == 2 * (2 * 72 + 3)
    assert wavefronts([[(0, 4)] * 32]) == 1, "32 lanes reading one word: a broadcast"
    assert wavefronts([[(0, 2), (2, 2)], [(128, 2)]]) == 2, "two halves of one word: one word; phases add up"
    assert wavefronts([[(0, 4), (128, 4), (256, 4)]]) == 3, "three words of bank 0"


def test_a_conflict_count_off_by_the_padding_scores_zero():
    seen = 0
    for sid in IDS:
        q = question(sid, "bank_conflicts")
        if q.params["layout"] == "padded" and q.params["pad"] == 0:
            continue
        seen += 1
        key = answer_key(q)
        plain = bank_conflicts_key(q.params | {"layout": "padded", "pad": 0})  # the padding or the swizzle forgotten
        keys = list(key)
        assert plain[2] != key[keys[2]], sid  # no padding or swizzle of the question's leaves ldmatrix as it was
        result = graded(sid, {keys[2]: plain[2]})
        assert outcome(result, keys[2]).score == 0 and outcome(result, keys[2]).output.startswith("incorrect")
        if q.params["pad"]:
            assert plain[0] != key[keys[0]] and outcome(graded(sid, {keys[0]: plain[0]}), keys[0]).score == 0
    assert seen > len(IDS) // 2


# --------------------------------------------------------------------------- arithmetic intensity


def test_the_intensity_key_on_a_case_worked_by_hand():
    p = {"gpu": "NVIDIA H100 SXM", "peak": 989e12, "bandwidth": 3.35e12, "dtype": "bf16"}
    p |= {"B": 8, "H": 16, "H_kv": 4, "L": 4096, "d": 128, "Br": 128}
    flops = 4 * 8 * 16 * 4096**2 * 128
    ideal = 2 * 8 * (16 * 2 * 4096 * 128 + 4 * 2 * 4096 * 128) + 4 * 8 * 16 * 4096  # Q and O; K and V; LSE
    no_l2 = 2 * 8 * 16 * (2 * 4096 * 128 + 32 * 2 * 4096 * 128) + 4 * 8 * 16 * 4096  # 32 query tiles a head
    expected = [flops / 1e9, ideal / 1e6, flops / ideal, 989 / 3.35, flops / 989e12 * 1e6, flops / no_l2]
    assert attention_intensity_key(p) == pytest.approx(expected, rel=1e-12)
    assert expected[2] > expected[3] > expected[5], "compute-bound ideally; memory-bound if L2 never helped"
    short = attention_intensity_key(p | {"L": 256, "H_kv": 16})
    assert short[2] < short[3] and short[4] == pytest.approx(short[1] * 1e6 / 3.35e12 * 1e6), "memory-bound"


def test_the_intensity_questions_vary_and_fp32_bytes_score_zero():
    bound = set()
    for sid in IDS[:30]:
        q = question(sid, "attention_intensity")
        key = answer_key(q)
        keys = list(key)
        bound.add(key[keys[2]] > key[keys[3]])
        as_fp32 = {keys[1]: key[keys[1]] * 2 - 4 * 1e-6 * q.params["B"] * q.params["H"] * q.params["L"]}
        as_fp32[keys[2]] = key[keys[0]] * 1e9 / (as_fp32[keys[1]] * 1e6)
        result = graded(sid, as_fp32)
        for part in as_fp32:
            assert outcome(result, part).score == 0 and "within 1% of the key" in outcome(result, part).output
        rounded = graded(sid, {k: float(f"{v:.4g}") for k, v in key.items()})
        assert all(outcome(rounded, k).passed for k in keys), "four significant digits are enough"
    assert bound == {True, False}, "some draws are memory-bound, most compute-bound"


# --------------------------------------------------------------------------- per student


def test_the_numbers_are_pinned_and_differ_between_students():
    if THEORY.salt != "flashattention-from-scratch-2026":
        pytest.skip("the registry's salt changed: every student's numbers changed with it")
    fragments, banks, intensity = (question("s0000001", kind) for kind in KINDS)
    assert fragments.params == {"a_row": 3, "a_col": 12, "b_row": 9, "b_col": 7, "lane": 7, "element": 2, "ntile": 4}
    assert (banks.params["layout"], banks.params["pad"], banks.params["cols"], banks.params["block"]) == (
        "padded",
        8,
        128,
        (54, 16),
    )
    assert (intensity.params["gpu"], intensity.params["B"], intensity.params["H"], intensity.params["L"]) == (
        "NVIDIA A100 SXM 80GB",
        16,
        32,
        512,
    )
    assert [q.number for q in (fragments, banks, intensity)] == [7, 8, 9], "after the course's questions and proof"
    for kind in KINDS:
        drawn = {repr(sorted(question(sid, kind).params.items())) for sid in IDS}
        assert len(drawn) >= 0.8 * len(IDS), kind


# --------------------------------------------------------------------------- points: bonus or regular with t8


def t8_regular(tmp_path: Path):
    """The registry with t8 made a regular task and the total raised by its 25 points and its questions' 8.5."""
    text = REGISTRY_PATH.read_text()
    assert text.count('id = "t8"\n') == 1 and "bonus = true\n" in text
    raised = REGISTRY.total_points + REGISTRY.task("t8").points.total + THEORY.task_points("t8")
    text = text.replace("bonus = true\n", "bonus = false\n", 1)
    text = text.replace(f"total_points = {REGISTRY.total_points:g}", f"total_points = {raised:g}", 1)
    path = tmp_path / "tasks.toml"
    path.write_text(text)
    return load_registry(path)


def test_t8s_questions_are_bonus_points_while_t8_is_a_bonus_task():
    assert REGISTRY.task("t8").bonus
    kinds = [k for k in THEORY.kinds if k.task == "t8"]
    assert [k.name for k in kinds] == list(KINDS) and all(k.bonus for k in kinds)
    assert THEORY.task_points("t8") == sum(k.points for k in kinds) > 0
    bonus_tasks = {k.task for k in THEORY.kinds if k.bonus}
    assert "t8" in bonus_tasks and THEORY.bonus_points == sum(THEORY.task_points(t) for t in bonus_tasks)
    assert THEORY.regular_points == THEORY.own_points == THEORY.points - THEORY.bonus_points
    regular_tasks = sum(t.points.total for t in REGISTRY.tasks if not t.bonus)
    assert regular_tasks + THEORY.regular_points == REGISTRY.total_points, "the total leaves them out"


def test_making_t8_a_regular_task_makes_its_questions_regular(tmp_path):
    registry = t8_regular(tmp_path)
    theory = registry.theory
    assert not registry.task("t8").bonus and not any(k.bonus for k in theory.kinds if k.task == "t8")
    moved = THEORY.task_points("t8")
    assert theory.bonus_points == THEORY.bonus_points - moved, "the other bonus tasks' questions stay bonus"
    assert theory.regular_points == THEORY.regular_points + moved and theory.points == THEORY.points
    assert sum(t.points.total for t in registry.tasks if not t.bonus) + theory.regular_points == registry.total_points
    # The total raised by the task's points alone does not add up: the message says where the rest is.
    path = tmp_path / "tasks.toml"
    short = REGISTRY.total_points + REGISTRY.task("t8").points.total
    path.write_text(path.read_text().replace(f"total_points = {registry.total_points:g}", f"total_points = {short:g}"))
    with pytest.raises(RegistryError, match=rf"is {short:g} but .* the theory's to {theory.regular_points:g}"):
        load_registry(path)


@pytest.mark.parametrize("bonus", [True, False])
def test_the_grading_counts_t8s_questions_as_the_task_counts(bonus, tmp_path):
    registry = REGISTRY if bonus else t8_regular(tmp_path)
    theory = registry.theory
    result = grade_theory(reference_answers("alice", registry).encode(), registry)
    t8_tests = [t for t in result.tests if "theory-t8" in t.tags]
    assert len(t8_tests) == 6 + 5 + 6 and all(t.passed for t in t8_tests)
    assert all((BONUS_TAG in t.tags) == bonus for t in t8_tests)
    for test in (t for t in result.tests if t not in t8_tests):  # another task's: bonus while that task is one
        tasks = [tag.removeprefix("theory-") for tag in test.tags if tag.startswith("theory-")]
        assert "t8" not in tasks and (BONUS_TAG in test.tags) == any(registry.task(t).bonus for t in tasks), test.name
    assert not any("t8" in t.tags for t in result.tests), "the bare id marks the task's own checks"
    assert result.max_score == theory.points and result.score == pytest.approx(theory.points - theory.proof_points)
    assert result.bonus_max == pytest.approx(theory.bonus_points)
    assert sum(t.max_score for t in t8_tests if BONUS_TAG in t.tags) == pytest.approx(
        theory.task_points("t8") if bonus else 0.0
    )
    submission = SubmissionScore("alice", [], [], 1.0, {}, result)
    assert submission.max_score(registry) == pytest.approx(theory.regular_points)
    assert submission.score == pytest.approx(theory.points - theory.proof_points), (
        "bonus points are earned all the same"
    )
    line = next(line for line in summary_lines(submission) if line.startswith("Theory questions"))
    assert ("bonus points" in line) == (theory.bonus_points > 0)
    results = gradescope_results(submission)
    assert sum(t["max_score"] for t in results["tests"]) == pytest.approx(theory.points)
    header, row = csv_row(submission, registry)
    assert dict(zip(header, row))["theory"] == f"{theory.points - theory.proof_points:.2f}"
    questions = questions_for("alice", theory)
    text = " ".join(render_text("alice", questions, registry).split())  # the lines joined
    assert f"{theory.regular_points:g} points" in text
    if bonus:
        assert re.search(rf"{THEORY.bonus_points:g} bonus points \(the questions of t8\b", text)
        assert "(3 bonus points of t8, exact)" in text
    else:
        assert "(the questions of t8" not in text and "(3 points of t8, exact)" in text


def test_a_kind_must_name_a_task_of_the_registry(tmp_path):
    text = REGISTRY_PATH.read_text()
    for bad, why in (('task = "t10"', "names no task of the registry"), ("task = 8", "names no task of the registry")):
        path = tmp_path / "tasks.toml"
        path.write_text(text.replace('rtol = 0, task = "t8" }', f"rtol = 0, {bad} }}", 1))
        with pytest.raises(RegistryError, match=rf"field 'theory.questions.fragments.task': {why}"):
            load_registry(path)


def test_no_key_value_shows_in_what_a_student_sees():
    for sid in IDS[:10]:
        questions = questions_for(sid, THEORY)
        shown = render_text(sid, questions, REGISTRY) + answers.render(sid, questions, REGISTRY)
        q = question(sid, "attention_intensity")
        for value in answer_key(q).values():
            assert f"{value:.4f}" not in shown, (sid, value)
        assert math.isfinite(sum(answer_key(q).values()))
