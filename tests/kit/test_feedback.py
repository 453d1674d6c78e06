"""The beta-tester feedback form: the questions load, the terminal form fills feedback.json and resumes it,
bad typing is re-asked, and an answer file that cannot be read is reported and never overwritten."""

from __future__ import annotations

import json

import pytest

from assignment import feedback
from assignment.feedback import FeedbackError, load_answers, load_form, run_terminal
from assignment.registry import load_registry

pytestmark = pytest.mark.kit


def typed_answers(form) -> list[str]:
    """One valid line per question, in order (the last choice, a 3, a number, a sentence)."""
    lines = []
    for q in form.questions:
        lines.append(
            {
                "choice": "1,2" if q.multiple else str(len(q.choices)),
                "scale": "3",
                "number": "12.5",
                "text": f"an answer to {q.id}",
            }[q.type]
        )
    return lines


def script(lines):
    it = iter(lines)

    def read(_prompt):
        try:
            return next(it)
        except StopIteration:
            raise EOFError from None

    return read


def test_the_form_has_seed_000s_questions_and_one_hours_question_per_task():
    form = load_form()
    ids = {q.id for q in form.questions}
    for expected in (
        "finished",
        "difficulty_vs_other_projects",
        "familiarity_python",
        "familiarity_llm",
        "familiarity_flashattention",
        "ai_tools",
        "ai_helpfulness",
        "vibe_coding_full_marks",
        "what_to_add",
        "handout_improvements",
    ):
        assert expected in ids, expected
    assert {f"hours_{t.id}" for t in load_registry().tasks} <= ids


def test_every_task_of_the_registry_has_a_difficulty_question_that_can_be_not_attempted():
    """The form asks each task's difficulty (t7 included; a new task gets one without an edit), and a tester who never
    got to a task, a GPU task without a GPU say, can say so instead of rating it."""
    form = load_form()
    for task in load_registry().tasks:
        question = form.question(f"difficulty_{task.id}")
        assert question.type == "scale" and question.task == task.id and task.title in question.text
        assert question.not_attempted == "did not attempt"
        assert question.check("did not attempt") is None and question.check("skipped") is not None
        assert question.parse("n") == question.parse("did not attempt") == "did not attempt"
    assert form.question("familiarity_python").check("did not attempt") is not None  # only where it is offered


def test_did_not_attempt_is_typed_in_the_terminal_and_saved_as_text(tmp_path):
    form, path = load_form(), tmp_path / "feedback.json"
    lines = ["n" if q.id == "difficulty_t4" else line for q, line in zip(form.questions, typed_answers(form))]
    out = []
    assert run_terminal(form, path, read=script(lines), write=out.append)
    assert load_answers(path, form)["difficulty_t4"] == "did not attempt"
    assert any("5 = very hard; n = did not attempt" in line for line in out)
    assert feedback.main(["--check", str(path)]) == 0


def test_terminal_form_fills_a_complete_valid_file(tmp_path):
    form, path = load_form(), tmp_path / "feedback.json"
    out = []
    assert run_terminal(form, path, read=script(typed_answers(form)), write=out.append)
    data = json.loads(path.read_text())
    assert data["schema_version"] == form.schema_version and form.problems(data["answers"]) == []
    assert data["answers"]["ai_tools"] == list(form.question("ai_tools").choices[:2])
    assert data["answers"]["hours_t4"] == 12.5 and data["answers"]["difficulty_t3"] == 3
    assert feedback.main(["--check", str(path)]) == 0


def test_it_resumes_and_asks_only_what_is_left(tmp_path):
    form, path = load_form(), tmp_path / "feedback.json"
    lines = typed_answers(form)
    assert not run_terminal(form, path, read=script(lines[:5] + ["q"]), write=lambda _: None)
    saved = load_answers(path, form)
    assert len(saved) == 5, "every answer is saved as soon as it is typed"
    asked = []
    assert run_terminal(form, path, read=script(lines[5:]), write=asked.append)
    left = len(form.questions) - 5
    assert any(f"{left} question(s) to go (5 answered earlier)" in line for line in asked), asked[:3]
    assert form.problems(load_answers(path, form)) == []


def test_bad_typing_is_asked_again_and_optional_questions_can_be_skipped(tmp_path):
    form, path = load_form(), tmp_path / "feedback.json"
    lines = []
    for q, good in zip(form.questions, typed_answers(form)):
        bad = {"choice": "99", "scale": "7", "number": "-3", "text": ""}[q.type]
        lines += [""] if not q.required else [bad, good]
    out = []
    assert run_terminal(form, path, read=script(lines), write=out.append)
    answers = load_answers(path, form)
    assert answers["ai_helpfulness"] is None and answers["what_to_add"] is None
    assert any("an integer from 1" in line for line in out) and any("number of a choice" in line for line in out)
    assert form.problems(answers) == []


def test_an_unreadable_answer_file_is_reported_and_left_as_it_is(tmp_path, capsys):
    path = tmp_path / "feedback.json"
    path.write_text('{"schema_version": 1, "answers": {"finished": "yes"')  # cut short
    with pytest.raises(FeedbackError, match="left as it is"):
        run_terminal(load_form(), path, read=script(["1"]), write=lambda _: None)
    assert path.read_text().endswith('"yes"'), "a broken answer file was overwritten"
    assert feedback.main(["--file", str(path)]) == 2
    assert "not a readable answer file" in capsys.readouterr().err


def test_check_names_what_is_missing_or_invalid(tmp_path, capsys):
    form, path = load_form(), tmp_path / "feedback.json"
    path.write_text(
        json.dumps(
            {"schema_version": form.schema_version, "answers": {"finished": "perhaps", "hours_t1": 5, "made_up": 1}}
        )
    )
    assert feedback.main(["--check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "finished: 'perhaps' is not valid" in err and "made_up: not a question" in err
    assert "difficulty_t3: not answered yet" in err


@pytest.mark.parametrize(
    "entry, message",
    [
        ('id = "Bad Id"\ntext = "x"\ntype = "text"\nrequired = true', "lower_snake_case"),
        ('id = "a"\ntext = "x"\ntype = "slider"\nrequired = true', "type must be one of"),
        ('id = "a"\ntext = "x"\ntype = "choice"\nchoices = ["only"]\nrequired = true', "two distinct choices"),
        ('id = "a"\ntext = "x"\ntype = "number"\nmin = 5\nmax = 1\nrequired = true', "min <= max"),
        ('id = "a"\ntext = "x"\ntype = "text"\nrequired = true\nwidth = 3', "unknown field"),
        ('id = "a"\ntext = "x"\ntype = "number"\nnot_attempted = "no"\nrequired = true', "for a scale question"),
    ],
)
def test_a_broken_form_names_the_question(tmp_path, entry, message):
    path = tmp_path / "feedback.toml"
    path.write_text(f"schema_version = 1\n\n[[question]]\n{entry}\n")
    with pytest.raises(FeedbackError, match=message):
        load_form(path)
