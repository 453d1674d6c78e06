"""The kernels as students, tests, benchmarks and the grader call them: ``Kernels``, every task's wrappers
(``TaskCode.kernels`` in ``assignment/tasks/``: its methods, e.g. ``softmax``) over the generic half in
``assignment/cuda/wrappers.py`` (argument checks, building, loading, launching), and each wrapper as a function of
this module that runs the implementation ``IMPL`` names::

    from assignment import kernels

    y = kernels.softmax(x)  # IMPL's kernels
    reference = kernels.Kernels("solutions")  # another implementation's (the benchmark loads both)

It sits above the task modules (tests/kit/test_layout.py): it imports every one of them, and they import the generic
half, never this module.
"""

from __future__ import annotations

import functools
import pkgutil

from assignment import tasks
from assignment.cuda.wrappers import KernelsBase, under_test
from assignment.impl import ImplError, student_dir


def _task_wrappers() -> tuple[type, ...]:
    """Each task's wrapper class, once each, in task order. Found by listing the task modules, not through the
    registry: the grader's worker carries this package without the registry's TOML."""
    found: list[type] = []
    for info in sorted(pkgutil.iter_modules(tasks.__path__), key=lambda m: (len(m.name), m.name)):
        wrappers = tasks.code(info.name).kernels if tasks.is_task_id(info.name) else None
        if wrappers is not None and wrappers not in found:
            found.append(wrappers)
    return tuple(found)


TASK_WRAPPERS = _task_wrappers()


class Kernels(*TASK_WRAPPERS, KernelsBase):
    """The kernels of one implementation directory (None: whatever ``IMPL`` names, looked up per call): every task's
    wrappers. ``kit``: an instructor's experiment, a folder of whole variants of the kit's files (``KernelsBase``)."""


# The wrappers' names (softmax, flash_attention, ...), each also a function of this module: found once, so that a
# module-level call (the model's attention, once per layer and token) only looks its name up.
ENTRY_POINTS = tuple(
    sorted(
        name
        for wrappers in TASK_WRAPPERS
        for name, value in vars(wrappers).items()
        if not name.startswith("_") and callable(value)
    )
)


def __getattr__(name: str):
    """Each wrapper as a function of the implementation under test (``IMPL``'s): ``kernels.softmax(x)`` is
    ``Kernels().softmax(x)``."""
    if name in ENTRY_POINTS:
        return functools.partial(_call_under_test, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r} (its wrappers: {', '.join(ENTRY_POINTS)})")


def _call_under_test(name: str, *args, **kwargs):
    return getattr(under_test(Kernels), name)(*args, **kwargs)


def reference_kernels() -> Kernels | None:
    """The reference solutions' kernels, or None in a student bundle (it has no solutions/)."""
    try:
        return Kernels(student_dir("solutions"))
    except ImplError:
        return None
