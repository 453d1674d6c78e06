"""Render the handout: build/handout/handout.html (self-contained) and handout.pdf for students; the instructor's
copy (with the rubric's reasoning) beside them as handout-instructor.html and handout-instructor.pdf, so that neither
audience's files ever overwrite the other's.

    python -m handout.render [--out build/handout] [--no-pdf] [--audience instructor]
                             [--hours build/feedback-summary]

``--hours`` takes the feedback summary (``make feedback-summary``'s summary.json, or its folder): tasks with
enough beta-tester answers then show the testers' hours instead of the instructor's estimate.

The PDF needs a Chromium (see handout/pdf.py). Without one the HTML is still
written; the command then exits 1 unless --no-pdf or HANDOUT_PDF=optional says
the PDF may be skipped (e.g. on a GPU host without network).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import jinja2

from assignment.registry import Chapter, Registry, Task, TimingRule, load_registry
from handout import hours
from handout.api import REPO_ROOT, FileApi, task_api
from handout.facts import kit_facts
from handout.mathml import markdown_to_html
from handout.pdf import PdfError, html_to_pdf
from handout.rules import FileRules, task_rules
from handout.texts import TEXT_DIR, add_filters, format_number, render_text, task_text_html

HANDOUT_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = REPO_ROOT / "build" / "handout"
# What each tolerance key means; the values themselves come from the registry.
TOLERANCE_MEANING = {
    "atol": "absolute tolerance: |out − ref| ≤ atol + rtol·|ref| element-wise, against a float64 reference",
    "rtol": "relative tolerance (see atol)",
    "max_error_ratio": "your max error may be at most this multiple of a same-precision PyTorch implementation's",
    "atol_floor": "added to that bound, so an exact-zero baseline error does not demand zero error",
}


# The key of the chapters that come after the last task (the back matter) in ``chapter_views``.
AFTER_TASKS = "after-tasks"


@dataclass
class ChapterView:
    chapter: Chapter  # the registry's [[chapter]]
    html: str


@dataclass
class TaskView:
    """Everything the template shows for one task."""

    task: Task
    text_html: str | None
    files: list[FileApi]
    commands: list[tuple[str, str]]  # (command, what it does)
    rules: list[FileRules]
    estimate: hours.TimeEstimate | None


def test_commands(task: Task) -> list[tuple[str, str]]:
    commands = [(f"make test T={task.id}", "the public tests of this task")]
    if task.needs_gpu:
        commands += [
            (f"make bench T={task.id}", "time your code against the reference and the naive baseline"),
            (f"make profile T={task.id}", "Nsight Compute metrics of one launch"),
        ]
    return commands


def describe_threshold(rule: TimingRule, at: float) -> str:
    if rule.metric == "time_vs_reference":
        return f"time ≤ {format_number(at)} × the time of {rule.reference}"
    return f"speedup ≥ {format_number(at)}× over {rule.reference}"


def describe_student_target(rule: TimingRule, at: float) -> str:
    """The same threshold as a student measures it without the reference (make bench's "you are here")."""
    from assignment.perf.targets import describe

    if rule.student is None:
        return "-"
    return "≥ " + describe(rule.student.baseline, rule.student.needed(rule.metric, at))


def task_views(
    registry: Registry,
    root: Path = REPO_ROOT,
    text_dir: Path = TEXT_DIR,
    estimates: dict[str, hours.TimeEstimate] | None = None,
) -> list[TaskView]:
    estimates = hours.time_estimates(registry) if estimates is None else estimates
    return [
        TaskView(
            task,
            task_text_html(task, registry, text_dir),
            task_api(task, registry, root),
            test_commands(task),
            task_rules(task),
            estimates.get(task.id),
        )
        for task in registry.tasks
    ]


def chapter_views(registry: Registry, text_dir: Path = TEXT_DIR) -> dict[str, list[ChapterView]]:
    """Task id (or AFTER_TASKS) -> the registry's chapters shown just before it; a chapter whose text does not
    exist yet is left out."""
    before: dict[str, list[ChapterView]] = {}
    for chapter in registry.chapters:
        path = text_dir / chapter.text
        if path.is_file():
            view = ChapterView(chapter, render_text(path, registry))
            before.setdefault(chapter.before or AFTER_TASKS, []).append(view)
    return before


def template_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HANDOUT_DIR / "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        describe_threshold=describe_threshold,
        describe_student_target=describe_student_target,
        tolerance_meaning=TOLERANCE_MEANING,
        describe_hours=hours.describe,
        describe_total_hours=hours.describe_total,
        AFTER_TASKS=AFTER_TASKS,
    )
    return add_filters(env)


AUDIENCES = ("student", "instructor")
FILE_STEMS = {"student": "handout", "instructor": "handout-instructor"}  # one name per audience: never the other's


def output_paths(out_dir: Path, audience: str) -> tuple[Path, Path]:
    """(the HTML, the PDF) of ``audience``'s handout in ``out_dir``."""
    stem = FILE_STEMS[audience]
    return out_dir / f"{stem}.html", out_dir / f"{stem}.pdf"


def render_html(
    registry: Registry | None = None,
    root: Path = REPO_ROOT,
    text_dir: Path = TEXT_DIR,
    audience: str = "student",
    feedback_hours: dict[str, dict] | None = None,
) -> str:
    """The handout; ``audience="instructor"`` adds the rubric's reasoning (where every threshold comes from).
    ``feedback_hours`` is the feedback summary's questions (``hours.read_summary``): the testers' hours replace
    the instructor's estimates where there are enough of them."""
    if audience not in AUDIENCES:
        raise ValueError(f"audience must be one of {AUDIENCES}, got {audience!r}")
    registry = registry or load_registry()
    estimates = hours.time_estimates(registry, feedback_hours)
    policy = registry.integrity_policy
    return (
        template_environment()
        .get_template("handout.html.j2")
        .render(
            registry=registry,
            audience=audience,
            chapters_before=chapter_views(registry, text_dir),
            views=task_views(registry, root, text_dir, estimates),
            total_hours=hours.total(estimates, registry),
            hours_from_feedback=any(e.from_feedback for e in estimates.values()),
            policy_html=markdown_to_html(policy, f"{registry.path} [course] integrity_policy", "integrity-")
            if policy
            else "",
            kit=kit_facts(registry),
            css=(HANDOUT_DIR / "style.css").read_text(encoding="utf-8"),
        )
    )


def write_html(out_dir: Path, **kwargs) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    html_path = output_paths(out_dir, kwargs.get("audience", "student"))[0]
    # Write atomically: a half-written handout must never be printed or served.
    partial = html_path.with_suffix(".html.partial")
    partial.write_text(render_html(**kwargs), encoding="utf-8")
    partial.replace(html_path)
    return html_path


def pdf_is_optional(no_pdf_flag: bool) -> bool:
    return no_pdf_flag or os.environ.get("HANDOUT_PDF", "").lower() == "optional"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the handout to HTML and PDF.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default build/handout)")
    parser.add_argument("--no-pdf", action="store_true", help="write only the HTML")
    parser.add_argument(
        "--audience",
        choices=AUDIENCES,
        default="student",
        help="student (what the bundle ships: handout.html/.pdf) or instructor (adds the rubric's reasoning: "
        "handout-instructor.html/.pdf)",
    )
    parser.add_argument(
        "--hours",
        type=Path,
        default=None,
        help="the feedback summary (summary.json of make feedback-summary, or its folder): "
        "beta testers' hours per task instead of the instructor's estimates",
    )
    args = parser.parse_args(argv)

    try:
        feedback_hours = hours.read_summary(args.hours) if args.hours else None
    except hours.HoursError as exc:
        print(f"handout: error: {exc}", file=sys.stderr)
        return 2
    html_path = write_html(args.out, audience=args.audience, feedback_hours=feedback_hours)
    print(f"handout: wrote {html_path}")
    if args.no_pdf:
        print("handout: PDF skipped (--no-pdf)")
        return 0
    try:
        pdf_path = html_to_pdf(html_path, output_paths(args.out, args.audience)[1])
    except PdfError as exc:
        optional = pdf_is_optional(False)
        level = "warning" if optional else "error"
        print(f"handout: {level}: PDF not written: {exc}", file=sys.stderr)
        if optional:
            print("handout: continuing without the PDF (HANDOUT_PDF=optional)", file=sys.stderr)
            return 0
        print("handout: pass --no-pdf or set HANDOUT_PDF=optional to accept the HTML alone", file=sys.stderr)
        return 1
    print(f"handout: wrote {pdf_path} ({pdf_path.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
