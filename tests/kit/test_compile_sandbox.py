"""nvcc on a student's code runs confined (assignment/cuda/confine.py): it sees the spliced file and the kit's include
directory only, within memory and time limits, and nothing it started outlives a run past its time.

These compile for real (CPU only: no GPU is needed to build a cubin); they skip where nvcc is missing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from assignment.cuda import compiler, confine

pytestmark = [pytest.mark.kit, pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")]
REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "t2_softmax.cu"
ANCHOR = "  m = T2_NEG_INF;\n"


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def private_cache(cache_root, monkeypatch):
    """One cache for the module (the kit's own build of the file is made once); the tests that must compile use
    their own file contents or use_cache=False."""
    monkeypatch.setenv("KIT_CACHE_DIR", str(cache_root))


def student_file(tmp_path: Path, planted: str, name: str = "t2_softmax.cu", source: Path = SOLUTION) -> Path:
    """The solution with ``planted`` added to a TODO region (the rules are skipped where a test says so)."""
    text = source.read_text()
    assert ANCHOR in text or name != "t2_softmax.cu"
    folder = tmp_path / "student"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text.replace(ANCHOR, ANCHOR + planted, 1))
    return folder / name


def toolkit_processes() -> list[str]:
    """Processes running a program of the CUDA toolkit (cicc, ptxas, cudafe++, nvcc) or its host compiler's."""
    root = str(confine.toolkit_root(compiler.nvcc_real_path()))
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(entry / "exe")
        except OSError:
            continue
        if exe.startswith(root) or Path(exe).name in ("cc1plus", "cicc", "ptxas"):
            found.append(f"{entry.name} {exe}")
    return found


def test_nvcc_sees_nothing_of_the_instructors_tree(tmp_path):
    hidden = REPO / "grader" / "hidden" / "test_t2_hidden.py"
    source = student_file(tmp_path, f'#include "{hidden}"\n')
    with pytest.raises(compiler.CudaCompileError) as info:
        compiler.build_module(source, "sm_80", source_rules=False)
    message = str(info.value)
    assert "No such file" in message or "cannot open" in message, message
    assert "def test_" not in message and "import" not in message.split(str(hidden))[-1]


@pytest.mark.whole_host  # every nvcc of the host counts: not beside make check-cuda
def test_an_include_bomb_stops_at_the_memory_limit(tmp_path):
    source = student_file(tmp_path, '#include "/dev/zero"\n')
    with pytest.raises(compiler.CudaCompileError, match="ran out of memory|stopped by signal"):
        compiler.build_module(source, "sm_80", source_rules=False)
    assert not toolkit_processes()


@pytest.mark.whole_host  # every nvcc of the host counts: not beside make check-cuda
def test_a_compile_past_its_time_is_killed_with_every_process_it_started(tmp_path):
    if toolkit_processes():
        pytest.skip("another compile is running on this host: its processes would look left behind")
    t4 = REPO / "solutions" / "t4_flash_attention.cu"
    source = student_file(tmp_path, "", name=t4.name, source=t4)
    with pytest.raises(compiler.CudaCompileError, match="ran past its 1 s limit"):
        compiler.build_module(
            source, "sm_90", kit=source, source_rules=False, limits=confine.CompileLimits(wall_seconds=1.0)
        )
    assert not toolkit_processes(), "nvcc's children outlived the run"
    assert not list(Path(os.environ["KIT_CACHE_DIR"]).rglob("t4_flash_attention-*.cubin")), (
        "a killed build must leave nothing in the cache"
    )


@pytest.mark.skipif(not confine.probe(confine.find_bwrap())[0], reason="bubblewrap cannot run here")
def test_student_code_compiles_inside_bubblewrap_when_there_is_one(tmp_path, monkeypatch):
    monkeypatch.delenv(confine.ISOLATION_SETTING, raising=False)
    built = compiler.build_module(student_file(tmp_path, ""), "sm_80")
    assert built.isolation == "bwrap" and built.path.is_file()


def test_the_process_level_builds_the_same_module(tmp_path, monkeypatch):
    source = student_file(tmp_path, "")
    monkeypatch.setenv(confine.ISOLATION_SETTING, "process")
    built = compiler.build_module(source, "sm_80", use_cache=False)
    assert built.isolation == "process" and built.path.is_file()


def test_a_grader_that_requires_bubblewrap_refuses_to_compile_without_it(tmp_path, monkeypatch):
    monkeypatch.setenv(confine.ISOLATION_SETTING, "bwrap")
    monkeypatch.setenv("KIT_BWRAP", shutil.which("false") or "/bin/false")
    with pytest.raises(confine.IsolationUnavailable, match="only inside bubblewrap"):
        compiler.build_module(student_file(tmp_path, ""), "sm_80", use_cache=False)


def test_the_builds_symbols_catch_storage_and_allocation_the_rules_did_not_see(tmp_path):
    from assignment.cuda.regions import RegionError

    stored = student_file(tmp_path, "  static __device__ int calls;\n  atomicAdd(&calls, 1);\n")
    with pytest.raises(RegionError, match="global memory"):
        compiler.build_module(stored, "sm_80", source_rules=False)
    allocated = student_file(tmp_path, "  float* p = (float*)malloc(64);\n  free(p);\n")
    with pytest.raises(RegionError, match="outside the kernel"):
        compiler.build_module(allocated, "sm_80", source_rules=False)
    debugging = student_file(tmp_path, '  printf("m %f\\n", m);\n')  # printf's vprintf is allowed
    assert compiler.build_module(debugging, "sm_80").path.is_file()
