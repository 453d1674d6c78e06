"""The CPU parts of the time-to-first-token rows (assignment/perf/prefill_bench.py) that ``make bench T=t8`` ends with.

The timing needs the GPU; what it rests on is checked here: the Llama-3.2-1B shape and its FLOPs, the rows in t8's
tables and the ``--ttft`` flag, the transformers model over the kit's bf16 tensors and the logits check between the
paths, a path left out with its reason (transformers missing, CUDA-only code on a CPU, wrong logits), a row run
through the harness's plumbing with the harness stubbed, and the bench's refusal without a GPU.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from assignment import tasks
from assignment.model.presets import preset_config
from assignment.perf import cases, prefill_bench, timing
from assignment.perf.model_bench import parameter_count
from assignment.perf.prefill_bench import KIT_SDPA, STUDENT, TRANSFORMERS

pytestmark = pytest.mark.kit
TINY_PROMPTS = (16, 40)


def tiny_rows(attention: str = "t8"):
    return prefill_bench.ttft_cases(tasks.attention(attention), prompts=TINY_PROMPTS, preset="llama-tiny", device="cpu")


def models_of(case) -> prefill_bench.PrefillModels:
    return case.scope.func.__self__


# --------------------------------------------------------------------------- the shape, the work, the rows


def test_the_rows_time_the_llama_3_2_1b_shape_in_bf16_at_1024_and_4096_tokens():
    rows = prefill_bench.ttft_cases(tasks.attention("t8"))  # nothing is built or run until a row is timed
    config = models_of(rows[0]).config
    shape = {
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "vocab_size": 128256,
        "intermediate_size": 8192,
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    }
    assert {key: getattr(config, key) for key in shape} == shape
    assert config.rope_scaling["rope_type"] == "llama3" and config.rope_scaling["factor"] == 32.0
    assert preset_config("llama-3.2-1b").rope_scaling == config.rope_scaling  # the kit's preset, not a copy
    assert [r.record["model"]["prompt"] for r in rows] == [1024, 4096]
    assert all(models_of(r) is models_of(rows[0]) and models_of(r).paths is None for r in rows)  # one model, lazy
    for row in rows:
        assert list(row.candidates) == [TRANSFORMERS, KIT_SDPA, STUDENT]  # the baseline first: the check's reference
        assert row.percent_of == TRANSFORMERS and row.speedup_over == (TRANSFORMERS,)
        assert row.tensor_cores and row.metric == "TFLOP/s"
        assert row.max_relative_error == prefill_bench.MAX_RELATIVE_LOGIT_DIFFERENCE
        assert row.bytes_moved == 2 * 1_235_814_400  # every bf16 weight read once
        assert "ATTN=t8" in " ".join(row.notes) and "last position only" in " ".join(row.notes)
    json.dumps([r.record for r in rows])


def test_prefill_flops_count_every_linear_layer_per_token_the_causal_pairs_and_one_lm_head():
    config = preset_config("llama-3.2-1b")
    with torch.device("meta"):
        from assignment.model.llama import Transformer

        model = Transformer(config)
    linear = sum(p.numel() for name, p in model.named_parameters() if name.startswith("layers.") and p.dim() == 2)
    assert linear == 16 * 60_817_408 == parameter_count(config) - 128256 * 2048 - (2 * 16 + 1) * 2048
    T = 1024
    attention = 16 * 4 * 32 * 64 * (T * (T + 1) // 2)
    assert prefill_bench.prefill_flops(config, T) == 2 * linear * T + attention + 2 * 2048 * 128256
    assert 2.0e12 < prefill_bench.prefill_flops(config, 1024) < 2.1e12  # about 2 TFLOP: 2 N T and a little more


@pytest.mark.parametrize("task", ["t8", "t9"])
def test_the_tensor_core_tables_end_with_their_own_ttft_rows_and_ttft_is_their_flag(task):
    from assignment.commands import bench

    code = tasks.code(task)
    for table in (code.bench_cases, *(v.cases for v in code.bench_variants)):
        rows = table(None, None, False)  # nothing runs: the kernel rows' inputs and candidates are made when timed
        labels = [r.label for r in rows]
        assert [label.startswith("time to first token") for label in labels[-2:]] == [True, True], labels
        assert [r.record["model"]["prompt"] for r in rows[-2:]] == [1024, 4096]
        assert all(f"ATTN={task} " in " ".join(r.notes) for r in rows[-2:]), "the rows must time this task's kernel"
    only = next(v for v in code.bench_variants if v.option == "ttft")
    assert len(only.cases(None, None, True)) == 2
    assert bench._variants(tasks.with_bench())["ttft"][1] == ["t8", "t9"]


# --------------------------------------------------------------------------- the paths over the same weights


@pytest.fixture
def prepared_rows():
    """The tiny preset's rows on the CPU, each prepared as the bench's scope prepares it (then released)."""
    pytest.importorskip("transformers", reason="transformers is not installed here: the baseline cannot be built")
    rows = tiny_rows()
    yield rows
    models_of(rows[0]).release()


def test_transformers_runs_over_the_kits_bf16_tensors_and_agrees_with_the_kits_logits(prepared_rows):
    row = prepared_rows[0]
    models = models_of(row)
    models.prepare(row)
    hf = models.paths[TRANSFORMERS].args[0]
    kit = models.paths[KIT_SDPA].model
    assert hf.config._attn_implementation == "sdpa"
    for theirs, mine in (
        (hf.model.embed_tokens.weight, kit.embed_tokens.weight),
        (hf.lm_head.weight, kit.embed_tokens.weight),  # tied, as the checkpoint's
        (hf.model.layers[1].self_attn.k_proj.weight, kit.layers[1].self_attn.k_proj.weight),
        (hf.model.layers[0].mlp.down_proj.weight, kit.layers[0].mlp.down_proj.weight),
    ):
        assert theirs.dtype == torch.bfloat16 and theirs.data_ptr() == mine.data_ptr(), "a copy, not the same weights"
    assert models.paths[STUDENT].model.embed_tokens.weight.data_ptr() == kit.embed_tokens.weight.data_ptr()
    # On the CPU the t8 kernel cannot run: its path is left out with the reason, the two others are compared.
    assert list(row.candidates) == [TRANSFORMERS, KIT_SDPA]
    assert any(n.startswith("student skipped: ValueError") and "CUDA only" in n for n in row.notes), row.notes
    logits = row.record["logits"]
    assert logits["against"] == TRANSFORMERS and list(logits["paths"]) == [KIT_SDPA]
    compared = logits["paths"][KIT_SDPA]
    assert 0 <= compared["relative_diff"] <= 0.02 and compared["same_next_token"], compared
    assert any("max |diff|" in n and "bound 20%" in n for n in row.notes), row.notes
    prompt = row.make_inputs(3)
    assert prompt.shape == (1, TINY_PROMPTS[0]) and not torch.equal(prompt, row.make_inputs(4))  # fresh per seed
    out = {name: fn(prompt) for name, fn in row.candidates.items()}
    assert all(o.shape == (1, 512) and o.dtype == torch.float32 for o in out.values())
    assert (out[KIT_SDPA] - out[TRANSFORMERS]).abs().max() <= 0.02 * out[TRANSFORMERS].abs().max()


def test_a_path_whose_logits_are_off_is_left_out_as_wrong(prepared_rows):
    row = prepared_rows[0]
    models = models_of(row)
    models.build()
    right = models.paths[KIT_SDPA]
    models.paths[KIT_SDPA] = lambda prompt: right(prompt).flip(-1)  # the logits of other tokens
    models.prepare(row)
    assert list(row.candidates) == [TRANSFORMERS]
    assert any(n.startswith("kit SDPA skipped: its logits differ") and "(wrong)" in n for n in row.notes), row.notes


def test_without_transformers_the_rows_say_so_and_the_kits_paths_still_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    row = tiny_rows()[1]
    models = models_of(row)
    models.prepare(row)
    assert list(row.candidates) == [KIT_SDPA]
    assert any(
        n.startswith("transformers skipped: ModuleNotFoundError") and "(pip install transformers)" in n
        for n in row.notes
    )
    assert "logits" not in row.record  # one path left: nothing to compare it with
    assert row.candidates[KIT_SDPA](row.make_inputs(1)).shape == (1, 512)
    models.release()


def test_a_model_that_cannot_be_built_leaves_the_row_empty_with_the_reason(monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr("assignment.model.presets.random_model", out_of_memory)
    row = tiny_rows()[0]
    models_of(row).prepare(row)
    assert row.candidates == {} and models_of(row).paths is None
    assert (
        row.notes[-1]
        == "the model could not be built: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )


# --------------------------------------------------------------------------- through the bench's plumbing


def fake_measure(candidates, make_inputs, *, check=None, flops=None, bytes_moved=None, **kwargs):
    """measure() without a GPU: each candidate once on one input set, checked, at a made-up time."""
    inputs = make_inputs(1)
    results = {}
    for i, (name, fn) in enumerate(candidates.items()):
        output = fn(inputs)
        if check is not None:
            check(name, inputs, output)
        results[name] = timing.summarize(name, [10.0 + i], flops, bytes_moved)
        results[name].floor_ms, results[name].stop_reason = 1.0, "converged"
    return results


def test_a_row_runs_through_run_case_in_its_scope_and_frees_the_model_after_the_last(monkeypatch, capsys):
    pytest.importorskip("transformers", reason="transformers is not installed here: the baseline cannot be built")
    monkeypatch.setattr(timing, "measure", fake_measure)
    monkeypatch.setattr(cases, "_usable", lambda case: None)  # it synchronises CUDA
    rows = tiny_rows()
    models = models_of(rows[0])
    first = cases.run_case(rows[0], None, {})
    assert models.paths is not None  # kept for the next row
    last = cases.run_case(rows[1], None, {})
    assert models.paths is None  # freed after the last
    for row, prompt in ((first, 16), (last, 40)):
        json.dumps(row)
        assert list(row["results"]) == [TRANSFORMERS, KIT_SDPA]
        assert row["model"]["prompt"] == prompt and row["logits"]["against"] == TRANSFORMERS
        assert any("student skipped" in n for n in row["notes"])
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.strip().startswith("candidate"))
    kit_line = next(line for line in out.splitlines() if line.strip().startswith(KIT_SDPA))
    end = header.index("% transformers") + len("% transformers")  # the column is as wide as its header
    assert kit_line[:end].endswith(" 91")  # 100 * 10 ms / 11 ms
    assert "time to first token, llama-tiny shape bfloat16 (random weights), batch 1, prompt 40" in out


def test_a_row_with_no_candidate_left_is_printed_with_its_reasons(capsys):
    row = cases.Case("a row", lambda seed: None, {}, None, None, metric="TFLOP/s", percent_of="x", notes=["why"])
    assert cases.run_case(row, None, {}) == {"label": "a row", "notes": ["why"], "results": {}}
    assert capsys.readouterr().out.splitlines()[1:] == ["a row", "  no candidate could run", "  note: why"]


@pytest.mark.parametrize("argv", [["--task", "t8"], ["--task", "t8", "--ttft"], ["--task", "t8", "--bf16"]])
def test_the_bench_refuses_cleanly_without_a_gpu(argv, monkeypatch, capsys):
    from assignment.commands import bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(argv) == 2
    err = capsys.readouterr().err
    assert "make bench needs a CUDA GPU" in err and "Traceback" not in err
