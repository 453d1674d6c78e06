"""Model shapes the kit measures without downloading anything: a published configuration, random weights.

t6's model benchmark and its graded timing run the Llama-3.2-1B configuration (16 layers, hidden 2048,
32 query heads over 8 KV heads, head dim 64, vocabulary 128256, tied embeddings): the time of a decode
step depends on the shapes, not on the values of the weights, so random weights made on the GPU in a
second stand in for the 4.9 GB checkpoint.

    model = random_model("llama-3.2-1b", device="cuda")        # float32, seeded
    twin = sharing_weights(model, attention_impl="reference")  # the same weight tensors, its own caches
"""

from __future__ import annotations

import torch

from .attention_choice import Choice
from .config import ModelConfig
from .llama import Transformer, empty_model

PRESETS: dict[str, dict] = {
    # meta-llama/Llama-3.2-1B's config.json, the fields the kit reads.
    "llama-3.2-1b": dict(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        rms_norm_eps=1e-5,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        max_position_embeddings=131072,
        tie_word_embeddings=True,
        bos_token_id=128000,
        eos_token_id=[128001],
    ),
    # The same layout, scaled down for tests on a CPU.
    "llama-tiny": dict(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=32,
        rope_theta=500000.0,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    ),
}


def preset_config(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r} (choose from {', '.join(PRESETS)})")
    return ModelConfig(**PRESETS[name])


def random_model(
    config: ModelConfig | str,
    *,
    seed: int = 0,
    device: torch.device | str = "cuda",
    dtype: torch.dtype = torch.float32,
    attention_impl: Choice = "reference",
    std: float = 0.02,
) -> Transformer:
    """A model with N(0, std²) weights (norm weights 1), made directly on ``device`` in ``dtype`` from ``seed``."""
    config = preset_config(config) if isinstance(config, str) else config
    model = empty_model(config, device, attention_impl, dtype)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():  # a tied lm_head is listed once (as embed_tokens)
            if name.endswith("layernorm.weight") or name == "norm.weight":
                param.fill_(1.0)
            else:
                param.normal_(0.0, std, generator=generator)
    model = model.to(dtype).eval().requires_grad_(False)
    model.fuse_projections()
    return model


def sharing_weights(model: Transformer, attention_impl: Choice | None = None) -> Transformer:
    """Another model object over the same weight tensors (no copy), with its own caches and attention."""
    with torch.device("meta"):
        twin = Transformer(model.config, attention_impl=attention_impl or model.attention_impl)
    twin.load_state_dict(model.state_dict(), assign=True)
    if model.config.tie_word_embeddings:
        twin.lm_head.weight = twin.embed_tokens.weight
    for mine, theirs in zip(twin.layers, model.layers):  # the fused matrices, if any (not in the state dict)
        mine.self_attn.qkv_weight, mine.self_attn.qkv_bias = theirs.self_attn.qkv_weight, theirs.self_attn.qkv_bias
        mine.mlp.gate_up_weight, mine.mlp.gate_up_bias = theirs.mlp.gate_up_weight, theirs.mlp.gate_up_bias
    twin.rope_cos, twin.rope_sin = torch.empty(0, device=model.device), torch.empty(0, device=model.device)
    return twin.eval().requires_grad_(False)
