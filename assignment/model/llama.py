"""A LLaMA-family transformer (Llama 2/3.x, TinyLlama, SmolLM, Mistral), small enough to read in one sitting.

    tokens ─ embed ─┬─ [ RMSNorm ─ attention (RoPE, GQA, KV cache) ─ + ─ RMSNorm ─ SwiGLU MLP ─ + ] × layers
                    └─────────────── residual stream ────────────────┘
                  ─ RMSNorm ─ lm_head ─ logits

Module names are Hugging Face's (``embed_tokens``, ``layers.N.self_attn.q_proj``, ...), so a checkpoint's
tensors load by name (checkpoint.py). Positions are always explicit: ``input_pos`` says where in the
sequence each token sits, which is also where its key and value go in the static KV cache. Generation
uses two entry points, as the course's t6/t7 do:

    prefill(model, tokens (B, T), input_pos = arange(T))        -> logits (B, V) of the last prompt token
    decode_one_token(model, token (B, 1), input_pos = tensor([p])) -> logits (B, V) of the token at p

Every attention call goes through the seam in attention.py (``model.attention_impl`` names it), and the
cache is any object with ``update(input_pos, k, v)`` (``setup_caches(..., cache_cls=)``), which is where
t6 plugs the student's cache and kernels in. Logits are returned in float32 whatever the weights' dtype.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import attention, fused_ops
from .config import ModelConfig, rope_type_of


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:  # one fused kernel where torch has one
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # Normalise in float32 (a bf16 mean of squares loses digits), scale in the model's dtype.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


# --------------------------------------------------------------------------- rotary position embeddings
def rope_frequencies(config: ModelConfig) -> torch.Tensor:
    """Inverse frequencies (head_dim / 2,) of the rotary embedding, with the config's scaling applied."""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    kind, params = rope_type_of(config.rope_scaling), config.rope_scaling or {}
    if kind == "linear":
        return inv_freq / params["factor"]
    if kind == "llama3":
        return _llama3_frequencies(inv_freq, params)
    return inv_freq


def _llama3_frequencies(inv_freq: torch.Tensor, params: dict) -> torch.Tensor:
    """Llama 3.1's scaling: long wavelengths are slowed by ``factor``, short ones kept, the middle blended."""
    factor = params["factor"]
    low, high = params["low_freq_factor"], params["high_freq_factor"]
    context = params["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > context / low, inv_freq / factor, inv_freq)
    blend = (context / wavelen - low) / (high - low)
    blended = (1 - blend) * scaled / factor + blend * scaled
    middle = (wavelen >= context / high) & (wavelen <= context / low)
    return torch.where(middle, blended, scaled)


def rope_tables(config: ModelConfig, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and signed sin, each (length, head_dim): row p rotates the token at position p.

    The rotation pairs x_i with x_(i + d/2): (x_i, x_(i+d/2)) -> (x_i cos - x_(i+d/2) sin, x_(i+d/2) cos + x_i sin).
    The sine's first half is stored negated, so that apply_rope is x * cos + roll(x, d/2) * sin: three kernels.
    """
    freqs = torch.outer(torch.arange(length, dtype=torch.float32), rope_frequencies(config))  # (length, d/2)
    return torch.cat((freqs, freqs), dim=-1).cos(), torch.cat((-freqs.sin(), freqs.sin()), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, heads, T, d) by the angles of its positions (cos, signed sin from rope_tables: (T, d))."""
    rotated = x.roll(x.shape[-1] // 2, dims=-1)  # (x_(d/2) .. x_(d-1), x_0 .. x_(d/2-1))
    return torch.addcmul(x * cos.to(x.dtype), rotated, sin.to(x.dtype))


# --------------------------------------------------------------------------- the static KV cache
class KVCache(nn.Module):
    """Keys and values of every position so far, in fixed buffers (B_max, H_kv, L_max, d).

    ``update`` writes k and v at ``input_pos`` and returns the whole buffers; the attention reads the
    first ``input_pos[-1] + 1`` positions. Nothing is reallocated between steps, so a step's memory
    addresses never change (what a captured CUDA graph needs, t6).
    """

    def __init__(
        self,
        max_batch_size: int,
        max_seq_len: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ):
        super().__init__()
        shape = (max_batch_size, n_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v: (B, H_kv, T, d) for positions input_pos (T,) -> the cache buffers (B, H_kv, L_max, d)."""
        B = k.shape[0]
        self.k_cache[:B, :, input_pos] = k
        self.v_cache[:B, :, input_pos] = v
        return self.k_cache[:B], self.v_cache[:B]


# --------------------------------------------------------------------------- the blocks
class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = (
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        bias, hidden = config.attention_bias, config.hidden_size
        self.q_proj = nn.Linear(hidden, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, hidden, bias=bias)
        self.scale = attention.default_scale(self.head_dim)
        self.qkv_weight = self.qkv_bias = None  # q, k, v weights in one matrix after Transformer.fuse_projections()
        self.kv_cache = None
        self.cache_attends = False  # the cache does the attention (t6): set by the model (Transformer.attention_impl)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, input_pos: torch.Tensor | None, kv_len: int, attend
    ) -> torch.Tensor:
        B, T, _ = x.shape  # x: (B, T, hidden)
        H, H_kv, d = self.n_heads, self.n_kv_heads, self.head_dim
        if self.qkv_weight is not None:  # one matrix-vector product, one kernel to rotate and split q, k and v
            qkv = fused_ops.linear(x, self.qkv_weight, self.qkv_bias).view(B, T, H + 2 * H_kv, d)
            q, k, v = fused_ops.rope_split(qkv, cos, sin, H, H_kv, apply_rope)  # (B, H or H_kv, T, d)
        else:
            q = self.q_proj(x).view(B, T, H, d).transpose(1, 2)  # (B, H, T, d)
            k = self.k_proj(x).view(B, T, H_kv, d).transpose(1, 2)  # (B, H_kv, T, d)
            v = self.v_proj(x).view(B, T, H_kv, d).transpose(1, 2)  # (B, H_kv, T, d)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if input_pos is not None and self.cache_attends:
            out = self.kv_cache.attend(q, k, v, input_pos, self.scale, kv_len)  # (B, H, T, d), t6
            return self.project_out(out)
        if input_pos is not None:
            k, v = self.kv_cache.update(input_pos, k, v)  # (B, H_kv, L_max, d)
            k, v = k[:, :, :kv_len], v[:, :, :kv_len]  # (B, H_kv, kv_len, d)
        out = attend(q, k, v, self.scale)  # (B, H, T, d)
        return self.project_out(out)

    def project_out(self, out: torch.Tensor) -> torch.Tensor:
        """(B, H, T, d) -> o_proj of the heads side by side, (B, T, hidden)."""
        B, H, T, d = out.shape
        return fused_ops.linear(out.transpose(1, 2).reshape(B, T, H * d), self.o_proj.weight, self.o_proj.bias)


class FeedForward(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        hidden, inner, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.gate_proj = nn.Linear(hidden, inner, bias=bias)
        self.up_proj = nn.Linear(hidden, inner, bias=bias)
        self.down_proj = nn.Linear(inner, hidden, bias=bias)
        self.gate_up_weight = self.gate_up_bias = None  # after Transformer.fuse_projections()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_weight is not None:
            hidden = fused_ops.silu_mul(fused_ops.linear(x, self.gate_up_weight, self.gate_up_bias))
            return fused_ops.linear(hidden, self.down_proj.weight, self.down_proj.bias)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = FeedForward(config)

    def forward(self, x, normed, cos, sin, input_pos, kv_len, attend, next_norm) -> tuple[torch.Tensor, torch.Tensor]:
        """x + attention(norm(x)), then + mlp(norm(...)): the residual stream after the block, and ``next_norm`` of
        it (the next block's input norm, or the final one). ``normed`` is this block's input norm of x, already
        computed: each residual add runs in the kernel of the norm that follows it (fused_ops.add_rms_norm)."""
        attended = self.self_attn(normed, cos, sin, input_pos, kv_len, attend)
        x, normed = fused_ops.add_rms_norm(x, attended, self.post_attention_layernorm)
        return fused_ops.add_rms_norm(x, self.mlp(normed), next_norm)


# --------------------------------------------------------------------------- the model
class Transformer(nn.Module):
    def __init__(self, config: ModelConfig, attention_impl: attention.Choice = "reference"):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.max_batch_size = self.max_seq_len = 0
        self.attention_impl = attention_impl
        self._rope_length = 0
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)

    @property
    def attention_impl(self) -> attention.Choice:
        """The attention that runs: "reference", "sdpa" or a task's ModelAttention (attention.py); set it before
        ``setup_caches``."""
        return self._attention_impl

    @attention_impl.setter
    def attention_impl(self, choice: attention.Choice) -> None:
        cache_attends = attention.attends_on_cache(choice)  # ValueError for one the seam does not know, saying why
        self._attention_impl = choice
        for layer in self.layers:
            layer.self_attn.cache_attends = cache_attends

    @property
    def attention_name(self) -> str:
        """What ``ATTN=`` calls the attention that runs: "reference", "sdpa" or the task's id."""
        return attention.name_of(self._attention_impl)

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def setup_caches(self, max_batch_size: int, max_seq_len: int, cache_cls=None) -> None:
        """Allocate a static cache per layer for ``max_batch_size`` sequences of up to ``max_seq_len`` tokens.

        ``cache_cls``: the cache's class (None: ``KVCache``, or, with an attention whose cache attends (t6), that
        task's cache class: the student's cache from t6_kv_cache.py, which also does the attention)."""
        if cache_cls is None:
            choice = self.attention_impl
            cache_cls = attention.cache_class(choice) if attention.attends_on_cache(choice) else KVCache
        window = self.config.sliding_window
        if window is not None and max_seq_len > window:
            raise ValueError(
                f"this model attends over a sliding window of {window} tokens, which the kit does not "
                f"implement: use max_seq_len <= {window}"
            )
        if max_batch_size < 1 or max_seq_len < 1:
            raise ValueError(
                f"setup_caches: max_batch_size and max_seq_len must be >= 1, got {max_batch_size}, {max_seq_len}"
            )
        weight = self.embed_tokens.weight
        for layer in self.layers:
            layer.self_attn.kv_cache = cache_cls(
                max_batch_size,
                max_seq_len,
                self.config.num_key_value_heads,
                self.config.head_dim,
                weight.dtype,
                weight.device,
            )
        self.max_batch_size, self.max_seq_len = max_batch_size, max_seq_len
        self._ensure_rope(max_seq_len)

    @torch.no_grad()
    def fuse_projections(self) -> None:
        """Put each layer's q, k and v weights in one matrix, and gate and up in another, so that a decode step
        reads them in one matrix-vector product instead of three and two (fewer, fuller kernels: t6's time between
        tokens). The Linear modules keep their names and become views of the fused matrices, so loading, saving
        and in-place changes still work; replacing a weight tensor afterwards needs another call."""
        for layer in self.layers:
            a, m = layer.self_attn, layer.mlp
            a.qkv_weight, a.qkv_bias = _fuse(a.q_proj, a.k_proj, a.v_proj)
            m.gate_up_weight, m.gate_up_bias = _fuse(m.gate_proj, m.up_proj)

    def _ensure_rope(self, length: int) -> None:
        if length > self._rope_length:
            cos, sin = rope_tables(self.config, max(length, 2 * self._rope_length))
            self.rope_cos, self.rope_sin = cos.to(self.device), sin.to(self.device)
            self._rope_length = cos.shape[0]

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, V) of every position. Without ``input_pos``: a plain causal pass over ``tokens`` at
        positions 0..T-1 that neither reads nor writes the cache (training, scoring a text)."""
        return self._run(tokens, input_pos, last_only=False)

    def _run(
        self, tokens: torch.Tensor, input_pos: torch.Tensor | None, last_only: bool, checked: bool = True
    ) -> torch.Tensor:
        """``checked=False`` (CUDA-graph capture, cuda_graph.py): no check that reads a GPU value on the host."""
        kv_len = None  # keys visible to the last token (None: unchecked, read on the device)
        if checked:
            B, T = _check_tokens(tokens, self.config.vocab_size)
            if input_pos is None:  # a plain causal pass over tokens at positions 0..T-1; the cache is untouched
                kv_len = T
            elif not self.max_seq_len:
                raise ValueError("input_pos given but no KV cache is set up: call setup_caches() first")
            else:
                kv_len = self._check_positions(input_pos, B, T)[1]
        T = tokens.shape[1]
        if input_pos is None:
            self._ensure_rope(T)
            cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # (T, d)
        else:  # the angles of each token's own position, gathered on the device
            cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]  # (T, d)
        attend = attention.get(self.attention_impl, self.config.head_dim, self.device, self.embed_tokens.weight.dtype)
        x = self.embed_tokens(tokens)  # (B, T, hidden)
        x, h = fused_ops.add_rms_norm(x, None, self.layers[0].input_layernorm)  # h: x normalised
        next_norms = [layer.input_layernorm for layer in self.layers[1:]] + [self.norm]
        for layer, next_norm in zip(self.layers, next_norms):
            x, h = layer(x, h, cos, sin, input_pos, kv_len, attend, next_norm)
        if last_only:
            h = h[:, -1:]
        return fused_ops.linear(h, self.lm_head.weight).float()  # (B, T or 1, V)

    def _check_positions(self, input_pos: torch.Tensor | None, B: int, T: int) -> tuple[int, int]:
        """(first position, keys visible to the last token); one host sync per call, not per layer."""
        if (
            not isinstance(input_pos, torch.Tensor)
            or input_pos.dtype not in (torch.int64, torch.int32)
            or input_pos.shape != (T,)
        ):
            raise ValueError(
                f"input_pos must be an integer tensor of shape ({T},) (one position per token), got "
                f"{getattr(input_pos, 'shape', type(input_pos).__name__)}"
            )
        if B > self.max_batch_size:
            raise ValueError(f"batch {B} is larger than the cache's max_batch_size {self.max_batch_size}")
        first, last = input_pos[[0, -1]].tolist()
        if last - first != T - 1 or first < 0:
            raise ValueError(f"input_pos must be consecutive positions first..first+{T - 1}, got {first}..{last}")
        if last >= self.max_seq_len:
            raise ValueError(
                f"position {last} is past the KV cache's capacity of {self.max_seq_len} tokens (a prompt "
                f"plus the tokens to generate must fit in max_seq_len)"
            )
        return first, last + 1


def empty_model(
    config: ModelConfig,
    device: torch.device | str,
    attention_impl: attention.Choice = "reference",
    dtype: torch.dtype | None = None,
) -> Transformer:
    """A model whose tensors are allocated on ``device`` but not initialised (fill them: load or draw weights);
    built on the meta device first, so no time goes into an initialisation that is overwritten. ``dtype``: its
    tensors' (None: float32), allocated in it directly (a bf16 1B model never takes the 5 GB of its float32 twin)."""
    with torch.device("meta"):
        model = Transformer(config, attention_impl=attention_impl)
    if dtype is not None:
        model = model.to(dtype)  # still on the meta device: nothing is allocated yet
    model = model.to_empty(device=device)
    if config.tie_word_embeddings:  # to_empty makes a tensor per module: tie them again
        model.lm_head.weight = model.embed_tokens.weight
    return model


def _fuse(*linears: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate the Linears' weights (and biases) by output rows; each Linear's becomes a view of the result."""
    weight = torch.cat([lin.weight for lin in linears])
    bias = torch.cat([lin.bias for lin in linears]) if linears[0].bias is not None else None
    row = 0
    for lin in linears:
        rows = lin.out_features
        lin.weight = nn.Parameter(weight[row : row + rows], requires_grad=False)
        if bias is not None:
            lin.bias = nn.Parameter(bias[row : row + rows], requires_grad=False)
        row += rows
    return weight, bias


def _check_tokens(tokens: torch.Tensor, vocab_size: int) -> tuple[int, int]:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"tokens must be an integer tensor of shape (B, T), got "
            f"{getattr(tokens, 'dtype', type(tokens).__name__)} {tuple(getattr(tokens, 'shape', ()))}"
        )
    if tokens.shape[1] == 0:
        raise ValueError("tokens is empty: give at least one token")
    if tokens.device.type == "cpu":
        low, high = tokens.min().item(), tokens.max().item()
        if low < 0 or high >= vocab_size:
            raise ValueError(f"token ids must lie in [0, {vocab_size}), got {low}..{high}")
    return tokens.shape[0], tokens.shape[1]


def prefill(model: Transformer, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
    """Run the prompt (B, T) at positions ``input_pos`` (T,), filling the cache; logits (B, V) of its last token."""
    return model._run(tokens, input_pos, last_only=True)[:, -1]


def decode_one_token(model: Transformer, token: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
    """One new token per sequence (B, 1) at position ``input_pos`` (1,); logits (B, V) of the next one."""
    if token.dim() != 2 or token.shape[1] != 1:
        raise ValueError(f"decode_one_token takes one token per sequence, shape (B, 1); got {tuple(token.shape)}")
    return model._run(token, input_pos, last_only=True)[:, -1]


# The same two entry points as methods: the generation loop of t7 talks to ``model.prefill`` and
# ``model.decode_one_token``, so a stand-in (assignment/model/scripted.py) can take the model's place.
Transformer.prefill = prefill
Transformer.decode_one_token = decode_one_token
