"""One decode step captured in a CUDA graph and replayed for every generated token (t6).

A decode step of a 1B-parameter model is a few hundred small kernels. Launched one by one from Python,
the GPU waits on the host between them (milliseconds per token); captured once in a CUDA graph, the
whole step is one launch. Capture records kernels and the addresses they read and write, so a step
can be replayed only if it has the same shapes and buffers every time, and if nothing in it reads a
GPU value on the host. The model's decode path is built for that: the token and its position are
copied into fixed tensors before each replay, the rotary angles are gathered on the device from the
position, and the t6 cache keeps its length in GPU memory, where the decode kernel reads it.

    runner = GraphDecoder(model)                  # after model.setup_caches(...) with attention "t6"
    logits = runner.prefill(tokens, input_pos)    # eager, as model.prefill
    logits = runner.decode_one_token(token, pos)  # one graph replay

``GraphDecoder`` has the generation protocol of t7 (prefill, decode_one_token, max_seq_len, vocab_size,
device), so t7's ``generate`` runs on it unchanged.
"""

from __future__ import annotations

import time

import torch

from . import attention


class SetupClock:
    """Where a decoder's setup went: the seconds of each named step, the GPU's work included (each step ends with a
    synchronize), and the total so far. The grader records both sides of t6's model rule with it."""

    def __init__(self, device=None):
        self.device = device
        self.steps: dict[str, float] = {}
        self._start = self._last = time.perf_counter()

    def step(self, name: str) -> None:
        torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.steps[name] = round(now - self._last, 2)
        self._last = now

    @property
    def total_s(self) -> float:
        return round(time.perf_counter() - self._start, 2)


class GraphCaptureError(RuntimeError):
    """The decode step could not be captured (it synchronises with the host, or allocates per position)."""


class GraphDecoder:
    def __init__(self, model, batch_size: int = 1, warmup: int = 2):
        if model.device.type != "cuda":
            raise ValueError("GraphDecoder needs the model on a CUDA device")
        if not model.max_seq_len:
            raise ValueError("GraphDecoder: call model.setup_caches() first")
        if not attention.attends_on_cache(model.attention_impl):
            raise ValueError(
                f"GraphDecoder needs a cache that reads its length on the device (attention 't6'); "
                f"this model uses {model.attention_name!r}, whose cache is sliced on the host"
            )
        if not 1 <= batch_size <= model.max_batch_size:
            raise ValueError(f"batch_size must be 1..{model.max_batch_size} (the cache's), got {batch_size}")
        self.model, self.batch_size = model, batch_size
        # The graph reads and writes these by address: hold them, so that replacing the model's caches or
        # growing its rotary tables cannot free memory the graph still uses.
        self._held = [layer.self_attn.kv_cache for layer in model.layers] + [model.rope_cos, model.rope_sin]
        device = model.device
        self._token = torch.zeros((batch_size, 1), dtype=torch.long, device=device)
        # Warm-up and capture write a key and value at the cache's last position, which no real step reads
        # before writing it (every position is written before the kernel's length covers it).
        self._pos = torch.full((1,), model.max_seq_len - 1, dtype=torch.long, device=device)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # first calls (kernel loading, workspaces) outside the capture
            for _ in range(max(1, warmup)):
                model._run(self._token, self._pos, last_only=True, checked=False)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                self._logits = model._run(self._token, self._pos, last_only=True, checked=False)[:, -1]
        except RuntimeError as exc:
            raise GraphCaptureError(
                f"the decode step could not be captured in a CUDA graph: {exc}. The decode path must not read a GPU "
                "value on the host (.item(), .tolist(), int(tensor), an if on a tensor) nor make tensors whose "
                "size depends on the position"
            ) from exc

    # The generation protocol (t7): the model's attributes, eager prefill, replayed decode.
    @property
    def max_seq_len(self) -> int:
        return self.model.max_seq_len

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def device(self) -> torch.device:
        return self.model.device

    def prefill(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        if any(layer.self_attn.kv_cache is not cache for layer, cache in zip(self.model.layers, self._held)):
            raise ValueError(
                "the model's caches were replaced after the decode step was captured (setup_caches "
                "again?): make a new GraphDecoder"
            )
        return self.model.prefill(tokens, input_pos)

    def decode_one_token(self, token: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """token (batch_size, 1), input_pos (1,) -> logits (batch_size, V), a fresh tensor. The position is not
        checked on the host (that would cost a synchronisation per token): it must follow the prefill's."""
        if tuple(token.shape) != (self.batch_size, 1) or tuple(input_pos.shape) != (1,):
            raise ValueError(
                f"decode_one_token: token must be ({self.batch_size}, 1) and input_pos (1,), got "
                f"{tuple(token.shape)} and {tuple(input_pos.shape)}"
            )
        self._token.copy_(token)
        self._pos.copy_(input_pos)
        self.graph.replay()
        return self._logits.clone()
