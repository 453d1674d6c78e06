"""The CPU parts of t6's model table (assignment/perf/model_bench.py, with its model_paths.py and
model_table.py) and of ``make profile T=t6``.

The timing itself needs the GPU (``make bench T=t6``); what it rests on is checked here: the roofline's
byte count, the transformers model built over the kit's tensors, the naive path against the cached
one, the generation loops, the table and the plots, the bench's t6 flags, and the profiler's t6 report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from assignment import tasks
from assignment.model.llama import KVCache
from assignment.model.presets import preset_config, random_model
from assignment.perf import model_bench, model_paths, model_table
from assignment.perf.model_paths import CachedPath, Generation, NaivePath

pytestmark = pytest.mark.kit
PROMPT, NEW = 9, 6


@pytest.fixture(scope="module")
def tiny():
    return random_model("llama-tiny", device="cpu", seed=3)


def prompt_tokens(model, length=PROMPT, seed=1):
    return torch.randint(0, model.vocab_size, (1, length), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- the roofline


def test_llama_3_2_1b_parameter_count_and_decode_bytes():
    config = preset_config("llama-3.2-1b")
    assert model_bench.parameter_count(config) == 1_235_814_400  # the model card's 1.24B, tied embeddings once
    assert model_bench.kv_bytes_per_token(config) == 16 * 2 * 8 * 64 * 4
    assert model_bench.decode_bytes(config, 1000) == 4 * 1_235_814_400 + 65_536 * 1000
    # 3000 GB/s: 4.94 GB of weights and 1000 tokens of cache take about 1.67 ms
    assert model_bench.roofline_tbt_ms(config, 1000, 3000.0) == pytest.approx((4.943257600e9 + 65.536e6) / 3e12 * 1e3)


@pytest.mark.parametrize("preset", ["llama-tiny", "llama-3.2-1b"])
def test_parameter_count_is_the_models(preset):
    from assignment.model.llama import Transformer

    with torch.device("meta"):  # shapes only: no 4.9 GB of weights
        model = Transformer(preset_config(preset))
    assert model_bench.parameter_count(model.config) == sum(p.numel() for p in model.parameters())  # each once


def test_parameter_count_counts_untied_embeddings_and_biases_once_each():
    from dataclasses import replace

    from assignment.model.llama import Transformer

    config = replace(preset_config("llama-tiny"), tie_word_embeddings=False, attention_bias=True, mlp_bias=True)
    with torch.device("meta"):
        model = Transformer(config)
    assert model_bench.parameter_count(config) == sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------- the paths agree


def test_transformers_model_over_the_kits_tensors_gives_the_same_logits(tiny):
    pytest.importorskip("transformers")
    hf = model_paths.hf_model(tiny)
    assert hf.model.embed_tokens.weight.data_ptr() == tiny.embed_tokens.weight.data_ptr(), "a copy, not shared"
    assert hf.lm_head.weight.data_ptr() == tiny.embed_tokens.weight.data_ptr(), "tied embeddings untied"
    assert hf.model.layers[1].mlp.down_proj.weight.data_ptr() == tiny.layers[1].mlp.down_proj.weight.data_ptr()
    tokens = prompt_tokens(tiny, 17)
    with torch.no_grad():
        err = (hf(tokens).logits - tiny(tokens)).abs().max().item()
    assert err <= 2e-5, f"transformers over the kit's weights: logits differ by {err}"


def test_naive_step_gives_the_logits_of_prefill_and_decode_with_the_cache(tiny):
    tokens = prompt_tokens(tiny, PROMPT + NEW)
    naive = NaivePath(tiny, PROMPT + NEW)
    tiny.setup_caches(1, PROMPT + NEW, cache_cls=KVCache)
    cached = CachedPath(tiny, PROMPT + NEW, "cpu")
    with torch.no_grad():
        worst = (naive.prefill(tokens[:, :PROMPT]) - cached.prefill(tokens[:, :PROMPT])).abs().max().item()
        for p in range(PROMPT, PROMPT + NEW):  # teacher-forced: the same token into both at every step
            token = tokens[:, p]
            worst = max(worst, (naive.decode(token, p) - cached.decode(token, p)).abs().max().item())
    assert worst <= 1e-5, f"the naive path and the cached path differ by {worst}"


def test_timed_generations_agree_and_time_every_step(tiny):
    prompt = prompt_tokens(tiny)
    naive = model_paths.timed_generation(NaivePath(tiny, PROMPT + NEW), prompt, NEW, ttft_reps=2, warmup_steps=2)
    tiny.setup_caches(1, PROMPT + NEW, cache_cls=KVCache)
    cached = model_paths.timed_generation(CachedPath(tiny, PROMPT + NEW, "cpu"), prompt, NEW, ttft_reps=1)
    assert len(naive.tokens) == len(cached.tokens) == NEW
    assert naive.tokens == cached.tokens
    assert len(naive.intervals_ms) == NEW - 1 and len(naive.ttft_reps_ms) == 2
    assert all(t > 0 for t in naive.intervals_ms + naive.ttft_reps_ms)
    assert naive.tbt_ms == sorted(naive.intervals_ms)[(NEW - 1) // 2]
    assert (naive.first_logits - cached.first_logits).abs().max().item() <= 1e-5
    with torch.no_grad():  # the greedy tokens are the argmax of the full pass over the sequence so far
        sequence = torch.cat([prompt, torch.tensor([naive.tokens])], dim=1)
        expected = tiny(sequence).argmax(-1)[0, PROMPT - 1 : -1].tolist()
    assert naive.tokens == expected


def test_transformers_generate_is_timed_per_token_and_agrees(tiny):
    pytest.importorskip("transformers")
    prompt = prompt_tokens(tiny)
    hf = model_paths.hf_timed_generation(model_paths.hf_model(tiny), prompt, NEW, ttft_reps=2, warmup_steps=1)
    naive = model_paths.timed_generation(NaivePath(tiny, PROMPT + NEW), prompt, NEW)
    assert len(hf.tokens) == NEW and len(hf.intervals_ms) == NEW - 1 and len(hf.ttft_reps_ms) == 2
    assert hf.tokens == naive.tokens
    assert (hf.first_logits - naive.first_logits).abs().max().item() <= 2e-5


# --------------------------------------------------------------------------- the table and the plots


def generation(ttft, intervals, tokens, logits):
    return Generation(
        tokens=tokens, first_logits=torch.tensor([logits]), ttft_ms=ttft, ttft_reps_ms=[ttft], intervals_ms=intervals
    )


def fake_report():
    config = preset_config("llama-3.2-1b")
    runs = {
        "naive": generation(40.0, [20.0, 22.0, 21.0], [5, 6, 7, 8], [1.0, 2.0, 3.0]),
        "student": "NotImplementedError: TODO(t6) not implemented",
        "reference": generation(10.0, [2.0, 2.2, 2.1], [5, 6, 7, 8], [1.0, 2.0, 3.0 + 1e-4]),
        "transformers": generation(50.0, [25.0, 21.0, 23.0], [5, 6, 9, 8], [1.0, 2.5, 3.0]),
    }
    entry = model_bench.summarize_prompt(128, 129, runs, config, 3000.0)
    sweep = [
        {
            "path": path,
            "prompt": p,
            "context": p + 8,
            "tbt_ms": ms * (1 + p / 4096),
            "ttft_ms": 1.0,
            "roofline_tbt_ms": model_bench.roofline_tbt_ms(config, p + 8, 3000.0),
        }
        for path, ms in (("naive", 20.0), ("reference", 2.1), ("transformers", 23.0))
        for p in (128, 512, 1024)
    ]
    sweep.append({"path": "reference", "prompt": 4096, "skipped": "OutOfMemoryError: CUDA out of memory"})
    return {
        "task": "t6",
        "preset": "llama-3.2-1b",
        "batch": 1,
        "parameters": model_bench.parameter_count(config),
        "weight_bytes": 4 * model_bench.parameter_count(config),
        "kv_bytes_per_token": 65536,
        "copy_gbps": 3000.0,
        "new_tokens": 4,
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "paths": {
            "naive": {"label": "naive (no cache)"},
            "reference": {"label": "reference (t6), CUDA graph"},
            "student": {"label": "student"},
            "transformers": {"label": "transformers (sdpa)"},
        },
        "prompts": [entry],
        "sweep": sweep,
        "notes": ["student: timed eagerly"],
    }


def test_speedups_roofline_and_agreement_of_a_prompt():
    rows = fake_report()["prompts"][0]["rows"]
    assert list(rows) == ["naive", "student", "reference", "transformers"]  # the table's order
    reference, naive = rows["reference"], rows["naive"]
    assert reference["tbt_ms"] == 2.1 and reference["ttft_ms"] == 10.0
    assert reference["ttft_speedup_naive"] == pytest.approx(4.0)
    assert reference["tbt_speedup_naive"] == pytest.approx(21.0 / 2.1)
    assert reference["tbt_speedup_transformers"] == pytest.approx(23.0 / 2.1)
    assert reference["tokens_per_s"] == pytest.approx(1000 / 2.1)
    roofline = model_bench.roofline_tbt_ms(preset_config("llama-3.2-1b"), 129, 3000.0)
    assert reference["percent_roofline"] == pytest.approx(100 * roofline / 2.1)
    assert reference["logits_max_abs_diff"] == pytest.approx(1e-4, rel=0.01) and reference["agrees"]
    assert reference["tokens_equal_naive"] == 4
    assert rows["transformers"]["tokens_equal_naive"] == 2 and not rows["transformers"]["agrees"]
    assert naive["tbt_speedup_naive"] == 1.0 and "logits_max_abs_diff" not in naive
    assert rows["student"] == {"skipped": "NotImplementedError: TODO(t6) not implemented"}
    json.dumps(fake_report()["prompts"])  # what the bench writes


def test_the_table_reads_well():
    text = model_table.format_report(fake_report())
    assert "1,235,814,400 parameters" in text and "3000 GB/s" in text
    lines = {
        line.split("  ")[1].strip(): line
        for line in text.splitlines()
        if line.startswith("  ") and not line.strip().startswith(("path", "note"))
    }
    assert "reference (t6), CUDA graph" in lines and "naive (no cache)" in lines
    reference = lines["reference (t6), CUDA graph"]
    for figure in ("10.00", "4.00x", "2.100", "10.00x", "10.95x", "476.2", "1.0e-04", "4/4"):
        assert figure in reference, f"{figure} missing from {reference!r}"
    assert "DIFFERS" in lines["transformers (sdpa)"] and "2/4" in lines["transformers (sdpa)"]
    assert "skipped: NotImplementedError: TODO(t6)" in lines["student"]
    assert "(baseline)" in lines["naive (no cache)"]
    assert "note: student: timed eagerly" in text


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    paths = model_table.plot(fake_report(), tmp_path)
    assert (
        [p.name for p in paths] == ["t6_model_tbt.png", "t6_model_roofline.png"] == list(model_table.plot_names("t6"))
    )
    assert all(p.stat().st_size > 10_000 for p in paths)


def test_plot_only_reprints_a_saved_report(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    saved = tmp_path / "t6.json"
    older = {key: value for key, value in fake_report().items() if key != "task"}  # the bench's JSON names the task
    saved.write_text(json.dumps({"task": "t6", "gpu": {"name": "H100"}, "model": older}))
    assert model_bench.main(["--plot-only", str(saved)]) == 0
    assert "reference (t6), CUDA graph" in capsys.readouterr().out
    assert (tmp_path / model_table.plot_names("t6")[0]).is_file()
    saved.write_text(json.dumps({"cases": []}))
    assert model_bench.main(["--plot-only", str(saved)]) == 2


# --------------------------------------------------------------------------- the bench's flags, the profiler


@pytest.mark.parametrize(
    "argv",
    [
        ["--task", "t4", "--model-only"],
        ["--task", "t5", "--no-model"],
        ["--task", "t6", "--model-only", "--no-model"],
        ["--task", "t6", "--splits", "--model-only"],
    ],
)
def test_bench_refuses_model_flags_out_of_place(argv, capsys):
    from assignment.commands import bench

    assert bench.main(argv) == 2
    assert "--model-only" in capsys.readouterr().err


def test_profile_t6_reports_both_kernels_of_a_decode_launch():
    from assignment import tasks
    from assignment.commands import profile as profile_command
    from assignment.perf import profile

    shape = dict(tasks.code("t6").profile.shape)
    assert shape == {"B": 1, "H": 32, "H_kv": 8, "L": 32768, "d": 128}
    assert tasks.code("t6").profile.ideal_bytes(shape) == 4 * (32 * (2 * 128 + 1) + 2 * 8 * 32768 * 128)
    command = profile_command.ncu_command("ncu", "t6", ".")
    assert command[command.index("--launch-count") + 1] == "2"
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed" in command[command.index("--metrics") + 1]
    assert profile_command.ncu_command("ncu", "t4", ".")[command.index("--launch-count") + 1] == "1"
    header = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Section Name",'
        '"Metric Name","Metric Unit","Metric Value"'
    )

    def row(kernel_id, kernel, metric, unit, value):
        return f'"{kernel_id}","1","python","host","{kernel}","1","7","metrics","{metric}","{unit}","{value}"'

    text = "\n".join(
        [
            header,
            row(0, "decode_split", "gpu__time_duration.sum", "nsecond", "100,000"),
            row(0, "decode_split", "dram__bytes_read.sum", "byte", "268,435,456"),
            row(0, "decode_split", "dram__bytes_write.sum", "byte", "1,048,576"),
            row(1, "decode_combine", "gpu__time_duration.sum", "nsecond", "5,000"),
            row(1, "decode_combine", "dram__bytes_read.sum", "byte", "1,048,576"),
            row(1, "decode_combine", "dram__bytes_write.sum", "byte", "16,384"),
        ]
    )
    kernels = profile.parse_ncu_csv_kernels(text)
    assert [k["_kernel"][0] for k in kernels] == ["decode_split", "decode_combine"]
    assert profile.parse_ncu_csv(text)["_kernel"][0] == "decode_split"  # one kernel, as t2-t5 read it
    report = profile.report("t6", tasks.code("t6").profile, kernels)
    assert "kernel 1 of 2: decode_split" in report and "kernel 2 of 2: decode_combine" in report
    assert "0.105 ms" in report  # the two kernels' time together
    assert f"{(268_435_456 + 2 * 1_048_576 + 16_384) / 2**20:,.1f} MiB" in report
    assert "GB/s" in report


def test_the_whole_model_table_runs_end_to_end_on_the_cpu(tmp_path, capsys):
    """run() on the tiny preset: naive and transformers are timed, the t6 paths (CUDA only) are reported as
    skipped with the reason, the sweep and the plots are made, and the report is JSON."""
    pytest.importorskip("transformers")
    pytest.importorskip("matplotlib")
    settings = model_bench.Settings(
        prompts=(8, 12),
        new_tokens=4,
        ttft_reps=2,
        warmup_steps=1,
        sweep_prompts=(8, 16),
        naive_sweep_prompts=(8,),
        sweep_steps=2,
        naive_sweep_steps=2,
    )
    report = model_bench.run(
        tasks.attention("t6"), 3000.0, out=tmp_path, settings=settings, preset="llama-tiny", device="cpu"
    )
    json.dumps(report)
    assert [entry["prompt"] for entry in report["prompts"]] == [8, 12]
    for entry in report["prompts"]:
        rows = entry["rows"]
        assert list(rows) == ["naive", "student", "reference", "transformers"]
        assert "CUDA" in rows["student"]["skipped"] and "CUDA" in rows["reference"]["skipped"]
        assert rows["transformers"]["tokens_equal_naive"] == 4 and rows["transformers"]["agrees"]
        assert len(rows["naive"]["intervals_ms"]) == 3
    assert {(p["path"], p["prompt"]) for p in report["sweep"]} == {
        ("naive", 8),
        ("transformers", 8),
        ("transformers", 16),
    }
    assert [Path(p).name for p in report["plots"]] == list(model_table.plot_names("t6"))
    out = capsys.readouterr().out
    assert "model, prompt 12 tokens" in out and "transformers (sdpa)" in out and "skipped: ValueError" in out
