"""Summarise the beta testers' feedback forms into one page:
``python -m grader.classroom.feedback_summary SUBMISSIONS_DIR [--grades GRADES_DIR] [--out build/feedback-summary]``.

Each entry of SUBMISSIONS_DIR is one student's submission, a folder or a .zip named by the student id. Its
``feedback.json`` may sit at any depth (the shallowest copy is taken, as the grader takes student files); it is
read the grader's way (grader/grade/submission.py): from a zip without extracting, with a size cap that counts the
bytes actually read, never through a symbolic link. Each file is validated against the form
(assignment/feedback.toml) and counted as complete, partial (some answers missing or invalid: its valid answers
still count), malformed (unreadable, not JSON, another form version, a link, too large) or missing; every file
that is not complete is named with its reasons, and none stops the summary.

``--grades`` points at per-student grading outputs (GRADES_DIR/<student>/results.json, as ``make grade
OUT=GRADES_DIR/<student>`` writes them): each task's mean difficulty is then set beside the class's mean score.

Writes OUT/summary.html (self-contained: the plots are embedded), the plots as PNG files in OUT/figures, and
OUT/summary.json with the numbers; each file to a temporary name, then renamed. Exits 0, printing the number of
warnings, when some files were bad; 2 when SUBMISSIONS_DIR (or GRADES_DIR) does not exist or holds no submission.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import sys
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from assignment.atomic import write_atomic
from assignment.feedback import SCALE, FeedbackError, Form, Question, load_form, parse_answers
from assignment.registry import Registry, load_registry
from grader.grade.submission import SubmissionError, _candidates, _Folder, _Zip

FEEDBACK_FILE = "feedback.json"
# Two 4000-character text answers, JSON-escaped at worst 6 bytes a character, and the rest: under 64 KiB.
# Anything far past that is not an answer file.
MAX_FEEDBACK_BYTES = 256 * 1024
MAX_RESULTS_BYTES = 16 * 1024 * 1024  # the grader's own results.json; a cap only against a stray huge file
STATUSES = ("complete", "partial", "malformed", "missing")
TEMPLATES = Path(__file__).resolve().parent / "templates"


class SummaryError(Exception):
    """Nothing to summarise (no such folder, no submission in it): exit 2 with this message."""


@dataclass
class Response:
    student: str
    status: str  # one of STATUSES
    source: str = ""  # where the file was read: alice/feedback.json, bob.zip:bob/feedback.json
    problems: list[str] = field(default_factory=list)
    answers: dict = field(default_factory=dict)  # the valid answers only; skipped optional questions left out


# --------------------------------------------------------------------------- reading the answer files


def find_submissions(root: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """(student id, path) for each folder or .zip in ``root``, and a note for each entry left aside."""
    found: dict[str, Path] = {}
    ignored = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        is_zip = entry.suffix.lower() == ".zip"
        if not (is_zip or entry.is_dir() or entry.is_symlink()):
            ignored.append(f"{entry.name}: not a folder or a .zip; ignored")
            continue
        student = entry.stem if is_zip else entry.name
        if student in found:
            ignored.append(f"{entry.name}: a second submission for {student} (besides {found[student].name}); ignored")
            continue
        found[student] = entry
    return list(found.items()), ignored


def read_response(student: str, path: Path, form: Form) -> Response:
    """The student's answers and how usable they are; never raises for a bad submission."""
    if path.is_symlink():
        return Response(student, "malformed", path.name, ["the submission is a symbolic link; not followed"])
    try:
        reader = _Folder(path) if path.is_dir() else _Zip(path)
    except SubmissionError as exc:
        return Response(student, "malformed", path.name, [str(exc)])
    try:
        return _read_from(student, path, reader, form)
    finally:
        if isinstance(reader, _Zip):
            reader.archive.close()


def _read_from(student: str, path: Path, reader: _Folder | _Zip, form: Form) -> Response:
    hits = _candidates(reader.names, FEEDBACK_FILE)
    if not hits:
        return Response(student, "missing", "", [f"no {FEEDBACK_FILE} in {path.name}"])
    source = f"{path.name}/{hits[0]}" if path.is_dir() else f"{path.name}:{hits[0]}"
    notes = [f"{len(hits)} copies of {FEEDBACK_FILE}; read the shallowest"] if len(hits) > 1 else []
    if reader.is_link(hits[0]):
        return Response(student, "malformed", source, ["a symbolic link; not followed (hand in the file itself)"])
    try:
        data = reader.read(hits[0], MAX_FEEDBACK_BYTES)
    except OSError as exc:
        return Response(student, "malformed", source, [f"could not be read: {exc.strerror or exc}"])
    if len(data) > MAX_FEEDBACK_BYTES:
        return Response(student, "malformed", source, [f"larger than {MAX_FEEDBACK_BYTES} bytes; not read"])
    response = parse_response(student, source, data, form)
    response.problems = notes + response.problems
    return response


def parse_response(student: str, source: str, data: bytes, form: Form) -> Response:
    """Validate the bytes of an answer file as assignment/feedback.py's load_answers and --check do."""
    try:
        answers = parse_answers(data, form)
    except FeedbackError as exc:
        return Response(student, "malformed", source, [str(exc)])
    valid = {
        q.id: answers[q.id] for q in form.questions if answers.get(q.id) is not None and q.check(answers[q.id]) is None
    }
    # form.problems names each unanswered question on a line of its own; here they fit on one.
    unanswered = [q.id for q in form.questions if q.required and q.id not in answers]
    problems = [f"not answered: {', '.join(unanswered)}"] if unanswered else []
    problems += [p for p in form.problems(answers) if p.split(":", 1)[0] not in unanswered]
    return Response(student, "partial" if problems else "complete", source, problems, valid)


# --------------------------------------------------------------------------- the numbers


def describe(values: list[float]) -> dict:
    """Count, mean, median, minimum and maximum of ``values`` (None where there are none)."""
    if not values:
        return {"n": 0, "mean": None, "median": None, "min": None, "max": None}
    return {
        "n": len(values),
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def per_task_family(q: Question) -> str | None:
    """A per_task question's base id (hours_t3 -> hours); None for any other question."""
    return q.id.removesuffix(f"_{q.task}") if q.type == "number" and q.task and q.id.endswith(f"_{q.task}") else None


def summarise_question(q: Question, responses: list[Response]) -> dict:
    values = [r.answers[q.id] for r in responses if q.id in r.answers]
    out = {"id": q.id, "text": q.text, "type": q.type, "task": q.task, "answered": len(values)}
    if q.type == "choice":
        picked = [p for v in values for p in (v if q.multiple else [v])]
        out |= {"multiple": q.multiple, "counts": {c: picked.count(c) for c in q.choices}}
    elif q.type == "scale":
        rated = [v for v in values if isinstance(v, int)]  # "did not attempt" is counted apart, never averaged
        out |= {
            "low": q.low,
            "high": q.high,
            "rated": len(rated),
            "not_attempted": len(values) - len(rated),
            "distribution": {str(k): rated.count(k) for k in range(SCALE[0], SCALE[1] + 1)},
        }
        out |= {k: v for k, v in describe(rated).items() if k in ("mean", "median")}
    elif q.type == "number":
        out |= describe(values)
    return out


def read_grades(grades_dir: Path, registry: Registry) -> tuple[dict[str, dict[str, tuple[float, float]]], list[str]]:
    """student -> task id -> (score, max score), summed over results.json's tests tagged with the task
    (grader/grade/report.py's gradescope_results tags each test with its task id). A task the grader did not
    grade for a student has no tests there and so no entry."""
    task_ids = {t.id for t in registry.tasks}
    grades: dict[str, dict[str, tuple[float, float]]] = {}
    warnings = []
    for entry in sorted(grades_dir.iterdir()):
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue
        path = entry / "results.json"
        try:
            if path.is_symlink() or path.stat().st_size > MAX_RESULTS_BYTES:
                raise OSError("a symbolic link or too large")
            results = json.loads(path.read_text(encoding="utf-8"))
            per_task: dict[str, tuple[float, float]] = {}
            for test in results["tests"]:
                task = next((tag for tag in test.get("tags", []) if tag in task_ids), None)
                if task:
                    score, top = per_task.get(task, (0.0, 0.0))
                    per_task[task] = (score + float(test["score"]), top + float(test["max_score"]))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            warnings.append(f"grades: {entry.name}/results.json: not usable ({why})")
            continue
        grades[entry.name] = per_task
    return grades, warnings


def task_rows(
    registry: Registry, questions: dict[str, dict], form: Form, grades: dict[str, dict[str, tuple[float, float]]] | None
) -> list[dict]:
    """Per task: the mean of each difficulty (scale) question about it, the mean of its per-task numbers (hours)
    and, with grades, the class's mean score."""
    rows = []
    for task in registry.tasks:
        row: dict = {
            "task": task.id,
            "title": task.title,
            "difficulty": [
                {
                    "question": q.id,
                    "text": q.text,
                    "n": questions[q.id]["rated"],
                    "not_attempted": questions[q.id]["not_attempted"],
                    "mean": questions[q.id]["mean"],
                }
                for q in form.questions
                if q.type == "scale" and q.task == task.id
            ],
            "per_task": {
                per_task_family(q): questions[q.id]["mean"]
                for q in form.questions
                if q.task == task.id and per_task_family(q)
            },
        }
        if grades is not None:
            marks = [g[task.id] for g in grades.values() if task.id in g]
            score, top = sum(m[0] for m in marks), sum(m[1] for m in marks)
            row |= {
                "graded": len(marks),
                "mean_score": score / len(marks) if marks else None,
                "max_score": top / len(marks) if marks else None,
                "mean_percent": 100 * score / top if top else None,
            }
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- the plots


def png(fig) -> bytes:
    """A matplotlib figure as PNG bytes (the class outputs draw theirs with it too)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # imported late: the error paths stay fast

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return buffer.getvalue()


def figure(width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.add_subplot()


def scale_plot(summary: dict) -> bytes:
    fig, ax = figure(5, 2.6)
    levels = list(summary["distribution"])
    ax.bar(levels, list(summary["distribution"].values()), color="#4878a8")
    ax.set_xticks(
        range(len(levels)), [f"{levels[0]}\n{summary['low']}"] + levels[1:-1] + [f"{levels[-1]}\n{summary['high']}"]
    )
    ax.set_ylabel("answers")
    ax.yaxis.get_major_locator().set_params(integer=True)
    skipped = f", {summary['not_attempted']} did not attempt" if summary["not_attempted"] else ""
    ax.set_title(
        f"n = {summary['rated']}, mean {summary['mean']:.2f}, median {summary['median']:g}{skipped}", fontsize=10
    )
    return png(fig)


def per_task_plot(values: dict[str, list[float]], ylabel: str) -> bytes:
    """One box per task (the mean as a triangle), every answer drawn over it."""
    fig, ax = figure(max(4.0, 0.9 * len(values) + 1.5), 3.2)
    positions = list(range(1, len(values) + 1))
    ax.boxplot(list(values.values()), positions=positions, showmeans=True, widths=0.5)
    for x, ys in zip(positions, values.values()):
        ax.plot([x] * len(ys), ys, "o", color="#4878a8", alpha=0.35, markersize=4)
    ax.set_xticks(positions, list(values))
    ax.set_xlabel("task")
    ax.set_ylabel(ylabel)
    return png(fig)


def difficulty_score_plot(points: list[tuple[str, float, float]]) -> bytes:
    fig, ax = figure(4.8, 3.4)
    for label, difficulty, percent in points:
        ax.scatter([difficulty], [percent], color="#4878a8")
        ax.annotate(label, (difficulty, percent), textcoords="offset points", xytext=(6, 4))
    ax.set_xlim(SCALE[0] - 0.3, SCALE[1] + 0.3)
    ax.set_ylim(-5, 105)
    ax.set_xlabel(f"mean difficulty answer ({SCALE[0]} easiest ... {SCALE[1]} hardest)")
    ax.set_ylabel("class mean score (% of the task's points)")
    return png(fig)


# --------------------------------------------------------------------------- writing


def page_sections(
    form: Form, registry: Registry, responses: list[Response], questions: dict[str, dict], images: dict[str, str]
) -> list[dict]:
    """What the page shows, in the form's order: a section per question, one for each per-task family."""
    sections, shown = [], set()
    for q in form.questions:
        family = per_task_family(q)
        if family is None:
            sections.append(
                questions[q.id]
                | {
                    "image": images.get(f"scale_{q.id}.png"),
                    # Sorted by their own text, not by student: the page names no one beside an opinion.
                    "texts": sorted(r.answers[q.id] for r in responses if q.id in r.answers)
                    if q.type == "text"
                    else [],
                }
            )
        elif family not in shown:
            shown.add(family)
            members = [p for p in form.questions if per_task_family(p) == family]
            text = q.text.removesuffix(f": {q.task} {registry.task(q.task).title}")
            sections.append(
                {
                    "type": "per_task",
                    "id": family,
                    "text": text,
                    "rows": [questions[p.id] | {"title": registry.task(p.task).title} for p in members],
                    "image": images.get(f"per_task_{family}.png"),
                }
            )
    return sections


def summarise(
    submissions_dir: Path,
    out: Path,
    grades_dir: Path | None = None,
    form: Form | None = None,
    registry: Registry | None = None,
) -> tuple[dict, list[str]]:
    """Read, aggregate, plot and write; returns summary.json's content and the warnings."""
    if not submissions_dir.is_dir():
        raise SummaryError(f"{submissions_dir}: no such folder (it should hold one folder or .zip per student)")
    if grades_dir is not None and not grades_dir.is_dir():
        raise SummaryError(f"{grades_dir}: no such folder (it should hold one grading output folder per student)")
    form, registry = form or load_form(), registry or load_registry()
    found, ignored = find_submissions(submissions_dir)
    if not found:
        raise SummaryError(f"{submissions_dir}: no submissions in it (expected one folder or .zip per student)")
    responses = [read_response(student, path, form) for student, path in found]
    warnings = [
        f"{r.student}: {r.source or '-'}: {r.status}: {'; '.join(r.problems)}"
        for r in responses
        if r.status != "complete"
    ] + ignored
    questions = {q.id: summarise_question(q, responses) for q in form.questions}
    grades = None
    if grades_dir is not None:
        grades, grade_warnings = read_grades(grades_dir, registry)
        warnings += grade_warnings
    tasks = task_rows(registry, questions, form, grades)

    figures: dict[str, bytes] = {}
    for q in form.questions:
        if q.type == "scale" and questions[q.id]["rated"]:
            figures[f"scale_{q.id}.png"] = scale_plot(questions[q.id])
    families: dict[str, dict[str, list[float]]] = {}
    for q in form.questions:
        if per_task_family(q):
            values = [r.answers[q.id] for r in responses if q.id in r.answers]
            if values:
                families.setdefault(per_task_family(q), {})[q.task] = values
    for family, values in families.items():
        figures[f"per_task_{family}.png"] = per_task_plot(values, family)
    points = [
        (
            f"{row['task']}" + (f" ({d['question']})" if len(row["difficulty"]) > 1 else ""),
            d["mean"],
            row["mean_percent"],
        )
        for row in tasks
        if grades is not None and row["mean_percent"] is not None
        for d in row["difficulty"]
        if d["mean"] is not None
    ]
    if points:
        figures["difficulty_vs_score.png"] = difficulty_score_plot(points)

    counts = {status: sum(r.status == status for r in responses) for status in STATUSES}
    summary = {
        "form_schema_version": form.schema_version,
        "submissions": len(responses),
        "counts": counts,
        "problems": [
            {"student": r.student, "status": r.status, "file": r.source, "reasons": r.problems}
            for r in responses
            if r.status != "complete"
        ],
        "ignored": ignored,
        "questions": questions,
        "tasks": tasks,
        "graded_students": None if grades is None else len(grades),
        "figures": [f"figures/{name}" for name in figures],
        "warnings": len(warnings),
    }
    for name, png in figures.items():
        write_atomic(out / "figures" / name, png)
    images = {name: "data:image/png;base64," + base64.b64encode(png).decode("ascii") for name, png in figures.items()}
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]))
    html = env.get_template("feedback_summary.html.j2").render(
        registry=registry,
        summary=summary,
        sections=page_sections(form, registry, responses, questions, images),
        tasks=tasks,
        has_grades=grades is not None,
        difficulty_image=images.get("difficulty_vs_score.png"),
        source=submissions_dir.name,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    write_atomic(out / "summary.html", html.encode("utf-8"))
    write_atomic(out / "summary.json", (json.dumps(summary, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return summary, warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", type=Path, help="a folder with one folder or .zip per student")
    parser.add_argument(
        "--grades",
        type=Path,
        default=None,
        help="per-student grading outputs (GRADES/<student>/results.json) to set scores beside",
    )
    parser.add_argument("--out", type=Path, default=Path("build/feedback-summary"))
    args = parser.parse_args(argv)
    try:
        summary, warnings = summarise(args.submissions, args.out, args.grades)
    except (SummaryError, FeedbackError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    counts = ", ".join(f"{n} {status}" for status, n in summary["counts"].items())
    print(f"{summary['submissions']} submission(s): {counts}; {len(warnings)} warning(s)")
    print(f"wrote {args.out}/summary.html, summary.json and {len(summary['figures'])} figure(s) in figures/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
