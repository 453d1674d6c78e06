"""The instructor's tools that exercise the grader: selfcheck, adversarial (grader/fixtures/), repeatability,
open_levels (the open scaffolding level's calibration) and demo."""
