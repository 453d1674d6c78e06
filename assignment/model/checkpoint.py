"""Load and save checkpoints in the Hugging Face layout.

A checkpoint directory holds ``config.json``, the weights as ``model.safetensors`` or as shards
``model-0000N-of-0000M.safetensors`` listed in ``model.safetensors.index.json``, and the tokenizer
(``tokenizer.json``, ``tokenizer_config.json``) and ``generation_config.json``. Weights are read one
tensor at a time from memory-mapped files (``safetensors.safe_open``), converted to the requested dtype
and device, and put in place: the file is never copied whole into host memory.

Tensor names are Hugging Face's (``model.layers.3.self_attn.q_proj.weight``, ``lm_head.weight``); the
model's own names are the same without the leading ``model.``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from . import attention as attention_seam
from .config import DEFAULT_CHECKPOINT, CheckpointError, ModelConfig, read_json
from .llama import Transformer, empty_model
from .tokenizer import Tokenizer

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Tensors some exported checkpoints carry that the model recomputes: skipped without a word.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclass
class LoadedModel:
    """What ``load_checkpoint`` returns: the model (caches set up), its tokenizer and generation defaults."""

    model: Transformer
    tokenizer: Tokenizer
    config: ModelConfig
    path: Path
    generation_config: dict = field(default_factory=dict)


def load_checkpoint(
    path: str | Path = DEFAULT_CHECKPOINT,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = torch.float32,
    max_seq_len: int | None = None,
    max_batch_size: int = 1,
    attention: attention_seam.Choice = "reference",
) -> LoadedModel:
    """Build the model of a Hugging Face checkpoint directory and load its weights.

    dtype: what the model computes in; float32 by default (bf16/fp16 weights are upcast as they load);
    None keeps the stored dtype. max_seq_len: the KV cache's capacity (default: the config's
    max_position_embeddings, at most 4096). attention: "reference", "sdpa" or a task's ModelAttention (attention.py);
    one that cannot run this model on ``device`` in ``dtype`` is refused (ValueError) before any weight loads.
    """
    path = Path(path).expanduser()
    if not path.is_dir():
        raise CheckpointError(
            f"{path}: not a checkpoint directory (it should hold config.json, *.safetensors and tokenizer.json)"
        )
    config = ModelConfig.from_file(path / "config.json")
    dtype = dtype or DTYPES.get(config.torch_dtype, torch.float32)
    attention_seam.get(attention, config.head_dim, device, dtype)
    model = empty_model(config, device, attention).to(dtype)
    _load_weights(model, weight_files(path), dtype)
    model.eval().requires_grad_(False)
    model.fuse_projections()
    tokenizer = Tokenizer.from_dir(path, config)
    generation_config = read_json(path / "generation_config.json")
    model.setup_caches(max_batch_size, max_seq_len or _default_cache_length(config))
    return LoadedModel(model, tokenizer, config, path, generation_config)


def _default_cache_length(config: ModelConfig) -> int:
    length = min(config.max_position_embeddings, 4096)
    return min(length, config.sliding_window) if config.sliding_window else length


def weight_files(path: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it."""
    index = path / INDEX_FILE
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: no 'weight_map' (tensor name -> shard file)")
        files = {name: path / shard for name, shard in weight_map.items()}
        for shard in sorted(set(files.values())):
            if not shard.is_file():
                raise CheckpointError(f"{path}: shard {shard.name} listed in {INDEX_FILE} is missing")
        return files
    single = path / SINGLE_FILE
    if single.is_file():
        with safe_open(single, framework="pt") as f:
            return {name: single for name in f.keys()}
    others = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pth"))
    hint = (
        f" (found {', '.join(others)}: only safetensors are read; convert with transformers' save_pretrained)"
        if others
        else ""
    )
    raise CheckpointError(f"{path}: no weights: neither {SINGLE_FILE} nor {INDEX_FILE}{hint}")


def _load_weights(model: Transformer, files: dict[str, Path], dtype: torch.dtype) -> None:
    expected = {name: p for name, p in model.named_parameters()}  # tied weights appear once
    if model.config.tie_word_embeddings:
        expected.pop("lm_head.weight", None)
    by_file: dict[Path, list[tuple[str, str]]] = {}
    unexpected = []
    for hf_name, file in files.items():
        name = hf_name.removeprefix("model.")
        if name in expected:
            by_file.setdefault(file, []).append((hf_name, name))
        elif hf_name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue  # some tied checkpoints store the head anyway; the embedding is the one used
        elif not hf_name.endswith(IGNORED_SUFFIXES):
            unexpected.append(hf_name)
    if unexpected:
        raise CheckpointError(
            f"{len(unexpected)} tensors do not belong to a {model.config.architecture} with this "
            f"config (first: {unexpected[0]}); is config.json the one for these weights?"
        )
    loaded = set()
    for file, names in by_file.items():
        with safe_open(file, framework="pt") as f:
            for hf_name, name in names:
                param = expected[name]
                tensor = f.get_tensor(hf_name)
                if tuple(tensor.shape) != tuple(param.shape):
                    raise CheckpointError(
                        f"{file.name}: tensor {hf_name} has shape {tuple(tensor.shape)}, the config "
                        f"gives {tuple(param.shape)}"
                    )
                with torch.no_grad():
                    param.copy_(tensor.to(dtype))
                loaded.add(name)
    missing = sorted(set(expected) - loaded)
    if missing:
        hf = ["lm_head.weight" if m == "lm_head.weight" else f"model.{m}" for m in missing]
        raise CheckpointError(
            f"the checkpoint lacks {len(missing)} tensors the config needs: {', '.join(hf[:5])}"
            f"{' ...' if len(hf) > 5 else ''}"
        )


def save_checkpoint(
    model: Transformer, out_dir: str | Path, dtype: torch.dtype = torch.bfloat16, generation_config: dict | None = None
) -> Path:
    """Write config.json, model.safetensors and generation_config.json (the tokenizer is saved by its owner)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = model.config
    tensors = {}
    for name, param in model.named_parameters():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        hf_name = name if name == "lm_head.weight" else f"model.{name}"
        tensors[hf_name] = param.detach().to("cpu", dtype).clone()  # a fused model's weights share storage
    save_file(tensors, out / SINGLE_FILE, metadata={"format": "pt"})
    raw = config.to_hf()
    raw["torch_dtype"] = str(dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    generation = {"bos_token_id": config.bos_token_id, "eos_token_id": raw["eos_token_id"], **(generation_config or {})}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return out
