"""Grading the theory part: each student's answer key, the numeric answers scored, the proof listed for a person.

    python -m grader.grade.theory --key s1234567                    # the questions with their key, and the rubric
    python -m grader.grade.theory --key s1234567 --write FILE       # an answers file holding the key (demo, tests)

Instructor-only (the student bundle has none of ``grader/``): the questions and their numbers come from
``assignment/theory`` (what students run), the answers from the formulas here, one function per kind, each
following the counting convention its question states. A numeric answer scores its share of the kind's points
when it is within the registry's relative tolerance of the key; a missing, empty or non-numeric answer scores 0
and says why. The written proof scores 0 here, pending: it is listed for grading by hand with the rubric
(grading.json) and as ``manual`` in results.json. A submission without an answers file, or with one that cannot
be read, is still graded: every theory question 0, with the reason. The questions of a task (``task`` in the
registry: t8's) are tagged theory-<task>, and ``bonus`` while that task is a bonus task: their points then come on
top of the course's total, as the task's own do (``TheoryScore.bonus_max``, ``SubmissionScore.max_score``).

The questions are those of the submission's student id: ``GradeConfig.student_id`` when the grader knows it
(the batch grader's roster), else the ``student_id`` in the answers file. When both are known and differ, the
answers are graded against the submission's questions and the grading is flagged for review.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from assignment.atomic import write_atomic
from assignment.perf.cases import attention_work
from assignment.registry import Registry, RubricItem, load_registry
from assignment.theory import answers as answers_file
from assignment.theory.kinds import number_text
from assignment.theory.questions import (
    Question,
    TheoryError,
    normalise_id,
    points_text,
    questions_for,
    render_text,
    theory_points_text,
    tolerance_text,
)
from grader.grade.scored import ScoredTest
from grader.grade.theory_hopper import fp8_intensity_key, pipeline_depth_key, register_budget_key

TAG = "theory"
MANUAL_TAG = "manual"
BONUS_TAG = "bonus"  # a question of a bonus task: its points come on top of the course's total, as the task's do
# The questions' structure (their keys and parts) is the same for every id: an answers file without a usable id
# is still reported question by question, against this placeholder's questions.
PLACEHOLDER_ID = "unknown"


# --------------------------------------------------------------------------- the answer key, per kind


def hbm_key(p: dict) -> list[float]:
    N, d, M = p["N"], p["d"], p["M"]
    block = M // (4 * d)
    passes = -(-N // block)  # one pass over K and V per query block, the partial last one included
    reads = (2 * N * d) + (N * N) + (N * N + N * d)  # Q and K; S; P and V
    writes = (N * N) + (N * N) + (N * d)  # S, P, O
    flash = N * d + passes * 2 * N * d + N * d + N  # Q once, K and V once per pass, O and the LSE once
    return [reads + writes, block, passes, flash]


def smem_footprint(p: dict, bc: int) -> int:
    padded = p["d"] + p["pad"]
    return 4 * ((p["Br"] + 2 * bc) * padded + p["Br"] * (bc + p["pad"]))


def smem_key(p: dict) -> list[float]:
    footprint = smem_footprint(p, p["Bc"])
    largest = 0
    while smem_footprint(p, largest + 16) <= p["per_block"]:
        largest += 16
    resident = p["per_sm"] // (footprint + p["reserved"]) if footprint <= p["per_block"] else 0
    return [footprint, largest, resident]


def roofline_key(p: dict) -> list[float]:
    h, layers, head_dim = p["hidden"], p["layers"], p["head_dim"]
    weights = (
        layers * (h * head_dim * (2 * p["heads"] + 2 * p["kv_heads"]) + 3 * h * p["intermediate"]) + h * p["vocab"]
    )
    kv_per_token = 2 * layers * p["kv_heads"] * head_dim

    def attention_flops(queries: int, keys: int) -> int:
        return layers * 4 * head_dim * p["heads"] * queries * keys

    prefill_flops = 2 * weights * p["T"] + attention_flops(p["T"], p["T"])
    prefill_bytes = p["bytes_per_value"] * (weights + kv_per_token * p["T"])
    decode_flops = 2 * weights + attention_flops(1, p["C"])
    decode_bytes = p["bytes_per_value"] * (weights + kv_per_token * p["C"])
    prefill_ai, decode_ai = prefill_flops / prefill_bytes, decode_flops / decode_bytes
    peak, bandwidth = p["peak"], p["bandwidth"]
    return [
        prefill_ai,
        min(peak, prefill_ai * bandwidth) / 1e12,
        decode_ai,
        min(peak, decode_ai * bandwidth) / 1e12,
        max(decode_flops / peak, decode_bytes / bandwidth) * 1e3,
    ]


def online_softmax_key(p: dict) -> list[float]:
    """From the invariant's definition (sums over every score seen), not from the recurrence it is about."""
    states = []
    for j in range(1, len(p["blocks"]) + 1):
        seen = [(s, v) for block, values in zip(p["blocks"][:j], p["values"][:j]) for s, v in zip(block, values)]
        m = max(s for s, _ in seen)
        states.append((m, sum(math.exp(s - m) for s, _ in seen), sum(math.exp(s - m) * v for s, v in seen)))
    (_, l1, _), (_, l2, acc2), (m3, l3, acc3) = states
    return [l1, l2, acc2, l3, acc3 / l3, m3 + math.log(l3)]


def split_kv_key(p: dict) -> list[float]:
    m = max(x for x in p["lse"] if x != -math.inf)
    lse = m + math.log(sum(math.exp(x - m) for x in p["lse"]))  # exp(-inf) = 0: an empty split weighs nothing
    weights = [math.exp(x - lse) for x in p["lse"]]
    return [lse] + [sum(w * o[i] for w, o in zip(weights, p["outputs"])) for i in range(len(p["outputs"][0]))]


# t8's questions. The fragment layouts of mma.sync.m16n8k16 with .f16/.bf16 inputs are the PTX ISA's ("Matrix
# Fragments for mma.m16n8k16 with floating point type"), with g = lane >> 2 and t = lane % 4:
#   A (16 x 16): ai in row g for i in {0, 1, 4, 5}, g + 8 otherwise; column 2t + (i & 1), + 8 for i >= 4
#   B (16 x 8):  bi in row 2t + (i & 1), + 8 for i >= 2; column g
#   C (16 x 8):  ci in row g for i < 2, g + 8 otherwise; column 2t + (i & 1)
# tests/kit/test_theory_t8.py checks them against what ldmatrix delivers in the orders kit.cuh and t8 use.


def fragment_a_owner(row: int, col: int) -> tuple[int, int]:
    """The lane and the i of ai that hold element (row, col) of A."""
    return 4 * (row % 8) + (col % 8) // 2, 2 * (row >= 8) + 4 * (col >= 8) + col % 2


def fragment_b_owner(row: int, col: int) -> tuple[int, int]:
    """The lane and the i of bi that hold element (row, col) of B."""
    return 4 * col + (row % 8) // 2, 2 * (row >= 8) + row % 2


def fragment_c_position(lane: int, i: int) -> tuple[int, int]:
    """The (row, column) of C that lane ``lane``'s ci holds."""
    return lane // 4 + 8 * (i >= 2), 2 * (lane % 4) + i % 2


def fragments_key(p: dict) -> list[float]:
    a_lane, a_index = fragment_a_owner(p["a_row"], p["a_col"])
    b_lane, b_index = fragment_b_owner(p["b_row"], p["b_col"])
    row, col = fragment_c_position(p["lane"], p["element"])
    # pack_p: n-tiles 2m and 2m + 1 are the left and right halves (k 0..7 and 8..15) of P's 16 x 16 A tile.
    p_lane, p_index = fragment_a_owner(row, col + 8 * (p["ntile"] % 2))
    if p_lane != p["lane"]:
        raise AssertionError("pack_p would move a score to another lane")
    return [a_lane, a_index, b_lane, b_index, 8 * p["ntile"] + col, p_index]


def tile_byte(p: dict, row: int, col: int) -> int:
    """The byte offset of element (row, col) of the 16-bit tile of a bank_conflicts question."""
    if p["layout"] == "swizzled":  # t8's: the 16-byte chunk k of row r stored at chunk k ^ (r % 8)
        return 2 * row * p["cols"] + 16 * ((col // 8) ^ (row % 8)) + 2 * (col % 8)
    return 2 * (row * (p["cols"] + p["pad"]) + col)


def wavefronts(phases: list[list[tuple[int, int]]]) -> int:
    """The shared-memory wavefronts of one instruction, given as phases of accesses (byte address, size): a phase
    takes the largest number of distinct 4-byte words one of the 32 banks delivers in it (a word that several
    lanes read counts once); the phases add up."""
    total = 0
    for phase in phases:
        words = defaultdict(set)
        for start, size in phase:
            for word in range(start // 4, (start + size - 1) // 4 + 1):
                words[word % 32].add(word)
        total += max(len(w) for w in words.values())
    return total


def bank_conflicts_key(p: dict) -> list[float]:
    (r2, c2), (r0, c0), (r1, c1) = p["element"], p["block"], p["column"]
    ldmatrix = [  # one phase per 8 x 8 matrix: lanes 8m .. 8m + 7 give its rows, 16 bytes each (t8's A order)
        [(tile_byte(p, r0 + lane % 16, c0 + 8 * (lane // 16)), 16) for lane in range(8 * m, 8 * m + 8)]
        for m in range(4)
    ]
    if p["fragment"] == "a":  # a0 a1 of lane 4g + t: row g, columns 2t and 2t + 1, one 32-bit word
        fragment = [[(tile_byte(p, r0 + lane // 4, c0 + 2 * (lane % 4)), 4) for lane in range(32)]]
    else:  # b0 of V (B = V, rows k): row 2t, column g, 16 bits
        fragment = [[(tile_byte(p, r0 + 2 * (lane % 4), c0 + lane // 4), 2) for lane in range(32)]]
    column = [[(tile_byte(p, r1 + lane, c1), 2) for lane in range(32)]]
    return [
        2 * p["rows"] * (p["cols"] + p["pad"]),
        tile_byte(p, r2, c2) // 4 % 32,
        wavefronts(ldmatrix),
        wavefronts(fragment),
        wavefronts(column),
    ]


def attention_intensity_key(p: dict) -> list[float]:
    """FLOPs and ideal bytes as the bench counts them (assignment.perf.cases.attention_work), 2 bytes a value."""
    B, H, L, d = p["B"], p["H"], p["L"], p["d"]
    flops, ideal = attention_work(B, H, L, L, d, False, H_kv=p["H_kv"], element_bytes=2)
    query_tiles = -(-L // p["Br"])
    no_l2 = 2 * B * H * (2 * L * d + query_tiles * 2 * L * d) + 4 * B * H * L  # Q and O; K and V a block; the LSE
    return [
        flops / 1e9,
        ideal / 1e6,
        flops / ideal,
        p["peak"] / p["bandwidth"],
        max(flops / p["peak"], ideal / p["bandwidth"]) * 1e6,
        flops / no_l2,
    ]


KEYS = {
    "hbm": hbm_key,
    "smem": smem_key,
    "roofline": roofline_key,
    "online_softmax": online_softmax_key,
    "split_kv": split_kv_key,
    "fragments": fragments_key,
    "bank_conflicts": bank_conflicts_key,
    "attention_intensity": attention_intensity_key,
    "pipeline_depth": pipeline_depth_key,
    "register_budget": register_budget_key,
    "fp8_intensity": fp8_intensity_key,
}


def answer_key(question: Question) -> dict[str, float]:
    """Part key -> the answer, for a numeric question."""
    values = KEYS[question.kind](question.params)
    if len(values) != len(question.parts):
        raise AssertionError(f"the {question.kind} key has {len(values)} answers for {len(question.parts)} parts")
    return {part.key: value for part, value in zip(question.parts, values)}


def within(answer: float, key: float, rtol: float) -> bool:
    """|answer - key| <= rtol |key|; rtol 0 is exact (but for the last bits of a float)."""
    return abs(answer - key) <= (rtol + 1e-12) * abs(key)


# --------------------------------------------------------------------------- scoring a submission


@dataclass
class ManualItem:
    """A written answer for a person to grade."""

    name: str
    key: str  # the answers file's key: "q6"
    max_score: float
    answer: str
    rubric: tuple[RubricItem, ...]


@dataclass
class TheoryScore:
    student_id: str | None
    max_score: float
    tests: list[ScoredTest] = field(default_factory=list)
    manual: list[ManualItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # the student sees these
    review: list[str] = field(default_factory=list)  # the instructor's flags

    @property
    def score(self) -> float:
        return sum(test.score for test in self.tests)

    @property
    def numeric(self) -> list[ScoredTest]:
        return [test for test in self.tests if MANUAL_TAG not in test.tags]

    @property
    def numeric_max(self) -> float:
        return sum(test.max_score for test in self.numeric)

    @property
    def bonus_max(self) -> float:
        """The points of the questions of bonus tasks: on top of the course's total."""
        return sum(test.max_score for test in self.tests if BONUS_TAG in test.tags)

    @property
    def regular_max(self) -> float:
        """What the theory part adds to the course's total."""
        return self.max_score - self.bonus_max


def grade_theory(
    data: bytes | None, registry: Registry, student_id: str | None = None, absent: str | None = None
) -> TheoryScore | None:
    """Score a submission's answers file (its bytes; None when the submission has none). None: no theory part."""
    theory = registry.theory
    if theory is None:
        return None
    name = theory.answers_file
    given = _usable_id(student_id)
    result = TheoryScore(given, theory.points)
    if data is None:
        return _all_zero(
            result,
            registry,
            absent or f"no {name} in the submission (`make theory ID=<your id>` writes it; `make submit` packs it)",
        )
    try:
        found = answers_file.parse(data.decode("utf-8"), name)
    except UnicodeDecodeError:
        return _all_zero(result, registry, f"{name} is not UTF-8 text")
    except answers_file.AnswersError as exc:
        return _all_zero(result, registry, f"{name} could not be read, so no answer was graded: {exc}")
    recorded = _usable_id(found.student_id)
    if given and found.student_id and recorded != given:
        result.review.append(
            f"review: {name} names student {found.student_id!r} but the submission is {given!r}; "
            f"graded against {given!r}'s questions"
        )
        result.notes.append(f"{name} names student {found.student_id!r}: graded against the questions of {given!r}")
    result.student_id = given or recorded
    if result.student_id is None:
        why = "names no student_id" if not found.student_id else f"names student {found.student_id!r}, not a valid id"
        return _all_zero(
            result,
            registry,
            f"{name} {why}, so its questions are unknown: keep the student_id line that `make theory` wrote",
        )
    for question in questions_for(result.student_id, theory):
        if question.written:
            result.tests.append(_manual(question, found.written.get(question.key), theory.rubric, result))
        else:
            key = answer_key(question)
            for part in question.parts:
                result.tests.append(_scored(question, part, found.answers, key[part.key], name))
    return result


def _usable_id(raw: str | None) -> str | None:
    try:
        return normalise_id(raw) if raw else None
    except TheoryError:
        return None


def _test_name(question: Question, label: str = "") -> str:
    return f"theory Q{question.number}{label and ' ' + label} {question.title}"


def _tags(question: Question) -> list[str]:
    """theory, the kind, and for a task's question theory-<task id> (never the bare id, which marks the task's own
    checks wherever results.json is read by task) and bonus while the task is a bonus task."""
    task = [f"{TAG}-{question.task}"] if question.task else []
    return [TAG, question.kind, *task] + ([BONUS_TAG] if question.bonus else [])


def _scored(question: Question, part, given: dict, key: float, name: str) -> ScoredTest:
    points = question.part_points
    tolerance = tolerance_text(question.rtol)
    if part.key not in given:
        return _zero(question, part, f"no answer: {part.key} is missing from {name}")
    try:
        value = answers_file.number(given[part.key])
    except ValueError as exc:
        return _zero(question, part, f"not graded: {part.key}: {exc}")
    if value is None:
        return _zero(question, part, f"no answer: {part.key} is empty in {name}")
    if within(value, key, question.rtol):
        return ScoredTest(
            name=_test_name(question, part.label),
            score=points,
            max_score=points,
            passed=True,
            output=f"correct: {value:.10g} [{part.unit}] ({tolerance})",
            tags=_tags(question),
        )
    return ScoredTest(
        name=_test_name(question, part.label),
        score=0.0,
        max_score=points,
        passed=False,
        output=f"incorrect: {value:.10g} [{part.unit}] is not {tolerance}. Check the unit and the counting "
        "convention the question states.",
        tags=_tags(question),
    )


def _zero(question: Question, part, why: str) -> ScoredTest:
    return ScoredTest(
        name=_test_name(question, part.label),
        score=0.0,
        max_score=question.part_points,
        passed=False,
        output=why,
        tags=_tags(question),
    )


def _manual(question: Question, text, rubric: tuple[RubricItem, ...], result: TheoryScore) -> ScoredTest:
    text = text if isinstance(text, str) else ""
    result.manual.append(ManualItem(_test_name(question), question.key, question.points, text.strip(), rubric))
    words = len(text.split())
    output = (
        f"graded by hand after the deadline ({number_text(question.points)} points, pending): your proof "
        f"has {words} words"
        if words
        else f"no proof written ([written] {question.key} is empty): 0 of "
        f"{number_text(question.points)} points when it is graded by hand"
    )
    return _unmarked_proof(question, output)


def _unmarked_proof(question: Question, output: str) -> ScoredTest:
    """The written proof's line: 0 until it is graded by hand."""
    return ScoredTest(
        name=_test_name(question),
        score=0.0,
        max_score=question.points,
        passed=False,
        output=output,
        tags=[TAG, MANUAL_TAG],
    )


def _all_zero(result: TheoryScore, registry: Registry, why: str) -> TheoryScore:
    """Every question listed at 0 with the reason (the structure is the same for every id)."""
    result.notes.append(why)
    for question in questions_for(result.student_id or PLACEHOLDER_ID, registry.theory):
        if question.written:
            result.manual.append(
                ManualItem(_test_name(question), question.key, question.points, "", registry.theory.rubric)
            )
            result.tests.append(_unmarked_proof(question, why))
        else:
            result.tests += [_zero(question, part, why) for part in question.parts]
    return result


# --------------------------------------------------------------------------- the instructor's command


def reference_answers(student_id: str, registry: Registry) -> str:
    """An answers file holding one student's key (and a placeholder proof): the demo grades it."""
    student_id = normalise_id(student_id)
    questions = questions_for(student_id, registry.theory)
    numeric = {k: v for q in questions if not q.written for k, v in answer_key(q).items()}
    written = {q.key: "(The demo's placeholder: a proof is graded by hand.)" for q in questions if q.written}
    return answers_file.render(student_id, questions, registry, answers_file.Answers(student_id, numeric, written))


def key_text(student_id: str, registry: Registry) -> str:
    student_id = normalise_id(student_id)
    questions = questions_for(student_id, registry.theory)
    header = (
        f"Theory answer key of student {student_id!r} (instructor-only): {registry.title}, "
        f"{theory_points_text(registry.theory)}"
    )
    lines = [header, ""]
    for question in questions:
        lines.append(f"Q{question.number}. {question.title} ({points_text(question)}, {tolerance_text(question.rtol)})")
        if question.written:
            lines += [f"  [{number_text(item.points)}] {item.criterion}" for item in registry.theory.rubric]
        else:
            for part, value in zip(question.parts, answer_key(question).values()):
                lines.append(f"  {part.key} = {value:.10g} [{part.unit}]  {part.label} {part.prompt}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A student's theory answer key (instructor-only).")
    parser.add_argument("--key", metavar="ID", required=True, help="the student id whose key to print")
    parser.add_argument("--questions", action="store_true", help="print the questions' full text first")
    parser.add_argument("--write", type=Path, metavar="FILE", help="write an answers file holding the key instead")
    args = parser.parse_args(argv)
    registry = load_registry()
    if registry.theory is None:
        print("the registry has no [theory] table", file=sys.stderr)
        return 2
    try:
        if args.write:
            write_atomic(args.write, reference_answers(args.key, registry))
            print(f"wrote {args.write}: the answer key of {normalise_id(args.key)!r}")
            return 0
        if args.questions:
            print(render_text(normalise_id(args.key), questions_for(args.key, registry.theory), registry))
        print(key_text(args.key, registry))
    except TheoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
