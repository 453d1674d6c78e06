"""Adding a task takes seven files (issue 26): throwaway tasks built from templates in a copy of the kit.

The copy gets the next task id, "scale a tensor", as an instructor would add it: its registry entry, its task
module, its solution file, its handout text, its public test, its hidden test and its fixtures, and nothing
else. Then the kit's own commands take it from there: the starter is generated, the public tests pass on the
solution and fail cleanly on the starter, the hidden suite passes on the solution, the handout renders its
section, and the grader grades a buggy submission of it below full marks. ``git status`` in the copy shows the
seven files, plus the starter file the generator wrote. The same task as a CUDA kernel (issue 36) takes the same
seven files and no shared one: its wrapper joins ``Kernels`` from its task module alone, and both its builds
compile (its GPU checks run where there is a GPU).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch

from assignment.registry import load_registry

pytestmark = [pytest.mark.kit, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NEW = f"t{len(load_registry().tasks) + 1}"  # the next id: the registry numbers its tasks without gaps
FILE = f"{NEW}_scale.py"
POINTS = 5

REGISTRY_ENTRY = f'''
# ---------------------------------------------------------------------------
[[task]]
id = "{NEW}"
slug = "scale"
title = "Scale a tensor"
available = true
device = "any"
files = ["{FILE}"]
text = "{NEW}.md"
summary = "Multiply every element by a constant: the smallest task there is, to show what adding one takes."
objectives = ["Multiply a tensor by a scalar, keeping its shape and dtype."]
estimated_hours = [0.5, 1]
hint = """Return alpha * x: the same shape and dtype as x."""

[task.points]
correctness = {POINTS}
performance = 0

[task.tolerance]
float32 = {{ atol = 1e-6, rtol = 1e-6 }}

[task.shapes]
public = [{{ rows = 3, cols = 5 }}, {{ rows = 1, cols = 1 }}]

[task.hidden]
shapes = [{{ rows = 7, cols = 2 }}]

[task.rules]
imports = ["torch"]
'''

TASK_MODULE = f'''"""{NEW}, scale a tensor: a Python task with no bench, profile or sanitizer."""

from __future__ import annotations

from assignment.tasks import TaskCode

CODE = TaskCode(id="{NEW}")
'''

SOLUTION = f'''"""Task {NEW}: scale a tensor."""

from __future__ import annotations

import torch


def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * x, with x's shape and dtype."""
    # BEGIN SOLUTION {NEW}
    return x * alpha
    # END SOLUTION
'''

TEXT = """## Scaling

Multiply every element of `x` by `alpha`: $y = \\alpha x$. The shape and the dtype stay those of `x`.
"""

PUBLIC_TEST = f'''"""Public tests for task {NEW}: scale a tensor (``{FILE}``)."""

from __future__ import annotations

import pytest
import torch

from assignment.impl import load_python
from assignment.registry import load_registry
from assignment.testing import assert_close

pytestmark = pytest.mark.{NEW}
TASK = load_registry().task("{NEW}")


@pytest.mark.parametrize("shape", TASK.public_shapes, ids=lambda s: "{{rows}}x{{cols}}".format(**s))
def test_scale_matches_the_formula(shape, seed):
    x = torch.randn(shape["rows"], shape["cols"], generator=torch.Generator().manual_seed(seed))
    out = load_python("{FILE}").scale(x, 2.5)
    assert_close(out, 2.5 * x, **TASK.tol("float32"), name="scale(x, 2.5)", layout="row, col",
                 hint="return alpha * x")
'''

HIDDEN_TEST = f'''"""Hidden tests for task {NEW} (instructor-only): the student's file runs in the sandboxed worker."""

from __future__ import annotations

import pytest
import torch

from assignment.checks import require
from assignment.registry import load_registry
from grader.hidden.common import cases
from grader.isolation.client import student_module

pytestmark = pytest.mark.{NEW}
TASK = load_registry().task("{NEW}")


@pytest.mark.parametrize("shape", cases(TASK))
@pytest.mark.parametrize("alpha", [0.0, -3.0])
def test_scale(shape, alpha, seed):
    x = torch.randn(shape["rows"], shape["cols"], generator=torch.Generator().manual_seed(seed))
    out = student_module("{FILE}", forbidden=TASK.rules.forbidden).scale(x, alpha)
    require(isinstance(out, torch.Tensor) and torch.allclose(out, alpha * x, **TASK.tol("float32")), "mismatch",
            f"scale(x, {{alpha}}) differs from alpha * x", "scale differs from alpha * x")
'''

FIXTURES = f'''[[fixture]]
name = "{NEW}-forgets-alpha"
class = "honest bug"
task = "{NEW}"
defence = "the hidden values check alpha * x at alphas the public test does not use"
expect = {{ status = "ran", below_full = true }}
replace = [["    return x * alpha\\n", "    return x * 2.5\\n"]]
'''

HAND_WRITTEN = {
    "assignment/tasks.toml",
    f"assignment/tasks/{NEW}.py",
    f"solutions/{FILE}",
    f"assignment/text/{NEW}.md",
    f"tests/test_{NEW}_scale.py",
    f"grader/hidden/test_{NEW}_hidden.py",
    f"grader/fixtures/{NEW}.toml",
}
GENERATED = {f"starter/{FILE}"}


def _run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "KIT_CACHE_DIR": str(cwd / ".kit_cache"), **env},
    )


def _copy_of_the_kit(tmp_path: Path) -> Path:
    """The tracked files of this checkout (as a clean clone has them), in a git repository of their own."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs the kit's git checkout and git")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    copy = tmp_path / "kit"
    for name in listed.decode().split("\0"):
        source = REPO / name
        if name and source.is_file() and not name.startswith("grader/records/"):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    for command in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=kit", "-c", "user.email=kit@localhost", "commit", "-qm", "copy"],
    ):
        subprocess.run(command, cwd=copy, check=True, capture_output=True)
    return copy


def _add_the_task(copy: Path, entry: str = REGISTRY_ENTRY, files: dict[str, str] | None = None) -> None:
    """The task's registry entry at the end of the tasks, and its six other files (path -> text)."""
    registry = copy / "assignment" / "tasks.toml"
    text = registry.read_text()
    total = int(re.search(r"^total_points = (\d+)", text, re.M).group(1))
    text = re.sub(r"^total_points = \d+", f"total_points = {total + POINTS}", text, count=1, flags=re.M)
    last_task_ends = text.index("\n[theory]") if "\n[theory]" in text else len(text)
    registry.write_text(text[:last_task_ends] + entry + text[last_task_ends:])
    files = files or {
        f"assignment/tasks/{NEW}.py": TASK_MODULE,
        f"solutions/{FILE}": SOLUTION,
        f"assignment/text/{NEW}.md": TEXT,
        f"tests/test_{NEW}_scale.py": PUBLIC_TEST,
        f"grader/hidden/test_{NEW}_hidden.py": HIDDEN_TEST,
        f"grader/fixtures/{NEW}.toml": FIXTURES,
    }
    for path, body in files.items():
        (copy / path).write_text(textwrap.dedent(body))


def _public_tests_pass_then_stop_at_the_todo(copy: Path, todos: int) -> None:
    """The new task's public tests pass on the solution, and ``todos`` of them stop at the starter's TODO."""
    public = [sys.executable, "-m", "pytest", f"tests/test_{NEW}_scale.py", "-q", "-p", "no:cacheprovider"]
    passed = _run(public, copy, IMPL="solutions")
    assert passed.returncode == 0 and " passed" in passed.stdout, (
        f"public tests on the solution:\n{passed.stdout[-3000:]}"
    )
    todo = _run(public, copy, IMPL="starter")
    assert todo.returncode != 0 and re.search(rf"\b{todos} todo in ", todo.stdout), (
        f"{todos} public tests must stop at the starter's TODO:\n{todo.stdout[-3000:]}"
    )


def test_a_new_task_takes_seven_files_and_runs_end_to_end(tmp_path):
    copy = _copy_of_the_kit(tmp_path)
    _add_the_task(copy)
    python = sys.executable

    made = _run(["make", "starter", f"PY={python}"], copy)
    assert made.returncode == 0, f"make starter failed:\n{made.stdout[-3000:]}{made.stderr[-3000:]}"
    changed = {line[3:] for line in _run(["git", "status", "--porcelain", "-uall"], copy).stdout.splitlines()}
    assert changed == HAND_WRITTEN | GENERATED, (
        f"adding a task touched {sorted(changed - GENERATED)} by hand (want the seven files {sorted(HAND_WRITTEN)}) "
        f"and generated {sorted(changed & GENERATED)}"
    )

    _public_tests_pass_then_stop_at_the_todo(copy, todos=2)

    hidden = _run(
        [python, "-m", "pytest", f"grader/hidden/test_{NEW}_hidden.py", "-q", "-p", "no:cacheprovider"],
        copy,
        IMPL="solutions",
    )
    assert hidden.returncode == 0 and " passed" in hidden.stdout, (
        f"hidden tests on the solution:\n{hidden.stdout[-3000:]}"
    )

    handout = _run([python, "-m", "handout.render", "--no-pdf", "--out", str(copy / "build" / "handout")], copy)
    page = copy / "build" / "handout" / "handout.html"
    assert page.is_file() and "Scale a tensor" in page.read_text(), (
        f"the handout has no section for {NEW}:\n{handout.stdout[-2000:]}{handout.stderr[-2000:]}"
    )

    graded = _run([python, "-m", "grader.tools.adversarial", "--only", f"{NEW}-forgets-alpha"], copy)
    assert graded.returncode == 0 and "1/1 fixtures caught" in graded.stdout, (
        f"the grader on a buggy {NEW}:\n{graded.stdout[-3000:]}{graded.stderr[-3000:]}"
    )


# --------------------------------------------------------------------------- a CUDA task

CUDA_FILE = f"{NEW}_scale.cu"
CUDA_REGISTRY_ENTRY = (
    REGISTRY_ENTRY.replace('device = "any"', 'device = "gpu"')
    .replace(f'files = ["{FILE}"]', f'files = ["{CUDA_FILE}"]')
    .replace('title = "Scale a tensor"', 'title = "Scale a tensor in CUDA"')
    .replace('\n[task.rules]\nimports = ["torch"]\n', "\n")
)

CUDA_TASK_MODULE = f'''"""{NEW}, scale a tensor in CUDA: a kernel and its wrapper, no bench, profile or sanitizer."""

from __future__ import annotations

from ctypes import c_float, c_int64, c_void_p

from assignment.cuda import wrappers as kern
from assignment.tasks import TaskCode

CUDA_FILE = "{CUDA_FILE}"
SCALE = kern.Export(CUDA_FILE, "{NEW}_scale_forward", (c_void_p, c_void_p, c_float, c_int64, c_void_p))


class Kernels:
    """{NEW}'s wrapper: a method of ``assignment.kernels.Kernels``."""

    def scale(self, x, alpha: float):
        """alpha * x, a new tensor of x's shape."""
        import torch

        kernel = "{NEW}_scale_forward"
        state = self.require(SCALE, ("{NEW}",), kernel)
        kern.check_tensor(kernel, "x", x)
        y = torch.empty_like(x)
        device = kern.check_layout_and_device(kernel, x=x, y=y)
        if x.numel():
            kern.launch(self.function(SCALE, state), device, kernel, x.data_ptr(), y.data_ptr(), alpha, x.numel())
        return y


CODE = TaskCode(id="{NEW}", cuda_file=CUDA_FILE, kernels=Kernels)
'''

CUDA_SOLUTION = f"""// {CUDA_FILE}: y = alpha * x, one thread an element: the smallest CUDA task, to show what adding one takes.
#include "kit.cuh"

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float alpha, int64_t n) {{
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  // BEGIN SOLUTION {NEW}
  if (i < n) y[i] = alpha * x[i];
  // END SOLUTION
}}

KIT_API int {NEW}_scale_forward(void* module, const float* x, float* y, float alpha, int64_t n, void* stream) {{
  kit::UseModule use(module);
  if (n <= 0) return 0;
  const int64_t blocks = (n + 255) / 256;
  return (int)kit::launch(scale_kernel, (unsigned)blocks, 256, 0, (cudaStream_t)stream, x, y, alpha, n);
}}
"""

CUDA_PUBLIC_TEST = f'''"""Public tests for task {NEW}: scale a tensor in CUDA (``{CUDA_FILE}``)."""

from __future__ import annotations

import pytest
import torch

from assignment import kernels
from assignment.registry import load_registry
from assignment.testing import assert_close, check_todo_regions

pytestmark = pytest.mark.{NEW}
TASK = load_registry().task("{NEW}")


@pytest.mark.parametrize("shape", TASK.public_shapes, ids=lambda s: "{{rows}}x{{cols}}".format(**s))
def test_scale_matches_the_formula(shape, seed):
    x = torch.randn(shape["rows"], shape["cols"], generator=torch.Generator().manual_seed(seed)).cuda()
    out = kernels.scale(x, 2.5)
    assert_close(out, 2.5 * x, **TASK.tol("float32"), name="scale(x, 2.5)", layout="row, col",
                 hint="write y[i] = alpha * x[i] for every i < n")


@pytest.mark.cpu
def test_todo_regions_are_device_code_only():
    check_todo_regions("{CUDA_FILE}", ("{NEW}",))
'''

CUDA_HIDDEN_TEST = f'''"""Hidden tests for task {NEW} (instructor-only): the student's kernel, launched by the kit's host code."""

from __future__ import annotations

import pytest
import torch

from assignment import kernels
from assignment.checks import require
from assignment.registry import load_registry
from grader.hidden.common import cases

pytestmark = pytest.mark.{NEW}
TASK = load_registry().task("{NEW}")


@pytest.mark.parametrize("shape", cases(TASK))
@pytest.mark.parametrize("alpha", [0.0, -3.0])
def test_scale(shape, alpha, seed):
    x = torch.randn(shape["rows"], shape["cols"], generator=torch.Generator().manual_seed(seed)).cuda()
    out = kernels.scale(x, alpha)
    require(torch.allclose(out, alpha * x, **TASK.tol("float32")), "mismatch",
            f"scale(x, {{alpha}}) differs from alpha * x", "scale differs from alpha * x")
'''

CUDA_FIXTURES = FIXTURES.replace(  # the same honest bug, in the kernel
    '["    return x * alpha\\n", "    return x * 2.5\\n"]',
    '["  if (i < n) y[i] = alpha * x[i];\\n", "  if (i < n) y[i] = 2.5f * x[i];\\n"]',
)
assert CUDA_FIXTURES != FIXTURES, "the fixture's replace line moved: update CUDA_FIXTURES"

CUDA_FILES = {
    f"assignment/tasks/{NEW}.py": CUDA_TASK_MODULE,
    f"solutions/{CUDA_FILE}": CUDA_SOLUTION,
    f"assignment/text/{NEW}.md": TEXT,
    f"tests/test_{NEW}_scale.py": CUDA_PUBLIC_TEST,
    f"grader/hidden/test_{NEW}_hidden.py": CUDA_HIDDEN_TEST,
    f"grader/fixtures/{NEW}.toml": CUDA_FIXTURES,
}

# In the copy, with IMPL set: the wrapper is one of Kernels' methods, composed from the task's module alone, and
# the starter's TODO stops it before any GPU is asked for.
COMPOSED = f"""
import torch
from assignment import kernels
assert "scale" in kernels.ENTRY_POINTS, kernels.ENTRY_POINTS
assert callable(kernels.Kernels("starter").scale)
try:
    kernels.scale(torch.ones(3), 2.0)
except NotImplementedError as exc:
    assert "{NEW}" in str(exc), exc
    print("refused:", exc)
"""


def test_a_new_cuda_task_takes_seven_files_and_no_shared_one(tmp_path):
    """The CUDA twin of the test above, run as far as a host without a GPU can: the seven files and the generated
    starter, nothing else touched; both builds of the new file (the solution's and the starter's, compiled); its
    wrapper in ``Kernels`` without an edit to any shared file; the starter refused at its TODO; the public tests
    (their GPU checks run on a GPU host, the region check anywhere)."""
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc to build the new task's CUDA file")
    copy = _copy_of_the_kit(tmp_path)
    _add_the_task(copy, CUDA_REGISTRY_ENTRY, CUDA_FILES)
    python = sys.executable

    made = _run(["make", "starter", f"PY={python}"], copy)
    assert made.returncode == 0, f"make starter failed:\n{made.stdout[-3000:]}{made.stderr[-3000:]}"
    changed = {line[3:] for line in _run(["git", "status", "--porcelain", "-uall"], copy).stdout.splitlines()}
    hand_written = {"assignment/tasks.toml", *CUDA_FILES}
    assert changed == hand_written | {f"starter/{CUDA_FILE}"}, (
        f"adding a CUDA task touched {sorted(changed - {f'starter/{CUDA_FILE}'})} (want the seven files "
        f"{sorted(hand_written)}) and generated {sorted(changed - hand_written)}"
    )

    for impl in ("solutions", "starter"):  # the new file alone: the others' builds are make check-cuda's
        built = _run([python, "-m", "assignment.cuda.check_all", f"{impl}/{CUDA_FILE}", "--arch", "sm_80"], copy)
        assert built.returncode == 0 and CUDA_FILE in built.stdout, (
            f"make check-cuda on {impl}/:\n{built.stdout[-3000:]}{built.stderr[-3000:]}"
        )

    refused = _run([python, "-c", COMPOSED], copy, IMPL="starter")
    assert refused.returncode == 0 and "refused:" in refused.stdout, (
        f"the new wrapper in Kernels, on the starter:\n{refused.stdout[-3000:]}{refused.stderr[-3000:]}"
    )

    # the region check anywhere; on a GPU host also the value check, once per public shape of the entry
    public_shapes = tomllib.loads(CUDA_REGISTRY_ENTRY)["task"][0]["shapes"]["public"]
    gpu_checks = len(public_shapes) if torch.cuda.is_available() else 0
    _public_tests_pass_then_stop_at_the_todo(copy, todos=1 + gpu_checks)
