"""The marker syntax of solution files (assignment/markers.py): five words, one begin/end pair per kind of block,
read at each scaffolding level; and the solution files keep to it, so a newcomer reads one top to bottom."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from assignment.cuda import regions
from assignment.markers import (
    BEGIN_ONLY,
    BEGIN_OPEN,
    END_ONLY,
    END_OPEN,
    MarkerError,
    apply_levels,
    only_block,
    strip_solutions,
)

pytestmark = pytest.mark.kit
SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"

SOURCE = """// header
// BEGIN ONLY t3 guided
// the reference's design notes
// END ONLY
__device__ void helper(float* x) {
  // BEGIN SOLUTION t3: the helper's body
  // PLAN: double it
  x[0] *= 2.0f;
  // END SOLUTION
}
__global__ void kernel(float* x) {
  // BEGIN OPEN t3: the whole kernel
  // PLAN: write x[0] = 4 * x[0] once
  float y = 0.0f;
  // BEGIN SOLUTION t3: the kernel's step
  // PLAN: call the helper twice
  helper(x);
  helper(x);
  // END SOLUTION
  y = x[0];
  // END OPEN
}
"""


# The t8 shape: the guided level's design in functions of its own (an ONLY guided block at the top level), the kernel
# body calling them at the guided level and written inline at the open level (a region cannot define functions).
TWO_BODIES = """// header
// BEGIN ONLY t8 reference
// why the body is here twice
// END ONLY
// BEGIN ONLY t8 guided
__device__ float twice(float x) {
  // BEGIN SOLUTION t8: the helper
  return 2.0f * x;
  // END SOLUTION
}
// END ONLY
// BEGIN ONLY t8 open
// the open level's note
// END ONLY
__global__ void kernel(float* x) {
  int given = 0;
  // BEGIN OPEN t8: the kernel body
  // PLAN: x[0] = 4 * x[0]
  // BEGIN ONLY t8 guided
  x[0] = twice(twice(x[0]));
  // END ONLY
  // BEGIN ONLY t8 open
  x[0] *= 4.0f;
  // END ONLY
  // END OPEN
}
"""


def test_guided_level_drops_the_open_and_only_markers_and_keeps_the_plans():
    text, found = strip_solutions(SOURCE, "t3_gemm.cu", levels={"t3": "guided"})
    assert "OPEN" not in text and "ONLY" not in text, "no level marker reaches a starter"
    assert "the reference's design notes" in text, "guided text is kept at the guided level"
    assert text.count("KIT_TODO(t3);") == 2 and "// PLAN: call the helper twice" in text
    assert "x[0] = 4 * x[0]" not in text, "the OPEN block's own plan is the open level's text only"
    assert "float y = 0.0f;" in text and "y = x[0];" in text, "code of the OPEN block outside its regions is given"
    assert [r.description for r in found] == ["the helper's body", "the kernel's step"]


def test_open_level_makes_one_stub_per_open_block_and_gives_the_rest():
    text, found = strip_solutions(SOURCE, "t3_gemm.cu", levels={"t3": "open"})
    assert [r.description for r in found] == ["the whole kernel"]
    assert text.count("KIT_TODO(t3);") == 1 and "// TODO(t3): the whole kernel" in text
    assert "// PLAN: write x[0] = 4 * x[0] once" in text, "the OPEN block's own PLAN lines are the open stub's plan"
    assert "call the helper twice" not in text and "float y" not in text, "the OPEN block's body must not leak"
    assert "x[0] *= 2.0f;" in text and "the helper's body" not in text, "a region outside the OPEN block is given"
    assert "design notes" not in text, "ONLY guided text is dropped at the open level"


def test_levelling_is_a_fixed_point_and_a_file_without_open_blocks_is_unchanged():
    once = apply_levels(SOURCE, "t3_gemm.cu", {"t3": "open"})
    assert apply_levels(once, "t3_gemm.cu", {"t3": "open"}) == once
    plain = "// BEGIN SOLUTION t2: x\nint a;\n// END SOLUTION\n"
    assert apply_levels(plain, "t2_softmax.cu", {"t2": "guided"}) == plain


def test_only_blocks_give_each_level_its_own_body_and_the_reference_its_own_note():
    guided = apply_levels(TWO_BODIES, "t8_x.cu", {"t8": "guided"})
    assert "x[0] = twice(twice(x[0]));" in guided and "return 2.0f * x;" in guided
    assert "x[0] *= 4.0f;" not in guided and "open level's note" not in guided
    assert "ONLY" not in guided and "OPEN" not in guided
    opened = apply_levels(TWO_BODIES, "t8_x.cu", {"t8": "open"})
    assert "twice" not in opened and "// the open level's note" in opened
    assert "here twice" not in guided + opened, "reference text is in no level's file"
    bodies = ["".join(r.body) for r in regions.solution_regions(TWO_BODIES, {"t8": "open"}, "t8_x.cu")]
    assert bodies == ["  // PLAN: x[0] = 4 * x[0]\n  x[0] *= 4.0f;\n"], "the open body is the ONLY open text"
    text, found = strip_solutions(TWO_BODIES, "t8_x.cu", levels={"t8": "open"})
    assert [r.description for r in found] == ["the kernel body"] and "x[0] *= 4.0f;" not in text
    assert "int given = 0;" in text and text.count("KIT_TODO(t8);") == 1


@pytest.mark.parametrize(
    "source, message",
    [
        (
            "// BEGIN OPEN t3: a\n// BEGIN OPEN t3: b\n// END OPEN\n// END OPEN\n",
            r"x\.cu:2: BEGIN OPEN inside the OPEN block",
        ),
        (
            "// BEGIN SOLUTION t3: a\n// BEGIN OPEN t3: b\n// END OPEN\n// END SOLUTION\n",
            r"x\.cu:2: BEGIN OPEN inside a BEGIN SOLUTION",
        ),
        (
            "// BEGIN OPEN t4: a\n// BEGIN SOLUTION t5: b\n// END SOLUTION\n// END OPEN\n",
            r"x\.cu:2: a t5 region inside the OPEN block of t4",
        ),
        ("// BEGIN OPEN t3: a\nint x;\n", r"x\.cu:1: BEGIN OPEN t3 is never closed"),
        ("// BEGIN OPEN t3: a\n// END OPEN\n// END OPEN\n", r"x\.cu:3: END OPEN without a matching BEGIN OPEN"),
        ("// BEGIN OPEN\n// END OPEN\n", r"x\.cu:1: BEGIN OPEN needs a task id"),
        ("// BEGIN OPEN t3: a\n// END OPEN\n// BEGIN ONLY t3 guided\n", r"x\.cu:3: BEGIN ONLY t3 is never closed"),
        ("// BEGIN OPEN t3: a\n// BEGIN ONLY t3 open\nint x;\n// END OPEN\n", r"x\.cu:4: a marker inside the ONLY"),
        (
            "// BEGIN OPEN t3: a\n// END OPEN\n// BEGIN ONLY t3 reference\n// BEGIN SOLUTION t3: b\n",
            r"x\.cu:4: a marker inside the ONLY reference block",
        ),
        ("// BEGIN OPEN t3: a\n// BEGIN ONLY t3 guided\n// END OPEN\n", r"x\.cu:3: an OPEN marker inside the ONLY"),
        ("// BEGIN OPEN t3: a\n// BEGIN ONLY t4 guided\n// END ONLY\n// END OPEN\n", r"x\.cu:2: an ONLY block of t4"),
        (
            "// BEGIN OPEN t3: a\n// BEGIN SOLUTION t3: b\n// BEGIN ONLY t3 open\n",
            r"x\.cu:3: BEGIN ONLY goes at the top level or directly inside an OPEN block",
        ),
        ("// BEGIN OPEN t3: a\n// END OPEN\n// BEGIN ONLY t3\n", r"x\.cu:3: BEGIN ONLY t3 needs one level"),
        ("// BEGIN OPEN t3: a\n// END OPEN\n// BEGIN ONLY t3 closed\n", r"x\.cu:3: BEGIN ONLY t3 needs one level"),
        ("// BEGIN OPEN t3: a\n// END OPEN\n// BEGIN ONLY t3 open guided\n", r"got 'open guided'"),
        ("// BEGIN OPEN t3: a\n// END OPEN\n// BEGIN ONLY guided\n", r"x\.cu:3: BEGIN ONLY needs a task id"),
        ("// BEGIN OPEN t3: a\n// END OPEN\n// END ONLY\n", r"x\.cu:3: END ONLY without a matching BEGIN ONLY"),
    ],
)
def test_malformed_level_markers_name_file_and_line(source, message):
    with pytest.raises(MarkerError, match=message):
        apply_levels(source, "x.cu", {"t3": "open", "t4": "open", "t5": "guided"})


def test_an_only_block_in_a_file_without_an_open_block_is_refused():
    source = "// BEGIN ONLY t2 guided\n// notes\n// END ONLY\n// BEGIN SOLUTION t2: x\nint a;\n// END SOLUTION\n"
    with pytest.raises(MarkerError, match=r"t2_softmax\.cu:1: an ONLY block in a file without an OPEN block"):
        strip_solutions(source, "t2_softmax.cu", levels={"t2": "guided"})


# --------------------------------------------------------------------------- the solution files

# Every comment line that reads as a marker of any spelling the kit ever had: a word in capitals opening the comment.
_MARKER_LIKE = re.compile(r"^\s*(?://|#) ?(?:(?:BEGIN|END) [A-Z]+\b|[A-Z]{4,}:)")
_MARKERS = re.compile(r"^\s*(?://|#)\s*(?:(?:BEGIN|END) (?:SOLUTION|OPEN|ONLY)\b|PLAN:|STUB:)")
_FILES = sorted(p.name for p in SOLUTIONS.iterdir() if p.suffix in (".cu", ".py"))


@pytest.mark.parametrize("name", _FILES)
def test_solution_files_speak_the_five_marker_words_only(name):
    lines = (SOLUTIONS / name).read_text(encoding="utf-8").splitlines()
    odd = [f"{name}:{n}: {line.strip()}" for n, line in enumerate(lines, 1) if _MARKER_LIKE.match(line)]
    odd = [entry for entry in odd if not _MARKERS.match(entry.split(": ", 1)[1])]
    assert not odd, (
        "a marker the syntax does not have (assignment/markers.py: BEGIN/END SOLUTION, OPEN and ONLY, PLAN, STUB); "
        f"it would reach the starter as a comment: {odd[:3]}"
    )


@pytest.mark.parametrize("name", [n for n in _FILES if n.endswith(".cu")])
def test_a_kernel_body_written_twice_says_why_at_the_top_of_its_file(name):
    lines = (SOLUTIONS / name).read_text(encoding="utf-8").splitlines()
    in_open, second_body = False, False
    for line in lines:
        in_open = (in_open or bool(BEGIN_OPEN.match(line))) and not END_OPEN.match(line)
        only = BEGIN_ONLY.match(line)
        second_body |= bool(in_open and only and only_block(only)[1] == "open")
    if not second_body:
        return  # the open level's body is the guided one with its regions filled: written once
    first = next((n for n, line in enumerate(lines) if BEGIN_ONLY.match(line)), len(lines))
    assert only_block(BEGIN_ONLY.match(lines[first]))[1] == "reference" and END_ONLY.match(lines[first + 3]), (
        f"{name}: its OPEN block holds a second kernel body (ONLY open): say why in two lines at the top of the "
        "file, in a '// BEGIN ONLY tN reference' block before every other ONLY block"
    )
