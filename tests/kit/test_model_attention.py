"""The model's attention seam (assignment/model/attention.py) and what a task's code declares for it
(``TaskCode.model_attention``): the names ATTN= takes (looked up in the task modules, above the model), what the model
takes, the checks before a model runs, and that a task's declaration (here a stand-in "t8" in bfloat16, as the
tensor-core task would) runs the model's attention with nothing else to change."""

from __future__ import annotations

import json

import pytest
import torch

from assignment import tasks
from assignment.model import attention
from assignment.model.attention_choice import KIT_IMPLEMENTATIONS, ModelAttention, name_of
from assignment.model.llama import decode_one_token, prefill
from assignment.model.presets import preset_config, random_model

pytestmark = pytest.mark.kit
DTYPES = ("float32", "float16", "bfloat16")
TINY_HEAD_DIM = preset_config("llama-tiny").head_dim


def test_the_names_are_the_models_own_then_each_task_that_declares_an_attention():
    declaring = [c.id for c in tasks.available() if c.model_attention is not None]
    assert declaring, "no task runs the model's attention"
    assert tasks.attention_choices() == (*KIT_IMPLEMENTATIONS, *declaring)
    for task_id in declaring:
        spec = tasks.attention(task_id)
        assert spec is tasks.code(task_id).model_attention and spec.name == task_id, "ATTN=<id> names its task"
        assert callable(spec.attend) and spec.label and spec.description
        assert spec.dtypes is None or set(spec.dtypes) <= set(DTYPES), spec.dtypes
        assert spec.head_dims is None or all(isinstance(d, int) and d > 0 for d in spec.head_dims)
        assert attention.attends_on_cache(spec) == (spec.cache_class is not None)
        assert name_of(spec) == task_id
    for own in KIT_IMPLEMENTATIONS:
        assert tasks.attention(own) == own and not attention.attends_on_cache(own)


@pytest.mark.parametrize("name", ["flash", "t99", "t7", "T1", ""])
def test_an_unknown_name_is_refused_with_the_choices(name):
    with pytest.raises(ValueError, match="unknown") as error:
        tasks.attention(name)
    assert all(choice in str(error.value) for choice in tasks.attention_choices())


@pytest.mark.parametrize("choice", ["flash", "t5", "", None, 5])
def test_the_model_takes_its_own_names_or_a_tasks_code_and_says_so(choice):
    """A task's id is looked up above the model (ATTN=<id>, tasks.attention): handed to the model as a string, the
    message says how to hand it over instead."""
    with pytest.raises(ValueError, match="not one the model knows") as error:
        attention.get(choice, 64, "cpu")
    assert "'reference' or 'sdpa'" in str(error.value) and "assignment.tasks.attention(" in str(error.value)
    with pytest.raises(ValueError, match="not one the model knows"):
        random_model("llama-tiny", device="cpu", attention_impl=choice)


def test_an_attention_without_a_cache_of_its_own_has_no_cache_class():
    with pytest.raises(ValueError, match="no cache of its own"):
        attention.cache_class("reference")


@pytest.fixture
def declare():
    """``declare(**fields)``: the attention a task "t8" would declare with these fields, computing with the reference
    attention, and the list of the dtypes it is called with. The model takes it as it is: no task module, no
    registry in between."""

    def install(**fields) -> tuple[ModelAttention, list[torch.dtype]]:
        calls: list[torch.dtype] = []

        def attend(q, k, v, scale):
            calls.append(q.dtype)
            return attention.reference(q, k, v, scale)

        spec = tasks.TaskCode(
            "t8", model_attention=ModelAttention(attend, "a stand-in", "a stand-in", **fields)
        ).model_attention
        return spec, calls

    return install


def test_a_task_that_declares_an_attention_runs_the_model_in_its_dtype(declare):
    spec, calls = declare(head_dims=(TINY_HEAD_DIM,), dtypes=("float16", "bfloat16"))
    model = random_model("llama-tiny", device="cpu", dtype=torch.bfloat16, attention_impl=spec)
    assert model.attention_name == "t8"
    model.setup_caches(1, 16)
    tokens = torch.randint(0, model.vocab_size, (1, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = prefill(model, tokens, torch.arange(6))
        decode_one_token(model, logits.argmax(-1, keepdim=True), torch.tensor([6]))
    # Every layer's attention, in the prefill and the decode step, ran the task's code on bfloat16 tensors.
    assert calls == [torch.bfloat16] * (2 * model.config.num_hidden_layers)

    reference = random_model("llama-tiny", device="cpu", dtype=torch.bfloat16)
    reference.setup_caches(1, 16)
    with torch.no_grad():
        assert torch.equal(prefill(reference, tokens, torch.arange(6)), logits)

    in_float32 = random_model("llama-tiny", device="cpu", attention_impl=spec)
    with pytest.raises(ValueError, match="takes float16 or bfloat16; this model computes in float32"):
        in_float32(tokens)
    with pytest.raises(ValueError, match=f"this model has head_dim {2 * TINY_HEAD_DIM}"):
        attention.get(spec, 2 * TINY_HEAD_DIM, "cpu", torch.bfloat16)


def test_cuda_only_code_is_refused_on_the_cpu_before_any_weight_loads(declare, tmp_path):
    """make generate prints the ValueError; the folder here has a config and no weights, so a check that came after
    loading would fail on the missing weights instead."""
    from assignment.model.checkpoint import load_checkpoint

    spec, _ = declare(cuda=True)
    with pytest.raises(ValueError, match=r"'t8' \(a stand-in\) runs on CUDA only"):
        attention.get(spec, 64, "cpu")
    assert attention.get(spec, 64, "cuda") is not None  # nothing runs: the checks pass on a GPU device
    (tmp_path / "config.json").write_text(json.dumps(preset_config("llama-tiny").to_hf()))
    with pytest.raises(ValueError, match="CUDA only"):
        load_checkpoint(tmp_path, device="cpu", attention=spec)


def test_the_kernel_attentions_are_refused_off_their_device_dtype_and_head_dims():
    for code in tasks.with_model_attention():
        spec = code.model_attention
        if spec.cuda:
            with pytest.raises(ValueError, match="CUDA only"):
                attention.get(spec, 64, "cpu")
        for dtype in DTYPES:
            if spec.dtypes is not None and dtype not in spec.dtypes:
                with pytest.raises(ValueError, match=f"computes in {dtype}"):
                    attention.get(spec, (spec.head_dims or (64,))[0], "cuda", getattr(torch, dtype))
        if spec.head_dims is not None:
            with pytest.raises(ValueError, match="head_dim 48"):
                attention.get(spec, 48, "cuda")
            dtype = getattr(torch, (spec.dtypes or DTYPES)[0])
            assert attention.get(spec, spec.head_dims[0], "cuda", dtype) is spec.attend
