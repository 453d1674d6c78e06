"""The CUDA region rules that no region can switch off (issue 35).

The rules read a region between words they write around it, so those words are drawn afresh for every reading and
no region may write a name of theirs; directives and line markers are refused in every spelling; attribute lists
are read whole; inline PTX and the compiler's tensor-core built-ins are refused; and the expansion check (nvcc -E)
holds on its own: it is run here on regions the first reading would refuse, as if that reading had been blinded.
"""

from __future__ import annotations

import shutil

import pytest

from assignment.cuda import reading, rules
from assignment.cuda.forbidden import RESERVED_PREFIX, attribute_names
from assignment.cuda.regions import Region

pytestmark = [
    pytest.mark.kit,
    pytest.mark.skipif(shutil.which("g++") is None, reason="the rules read regions with the host compiler g++"),
]
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")


def body(code: str, first_line: int = 2) -> Region:
    return Region("t2", "test", first_line - 1, first_line, tuple(line + "\n" for line in code.splitlines()))


def check(code: str) -> list[rules.Problem]:
    return rules.check_regions([body(code)])


# --------------------------------------------------------------------------- the words the rules read a region by


def test_the_rules_words_are_drawn_afresh_for_every_reading():
    region = body("x = 1;")
    first, second = rules._Probe.of([region]), rules._Probe.of([region])
    assert first.tag != second.tag, "two readings drew the same words: a region could learn and forge them"
    assert first.tag.startswith(RESERVED_PREFIX) and first.begin(0) in first.text and first.end(0) in first.text


@pytest.mark.parametrize("word", ["__kit_end_0__", "__kit_begin_0__", "__kit_line__", "__KIT_END_0__", "__kit0e0"])
def test_a_region_may_not_write_the_kits_names_and_what_follows_is_still_read(word):
    problems = check(f'int {word} = 0;\nasm volatile("trap;");')
    assert [p.line for p in problems] == [2, 3], problems
    assert "the kit's own names" in problems[0].message, problems
    assert "inline assembly" in problems[1].message, f"the line after {word} went unread: {problems}"


def test_a_forged_end_word_ends_nothing():
    # The attack of issue 35: an end word, then a #line the first reading no longer saw, then inline PTX.
    problems = check('int __kit_end_0__ = 0;\n#line 1 "kit.cuh"\nasm volatile("trap;");\n#line 9 "t2_softmax.cu"')
    assert [p.line for p in problems] == [2, 3, 4, 5], problems


# --------------------------------------------------------------------------- directives, trigraphs, attributes, PTX


@pytest.mark.parametrize(
    "code, why",
    [
        ('#line 1 "kit.cuh"', "no #line or line markers"),
        ("#line 40", "no #line or line markers"),
        ('# 1 "kit.cuh" 1 3 4', "no #line or line markers"),
        ("%:line 7", "no #line or line markers"),  # the digraph spelling of #
        ("  %:  define X 1", "preprocessor lines"),
        ('x = 1; /* a comment that runs\n on */ # 5 "kit.cuh"', "preprocessor lines"),  # the # starts its line
        ('??=line 1 "kit.cuh"', "trigraph"),
        ("x = y ??! z;", "trigraph"),
        ('printf("why??/");', "trigraph"),  # ??/ would be a backslash: the string would not end there
        ("[[gnu::noinline]] int q = 0;", "C++11 attributes"),
        ("[ [maybe_unused] ] int q = 0;", "C++11 attributes"),
        ("<:<:maybe_unused:>:> int q = 0;", "C++11 attributes"),
        ("__attribute((noinline)) int q = 0;", "attributes"),  # gcc's other spelling of __attribute__
        ("__declspec(noinline) int q = 0;", "attributes"),
        ('__asm volatile goto("bra.uni %l0;" :::: done); done:;', "inline assembly"),
        ('__asm__ __volatile__("membar.gl;" ::: "memory");', "inline assembly"),
        ('asm("mov.u64 %0, %%globaltimer;" : "=l"(t));', "inline assembly"),
        ('_Pragma("nv_diag_suppress 177")', "pragmas"),
        ("#pragma unroll 4 + x", "preprocessor lines"),  # only a number may follow unroll
    ],
)
def test_every_spelling_is_refused_at_its_line(code, why):
    problems = check(code)
    assert problems and any(why in p.message for p in problems), (code, problems)
    assert all(p.line >= 2 for p in problems), "a problem names a line of the region"


@pytest.mark.parametrize(
    "code",
    [
        "/* why?? (a note) */ x = 1;",  # a trigraph in a comment: the compiler removes the comment first
        "x = c ? a : b ? d : e;",
        "x = a[b[i]] + m[ b[0] ];",  # brackets in brackets are not an attribute list
        "#pragma unroll\n/* a comment\n   over lines */\nfor (;;) { break; }",
        "#pragma unroll (2)\nfor (;;) { break; }",
        'const char* s = "a ? b";',
        "auto f = [&](int i) { return v[i]; };",
    ],
)
def test_honest_code_passes(code):
    assert check(code) == []


def test_attribute_lists_are_read_in_full():
    def names(text: str):
        return attribute_names(reading.tokenize(text), 0)

    assert names("__attribute__((a, b(x, (y)), c)) int q;")[0] == ["a", "b", "c"]
    assert names("__attribute__((__aligned__(16))) float t[4];")[0] == ["aligned"]
    assert names("__attribute__((aligned((16)), noinline))")[0] == ["aligned", "noinline"]
    assert names("__attribute__((a),(b))") is None, "not the (( list )) form: nobody can say what it holds"
    assert names("__attribute__ (x)") is None


# --------------------------------------------------------------------------- the reading of nvcc -E


def test_a_line_marker_is_only_a_whole_line():
    text = '# 3 "a.cu"\nint x;\n# 7 "b.h" 1 3 4\ny\n# 9 "a.cu" 2 z\n'
    tokens = reading.tokenize(text)
    assert [(t.text, t.line, t.file) for t in tokens[:4]] == [
        ("int", 3, "a.cu"),
        ("x", 3, "a.cu"),
        (";", 3, "a.cu"),
        ("y", 7, "b.h"),
    ]
    rest = [t.text for t in tokens[4:]]
    assert rest == ["#", "9", '"a.cu"', "2", "z"], "a line with code after a marker is code, read whole"


@pytest.mark.parametrize("change", [0, 5, 40, 61, 62, 90, -1])
def test_a_changed_reading_reuses_what_the_texts_share(change):
    known = '# 1 "f.cu"\nint alpha = 1\'000; const char* s = R"x(raw )" string)x";\nfloat beta = alpha <:: 2;\n'
    text = known[:change] + "q" + known[change:] if change >= 0 else known + "int gamma;\n"
    kept, rest = reading.tokenize_changed(text, known, reading.tokenize(known))
    whole = reading.tokenize(text)
    assert reading.tokenize(known)[:kept] + rest == whole, f"the reading differs where the texts part ({change})"


def test_a_reading_kept_in_part_resumes_only_past_what_it_skipped():
    known = "".join(f"int v{i} = {i};\n" for i in range(50))
    tokens = reading.tokenize(known)
    late = known + "float w;\n"
    kept, rest = reading.tokenize_changed(late, known, tokens[100:], skipped=100)
    assert kept > 100 and tokens[:kept] + rest == reading.tokenize(late)
    early = "q" + known
    assert reading.tokenize_changed(early, known, tokens[100:], skipped=100) is None, "parted before the kept tokens"


# --------------------------------------------------------------------------- check 3 on its own (nvcc -E)

KIT_FILE = """#include "kit.cuh"
#define KIT_WRAP(x) (x)
#define KEEP __attribute__((unused, noinline))
#define KEEP_TWICE __attribute__((unused)) __attribute__((noinline))
#define ALIGNED __attribute__((aligned(16), unused))
#define CXX11 [[gnu::noinline]]
#define SUPPRESS _Pragma("nv_diag_suppress 177")
#define UNROLL _Pragma("unroll")
#define SPIN asm("nanosleep.u32 1;")
#define GNU_SPIN __asm__ __volatile__("nanosleep.u32 1;")
#define PLAIN_SPIN __asm volatile("nanosleep.u32 1;")
__global__ void k(float* out) {
  float v = 0.f;
  // BEGIN SOLUTION t2: the region
  v = 1.f;
  // END SOLUTION
  (void)v;
  out[0] = v;
}
"""
RENUMBERED = ("renumbers the file's lines", "as another file's", "does not read the same")


def expand(region: str) -> list[rules.Problem]:
    text = KIT_FILE.replace("  v = 1.f;\n", region + "\n")
    lines = text.splitlines()
    opening = next(i for i, line in enumerate(lines, 1) if "BEGIN SOLUTION" in line)
    closing = next(i for i, line in enumerate(lines, 1) if "END SOLUTION" in line)
    return rules.check_expansion(text, [(opening, closing)], "t2_softmax.cu", "sm_80")


@needs_nvcc
@pytest.mark.parametrize(
    "region, why",
    [
        ("  v = 2.f;", None),
        ("  UNROLL for (int i = 0; i < 2; ++i) v += 1.f;", None),  # _Pragma("unroll") is #pragma unroll
        ("  ALIGNED float t[4] = {}; v += t[0];", None),
        ("  __syncthreads(); v = __expf(v) + (float)__builtin_expect(v > 0.f, 1) + INFINITY;", None),
        ("  float* __restrict p = NULL; v += sizeof(__typeof__(v)) + __alignof__(float); (void)p;", None),
        ("  KEEP int q = 0;", ("attribute 'noinline'",)),  # the second name of a list
        ("  KEEP_TWICE int q = 0;", ("attribute 'noinline'",)),  # the second list
        ("  CXX11 int q = 0;", ("C++11 attributes",)),
        ("  SUPPRESS int q = 0;", ("preprocessor directive",)),
        ("  SPIN;", ("expands to 'asm'",)),
        ("  GNU_SPIN;", ("expands to '__asm__'",)),
        ("  PLAIN_SPIN;", ("expands to '__asm'",)),
        ("  v = v + KIT_WRAP", ("does not read the same",)),  # its call takes the kit's next line as arguments
        ('#line 1 "kit.cuh"\n  SPIN;\n#line 18 "/work/t2_softmax.cu"', RENUMBERED),  # asm in another file
        ('# 1 "kit.cuh"\n  v = 3.f;', RENUMBERED),
        ("#line 2\n  v = 3.f;", RENUMBERED),  # backwards
        ("#line 40\n  v = 3.f;", RENUMBERED),  # forwards, past the region
        (
            "  { void __hmma_m16n16k16_mma_f32f32(float*, const int*, const int*, const float*, int, int); }",
            ("none of the kit's headers declares",),
        ),
    ],
)
def test_the_expansion_check_holds_on_its_own(region, why):
    problems = expand(region)
    if why is None:
        assert problems == [], problems
    else:
        assert problems and any(w in p.message for p in problems for w in why), (region, problems)
        assert all(15 <= p.line <= 17 for p in problems), f"problems name the region's lines: {problems}"
