"""Instructor-only: everything that grades, checks and packs the assignment, laid out by job.

    tools/      the instructor's tools that exercise the grader: self-check, adversarial fixtures,
                repeatability, open-level calibration, demo
    classroom/  a class: batch grading, Slurm, Gradescope, class outputs, rosters, the feedback summary
    release/    the student bundle (`make release`)
    grade/      one submission, one module per phase: preflight, collect, prepare, run, score, report
    hidden/     the hidden suites the checker runs
    isolation/  the sandboxed worker that runs student Python, and what a student is told of it
    authoring/  what makes the students' files: the starter generator, the shipped model's corpus,
                training and model card

Imports flow down that list, never up (tests/kit/test_layout.py checks): grade/ knows nothing of a class or of
the tools. Not Python packages: fixtures/ (the adversarial submissions), notes/, records/ (measured figures),
scripts/ (GPU-host scripts).
"""
