"""Task t6: the static KV cache of a decoding model, and the attention that reads it.

Generation runs a model in two phases (assignment/model/llama.py calls this file for both):

* **prefill**: the prompt's T tokens at positions p0 .. p0+T-1 go through the model at once. Each layer
  writes their keys and values into its cache, then the T queries attend causally to the cache so far
  plus themselves: your t5 kernel, with bottom-right alignment (query i of T sees keys j <= p0 + i).
* **decode**: one new token per sequence at position p. Its key and value go into the cache at p, then
  its single query attends to positions 0 .. p: your t6 kernel (t6_decode_attention.cu), which reads
  the length p + 1 from GPU memory.

Every decode step has the same shapes and the same buffers; only the position changes, and the
position lives in GPU tensors (``input_pos`` and the cache's ``lengths``). That is what lets the kit
capture one decode step in a CUDA graph and replay it for every token: nothing on the decode path
may read a GPU value on the host (no ``.item()``, ``.tolist()``, ``int(tensor)``, no Python ``if``
on a tensor), allocate a buffer whose size depends on the position, or slice by the position.

Shapes (B sequences, H query heads, H_kv key/value heads, head dimension d, L_max the capacity):
    k_cache, v_cache   (B_max, H_kv, L_max, d)   positions 0 .. L_max-1 of every sequence
    lengths            (1,) int64                 how many positions are filled (the same for every row)
    q                  (B, H, T, d)               after RoPE; T = 1 when decoding
    k, v               (B, H_kv, T, d)            the new tokens' keys and values, after RoPE (k)

The kernels come from the implementation this file belongs to (``kernels`` below: the kit points it
at the directory the file was loaded from), so your cache runs your kernels.
"""

from __future__ import annotations

import torch

from assignment import kernels  # the kit rebinds this to this directory's kernels (see the docstring)
from assignment.model.llama import KVCache as StaticCache


class KVCache(StaticCache):
    """The kit's static cache (buffers ``k_cache`` and ``v_cache`` allocated once), its length kept on the
    device, and attention over it."""

    def __init__(self, max_batch_size: int, max_seq_len: int, n_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        super().__init__(max_batch_size, max_seq_len, n_kv_heads, head_dim, dtype, device)
        # Positions filled so far (the last written position + 1), on the device: the decode kernel reads it.
        self.register_buffer("lengths", torch.zeros(1, dtype=torch.int64, device=device), persistent=False)
        self._workspace = None  # the decode kernel's scratch, made at the first decode step and then reused

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, H_kv, T, d) at positions ``input_pos`` (T,) of the first B sequences; set ``lengths``
        to the last position + 1. Returns the first B sequences' whole buffers, (B, H_kv, L_max, d) views."""
        B = k.shape[0]
        # TODO(t6): the cache write (k and v at input_pos, and the new length)
        # PLAN: the positions are along dimension 2 of the (B_max, H_kv, L_max, d) buffers, rows 0..B-1 only:
        # PLAN: self.k_cache[:B].index_copy_(2, input_pos, k) (the same for v; input_pos may be any positions,
        # PLAN: not only 0..T-1). Then the length, without leaving the GPU: lengths[0] = input_pos[-1] + 1,
        # PLAN: e.g. self.lengths.copy_(input_pos[-1:] + 1) (never int(input_pos[-1]): decoding must not sync).
        # PLAN: return self.k_cache[:B], self.v_cache[:B].
        raise NotImplementedError('t6: the cache write (k and v at input_pos, and the new length) is not implemented yet (TODO(t6) in t6_kv_cache.py)')

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, input_pos: torch.Tensor, scale: float,
               kv_len: int | None) -> torch.Tensor:
        """Store the new tokens' k, v at ``input_pos``, then causal attention of q (B, H, T, d) over the cache
        up to and including them. Returns (B, H, T, d).

        kv_len: the number of keys the last query sees (input_pos[-1] + 1) as a Python int, which the model
        reads once per forward pass; None inside a captured decode step, where no host value may be used."""
        B, H, T, d = q.shape
        k_all, v_all = self.update(input_pos, k, v)                     # (B, H_kv, L_max, d) each
        # TODO(t6): the prefill/decode dispatch (prefill through the t5 kernel, decode through the t6 kernel)
        # PLAN: T == 1 (decode): kernels.decode_attention(q, k_all, v_all, self.lengths, scale=scale,
        # PLAN: workspace=...)[0] over the whole buffers (the kernel reads lengths[0] positions). Make the workspace
        # PLAN: once with kernels.decode_workspace(q, k_all) and keep it (a graph replays the same buffers);
        # PLAN: make a new one only when (B, H, d) changes.
        # PLAN: T > 1 (prefill): the keys so far are positions 0 .. kv_len - 1 (the model passes kv_len as a Python
        # PLAN: int for a prefill; reading input_pos[-1] on the host in every layer would stall the GPU 16 times):
        # PLAN: kernels.flash_attention(q, k_all[:, :, :kv_len].contiguous(), v_all[:, :, :kv_len].contiguous(),
        # PLAN: causal=True, scale=scale)[0]. Bottom-right alignment makes query i of the chunk see keys 0 .. kv_len - T + i.
        raise NotImplementedError('t6: the prefill/decode dispatch (prefill through the t5 kernel, decode through the t6 kernel) is not implemented yet (TODO(t6) in t6_kv_cache.py)')
