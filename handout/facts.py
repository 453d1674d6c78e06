"""What the course-level texts quote about the kit's toolchain, read from the files that define it.

The prerequisites and debugging chapters name the architectures ``make check-cuda`` compiles for, the
nvcc flags of the kit's builds, the CUDA toolkits, Python and PyTorch versions the kit supports, the
course's GPU and the grader's build limit. Each lives in one file of the kit (``KitFacts`` says which);
the texts quote them as ``{{ kit.check_archs | join(", ") }}`` so that they are never retyped. Nothing here
imports torch or runs nvcc: the handout renders on any machine.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from assignment.registry import Registry

import tomllib

REPO_ROOT = Path(__file__).resolve().parent.parent
TOOLCHAIN_SOURCE = REPO_ROOT / "assignment" / "cuda" / "toolchain.py"
PYPROJECT = REPO_ROOT / "pyproject.toml"
BOOTSTRAP = REPO_ROOT / "assignment" / "bootstrap.sh"


class FactError(ValueError):
    """A fact the handout quotes could not be read; the message names the file."""


def literal_constants(path: Path, names: tuple[str, ...]) -> dict:
    """Module-level ``NAME = <literal>`` assignments of a Python file, read without importing it."""
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in names:
            found[target.id] = ast.literal_eval(node.value)
    missing = [name for name in names if name not in found]
    if missing:
        raise FactError(f"{path}: no module-level literal {', '.join(missing)} (the handout quotes it)")
    return found


@dataclass(frozen=True)
class KitFacts:
    check_archs: tuple[str, ...]  # assignment/cuda/toolchain.py CHECK_ARCHS: what make check-cuda compiles for
    nvcc_flags: tuple[str, ...]  # toolchain.py NVCC_FLAGS: every build of a task's file
    toolkit_majors: tuple[int, ...]  # toolchain.py TOOLKIT_MAJORS
    python: str  # pyproject.toml requires-python, as "3.10"
    torch_floor: str  # pyproject.toml's torch>=X
    torch_bootstrap: str  # the torch version assignment/bootstrap.sh installs where none is importable
    course_gpus: tuple[str, ...]  # the GPUs the timing rubric's student targets were measured on (registry)
    build_timeout_s: float  # grader/grade/config.py: the grader's limit for building one task's CUDA files

    @property
    def toolkits(self) -> str:
        """'12.x or 13.x'."""
        return " or ".join(f"{major}.x" for major in self.toolkit_majors)

    @property
    def sm_numbers(self) -> tuple[str, ...]:
        """('8.0', '9.0') for ('sm_80', 'sm_90a'): compute capabilities as NVIDIA's tables write them."""
        numbers = (arch[3:].rstrip("abcdefghijklmnopqrstuvwxyz") for arch in self.check_archs)
        return tuple(f"{number[:-1]}.{number[-1]}" for number in numbers)


def _version_after(text: str, pattern: str, where: Path) -> str:
    found = re.search(pattern, text)
    if not found:
        raise FactError(f"{where}: no match for {pattern!r} (the handout quotes it)")
    return found.group(1)


def kit_facts(
    registry: Registry,
    toolchain_source: Path = TOOLCHAIN_SOURCE,
    pyproject: Path = PYPROJECT,
    bootstrap: Path = BOOTSTRAP,
) -> KitFacts:
    from grader.grade.config import GradeConfig  # a plain dataclass: its defaults are stated there, once

    toolchain = literal_constants(toolchain_source, ("CHECK_ARCHS", "NVCC_FLAGS", "TOOLKIT_MAJORS"))
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    torch_dep = next((d for d in project["dependencies"] if re.match(r"torch\s*>=", d)), "")
    gpus = sorted({rule.student.gpu for task in registry.available for rule in task.timing if rule.student})
    return KitFacts(
        check_archs=tuple(toolchain["CHECK_ARCHS"]),
        nvcc_flags=tuple(toolchain["NVCC_FLAGS"]),
        toolkit_majors=tuple(toolchain["TOOLKIT_MAJORS"]),
        python=_version_after(project["requires-python"], r">=\s*([\d.]+)", pyproject),
        torch_floor=_version_after(torch_dep, r">=\s*([\d.]+)", pyproject),
        torch_bootstrap=_version_after(bootstrap.read_text(encoding="utf-8"), r"torch==([\d.]+)", bootstrap),
        course_gpus=tuple(gpus),
        build_timeout_s=GradeConfig().build_timeout_s,
    )
