"""The student targets as make bench prints them (assignment/perf/targets.py), without a GPU."""

from __future__ import annotations

import pytest

from assignment import tasks
from assignment.perf import targets
from assignment.registry import load_registry

pytestmark = pytest.mark.kit


def _rule(task_id: str, index: int = 0):
    task = load_registry().task(task_id)
    return task, task.timing[index]


def test_a_kernel_faster_than_the_target_reads_full_points():
    task, rule = _rule("t3")
    row = {"results": {"cuBLAS": {"median_ms": 2.0}, "student": {"median_ms": 2.5}}, "notes": []}
    speed, mine, base, why = targets.speed_from_row(rule, row, None)
    assert (speed, mine, base, why) == (pytest.approx(0.8), 2.5, 2.0, None)
    standing = targets.settle(targets.new_standing(task, rule), rule, speed, mine, base)
    assert standing.points == 5
    text = targets.format_standing(standing)
    assert "your kernel: 0.80x cuBLAS's speed (2.500 ms; cuBLAS 2.000 ms)" in text
    assert "full points (5) from: 0.74x cuBLAS's speed" in text
    assert "you are here: 5 of 5 points" in text


def test_copy_targets_use_the_measured_bandwidth_and_a_slow_kernel_gets_partial_points():
    task, rule = _rule("t2")
    row = {"results": {"pytorch": {"median_ms": 1.0}, "student": {"median_ms": 1.4, "gbps": 2000.0}}, "notes": []}
    speed, *_ = targets.speed_from_row(rule, row, 2900.0)
    assert speed == pytest.approx(2000 / 2900)
    standing = targets.settle(targets.new_standing(task, rule), rule, speed, 1.4)
    assert standing.points == 2  # 69% of copy: past 1.5x the reference's time (68%), short of 1.15x (89%)
    assert "69% of the device copy bandwidth" in targets.format_standing(standing)


def test_a_todo_says_why_it_was_not_measured():
    task, rule = _rule("t4", 1)
    row = {"results": {"SDPA": {"median_ms": 10.0}}, "notes": ["student skipped: t4: flash attention kernel"]}
    speed, _, _, why = targets.speed_from_row(rule, row, None)
    assert speed is None and "t4: flash attention kernel" in why
    standing = targets.settle(targets.new_standing(task, rule), rule, speed, reason=why)
    text = targets.format_standing(standing)
    assert "not measured" in text and "you are here" not in text and "full points (6) from: 1.00x SDPA" in text


def test_the_decode_step_rule_reads_the_model_table_and_counts_the_graders_round_trip():
    task, rule = _rule("t6", 1)
    assert (
        targets.is_model_rule(rule) and targets.rule_case(task, rule, tasks.code(task.id).rule_case, None, None) is None
    )
    report = {
        "prompts": [
            {"prompt": 128, "rows": {"naive": {"tbt_ms": 20.0}, "student": {"tbt_ms": 2.0}}},
            {"prompt": 1024, "rows": {"naive": {"tbt_ms": 74.0}, "student": {"tbt_ms": 2.5}}},
        ]
    }
    speed, mine, base, why = targets.model_speed(rule, report)
    assert why is None and (mine, base) == (2.5, 74.0)
    assert speed == pytest.approx(74.0 / (2.5 + rule.student.overhead_ms))
    assert targets.model_speed(rule, {"error": "OutOfMemoryError: ..."})[3].startswith("OutOfMemoryError")
    skipped = {"prompts": [{"prompt": 1024, "rows": {"naive": {"tbt_ms": 74.0}, "student": {"skipped": "t6: TODO"}}}]}
    assert "t6: TODO" in targets.model_speed(rule, skipped)[3]


def test_the_table_names_the_gpu_the_course_grades_on():
    task = load_registry().task("t3")
    standing = targets.new_standing(task, task.timing[0])
    assert "the course grades on NVIDIA H100 80GB HBM3" in targets.format_standings([standing])
    assert targets.format_standings([]) == ""


def test_every_kernel_rule_has_a_bench_case_with_its_baseline_and_the_student():
    class Anything:  # stands in for a kernels object: the case only binds its methods
        def __getattr__(self, name):
            return lambda *a, **k: None

    for task in load_registry().available:
        for rule in task.timing:
            case = targets.rule_case(task, rule, tasks.code(task.id).rule_case, Anything(), None)
            if targets.is_model_rule(rule):
                assert case is None
                continue
            assert "student" in case.candidates and "reference" not in case.candidates, (task.id, rule.name)
            if rule.student.baseline != "copy":
                assert rule.student.baseline in case.candidates, (task.id, rule.name)
            assert next(iter(case.candidates)) != "student"  # the first candidate checks the others
            with_reference = targets.rule_case(task, rule, tasks.code(task.id).rule_case, Anything(), Anything())
            assert "reference" in with_reference.candidates
