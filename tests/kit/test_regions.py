"""Student CUDA is device code only: the region rules, read as the compiler reads the file, and the splice."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from assignment.cuda import regions, rules
from assignment.cuda.regions import Region, RegionError
from assignment.markers import apply_levels

pytestmark = [
    pytest.mark.kit,
    pytest.mark.skipif(shutil.which("g++") is None, reason="the rules read regions with the host compiler g++"),
]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
REPO = Path(__file__).resolve().parents[2]
CUDA_FILES = ["t2_softmax.cu", "t3_gemm.cu", "t4_flash_attention.cu", "t6_decode_attention.cu"]


def body(code: str, first_line: int = 2) -> Region:
    return Region("t2", "test", first_line - 1, first_line, tuple(line + "\n" for line in code.splitlines()))


def check(code: str) -> list[rules.Problem]:
    return rules.check_regions([body(code)])


@pytest.mark.parametrize(
    "code",
    [
        "x = a[i] + b;",
        "#pragma unroll\nfor (int i = 0; i < 4; ++i) { s += v[i]; }",
        "#pragma unroll 4\nfor (;;) { break; }",
        "  #  pragma unroll (8)\nfor (;;) { break; }",
        "// a comment with } and #include and asm\nx = 1;",
        "/* a block\n   comment with asm and { */ x = 2;",
        'printf("%d }\\n", x);',
        "const char c = '}';",
        "const char q = '\\'';",
        "int big = 1'000'000;",  # digit separators are not character literals
        'const char* s = "// not a comment /* nor this */ asm static";',
        'y = R"x(raw } string)x";',
        "x = a <% 1 %>;",  # digraphs are brackets, read as the compiler reads them
        "__shared__ __align__(16) float tile[64];",
        "auto f = [&](float y) { return y * 2.f; };",
        "if (threadIdx.x == 0) { __syncthreads(); }",
        "float cube = 1.f, cubic = cube;",  # names that only begin like a library's
    ],
)
def test_device_code_is_accepted(code):
    assert check(code) == []


@pytest.mark.parametrize(
    "code, why",
    [
        ("#include <cstdio>", "preprocessor"),
        ("#define N 4", "preprocessor"),
        ('/* a comment first */ #include "/etc/passwd"', "preprocessor"),  # a directive after a comment is one
        ("%:define X 1", "preprocessor"),
        ('  # 5 "kit.cuh"', "preprocessor"),  # a line marker is a directive too
        ('#pragma GCC optimize("O0")', "preprocessor"),
        ("x = a ## b;", "not allowed in code"),
        ('asm volatile("trap;");', "inline assembly"),
        ('__asm__ ("nop");', "inline assembly"),
        ("static float cache[4];", "outlives a call"),
        ("extern __shared__ float dyn[];", "declarations outside"),
        ("__device__ float g;", "new device functions"),
        ("float* p = (float*)malloc(16);", "allocation"),
        ("float* p = new float[4];", "allocation"),
        ("cudaMemcpyAsync(a, b, 4, cudaMemcpyDeviceToDevice);", "CUDA runtime"),
        ("cublasSgemm(h);", "library calls"),
        ("cub::WarpReduce<float> r;", "library code"),
        ("} int evil() { return 0; } void f() {", "closes something"),
        ("x = (a + b;", "not closed"),
        ("/* open", "not closed inside the region"),
        ('y = R"x(open', "not closed inside the region"),
        ('y = R"x(two\nlines)x";', "span lines"),
        ('const char* s = "open;', "not closed on its line"),
        ("x = 1; \\", "backslash"),
        ("x = 1; // a comment that goes on \\", "backslash"),
        ("x = 1; \\   ", "backslash"),  # gcc joins a backslash and trailing spaces to the next line too
        ("st\\u0061tic int x;", "cannot read"),
        ("int ａ = 1;", "ASCII"),
        ("int $x = 1;", "ASCII"),
        ('_Pragma("unroll")', "pragmas"),
        ("template <int N> struct S {};", "templates"),
    ],
)
def test_escapes_are_rejected(code, why):
    problems = check(code)
    assert problems and any(why in p.message for p in problems), (code, problems)


def test_problems_name_the_students_line():
    problems = rules.check_regions([body('x = 1;\ny = 2;\nasm("nop");', first_line=40)])
    assert [p.line for p in problems] == [42]
    opened = rules.check_regions([body("x = 1;\n/* left open\ny = 2;", first_line=10)])
    assert [p.line for p in opened] == [11] and "not closed" in opened[0].message


def test_a_comment_may_not_run_from_one_region_into_the_next():
    first, second = body("x = 1; /* opened here", 5), Region("t2", "b", 20, 21, ("*/ y = 2;\n",))
    problems = rules.check_regions([first, second])
    assert problems and problems[0].line == 5 and "not closed inside the region" in problems[0].message


# --------------------------------------------------------------------------- as the device compiler receives it
# (what a region expands to: tests/kit/test_region_rules.py)


@needs_nvcc
@pytest.mark.parametrize("name", CUDA_FILES)
def test_the_starter_and_the_solutions_follow_the_rules(name):
    for tree in ("starter", "solutions"):
        assert regions.check_file((REPO / tree / name).read_text(), None, name, arch="sm_80") == []


@pytest.mark.parametrize("name", CUDA_FILES)
def test_splicing_the_solutions_gives_the_kit_file_and_the_starter_gives_its_stubs(name):
    kit = (REPO / "solutions" / name).read_text()
    starter = (REPO / "starter" / name).read_text()
    levelled = apply_levels(kit, name)  # the kit's file at the registry's scaffolding levels (no OPEN/GUIDED lines)
    tasks = sorted({r.task for r in regions.solution_regions(kit)})
    for task in tasks:
        assert regions.splice(kit, kit, (task,), filename=name).text == levelled
        spliced = regions.splice(kit, starter, (task,), filename=name)
        assert f"KIT_TODO({task})" in spliced.text
        others = [t for t in tasks if t != task]
        assert all(f"KIT_TODO({t})" not in spliced.text for t in others), "other tasks keep the kit's regions"
        assert spliced.ignored_outside == []


def test_changes_outside_the_regions_are_reported_and_have_no_effect():
    kit = (REPO / "solutions" / "t3_gemm.cu").read_text()
    student = kit.replace('#include "kit.cuh"\n', '#include "kit.cuh"\n#include <cublas_v2.h>\n')
    student = student.replace(
        "return (int)dispatch_trans<128, 128, 16, 8, 8>", "return (int)dispatch_trans<64, 64, 8, 4, 4>"
    )
    spliced = regions.splice(kit, student, ("t3",), filename="t3_gemm.cu")
    assert spliced.text == apply_levels(kit, "t3_gemm.cu")
    assert len(spliced.ignored_outside) == 2


def test_a_file_without_the_starters_regions_is_rejected_with_what_to_keep():
    kit = (REPO / "solutions" / "t2_softmax.cu").read_text()
    starter = (REPO / "starter" / "t2_softmax.cu").read_text()
    broken = starter.replace("  // END TODO(t2)\n", "", 1)
    with pytest.raises(RegionError, match=r"keep the .// END TODO\(t2\). line"):
        regions.splice(kit, broken, ("t2",), filename="t2_softmax.cu")
    with pytest.raises(RegionError, match="do not match the starter"):
        regions.splice(kit, "int main() {}\n", ("t2",), filename="t2_softmax.cu")


def test_solution_markers_in_a_students_file_are_a_region_error_naming_the_line():
    # A student who copies the reference's marker style into a note: a clear error on that line, never a crash of
    # the grader (whose prepare reports RegionErrors as the task's build failure).
    notes = "// BEGIN OPEN t2: my plan\n"
    kit = (REPO / "solutions" / "t2_softmax.cu").read_text()
    starter = (REPO / "starter" / "t2_softmax.cu").read_text()
    with pytest.raises(RegionError, match=r"t2_softmax.cu:1: .*remove that line"):
        regions.splice(kit, notes + starter, ("t2",), filename="t2_softmax.cu")
    with pytest.raises(RegionError, match=r"t2_softmax.cu:1: "):
        regions.check_file(notes + starter, ("t2",), filename="t2_softmax.cu")


def test_spliced_lines_map_back_to_the_students_lines():
    kit = (REPO / "solutions" / "t2_softmax.cu").read_text()
    starter = (REPO / "starter" / "t2_softmax.cu").read_text()
    student = starter.replace("  KIT_TODO(t2);\n", "  float oops = undefined_thing;\n", 1)
    spliced = regions.splice(kit, student, ("t2",), filename="t2_softmax.cu")
    line = next(i for i, text in enumerate(spliced.text.splitlines()) if "undefined_thing" in text)
    assert "undefined_thing" in student.splitlines()[spliced.origin[line] - 1]
