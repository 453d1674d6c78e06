"""``make theory ID=<your id>``: print your theory questions and prepare your answers file.

    python -m assignment.theory --id s1234567             # print the questions, write theory_answers.toml
    python -m assignment.theory --markdown build/q.md     # also as Markdown (the id from the answers file)
    python -m assignment.theory --check                   # what is still missing or unreadable

The id comes from ``--id`` (``make theory ID=...``), else the ``STUDENT_ID`` environment variable, else the
``student_id`` already in the answers file. The answers file is the registry's ``[theory] answers_file`` in the
bundle's root, where ``make submit`` looks for it; answers already written there are always kept.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from assignment.registry import load_registry
from assignment.theory import answers
from assignment.theory.questions import TheoryError, normalise_id, questions_for, render_markdown, render_text

REPO_ROOT = Path(__file__).resolve().parents[2]  # the bundle's root


def resolve_id(given: str | None, answers_path: Path) -> str:
    """``--id``, else ``STUDENT_ID``, else the student_id already in the answers file."""
    if given:
        return normalise_id(given)
    if os.environ.get("STUDENT_ID", "").strip():
        return normalise_id(os.environ["STUDENT_ID"])
    if answers_path.is_file():
        recorded = answers.load(answers_path).student_id
        if recorded:
            return normalise_id(recorded)
    raise TheoryError(
        "no student id: run `make theory ID=<your id>` (or set STUDENT_ID); the id picks your "
        "questions, so use the one the course knows you by"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--id", help="your student id (default: STUDENT_ID, else the one in the answers file)")
    parser.add_argument("--answers", type=Path, help="the answers file (default: the registry's, in the bundle root)")
    parser.add_argument("--markdown", type=Path, help="also write the questions as Markdown to this file")
    parser.add_argument("--check", action="store_true", help="only check the answers file: what is missing")
    args = parser.parse_args(argv)
    registry = load_registry()
    if registry.theory is None:
        print("this course has no theory part (no [theory] in the registry)", file=sys.stderr)
        return 2
    path = args.answers or REPO_ROOT / registry.theory.answers_file
    try:
        student_id = resolve_id(args.id, path)
        questions = questions_for(student_id, registry.theory)
        if args.check:
            if not path.is_file():
                raise answers.AnswersError(f"{path} does not exist: `make theory ID={student_id}` writes it")
            found = answers.problems(answers.load(path), questions, student_id)
            for problem in found:
                print(f"{path.name}: {problem}")
            print(
                f"{path.name}: "
                + (
                    f"{len(found)} answer(s) missing or unreadable"
                    if found
                    else "every answer is there and reads as a number"
                )
            )
            return 1 if found else 0
        answers.existing_answers(path, student_id)  # refuse another student's (or an unreadable) file first
        print(render_text(student_id, questions, registry))
        if args.markdown:
            args.markdown.parent.mkdir(parents=True, exist_ok=True)
            args.markdown.write_text(render_markdown(student_id, questions, registry), encoding="utf-8")
            print(f"wrote {args.markdown}")
        print(answers.prepare(path, student_id, questions, registry))
    except TheoryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
