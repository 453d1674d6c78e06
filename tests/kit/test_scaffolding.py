"""Scaffolding levels: guided and open starters from the same solution files, the grader's splice at either level,
the open rubric, and the open-level fixtures the rubric was calibrated on."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from assignment.cuda import regions
from assignment.markers import (
    BEGIN_OPEN,
    BEGIN_SOLUTION,
    END_OPEN,
    END_SOLUTION,
    PLAN,
    MarkerError,
    apply_levels,
)
from assignment.registry import REGISTRY_PATH, RegistryError, load_registry, parse_registry
from assignment.todos import todo_counts
from grader.authoring.starter import main, render_starter, solution_lines
from grader.tools import open_levels

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]


def registry_with(**levels: str):
    data = tomllib.loads(REGISTRY_PATH.read_text(encoding="utf-8"))
    for raw in data["task"]:
        if raw["id"] in levels:
            raw["scaffolding"] = levels[raw["id"]]
    return parse_registry(data, REGISTRY_PATH)


def test_registry_validates_the_level_and_the_open_rubric():
    assert {t.id: t.scaffolding for t in load_registry().tasks}["t3"] in ("guided", "open")
    with pytest.raises(RegistryError, match=r"t3.*scaffolding.*must be one of"):
        registry_with(t3="closed")
    with pytest.raises(RegistryError, match=r"t2.*timing\[0\]\.open.*is missing"):
        registry_with(t2="open")
    data = tomllib.loads(REGISTRY_PATH.read_text(encoding="utf-8"))
    t3 = next(raw for raw in data["task"] if raw["id"] == "t3")
    t3["timing"][0]["open"]["thresholds"] = [{"at": 1.5, "points": 4}]
    with pytest.raises(RegistryError, match=r"open\.thresholds.*same maximum"):
        parse_registry(data, REGISTRY_PATH)


def test_an_open_task_scores_time_with_its_open_thresholds():
    guided, opened = registry_with(t3="guided").task("t3"), registry_with(t3="open").task("t3")
    assert guided.timing[0].thresholds != opened.timing[0].thresholds
    assert opened.timing[0].max_points == guided.timing[0].max_points
    # the calibration's kernels (grader/records/open_t3_h100.txt): full points for a register-blocked shared
    # kernel without double buffering, something for the two simpler designs, nothing for a slower one
    points = [opened.timing[0].points_for(r) for r in (1.097, 1.234, 5.80, 10.30, 20.0)]
    assert points[0] == points[1] == opened.timing[0].max_points and points[1] > points[2] > points[3] > points[4] == 0
    assert "open_levels --calibrate" in opened.timing[0].reasoning


def test_t8s_levels_place_the_calibration_kernels():
    guided, opened = registry_with(t8="guided").task("t8"), registry_with(t8="open").task("t8")
    # grader/records/open_t8_h100.txt, each kernel's slowest run: P through shared memory, no cp.async pipeline, plain
    # loads instead of ldmatrix, unswizzled ldmatrix, WMMA; then a kernel slower than all of them
    bf16 = (1.068, 1.159, 1.519, 4.048, 17.27, 25.0)
    assert [opened.timing[0].points_for(r) for r in bf16] == [5, 5, 4, 2.5, 1, 0]
    assert [guided.timing[0].points_for(r) for r in bf16] == [5, 4, 2.5, 1, 0, 0]
    causal = (1.160, 1.116, 1.185, 2.976, 16.22, 25.0)
    assert [opened.timing[1].points_for(r) for r in causal] == [5, 5, 5, 2.5, 1, 0]
    assert [guided.timing[1].points_for(r) for r in causal] == [5, 5, 5, 1, 0, 0]
    assert all("open_levels --calibrate" in rule.reasoning for rule in opened.timing)
    # the causal-schedule kernels (the same file, H200): short query tiles first, the mask on every tile; each alone
    # keeps full points at both levels, in both rules
    schedule = {"bf16": (0.999, 1.068), "causal": (1.090, 1.167)}
    for rule, key in zip(guided.timing, schedule):
        assert [rule.points_for(r) for r in schedule[key]] == [5, 5]
    for rule, key in zip(opened.timing, schedule):
        assert [rule.points_for(r) for r in schedule[key]] == [5, 5]


def test_t4s_and_t6s_open_levels_place_the_calibration_kernels():
    # grader/records/open_t4_t6.txt, each design's slowest run on either GPU (H200, H100); then one slower than all
    t4 = registry_with(t4="open").task("t4")
    speedup, time = t4.timing
    # the reference, no K/V pipeline, no swizzle, one warp per row, no register blocking, a scalar loop's 10x slower
    assert [speedup.points_for(r) for r in (1.311, 1.296, 1.021, 0.344, 0.249, 0.1)] == [4, 4, 3, 2, 1, 0]
    assert [time.points_for(r) for r in (1.000, 1.022, 1.284, 3.815, 5.258, 12.0)] == [6, 6, 4.5, 3, 1.5, 0]
    guided = registry_with(t4="guided").task("t4")  # where the tiling is given, the same designs earn less
    assert [guided.timing[0].points_for(r) for r in (1.021, 0.344, 0.249)] == [2, 0, 0]
    t6 = registry_with(t6="open").task("t6")
    kernel, model = t6.timing
    # the reference, one warp per head, no K/V pipeline, no split-K (slower than naive PyTorch)
    assert [kernel.points_for(r) for r in (1.008, 1.029, 1.100, 20.88)] == [4, 4, 4, 0]
    # the model's decode step through each design's kernel, as graded at the open level: the matrix-vector products
    # dominate, so every design keeps this rule's points and the guided levels stand
    assert [model.points_for(r) for r in (14.50, 14.15, 12.45)] == [4, 4, 4]
    assert model.thresholds == registry_with(t6="guided").task("t6").timing[1].thresholds
    for rule in (*t4.timing, *t6.timing):
        assert "open_t4_t6.txt" in rule.reasoning and "PROVISIONAL" not in rule.reasoning, rule.name


def test_a_task_set_open_without_open_blocks_is_refused():
    with pytest.raises(
        MarkerError, match="t2: set to the open scaffolding level, but no solution file has a BEGIN OPEN"
    ):
        render_starter(REPO / "solutions", load_registry(), levels={"t2": "open"})


def test_make_starter_will_not_overwrite_the_registrys_starter_with_another_level(capsys):
    assert main(["--level", "open"]) == 2
    assert "starter/ holds the levels the registry chooses" in capsys.readouterr().err


@pytest.fixture(scope="module")
def open_starter(tmp_path_factory):
    folder = tmp_path_factory.mktemp("open") / "starter"
    assert main(["--level", "open", "--starter", str(folder)]) == 0
    return folder


# Each task with an OPEN block: its file, and a line of the reference's design notes (guided-level text).
OPEN_FILES = {
    "t3": ("t3_gemm.cu", "Design (read this first)"),
    "t4": ("t4_flash_attention.cu", "Thread -> data mapping."),
    "t6": ("t6_decode_attention.cu", "Why this layout and not"),
    "t8": ("t8_flash_attention_tc.cu", "Why these sizes."),
}
OPEN_FIXTURES = {
    "t3": {"no_double_buffer", "shared_register_blocking_scalar", "no_shared_memory", "shared_no_register_blocking"},
    "t4": {"no_kv_pipeline", "no_swizzle", "one_warp_per_row", "no_register_blocking"},
    "t6": {"no_kv_pipeline", "one_warp_per_head", "no_split"},
    "t8": {
        "wmma_unswizzled_p_in_shared",
        "mma_without_ldmatrix",
        "no_cp_async_pipeline",
        "p_through_shared_memory",
        "no_swizzle",
        "causal_short_tiles_first",
        "causal_mask_every_tile",
    },
}


@pytest.mark.parametrize("task", sorted(OPEN_FILES))
def test_the_open_starter_has_one_region_and_no_solution_code(open_starter, task):
    name, design_notes = OPEN_FILES[task]
    text = (open_starter / name).read_text()
    guided = (REPO / "starter" / name).read_text()
    others = {t: n for t, n in todo_counts(guided, name).items() if t != task}  # t5's regions in t4's file
    assert todo_counts(text, name) == {task: 1, **others}
    assert [r.task for r in regions.student_regions(text, name)].count(task) == 1
    levels = open_levels.open_levels(load_registry())
    solution = (REPO / "solutions" / name).read_text()
    written = solution_lines(solution, name, levels)
    # A line the kit gives anyway (t6's combine kernel merges as the split kernel's body does) is no leak.
    numbers = {n for n, _ in written}
    given = {line for n, line in enumerate(apply_levels(solution, name, levels).splitlines(), 1) if n not in numbers}
    leaked = [line for _, line in written if len(line.strip()) >= 30 and line in text.splitlines()]
    leaked = [line for line in leaked if line not in given]
    assert not leaked, f"solution lines of the open region are in the open starter: {leaked[:3]}"
    assert design_notes not in text, "the reference's design notes are guided-level text"
    assert todo_counts(guided, name)[task] > 1 and design_notes in guided


T5_FUNCTIONS = ("causal_key_tiles", "causal_tile_needs_mask", "causal_key_hidden")


def test_t5s_regions_are_functions_outside_the_open_t4_body_and_alike_at_both_levels(open_starter):
    name = "t4_flash_attention.cu"
    opened, guided = (open_starter / name).read_text(), (REPO / "starter" / name).read_text()
    t5 = [
        [(r.description, r.body) for r in regions.student_regions(text, name) if r.task == "t5"]
        for text in (opened, guided)
    ]
    assert len(t5[0]) == len(T5_FUNCTIONS) and t5[0] == t5[1], "t5's regions are the same functions at both levels"
    assert [r.task for r in regions.student_regions(opened, name)] == ["t5"] * len(T5_FUNCTIONS) + ["t4"]
    for function in T5_FUNCTIONS:
        assert re.search(rf"^__device__ __forceinline__ \w+ {function}\(", opened, re.MULTILINE), function


def test_t5s_plans_state_the_rule_not_the_expression():
    # each of t5's functions is one return line: a plan that spelled its expression would leave nothing to decide
    name = "t4_flash_attention.cu"
    starter = (REPO / "starter" / name).read_text()
    plans = "\n".join("".join(r.body) for r in regions.student_regions(starter, name) if r.task == "t5")
    solution = (REPO / "solutions" / name).read_text()
    answers = [line.strip().removeprefix("return ").rstrip(";") for _, line in solution_lines(solution, name, {})]
    answers = [a for a in answers if a.startswith(("min(", "last", "key", "kv0")) or " ? " in a or " > " in a]
    assert len(answers) >= len(T5_FUNCTIONS), answers
    compact = re.sub(r"\s+", "", plans)
    for answer in answers:
        for piece in re.split(r"\?|:", answer):
            piece = re.sub(r"\s+", "", piece)
            assert len(piece) < 8 or piece not in compact, f"t5's plan spells out the answer: {answer!r}"


def test_every_open_t4_body_takes_its_causal_decisions_from_t5s_functions():
    registry = load_registry()
    levels = open_levels.open_levels(registry)
    bodies = {"reference": open_levels.reference_body("t4_flash_attention.cu", "t4", levels)}
    bodies |= {f.name: f.body for f in open_levels.fixtures(registry, "t4")}
    for name, body in bodies.items():
        code = "\n".join(line.split("//")[0] for line in body.splitlines())
        missing = [function for function in T5_FUNCTIONS if function + "(" not in code]
        assert not missing, f"{name}: the open t4 body must call t5's {missing}"
    guided = apply_levels(
        (REPO / "solutions" / "t4_flash_attention.cu").read_text(),
        "t4_flash_attention.cu",
        levels={"t4": "guided", "t5": "guided"},
    )
    kernel = guided[guided.index("flash_fwd_kernel(const float*") :]
    assert all(function + "(" in kernel for function in T5_FUNCTIONS), "the guided kernel calls them too"


def test_the_open_t6_cache_keeps_its_regions_with_goals_instead_of_plans(open_starter):
    name = "t6_kv_cache.py"
    opened, guided = (open_starter / name).read_text(), (REPO / "starter" / name).read_text()
    assert todo_counts(opened, name) == todo_counts(guided, name) == {"t6": 2}, (
        "the cache is the student's at both levels"
    )
    assert "index_copy_" in guided and "index_copy_" not in opened, "the guided plans name the calls; the goals do not"
    levels = open_levels.open_levels(load_registry())
    leaked = [
        line for _, line in solution_lines((REPO / "solutions" / name).read_text(), name, levels) if line in opened
    ]
    assert not [line for line in leaked if len(line.strip()) >= 30], leaked[:3]
    kernel = (open_starter / "t6_decode_attention.cu").read_text()
    assert "decode_combine_kernel" in kernel and "KIT_TODO" in kernel.split("decode_combine_kernel(const")[0]


def test_an_open_fixture_is_handed_in_with_the_other_tasks_regions_solved():
    registry = load_registry()
    levels = open_levels.open_levels(registry)
    fixture = next(f for f in open_levels.fixtures(registry, "t4") if f.name == "no_register_blocking")
    text = open_levels.student_text(fixture.file, "t4", fixture.body, levels)
    found = regions.student_regions(text, fixture.file)
    assert [r.task for r in found].count("t5") == len(T5_FUNCTIONS)
    assert "return kv0 + bc - 1 > q0 + Lk - Lq;\n" in "".join(found[1].body), "t5's regions hold the reference's code"
    assert fixture.body in text and todo_counts(text, fixture.file) == {}


def test_a_written_fixture_is_a_whole_submission_of_its_task(tmp_path, capsys):
    # t6's model rule needs the student's cache beside the kernel: each folder holds every file of the task, the
    # fixture's own file with its body and the others with the reference's, none left at a TODO
    assert open_levels.main(["--write", str(tmp_path), "--task", "t6"]) == 0
    names = {f.name for f in open_levels.fixtures(load_registry(), "t6")}
    assert {p.name for p in tmp_path.iterdir()} == names
    for folder in tmp_path.iterdir():
        assert sorted(p.name for p in folder.iterdir()) == ["t6_decode_attention.cu", "t6_kv_cache.py"]
        for path in folder.iterdir():
            assert todo_counts(path.read_text(), path.name) == {}, path
    assert "t6_kv_cache.py" in capsys.readouterr().out


def test_the_calibration_says_which_rule_it_cannot_time():
    row = {"kernel": "no_split", "values": "ok", "rules": [], "not_timed": ["time between tokens"]}
    assert "time between tokens: not timed here" in open_levels._row_line(row)
    assert "grade the fixture" in open_levels._row_line(row)


def test_the_open_t8_starter_gives_no_function_of_the_guided_design(open_starter):
    text = (open_starter / "t8_flash_attention_tc.cu").read_text()
    helpers = ("swizzle", "FragAddr", "load_tile_async", "tile_scores", "online_softmax", "tile_pv", "store_output")
    for helper in helpers:
        assert helper not in text, f"{helper}: the guided level's design is not given at the open level"
    guided = (REPO / "starter/t8_flash_attention_tc.cu").read_text()
    assert "#include <mma.h>" in text and "#include <mma.h>" not in guided, "WMMA is offered at the open level"


@pytest.mark.parametrize("task", sorted(OPEN_FILES))
def test_the_open_starter_fails_cleanly(open_starter, task):
    from assignment.cuda.compiler import require_implemented

    name, _ = OPEN_FILES[task]
    with pytest.raises(NotImplementedError, match=rf"^{task}: TODO\({task}\) in {name} is not implemented yet"):
        require_implemented(open_starter / name, (task,))


@pytest.mark.parametrize("task", sorted(OPEN_FILES))
def test_the_grader_splices_at_the_open_level(open_starter, monkeypatch, task):
    name, _ = OPEN_FILES[task]
    levels = open_levels.open_levels(load_registry())
    monkeypatch.setattr("assignment.markers.task_levels", lambda registry=None: dict(levels))
    kit = (REPO / "solutions" / name).read_text()
    assert regions.splice(kit, kit, (task,), filename=name).text == apply_levels(kit, name, levels)
    spliced = regions.splice(kit, (open_starter / name).read_text(), (task,), filename=name)
    assert f"KIT_TODO({task});" in spliced.text and not spliced.ignored_outside
    guided_student = (REPO / "starter" / name).read_text()
    with pytest.raises(regions.RegionError, match="TODO regions do not match the starter's"):
        regions.splice(kit, guided_student, (task,), filename=name)


def test_the_open_fixtures_are_valid_region_bodies_for_the_open_starter():
    registry = load_registry()
    levels = open_levels.open_levels(registry)
    found = open_levels.fixtures(registry)
    for task, names in OPEN_FIXTURES.items():
        assert {f.name for f in found if f.task == task} >= names, task
    for fixture in (f for f in found if f.file.endswith(".cu")):
        text = open_levels.student_text(fixture.file, fixture.task, fixture.body, levels)
        assert todo_counts(text, fixture.file) == {}, fixture.name
        problems = regions.check_file(text, (fixture.task,), fixture.file)
        assert not problems, f"{fixture.name}: {problems[:3]}"


def test_a_toml_fixture_is_the_reference_body_with_its_changes(tmp_path, monkeypatch):
    registry = load_registry()
    reference = open_levels.reference_body("t8_flash_attention_tc.cu", "t8", open_levels.open_levels(registry))
    mask = next(f for f in open_levels.fixtures(registry, "t8") if f.name == "causal_mask_every_tile")
    assert mask.body.startswith("    // An honest open-level t8 kernel") and mask.body.endswith(reference[-200:])
    assert "if (kv0 + BC > Lk" in reference and "if (kv0 + BC > Lk" not in mask.body
    assert "every tile tested against the mask" in mask.body
    stale = tmp_path / "t8_flash_attention_tc.stale.toml"
    stale.write_text('note = "x"\nreplace = [["a line the reference no longer has", "y"]]\n')
    monkeypatch.setattr(open_levels, "FIXTURES", tmp_path)
    with pytest.raises(ValueError, match=r"stale\.toml.*stands 0 times in the reference's open body"):
        open_levels.fixtures(registry, "t8")


def _open_sources(open_starter) -> dict[str, tuple[str, str]]:
    """Name -> (file, text): each task's open starter, its reference's open body and every fixture, as a student
    at the open level would hand them in."""
    registry = load_registry()
    levels = open_levels.open_levels(registry)
    sources = {}
    for task, (name, _) in OPEN_FILES.items():
        sources[f"{task}_starter"] = (name, (open_starter / name).read_text())
        body = open_levels.reference_body(name, task, levels)
        sources[f"{task}_reference"] = (name, open_levels.student_text(name, task, body, levels))
    for f in (f for f in open_levels.fixtures(registry) if f.file.endswith(".cu")):
        sources[f.name] = (f.file, open_levels.student_text(f.file, f.task, f.body, levels))
    return sources


@pytest.mark.slow  # every open-level file through nvcc, twice: 45 s on a 2-core machine (make test-slow)
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: the open-level files cannot be compiled")
def test_the_open_starter_and_fixtures_compile(open_starter, tmp_path):
    # The kit's device-module command (device code only), one nvcc per core, as make check-cuda runs them.
    from concurrent.futures import ThreadPoolExecutor

    from assignment.cuda import compiler

    def build(name: str, text: str) -> tuple[str, subprocess.CompletedProcess]:
        path = tmp_path / f"{name}.cu"
        path.write_text(text)
        output, include = str(tmp_path / f"{name}.cubin"), str(compiler.INCLUDE_DIR)
        command = compiler.module_command(str(path), output, "sm_90", include, compiler.module_flags())
        return name, subprocess.run(command, capture_output=True, text=True)

    sources = _open_sources(open_starter)
    with ThreadPoolExecutor(max_workers=max(1, min(len(sources), os.cpu_count() or 1))) as pool:
        results = list(pool.map(lambda item: build(item[0], item[1][1]), sources.items()))
    for name, result in results:
        assert result.returncode == 0, f"{name} does not compile:\n{result.stderr[-1500:]}"
    assert len(results) == len(sources) >= 20


def test_the_handout_lists_the_open_todo_when_the_task_is_open():
    from handout.api import file_api

    registry = registry_with(t3="open")
    open_todos = file_api("t3_gemm.cu", registry.task("t3"), registry).todos
    guided_todos = file_api("t3_gemm.cu", load_registry().task("t3"), load_registry()).todos
    assert len(open_todos) == 1 and len(guided_todos) > 1


def test_the_handout_says_when_a_task_is_open(tmp_path):
    from handout.render import render_html

    html = render_html(registry_with(t3="open"))
    section = html[html.index('id="t3"') : html.index('id="t4"')]
    assert "set at the <strong>open</strong> level" in section and section.count("TODO(t3)") >= 1
    assert "set at the <strong>open</strong> level" not in html[html.index('id="t2"') : html.index('id="t3"')]


# --------------------------------------------------------------------------- the Python tasks' open levels

# Each Python task with OPEN blocks: its file and its stubs (one per function body, at both levels).
PY_OPEN = {"t1": ("t1_attention.py", 2), "t7": ("t7_generate.py", 7)}
PY_FIXTURES = {
    "t1": {"two_pass", "merged_tile_softmax", "blocks_concatenated"},
    "t7": {"row_by_row", "incremental_stream"},
}
_LEVEL_MARKERS = (BEGIN_OPEN, END_OPEN, BEGIN_SOLUTION, END_SOLUTION, PLAN)


def open_goals(solution: str) -> list[str]:
    """The OPEN blocks' own PLAN lines (outside their regions): the open level's text, stripped of the marker."""
    goals, in_open, in_region = [], False, False
    for line in solution.splitlines():
        in_open = (in_open or bool(BEGIN_OPEN.match(line))) and not END_OPEN.match(line)
        in_region = (in_region or bool(BEGIN_SOLUTION.match(line))) and not END_SOLUTION.match(line)
        if in_open and not in_region and PLAN.match(line):
            goals.append(line.split("PLAN:", 1)[1].strip())
    return goals


@pytest.mark.parametrize("task", sorted(PY_OPEN))
def test_the_python_open_starter_states_goals_not_steps(open_starter, task):
    name, stubs = PY_OPEN[task]
    text, guided = (open_starter / name).read_text(), (REPO / "starter" / name).read_text()
    assert todo_counts(text, name) == {task: stubs} == todo_counts(guided, name)
    solution = (REPO / "solutions" / name).read_text()
    goals = open_goals(solution)
    plans = {line.strip() for line in guided.splitlines() if PLAN.match(line)}
    assert goals and all(f"PLAN: {goal}" in text for goal in goals), (
        "each OPEN block's own PLAN line is the open stub's text"
    )
    assert not plans & {line.strip() for line in text.splitlines()}, "the guided plan's steps are not at the open level"
    assert not [g for g in goals if len(g) >= 30 and g in guided], "the goals are the open level's text only"
    levels = open_levels.open_levels(load_registry())
    leaked = [
        line
        for _, line in solution_lines(solution, name, levels)
        if len(line.strip()) >= 30 and line in text.splitlines()
    ]
    assert not leaked, f"solution lines of the open regions are in the open starter: {leaked[:3]}"


@pytest.mark.parametrize("task", sorted(PY_OPEN))
def test_the_python_open_starter_filled_with_the_reference_is_the_solution(task):
    # So the open level passes wherever the solutions do: filled with the reference's bodies, the open starter is
    # the solution file less its markers, plans and goals.
    name, _ = PY_OPEN[task]
    levels = open_levels.open_levels(load_registry())
    solution = (REPO / "solutions" / name).read_text()
    unmarked = "".join(
        line for line in solution.splitlines(keepends=True) if not any(m.match(line) for m in _LEVEL_MARKERS)
    )
    assert open_levels.student_text(name, task, "", levels) == unmarked


def test_the_python_open_starters_fail_every_public_test_at_a_todo(open_starter, tmp_path):
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("IMPL", "PYTHONPATH")}
    files = [str(p) for task in sorted(PY_OPEN) for p in sorted((REPO / "tests").glob(f"test_{task}_*.py"))]
    command = [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "--json-report"]
    subprocess.run(
        [*command, f"--json-report-file={report}"],
        cwd=REPO,
        env={**env, "IMPL": str(open_starter)},
        capture_output=True,
        timeout=900,
    )
    tests = json.loads(report.read_text())["tests"]
    assert len(tests) > 50 and all(t["outcome"] == "failed" for t in tests), [
        t["nodeid"] for t in tests if t["outcome"] != "failed"
    ]
    unclean = [t["nodeid"] for t in tests if "NotImplementedError" not in json.dumps(t)]
    assert not unclean, f"public tests that fail without the open stub's NotImplementedError: {unclean[:3]}"


def _fixture_module(fixture, tmp_path):
    levels = open_levels.open_levels(load_registry())
    path = tmp_path / fixture.name / fixture.file
    path.parent.mkdir()
    path.write_text(open_levels.student_text(fixture.file, fixture.task, fixture.body, levels))
    spec = importlib.util.spec_from_file_location(f"open_fixture_{fixture.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def test_the_python_open_fixtures_are_correct_submissions_within_the_rules(tmp_path):
    from assignment.policy import Rules, check_file
    from assignment.testing import random_qkv, reference_attention

    registry = load_registry()
    found = [f for f in open_levels.fixtures(registry) if f.file.endswith(".py")]
    for task, names in PY_FIXTURES.items():
        assert {f.name for f in found if f.task == task} >= names, task
    solution = importlib.util.spec_from_file_location("open_t7_solution", REPO / "solutions" / "t7_generate.py")
    reference_t7 = importlib.util.module_from_spec(solution)
    solution.loader.exec_module(reference_t7)
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(3)) * 2
    logits[0, :4] = 1.5  # ties at the k-th value
    history = torch.randint(0, 50, (6, 9), generator=torch.Generator().manual_seed(4))
    for fixture in found:
        path, module = _fixture_module(fixture, tmp_path)
        task = registry.task(fixture.task)
        assert todo_counts(path.read_text(), fixture.file) == {}, fixture.name
        assert not check_file(path, Rules(task.id, task.rules.imports, task.rules.forbidden)), fixture.name
        if fixture.task == "t1":  # the awkward case: Lq > Lk causal (rows that see nothing), blocks not dividing L
            q, k, v = random_qkv(2, 2, 37, 23, 8, seed=5)
            out, lse = module.flash_attention_forward(q, k, v, causal=True, block_q=8, block_k=5)
            expected, expected_lse = reference_attention(q, k, v, causal=True)
            torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5, msg=fixture.name)
            torch.testing.assert_close(lse.double(), expected_lse, atol=1e-5, rtol=1e-5, msg=fixture.name)
            naive = module.naive_attention(q, k, v, causal=True)
            torch.testing.assert_close(naive.double(), expected, atol=1e-5, rtol=1e-5, msg=fixture.name)
        else:
            for function, *args in (
                ("top_k_filter", 4),
                ("top_p_filter", 0.7),
                ("apply_repetition_penalty", history, 1.3),
            ):
                got = getattr(module, function)(logits, *args)
                assert torch.equal(got, getattr(reference_t7, function)(logits, *args)), (fixture.name, function)


def test_a_python_fixture_fills_only_the_functions_it_defines():
    levels = open_levels.open_levels(load_registry())
    body = "def naive_attention(q, k, v, causal=False, scale=None):\n    return q * 0\n"
    text = open_levels.student_text("t1_attention.py", "t1", body, levels)
    assert "    return q * 0\n" in text and "for q0 in range(0, lq, block_q):" in text
    assert "TODO" not in text and "PLAN" not in text and "BEGIN" not in text
    with pytest.raises(ValueError, match="the fixture defines causal_visible, which holds no open region of t1"):
        open_levels.student_text("t1_attention.py", "t1", "def causal_visible(a, b, c, d):\n    return a\n", levels)


def test_an_open_task_without_timing_rules_says_how_its_checks_were_calibrated():
    for task in PY_OPEN:
        opened = registry_with(**{task: "open"}).task(task)
        assert opened.scaffolding == "open" and not opened.timing
        assert "open_levels --calibrate" in opened.grading.open_reasoning
    data = tomllib.loads(REGISTRY_PATH.read_text(encoding="utf-8"))
    t1 = next(raw for raw in data["task"] if raw["id"] == "t1")
    del t1["grading"]["open_reasoning"]
    parse_registry(data, REGISTRY_PATH)  # guided: nothing to say
    t1["scaffolding"] = "open"
    with pytest.raises(RegistryError, match=r"t1.*grading\.open_reasoning.*is missing"):
        parse_registry(data, REGISTRY_PATH)


def test_the_handout_says_what_is_open_in_a_python_task():
    from handout.render import render_html

    html = render_html(registry_with(t1="open"))
    section = html[html.index('id="t1"') : html.index('id="t2"')]
    assert "set at the <strong>open</strong> level" in section and "each function's body is yours" in section
    assert "launch" not in section[section.index("set at the") :][:300]


def test_the_guided_plans_of_the_python_tasks_teach_instead_of_naming_calls():
    from grader.tools import student_share

    registry = load_registry()
    for task, (name, _) in PY_OPEN.items():
        guided, opened = (student_share.measure(task, level, registry) for level in ("guided", "open"))
        tree = ast.parse((REPO / "solutions" / name).read_text())
        own = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)} | {"ValueError"}
        # a plan may name the file's own functions (they are its interface) and the math of an invariant
        dictated = set(guided.named_by_plan) - own - {"exp", "log"}
        assert not dictated, f"{task}'s guided plan names library calls: {sorted(dictated)}"
        assert guided.steps > 0 and opened.steps == 0, "steps at the guided level, goals alone at the open level"
        assert guided.student_lines == opened.student_lines > 0 and guided.calls == opened.calls


def test_the_share_counts_a_call_a_plan_names(tmp_path):
    from grader.tools import student_share

    registry = load_registry()
    for path in (REPO / "solutions").iterdir():
        if path.is_file():
            shutil.copy(path, tmp_path / path.name)
    text = (tmp_path / "t1_attention.py").read_text()
    marker = "    # BEGIN SOLUTION t1: naive attention\n"
    (tmp_path / "t1_attention.py").write_text(text.replace(marker, marker + "    # PLAN: mask with torch.where\n"))
    before = student_share.measure("t1", "guided", registry)
    after = student_share.measure("t1", "guided", registry, tmp_path)
    assert "where" in after.named_by_plan and "where" not in before.named_by_plan
    assert after.plan_lines == before.plan_lines + 1 and after.decided == before.decided - 1
