"""The model's hyper-parameters, read from (and written to) a Hugging Face ``config.json``.

Field names are Hugging Face's, so a config reads the same here and on the Hub. Both spellings of the
rotary settings are accepted: ``rope_theta`` + ``rope_scaling`` (Llama 2/3.x, Mistral and SmolLM
checkpoints on the Hub) and ``rope_parameters`` (what transformers 5 writes).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

# The kit's own small checkpoint (trained by grader/authoring/train.py): what generation and the t7 checks load.
DEFAULT_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "kit-tiny"
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM")
MODEL_TYPES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral"}
ROPE_TYPES = ("default", "linear", "llama3")


class CheckpointError(ValueError):
    """A checkpoint directory, its config or its tensors cannot be used; the message names the problem."""


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # {"rope_type": "linear"|"llama3", "factor": ..., ...}
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    sliding_window: int | None = None  # Mistral v0.1: each token sees at most this many keys
    bos_token_id: int | None = None
    eos_token_id: list[int] = field(default_factory=list)
    architecture: str = "LlamaForCausalLM"
    torch_dtype: str = "float32"  # how the weights are stored

    def __post_init__(self) -> None:
        self.validate()

    @property
    def num_groups(self) -> int:
        """Query heads per KV head (1: multi-head attention; > 1: grouped-query attention)."""
        return self.num_attention_heads // self.num_key_value_heads

    def validate(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CheckpointError(f"config: {name} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(
                f"config: num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise CheckpointError(f"config: head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise CheckpointError(
                f"config: architecture {self.architecture!r} is not supported (this kit runs "
                f"{', '.join(SUPPORTED_ARCHITECTURES)})"
            )
        rope_type = rope_type_of(self.rope_scaling)
        if rope_type not in ROPE_TYPES:
            raise CheckpointError(
                f"config: rope scaling type {rope_type!r} is not supported (supported: {', '.join(ROPE_TYPES)})"
            )
        needed = {
            "linear": ("factor",),
            "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
        }.get(rope_type, ())
        missing = [key for key in needed if key not in (self.rope_scaling or {})]
        if missing:
            raise CheckpointError(f"config: rope scaling {rope_type!r} needs {', '.join(missing)}")

    # ------------------------------------------------------------------ Hugging Face config.json
    @classmethod
    def from_hf(cls, raw: dict) -> ModelConfig:
        """Read a ``config.json`` dictionary; unknown or unsupported settings raise ``CheckpointError``."""
        architecture = _architecture(raw)
        act = raw.get("hidden_act", "silu")
        if act != "silu":
            raise CheckpointError(f"config: hidden_act {act!r} is not supported (LLaMA-family models use 'silu')")
        try:
            heads = int(raw["num_attention_heads"])
            rope_theta, rope_scaling = _rope(raw)
            eos = raw.get("eos_token_id")
            return cls(
                vocab_size=raw["vocab_size"],
                hidden_size=raw["hidden_size"],
                intermediate_size=raw["intermediate_size"],
                num_hidden_layers=raw["num_hidden_layers"],
                num_attention_heads=heads,
                num_key_value_heads=raw.get("num_key_value_heads") or heads,
                head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
                rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
                rope_theta=rope_theta,
                rope_scaling=rope_scaling,
                max_position_embeddings=raw.get("max_position_embeddings", 2048),
                tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
                attention_bias=bool(raw.get("attention_bias", False)),
                mlp_bias=bool(raw.get("mlp_bias", False)),
                sliding_window=raw.get("sliding_window") if architecture == "MistralForCausalLM" else None,
                bos_token_id=raw.get("bos_token_id"),
                eos_token_id=[] if eos is None else list(eos) if isinstance(eos, list) else [eos],
                architecture=architecture,
                torch_dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "float32"),
            )
        except KeyError as missing:
            raise CheckpointError(f"config: required key {missing} is missing") from None

    def to_hf(self) -> dict:
        """The ``config.json`` dictionary, in the spelling checkpoints on the Hub use (rope_theta + rope_scaling)."""
        raw = {key: value for key, value in asdict(self).items() if key not in ("architecture", "eos_token_id")}
        raw.update(
            architectures=[self.architecture],
            model_type=MODEL_TYPES[self.architecture],
            hidden_act="silu",
            eos_token_id=self.eos_token_id[0] if len(self.eos_token_id) == 1 else self.eos_token_id,
        )
        if self.architecture != "MistralForCausalLM":
            raw.pop("sliding_window")
        return raw

    @classmethod
    def from_file(cls, path: Path) -> ModelConfig:
        try:
            raw = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise CheckpointError(f"{path}: config.json is missing (every checkpoint directory needs one)") from None
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise CheckpointError(f"{path}: expected a JSON object")
        try:
            return cls.from_hf(raw)
        except CheckpointError as exc:
            raise CheckpointError(f"{path}: {exc}") from None


def read_json(path: Path) -> dict:
    """The JSON object in an optional checkpoint file: {} when the file is absent or holds no object."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    return value if isinstance(value, dict) else {}


def rope_type_of(rope_scaling: dict | None) -> str:
    if not rope_scaling:
        return "default"
    return str(rope_scaling.get("rope_type") or rope_scaling.get("type") or "default")


def _architecture(raw: dict) -> str:
    names = raw.get("architectures") or []
    if not names:
        by_type = {model_type: arch for arch, model_type in MODEL_TYPES.items()}
        if raw.get("model_type") in by_type:
            return by_type[raw["model_type"]]
        raise CheckpointError(
            f"config: no 'architectures' entry and model_type {raw.get('model_type')!r} is not "
            f"one of {', '.join(MODEL_TYPES.values())}"
        )
    supported = [name for name in names if name in SUPPORTED_ARCHITECTURES]
    if not supported:
        raise CheckpointError(
            f"config: architectures {names} are not supported (this kit runs {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    return supported[0]


def _rope(raw: dict) -> tuple[float, dict | None]:
    """(rope_theta, rope_scaling) from either spelling; the "default" type means no scaling."""
    params = raw.get("rope_parameters")
    if isinstance(params, dict):
        theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
        scaling = {key: value for key, value in params.items() if key != "rope_theta"}
    else:
        theta = float(raw.get("rope_theta", 10000.0))
        scaling = dict(raw.get("rope_scaling") or {})
    if rope_type_of(scaling) == "default":
        return theta, None
    scaling["rope_type"] = rope_type_of(scaling)
    scaling.pop("type", None)
    return theta, scaling
