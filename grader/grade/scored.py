"""One scored check, the unit of every results file (Gradescope's ``tests``): a task's checks and timing rules
(grader/grade/scoring.py) and the theory answers (grader/grade/theory.py) are both lists of these."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)  # six fields of like types: named at every construction
class ScoredTest:
    name: str
    score: float
    max_score: float
    passed: bool
    output: str
    tags: list[str]
    ran: bool = True  # False: not run on this host; max_score is its worth, neither earned nor lost
