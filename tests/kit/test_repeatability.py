"""grader.tools.repeatability: the spread of a submission's grades over repeated gradings, from the files make grade
writes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from assignment.registry import load_registry
from grader.tools.repeatability import read_grading, spread, summarise

REPO = Path(__file__).resolve().parents[2]
RULE_T3 = load_registry().task("t3").timing[0]


def _graded(folder: Path, t3_correct: float, t3_value: float | None, t1_correct: float = 10.0) -> Path:
    """A make grade output folder with t1 (no timing) and t3 (one timing rule)."""
    folder.mkdir(parents=True)
    perf = RULE_T3.points_for(t3_value) if t3_value is not None else 0.0
    tests = [
        {"name": "t1 check", "score": t1_correct, "max_score": 10, "tags": ["t1", "correctness"]},
        {"name": "t3 check", "score": t3_correct, "max_score": 10, "tags": ["t3", "correctness"]},
        {"name": f"t3 performance: {RULE_T3.name}", "score": perf, "max_score": 5, "tags": ["t3", "performance"]},
        {"name": "theory q1", "score": 1, "max_score": 1, "tags": ["theory"]},
    ]
    timing = [{"rule": RULE_T3.name, "metric": RULE_T3.metric, "value": t3_value}] if t3_value is not None else []
    (folder / "results.json").write_text(json.dumps({"tests": tests}))
    (folder / "grading.json").write_text(
        json.dumps(
            {
                "tasks": {
                    "t1": {"status": "ran", "score": t1_correct, "timing": []},
                    "t3": {"status": "ran", "score": t3_correct + perf, "timing": timing},
                }
            }
        )
    )
    return folder


def test_identical_gradings_are_repeatable(tmp_path):
    gradings = [read_grading(_graded(tmp_path / f"g{i}", 10.0, v)) for i, v in enumerate((1.00, 1.02, 1.01))]
    assert gradings[0].correctness == {"t1": 10.0, "t3": 10.0}
    assert gradings[0].performance["t3"] == RULE_T3.points_for(1.0)
    summary = summarise("sol", gradings, load_registry())
    assert summary["problems"] == [] and summary["notes"] == []
    rule = summary["tasks"][1]["rules"][0]
    assert rule["values"] == [1.00, 1.02, 1.01] and rule["median"] == 1.01
    assert rule["spread"] == pytest.approx(0.02)


def test_a_correctness_change_is_a_problem(tmp_path):
    gradings = [read_grading(_graded(tmp_path / "a", 10.0, 1.0)), read_grading(_graded(tmp_path / "b", 9.0, 1.0))]
    problems = summarise("sol", gradings, load_registry())["problems"]
    assert len(problems) == 1 and "t3: correctness points differ" in problems[0] and "[10.0, 9.0]" in problems[0]


def test_a_wide_timing_spread_is_a_problem_and_a_moved_threshold_a_note(tmp_path):
    low, high = 1.10, 1.30  # either side of t3's first threshold (1.15): 18% apart
    gradings = [read_grading(_graded(tmp_path / "a", 10.0, low)), read_grading(_graded(tmp_path / "b", 10.0, high))]
    summary = summarise("slow", gradings, load_registry(), allowance=0.15)
    assert any("spread 18.2%" in p for p in summary["problems"]), summary["problems"]
    assert any("points moved" in n and "straddle" in n for n in summary["notes"]), summary["notes"]
    assert summarise("slow", gradings, load_registry(), allowance=0.2)["problems"] == []


def test_a_rule_missing_from_a_grading_is_a_problem(tmp_path):
    gradings = [read_grading(_graded(tmp_path / "a", 10.0, 1.0)), read_grading(_graded(tmp_path / "b", 10.0, None))]
    problems = summarise("sol", gradings, load_registry())["problems"]
    assert any("measured in 1 of 2 gradings" in p for p in problems), problems


def test_spread():
    assert spread([]) == 0.0 and spread([2.0]) == 0.0
    assert spread([1.0, 1.5]) == pytest.approx(0.5)
    assert spread([0.0, 1.0]) == float("inf")


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "grader.tools.repeatability", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_reports_and_fails_on_a_spread(tmp_path):
    a, b = _graded(tmp_path / "a", 10.0, 1.0), _graded(tmp_path / "b", 10.0, 1.4)
    run = _cli("--graded", f"slow={a},{b}", "--json", tmp_path / "s.json")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "NOT REPEATABLE: slow t3" in run.stdout and "spread" in run.stdout
    assert json.loads((tmp_path / "s.json").read_text())[0]["submission"] == "slow"
    ok = _cli("--graded", f"sol={a},{a}")
    assert ok.returncode == 0 and "repeatable:" in ok.stdout, ok.stdout + ok.stderr


def test_bad_input_is_a_clear_error(tmp_path):
    run = _cli("--graded", "no-equals-sign")
    assert run.returncode != 0 and "NAME=DIR" in run.stderr
    run = _cli("--graded", f"x={tmp_path}")
    assert run.returncode != 0 and "not a graded submission" in run.stderr
    run = _cli(tmp_path / "missing")
    assert run.returncode == 2 and "no such submission" in run.stderr
    run = _cli(REPO / "solutions", "--task", "t10")
    assert run.returncode == 2 and "unknown task" in run.stderr


def test_a_buggy_submission_gets_the_same_correctness_points_on_every_grading(tmp_path):
    """The hidden seed is derived from the salt, the student and the task: a bug whose failures depend on the drawn
    shapes (rows that see no key give NaN) scores the same each time, where a fresh seed per grading moved it."""
    from dataclasses import replace

    from grader.grade.config import GradeConfig
    from grader.grade.grade import check_host
    from grader.tools.repeatability import grade_repeatedly

    registry = load_registry()
    sub = tmp_path / "buggy"
    sub.mkdir()
    solution = (REPO / "solutions" / "t1_attention.py").read_text()
    guard = "    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))\n"
    assert guard in solution
    (sub / "t1_attention.py").write_text(solution.replace(guard, ""))
    config = replace(GradeConfig(), tasks=("t1",), preflight=False, allow_weak_isolation=True, select="naive")
    gradings = grade_repeatedly(sub, 2, tmp_path / "out", registry, config, check_host(config, registry))
    summary = summarise("buggy", gradings, registry)
    assert summary["problems"] == [] and summary["notes"] == []
    (row,) = summary["tasks"]
    assert row["correctness"][0] == row["correctness"][1] < 10.0  # the bug costs points, the same ones each time
    assert row["seeds"][0] == row["seeds"][1] is not None


def test_gradings_with_different_seeds_are_not_compared_on_correctness(tmp_path):
    gradings = [read_grading(_graded(tmp_path / "a", 10.0, 1.0)), read_grading(_graded(tmp_path / "b", 9.0, 1.0))]
    gradings[0].seeds, gradings[1].seeds = {"t3": 1}, {"t3": 2}
    summary = summarise("copies", gradings, load_registry())
    assert summary["problems"] == [] and any("different hidden seeds" in n for n in summary["notes"])
