"""A stand-in language model and a byte tokenizer, for testing a generation loop (t7) without weights.

``ScriptedModel`` speaks the generation protocol of the kit's transformer::

    prefill(tokens (1, T), input_pos (T,))           -> logits (1, V) of the last prompt position
    decode_one_token(token (1, 1), input_pos (1,))   -> logits (1, V)
    max_seq_len, vocab_size, device

but computes nothing: the logits after position p are a pseudo-random function of the tokens its
"cache" holds at positions 0..p, as a KV cache would hold them. So a test knows the exact logits of
every step (``logits_for``), and feeding a token at the wrong position, skipping or repeating a feed,
or feeding the wrong token all change what the model returns. Calls a real cache could not serve
(a gap in the positions, a position past the cache, wrong shapes, dtypes or devices) raise a
ValueError that says what is wrong. Every call is logged in ``calls``.

``ByteTokenizer`` encodes text as its UTF-8 bytes, so one character may take up to four tokens:
the case a streaming decoder must handle.

This file imports only torch and the standard library: the grader copies it into its sandbox.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # 2^64 / golden ratio: spreads consecutive integers over 64 bits


def _scramble(value: int) -> int:
    """A bijection of 64-bit integers that turns a one-bit change into about half the bits changing
    (the splitmix64 finaliser). It keeps the history hash free of collisions between nearby histories."""
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def _extend(history_hash: int, token: int) -> int:
    """The hash of a history after one more token; order and length both change it."""
    return _scramble((history_hash + _GOLDEN * (token + 1)) & _MASK64)


class ScriptedModel:
    """A deterministic model for one sequence (B = 1) whose logits depend on the whole cached history.

    Args:
        vocab_size: V, the number of token ids (0 .. V-1).
        seed: picks one of many such models; the same seed always gives the same logits.
        max_seq_len: positions the cache holds (0 .. max_seq_len-1).
        device: where the returned logits live, and where the inputs must be.
        sharpness: standard deviation of the logits; 3.0 gives distributions with a few likely tokens
            and a long tail, which is what sampling tests need.
    """

    def __init__(
        self, vocab_size: int = 64, seed: int = 0, max_seq_len: int = 256, device="cpu", sharpness: float = 3.0
    ):
        if vocab_size < 2 or max_seq_len < 1:
            raise ValueError(f"need vocab_size >= 2 and max_seq_len >= 1, got {vocab_size} and {max_seq_len}")
        self.vocab_size = vocab_size
        self.max_seq_len = max_seq_len
        self.device = torch.empty(0, device=device).device  # "cuda" becomes "cuda:0", as tensors report it
        self.sharpness = sharpness
        self.calls: list[dict] = []
        self._start_hash = _scramble((seed * _GOLDEN + 1) & _MASK64)
        self._cache: list[int] = []  # the token written at each position so far
        self._hashes: list[int] = []  # _hashes[p]: hash of _cache[0..p], for the positions computed so far

    @property
    def steps(self) -> int:
        """How many prefill and decode calls the model has served."""
        return len(self.calls)

    def logits_for(self, history: Iterable[int]) -> torch.Tensor:
        """The (V,) float32 logits the model returns once its cache holds exactly ``history``."""
        history_hash = self._start_hash
        for token in history:
            history_hash = _extend(history_hash, int(token))
        return self._logits(history_hash)

    def prefill(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Write ``tokens`` (1, T) at positions ``input_pos`` (T,); return the logits (1, V) after the last."""
        self._check_tokens("prefill", tokens)
        return self._serve("prefill", "prefill", tokens, input_pos)

    def decode_one_token(self, token: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Write one token (1, 1) at position ``input_pos`` (1,); return the logits (1, V) after it."""
        self._check_tokens("decode_one_token", token)
        if token.shape[1] != 1:
            raise ValueError(
                f"decode_one_token takes one token of shape (1, 1), got {tuple(token.shape)}; "
                "the prompt goes through prefill, then one generated token per decode step"
            )
        return self._serve("decode", "decode_one_token", token, input_pos)

    def _serve(self, op: str, name: str, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """Check the positions and ids, log the call, write the cache, return the logits after the last position."""
        positions = self._check_positions(name, input_pos, tokens.shape[1])
        values = tokens[0].tolist()
        self._check_values(name, values)
        self.calls.append({"op": op, "positions": positions, "tokens": values})
        for position, value in zip(positions, values):
            if position == len(self._cache):
                self._cache.append(value)
            else:
                self._cache[position] = value  # overwriting, as a KV cache would
        del self._hashes[positions[0] :]  # hashes from the first written position on are stale
        return self._logits(self._hash_through(positions[-1]))[None, :]

    def _hash_through(self, position: int) -> int:
        """The hash of the cache at positions 0..position, extending the stored prefix hashes."""
        while len(self._hashes) <= position:
            previous = self._hashes[-1] if self._hashes else self._start_hash
            self._hashes.append(_extend(previous, self._cache[len(self._hashes)]))
        return self._hashes[position]

    def _logits(self, history_hash: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(history_hash)
        logits = torch.randn(self.vocab_size, generator=generator) * self.sharpness
        return logits.to(self.device)

    def _check_tokens(self, name: str, tokens) -> None:
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"{name}: tokens must be a torch.Tensor, got {type(tokens).__name__}")
        if tokens.dtype != torch.long:
            raise ValueError(f"{name}: tokens must be torch.long (token ids), got {tokens.dtype}")
        if tokens.dim() != 2 or tokens.shape[0] != 1 or tokens.shape[1] < 1:
            raise ValueError(
                f"{name}: tokens must have shape (1, T) with T >= 1 (one sequence, B = 1), got "
                f"{tuple(tokens.shape)}; add the batch dimension with tokens[None, :]"
            )
        if tokens.device != self.device:
            raise ValueError(
                f"{name}: tokens are on {tokens.device} but the model is on {self.device}; "
                "create them with device=model.device"
            )

    def _check_positions(self, name: str, input_pos, count: int) -> list[int]:
        if not isinstance(input_pos, torch.Tensor):
            raise TypeError(f"{name}: input_pos must be a torch.Tensor, got {type(input_pos).__name__}")
        if input_pos.dtype != torch.long or input_pos.dim() != 1:
            raise ValueError(
                f"{name}: input_pos must be a 1-D torch.long tensor of positions, got "
                f"{input_pos.dtype} of shape {tuple(input_pos.shape)}"
            )
        if input_pos.device != self.device:
            raise ValueError(f"{name}: input_pos is on {input_pos.device} but the model is on {self.device}")
        positions = input_pos.tolist()
        if len(positions) != count:
            raise ValueError(f"{name}: {count} tokens but {len(positions)} positions; give one position per token")
        start = positions[0]
        if positions != list(range(start, start + count)):
            raise ValueError(
                f"{name}: positions must be consecutive, got {positions[:8]}"
                f"{' ...' if count > 8 else ''}; the prompt goes in at arange(T)"
            )
        if start < 0:
            raise ValueError(f"{name}: position {start} is negative")
        if start > len(self._cache):
            last = f"position {len(self._cache) - 1}" if self._cache else "nothing yet"
            raise ValueError(
                f"{name}: writes position {start}, but the cache holds {last}: a gap. The prompt "
                "fills positions 0..T-1 and the k-th generated token (k = 0, 1, ...) goes in at T + k"
            )
        if positions[-1] >= self.max_seq_len:
            raise ValueError(
                f"{name}: position {positions[-1]} is past the cache, which holds positions "
                f"0..{self.max_seq_len - 1} (max_seq_len = {self.max_seq_len})"
            )
        return positions

    def _check_values(self, name: str, values: list[int]) -> None:
        bad = [v for v in values if not 0 <= v < self.vocab_size]
        if bad:
            raise ValueError(f"{name}: token id {bad[0]} is outside the vocabulary 0..{self.vocab_size - 1}")


class ByteTokenizer:
    """Text as UTF-8 bytes: ids 0..255 are the bytes, 256 is BOS, 257 is EOS (the only stop token).

    ``decode`` drops the special ids and decodes the bytes with errors="replace", so a sequence that
    ends inside a multi-byte character ends in U+FFFD, as a byte-level BPE tokenizer's decode does.
    """

    bos_id = 256
    eos_id = 257
    stop_ids = (257,)
    vocab_size = 258

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_id, *ids] if add_bos else ids

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary 0..{self.vocab_size - 1}")
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")
