"""Grading one submission (``python -m grader.grade.grade``), one module per phase: preflight, submission
(collect), prepare, runner (with checker_plugin in each checker process), scoring, theory, report; grade runs
them, seeds derives the hidden seeds and config holds the typed settings."""
