"""The feedback summary: a class of submissions with good, partial and broken answer files (in folders and
zips, at any depth, one through a symbolic link) is counted, aggregated and plotted; every bad file is named
with its reason; free text is escaped; grading outputs as the grader writes them join per task. Also the form's
``task`` field that the join rests on."""

from __future__ import annotations

import base64
import json
import re
import statistics
import zipfile

import pytest

from assignment.feedback import FeedbackError, load_form
from assignment.registry import load_registry
from grader.classroom import feedback_summary
from grader.grade.report import write_all
from grader.grade.scoring import ScoredTest, SubmissionScore, TaskScore

pytestmark = pytest.mark.kit
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SCRIPT = "<script>alert('owned')</script> & more"


def answers_for(form, i: int) -> dict:
    """A complete, valid set of answers that differs from student to student."""
    answers = {}
    for k, q in enumerate(form.questions):
        if q.type == "choice":
            n = len(q.choices)
            answers[q.id] = [q.choices[i % n], q.choices[(i + 1) % n]] if q.multiple else q.choices[i % n]
        elif q.type == "scale":
            answers[q.id] = 1 + (i + k) % 5
        elif q.type == "number":
            answers[q.id] = 2.5 * i + k
        else:
            answers[q.id] = f"student {i} on {q.id}"
    return answers


def answer_file(form, answers: dict, version: int | None = None) -> str:
    return json.dumps(
        {
            "schema_version": form.schema_version if version is None else version,
            "answers": answers,
            "updated": "2025-01-01T00:00:00+00:00",
        }
    )


def put(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def klass(tmp_path):
    """SUBMISSIONS_DIR with every kind of answer file, and the answers that should count."""
    form, root = load_form(), tmp_path / "submissions"
    counted = []  # the valid answers each readable file contributes
    for i, where in enumerate(
        [
            "s01/feedback.json",
            "s02/deep/er/feedback.json",
            "s03/feedback.json",
            "s04/starter/feedback.json",
            "s05/feedback.json",
        ],
        start=1,
    ):
        answers = answers_for(form, i)
        if i == 3:
            answers["what_to_add"] = SCRIPT
        if i == 5:
            answers["ai_helpfulness"] = None  # an optional question skipped: still complete
            answers["difficulty_t4"] = "did not attempt"  # no GPU: counted apart, never averaged
        put(root / where, answer_file(form, answers))
        counted.append({k: v for k, v in answers.items() if v is not None})
    zipped = answers_for(form, 6)
    with zipfile.ZipFile(root / "s06.zip", "w") as archive:
        archive.writestr("s06/handin/feedback.json", answer_file(form, zipped))
        archive.writestr("s06/handin/attention.py", "# solution\n")
    counted.append(zipped)

    partial = {"finished": form.question("finished").choices[1], "hours_t1": 7, "difficulty_t1": 2}
    put(root / "partial/feedback.json", answer_file(form, partial))
    counted.append(partial)
    wrong_type = answers_for(form, 8) | {"hours_t1": "five"}
    put(root / "wrong_type/feedback.json", answer_file(form, wrong_type))
    counted.append({k: v for k, v in wrong_type.items() if k != "hours_t1"})

    put(root / "bad_json/feedback.json", '{"schema_version": 1, "answers": {"finished": ')
    put(root / "old_version/feedback.json", answer_file(form, answers_for(form, 9), version=form.schema_version + 1))
    put(root / "huge/feedback.json", answer_file(form, answers_for(form, 10)) + " " * 300_000)
    outside = put(tmp_path / "elsewhere/feedback.json", answer_file(form, answers_for(form, 11)))
    (root / "linked").mkdir()
    (root / "linked/feedback.json").symlink_to(outside)
    (root / "corrupt.zip").write_bytes(b"PK\x03\x04 this is not really a zip")
    put(root / "no_feedback/attention.py", "# no form handed in\n")
    put(root / "notes.txt", "not a submission\n")
    return form, root, counted


def fake_grades(root, registry, marks: dict[str, dict[str, float]]):
    """Per-student grading outputs written by the grader's own report writer (results.json and the rest)."""
    for student, per_task in marks.items():
        scores = []
        for task_id, got in per_task.items():
            task = registry.task(task_id)
            top = task.points.total
            tests = [
                ScoredTest(
                    name=f"{task_id} check {k}",
                    score=got / 3,
                    max_score=top / 3,
                    passed=got == top,
                    output="",
                    tags=[task_id, "correctness"],
                )
                for k in range(3)
            ]
            scores.append(
                TaskScore(
                    task=task,
                    status="ran",
                    reason="",
                    correctness=got,
                    performance=0.0,
                    tests=tests,
                    passed=3,
                    total=3,
                )
            )
        write_all(SubmissionScore(student, scores, [], 1.0, {"isolation": "process"}), registry, root / student)


def test_summary_counts_aggregates_names_bad_files_and_joins_grades(klass, tmp_path, capsys):
    form, root, counted = klass
    registry = load_registry()
    grades, out = tmp_path / "grades", tmp_path / "summary"
    t1_top, t2_top = registry.task("t1").points.total, registry.task("t2").points.total
    marks = {
        "s01": {"t1": t1_top, "t2": t2_top / 2},
        "s02": {"t1": 0.4 * t1_top},
        "s03": {"t1": 0.7 * t1_top},
        "no_feedback": {"t1": 0.1 * t1_top},
    }
    fake_grades(grades, registry, marks)
    (grades / "lost").mkdir()  # a grading output without results.json: a warning, not a crash

    assert feedback_summary.main([str(root), "--grades", str(grades), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    html = (out / "summary.html").read_text()

    assert summary["counts"] == {"complete": 6, "partial": 2, "malformed": 5, "missing": 1}
    assert summary["submissions"] == 14 and summary["warnings"] == 10  # 8 bad submissions, notes.txt, lost/
    assert "10 warning(s)" in captured.out

    # Every readable file's valid answers count, the partial and the wrong-typed one included.
    for q in form.questions:
        values = [a[q.id] for a in counted if q.id in a]
        got = summary["questions"][q.id]
        assert got["answered"] == len(values), q.id
        if q.type == "scale":
            skipped = values.count("did not attempt")
            assert got["not_attempted"] == skipped and got["rated"] == len(values) - skipped, q.id
            values = [v for v in values if v != "did not attempt"]
            assert got["distribution"] == {str(k): values.count(k) for k in range(1, 6)}, q.id
        if q.type in ("scale", "number"):
            assert got["mean"] == pytest.approx(statistics.fmean(values)), q.id
            assert got["median"] == pytest.approx(statistics.median(values)), q.id
        if q.type == "choice" and not q.multiple:
            assert got["counts"] == {c: values.count(c) for c in q.choices}, q.id
    hours_t1 = [2.5 * i + 2 for i in range(1, 7)] + [7]  # k = 2: hours_t1 is the form's third question
    assert form.questions[2].id == "hours_t1"
    assert summary["questions"]["hours_t1"]["mean"] == pytest.approx(statistics.fmean(hours_t1))
    assert summary["questions"]["ai_tools"]["counts"][form.question("ai_tools").choices[0]] == sum(
        form.question("ai_tools").choices[0] in a["ai_tools"] for a in counted if "ai_tools" in a
    )

    # Each bad file is named, by student and file, with its reason: in summary.json, on stderr and on the page.
    problems = {p["student"]: p for p in summary["problems"]}
    expected = {
        "partial": ("partial", "partial/feedback.json", "not answered: difficulty_vs_other_projects, hours_t2,"),
        "wrong_type": ("partial", "wrong_type/feedback.json", "hours_t1: 'five' is not valid"),
        "bad_json": ("malformed", "bad_json/feedback.json", "not valid JSON"),
        "old_version": ("malformed", "old_version/feedback.json", f"form version {form.schema_version + 1}"),
        "huge": ("malformed", "huge/feedback.json", "larger than"),
        "linked": ("malformed", "linked/feedback.json", "symbolic link"),
        "corrupt": ("malformed", "corrupt.zip", "not a readable zip"),
        "no_feedback": ("missing", "", "no feedback.json in no_feedback"),
    }
    assert set(problems) == set(expected)
    for student, (status, file, reason) in expected.items():
        assert problems[student]["status"] == status and problems[student]["file"] == file, problems[student]
        assert any(reason in r for r in problems[student]["reasons"]), (student, problems[student]["reasons"])
        assert re.search(rf"warning: {student}: .*{re.escape(reason)}", captured.err), student
        assert f"<td>{student}</td>" in html and reason.replace("'", "&#39;") in html, student
    assert "notes.txt: not a folder or a .zip" in captured.err
    assert "grades: lost/results.json" in captured.err
    assert "s06.zip" not in json.dumps(summary["problems"]), "the nested, zipped file is complete"

    # Free text is escaped; the symlinked file's answers never count.
    assert "<script>" not in html and "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt; &amp; more" in html
    assert "student 11 on" not in html

    # The plots: valid PNG files beside the page, and the same images embedded in it.
    scale_ids = [q.id for q in form.questions if q.type == "scale"]
    assert sorted(summary["figures"]) == sorted(
        [f"figures/scale_{q}.png" for q in scale_ids]
        + ["figures/per_task_hours.png", "figures/difficulty_vs_score.png"]
    )
    for name in summary["figures"]:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and data[12:16] == b"IHDR" and len(data) > 1000, name
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(embedded) == len(summary["figures"])
    assert all(base64.b64decode(e).startswith(PNG_SIGNATURE) for e in embedded)

    # The join: each task's mean difficulty beside the class's mean score (every graded student counts).
    tasks = {row["task"]: row for row in summary["tasks"]}
    assert summary["graded_students"] == 4
    t1_scores = [m["t1"] for m in marks.values()]
    close = {"abs": 1e-3}  # results.json rounds each check's points to 4 places
    assert tasks["t1"]["graded"] == 4
    assert tasks["t1"]["mean_score"] == pytest.approx(statistics.fmean(t1_scores), **close)
    assert tasks["t1"]["mean_percent"] == pytest.approx(100 * sum(t1_scores) / (4 * t1_top), **close)
    assert tasks["t2"]["graded"] == 1 and tasks["t2"]["mean_percent"] == pytest.approx(50, **close)
    assert tasks["t3"]["graded"] == 0 and tasks["t3"]["mean_score"] is None
    difficulty_t1 = tasks["t1"]["difficulty"]
    assert [d["question"] for d in difficulty_t1] == ["difficulty_t1"]
    assert difficulty_t1[0]["mean"] == pytest.approx(summary["questions"]["difficulty_t1"]["mean"])
    assert [d["not_attempted"] for d in tasks["t4"]["difficulty"]] == [1] and "1 did not attempt it" in html
    assert tasks["t1"]["per_task"]["hours"] == pytest.approx(statistics.fmean(hours_t1))
    assert "Difficulty and scores by task" in html


def test_without_grades_there_is_no_join(tmp_path):
    form = load_form()
    root = tmp_path / "subs"
    put(root / "only/feedback.json", answer_file(form, answers_for(form, 1)))
    summary, warnings = feedback_summary.summarise(root, tmp_path / "out")
    assert summary["counts"]["complete"] == 1 and warnings == []
    assert "mean_score" not in summary["tasks"][0] and "figures/difficulty_vs_score.png" not in summary["figures"]
    assert "Difficulty and scores by task" not in (tmp_path / "out/summary.html").read_text()


def test_nothing_to_summarise_exits_2_with_a_message(tmp_path, capsys):
    assert feedback_summary.main([str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    put(tmp_path / "empty/readme.txt", "nothing here")
    assert feedback_summary.main([str(tmp_path / "empty"), "--out", str(tmp_path / "out")]) == 2
    assert "no submissions" in capsys.readouterr().err
    put(tmp_path / "one/a/feedback.json", "{}")
    assert feedback_summary.main([str(tmp_path / "one"), "--grades", str(tmp_path / "nogrades")]) == 2
    assert "nogrades: no such folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_questions_name_their_task():
    form, registry = load_form(), load_registry()
    assert {q.id: q.task for q in form.questions if q.id.startswith("hours_")} == {
        f"hours_{t.id}": t.id for t in registry.tasks
    }
    assert {q.id: q.task for q in form.questions if q.id.startswith("difficulty_t")} == {
        f"difficulty_{t.id}": t.id for t in registry.tasks
    }
    assert form.question("finished").task is None


@pytest.mark.parametrize(
    "entry, message",
    [
        ('id = "a"\ntext = "x"\ntype = "scale"\ntask = "t99"\nrequired = true', "task must be one of the registry"),
        ('id = "a"\ntext = "x"\ntype = "scale"\ntask = 1\nrequired = true', "task must be one of the registry"),
        ('id = "a"\ntext = "x"\ntype = "number"\nper_task = true\ntask = "t1"\nrequired = true', "per_task"),
    ],
)
def test_a_bad_task_field_names_the_question(tmp_path, entry, message):
    path = tmp_path / "feedback.toml"
    path.write_text(f"schema_version = 1\n\n[[question]]\n{entry}\n")
    with pytest.raises(FeedbackError, match=message):
        load_form(path)
