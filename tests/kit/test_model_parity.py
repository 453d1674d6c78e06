"""The kit's model gives transformers' logits on the same weights, for every variant instructors load.

Each case builds a small random checkpoint with transformers' own ``save_pretrained`` (Llama and
Mistral; MHA and GQA; tied and untied embeddings; rope scaling none, linear and llama3; one file and
shards; float32 and bfloat16 storage), loads it with ``assignment.model.load_checkpoint`` and compares
logits over a prompt (prefill) and over several single-token decode steps through the KV cache.
Runs on the CPU, and on CUDA too where there is one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is needed for the parity tests")

from assignment.model.checkpoint import load_checkpoint  # noqa: E402
from assignment.model.llama import decode_one_token, prefill  # noqa: E402

pytestmark = pytest.mark.kit
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
# Largest |logit difference| allowed, per the dtype the model computes in. float32: both sides do the same
# float32 operations in a different order (measured 2.4e-7 to 4.8e-7 on the CPU). bfloat16: every
# layer rounds to 8 significant bits and the two round at different places (measured 3.9e-3 to 7.8e-3).
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 0.05}
PROMPT, DECODE_STEPS, VOCAB = 13, 6, 211
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@dataclass(frozen=True)
class Variant:
    name: str
    architecture: str = "llama"
    heads: int = 4
    kv_heads: int = 4
    head_dim: int = 32
    tied: bool = False
    rope: dict | None = None
    shard: bool = False
    dtype: torch.dtype = torch.float32
    extra: dict = field(default_factory=dict)


VARIANTS = [
    Variant("llama-mha"),
    Variant("llama-gqa", kv_heads=2),
    Variant("llama-mqa-tied", kv_heads=1, tied=True),
    Variant("llama3-rope-gqa-sharded", kv_heads=2, rope=LLAMA3_ROPE, shard=True, extra={"rope_theta": 500000.0}),
    Variant("llama-linear-rope", rope={"rope_type": "linear", "factor": 4.0}),
    Variant("llama-bias-d64", heads=2, kv_heads=1, head_dim=64, extra={"attention_bias": True, "mlp_bias": True}),
    Variant("mistral-gqa", architecture="mistral", kv_heads=2, extra={"sliding_window": 4096}),
    Variant("llama-gqa-bf16", kv_heads=2, dtype=torch.bfloat16),
    Variant("llama3-rope-tied-bf16-sharded", kv_heads=2, tied=True, rope=LLAMA3_ROPE, shard=True, dtype=torch.bfloat16),
]


def build_reference(variant: Variant, folder) -> transformers.PreTrainedModel:
    cls_config, cls_model = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[variant.architecture]
    config = cls_config(
        vocab_size=VOCAB,
        hidden_size=variant.heads * variant.head_dim,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=variant.heads,
        num_key_value_heads=variant.kv_heads,
        head_dim=variant.head_dim,
        max_position_embeddings=128,
        tie_word_embeddings=variant.tied,
        rms_norm_eps=1e-5,
        rope_scaling=variant.rope,
        **variant.extra,
    )
    torch.manual_seed(0)
    model = cls_model(config).eval()
    with torch.no_grad():  # random norms too, so a swapped or missing norm weight shows
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(0.1 * torch.randn_like(param))
    model = model.to(variant.dtype)
    model.save_pretrained(folder, max_shard_size="40KB" if variant.shard else "1GB")
    _write_tokenizer(folder)
    return model


def _write_tokenizer(folder) -> None:
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(folder / "tokenizer.json"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_logits_match_transformers(variant, device, tmp_path):
    reference = build_reference(variant, tmp_path).to(device)
    if variant.shard:
        assert (tmp_path / "model.safetensors.index.json").is_file(), "the sharded case did not shard"
    ours = load_checkpoint(tmp_path, device=device, dtype=variant.dtype, max_seq_len=64, max_batch_size=2).model
    tokens = torch.randint(0, VOCAB, (2, PROMPT + DECODE_STEPS), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        expected = reference(tokens).logits.float()  # (2, T, V)
        worst = {
            "prefill": (
                prefill(ours, tokens[:, :PROMPT], torch.arange(PROMPT, device=device)) - expected[:, PROMPT - 1]
            )
            .abs()
            .max()
            .item()
        }
        for p in range(PROMPT, PROMPT + DECODE_STEPS):
            logits = decode_one_token(ours, tokens[:, p : p + 1], torch.tensor([p], device=device))
            worst[f"decode@{p}"] = (logits - expected[:, p]).abs().max().item()
    tolerance = TOLERANCE[variant.dtype]
    bad = {step: err for step, err in worst.items() if not err <= tolerance}
    assert not bad, f"{variant.name} on {device}: logits differ from transformers by {bad} (tolerance {tolerance})"


def test_upcast_bf16_weights_match_transformers_in_float32(tmp_path):
    """bf16 weights upcast on load (the default) give transformers' float32 logits on the same weights."""
    build_reference(Variant("bf16-stored", kv_heads=2, dtype=torch.bfloat16), tmp_path)
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ours = load_checkpoint(tmp_path, max_seq_len=32).model
    assert ours.embed_tokens.weight.dtype == torch.float32
    tokens = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        err = (ours(tokens) - reference(tokens).logits).abs().max().item()
    assert err <= TOLERANCE[torch.float32], f"upcast bf16 checkpoint: logits differ by {err}"


def test_hub_style_config_reads_like_the_transformers5_one(tmp_path):
    """Checkpoints on the Hub spell rotary settings rope_theta + rope_scaling; transformers 5 writes
    rope_parameters. Both must build the same model."""
    build_reference(Variant("rope", kv_heads=2, rope=LLAMA3_ROPE, extra={"rope_theta": 500000.0}), tmp_path)
    tokens = torch.randint(0, VOCAB, (1, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        written = load_checkpoint(tmp_path, max_seq_len=32).model(tokens)
        raw = json.loads((tmp_path / "config.json").read_text())
        params = raw.pop("rope_parameters")
        raw["rope_theta"] = params.pop("rope_theta")
        raw["rope_scaling"] = params
        (tmp_path / "config.json").write_text(json.dumps(raw))
        hub = load_checkpoint(tmp_path, max_seq_len=32).model(tokens)
    assert torch.equal(written, hub)


def test_prefill_in_chunks_equals_one_prefill(tmp_path):
    """A prompt fed in two chunks (the second attends to the cache plus itself) gives the same next logits."""
    build_reference(Variant("chunks", kv_heads=2), tmp_path)
    model = load_checkpoint(tmp_path, max_seq_len=32).model
    tokens = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        whole = prefill(model, tokens, torch.arange(12))
        prefill(model, tokens[:, :5], torch.arange(5))
        chunked = prefill(model, tokens[:, 5:], torch.arange(5, 12))
    assert (whole - chunked).abs().max().item() <= 1e-5
