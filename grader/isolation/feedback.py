"""What a student may be told when a call of their code fails in the worker.

The worker runs in the student's process, so every word of its error replies may be the student's: an exception
message, a traceback's lines and line numbers, an exception's class name, a tripwire's name, an exit code, even
the kind of error (the student's code can write frames on the channel). With the hidden inputs in hand, a student
who wants them can put them into any of these ("RuntimeError: shape [3, 37, 129] ...", a class named after the
prompt, a line number that is the prompt's length) and read them back from their feedback, then hard-code the
answers for their (reproducible) hidden inputs.

So the feedback keeps to what the checker can vouch for, and the full text goes to the instructor only
(``str(failure)`` and ``detail``, which reach grading.json, never results.json):

* the kind of failure, and an exception's type when it is one the checker knows by name (Python's and PyTorch's
  own, and the kit's), else "an exception of a class of your own"; a CUDA fault by the driver's own phrase;
* the kit's own messages: a starter stub's exact text, a tripwire's name when it is one the task forbids, what a
  kit object served by the checker refused (served.py: its message, numbers masked) and the checker's own texts;
* a failed import's message and last traceback line, while no call has yet sent this worker any data (nothing
  hidden can be in it then: see client.Worker._import).
"""

from __future__ import annotations

import ast
import builtins
import re
import signal
from functools import cache

import torch

from grader.isolation.worker import TRIPWIRE_HOMES

# Exception classes the checker knows by name: a student's class could be named after a hidden input.
KNOWN_EXCEPTIONS = frozenset(
    [name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)]
    + [name for name, value in vars(torch).items() if isinstance(value, type) and issubclass(value, BaseException)]
    + ["GraphCaptureError", "CheckpointError", "CudaCompileError", "ImplError", "ForbiddenOperation"]
)
# Type names a result may be said to have: Python's builtin types, and a few of PyTorch's and the standard library's.
KNOWN_TYPES = frozenset(
    [name for name, value in vars(builtins).items() if isinstance(value, type)]
    + [
        "NoneType",
        "generator",
        "function",
        "method",
        "module",
        "Tensor",
        "Parameter",
        "Generator",
        "device",
        "dtype",
        "Size",
        "ndarray",
        "deque",
        "OrderedDict",
        "defaultdict",
    ]
)
# Signals a crash is named by (number and name): the student's code can send itself any signal, and a handful of
# well-known ones tells little; any other is said as "a signal", an exit code not at all.
CRASH_SIGNALS = {
    signal.SIGSEGV: "a segmentation fault",
    signal.SIGABRT: "an abort",
    signal.SIGBUS: "a bus error",
    signal.SIGFPE: "a floating-point exception",
    signal.SIGILL: "an illegal instruction",
    signal.SIGKILL: "killed",
}
# The CUDA driver's own phrases for a fault that poisons the context (a fixed few: safe to say). The checker
# (grader/grade/checker_plugin.py) ends a hidden suite on them.
CUDA_FAULT = re.compile(
    r"illegal memory access|illegal instruction|misaligned address|unspecified launch failure|"
    r"device-side assert|an illegal|launch timed out|cudaErrorLaunchFailure|CUDA error: unspecified",
    re.IGNORECASE,
)
RESULT_REASONS = {
    "not_an_iterator": "did not return an iterator: write it as a generator that yields each piece as soon as it "
    "is ready",
    "unreadable": "returned something the grader cannot read (return tensors, numbers, strings, or lists, tuples "
    "and dicts of them)",
}
_STUB_TASK = re.compile(r"^(t[0-9]+): ")


def exception_said(name: object) -> str:
    """An exception's type as the feedback may name it."""
    name = str(name)
    return name if name in KNOWN_EXCEPTIONS else "an exception of a class of your own"


def type_said(qualified: str) -> str:
    """A result's type (``module.qualname``) as the feedback may name it, with its article ("a list")."""
    name = str(qualified).rsplit(".", 1)[-1]
    if name not in KNOWN_TYPES:
        return "an object of a class of your own"
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


@cache
def stub_messages() -> frozenset[str]:
    """The exact messages of the starter's ``raise NotImplementedError(...)`` stubs, at every scaffolding level."""
    from grader.authoring.starter import LEVELS, REPO_ROOT, levels_for, render_starter

    messages: set[str] = set()
    for level in (None, *LEVELS):
        try:
            files = render_starter(REPO_ROOT / "solutions", levels=levels_for(level))
        except Exception:  # noqa: BLE001 - no solutions here (a bundle): the stubs are then said by task only
            continue
        for name, text in files.items():
            if name.endswith(".py") and isinstance(text, str):
                messages |= _raised_not_implemented(text)
    return frozenset(messages)


def _raised_not_implemented(text: str) -> set[str]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    return {
        node.exc.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Raise)
        and isinstance(node.exc, ast.Call)
        and isinstance(node.exc.func, ast.Name)
        and node.exc.func.id == "NotImplementedError"
        and node.exc.args
        and isinstance(node.exc.args[0], ast.Constant)
        and isinstance(node.exc.args[0].value, str)
    }


def not_implemented_said(message: str) -> str:
    """A stub's own text; for any other NotImplementedError, the task it names (a TODO left in the kit's CUDA
    files) or nothing."""
    if message in stub_messages():
        return message
    task = _STUB_TASK.match(message)
    return f"{task[1]}: not implemented yet (a TODO({task[1]}) is left)" if task else "not implemented yet"


def forbidden_said(name: str, forbidden: tuple[str, ...]) -> str:
    """A tripwire's name (``home.name``) when it is one of the task's forbidden operations."""
    home, _, operation = str(name).rpartition(".")
    if home in TRIPWIRE_HOMES and operation in forbidden:
        return f"called {name}, which this task forbids"
    return "called an operation this task forbids"


def told(
    kind: str,
    error: dict,
    filename: str,
    function: str,
    exposed: bool,
    forbidden: tuple[str, ...],
    refusal=None,
    offers: str = "",
) -> str:
    """What a student is told about a worker's error reply of ``kind`` (``refusal``: the served.Refusal of the kit
    object whose error the student's code raised, if any; ``offers``: what the call's served kit objects offer,
    said with an AttributeError, whose likely cause is asking one of them for something else)."""
    type_name, message = exception_said(error.get("type")), str(error.get("message", ""))
    if kind == "import":
        if exposed:
            return f"{type_name} while importing {filename}"
        last = str(error.get("traceback", "")).strip().splitlines()[-1:]
        return f"{error.get('type')}: {message}" + (f" | {last[0].strip()}" if last else "")
    if kind == "exception":
        fault = CUDA_FAULT.search(message)
        return (
            f"{type_name} raised by your code"
            + (f" (a CUDA fault: {fault[0].lower()})" if fault else "")
            + (f"; {refusal.feedback()}" if refusal is not None else "")
            + (f"; {offers}" if offers and error.get("type") == "AttributeError" else "")
        )
    if kind == "not_implemented":
        return not_implemented_said(message)
    if kind == "forbidden":
        return forbidden_said(message, forbidden)
    if kind == "missing":
        return f"{filename} has no function {function}"
    if kind == "result":
        reason = RESULT_REASONS.get(str(error.get("reason")), RESULT_REASONS["unreadable"])
        return f"{function or 'the function'} {reason}"
    if kind == "kit":
        return "the grader's worker could not set up the call (an instructor error: the instructor has the details)"
    return "the worker broke the grader's protocol"
