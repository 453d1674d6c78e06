"""The marker syntax of the kit's files, in one place: what the starter generator writes and the splice reads.

In a solution file (``#`` comments in Python, ``//`` in CUDA):

    BEGIN SOLUTION t4: description   ...   END SOLUTION     a region the student writes
    PLAN: ...                                                 kept in the starter (the plan)
    STUB: code                                                kept in the starter as code, after the failure
    BEGIN OPEN t3: description       ...   END OPEN         the open level's block (assignment/starter.py)
    GOAL: ...                                                 kept in the open starter (the goal)
    BEGIN GUIDED t3                  ...   END GUIDED       text for the guided level only

In a starter or a student's CUDA file, a region reads ``// TODO(t4): description`` ... ``// END TODO(t4)``: the
lines between them are what the kit splices into its own file (assignment/cuda/regions.py). Reading a file's
code itself (a stub left in code, not in a comment) is the compiler's job (assignment/cuda/reading.py).
"""

from __future__ import annotations

import re

COMMENT_FOR_SUFFIX = {".py": "#", ".cu": "//", ".cuh": "//", ".h": "//", ".cpp": "//"}
TASK_ID = re.compile(r"t[1-9][0-9]*")



def _begin(word: str) -> re.Pattern:
    """``BEGIN <word> t4: description`` (the task and the description may be missing: the readers say what is
    wrong then)."""
    return re.compile(rf"^(?P<indent>\s*)(?P<c>#|//)\s*BEGIN {word}\b\s*(?P<task>\S*?)\s*(?::\s*(?P<desc>.*?))?\s*$")


def _end(word: str) -> re.Pattern:
    return re.compile(rf"^\s*(?P<c>#|//)\s*END {word}\b.*$")


BEGIN_SOLUTION, END_SOLUTION = _begin("SOLUTION"), _end("SOLUTION")
BEGIN_OPEN, END_OPEN = _begin("OPEN"), _end("OPEN")
PLAN = re.compile(r"^\s*(?:#|//)\s*PLAN:")
STUB = re.compile(r"^(?P<indent>\s*)(?:#|//)\s*STUB:\s?(?P<code>.*)$")
BEGIN_GUIDED = re.compile(r"^\s*(?P<c>#|//)\s*BEGIN GUIDED\b\s*(?P<task>\S*?)\s*(?::.*)?$")
END_GUIDED = _end("GUIDED")
GOAL = re.compile(r"^(?P<indent>\s*)(?P<c>#|//)\s*GOAL:(?P<text>.*)$")

# A CUDA region in a starter or student file.
TODO_BEGIN = re.compile(r"^(?P<indent>\s*)//\s*TODO\((?P<task>t[0-9]+)\):\s*(?P<desc>.*?)\s*$")
TODO_END = re.compile(r"^\s*//\s*END TODO\((?P<task>t[0-9]+)\)\s*$")
END_TODO = "END TODO({task})"  # the text of a CUDA region's closing marker

# The message of a Python stub, NotImplementedError("t1: ... (TODO(t1) in t1_attention.py)"); the kit's checks
# that refuse to launch a CUDA file with KIT_TODO left raise the same form.
STUB_MESSAGE = re.compile(r"^(t[0-9]+): ")


def todo_marker(comment: str, task: str, description: str) -> str:
    """The line that opens a stub in a starter file (without indent)."""
    return f"{comment} TODO({task}): {description}"


def end_todo_marker(comment: str, task: str) -> str:
    """The line that closes a CUDA stub (without indent)."""
    return f"{comment} {END_TODO.format(task=task)}"
