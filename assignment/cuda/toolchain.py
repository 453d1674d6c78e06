"""The CUDA toolchain the kit builds with: nvcc, the architectures, the kit's headers and the flags every build of a
task's file shares. The bottom of assignment/cuda/: the reading of a file (reading.py) and its builds (compiler.py)
both stand on it, and it imports neither."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import lru_cache, cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = PACKAGE_DIR / "include"
KIT_HEADER = INCLUDE_DIR / "kit.cuh"
NVCC_FLAGS = ("-O3", "-std=c++17", "-lineinfo")  # every build of a task's file: optimised, with line numbers
CHECK_ARCHS = ("sm_80", "sm_90a")  # sm_90 GPUs are built for sm_90a (normalize_arch)
# The CUDA toolkits (major versions) the kit is built and tested with; the handout quotes them.
TOOLKIT_MAJORS = (12, 13)


class CudaToolkitError(RuntimeError):
    """nvcc is missing, or no architecture can be determined."""


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


@lru_cache(maxsize=1)
def nvcc_version() -> str:
    nvcc = nvcc_path()
    if nvcc is None:
        versions = " or ".join(f"{major}.x" for major in TOOLKIT_MAJORS)
        raise CudaToolkitError(f"nvcc not found on PATH: install the CUDA toolkit ({versions}) or add its bin/ to PATH")
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout.strip()


@lru_cache(maxsize=1)
def nvcc_real_path() -> str:
    """nvcc itself (a wrapper script on PATH resolved to the toolkit's binary): what the sandbox runs, and whose
    toolkit it mounts."""
    nvcc_version()
    dry = subprocess.run(
        [nvcc_path(), "--dryrun", "-cubin", "-arch=sm_80", "-x", "cu", os.devnull, "-o", os.devnull],
        capture_output=True,
        text=True,
    )
    for line in (dry.stdout + dry.stderr).splitlines():  # "#$ _HERE_=/usr/local/cuda-13.0/bin"
        if line.startswith("#$ _HERE_="):
            candidate = Path(line.split("=", 1)[1].strip()) / "nvcc"
            if candidate.is_file():
                return str(candidate.resolve())
    return os.path.realpath(nvcc_path())


def normalize_arch(arch: str) -> str:
    """'sm_80', '80', '8.0' or 'compute_80' -> 'sm_80'; Hopper's 'sm_90' (or '90', '9.0') -> 'sm_90a'.

    The kit builds sm_90 GPUs' code for sm_90a, the target with Hopper's own instructions (wgmma, setmaxnreg: t9).
    Its machine code runs on every sm_90 GPU, as sm_90's does, and on no other, as a cubin for sm_90 would not."""
    text = arch.strip().lower()
    match = re.fullmatch(r"(?:sm_|compute_)?(\d+)\.?(\d)?([a-z]?)", text)
    if not match:
        raise CudaToolkitError(f"KIT_CUDA_ARCH={arch!r} is not an architecture (expected e.g. sm_80 or sm_90)")
    major, minor, suffix = match.groups()
    number = f"{major}{minor or ''}"
    return f"sm_{number}{suffix or ('a' if number == '90' else '')}"


def detect_arch() -> str:
    """The architecture to build for: $KIT_CUDA_ARCH, else the current GPU's."""
    if os.environ.get("KIT_CUDA_ARCH"):
        return normalize_arch(os.environ["KIT_CUDA_ARCH"])
    import torch

    if not torch.cuda.is_available():
        raise CudaToolkitError(
            "no CUDA GPU visible to PyTorch; set KIT_CUDA_ARCH=sm_90 (for example) to compile without one"
        )
    major, minor = torch.cuda.get_device_capability()
    return normalize_arch(f"sm_{major}{minor}")


def preprocess_arch() -> str:
    """The architecture the region rules preprocess for: the build's (``KIT_CUDA_ARCH`` or the GPU's), else the
    first one ``make check-cuda`` checks (a host without a GPU)."""
    try:
        return detect_arch()
    except CudaToolkitError:
        return CHECK_ARCHS[0]


def include_headers() -> list[Path]:
    """The kit's headers (kit.cuh and its companions): what nvcc sees besides the file."""
    return sorted(p for p in INCLUDE_DIR.iterdir() if p.is_file())


def include_text() -> str:
    """Every kit header, named and in order: a build depends on all of them."""
    return "".join(f"{p.name}\0{p.read_text(encoding='utf-8')}\0" for p in include_headers())


HOPPER_CAPABILITY = (9, 0)  # H100 and H200: the only GPUs that run sm_90a code (a task with device = "hopper")


def hopper_absent() -> str:
    """'' when the current CUDA GPU is a Hopper GPU (compute capability 9.0: H100, H200), else why a Hopper task's
    code cannot run here (no GPU, or which GPU it is instead). Asked once per device (the model asks per layer)."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU is visible to PyTorch"
    return _hopper_absent_on(torch.cuda.current_device())


@cache
def _hopper_absent_on(device: int) -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) == HOPPER_CAPABILITY:
        return ""
    return (
        f"this GPU, {torch.cuda.get_device_name(device)}, has compute capability {major}.{minor}: the task uses Hopper's own "
        "instructions (wgmma, TMA, setmaxnreg), which only compute capability 9.0 (H100, H200) runs"
    )
