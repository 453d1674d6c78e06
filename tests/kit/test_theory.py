"""The theory part: questions drawn per student id (assignment/theory), the answer key and the grading
(grader/grade/theory.py), the answers file (`make theory`, `make submit`) and the reports (results.json, grades.csv,
report.html, grading.json)."""

from __future__ import annotations

import ast
import csv
import json
import math
import os
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from assignment import submit
from assignment.registry import REGISTRY_PATH, RegistryError, load_registry
from assignment.theory import answers
from assignment.theory.questions import TheoryError, normalise_id, questions_for, render_markdown, render_text
from grader.release import release
from grader.grade.config import GradeConfig
from grader.grade.grade import grade_submission
from grader.grade.report import csv_row, gradescope_results, instructor_record, write_all
from grader.grade.scoring import SubmissionScore
from grader.grade.theory import (
    answer_key,
    grade_theory,
    online_softmax_key,
    reference_answers,
    smem_footprint,
    split_kv_key,
)

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
THEORY = REGISTRY.theory
IDS = [f"s{n:07d}" for n in range(40)] + ["alice", "bob.smith@uni.edu", "x"]


def numeric_parts(student_id: str):
    return [(q, p) for q in questions_for(student_id, THEORY) if not q.written for p in q.parts]


def keyed_file(student_id: str, change: dict | None = None, written: str = "A proof.") -> bytes:
    """An answers file holding the key of ``student_id``, with some answers replaced."""
    questions = questions_for(student_id, THEORY)
    values = {k: v for q in questions if not q.written for k, v in answer_key(q).items()}
    values.update(change or {})
    proofs = {q.key: written for q in questions if q.written}
    return answers.render(student_id, questions, REGISTRY, answers.Answers(student_id, values, proofs)).encode()


# --------------------------------------------------------------------------- drawing


def test_the_same_id_gets_the_same_questions_in_any_process():
    first = questions_for("alice", THEORY)
    assert first == questions_for("  Alice ", THEORY), "the id is trimmed and lower-cased"
    # Another interpreter with another hash seed: nothing may depend on hash() or the process.
    code = (
        "import json; from assignment.registry import load_registry; "
        "from assignment.theory.questions import questions_for; "
        "print(json.dumps([[q.text, q.params] for q in questions_for('alice', load_registry().theory)]))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert json.loads(proc.stdout) == json.loads(json.dumps([[q.text, q.params] for q in first]))


def test_the_numbers_are_pinned_across_python_versions_and_machines():
    """SHA-256 of (salt, id, kind): these numbers must never change for a given salt, or students' questions
    would change under them. A new term changes the salt in the registry, not this test's expectations."""
    if THEORY.salt != "flashattention-from-scratch-2026":
        pytest.skip("the registry's salt changed: every student's numbers changed with it")
    hbm, smem, roofline, online, split = questions_for("s0000001", THEORY)[:5]
    assert (hbm.params["N"], hbm.params["d"], hbm.params["M"]) == (9216, 64, 16384)
    assert (smem.params["gpu"], smem.params["Br"], smem.params["d"], smem.params["pad"], smem.params["Bc"]) == (
        "NVIDIA H100 (sm_90)",
        64,
        128,
        4,
        64,
    )
    assert (
        roofline.params["model"],
        roofline.params["gpu"],
        roofline.params["dtype"],
        roofline.params["T"],
        roofline.params["C"],
    ) == ("Llama-3.2-3B", "NVIDIA A100 SXM 80GB", "fp32", 128, 2048)
    assert online.params["blocks"] == [[-1.0, 0.0, 0.0], [2.0, 1.5], [-2.0, -1.0]]
    assert split.params["lse"] == [5.0, 4.0, 6.0, 5.5]


def test_different_ids_get_different_numbers():
    drawn = {
        sid: [json.dumps(q.params, sort_keys=True) for q in questions_for(sid, THEORY) if not q.written] for sid in IDS
    }
    assert len({tuple(v) for v in drawn.values()}) == len(IDS), "two ids got the very same questions"
    for position, kind in enumerate(k.name for k in THEORY.kinds):
        distinct = len({v[position] for v in drawn.values()})
        assert distinct >= len(IDS) * 0.6, f"{kind}: only {distinct} different questions for {len(IDS)} ids"


def test_a_new_salt_gives_new_numbers():
    other = replace(THEORY, salt="another-term")
    assert [q.params for q in questions_for("alice", other)] != [q.params for q in questions_for("alice", THEORY)]


@pytest.mark.parametrize("bad", ["", "   ", "a b", "-leading-dash", "x" * 65, "semi;colon"])
def test_unusable_ids_are_refused_with_a_clear_message(bad):
    with pytest.raises(TheoryError, match="student id|no student id"):
        normalise_id(bad)


def test_every_question_states_its_numbers_and_units_and_the_points_add_up():
    for sid in IDS[:10]:
        questions = questions_for(sid, THEORY)
        assert math.isclose(sum(q.points for q in questions), THEORY.points)
        assert [q.number for q in questions] == list(range(1, len(questions) + 1))
        # The course's own questions, the proof, then a task's (so that adding those never renumbers the others).
        (proof,) = [q for q in questions if q.written]
        assert all(q.task is None for q in questions[: proof.number]) and proof.task is None
        assert all(q.task is not None for q in questions[proof.number :])
        for q in questions:
            assert all(part.unit for part in q.parts)
            if q.kind == "hbm":
                assert f"N = {q.params['N']}" in q.text and f"M = {q.params['M']}" in q.text
        text = render_text(sid, questions, REGISTRY)
        assert "~" not in text and all(len(line) <= 104 for line in text.splitlines()), "reflowed lines"
        assert f"# Theory questions for `{sid}`" in render_markdown(sid, questions, REGISTRY)


# --------------------------------------------------------------------------- the answer key


def test_the_keys_are_finite_and_in_range_for_many_ids():
    for sid in IDS:
        for question in questions_for(sid, THEORY):
            if question.written:
                continue
            key = answer_key(question)
            assert all(math.isfinite(v) for v in key.values()), (sid, question.kind, key)
            if question.kind == "smem":
                _, largest, resident = key.values()
                assert largest >= 16 and largest % 16 == 0 and resident >= 0
                assert (
                    smem_footprint(question.params, largest)
                    <= question.params["per_block"]
                    < smem_footprint(question.params, largest + 16)
                )
            elif question.kind in ("fragments", "bank_conflicts", "pipeline_depth", "register_budget"):
                # lanes, indices, banks, stages, parities, registers: exact integers, 0 included
                assert all(v == int(v) and 0 <= v for v in key.values()), (sid, question.kind, key)
            else:  # away from 0, so that a relative tolerance means something
                assert all(v >= 0.05 for v in key.values()), (sid, question.kind, key)


def test_hbm_and_smem_keys_on_a_case_worked_by_hand():
    hbm = next(q for q in questions_for("s0000001", THEORY) if q.kind == "hbm")
    # N = 9216, d = 64, M = 16384: B = 16384 // 256 = 64, 144 passes; standard 4N^2 + 4Nd.
    assert list(answer_key(hbm).values()) == [
        4 * 9216**2 + 4 * 9216 * 64,
        64,
        144,
        2 * 9216 * 64 + 144 * 2 * 9216 * 64 + 9216,
    ]
    smem = next(q for q in questions_for("s0000001", THEORY) if q.kind == "smem")
    # Br 64, d 128, p 4, Bc 64: (64 + 128) * 132 + 64 * 68 floats = 29696 floats = 118784 bytes on an H100.
    # Largest B_c: 4 * (8704 + 328 B_c) <= 232448 gives B_c <= 150.6, so 144; one block per SM (233472 bytes).
    assert list(answer_key(smem).values()) == [118784, 144, 1]


def test_the_online_softmax_key_agrees_with_the_recurrence_the_question_states():
    for sid in IDS[:15]:
        question = next(q for q in questions_for(sid, THEORY) if q.kind == "online_softmax")
        m, l, acc, states = -math.inf, 0.0, 0.0, []
        for block, values in zip(question.params["blocks"], question.params["values"]):
            new_m = max(m, max(block))
            scale = math.exp(m - new_m)  # exp(-inf) = 0 on the first block
            l = scale * l + sum(math.exp(s - new_m) for s in block)
            acc = scale * acc + sum(math.exp(s - new_m) * v for s, v in zip(block, values))
            m = new_m
            states.append((l, acc))
        expected = [states[0][0], states[1][0], states[1][1], states[2][0], acc / l, m + math.log(l)]
        assert list(answer_key(question).values()) == pytest.approx(expected, rel=1e-12)


def test_the_split_kv_key_is_attention_over_all_the_keys():
    scores = [0.3, -1.2, 2.5, 0.0, 1.1, -0.4, 3.0]
    values = [[1.0, 2.0], [0.5, -1.0], [3.0, 0.25], [2.0, 2.0], [-1.0, 4.0], [0.0, 1.0], [1.5, -2.0]]
    splits = [(0, 3), (3, 3), (3, 7)]  # the middle split holds no key
    lse, outputs = [], []
    for start, stop in splits:
        if start == stop:
            lse.append(-math.inf), outputs.append([0.0, 0.0])
            continue
        weights = [math.exp(s) for s in scores[start:stop]]
        lse.append(math.log(sum(weights)))
        outputs.append([sum(w * v[i] for w, v in zip(weights, values[start:stop])) / sum(weights) for i in range(2)])
    total = sum(math.exp(s) for s in scores)
    expected = [math.log(total)] + [sum(math.exp(s) * v[i] for s, v in zip(scores, values)) / total for i in range(2)]
    assert split_kv_key({"lse": lse, "outputs": outputs}) == pytest.approx(expected, rel=1e-12)
    assert online_softmax_key({"blocks": [[0.0], [1.0], [2.0]], "values": [[1], [1], [1]]})[4] == pytest.approx(1.0)


def test_the_roofline_key_on_a_small_model_worked_by_hand():
    from grader.grade.theory import roofline_key

    p = {
        "hidden": 4,
        "layers": 1,
        "heads": 2,
        "kv_heads": 1,
        "head_dim": 2,
        "intermediate": 8,
        "vocab": 10,
        "bytes_per_value": 2,
        "peak": 100e12,
        "bandwidth": 1e12,
        "T": 3,
        "C": 5,
    }
    weights = 4 * 2 * (2 * 2 + 2 * 1) + 3 * 4 * 8 + 4 * 10  # 48 + 96 + 40 = 184
    prefill_flops, prefill_bytes = 2 * weights * 3 + 4 * 2 * 2 * 3 * 3, 2 * (weights + 2 * 1 * 2 * 3)
    decode_flops, decode_bytes = 2 * weights + 4 * 2 * 2 * 1 * 5, 2 * (weights + 2 * 1 * 2 * 5)
    expected = [
        prefill_flops / prefill_bytes,
        prefill_flops / prefill_bytes * 1e12 / 1e12,
        decode_flops / decode_bytes,
        decode_flops / decode_bytes,
        decode_bytes / 1e12 * 1e3,
    ]
    assert roofline_key(p) == pytest.approx(expected, rel=1e-12)


# --------------------------------------------------------------------------- grading


@pytest.mark.parametrize("student_id", ["alice", "s0000007", "bob.smith@uni.edu"])
def test_the_reference_answers_score_full_marks(student_id):
    result = grade_theory(reference_answers(student_id, REGISTRY).encode(), REGISTRY)
    assert result.student_id == normalise_id(student_id) and not result.review
    assert result.score == pytest.approx(result.numeric_max) and result.numeric_max == pytest.approx(
        THEORY.points - THEORY.proof_points
    )
    assert all(t.passed for t in result.numeric), [t.output for t in result.numeric if not t.passed]
    (manual,) = result.manual
    assert manual.max_score == THEORY.proof_points and manual.rubric == THEORY.rubric


# A factor 2 (FLOPs per multiply-add), 4 (bytes for fp32 elements), 1/1000 (ms for s), 1.024 (KB of 1000 bytes
# against 1024), 1/1.073741824 (GB against GiB): each lands outside every kind's tolerance.
@pytest.mark.parametrize("factor", [2.0, 0.5, 4.0, 1e-3, 1.024, 1 / 1.073741824])
def test_wrong_answers_fail_for_every_kind(factor):
    for sid in ("alice", "s0000003"):
        for question, part in numeric_parts(sid):
            key = answer_key(question)[part.key]
            if key == 0:
                continue
            result = grade_theory(keyed_file(sid, {part.key: key * factor}), REGISTRY)
            failed = [t for t in result.numeric if not t.passed]
            assert len(failed) == 1 and failed[0].score == 0, (sid, part.key, factor, [t.name for t in failed])
            output = failed[0].output
            assert output.startswith(f"incorrect: {key * factor:.10g} [{part.unit}] is not "), output
            assert f"{key:.10g}" not in output.replace(f"{key * factor:.10g}", ""), "never shown the key"


def test_counts_are_exact_and_real_numbers_may_be_rounded():
    sid = "alice"
    for question, part in numeric_parts(sid):
        key = answer_key(question)[part.key]
        if question.rtol == 0:
            off_by_one = grade_theory(keyed_file(sid, {part.key: key + 1}), REGISTRY)
            assert not next(
                t for t in off_by_one.numeric if t.name.startswith(f"theory Q{question.number} {part.label}")
            ).passed
        else:
            rounded = float(f"{key:.5g}")
            assert all(t.passed for t in grade_theory(keyed_file(sid, {part.key: rounded}), REGISTRY).numeric)


def test_answers_written_as_strings_are_read_and_garbage_is_reported():
    question, part = numeric_parts("alice")[0]
    key = answer_key(question)[part.key]
    for written in (str(key), f"{key:,}", f" {float(key):.9e} "):
        assert all(t.passed for t in grade_theory(keyed_file("alice", {part.key: written}), REGISTRY).numeric)
    result = grade_theory(keyed_file("alice", {part.key: "about 1e9 elements"}), REGISTRY)
    (bad,) = [t for t in result.numeric if not t.passed]
    assert bad.score == 0 and "not graded" in bad.output and "is not a number" in bad.output
    result = grade_theory(keyed_file("alice", {part.key: ""}), REGISTRY)
    assert "no answer" in next(t for t in result.numeric if not t.passed).output


def test_a_missing_or_unreadable_answers_file_scores_zero_with_the_reason():
    cases = {
        None: "no theory_answers.toml in the submission",
        b'student_id = "alice"\n[answers\n': "is not valid TOML",
        b"\xff\xfe\x00": "is not UTF-8",
        b"[answers]\nq1a = 1\n": "names no student_id",
        b"student_id = 7\n": "student_id must be a string",
        b'student_id = "not valid!"\n': "not a valid id",
        b'student_id = "alice"\nanswers = 3\n': "'answers' must be a table",
    }
    for data, reason in cases.items():
        result = grade_theory(data, REGISTRY)
        assert result.score == 0 and result.max_score == THEORY.points, data
        assert any(reason in note for note in result.notes), (data, result.notes)
        assert len(result.tests) == len(numeric_parts("alice")) + 1, "every question is listed, at 0"
        assert all(reason in t.output for t in result.tests), (data, result.tests[0].output)


def test_an_answers_file_of_another_id_is_graded_against_the_submission_and_flagged():
    result = grade_theory(reference_answers("alice", REGISTRY).encode(), REGISTRY, student_id="bob")
    assert result.student_id == "bob" and result.score < result.numeric_max
    assert result.review and "names student 'alice' but the submission is 'bob'" in result.review[0]
    same = grade_theory(reference_answers("alice", REGISTRY).encode(), REGISTRY, student_id=" ALICE")
    assert not same.review and same.score == pytest.approx(same.numeric_max)


def test_answers_survive_a_rewrite_whatever_they_hold():
    questions = questions_for("alice", THEORY)
    proof = "Quotes ''' and \\frac{a}{b}\n\nsecond paragraph"
    kept = answers.Answers(
        "alice", {"q1a": 1.5e16, "q1b": "12,288", "q2a": 7, "zz": "an old key"}, {"q6": proof, "q7": "old"}
    )
    again = answers.parse(answers.render("alice", questions, REGISTRY, kept), "x")
    assert again.answers["q1a"] == 1.5e16 and again.answers["q1b"] == "12,288" and again.answers["zz"] == "an old key"
    assert {k: v.strip() for k, v in again.written.items()} == kept.written and again.student_id == "alice"
    with pytest.raises(answers.AnswersError, match="q1a holds a list"):
        answers.render("alice", questions, REGISTRY, answers.Answers("alice", {"q1a": [1, 2]}))


def test_the_written_proof_is_listed_for_grading_by_hand():
    result = grade_theory(keyed_file("alice", written="By induction on j. \\sum_s e^{s - m_j} ..."), REGISTRY)
    (manual,) = result.manual
    assert manual.answer.startswith("By induction") and "\\sum_s" in manual.answer, "LaTeX kept verbatim"
    (proof_test,) = [t for t in result.tests if "manual" in t.tags]
    assert proof_test.score == 0 and proof_test.max_score == THEORY.proof_points and "pending" in proof_test.output
    empty = grade_theory(keyed_file("alice", written=""), REGISTRY)
    assert "no proof written" in next(t for t in empty.tests if "manual" in t.tags).output


# --------------------------------------------------------------------------- the reports


def test_results_json_grades_csv_grading_json_and_the_html_show_the_theory(tmp_path):
    theory = grade_theory(reference_answers("alice", REGISTRY).encode(), REGISTRY)
    result = SubmissionScore("alice", [], [], 1.0, {"isolation": "process"}, theory)
    results = gradescope_results(result)
    theory_tests = [t for t in results["tests"] if "theory" in t["tags"]]
    assert len(theory_tests) == len(numeric_parts("alice")) + 1
    assert sum(t["max_score"] for t in theory_tests) == pytest.approx(THEORY.points)
    assert results["score"] == pytest.approx(THEORY.points - THEORY.proof_points)
    (manual_test,) = [t for t in theory_tests if "manual" in t["tags"]]
    # Pending, not failed (grader/grade/report.py's PENDING_STATUS), and its name says so; an empty proof is failed.
    assert manual_test["status"] == "passed" and "pending" in manual_test["output"] and manual_test["score"] == 0
    empty = SubmissionScore("alice", [], [], 1.0, {}, grade_theory(keyed_file("alice", written=""), REGISTRY))
    assert [t["status"] for t in gradescope_results(empty)["tests"] if "manual" in t["tags"]] == ["failed"]
    assert results["manual"] == [
        {"name": manual_test["name"], "key": "q6", "max_score": THEORY.proof_points, "status": "pending"}
    ]
    assert all(t["status"] == "passed" for t in theory_tests if t is not manual_test)
    text = json.dumps(results)
    assert all(item.criterion not in text for item in THEORY.rubric), "the rubric stays with the instructor"
    header, row = csv_row(result, REGISTRY)
    assert dict(zip(header, row))["theory"] == f"{THEORY.points - THEORY.proof_points:.2f}"
    record = instructor_record(result)
    assert record["theory"]["manual"][0]["rubric"][0]["criterion"] == THEORY.rubric[0].criterion
    paths = write_all(result, REGISTRY, tmp_path)
    html = paths["html"].read_text()
    assert 'id="theory"' in html and "pending" in html and "Theory questions" in html


def test_grade_submission_reads_the_answers_file_from_a_folder_and_a_zip(tmp_path):
    """No task file: t1 is reported missing at once, so only the theory is really graded (fast)."""
    folder = tmp_path / "carol"
    folder.mkdir()
    (folder / THEORY.answers_file).write_bytes(keyed_file("carol"))
    archive = tmp_path / "carol.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(folder / THEORY.answers_file, f"bundle/{THEORY.answers_file}")
    config = replace(GradeConfig(), tasks=("t1",), preflight=False, allow_weak_isolation=True, seed=1, theory=True)
    for source in (folder, archive):
        out = tmp_path / f"out-{source.suffix or 'dir'}"
        result = grade_submission(source, out, config, log=lambda *a, **k: None)
        assert result.theory.score == pytest.approx(result.theory.numeric_max)
        # A bonus task's questions come on top, as the task's own points do.
        assert result.max_score(REGISTRY) == pytest.approx(REGISTRY.task("t1").points.total + THEORY.regular_points)
        results = json.loads((out / "results.json").read_text())
        assert results["manual"] and any("theory" in t["tags"] for t in results["tests"])
        rows = list(csv.reader((out / "grades.csv").read_text().splitlines()))
        assert "theory" in rows[0]
    # A regrade of some tasks leaves the theory out; the full grading includes it.
    regrade = grade_submission(folder, tmp_path / "regrade", replace(config, theory=None), log=lambda *a, **k: None)
    assert regrade.theory is None
    # The batch grader's id overrides the file's, and the mismatch is flagged.
    other = grade_submission(folder, tmp_path / "other", replace(config, student_id="dave"), log=lambda *a, **k: None)
    assert other.theory.student_id == "dave" and any(line.startswith("theory: review") for line in other.review)


def test_an_unreadable_submission_scores_the_theory_zero_with_the_reason(tmp_path):
    bad = tmp_path / "eve.zip"
    bad.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    config = replace(GradeConfig(), tasks=("t1",), preflight=False, allow_weak_isolation=True, seed=1, theory=True)
    result = grade_submission(bad, tmp_path / "out", config, log=lambda *a, **k: None)
    assert result.theory.score == 0 and "eve.zip is neither a folder nor a .zip archive" in result.theory.notes[0]


# --------------------------------------------------------------------------- make theory, make submit


def run_theory(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "assignment.theory", *args],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**{k: v for k, v in os.environ.items() if k != "STUDENT_ID"}, **(env or {})},
    )


def test_make_theory_prints_the_questions_and_keeps_answers_already_written(tmp_path):
    path = tmp_path / "theory_answers.toml"
    first = run_theory("--id", "Alice", "--answers", str(path), "--markdown", str(tmp_path / "q.md"))
    assert first.returncode == 0, first.stderr
    assert "Q1. " in first.stdout and f"wrote {path}" in first.stdout and (tmp_path / "q.md").is_file()
    written = answers.load(path)
    assert written.student_id == "alice" and set(written.answers) == {p.key for _, p in numeric_parts("alice")}
    assert all(v == "" for v in written.answers.values()) and written.written == {"q6": ""}
    # The student answers some, deletes an entry by mistake, and runs it again (the id now from the file).
    text = path.read_text().replace('q1a = ""', "q1a = 12345").replace('q2b = ""', 'q2b = "160"')
    text = text.replace("q6 = '''\n'''", "q6 = '''\nMy proof with \\LaTeX.\n'''")
    path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("q3c")) + "\n")
    again = run_theory("--answers", str(path))
    assert again.returncode == 0, again.stderr
    assert "added 1 missing entry" in again.stdout and (tmp_path / "theory_answers.toml.bak").is_file()
    kept = answers.load(path)
    assert kept.answers["q1a"] == 12345 and kept.answers["q2b"] == "160" and kept.answers["q3c"] == ""
    assert kept.written["q6"] == "My proof with \\LaTeX.\n"
    before = path.read_text()
    third = run_theory("--answers", str(path), env={"STUDENT_ID": "alice"})
    assert third.returncode == 0 and "kept" in third.stdout and path.read_text() == before, "nothing to add"
    check = run_theory("--answers", str(path), "--check")
    assert check.returncode == 1 and "q1b: not answered yet" in check.stdout


def test_make_theory_without_an_id_or_with_another_students_file_says_so_and_touches_nothing(tmp_path):
    path = tmp_path / "theory_answers.toml"
    none = run_theory("--answers", str(path))
    assert none.returncode == 2 and "no student id" in none.stderr and "make theory ID=" in none.stderr
    assert not path.exists()
    questions = tmp_path / "build" / "questions.md"  # what make theory writes beside the answers (--markdown)
    assert run_theory("--answers", str(path), "--markdown", str(questions), env={"STUDENT_ID": "bob"}).returncode == 0
    before, bobs_questions = path.read_text(), questions.read_text()
    other = run_theory("--id", "carol", "--answers", str(path), "--markdown", str(questions))
    assert other.returncode == 2 and "holds the answers of student 'bob'" in other.stderr
    # Refused before anything is written or printed: bob's questions are still there, carol's were never shown.
    assert questions.read_text() == bobs_questions and "Q1." not in other.stdout and "wrote" not in other.stdout
    path.write_text(before + "q9 = = 1\n")
    broken = path.read_text()
    bad = run_theory("--answers", str(path), "--id", "bob", "--markdown", str(questions))
    assert bad.returncode == 2 and "is not valid TOML" in bad.stderr and "left as it is" in bad.stderr
    assert path.read_text() == broken, "a file it cannot read is never rewritten"
    assert "Q1." not in bad.stdout and questions.read_text() == bobs_questions
    dry = subprocess.run(
        ["make", "-n", "theory", "ID=zed", "PY=python3"], check=False, cwd=REPO, capture_output=True, text=True
    )
    assert '-m assignment.theory --id "zed"' in dry.stdout, dry.stdout + dry.stderr


def test_make_submit_warns_about_missing_and_unreadable_theory_answers(tmp_path):
    def checks_for(data: bytes | None) -> submit.Checks:
        packed = submit.PackedFile(
            THEORY.answers_file, (), tmp_path / THEORY.answers_file, data, check="not found" if data is None else "ok"
        )
        checks = submit.Checks([packed])
        submit.theory_warning(checks, REGISTRY)
        return checks

    assert "make theory ID=<your id>" in checks_for(None).warnings[0]
    assert checks_for(keyed_file("alice")).warnings == []
    partial = checks_for(keyed_file("alice", {"q1a": "", "q4b": "twelve"}))
    (warning,) = partial.warnings
    assert "2 theory answer(s) would not be graded" in warning and "q1a: not answered yet" in warning
    assert "'twelve' is not a number" in warning and partial.files[0].check == "ok: incomplete"
    assert "is not valid TOML" in checks_for(b"[answers\n").warnings[0]


# --------------------------------------------------------------------------- what students get


def test_the_student_side_computes_no_answer():
    """assignment/theory ships; the key is grader/grade/theory.py's, which no bundle holds."""
    for name in ("questions.py", "kinds.py", "kinds_tensor_cores.py", "kinds_hopper.py", "answers.py"):
        assert release.shipped(f"assignment/theory/{name}"), f"assignment/theory/{name} is not in the student bundle"
    assert not release.shipped("grader/grade/theory.py")
    rubric = {s.text for s in release.secrets(REPO) if s.what == "the theory proof's rubric"}
    assert rubric == {item.criterion for item in THEORY.rubric}, "the release check looks for the rubric's text"
    for path in sorted((REPO / "assignment" / "theory").glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert not any(name.startswith("grader") for name in imported), path
        calls = {
            f"{node.func.value.id}.{node.func.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
        }
        assert not calls & {"math.exp", "math.log", "math.ceil", "math.floor", "math.fsum"}, (path, calls)
    # Nothing a student sees holds a key value (the real-valued ones could not appear by chance).
    for sid in IDS[:10]:
        questions = questions_for(sid, THEORY)
        shown = render_text(sid, questions, REGISTRY) + answers.render(sid, questions, REGISTRY)
        for question in questions:
            if question.kind in ("online_softmax", "split_kv", "roofline"):
                for value in answer_key(question).values():
                    assert f"{value:.4f}" not in shown or value == round(value, 1), (sid, question.kind, value)


def test_every_kind_the_registry_allows_has_a_question_and_a_key():
    from assignment.registry import THEORY_KINDS
    from assignment.theory.questions import GENERATORS
    from grader.grade.theory import KEYS

    assert set(THEORY_KINDS) == set(GENERATORS) == set(KEYS)


def test_the_registry_validates_the_theory_and_the_student_edition_drops_the_rubric(tmp_path):
    text = REGISTRY_PATH.read_text()

    def load_variant(old: str, new: str):
        assert old in text, f"test setup: {old!r} not in the registry"
        path = tmp_path / "tasks.toml"
        path.write_text(text.replace(old, new, 1))
        return load_registry(path)

    with pytest.raises(RegistryError, match=r"field 'theory.questions.flops'.*not a kind of question"):
        load_variant("split_kv = {", "flops = {")
    with pytest.raises(RegistryError, match=r"field 'theory.rubric.items'.*award 5 points but the proof is worth 4"):
        load_variant('{ points = 1, criterion = "Base case', '{ points = 2, criterion = "Base case')
    with pytest.raises(RegistryError, match=r"field 'theory.answers_file'.*course.submit_files"):
        load_variant('answers_file = "theory_answers.toml"', 'answers_file = "answers.toml"')
    with pytest.raises(RegistryError, match=r"field 'course.total_points'.*the theory's to 21"):
        load_variant("points = 3, count = 1, rtol = 0 }", "points = 4, count = 1, rtol = 0 }")
    with pytest.raises(RegistryError, match=r"field 'theory.questions.roofline.rtol': must be a number >= 0 and < 0.5"):
        load_variant("rtol = 0.01 }", "rtol = 5 }")
    pytest.importorskip("tomli_w")  # what writes the student edition (a GPU host off the network may lack it)
    from grader.release.student_edition import student_edition

    edition = student_edition(text)
    assert "[theory.rubric]" not in edition and all(item.criterion not in edition for item in THEORY.rubric)
    path = tmp_path / "student.toml"
    path.write_text(edition)
    student = load_registry(path).theory
    assert student.rubric == () and student.kinds == THEORY.kinds and student.points == THEORY.points
    assert [q.params for q in questions_for("alice", student)] == [q.params for q in questions_for("alice", THEORY)]
