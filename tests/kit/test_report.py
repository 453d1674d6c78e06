"""make report (assignment/report/): REPORT.md and REPORT.html from the student's own runs.

The GPU steps run through a fake runner that writes what the real commands write (bench JSON made with the kit's
own producers: timing.summarize, model_bench.summarize_prompt, targets.new_standing/settle); t7 runs for real on
the CPU. Checked: the seed-000 numbers (t4/t5 speedups at both shapes, t6 TTFT/TBT and their speedups), the
targets, the generated text and the feedback answers; the cache (a rerun runs nothing; an edited student file
reruns its task's steps only); skips with their reasons (no GPU, TODOs left, a partly done task); a failed or
timed-out step's last lines; a standalone HTML page with its plots inline.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from assignment.report import cli, decode_view, render, sections, steps, views
from assignment.feedback import load_form
from assignment.model.presets import preset_config
from assignment.perf import cases, model_bench, targets
from assignment.perf.model_paths import Generation
from assignment.perf.model_table import plot_names
from assignment.perf.timing import summarize
from assignment.registry import load_registry
from assignment.markers import BEGIN_SOLUTION as _BEGIN
from assignment.markers import END_SOLUTION as _END
from assignment.markers import strip_solutions

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
GPU = {
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "name": "NVIDIA H100 80GB HBM3",
    "capability": "sm_90",
    "sm_count": 132,
    "l2_bytes": 50 * 2**20,
    "memory_bytes": 80 * 2**30,
}
NO_GPU = {"torch": torch.__version__, "cuda": None, "name": None}
COPY_GBPS = 2970.0
GENERATED = " FlashAttention keeps each tile of K and V in shared memory and never writes the score matrix."
GPU_STEPS = [
    *("bench_t2", "bench_t3", "bench_t4", "scaling_t4", "profile_t4", "bench_t5", "scaling_t5", "bench_t6"),
    *("bench_t8", "profile_t8", "bench_t9", "profile_t9"),
]
ALL_STEPS = [*GPU_STEPS, "generate_t7"]

# Seed 000's shapes: (student ms, naive PyTorch ms, SDPA ms, naive CUDA ms) per (causal, B, L).
ATTENTION_MS = {
    (False, 4, 128): (0.050, 0.1295, 0.040, 0.575),
    (False, 64, 4096): (3.0, 23.34, 4.5, 4.35),
    (True, 4, 128): (0.040, 0.070, 0.050, 0.200),
    (True, 64, 4096): (1.6, 3.44, 2.4, 3.2),
}
# t6's model table: (TTFT ms, TBT ms) per prompt and path.
MODEL_MS = {
    128: {"naive": (36.0, 31.2), "student": (10.0, 10.0), "reference": (9.0, 8.0), "transformers": (30.0, 25.0)},
    1024: {"naive": (300.0, 60.0), "student": (75.0, 12.0), "reference": (70.0, 11.0), "transformers": (150.0, 30.0)},
}
KIT_DIGEST = steps.kit_digest  # the real one (the autouse fixture below holds the kit's digest still)
PROFILE_TABLE = (
    "t4 kernel: flash_attention_forward   shape: {'B': 4}\n"
    "  kernel time                           1.234 ms   gpu__time_duration.sum\n"
    "  measured / ideal                       1.05 x"
)


# --------------------------------------------------------------------------- what the real commands write


def png() -> bytes:
    """A valid 2x2 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\0" + b"\xff\x00\x00" * 2 for _ in range(2))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def result(name: str, ms: float, flops=None, nbytes=None) -> dict:
    return summarize(name, [ms * f for f in (0.99, 1.0, 1.0, 1.01)], flops, nbytes).to_dict()


def row(label: str, timings: dict[str, float], flops=None, nbytes=None, notes=()) -> dict:
    return {
        "label": label,
        "flops": flops,
        "bytes_moved": nbytes,
        "notes": list(notes),
        "error": None,
        "results": {name: result(name, ms, flops, nbytes) for name, ms in timings.items()},
    }


def attention_rows(causal: bool) -> list[dict]:
    rows = []
    for B, H, L, d in cases.ATTENTION_SHAPES:
        flops, nbytes = cases.attention_work(B, H, L, L, d, causal)
        mine, naive, sdpa, naive_cuda = ATTENTION_MS.get((causal, B, L), (1.0, 2.0, 1.1, 1.5))
        rows.append(
            row(
                views.attention_label(B, H, L, d, causal),
                {"SDPA": sdpa, "naive pytorch": naive, "naive cuda": naive_cuda, "student": mine},
                flops,
                nbytes,
            )
        )
    return rows


def model_table() -> dict:
    config = preset_config(model_bench.PRESET)
    prompts = []
    for prompt, paths in MODEL_MS.items():
        runs = {
            name: Generation(list(range(8)), torch.tensor([[1.0, 2.0]]), ttft, [ttft], [tbt] * 8)
            for name, (ttft, tbt) in paths.items()
        }
        prompts.append(model_bench.summarize_prompt(prompt, prompt + 64, runs, config, COPY_GBPS))
    return {
        "preset": model_bench.PRESET,
        "copy_gbps": COPY_GBPS,
        "prompts": prompts,
        "sweep": [],
        "notes": [],
        "paths": {
            "naive": {"label": "naive (no cache)"},
            "student": {"label": "student (t6), CUDA graph"},
            "reference": {"label": "reference (t6), CUDA graph"},
            "transformers": {"label": "transformers (sdpa)"},
        },
    }


def standings(task_id: str) -> list[dict]:
    task, found = REGISTRY.task(task_id), []
    for rule in task.timing:
        standing = targets.new_standing(task, rule)
        speed = standing.needed[-1][1] * 1.05  # a little past full points
        targets.settle(standing, rule, speed, 1.0, speed)
        found.append(standing.to_dict())
    return found


def bench_json(task: str) -> dict:
    if task in ("t4", "t5"):
        rows = attention_rows(task == "t5")
    elif task == "t6":
        flops, nbytes = cases.decode_work(1, 32, 8, 8192, 64)
        rows = [
            row(
                "decode B1 H32 H_kv8 L8192 d64 (KV bytes/s)",
                {"naive pytorch": 0.167, "pytorch grouped": 0.27, "SDPA": 1.0, "student": 0.0521},
                flops,
                nbytes,
            )
        ]
    elif task == "t2":
        rows = [
            row(
                "softmax 65536x1024",
                {"pytorch": 0.18, "naive pytorch": 0.9, "student": 0.182},
                nbytes=8.0 * 65536 * 1024,
            )
        ]
    else:
        rows = [row("gemm 4096^3", {"cuBLAS": 2.67, "student": 3.14}, flops=2.0 * 4096**3)]
    data = {"task": task, "quick": False, "gpu": GPU, "copy_gbps": COPY_GBPS, "implementation": "x", "cases": rows}
    if task == "t6":
        data["model"] = model_table()
    data["targets"] = standings(task)
    return data


class FakeRunner:
    """Stands in for the real commands: writes their files, prints their output, remembers what it ran."""

    def __init__(self, fail: dict[str, tuple[int, str, str]] | None = None, impossible: tuple[str, ...] = ()):
        self.calls: list[str] = []
        self.fail = fail or {}
        self.impossible = impossible  # bench tasks whose run rejects a time as impossible: JSON written, exit 1

    def __call__(self, argv, *, timeout_s, env, cwd):
        module = argv[argv.index("-m") + 1].rsplit(".", 1)[-1]
        task = argv[argv.index("--task") + 1] if "--task" in argv else "t7"
        name = f"{module}_{task}"
        self.calls.append(name)
        assert argv[0] == sys.executable and Path(env["IMPL"]).is_dir() and timeout_s > 0
        if name in self.fail:
            return self.fail[name]
        out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else None
        if module == "bench":
            data = bench_json(task)
            if task in self.impossible:
                data["cases"][0]["error"] = "student: 0.0010 ms is below the physical floor: the kernel skipped work"
            (out / f"{task}.json").write_text(json.dumps(data))
            if task == "t6":
                for plot in plot_names(task):
                    (out / plot).write_bytes(png())
            return int(task in self.impossible), f"GPU: {GPU['name']}\nwrote {out / task}.json\n", ""
        if module == "scaling":
            for kind in ("time", "tflops", "roofline"):
                (out / f"{task}_{kind}.png").write_bytes(png())
            (out / f"{task}_scaling.json").write_text("{}")
            return 0, "", ""
        if module == "profile":
            return 0, PROFILE_TABLE + "\n", ""
        prompt = argv[argv.index("--prompt") + 1]
        return (
            0,
            prompt + GENERATED + "\n",
            (
                "-- prompt tokens: 28 | model calls: 1 prefill + 17 decode | TTFT 12.5 ms"
                " | time between tokens 3.20 ms | 250.0 tokens/s\n"
                "-- cuda, float32, attention reference, greedy, seed 0\n"
            ),
        )


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def fixed_kit(monkeypatch):
    """The kit's digest held still: others may edit assignment/ while the tests run (kit_digest is tested alone)."""
    monkeypatch.setattr(steps, "kit_digest", lambda root=None: "kit")


@pytest.fixture
def impl(tmp_path) -> Path:
    path = tmp_path / "impl"
    shutil.copytree(REPO / "solutions", path, ignore=shutil.ignore_patterns("__pycache__"))
    return path


def settings(tmp_path: Path, impl: Path, **options) -> steps.Settings:
    return steps.Settings(
        impl=impl, out=tmp_path / "out", build=tmp_path / "build", feedback=tmp_path / "feedback.json", **options
    )


def make(tmp_path, impl, runner, gpu=GPU, **options) -> tuple[str, str, list[str]]:
    said: list[str] = []
    md, page = cli.make_report(settings(tmp_path, impl, **options), runner, gpu, have_ncu=True, say=said.append)
    return md.read_text(), page.read_text(), said


def answers(form, leave_out: str | None = None) -> dict:
    found = {}
    for q in form.questions:
        if q.type == "choice":
            found[q.id] = [q.choices[0]] if q.multiple else q.choices[0]
        elif q.type == "scale":
            found[q.id] = 4
        elif q.type == "number":
            found[q.id] = 3
        else:
            found[q.id] = f"Tiling in shared memory was the hardest part ({q.id})."
    found.pop(leave_out, None)
    return found


def write_feedback(tmp_path, leave_out=None):
    form = load_form()
    (tmp_path / "feedback.json").write_text(
        json.dumps({"schema_version": form.schema_version, "answers": answers(form, leave_out)})
    )
    return form


# --------------------------------------------------------------------------- the report's numbers


def test_report_shows_seed_000s_numbers_from_the_students_runs(tmp_path, impl):
    form = write_feedback(tmp_path)
    runner = FakeRunner()
    md, _, _ = make(tmp_path, impl, runner)
    assert runner.calls == ALL_STEPS

    for (causal, B, L), (mine, naive, sdpa, naive_cuda) in ATTENTION_MS.items():
        section = md.split(": causal self-attention\n" if causal else ": non-causal self-attention\n")[1]
        line = next(line for line in section.splitlines() if line.startswith(f"- batch_size = {B}, seq_len = {L}:"))
        assert f"**{naive / mine:.2f}×**" in line, line
        assert f"over SDPA: {sdpa / mine:.2f}×" in line and f"composition: {naive_cuda / mine:.2f}×" in line, line
        table_row = next(r for r in section.splitlines() if r.startswith(f"| batch {B} × length {L} |"))
        assert f"| {naive / mine:.2f}× | {sdpa / mine:.2f}× | {naive_cuda / mine:.2f}× |" in table_row
    assert "**2.59×**" in md and "**7.78×**" in md and "**1.75×**" in md and "**2.15×**" in md  # seed 000's figures

    for prompt, paths in MODEL_MS.items():
        (naive_ttft, naive_tbt), (ttft, tbt) = paths["naive"], paths["student"]
        line = next(line for line in md.splitlines() if line.startswith(f"- prompt of {prompt} tokens:"))
        assert f"TTFT **{ttft:.3f} ms** (**{naive_ttft / ttft:.2f}×**" in line, line
        assert f"TBT **{tbt:.3f} ms** (**{naive_tbt / tbt:.2f}×**)" in line, line
    assert "| 0.0521 |" in md and f"| {100 * 8.0 * 8 * 8192 * 64 / 0.0521e-3 / 1e9 / COPY_GBPS:.0f}% |" in md

    for task_id in ("t2", "t3", "t4", "t5", "t6"):  # where you stand: every rule, at full points
        for rule in REGISTRY.task(task_id).timing:
            rule_row = next(r for r in md.splitlines() if r.startswith(f"| {rule.name} |"))
            assert rule_row.endswith(f"| {rule.max_points:g} of {rule.max_points:g} |"), rule_row

    assert REGISTRY.report_prompt + GENERATED in md
    assert "TTFT 12.5 ms" in md and "time between tokens 3.20 ms" in md
    assert PROFILE_TABLE.splitlines()[1].strip() in md
    plots = re.findall(r"^- `(\S+\.png)`", md, re.MULTILINE)
    assert plots == [f"{t}_{kind}.png" for t in ("t4", "t5") for kind in ("time", "tflops", "roofline")] + list(
        plot_names("t6")
    )
    for q in form.questions:
        assert q.text in md
    assert "Tiling in shared memory was the hardest part (finished)" not in md  # a choice shows its choice
    assert form.questions[0].choices[0] in md and "Incomplete" not in md
    assert GPU["name"] in md and str(impl) in md and "Skipped" in md and "Nothing: every step ran." in md


def test_a_rerun_with_nothing_changed_runs_nothing_and_an_edit_reruns_its_tasks_steps(tmp_path, impl):
    first = FakeRunner()
    md_first, _, _ = make(tmp_path, impl, first)
    assert first.calls == ALL_STEPS

    again = FakeRunner()
    md_again, _, said = make(tmp_path, impl, again)
    assert again.calls == []
    assert sum("cached" in line for line in said) == len(ALL_STEPS)
    numbers = re.compile(r"\*\*[0-9.]+×\*\*|\*\*[0-9.]+ ms\*\*")
    assert numbers.findall(md_again) == numbers.findall(md_first) and "**7.78×**" in md_again  # from the cache

    (impl / "t7_generate.py").write_text((impl / "t7_generate.py").read_text() + "\n# tidied up\n")
    edited = FakeRunner()
    make(tmp_path, impl, edited)
    assert edited.calls == ["generate_t7"]

    (impl / "t3_gemm.cu").write_text((impl / "t3_gemm.cu").read_text() + "\n// tidied up\n")
    edited = FakeRunner()
    make(tmp_path, impl, edited)  # t4/t5's tables time the naive CUDA composition, which runs t3's GEMM
    assert edited.calls == ["bench_t3", "bench_t4", "scaling_t4", "bench_t5", "scaling_t5"]

    refreshed = FakeRunner()
    make(tmp_path, impl, refreshed, refresh=True)
    assert refreshed.calls == ALL_STEPS


def test_task_option_runs_that_tasks_steps_and_takes_the_rest_from_the_cache(tmp_path, impl):
    make(tmp_path, impl, FakeRunner())
    (impl / "t6_kv_cache.py").write_text((impl / "t6_kv_cache.py").read_text() + "\n# tidied up\n")
    runner = FakeRunner()
    md, _, _ = make(tmp_path, impl, runner, tasks=("t4",))
    assert runner.calls == []  # t4 is cached; t6 changed but was not asked for
    assert "**7.78×**" in md and "**2.15×**" in md  # t4 and t5 from the cache
    assert "not run: this report was limited to --task t4" in md and "make report T=t6" in md
    runner = FakeRunner()
    make(tmp_path, impl, runner, tasks=("t6",))
    assert runner.calls == ["bench_t6"]


def test_model_and_rule_constants_match_what_the_bench_runs():
    assert set(views.SEED000_SHAPES) <= set(cases.ATTENTION_SHAPES)
    assert decode_view.HEADLINE_PROMPTS == model_bench.FULL.prompts, "the headline's prompts are the model bench's"
    assert set(decode_view.PATHS) == set(model_bench.PATHS), "the model table's paths are the model bench's"
    assert render.MD_TEMPLATE.is_file() and render.HTML_TEMPLATE.is_file()
    for module in (steps, sections, views, decode_view, render, cli):
        assert "grader" not in module.__dict__ and "import grader" not in Path(module.__file__).read_text()


# --------------------------------------------------------------------------- skips and failures


def test_on_a_gpu_that_is_not_hopper_t9s_steps_are_skipped_and_say_why(tmp_path, impl):
    runner = FakeRunner()
    a100 = {**GPU, "name": "NVIDIA A100-SXM4-80GB", "capability": "sm_80"}
    md, _, said = make(tmp_path, impl, runner, gpu=a100)
    assert runner.calls == [step for step in ALL_STEPS if not step.endswith("_t9")]
    skipped = [line for line in said if "_t9: skipped" in line]
    assert len(skipped) == 2 and all("not available on this GPU" in line and "sm_80" in line for line in skipped), said


def test_without_a_gpu_the_gpu_steps_are_skipped_and_t7_runs_for_real(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("IMPL", "solutions")
    code = cli.main(
        [
            "--out",
            str(tmp_path / "out"),
            "--build",
            str(tmp_path / "build"),
            "--feedback",
            str(tmp_path / "none.json"),
            "--max-tokens",
            "4",
        ],
        gpu=NO_GPU,
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    md = (tmp_path / "out" / "REPORT.md").read_text()
    for task_id in ("t2", "t3", "t4", "t5", "t6", "t8"):
        item = next(line for line in md.splitlines() if line.startswith(f"- **{task_id} "))
        assert "no CUDA GPU (torch.cuda.is_available() is False" in item, item
    assert "generate_t7: done in" in printed and f"[{len(ALL_STEPS)}/{len(ALL_STEPS)}]" in printed
    t7 = md.split("generated text\n")[1].split("\n## ")[0]
    assert f"> {REGISTRY.report_prompt}" in t7
    assert re.search(r"- prompt tokens: \d+ \\\| model calls: 1 prefill", t7), t7
    assert "cpu, float32, attention reference, greedy" in t7
    assert "feedback answers" in md and (tmp_path / "build" / "logs" / "generate_t7.log").is_file()


def test_a_failed_step_shows_its_last_lines_and_the_report_is_still_written(tmp_path, impl, capsys):
    crash = (
        "\n".join(f"line {i}" for i in range(100))
        + "\nRuntimeError: CUDA error: an illegal memory access was encountered"
    )
    runner = FakeRunner(
        fail={
            "bench_t3": (1, "gemm 4096^3\n", crash),
            "scaling_t5": (steps.TIMEOUT_RC, "B16 L1024 ...\n", "[report] stopped after 900 s"),
        },
        impossible=("t4",),
    )
    code = cli.main(
        [
            "--impl",
            str(impl),
            "--out",
            str(tmp_path / "out"),
            "--build",
            str(tmp_path / "build"),
            "--feedback",
            str(tmp_path / "none.json"),
        ],
        runner=runner,
        gpu=GPU,
    )
    assert code == 0
    md = (tmp_path / "out" / "REPORT.md").read_text()
    skipped = md.split("### Skipped")[1].split("\n## ")[0]
    assert "bench_t3" in skipped and "failed: exit status 1" in skipped and "no results from it" in skipped
    assert "an illegal memory access was encountered" in skipped and "line 99" in skipped
    assert "line 5\n" not in skipped  # the tail, not the whole log
    assert "scaling_t5" in skipped and "timed out after 900 s" in skipped
    assert "| t3 | CUDA GEMM | written; a step failed" in md
    assert "**2.15×**" in md  # the other steps' numbers are there
    assert "bench_t4" in skipped and "the rows it timed are shown" in skipped  # an impossible time: exit 1
    assert "**7.78×**" in md and "- impossible time: student: 0.0010 ms is below the physical floor" in md
    log = (tmp_path / "build" / "logs" / "bench_t3.log").read_text()
    assert "exit status 1" in log and "line 5\n" in log

    again = FakeRunner()
    cli.main(
        ["--impl", str(impl), "--out", str(tmp_path / "out"), "--build", str(tmp_path / "build")], runner=again, gpu=GPU
    )
    assert again.calls == ["bench_t3", "bench_t4", "scaling_t5"]  # failures are not cached


def test_a_starter_reports_every_task_as_not_implemented(tmp_path):
    runner = FakeRunner()
    md, _, _ = make(tmp_path, REPO / "starter", runner)
    assert runner.calls == []
    for task in REGISTRY.available:
        assert f"| {task.id} | {task.title} | {task.id} not implemented (TODO regions left) |" in md
        assert f"- **{task.id} {task.title}**: {task.id} not implemented (TODO regions left)" in md


def test_a_partly_done_task_runs_what_is_done(tmp_path, impl):
    """t4's regions written, t5's left: t4's steps run, t5's are skipped as not implemented."""
    kept, task = [], None
    for line in (impl / "t4_flash_attention.cu").read_text().splitlines(keepends=True):
        begin = _BEGIN.match(line)
        if begin:
            task = begin.group("task")
        if task != "t5" and (begin or _END.match(line)):
            continue  # a t4 region's markers dropped: its code stays, as a student who wrote it has it
        if _END.match(line):
            task = None
        kept.append(line)
    text, regions = strip_solutions("".join(kept), "t4_flash_attention.cu")
    assert {r.task for r in regions} == {"t5"}
    (impl / "t4_flash_attention.cu").write_text(text)
    runner = FakeRunner()
    md, _, _ = make(tmp_path, impl, runner)
    written = ["bench_t2", "bench_t3", "bench_t4", "scaling_t4", "profile_t4", "bench_t6", "bench_t8", "profile_t8"]
    written += ["bench_t9", "profile_t9"]
    assert runner.calls == [*written, "generate_t7"]
    assert "t5 not implemented (TODO regions left)" in md and "**7.78×**" in md
    assert "Not measured: t5 not implemented (TODO regions left)" in md


def test_incomplete_feedback_is_shown_with_what_is_missing(tmp_path, impl):
    form = write_feedback(tmp_path, leave_out="finished")
    md, _, _ = make(tmp_path, impl, FakeRunner())
    feedback = md.split("## Feedback")[1]
    assert "**Incomplete**: 1 problem left" in feedback and "finished: not answered yet" in feedback
    assert form.question("finished").text in feedback and "(not answered)" in feedback
    (tmp_path / "feedback.json").write_text("{not json")
    md, _, _ = make(tmp_path, impl, FakeRunner())
    assert "The answers could not be read" in md


def test_an_unknown_task_or_a_broken_gpu_probe_is_said_plainly(tmp_path, capsys):
    assert cli.main(["--task", "t99", "--out", str(tmp_path), "--build", str(tmp_path)], gpu=GPU) == 1
    assert "unknown task 't99'" in capsys.readouterr().err and not (tmp_path / "REPORT.md").exists()
    probe = steps.detect_gpu(lambda argv, **kw: (-11, "", "Fatal Python error: Segmentation fault\n"))
    assert probe["name"] is None and "SIGSEGV" in probe["error"] and "Segmentation fault" in probe["error"]
    assert steps.no_gpu_reason(probe).startswith("no usable CUDA GPU: the GPU probe failed")


def test_the_real_runner_stops_a_hanging_step_at_its_limit(tmp_path):
    run = steps.command_runner()
    hang = (
        "import subprocess, sys, time; print('started', flush=True); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    start = time.monotonic()
    code, out, err = run([sys.executable, "-c", hang], timeout_s=1.5, env=steps.step_env(tmp_path), cwd=tmp_path)
    assert code == steps.TIMEOUT_RC and "started" in out and "time limit" in err
    assert time.monotonic() - start < 12  # the child it started (holding the same pipes) went with it
    code, out, err = run(
        [sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"],
        timeout_s=30,
        env=steps.step_env(tmp_path),
        cwd=tmp_path,
    )
    assert (code, out) == (3, "hi\n")


def test_a_sigterm_while_a_step_starts_still_takes_the_step_down(tmp_path, monkeypatch):
    """The signal lands after the fork, before ``Popen`` returns: the step it started must not be left running."""
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc)
        os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode: still inside "Popen"
        time.sleep(0.2)
        return proc

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    monkeypatch.setattr(steps.subprocess, "Popen", popen_then_signal)
    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            steps.command_runner()(
                [sys.executable, "-c", "import time; time.sleep(60)"],
                timeout_s=60,
                env=steps.step_env(tmp_path),
                cwd=tmp_path,
            )
    finally:
        signal.signal(signal.SIGTERM, previous)
    (proc,) = started
    assert proc.poll() == -signal.SIGKILL, "the step started as SIGTERM came was left running"


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads the process table from /proc")
def test_sigterm_stops_the_report_and_the_step_it_is_running(tmp_path):
    marker = f"report-test-step-{tmp_path.name}"
    script = tmp_path / "run_report.py"
    script.write_text(f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from assignment.report import cli, steps
real = steps.command_runner()
def runner(argv, **kw):
    return real([sys.executable, "-c", "import time, sys; print({marker!r}, flush=True); time.sleep(60)"], **kw)
sys.exit(cli.main(["--impl", {str(REPO / "solutions")!r}, "--out", {str(tmp_path)!r}, "--build",
                   {str(tmp_path / "build")!r}, "--task", "t7"], runner=runner, gpu={NO_GPU!r}))
""")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not steps_with(marker):
        time.sleep(0.2)
    assert steps_with(marker), "the step never started"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "interrupted" in err, out + err
    time.sleep(0.5)
    assert not steps_with(marker) and not (tmp_path / "REPORT.md").exists()


def steps_with(marker: str) -> list[str]:
    """Processes whose command line holds ``marker`` (read from /proc: nothing is killed here)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in text and "run_report.py" not in text:
            found.append(text)
    return found


def test_the_kit_digest_follows_every_file_of_the_kit(tmp_path):
    real = KIT_DIGEST
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "timing.py").write_text("x = 1\n")
    (tmp_path / "tasks.toml").write_text("[course]\n")
    before = real(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "timing.cpython-311.pyc").write_bytes(b"\0")
    assert real(tmp_path) == before  # compiled files do not count
    (tmp_path / "perf" / "timing.py").write_text("x = 2\n")
    assert real(tmp_path) != before


# --------------------------------------------------------------------------- the page


class StrictParser(HTMLParser):
    VOID: ClassVar[set[str]] = {"meta", "img", "br", "hr", "input", "link", "col", "wbr", "source"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.images: list[str] = []
        self.doctype = False

    def handle_decl(self, decl):
        self.doctype = decl.lower() == "doctype html"

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        for name in ("src", "href"):
            if attrs.get(name) and not attrs[name].startswith(("data:", "#")):
                self.problems.append(f"<{tag} {name}={attrs[name][:40]}>: points outside the page")
        if tag in ("script", "link", "iframe"):
            self.problems.append(f"<{tag}> in a standalone report")
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()


def test_the_html_page_stands_alone_with_its_plots_inside(tmp_path, impl):
    write_feedback(tmp_path)
    md, page, _ = make(tmp_path, impl, FakeRunner())
    parser = StrictParser()
    parser.feed(page)
    parser.close()
    assert parser.doctype and not parser.problems and not parser.stack, parser.problems + parser.stack
    assert '<meta charset="utf-8">' in page and "<title>" in page
    assert len(parser.images) == 8  # t4 and t5 scaling: 3 each; t6's model table: 2
    for src in parser.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == png()
    assert "data:image" not in md
    assert "<table>" in page and "7.78×" in page and "<blockquote" in page
    assert GENERATED.strip() in page
    assert "TTFT 12.5 ms | time between tokens" in page.replace("&#124;", "|")  # escaped pipes read back as pipes


def test_text_from_the_run_cannot_inject_markup_into_the_page(tmp_path, impl):
    class Hostile(FakeRunner):
        def __call__(self, argv, **kw):
            code, out, err = super().__call__(argv, **kw)
            if "assignment.commands.generate" in argv:
                out = out.replace(GENERATED, " <script>alert(1)</script> | ``` **bold**")
            return code, out, err

    _, page, _ = make(tmp_path, impl, Hostile())
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
