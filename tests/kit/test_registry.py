"""The registry loader rejects every inconsistency with file, task and field."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from assignment.registry import REGISTRY_PATH, RegistryError, check_markers, load_registry

pytestmark = pytest.mark.kit


def edition_writer():
    """``student_edition``, or a skip where tomli_w, which writes it, is not installed (a GPU host off the network)."""
    pytest.importorskip("tomli_w")
    from grader.release.student_edition import student_edition

    return student_edition


def write_variant(tmp_path: Path, old: str, new: str, count: int = 1) -> Path:
    text = REGISTRY_PATH.read_text()
    assert old in text, f"test setup: {old!r} not in the registry"
    path = tmp_path / "tasks.toml"
    path.write_text(text.replace(old, new, count))
    return path


def test_real_registry_is_valid_and_complete():
    registry = load_registry()
    assert registry.ids == ("t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9")
    regular = sum(t.points.total for t in registry.tasks if not t.bonus)
    assert regular + registry.theory.regular_points == registry.total_points
    assert registry.task("t1").available


def test_missing_field_names_file_task_and_field(tmp_path):
    path = write_variant(tmp_path, 'slug = "cuda-softmax"\n', "")
    with pytest.raises(RegistryError, match=r"tasks\.toml: task t2: field 'slug': is missing"):
        load_registry(path)


def test_unknown_task_id_is_rejected(tmp_path):
    path = write_variant(tmp_path, 'id = "t7"', 'id = "task7"')
    with pytest.raises(RegistryError, match=r"task task7: field 'id'"):
        load_registry(path)


def test_gap_in_task_ids_is_rejected(tmp_path):
    path = write_variant(tmp_path, 'id = "t7"', 'id = "t10"')
    with pytest.raises(RegistryError, match=r"without gaps"):
        load_registry(path)


def test_points_that_do_not_add_up(tmp_path):
    path = write_variant(tmp_path, "total_points = 120", "total_points = 99")
    with pytest.raises(
        RegistryError, match=r"course.total_points.*add up to 100 and the theory's to 20 \(120 in all\)"
    ):
        load_registry(path)


def test_a_bonus_task_counts_on_top_of_the_total(tmp_path):
    # t7 made a bonus task: its 10 points leave the total (110 now adds up) and stay the task's own.
    path = write_variant(tmp_path, 'id = "t7"\n', 'id = "t7"\nbonus = true\n')
    with pytest.raises(RegistryError, match=r"course.total_points': is 120 but the tasks' points add up to 90"):
        load_registry(path)
    path.write_text(path.read_text().replace("total_points = 120", "total_points = 110"))
    registry = load_registry(path)
    assert registry.task("t7").bonus and not registry.task("t6").bonus
    assert registry.task("t7").points.total == 10
    path.write_text(path.read_text().replace("bonus = true", 'bonus = "yes"'))
    with pytest.raises(RegistryError, match=r"task t7: field 'bonus': must be true or false"):
        load_registry(path)


def test_performance_points_must_match_the_timing_rubric(tmp_path):
    # t1 is available with performance = 0 and no rubric; give it performance points but no rubric.
    path = write_variant(tmp_path, "correctness = 10\nperformance = 0", "correctness = 10\nperformance = 5")
    path.write_text(path.read_text().replace("total_points = 120", "total_points = 125"))
    with pytest.raises(RegistryError, match=r"task t1: field 'points.performance'.*must add up"):
        load_registry(path)


def test_wrong_type_is_reported(tmp_path):
    path = write_variant(tmp_path, "correctness = 7", 'correctness = "seven"')
    with pytest.raises(RegistryError, match=r"task t2: field 'points.correctness': must be"):
        load_registry(path)


def test_invalid_toml_is_reported(tmp_path):
    path = tmp_path / "tasks.toml"
    path.write_text("[course\n")
    with pytest.raises(RegistryError, match="not valid TOML"):
        load_registry(path)


def test_marker_with_no_task():
    with pytest.raises(RegistryError, match=r"marker 't10' used by tests/x.py::test_a has no task"):
        check_markers({"t10", "parametrize"}, load_registry(), "tests/x.py::test_a")
    check_markers({"t1", "gpu", "kit"}, load_registry(), "ok")


def test_pytest_rejects_a_test_with_an_unknown_task_marker(tmp_path):
    test_file = tmp_path / "test_bad_marker.py"
    test_file.write_text("import pytest\n\n@pytest.mark.t10\ndef test_x():\n    pass\n")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(test_file),
            "-q",
            "-c",
            str(root / "pyproject.toml"),
            "--rootdir",
            str(root),
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert proc.returncode != 0
    assert re.search(r"'t10'", proc.stdout + proc.stderr), proc.stdout + proc.stderr


def test_hidden_shapes_are_fixed_edge_cases_plus_shapes_drawn_from_the_seed():
    task = load_registry().task("t4")
    first, again, other = task.hidden_shapes(11), task.hidden_shapes(11), task.hidden_shapes(12)
    assert first == again and first != other, "the drawn shapes must follow the seed and only the seed"
    assert first[: len(task.hidden.fixed)] == task.hidden.fixed
    assert len(first) == len(task.hidden)
    for shape in first[len(task.hidden.fixed) :]:
        for key, spec in task.hidden.ranges.items():
            if isinstance(spec, list):
                assert spec[0] <= shape[key] <= spec[1]
            else:
                assert shape[spec["divisor_of"]] % shape[key] == 0


T4_DRAW = 'draw = { count = 2, B = [1, 2], H = [1, 8], H_kv = { divisor_of = "H" }, Lq = [1, 1500], Lk = [1, 1500] }'


def test_a_malformed_draw_range_is_rejected(tmp_path):
    path = write_variant(tmp_path, T4_DRAW, T4_DRAW.replace("B = [1, 2]", "B = [2, 1]"))
    with pytest.raises(RegistryError, match=r"hidden.draw.B"):
        load_registry(path)


def test_kv_heads_are_drawn_as_divisors_of_the_query_heads():
    from assignment.registry import HiddenShapes, divisors

    assert divisors(1) == [1] and divisors(12) == [1, 2, 3, 4, 6, 12]
    hidden = HiddenShapes(count=400, ranges={"H": [1, 12], "H_kv": {"divisor_of": "H"}})
    shapes = hidden.draw(7)
    assert all(s["H"] % s["H_kv"] == 0 for s in shapes)
    # Every kind of attention turns up: multi-head, multi-query and grouped (1 < H_kv < H).
    assert {("mha" if s["H_kv"] == s["H"] else "mqa" if s["H_kv"] == 1 else "gqa") for s in shapes if s["H"] > 1} == {
        "mha",
        "mqa",
        "gqa",
    }
    for task_id in ("t4", "t5"):
        task = load_registry().task(task_id)
        kinds = {
            ("mha" if s["H_kv"] == s["H"] else "mqa" if s["H_kv"] == 1 else "gqa")
            for s in task.hidden.fixed
            if s["H"] > 1
        }
        assert kinds == {"mha", "mqa", "gqa"}, f"{task_id}'s fixed hidden shapes miss a kind of attention: {kinds}"
        assert all(s["H"] % s["H_kv"] == 0 for s in task.public_shapes + task.hidden_shapes(3))


@pytest.mark.parametrize(
    "spec, why",
    [
        ('{ divisor_of = "Lq2" }', "hidden.draw.H_kv"),  # no such key
        ('{ divisor_of = "Lk" }', "hidden.draw.H_kv"),  # drawn after H_kv
        ('{ divisor_of = "H", choice = [1] }', "hidden.draw.H_kv"),  # one kind of spec at a time
    ],
)
def test_a_malformed_divisor_draw_is_rejected(tmp_path, spec, why):
    path = write_variant(tmp_path, T4_DRAW, T4_DRAW.replace('{ divisor_of = "H" }', spec))
    with pytest.raises(RegistryError, match=why):
        load_registry(path)


def test_a_fixed_shape_whose_kv_heads_do_not_divide_the_query_heads_is_rejected(tmp_path):
    path = write_variant(
        tmp_path, "{ B = 2, H = 6, H_kv = 2, Lq = 300, Lk = 257 }", "{ B = 2, H = 6, H_kv = 4, Lq = 300, Lk = 257 }"
    )
    with pytest.raises(RegistryError, match=r"task t4: field 'hidden.shapes\[9\].H_kv': must divide H \(= 6\)"):
        load_registry(path)


@pytest.mark.parametrize(
    "entry, error",
    [
        ("float32 = { atol = -1e-6, rtol = 1e-5 }", r"field 'tolerance.float32.atol': must be a number >= 0"),
        ("float32 = { atol = 1e-6, rtol = true }", r"field 'tolerance.float32.rtol': must be a number >= 0"),
        ("float32 = { atol = 1e-6, rtol = nan }", r"field 'tolerance.float32.rtol': must be a number >= 0"),
        ("float32 = { atol = 1e-6 }", r"field 'tolerance.float32': must be a table \{ atol = ..., rtol = ... \}"),
        ("float32 = { atol = 1e-6, rtol = 1e-5, max_mean_error_ratio = 2 }", r"field 'tolerance.float32': must be"),
        ("float32 = 1e-6", r"field 'tolerance.float32': must be a table"),
    ],
)
def test_a_tolerance_is_a_table_of_non_negative_bounds(tmp_path, entry, error):
    with pytest.raises(RegistryError, match=r"task t2: " + error):
        load_registry(write_variant(tmp_path, "float32 = { atol = 1e-6, rtol = 1e-5 }", entry))


def test_a_test_reads_a_tolerance_by_its_name():
    t1 = load_registry().task("t1")
    assert t1.tol("float32") == {"atol": 2e-5, "rtol": 2e-5}
    assert set(t1.tol("float16")) == {"max_mean_error_ratio"}
    with pytest.raises(KeyError, match=r"task t1 has no tolerance 'float64'"):
        t1.tol("float64")


def test_grading_limits_must_be_consistent(tmp_path):
    path = write_variant(tmp_path, "timeout_s = 300\ntest_deadline_s = 60", "timeout_s = 30\ntest_deadline_s = 60")
    with pytest.raises(RegistryError, match=r"test_deadline_s <= timeout_s"):
        load_registry(path)


def test_the_student_edition_of_the_registry_has_no_hidden_shapes_or_reasoning(tmp_path):
    student_edition = edition_writer()

    text = student_edition(REGISTRY_PATH.read_text())
    assert "[task.hidden]" not in text and "draw = " not in text
    assert "reasoning" not in text and "grader/" not in text
    path = tmp_path / "tasks.toml"
    path.write_text(text)
    student = load_registry(path)
    assert all(len(t.hidden) == 0 for t in student.tasks)
    assert [t.points for t in student.tasks] == [t.points for t in load_registry().tasks]
    instructor = load_registry()
    assert [r.student for t in student.tasks for r in t.timing] == [
        r.student for t in instructor.tasks for r in t.timing
    ]
    assert [r.thresholds for t in student.tasks for r in t.timing] == [
        r.thresholds for t in instructor.tasks for r in t.timing
    ]
    assert instructor.hidden_seed_salt and student.hidden_seed_salt is None
    assert "[hidden_seed]" not in text and instructor.hidden_seed_salt not in text


def test_the_hidden_seed_salt_is_a_secret_of_its_own(tmp_path):
    salt = load_registry().hidden_seed_salt
    with pytest.raises(RegistryError, match=r"field 'hidden_seed.salt': must be a secret of 16 characters or more"):
        load_registry(write_variant(tmp_path, f'salt = "{salt}"', 'salt = "guessable"'))
    theory_salt = load_registry().theory.salt
    with pytest.raises(RegistryError, match=r"hidden_seed.salt': must differ from theory.salt, which ships"):
        load_registry(write_variant(tmp_path, f'salt = "{salt}"', f'salt = "{theory_salt}"'))
    with pytest.raises(RegistryError, match=r"field 'hidden_seed': is in a student edition: the salt must never ship"):
        load_registry(write_variant(tmp_path, "[course]\n", '[course]\nedition = "student"\n'))


def test_every_available_task_has_hidden_shapes():
    for task in load_registry().available:
        assert task.hidden.fixed, f"{task.id} has no [task.hidden] shapes: the grader would have no cases"


def test_every_timing_rule_of_an_available_task_has_a_student_target(tmp_path):
    line = 'student = { baseline = "cuBLAS", reference = 0.85, gpu = "NVIDIA H100 80GB HBM3" }\n'
    with pytest.raises(RegistryError, match=r"task t3: field 'timing.student': is missing"):
        load_registry(write_variant(tmp_path, line, ""))
    with pytest.raises(RegistryError, match=r"task t3: field 'timing\[0\].student.baseline': must be one of"):
        load_registry(write_variant(tmp_path, line, line.replace('"cuBLAS"', '"the reference"')))
    speedup = "naive = 0.815, "
    with pytest.raises(RegistryError, match=r"task t4: field 'timing\[0\].student.naive': is missing"):
        load_registry(write_variant(tmp_path, speedup, ""))


def test_student_targets_restate_the_rules_from_the_reference_figures():
    registry = load_registry()
    gemm = registry.task("t3").timing[0]
    # time_vs_reference: the reference at 0.85x cuBLAS, full points up to 1.15x its time -> 0.74x cuBLAS
    assert gemm.student.needed(gemm.metric, 1.15) == pytest.approx(0.85 / 1.15)
    assert gemm.student_points_for(0.75) == 5 and gemm.student_points_for(0.6) == 3.5
    assert gemm.student_points_for(0.1) == 0
    naive = registry.task("t4").timing[0]
    # speedup_vs_naive: 1.25x over a naive composition that runs at 0.815x SDPA -> 1.02x SDPA
    assert naive.student.needed(naive.metric, 1.25) == pytest.approx(0.815 * 1.25)
    step = registry.task("t6").timing[1]
    assert step.student.baseline == "naive path" and step.student.needed(step.metric, 10.0) == 10.0
    for task in registry.available:
        for rule in task.timing:
            full = max(rule.thresholds, key=lambda t: t.points)
            # the reference itself earns full points against its own target
            assert rule.student_points_for(rule.student.reference) == rule.max_points, (task.id, rule.name)
            assert rule.student.needed(rule.metric, full.at) > 0


def test_every_available_task_has_learning_objectives_and_a_time_estimate(tmp_path):
    for task in load_registry().available:
        assert len(task.objectives) >= 3 and all(o.endswith(".") for o in task.objectives), task.id
        low, high = task.estimated_hours
        assert 0 < low <= high, task.id
    objectives = load_registry().task("t2").objectives
    text = REGISTRY_PATH.read_text()
    start = text.index("objectives = [", text.index('id = "t2"'))
    block = text[start : text.index("]\n", start) + 2]
    with pytest.raises(RegistryError, match=r"task t2: field 'objectives': is missing"):
        load_registry(write_variant(tmp_path, block, ""))
    with pytest.raises(RegistryError, match=r"task t2: field 'objectives': must be a list of non-empty strings"):
        load_registry(write_variant(tmp_path, block, 'objectives = ["", "x"]\n'))
    assert objectives and all("  " not in o for o in objectives)
    hours = "estimated_hours = [4, 8]\n"
    assert hours in text
    with pytest.raises(RegistryError, match=r"task t1: field 'estimated_hours': must be \[low, high\]"):
        load_registry(write_variant(tmp_path, hours, "estimated_hours = [8, 4]\n"))
    with pytest.raises(RegistryError, match=r"task t1: field 'estimated_hours': is missing"):
        load_registry(write_variant(tmp_path, hours, ""))


def test_the_integrity_policy_is_markdown_text_that_the_student_edition_keeps_whole(tmp_path):
    student_edition = edition_writer()

    registry = load_registry()
    assert "AI" in registry.integrity_policy and not registry.integrity_policy.startswith("\n")
    # An instructor's own policy, with a Markdown heading and blank lines: the student edition keeps every line.
    policy = (
        'integrity_policy = """\n## Our rules\n\n\n# Not a comment\nreasoning = not a key either; `NOTES.md`\n"""\n'
    )
    old = REGISTRY_PATH.read_text()
    start = old.index('integrity_policy = """')
    end = old.index('"""\n', start + 25) + 4
    path = write_variant(tmp_path, old[start:end], policy)
    edited = load_registry(path)
    assert edited.integrity_policy == "## Our rules\n\n\n# Not a comment\nreasoning = not a key either; `NOTES.md`"
    (tmp_path / "student.toml").write_text(student_edition(path.read_text()))
    assert load_registry(tmp_path / "student.toml").integrity_policy == edited.integrity_policy
    with pytest.raises(RegistryError, match=r"field 'course.integrity_policy': must be a string"):
        load_registry(write_variant(tmp_path, old[start:end], "integrity_policy = 3\n"))


def test_the_integrity_note_is_packed_and_named_by_the_policy(tmp_path):
    old = REGISTRY_PATH.read_text()
    note = 'notes_file = "NOTES.md"\n'
    assert note in old
    with pytest.raises(RegistryError, match=r"course.notes_file.*must be in course.submit_files"):
        load_registry(write_variant(tmp_path, note, 'notes_file = "NOTE.txt"\n'))
    start = old.index('integrity_policy = """')
    end = old.index('"""\n', start + 25) + 4
    with pytest.raises(RegistryError, match=r"course.notes_file.*the integrity policy must name `NOTES.md`"):
        load_registry(write_variant(tmp_path, old[start:end], 'integrity_policy = "Be honest."\n'))
    assert load_registry(write_variant(tmp_path, note, "")).notes_file is None  # a course without the note


def test_the_student_edition_keeps_the_objectives_hours_and_policy(tmp_path):
    student_edition = edition_writer()

    instructor = load_registry()
    (tmp_path / "tasks.toml").write_text(student_edition(REGISTRY_PATH.read_text()))
    student = load_registry(tmp_path / "tasks.toml")
    assert student.integrity_policy == instructor.integrity_policy
    assert [(t.objectives, t.estimated_hours) for t in student.tasks] == [
        (t.objectives, t.estimated_hours) for t in instructor.tasks
    ]


def test_the_student_edition_is_the_registry_less_exactly_the_instructor_parts(tmp_path):
    import tomllib

    student_edition = edition_writer()
    text = REGISTRY_PATH.read_text()
    expected = tomllib.loads(text)
    # What stays with the instructor, removed by hand here (not by the module's own helper): the hidden tables,
    # the proof's rubric, the seeds' salt, and every reasoning.
    del expected["hidden_seed"], expected["theory"]["rubric"]
    for task in expected["task"]:
        del task["hidden"]
        task["grading"].pop("reasoning")
        task["grading"].pop("open_reasoning", None)
        for rule in task.get("timing", []):
            rule.pop("reasoning")
            rule.pop("open_reasoning", None)
    expected["course"]["edition"] = "student"
    edition = student_edition(text)
    assert edition.startswith(
        "# The assignment registry, student edition (generated by `make release`; do not edit).\n"
    )
    assert tomllib.loads(edition) == expected

    def keys(value):
        if isinstance(value, dict):
            return set(value) | {k for item in value.values() for k in keys(item)}
        return {k for item in value for k in keys(item)} if isinstance(value, list) else set()

    assert not keys(expected) & {"reasoning", "open_reasoning", "hidden", "rubric", "hidden_seed"}
    # The multi-line strings come through whole, and the edition loads as one.
    (tmp_path / "tasks.toml").write_text(edition)
    student = load_registry(tmp_path / "tasks.toml")
    assert student.edition == "student" and student.integrity_policy == load_registry().integrity_policy
    assert '"""' in edition and [t.hint for t in student.tasks] == [t.hint for t in load_registry().tasks]
    # A registry that already says which edition it is gets one edition field, the student's.
    marked = text.replace("[course]\n", '[course]\nedition = "instructor"\n', 1)
    assert tomllib.loads(student_edition(marked)) == expected


@pytest.mark.parametrize(
    "old, new, error",
    [
        ('before = "t6"', 'before = "t99"', r"chapter\[2\]\.before'.*'t99' is not a task id"),
        ('anchor = "model"', 'anchor = "t6"', r"chapter\[2\]\.anchor'.*taken"),
        ('anchor = "model"', 'anchor = "getting-started"', r"chapter\[2\]\.anchor'.*taken"),
        ('text = "model.md"', 'text = "model.md"\npage = 3', "unknown field 'page'"),
    ],
)
def test_a_handout_chapter_names_a_task_to_precede_and_an_anchor_of_its_own(tmp_path, old, new, error):
    with pytest.raises(RegistryError, match=error):
        load_registry(write_variant(tmp_path, old, new))


def test_the_handout_chapters_keep_their_order_and_place():
    chapters = load_registry().chapters
    assert [(c.anchor, c.before) for c in chapters][:3] == [
        ("prerequisites", "t1"),
        ("getting-started", "t1"),
        ("model", "t6"),
    ]
    assert all(c.before is None for c in chapters[3:]) and len({c.anchor for c in chapters}) == len(chapters)
