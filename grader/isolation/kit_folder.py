"""What the sandbox mounts at /kit for a sandboxed worker (grader/isolation/client.py starts it): worker.py, and for a
worker whose student file is driven by kit code (a KV cache the kit's model drives) the kit's model package, the
driver files its task hands over, CUDA wrappers, every task's code, the shipped checkpoint and, on a GPU, the
libraries built from ``IMPL``'s CUDA files. Nothing else of the grader's.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from functools import cache
from pathlib import Path

import assignment.model as model_package
from assignment.model import DEFAULT_CHECKPOINT

WORKER_SOURCE = Path(__file__).resolve().parent / "worker.py"
MODEL_PACKAGE = Path(model_package.__file__).resolve().parent
ASSIGNMENT = MODEL_PACKAGE.parent
# What `from assignment import kernels` needs (all shipped to students): the composed wrappers, the generic half they
# stand on, and their imports; every task module beside them (worker_kit_dir), whose wrappers they compose.
CUDA_WRAPPER_FILES = (
    "kernels.py",
    "impl.py",
    "registry.py",
    "registry_schema.py",
    "registry_tasks.py",
    "registry_course.py",
    "registry_keys.py",
    "registry_forms.py",
    "cuda/__init__.py",
    "cuda/compiler.py",
    "cuda/confine.py",
    "cuda/reading.py",
    "cuda/toolchain.py",
    "cuda/wrappers.py",
    "checks.py",
    "testing.py",
)
CHECKPOINT_IN_KIT = DEFAULT_CHECKPOINT.relative_to(MODEL_PACKAGE.parents[1])  # the same place under /kit
MODEL_FILES_KEPT_OUT = ("scripted.py",)  # the scripted test model: its logits live in the checker only (served.py)


def driver_name(path: str | Path) -> str:
    """The module name a request gives the driver file ``path``: its stem (the worker loads ``<name>.py`` beside
    itself, and only a name its config lists)."""
    name = Path(path).stem
    if not name.isidentifier() or Path(path).name == WORKER_SOURCE.name or Path(path).suffix != ".py":
        raise ValueError(f"a kit driver is a Python file named as a module, not worker.py: {path}")
    return name


@cache
def worker_kit_dir(kernels: tuple[str, ...] = (), gpu: bool = False, drivers: tuple[str, ...] = ()) -> Path:
    """A private folder with what the sandbox mounts at /kit: worker.py. The kit's models and tokenizers are served
    by the checker (served.py), so a plain worker gets nothing else: no model code, no weights, no scripted model.
    With ``drivers`` (kit files of scenarios that run the kit's model around a student's class, each copied beside
    worker.py, where its scenarios find the checkpoint and the libraries) or ``kernels`` (CUDA files): the kit's
    model package but the scripted test model, the shipped checkpoint, its CUDA wrappers and, for a GPU worker, the
    libraries built from those files of ``IMPL`` (all shipped to students but the drivers; not the grader's
    package)."""
    folder = Path(tempfile.mkdtemp(prefix="kit-worker-"))
    shutil.copyfile(WORKER_SOURCE, folder / "worker.py")
    (folder / "worker.py").chmod(0o644)
    package = folder / "assignment"
    for source in map(Path, drivers):
        shutil.copyfile(source, folder / f"{driver_name(source)}.py")
    if kernels or drivers:
        (package / "model").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        for source in MODEL_PACKAGE.glob("*.py"):
            if source.name not in MODEL_FILES_KEPT_OUT:
                shutil.copyfile(source, package / "model" / source.name)
        if DEFAULT_CHECKPOINT.is_dir():
            shutil.copytree(DEFAULT_CHECKPOINT, folder / CHECKPOINT_IN_KIT)
        (package / "cuda").mkdir()
        for name in CUDA_WRAPPER_FILES:
            shutil.copyfile(ASSIGNMENT / name, package / name)
        (package / "tasks").mkdir()  # every task's code: the wrappers are composed from them
        for source in (ASSIGNMENT / "tasks").glob("*.py"):
            shutil.copyfile(source, package / "tasks" / source.name)
        if gpu:
            _copy_libraries(folder / "libraries", kernels)
    for path in (folder, *folder.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _copy_libraries(folder: Path, files: tuple[str, ...]) -> None:
    """Build (cache hits when the grader's prepare step built them) the CUDA files of ``IMPL`` the worker's kit
    wrappers run, and copy each one's device module (the cubin: device code only) and the kit's host library
    that launches it (built from the kit's own copy of the file) with a manifest: the two files and the TODO
    lines by task. The worker gets no source and no compiler."""
    from assignment.cuda import compiler, confine, reading, regions
    from assignment.impl import ImplError, student_file

    folder.mkdir()
    manifest: dict[str, dict] = {}
    for name in files:
        try:
            source = student_file(name)
            built = compiler.build_module(source, quiet=True)
            host = compiler.build_library(built.kit, built.arch, quiet=True)
        except (
            ImplError,
            compiler.CudaCompileError,
            compiler.CudaToolkitError,
            regions.RegionError,
            reading.ReadingError,
            confine.IsolationUnavailable,
        ) as exc:
            manifest[name] = {"error": str(exc).splitlines()[0][:300]}
            continue
        shutil.copyfile(built.path, folder / f"{source.stem}.cubin")
        shutil.copyfile(host.path, folder / f"{source.stem}.so")
        todo = compiler.todo_lines(compiler.read_student_text(source))
        manifest[name] = {
            "module": f"{source.stem}.cubin",
            "host": f"{source.stem}.so",
            "todo": {task: list(lines) for task, lines in todo.items()},
        }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
