"""Evidence the checker owns: the record of the kit objects it serves, the timing of streamed pieces, and what a
student is told about a failure (grader/isolation/served.py, feedback.py, generation_reference.check_stream)."""

from __future__ import annotations

import pytest
import torch

from assignment.checks import CheckFailure
from assignment.model.scripted import ByteTokenizer, ScriptedModel
from grader.grade.checker_plugin import classify
from grader.hidden.generation_reference import character_times, check_stream, greedy
from grader.isolation import feedback, sandbox, served
from grader.isolation.client import KitObject, Worker, WorkerConfig, WorkerFailure

pytestmark = pytest.mark.kit
FULL, WHY = sandbox.probe(sandbox.find_bwrap())
needs_bwrap = pytest.mark.skipif(not FULL, reason=f"bubblewrap cannot run here: {WHY}")
BYTES = ByteTokenizer()


# ------------------------------------------------------------------------------- when a streamed piece is due


def byte_tokens(text: str) -> list[int]:
    return BYTES.encode(text, add_bos=False)


def test_a_character_is_complete_once_its_last_byte_is_drawn_and_shown_then():
    tokens = byte_tokens("aé b")  # é is two byte tokens: c3 a9
    assert character_times(BYTES.decode, tokens) == ([1, 3, 4, 5], [1, 3, 4, 5])


def test_a_byte_that_is_no_utf8_is_shown_with_the_next_token_like_a_cut_character():
    tokens = [0xFF, ord("a"), 0xC3]  # U+FFFD, then a, then a cut character at the very end
    assert character_times(BYTES.decode, tokens) == ([1, 2, 3], [2, 2, 3])


def pieces_of(text: str, sizes: list[int]) -> list[str]:
    out, at = [], 0
    for size in sizes:
        out.append(text[at : at + size])
        at += size
    return out


def test_a_stream_that_yields_each_character_when_ready_or_one_step_later_passes():
    tokens = byte_tokens("naïve text")
    text = BYTES.decode(tokens)
    _, ready = character_times(BYTES.decode, tokens)
    check_stream(list(text), ready, tokens, BYTES.decode, "on time")
    check_stream(list(text), [r + 1 for r in ready], tokens, BYTES.decode, "fed, then yielded")


@pytest.mark.parametrize(
    "sizes, steps",
    [
        ([10], [10]),  # the whole text once, at the end
        ([1, 9], [1, 10]),  # the first character on time, then the rest at the end
        ([1, 4, 5], [1, 5, 10]),  # on time, then a piece whose first character was ready three steps before
    ],
    ids=["one-final-piece", "first-then-the-rest", "held-back"],
)
def test_a_piece_is_late_when_its_first_character_was_ready_steps_before(sizes, steps):
    tokens = byte_tokens("abcdefghij")
    with pytest.raises(CheckFailure) as info:
        check_stream(pieces_of("abcdefghij", sizes), steps, tokens, BYTES.decode, "late")
    assert info.value.kind == "structure"


def test_a_piece_that_comes_before_its_text_was_generated_was_known_in_advance():
    tokens = byte_tokens("abcdefghij")
    with pytest.raises(CheckFailure, match="before step 10") as info:
        check_stream(["abcdefghij"], [0], tokens, BYTES.decode, "replayed")
    assert info.value.kind == "structure"


def test_a_half_character_in_a_piece_is_a_mismatch_before_any_timing():
    tokens = byte_tokens("é")
    with pytest.raises(CheckFailure) as info:
        check_stream(["\ufffd", "é"], [1, 2], tokens, BYTES.decode, "half")
    assert info.value.kind == "mismatch"


# ------------------------------------------------------------------------------- the checker's record


def test_a_served_model_records_each_step_and_refuses_with_the_kit_message():
    model = served.build("scripted_model", {"vocab_size": 16, "seed": 3, "max_seq_len": 8}, "cpu")
    logits = model.serve("prefill", [torch.tensor([[1, 2, 3]]), torch.arange(3)], {})
    assert torch.equal(logits[0], ScriptedModel(16, seed=3, max_seq_len=8).logits_for([1, 2, 3]))
    model.serve("decode_one_token", [torch.tensor([[5]])], {"input_pos": torch.tensor([3])})
    assert [{k: c[k] for k in ("op", "positions", "tokens")} for c in model.calls] == [
        {"op": "prefill", "positions": [0, 1, 2], "tokens": [1, 2, 3]},
        {"op": "decode", "positions": [3], "tokens": [5]},
    ]
    with pytest.raises(ValueError, match="a gap"):
        model.serve("decode_one_token", [torch.tensor([[5]]), torch.tensor([6])], {})
    assert model.steps == 2, "a refused call is no step"
    (refusal,) = model.refusals
    assert refusal.kit_message and "writes position N" in refusal.feedback() and "6" not in refusal.feedback()
    with pytest.raises(AttributeError):
        model.serve("logits_for", [[1, 2, 3]], {})


def test_numbers_in_kit_messages_are_masked_but_0_and_1():
    assert (
        served.masked_numbers("got (1, 37) at position 0, not 12.5 or -3") == "got (1, N) at position 0, not N.N or -N"
    )
    assert (
        served.masked_numbers("positions 3..40 of a float32 cache on cuda:2")
        == "positions N..N of a float32 cache on cuda:N"
    )


# ------------------------------------------------------------------------------- what a student is told


def test_only_names_the_checker_knows_are_said():
    assert feedback.exception_said("ValueError") == "ValueError"
    assert feedback.exception_said("OutOfMemoryError") == "OutOfMemoryError"
    assert "Prompt_1_2" not in feedback.exception_said("Prompt_1_2")
    assert feedback.type_said("builtins.list") == "a list"
    assert "Prompt" not in feedback.type_said("student_t7.Prompt_72_101")
    assert feedback.forbidden_said(
        "torch.nn.functional.scaled_dot_product_attention", ("scaled_dot_product_attention",)
    ).startswith("called torch.nn.functional")
    assert "72" not in feedback.forbidden_said("torch.72_101", ("scaled_dot_product_attention",))


def test_a_stub_is_said_by_its_own_text_any_other_not_implemented_by_its_task():
    stub = next(m for m in feedback.stub_messages() if m.startswith("t7: top-k"))
    assert feedback.not_implemented_said(stub) == stub
    assert (
        feedback.not_implemented_said("t7: [1, 2, 3] is not implemented yet")
        == "t7: not implemented yet (a TODO(t7) is left)"
    )


def test_an_import_error_is_said_in_full_only_before_any_call_sent_data():
    error = {
        "kind": "import",
        "type": "NameError",
        "message": "name 'x' is not defined",
        "traceback": 'File "t7_generate.py", line 3, in <module>',
    }
    before = feedback.told("import", error, "t7_generate.py", "", False, ())
    after = feedback.told("import", error, "t7_generate.py", "", True, ())
    assert "name 'x' is not defined" in before and "line 3" in before
    assert after == "NameError while importing t7_generate.py"


def test_classify_says_the_feedback_and_keeps_the_full_text_for_the_instructor():
    failure = WorkerFailure(
        "exception",
        "RuntimeError: shape [3, 37, 129] is invalid",
        "File t.py, line 9",
        feedback.told("exception", {"type": "RuntimeError"}, "t.py", "f", True, ()),
    )
    check = classify(failure)
    assert check["kind"] == "exception" and "37" not in check["summary"] and "RuntimeError" in check["summary"]
    assert "[3, 37, 129]" in check["detail"] and "line 9" in check["detail"]
    said = feedback.told(
        "exception",
        {"type": "RuntimeError", "message": "CUDA error: ILLEGAL memory access at [3, 37]"},
        "t.py",
        "f",
        True,
        (),
    )
    assert said == "RuntimeError raised by your code (a CUDA fault: illegal memory access)"
    check = classify(IndexError("index 37 is out of bounds for dimension 0 with size 12"))
    assert check["summary"].startswith("IndexError") and "37" not in check["summary"]
    with pytest.raises(ValueError) as raised:  # the kit's own check, raised in the checker: its words, no numbers
        ScriptedModel(16, max_seq_len=8).prefill(torch.tensor([[1, 2]]), torch.tensor([5, 6]))
    assert (
        classify(raised.value)["summary"] == "ValueError: prefill: writes position N, but the cache holds "
        "nothing yet: a gap. The prompt fills positions 0..T-1 and the "
        "k-th generated token (k = 0, 1, ...) goes in at T + k"
    )


# ------------------------------------------------------------------------------- through the sandboxed worker

LOOPS = """
import torch


def forge(model):
    model.prefill(torch.tensor([[1, 2]]), torch.arange(2))
    found = []
    for name in ("calls", "steps", "logits_for", "_model", "_cache"):
        try:
            getattr(model, name)
            found.append(name)
        except AttributeError:
            pass
    return found


def ask_for_more(model):
    return model.eval()


def refeed(model, count):
    history = [1, 2]
    for _ in range(count):
        history.append(int(model.prefill(torch.tensor([history]), torch.arange(len(history)))[0].argmax()))
    return history


def collect_then_yield(model, count):
    tokens = refeed(model, count)
    for token in tokens:
        yield str(token)


def gap(model):
    model.prefill(torch.tensor([[1, 2]]), torch.arange(2))
    model.decode_one_token(torch.tensor([[3]]), torch.tensor([7]))


def forever(model):
    while True:
        model.decode_one_token(torch.tensor([[3]]), torch.tensor([0]))
"""


@pytest.fixture()
def loops_worker(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "loops.py").write_text(LOOPS)
    worker = Worker(WorkerConfig(student_dir=folder, deny=(str(tmp_path),), call_timeout_s=20), gpu=False)
    yield worker
    worker.stop()


def loop_call(worker, function, *args, **options):
    return worker.call("loops.py", function, args, {}, **options)


SCRIPTED = KitObject("scripted_model", {"vocab_size": 12, "seed": 5, "max_seq_len": 16})


@needs_bwrap
def test_the_worker_holds_no_record_and_no_model_to_ask(loops_worker):
    result = loop_call(loops_worker, "forge", SCRIPTED)
    assert result.value == [] and [c["op"] for c in result.calls] == ["prefill"]


@needs_bwrap
def test_asking_a_served_object_for_more_is_said_with_what_it_offers(loops_worker):
    with pytest.raises(WorkerFailure) as info:
        loop_call(loops_worker, "ask_for_more", SCRIPTED)
    assert info.value.feedback == (
        "AttributeError raised by your code; the kit's model offers decode_one_token, "
        "prefill, max_seq_len, vocab_size, device"
    )


@needs_bwrap
def test_the_record_is_the_checkers_whatever_the_loop_does(loops_worker):
    result = loop_call(loops_worker, "refeed", SCRIPTED, 3)
    assert result.value[2:] == greedy(ScriptedModel(12, seed=5, max_seq_len=16), [1, 2], 3)
    assert [c["op"] for c in result.calls] == ["prefill"] * 3
    assert [c["positions"] for c in result.calls] == [[0, 1], [0, 1, 2], [0, 1, 2, 3]]


@needs_bwrap
def test_pieces_yielded_after_the_loop_arrive_after_every_step(loops_worker):
    result = loop_call(loops_worker, "collect_then_yield", SCRIPTED, 4, drain=True)
    assert len(result.value) == 6 and result.steps == [4] * 6


@needs_bwrap
def test_a_kit_refusal_is_raised_in_the_worker_and_said_with_the_kit_message(loops_worker):
    with pytest.raises(WorkerFailure) as info:
        loop_call(loops_worker, "gap", SCRIPTED)
    assert info.value.kind == "exception" and str(info.value).startswith("ValueError")
    assert "had refused a call of decode_one_token" in info.value.feedback and "a gap" in info.value.feedback
    assert "7" not in info.value.feedback


@needs_bwrap
def test_the_call_deadline_holds_while_the_checker_serves_the_loop(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "loops.py").write_text(LOOPS)
    worker = Worker(WorkerConfig(student_dir=folder, deny=(str(tmp_path),), call_timeout_s=3), gpu=False)
    try:
        worker.call("loops.py", "gap", (SCRIPTED,), {})  # warm: the worker is up and the file imported
    except WorkerFailure:
        pass
    try:
        with pytest.raises(WorkerFailure) as info:
            worker.call("loops.py", "forever", (KitObject("scripted_model", {"vocab_size": 12}),), {})
        assert info.value.kind == "timeout"
    finally:
        worker.stop()
