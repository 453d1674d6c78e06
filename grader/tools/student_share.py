"""How much of a task the student writes, and how much of it the starter's text decides for them, per level.

The issue behind this tool: plans that name the exact library call leave a student nothing to decide. For each
task and each scaffolding level it has (guided, and open where its solution files have OPEN blocks) it reports:

* **lines**: the solution's code lines inside the task's regions at that level (what the student writes), against
  every code line of the task's files (blank lines, comments, markers and docstrings are not code);
* **plan**: the lines of text the stubs keep (their PLAN lines; the OPEN blocks' own at the open level) and how many
  of them are numbered steps (the Python tasks' plans number theirs; the CUDA plans are prose, counted 0);
* **decisions**: the distinct functions and methods the solution calls in those lines (``torch.where``,
  ``.masked_fill``, ``range``, ``__shfl_xor_sync`` ...), each one a choice of how to compute something, and how
  many of them the starter's text names: the stubs' plan lines of the task (``plan``), or any comment or
  docstring of the starter file (``text``: the docstrings state contracts, which may name a call on purpose, as
  t7's ``torch.multinomial``). ``decided`` is what is left to the student: calls no text of the starter names.

    python -m grader.tools.student_share                 # every task, every level it has
    python -m grader.tools.student_share --task t1 --task t7
    python -m grader.tools.student_share --json share.json
    python -m grader.tools.student_share --solutions DIR     # another revision's solution files (git show ... > DIR/...)

A call counts as named when its name appears as a word in the text, so the figures are an upper bound on what a
plan dictates (a plan that says "the maximum" does not name ``amax``; one that says "torch.topk" names ``topk``).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import keyword
import re
import sys
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path

from assignment.markers import PLAN, apply_levels, open_tasks, strip_solutions, task_levels
from assignment.registry import Registry, load_registry

REPO_ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = REPO_ROOT / "solutions"
_TODO = re.compile(r"^\s*(?:#|//)\s*TODO\((?P<task>t[0-9]+)\):")
_STEP = re.compile(r"^\s*(?:#|//)\s*PLAN:\s*[0-9]+\.")
_CUDA_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;()]*>)?\s*\(")
_CUDA_NOT_CALLS = {
    "if", "for", "while", "switch", "return", "sizeof", "alignof", "decltype", "static_cast", "reinterpret_cast",
    "const_cast", "static_assert", "defined", "__launch_bounds__", "__align__", "catch", "constexpr",
}  # fmt: skip


@dataclass(frozen=True)
class Share:
    task: str
    level: str
    files: tuple[str, ...]
    student_lines: int  # code lines inside the task's regions
    code_lines: int  # code lines of the task's files
    stubs: int  # TODO regions the student fills
    plan_lines: int  # PLAN lines of those stubs (the OPEN blocks' own at the open level)
    steps: int  # numbered steps among them ("PLAN: 2. ...": the Python plans number theirs, the CUDA ones are prose)
    calls: tuple[str, ...]  # distinct functions and methods the solution calls in the student's lines
    named_by_plan: tuple[str, ...]  # ... that the stubs' plan lines name
    named_in_text: tuple[str, ...]  # ... that any comment or docstring of the starter names (plan included)

    @property
    def share(self) -> float:
        return self.student_lines / self.code_lines if self.code_lines else 0.0

    @property
    def decided(self) -> int:
        return len(self.calls) - len(self.named_in_text)


def _python_lines(text: str) -> tuple[set[int], set[int], dict[int, list[str]]]:
    """(code lines, prose lines, calls per line) of Python source: prose is comments and docstrings."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first.value, "value", None), str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    code: set[int] = set()
    prose = set(docstrings)
    calls: dict[int, list[str]] = {}
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING}
    for i, tok in enumerate(tokens):
        if tok.type in skip:
            continue
        if tok.type == tokenize.COMMENT:
            prose.add(tok.start[0])
            continue
        if tok.start[0] in docstrings:
            continue
        code.update(range(tok.start[0], tok.end[0] + 1))
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string) and following and following.string == "(":
            calls.setdefault(tok.start[0], []).append(tok.string)
    return code, prose, calls


def _strip_cuda_comments(text: str) -> tuple[list[str], set[int]]:
    """Each line of CUDA source without its comments, and the lines that hold a comment."""
    out, prose, in_block = [], set(), False
    for number, line in enumerate(text.splitlines(), start=1):
        kept, i = [], 0
        while i < len(line):
            if in_block:
                end = line.find("*/", i)
                prose.add(number)
                if end < 0:
                    i = len(line)
                    continue
                in_block, i = False, end + 2
            elif line.startswith("//", i):
                prose.add(number)
                break
            elif line.startswith("/*", i):
                in_block, i = True, i + 2
            else:
                kept.append(line[i])
                i += 1
        out.append("".join(kept))
    return out, prose


def _cuda_lines(text: str) -> tuple[set[int], set[int], dict[int, list[str]]]:
    stripped, prose = _strip_cuda_comments(text)
    code, calls = set(), {}
    for number, line in enumerate(stripped, start=1):
        if line.strip():
            code.add(number)
            names = [n for n in _CUDA_CALL.findall(line) if n not in _CUDA_NOT_CALLS]
            if names:
                calls[number] = names
    return code, prose, calls


def _reading(text: str, filename: str) -> tuple[set[int], set[int], dict[int, list[str]]]:
    return _python_lines(text) if filename.endswith(".py") else _cuda_lines(text)


def _prose_text(text: str, filename: str) -> str:
    _, prose, _ = _reading(text, filename)
    lines = text.splitlines()
    return "\n".join(lines[n - 1] for n in sorted(prose))


def _plan_text(starter: str, task: str) -> tuple[str, int]:
    """The PLAN lines that follow the task's TODO lines in a starter, and how many there are."""
    plans, inside = [], False
    for line in starter.splitlines():
        todo = _TODO.match(line)
        if todo:
            inside = todo["task"] == task
            continue
        if inside and PLAN.match(line):
            plans.append(line)
        else:
            inside = False
    return "\n".join(plans), len(plans)


def _named(names: set[str], text: str) -> set[str]:
    """The names ``text`` names as code: as a word when the name cannot be an English one (``masked_fill``,
    ``__syncthreads``, ``ValueError``), else only as ``name(``, ``.name`` or a backticked ``name`` (so the word
    "max" in "the row max" does not name ``max``, and "cast to float32" does not name ``.to``)."""
    found = set()
    for n in names:
        word = re.escape(n)
        if not n.isalpha() or not n.islower():
            pattern = rf"(?<!\w){word}(?!\w)"
        else:
            pattern = rf"(?<!\w){word}\(|\.{word}(?!\w)|`{word}`"
        if re.search(pattern, text):
            found.add(n)
    return found


def measure(task_id: str, level: str, registry: Registry, solutions: Path = SOLUTIONS) -> Share:
    task = registry.task(task_id)
    levels = {**task_levels(registry), task_id: level}
    student_lines = code_lines = stubs = plan_lines = steps = 0
    calls: set[str] = set()
    plan_prose, file_prose = [], []
    for name in task.files:
        levelled = apply_levels((solutions / name).read_text(encoding="utf-8"), name, levels)
        starter, regions = strip_solutions(levelled, name, levels={})
        code, _, called = _reading(levelled, name)
        code_lines += len(code)
        for region in (r for r in regions if r.task == task_id):
            stubs += 1
            inside = set(range(region.begin_line + 1, region.end_line)) & code
            student_lines += len(inside)
            calls |= {c for n in inside for c in called.get(n, ())}
        plan, count = _plan_text(starter, task_id)
        plan_lines += count
        steps += sum(1 for line in plan.splitlines() if _STEP.match(line))
        plan_prose.append(plan)
        file_prose.append(_prose_text(starter, name))
    by_plan = _named(calls, "\n".join(plan_prose))
    in_text = _named(calls, "\n".join(file_prose)) | by_plan
    return Share(
        task_id,
        level,
        task.files,
        student_lines,
        code_lines,
        stubs,
        plan_lines,
        steps,
        tuple(sorted(calls)),
        tuple(sorted(by_plan)),
        tuple(sorted(in_text)),
    )


def levels_of(task_id: str, registry: Registry, solutions: Path = SOLUTIONS) -> list[str]:
    """The levels a task has: guided always, open when a file of it has an OPEN block of it."""
    texts = [(solutions / name).read_text(encoding="utf-8") for name in registry.task(task_id).files]
    return ["guided"] + (["open"] if any(task_id in open_tasks(t) for t in texts) else [])


def table(shares: list[Share]) -> str:
    head = (
        f"{'task':<5}{'level':<8}{'stubs':>6}{'plan':>6}{'steps':>6}  {'student lines':>13} / {'code':<5}{'share':>7}  "
        f"{'calls':>5}{'by plan':>8}{'in text':>8}{'decided':>8}"
    )
    rows = [head, "-" * len(head)]
    for s in shares:
        rows.append(
            f"{s.task:<5}{s.level:<8}{s.stubs:>6}{s.plan_lines:>6}{s.steps:>6}  {s.student_lines:>13} / {s.code_lines:<5}"
            f"{s.share:>7.0%}  {len(s.calls):>5}{len(s.named_by_plan):>8}{len(s.named_in_text):>8}{s.decided:>8}"
        )
    rows.append("")
    for s in shares:
        if s.named_in_text:
            rows.append(
                f"{s.task} {s.level}: named by the plan: {', '.join(s.named_by_plan) or '-'}; "
                f"elsewhere in the starter's text: {', '.join(sorted(set(s.named_in_text) - set(s.named_by_plan))) or '-'}"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", action="append", default=None, help="only this task (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS, help="the solution files to measure")
    args = parser.parse_args(argv)
    registry = load_registry()
    tasks = args.task or [t.id for t in registry.tasks if t.available]
    shares = [
        measure(t, level, registry, args.solutions) for t in tasks for level in levels_of(t, registry, args.solutions)
    ]
    print(table(shares))
    if args.json:
        rows = [{**asdict(s), "share": round(s.share, 4), "decided": s.decided} for s in shares]
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
