"""The CUDA plumbing: nvcc build and cache, TODO refusal, wrapper argument checks, timing statistics.

Everything here runs without a GPU (CI); tests that compile skip when nvcc is missing.
The two ``gpu`` tests at the end exercise the timing harness on a real device.
"""

from __future__ import annotations

import itertools
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
import torch

from assignment import kernels, tasks
from assignment.cuda import check_all, wrappers
from assignment.cuda import compiler as cuda
from assignment.perf import timing
from assignment.testing import assert_repeatable

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TINY_KERNEL = """#include "kit.cuh"
__global__ void fill(float* x, float v) { x[threadIdx.x] = v; }
KIT_API int tiny_fill(void* module, float* x, float v, void* stream) {
  kit::UseModule use(module);
  return (int)kit::launch(fill, 1, 32, 0, (cudaStream_t)stream, x, v);
}
"""
BROKEN_KERNEL = """#include "kit.cuh"
__global__ void broken(float* x) {
  x[0] = not_declared_anywhere + 1.0f;
}
"""
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("KIT_CACHE_DIR", str(directory))
    return directory / "cuda"


# --------------------------------------------------------------------------- compile errors


@pytest.mark.kit
def test_parse_nvcc_output_reads_nvcc_and_host_compiler_forms():
    output = (
        '/x/t2_softmax.cu(57): error: identifier "foo" is undefined\n      foo(1);\n      ^\n'
        "/x/t3_gemm.cu:12:5: error: expected ';' before 'return'\n"
        '/x/t2_softmax.cu(60): warning #177-D: variable "z" was declared but never referenced\n'
    )
    found = cuda.parse_nvcc_output(output)
    assert [(d.file, d.line, d.severity) for d in found] == [
        ("/x/t2_softmax.cu", 57, "error"),
        ("/x/t3_gemm.cu", 12, "error"),
        ("/x/t2_softmax.cu", 60, "warning"),
    ]
    assert found[0].message == 'identifier "foo" is undefined'


@pytest.mark.kit
@needs_nvcc
def test_compile_error_names_the_students_line_and_never_quotes_the_kit(tmp_path, cache):
    source = tmp_path / "t2_softmax.cu"
    starter = (REPO / "starter" / "t2_softmax.cu").read_text()
    student = starter.replace("  KIT_TODO(t2);\n", "  v = not_declared_anywhere;\n", 1)
    source.write_text(student)
    line = next(i for i, text in enumerate(student.splitlines(), 1) if "not_declared_anywhere" in text)
    with pytest.raises(cuda.CudaCompileError) as info:
        cuda.build_module(source, "sm_80")
    message = str(info.value)
    assert f"t2_softmax.cu:{line}: error:" in message and "not_declared_anywhere" in message
    assert f"{line:5d} |   v = not_declared_anywhere;" in message  # the student's own line, quoted
    assert "BEGIN SOLUTION" not in message and "warp_allreduce(v, op)" not in message, "no line of the kit's"
    assert not list(cache.rglob("*.cubin")), "a failed build must not leave a module in the cache"


@pytest.mark.kit
@needs_nvcc
def test_a_student_file_is_compiled_to_device_code_only(tmp_path, cache):
    """The student's build is a cubin (no host code); a shared library is built only from the kit's sources."""
    source = tmp_path / "t2_softmax.cu"
    source.write_text((REPO / "starter" / "t2_softmax.cu").read_text())
    built = cuda.build_module(source, "sm_80")
    assert built.path.suffix == ".cubin" and built.path.read_bytes()[:4] == b"\x7fELF"
    assert built.kit == (REPO / "solutions" / "t2_softmax.cu").resolve()
    with pytest.raises(cuda.CudaToolkitError, match="only the kit's own code"):
        cuda.build_library(source, "sm_80")


# --------------------------------------------------------------------------- cache


@pytest.mark.kit
def test_cache_key_changes_with_every_input():
    base = dict(flags=cuda.NVCC_FLAGS, header_text="header", compiler="nvcc 13.0")
    key = cuda.cache_key("source", "sm_90", **base)
    assert key == cuda.cache_key("source", "sm_90", **base)
    assert key == cuda.cache_key("source", "90", **base)  # spellings of one arch are one key
    assert key != cuda.cache_key("source ", "sm_90", **base)
    assert key != cuda.cache_key("source", "sm_80", **base)
    assert key != cuda.cache_key("source", "sm_90", **(base | {"flags": cuda.NVCC_FLAGS + ("-G",)}))
    assert key != cuda.cache_key("source", "sm_90", **(base | {"header_text": "header2"}))
    assert key != cuda.cache_key("source", "sm_90", **(base | {"compiler": "nvcc 12.8"}))


@pytest.mark.kit
def test_arch_from_environment(monkeypatch):
    monkeypatch.setenv("KIT_CUDA_ARCH", "8.0")
    assert cuda.detect_arch() == "sm_80"
    assert cuda.normalize_arch("compute_90") == "sm_90a"  # Hopper's own target (wgmma, setmaxnreg)
    assert cuda.normalize_arch("9.0") == cuda.normalize_arch("sm_90a") == "sm_90a"
    assert cuda.normalize_arch("sm_100") == "sm_100"
    with pytest.raises(cuda.CudaToolkitError, match="not an architecture"):
        cuda.normalize_arch("hopper")


@pytest.mark.kit
@needs_nvcc
def test_second_build_is_a_cache_hit_and_two_implementations_build_side_by_side(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("KIT_CUDA_ARCH", "sm_80")
    starter = (REPO / "starter" / "t2_softmax.cu").read_text()
    first, second = tmp_path / "a" / "t2_softmax.cu", tmp_path / "b" / "t2_softmax.cu"
    first.parent.mkdir()
    second.parent.mkdir()
    first.write_text(starter)
    second.write_text(starter.replace("  KIT_TODO(t2);\n", "  v = op(v, v);\n", 1))
    built = cuda.build_module(first)
    assert not built.cached and built.path.is_file() and built.path.parent == cache / "modules"
    again = cuda.build_module(first)
    assert again.cached and again.path == built.path
    other = cuda.build_module(second)
    assert other.path != built.path and other.path.is_file()
    assert not [p for p in cache.rglob("*.tmp")], "temporary files must be renamed or removed"
    # The kit's host library: dlopen needs no GPU (the static CUDA runtime starts at the first CUDA call).
    host = cuda.load_library(built.kit)
    assert hasattr(host, "kit_module_load") and hasattr(host, "t2_softmax_forward")
    assert cuda.load_library(built.kit) is host


# --------------------------------------------------------------------------- TODO refusal


def _impl_dir(tmp_path, **files: str):
    directory = tmp_path / "impl"
    directory.mkdir(exist_ok=True)
    defaults = {code.cuda_file: "// done\n" for code in tasks.available() if code.cuda_file}
    for name, text in (defaults | {k.replace("_cu", ".cu"): v for k, v in files.items()}).items():
        (directory / name).write_text(text)
    return directory


@pytest.mark.kit
def test_todo_raises_not_implemented_without_touching_a_gpu(tmp_path, cache, monkeypatch):
    cuda_was_up = torch.cuda.is_initialized()  # a GPU host's earlier tests may have started CUDA
    stub = '#include "kit.cuh"\n// KIT_TODO(t3) in a comment does not count\nvoid f() {\n  KIT_TODO(t2);\n}\n'
    attention = "void g() {\n  KIT_TODO(t5);\n}\n"
    monkeypatch.setenv("IMPL", str(_impl_dir(tmp_path, t2_softmax_cu=stub, t4_flash_attention_cu=attention)))
    x = torch.randn(4, 8)
    with pytest.raises(
        NotImplementedError, match=r"^t2: TODO\(t2\) in t2_softmax.cu is not implemented yet \(.*line 4"
    ):
        kernels.softmax(x)
    with pytest.raises(NotImplementedError, match=r"^t2: "):
        kernels.naive_cuda_attention(torch.randn(1, 1, 4, 32), torch.randn(1, 1, 4, 32), torch.randn(1, 1, 4, 32))
    q = torch.randn(1, 1, 4, 32)
    with pytest.raises(NotImplementedError, match=r"^t5: TODO\(t5\) in t4_flash_attention.cu"):
        kernels.flash_attention(q, q, q, causal=True)
    with pytest.raises(ValueError, match="must be a CUDA tensor"):  # t4 itself is done: on to the argument checks
        kernels.flash_attention(q, q, q, causal=False)
    assert not cache.exists(), "nothing may be compiled for a TODO"
    assert cuda_was_up or not torch.cuda.is_initialized(), "the wrapper touched the GPU before refusing"


@pytest.mark.kit
def test_decode_todo_raises_not_implemented_without_touching_a_gpu(tmp_path, cache, monkeypatch):
    cuda_was_up = torch.cuda.is_initialized()  # a GPU host's earlier tests may have started CUDA
    stub = "void f() {\n  // TODO(t6): the combine\n  KIT_TODO(t6);\n  // END TODO(t6)\n}\n"
    monkeypatch.setenv("IMPL", str(_impl_dir(tmp_path, t6_decode_attention_cu=stub)))
    q, cache_kv = torch.randn(1, 4, 64), torch.randn(1, 2, 16, 64)
    lengths = torch.tensor([5], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match=r"^t6: TODO\(t6\) in t6_decode_attention.cu .*line 3"):
        kernels.decode_attention(q, cache_kv, cache_kv, lengths)
    with pytest.raises(NotImplementedError, match=r"^t6: "):
        kernels.decode_workspace(q, cache_kv)
    assert not cache.exists(), "nothing may be compiled for a TODO"
    assert cuda_was_up or not torch.cuda.is_initialized(), "the wrapper touched the GPU before refusing"


# --------------------------------------------------------------------------- argument checks


_LEN2 = torch.tensor([3, 4], dtype=torch.int32)


@pytest.fixture
def implemented(tmp_path, monkeypatch):
    monkeypatch.setenv("IMPL", str(_impl_dir(tmp_path)))


@pytest.mark.kit
@pytest.mark.parametrize(
    "call, error, pattern",
    [
        (
            lambda: kernels.softmax(torch.randn(4, 8)),
            ValueError,
            r"t2_softmax_forward: x must be a CUDA tensor, got device cpu",
        ),
        (
            lambda: kernels.softmax(torch.randn(4, 8, dtype=torch.float64)),
            TypeError,
            r"x must be torch.float32.*float64",
        ),
        (lambda: kernels.softmax([1.0, 2.0]), TypeError, r"x must be a torch.Tensor, got list"),
        (lambda: kernels.softmax(torch.randn(8, 4).t()), ValueError, r"x must be contiguous"),
        (
            lambda: kernels.softmax(torch.randn(4, 8), out=torch.empty(4, 9)),
            ValueError,
            r"out must have shape \(4, 8\)",
        ),
        (
            lambda: kernels.gemm(torch.randn(3, 4), torch.randn(5, 2)),
            ValueError,
            r"inner dimensions differ: op\(a\) is 3x4",
        ),
        (lambda: kernels.gemm(torch.randn(3, 4), torch.randn(2, 5), trans_b=True), ValueError, r"trans_b=True"),
        (lambda: kernels.gemm(torch.randn(4), torch.randn(4, 2)), ValueError, r"a must be 2-D or 3-D"),
        (lambda: kernels.gemm(torch.randn(2, 3, 4), torch.randn(3, 4, 5)), ValueError, r"batch sizes differ"),
        (
            lambda: kernels.gemm(torch.randn(3, 4), torch.randn(4, 5), out=torch.empty(5, 3)),
            ValueError,
            r"out must have shape \(3, 5\)",
        ),
        (
            lambda: kernels.gemm(torch.randn(4, 3), torch.randn(4, 5), trans_a=True),
            ValueError,
            r"a must be a CUDA tensor",
        ),
        (lambda: kernels.gemm(torch.randn(3, 4).half(), torch.randn(4, 5)), TypeError, r"a must be torch.float32"),
        (
            lambda: kernels.flash_attention(*[torch.randn(1, 2, 8, 48)] * 3),
            ValueError,
            r"head dimension d must be one of \(32, 64, 128\), got 48",
        ),
        (
            lambda: kernels.flash_attention(
                torch.randn(1, 2, 8, 32), torch.randn(1, 2, 6, 64), torch.randn(1, 2, 6, 64)
            ),
            ValueError,
            r"k must have shape \(1, 2, 6, 32\)",
        ),
        (
            lambda: kernels.flash_attention(
                torch.randn(1, 2, 8, 32), torch.randn(1, 2, 6, 32), torch.randn(1, 2, 5, 32)
            ),
            ValueError,
            r"v must have shape \(1, 2, 6, 32\) \(same as k\)",
        ),
        (
            lambda: kernels.flash_attention(*[torch.randn(1, 2, 8, 32)] * 3, lse=torch.empty(1, 2, 8, 1)),
            ValueError,
            r"lse must have shape \(1, 2, 8\)",
        ),
        (lambda: kernels.flash_attention(*[torch.randn(2, 8, 32)] * 3), ValueError, r"q must be 4-D"),
        (
            lambda: kernels.flash_attention(
                *[torch.randn(1, 1, 8, 32).transpose(2, 3).contiguous().transpose(2, 3)] * 3
            ),
            ValueError,
            r"q must be contiguous",
        ),
        (
            lambda: kernels.naive_cuda_attention(*[torch.randn(1, 1, 4, 32)] * 3),
            ValueError,
            r"naive_cuda_attention: q must be a CUDA tensor",
        ),
        (
            lambda: kernels.flash_attention(torch.randn(1, 6, 8, 32), *[torch.randn(1, 4, 6, 32)] * 2),
            ValueError,
            r"q has H = 6 heads but k and v have H_kv = 4: grouped-query attention needs H_kv to divide H",
        ),
        (
            lambda: kernels.flash_attention(torch.randn(2, 4, 8, 32), *[torch.randn(1, 2, 6, 32)] * 2),
            ValueError,
            r"k must have shape \(2, 2, 6, 32\) \(\(B, H_kv, Lk, d\) with q's B and d\)",
        ),
        (
            lambda: kernels.flash_attention(
                torch.randn(1, 4, 8, 32), torch.randn(1, 2, 6, 32), torch.randn(1, 4, 6, 32)
            ),
            ValueError,
            r"v must have shape \(1, 2, 6, 32\) \(same as k\)",
        ),
        (
            lambda: kernels.naive_cuda_attention(torch.randn(1, 3, 4, 32), *[torch.randn(1, 2, 4, 32)] * 2),
            ValueError,
            r"naive_cuda_attention: q has H = 3 heads but k and v have H_kv = 2",
        ),
        (
            lambda: kernels.flash_attention(torch.randn(1, 4, 8, 32), *[torch.randn(1, 2, 6, 32)] * 2),
            ValueError,
            r"q must be a CUDA tensor",
        ),  # grouped-query shapes pass the shape checks
        (
            lambda: kernels.decode_attention(torch.randn(2, 4, 64), *[torch.randn(2, 2, 9, 64)] * 2, _LEN2),
            ValueError,
            r"t6_decode_attention: q must be a CUDA tensor",
        ),  # a valid call up to the device check
        (
            lambda: kernels.decode_attention(torch.randn(2, 4, 48), *[torch.randn(2, 2, 9, 48)] * 2, _LEN2),
            ValueError,
            r"head dimension d must be one of \(32, 64, 128\), got 48",
        ),
        (
            lambda: kernels.decode_attention(torch.randn(2, 6, 64), *[torch.randn(2, 4, 9, 64)] * 2, _LEN2),
            ValueError,
            r"q has H = 6 heads but the cache has H_kv = 4",
        ),
        (
            lambda: kernels.decode_attention(torch.randn(2, 4, 2, 64), *[torch.randn(2, 2, 9, 64)] * 2, _LEN2),
            ValueError,
            r"a 4-D q must be \(B, H, 1, d\)",
        ),
        (
            lambda: kernels.decode_attention(
                torch.randn(2, 4, 64), torch.randn(2, 2, 9, 64), torch.randn(2, 2, 8, 64), _LEN2
            ),
            ValueError,
            r"v_cache must have shape \(2, 2, 9, 64\) \(same as k_cache\)",
        ),
        (
            lambda: kernels.decode_attention(torch.randn(2, 4, 64), *[torch.randn(1, 2, 9, 64)] * 2, _LEN2),
            ValueError,
            r"k_cache must have shape \(2, 1, 9, 64\)|k_cache must have shape \(2, 2, 9, 64\)",
        ),
        (
            lambda: kernels.decode_attention(
                torch.randn(2, 4, 64), *[torch.randn(2, 2, 9, 64)] * 2, torch.tensor([3.0, 4.0])
            ),
            TypeError,
            r"lengths must be torch.int32 or torch.int64",
        ),
        (
            lambda: kernels.decode_attention(torch.randn(2, 4, 64), *[torch.randn(2, 2, 9, 64)] * 2, [3, 4]),
            TypeError,
            r"lengths must be a torch.Tensor, got list",
        ),
        (
            lambda: kernels.decode_attention(
                torch.randn(2, 4, 64), *[torch.randn(2, 2, 9, 64)] * 2, torch.tensor([3, 4, 5], dtype=torch.int32)
            ),
            ValueError,
            r"lengths must have shape \(2,\) \(one length per batch row\) or \(1,\)",
        ),
        (
            lambda: kernels.decode_attention(
                torch.randn(2, 4, 64), *[torch.randn(2, 2, 9, 64)] * 2, _LEN2, lse=torch.empty(2, 4, 1)
            ),
            ValueError,
            r"lse must have shape \(2, 4\)",
        ),
        (
            lambda: kernels.decode_attention(torch.randn(2, 4, 64).half(), *[torch.randn(2, 2, 9, 64)] * 2, _LEN2),
            TypeError,
            r"q must be torch.float32",
        ),
    ],
)
def test_wrappers_reject_bad_arguments_before_any_gpu_work(implemented, call, error, pattern):
    cuda_was_up = torch.cuda.is_initialized()  # a GPU host's earlier tests may have started CUDA
    with pytest.raises(error, match=pattern):
        call()
    assert cuda_was_up or not torch.cuda.is_initialized(), "the wrapper touched the GPU before refusing"


@pytest.mark.kit
def test_error_codes_become_runtime_errors_with_the_kernel_name():
    with pytest.raises(RuntimeError, match=r"^t3_gemm_batched failed: .*cudaError_t 700"):
        wrappers._check_status(700, "t3_gemm_batched")
    wrappers._check_status(0, "t3_gemm_batched")


# --------------------------------------------------------------------------- timing statistics


def _noisy(center: float, spread: float, n: int) -> list[float]:
    return [center + spread * ((i * 7919) % 101 - 50) / 50 for i in range(n)]  # deterministic, uniform-ish


@pytest.mark.kit
def test_stop_rule_converges_caps_and_waits_for_min_reps():
    rule = dict(min_reps=10, max_reps=200, time_cap_s=20.0, rse_target=0.01)
    quiet = {"student": _noisy(1.0, 0.01, 10), "reference": _noisy(2.0, 0.02, 10)}
    assert timing.stop_reason(quiet, 1.0, **rule) == "converged"
    few = {name: times[:5] for name, times in quiet.items()}
    assert timing.stop_reason(few, 1.0, **rule) is None  # quiet, but fewer than min_reps
    noisy = {"student": _noisy(1.0, 0.01, 50), "reference": _noisy(1.0, 0.9, 50)}
    assert timing.stop_reason(noisy, 1.0, **rule) is None  # one noisy candidate keeps everyone going
    assert timing.stop_reason(noisy, 25.0, **rule) == "time_cap"
    long_noisy = {name: _noisy(1.0, 0.9, 200) * 1 for name in ("a", "b")}
    assert timing.stop_reason(long_noisy, 1.0, **(rule | {"rse_target": 1e-6})) == "max_reps"


@pytest.mark.kit
def test_median_rse_shrugs_off_one_outlier():
    times = _noisy(1.0, 0.01, 30)
    with_outlier = times[:-1] + [50.0]  # e.g. one call preempted by another process
    assert timing.rse_of_median(with_outlier) < 0.01 < timing.rse_of_mean(with_outlier)
    assert timing.relative_standard_error(with_outlier) < 0.01


@pytest.mark.kit
def test_ratio_of_medians_and_throughput():
    student = timing.summarize("student", [2.0, 2.1, 1.9, 9.0], flops=4e9, bytes_moved=8e6)
    reference = timing.summarize("reference", [1.0, 1.0, 1.1, 0.9], flops=4e9, bytes_moved=8e6)
    assert student.median_ms == pytest.approx(2.05)
    assert timing.ratio(student, reference) == pytest.approx(2.05 / 1.0)
    assert reference.gbps == pytest.approx(8e6 / 1e-3 / 1e9)
    assert reference.tflops == pytest.approx(4e9 / 1e-3 / 1e12)
    assert student.mean_ms == pytest.approx(statistics.fmean([2.0, 2.1, 1.9, 9.0]))


@pytest.mark.kit
def test_time_below_the_physical_floor_is_impossible():
    # 1 GB moved at 5 TB/s takes at least 0.2 ms; 1e12 flops at 100 TFLOP/s at least 10 ms.
    assert timing.physical_floor_ms(None, 1e9, 5e12, 100e12) == pytest.approx(0.2)
    assert timing.physical_floor_ms(1e12, 1e9, 5e12, 100e12) == pytest.approx(10.0)
    timing.check_physical_floor("student", 0.25, 0.2)
    with pytest.raises(
        timing.ImpossibleTimeError, match=r"student: 0.0500 ms is below the physical floor of 0.2000 ms"
    ):
        timing.check_physical_floor("student", 0.05, 0.2)
    with pytest.raises(timing.ImpossibleTimeError, match=r"flops at 1.5x the tensor cores' fp16 peak"):
        timing.check_physical_floor("student", 0.05, 0.2, tensor_cores=True)


@pytest.mark.kit
def test_tensor_core_work_has_its_own_floor():
    # FlashAttention-2 in fp16 reaches about 330 TFLOP/s on an H100: under the fp32 floor's 100 TFLOP/s
    # ceiling it would look impossible; the tensor cores' (989 dense, x 1.5) leave it room, and still catch work
    # that was skipped (a tenth of the time of the cuDNN kernel's 600 TFLOP/s is over the ceiling).
    hopper = timing.GENEROUS_TENSOR_FLOPS_BY_MAJOR[9]
    assert 989e12 < hopper < 2 * 989e12
    assert set(timing.GENEROUS_PEAKS_BY_MAJOR) <= set(timing.GENEROUS_TENSOR_FLOPS_BY_MAJOR)
    flops = 4.0 * 8 * 16 * 4096 * 4096 * 128  # t8's bench shape, d 128
    fa2_ms = flops / 330e12 * 1e3
    assert timing.physical_floor_ms(flops, None, 5e12, hopper) < fa2_ms
    assert timing.physical_floor_ms(flops, None, 5e12, hopper) > flops / 6000e12 * 1e3


# --------------------------------------------------------------------------- the sanitizer's scenarios

SANITIZED = [code.id for code in tasks.available() if code.sanitize is not None]


@pytest.mark.kit
@pytest.mark.parametrize("task", SANITIZED)
def test_each_sanitizer_scenario_is_a_kit_api_function_of_its_tasks_file(task):
    """The scenario its TaskCode names is in the host part of the task's own file, with the driver's signature."""
    code = tasks.code(task)
    text = cuda.kit_source(code.cuda_file).read_text()
    signature = rf"KIT_API int {re.escape(code.sanitize.symbol)}\(void\* module, int( /\*)? ?variant(\*/)?\) \{{"
    assert re.search(signature, text), f"{code.cuda_file} has no KIT_API int {code.sanitize.symbol}(void* module, int)"
    last_region_end = max(text.rfind("END SOLUTION"), text.rfind("END TODO"))  # the kit's file or the starter's
    assert text.index(code.sanitize.symbol) > last_region_end > 0, "the scenario is the kit's host code"


@pytest.mark.kit
@needs_nvcc
@pytest.mark.parametrize("task", SANITIZED)
def test_the_sanitizer_driver_finds_each_scenario_in_its_host_library(task, tmp_path, monkeypatch):
    """Without a GPU: the driver's command line for the task (the kit's host library of its file, its Sanitize)
    gets past the scenario's lookup and stops at loading a module that is no cubin; a misnamed symbol stops
    before, and says so."""
    from assignment.cuda import sanitize

    monkeypatch.setenv("KIT_CUDA_ARCH", cuda.preprocess_arch())  # check-cuda's build, cached, on a CPU host
    not_a_cubin = tmp_path / "not_a.cubin"
    not_a_cubin.write_bytes(b"not a cubin")
    code = tasks.code(task)
    command = sanitize.driver_command(code.sanitize, cuda.kit_source(code.cuda_file), not_a_cubin)
    assert command[3:] == [code.sanitize.symbol, str(code.sanitize.variant)]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2 and f"loading {not_a_cubin}" in ran.stderr, ran.stdout + ran.stderr
    misnamed = [*command[:3], code.sanitize.symbol + "_misnamed", *command[4:]]
    ran = subprocess.run(misnamed, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2 and f"does not export {code.sanitize.symbol}_misnamed" in ran.stderr, ran.stderr


# --------------------------------------------------------------------------- make check-cuda (check_all)


@pytest.mark.kit
@needs_nvcc
def test_check_all_compiles_every_file_for_both_archs_and_fails_on_one_error(tmp_path, cache, capsys):
    sources = tmp_path / "kernels"
    (sources / "nested").mkdir(parents=True)
    (sources / "good.cu").write_text(TINY_KERNEL)
    (sources / "nested" / "broken.cu").write_text(BROKEN_KERNEL)
    assert check_all.main([str(sources)]) == 1
    out, err = capsys.readouterr()
    table = [line.split() for line in out.splitlines()]
    assert sorted(row[1] for row in table if row[0].endswith("good.cu") and row[-1] == "ok") == ["sm_80", "sm_90a"]
    assert sorted(row[1] for row in table if row[0].endswith("broken.cu") and row[-1] == "FAILED") == [
        "sm_80",
        "sm_90a",
    ]
    assert "broken.cu:3: error:" in err
    (sources / "nested" / "broken.cu").unlink()
    assert check_all.main([str(sources)]) == 0  # the good file now comes from the cache
    assert "ok (cached)" in capsys.readouterr().out
    (sources / "nested" / "broken.cu").write_text(BROKEN_KERNEL)
    assert check_all.main([str(sources / "good.cu"), "--arch", "sm_80"]) == 0, "a file given is that file alone"
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:-1]] == [str(sources / "good.cu")]


# --------------------------------------------------------------------------- on a GPU


@pytest.mark.kit
@pytest.mark.gpu
@needs_gpu
def test_measure_interleaves_and_checks_on_a_gpu():
    checked = []

    def make_inputs(i):
        return torch.randn(1 << 20, device="cuda", generator=torch.Generator("cuda").manual_seed(i))

    results = timing.measure(
        {"exp": torch.exp, "double exp": lambda x: torch.exp(torch.exp(x.clamp(max=1)))},
        make_inputs,
        check=lambda name, x, y: checked.append(name),
        bytes_moved=8 << 20,
        min_reps=5,
        max_reps=20,
        time_cap_s=5.0,
    )
    assert set(results) == {"exp", "double exp"} and all(r.reps >= 5 for r in results.values())
    assert checked.count("exp") >= 3  # warm-up, first timed call, last timed call
    assert results["exp"].gbps > 0


@pytest.mark.kit
@pytest.mark.gpu
@needs_gpu
def test_skipped_work_is_caught_on_a_gpu():
    cached = torch.zeros(1, device="cuda")
    with pytest.raises(timing.ImpossibleTimeError, match="below the physical floor"):
        timing.measure(
            {"lazy": lambda x: cached},
            lambda i: torch.randn(1 << 20, device="cuda"),
            bytes_moved=1e11,
            min_reps=3,
            max_reps=5,
        )


# --------------------------------------------------------------------------- bench and profile arithmetic


@pytest.mark.kit
def test_attention_work_counts_only_visible_pairs():
    from assignment.perf.cases import attention_pairs, attention_work

    assert attention_pairs(4, 4, causal=False) == 16
    assert attention_pairs(4, 4, causal=True) == 1 + 2 + 3 + 4
    assert attention_pairs(2, 5, causal=True) == 4 + 5  # bottom-right: query 0 sees keys 0..3
    assert attention_pairs(5, 2, causal=True) == 0 + 0 + 0 + 1 + 2  # the first three queries see nothing
    flops, bytes_moved = attention_work(2, 3, 4, 4, 32, causal=False)
    assert flops == 4 * 2 * 3 * 16 * 32
    assert bytes_moved == 4 * 2 * 3 * (2 * 4 * 32 + 2 * 4 * 32 + 4)


@pytest.mark.kit
def test_profile_reads_ncu_csv_and_states_the_ideal_traffic():
    from assignment.perf import profile

    csv_text = "\n".join(
        [
            "==PROF== Connected to process 123",
            '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Section Name",'
            '"Metric Name","Metric Unit","Metric Value"',
            '"0","123","python","host","flash_fwd(float const*)","1","7","Command line profiler metrics",'
            '"dram__bytes_read.sum","byte","1,073,741,824"',
            '"0","123","python","host","flash_fwd(float const*)","1","7","Command line profiler metrics",'
            '"sm__warps_active.avg.pct_of_peak_sustained_active","%","37.5"',
        ]
    )
    metrics = profile.parse_ncu_csv(csv_text)
    assert metrics["dram__bytes_read.sum"] == ("byte", 1073741824.0)
    assert metrics["sm__warps_active.avg.pct_of_peak_sustained_active"][1] == 37.5
    assert metrics["_kernel"][0] == "flash_fwd(float const*)"
    assert tasks.code("t2").profile.ideal_bytes({"rows": 2, "cols": 3}) == 48
    assert tasks.code("t3").profile.ideal_bytes({"batch": 2, "M": 1, "N": 2, "K": 3}) == 4 * 2 * (3 + 6 + 2)
    assert "ERR_NVGPUCTRPERM" in profile.explain_failure(
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission"
    )
    assert "flash_fwd" in profile.report("t4", tasks.code("t4").profile, metrics)


def test_assert_repeatable_catches_a_result_that_moves():
    steady = torch.arange(6.0)
    assert_repeatable(lambda: (steady.clone(), steady + 1), 3, "unused")
    calls = itertools.count()
    with pytest.raises(AssertionError, match="a race"):
        assert_repeatable(lambda: (steady, steady + (next(calls) == 2)), 3, "moved: a race")
