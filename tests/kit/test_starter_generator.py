"""The starter generator: stubs, plans, marker errors and the sync check."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from assignment.markers import MarkerError, strip_solutions
from assignment.registry import load_registry
from assignment.todos import todo_counts
from grader.authoring.starter import StarterError, check_starter, main, write_starter

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]

PY_SOURCE = '''def f(x):
    """Docstring stays."""
    y = 1
    # BEGIN SOLUTION t1: the sum
    # PLAN: add one
    return x + y
    # END SOLUTION
'''

CU_SOURCE = """__device__ float g(float x) {
    float y = 0.0f;
    // BEGIN SOLUTION t2: warp maximum
    // PLAN: shuffle down
    // STUB: return y;
    y = x * 2.0f;
    return y;
    // END SOLUTION
}
"""


def test_python_region_becomes_a_loud_stub():
    text, regions = strip_solutions(PY_SOURCE, "t1_attention.py", load_registry())
    assert '"""Docstring stays."""' in text
    assert "# TODO(t1): the sum" in text and "# PLAN: add one" in text
    assert "raise NotImplementedError('t1: the sum is not implemented yet (TODO(t1) in t1_attention.py)')" in text
    assert "return x + y" not in text
    assert [(r.task, r.begin_line, r.end_line) for r in regions] == [("t1", 4, 7)]
    namespace: dict = {}
    exec(compile(text, "stub", "exec"), namespace)
    with pytest.raises(NotImplementedError, match="^t1: "):
        namespace["f"](1)


def test_cuda_region_becomes_kit_todo_and_keeps_stub_lines():
    text, _ = strip_solutions(CU_SOURCE, "t2_softmax.cu", load_registry())
    assert "// TODO(t2): warp maximum" in text and "KIT_TODO(t2);" in text
    assert "    return y;\n" in text and "x * 2.0f" not in text
    assert set(todo_counts(text, "t2_softmax.cu")) == {"t2"}
    assert todo_counts(CU_SOURCE, "t2_softmax.cu") == {}
    assert todo_counts("// KIT_TODO(t3); in a comment\n", "t3_gemm.cu") == {}


@pytest.mark.parametrize(
    "source, message",
    [
        ("# BEGIN SOLUTION t1\nx = 1\n", r"x\.py:1: BEGIN SOLUTION t1 is never closed"),
        ("x = 1\n# END SOLUTION\n", r"x\.py:2: END SOLUTION without a matching BEGIN"),
        (
            "# BEGIN SOLUTION t1\n# BEGIN SOLUTION t1\n# END SOLUTION\n",
            r"x\.py:2: BEGIN SOLUTION inside the region "
            r"opened at x\.py:1",
        ),
        ("# BEGIN SOLUTION\n# END SOLUTION\n", r"x\.py:1: BEGIN SOLUTION needs a task id"),
        ("// BEGIN SOLUTION t1\n", r"x\.py:1: use '#' comments"),
    ],
)
def test_malformed_markers_are_rejected_with_file_and_line(source, message):
    with pytest.raises(MarkerError, match=message):
        strip_solutions(source, "x.py")


def test_region_of_a_task_that_does_not_own_the_file():
    with pytest.raises(MarkerError, match=r"t1_attention\.py:1: region of t2"):
        strip_solutions("# BEGIN SOLUTION t2\n# END SOLUTION\n", "t1_attention.py", load_registry())


def test_committed_starter_is_in_sync():
    problems = check_starter(REPO / "solutions", REPO / "starter", load_registry())
    assert not problems, "starter/ is out of sync; run `make starter`:\n" + "\n".join(problems)


def test_check_detects_hand_edits_missing_and_extra_files(tmp_path):
    starter = tmp_path / "starter"
    write_starter(REPO / "solutions", starter, load_registry())
    assert check_starter(REPO / "solutions", starter, load_registry()) == []
    stub = starter / "t1_attention.py"
    stub.write_text(stub.read_text() + "\n# a hand edit\n")
    (starter / "extra.py").write_text("x = 1\n")
    problems = "\n".join(check_starter(REPO / "solutions", starter, load_registry()))
    assert "t1_attention.py: differs" in problems and "a hand edit" in problems
    assert "extra.py: not generated" in problems
    shutil.rmtree(starter)
    assert "missing" in "\n".join(check_starter(REPO / "solutions", starter, load_registry()))


@pytest.mark.parametrize("solutions_state", ["missing", "empty"])
def test_make_starter_refuses_without_solutions_and_keeps_the_students_work(tmp_path, solutions_state, capsys):
    # A student bundle has no solutions/: `make starter` there once emptied starter/, deleting the student's work.
    solutions, starter = tmp_path / "solutions", tmp_path / "starter"
    if solutions_state == "empty":
        solutions.mkdir()
    starter.mkdir()
    work = starter / "t1_attention.py"
    work.write_text("# three evenings of my own work\n")
    with pytest.raises(StarterError, match="missing or empty"):
        write_starter(solutions, starter, load_registry())
    assert main(["--solutions", str(solutions), "--starter", str(starter)]) == 2
    assert "nothing to generate" in capsys.readouterr().err
    assert work.read_text() == "# three evenings of my own work\n", "a refused `make starter` changed a student file"


def test_make_starter_never_deletes_a_file_it_did_not_generate(tmp_path, capsys):
    starter = tmp_path / "starter"
    starter.mkdir()
    notes = starter / "my_notes.md"
    notes.write_text("keep me\n")
    assert main(["--solutions", str(REPO / "solutions"), "--starter", str(starter)]) == 0
    assert notes.read_text() == "keep me\n", "make starter deleted a file it does not generate"
    assert "left alone" in capsys.readouterr().err
    assert (starter / "t1_attention.py").is_file()


def test_check_starter_without_solutions_says_so_and_passes(tmp_path, capsys):
    assert main(["--check", "--solutions", str(tmp_path / "solutions"), "--starter", str(tmp_path / "starter")]) == 0
    assert "nothing to check" in capsys.readouterr().out
