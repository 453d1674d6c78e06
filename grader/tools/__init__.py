"""The instructor's tools that exercise the grader: selfcheck, adversarial (grader/fixtures/), repeatability,
open_levels (the open scaffolding level's calibration), student_share (what the student writes and decides, per
level) and demo."""
