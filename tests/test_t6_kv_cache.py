"""Public tests for task t6: the KV cache and its attention (``t6_kv_cache.py``).

Run them with ``make test T=t6``. The cache's writes and the prefill/decode dispatch are plain PyTorch,
so most checks run without a GPU (marked ``cpu``):

* ``update`` writes at explicit positions (odd, not starting at 0, batch > 1) and nowhere else, and
  keeps the length on the cache's device;
* the dispatch, with stand-in kernels that record their calls: a prompt goes to the t5 kernel
  (causal, over the positions so far), one token to the t6 kernel (over the whole buffers, with the
  device length);
* the model: a prompt then one token at a time gives the logits of one full forward pass.

On a GPU, the same model runs on your kernels, and one decode step is captured in a CUDA graph and
replayed token after token.
"""

from __future__ import annotations

import math

import pytest
import torch

from assignment import tasks
from assignment.impl import load_python
from assignment.model import attention
from assignment.model.attention import reference as reference_attention
from assignment.model.presets import random_model
from assignment.registry import load_registry
from assignment.testing import SENTINEL, assert_close

pytestmark = pytest.mark.t6
TASK = load_registry().task("t6")
T6_ATTENTION = tasks.attention("t6")  # ATTN=t6: your cache and kernels as the model's attention
LOGITS = TASK.tol("logits")
WRITE_HINT = (
    "update(input_pos, k, v) writes k[:, :, t] at position input_pos[t] of the first B rows "
    "(index_copy_ along dimension 2) and sets lengths[0] = input_pos[-1] + 1 on the cache's device."
)
DISPATCH_HINT = (
    "T == 1: kernels.decode_attention over the whole buffers with self.lengths (kv_len is None in a "
    "captured step); T > 1: kernels.flash_attention(causal=True) over positions 0 .. kv_len - 1; scale=scale "
    "to both."
)
KERNEL_OUTPUT_HINT = (
    "attend returns what the kernel returned (these stand-in kernels, and the grader's, shift their answers), "
    "never attention computed beside it."
)


def cache_class():
    return attention.cache_class(T6_ATTENTION)


def new_cache(B_max=3, H_kv=2, L_max=20, d=8, device="cpu"):
    cache = cache_class()(B_max, L_max, H_kv, d, torch.float32, device)
    cache.k_cache.fill_(SENTINEL)
    cache.v_cache.fill_(SENTINEL)
    return cache


def kv(B, H_kv, T, d, seed, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H_kv, T, d, generator=gen).to(device), torch.randn(B, H_kv, T, d, generator=gen).to(device))


# --------------------------------------------------------------------------- the cache write
@pytest.mark.cpu
def test_update_writes_at_the_given_positions_only(seed):
    cache = new_cache()
    k, v = kv(2, 2, 3, 8, seed)
    positions = torch.tensor([5, 6, 7])
    k_all, v_all = cache.update(positions, k, v)
    for name, buffer, new in (("k_cache", cache.k_cache, k), ("v_cache", cache.v_cache, v)):
        assert_close(
            buffer[:2, :, 5:8],
            new,
            atol=0,
            rtol=0,
            name=f"{name}[:2, :, 5:8] after writing positions 5..7",
            layout="row, KV head, position, dim",
            hint=WRITE_HINT,
        )
        untouched = torch.ones_like(buffer, dtype=torch.bool)
        untouched[:2, :, 5:8] = False
        changed = torch.nonzero(untouched & (buffer != SENTINEL))
        assert len(changed) == 0, (
            f"{name}: {len(changed)} elements outside rows 0..1, positions 5..7 changed, the "
            f"first at (row, KV head, position, dim) {tuple(changed[0].tolist())}. {WRITE_HINT}"
        )
    assert (
        isinstance(cache.lengths, torch.Tensor)
        and cache.lengths.shape == (1,)
        and cache.lengths.dtype in (torch.int32, torch.int64)
    ), "the cache keeps `lengths`, a (1,) int32/int64 tensor on its device: the decode kernel reads it there"
    assert int(cache.lengths[0]) == 8, f"lengths should be 8 after writing position 7, got {cache.lengths.tolist()}"
    assert k_all.shape == (2, 2, 20, 8) and k_all.data_ptr() == cache.k_cache.data_ptr(), (
        "update returns the first B rows of the buffers themselves (views, not copies): (B, H_kv, L_max, d)"
    )
    assert v_all.shape == (2, 2, 20, 8) and v_all.data_ptr() == cache.v_cache.data_ptr(), (
        "update returns the first B rows of the buffers themselves (views, not copies): (B, H_kv, L_max, d)"
    )


@pytest.mark.cpu
def test_single_token_writes_grow_the_length(seed):
    cache = new_cache(B_max=2, L_max=12)
    keys, values = kv(2, 2, 12, 8, seed)
    cache.update(torch.arange(4), keys[:, :, :4], values[:, :, :4])  # a prompt
    for p in range(4, 9):  # then one token at a time
        cache.update(torch.tensor([p]), keys[:, :, p : p + 1], values[:, :, p : p + 1])
        assert int(cache.lengths[0]) == p + 1, (
            f"after writing position {p}: lengths {cache.lengths.tolist()}, expected [{p + 1}]"
        )
    assert_close(
        cache.k_cache[:, :, :9],
        keys[:, :, :9],
        atol=0,
        rtol=0,
        name="k_cache[:, :, :9] after 4 + 5 writes",
        layout="row, KV head, position, dim",
        hint=WRITE_HINT,
    )
    assert_close(
        cache.v_cache[:, :, :9],
        values[:, :, :9],
        atol=0,
        rtol=0,
        name="v_cache[:, :, :9]",
        layout="row, KV head, position, dim",
        hint=WRITE_HINT,
    )
    assert bool((cache.k_cache[:, :, 9:] == SENTINEL).all()), "positions 9.. were never written but changed"


# --------------------------------------------------------------------------- the dispatch, with stand-in kernels
def output_shift(heads: int, head_dim: int) -> torch.Tensor:
    """(heads, head_dim) float64: what the stand-in kernels add to every output row of each query head."""
    return torch.randn(heads, head_dim, generator=torch.Generator().manual_seed(606), dtype=torch.float64)


class StandInKernels:
    """The two kernels in float64 PyTorch, recording how they are called (with the scale they get). Their answers are
    attention shifted per query head by ``output_shift``, as the grader's stand-ins shift theirs by a vector of their
    own: only a cache that returns what its kernels returned passes the shift on."""

    def __init__(self):
        self.calls: list[tuple] = []

    @staticmethod
    def _shifted(o: torch.Tensor) -> torch.Tensor:
        return o + output_shift(o.shape[1], o.shape[3]).to(o.device)[None, :, None, :]

    def flash_attention(self, q, k, v, causal=False, scale=None, out=None, lse=None):
        self.calls.append(("flash_attention", k.shape[2], bool(causal), scale))
        o = reference_attention(q.double(), k.double(), v.double(), scale) if causal else None
        assert o is not None, "the stand-in only does causal attention"
        return self._shifted(o).to(q.dtype), None

    def decode_workspace(self, q, k_cache, num_splits=None):
        self.calls.append(("decode_workspace",))
        return _Workspace(q.shape[0], q.shape[1], q.shape[-1], q.device)

    def decode_attention(
        self, q, k_cache, v_cache, lengths, scale=None, out=None, lse=None, workspace=None, num_splits=None
    ):
        length = int(lengths[0])
        self.calls.append(("decode_attention", k_cache.shape[2], length, scale))
        q4 = q if q.dim() == 4 else q[:, :, None]
        o = reference_attention(q4.double(), k_cache[:, :, :length].double(), v_cache[:, :, :length].double(), scale)
        return self._shifted(o).to(q.dtype).view(q.shape), None


class _Workspace:
    def __init__(self, batch, heads, head_dim, device):
        self.batch, self.heads, self.head_dim = batch, heads, head_dim
        self.buffer = torch.empty(0, device=device)
        self.num_splits = 1


@pytest.fixture
def stand_in(monkeypatch):
    module = load_python("t6_kv_cache.py")
    fake = StandInKernels()
    monkeypatch.setattr(module, "kernels", fake)
    return fake


@pytest.mark.cpu
def test_prefill_and_decode_go_to_their_kernels(stand_in, seed):
    B, H, H_kv, d, L_max = 2, 4, 2, 8, 16
    cache = new_cache(B_max=B, H_kv=H_kv, L_max=L_max, d=d)
    gen = torch.Generator().manual_seed(seed)
    keys, values = kv(B, H_kv, 9, d, seed)
    queries = torch.randn(B, H, 9, d, generator=gen)
    scale = 2 / math.sqrt(d)  # not the kernels' default: the cache must pass the model's scale on
    steps = [(0, 5), (5, 6), (6, 7), (7, 9)]  # a prompt of 5, two decoded tokens, a second chunk of 2
    for first, last in steps:
        stand_in.calls.clear()
        pos = torch.arange(first, last)
        out = cache.attend(
            queries[:, :, first:last], keys[:, :, first:last], values[:, :, first:last], pos, scale, last
        )
        expected = reference_attention(
            queries[:, :, first:last].double(), keys[:, :, :last].double(), values[:, :, :last].double(), scale
        )
        kernel_calls = [c for c in stand_in.calls if c[0] != "decode_workspace"]
        T = last - first
        if T == 1:
            assert kernel_calls == [("decode_attention", L_max, last, scale)], (
                f"one token at position {first}: expected one decode_attention call over the whole buffers "
                f"(L_max {L_max}) with lengths [{last}] and scale={scale:.4g}, got {kernel_calls}. {DISPATCH_HINT}"
            )
        else:
            assert kernel_calls == [("flash_attention", last, True, scale)], (
                f"a chunk of {T} tokens at positions {first}..{last - 1}: expected one causal flash_attention call "
                f"over keys 0..{last - 1} ({last} keys) with scale={scale:.4g}, got {kernel_calls}. {DISPATCH_HINT}"
            )
        assert_close(
            out,
            StandInKernels._shifted(expected),  # what the stand-in kernel returned
            **TASK.tol("float32"),
            name=f"attention at positions {first}..{last - 1}",
            layout="row, head, token, dim",
            hint=f"{DISPATCH_HINT} {KERNEL_OUTPUT_HINT}",
        )


@pytest.mark.cpu
def test_decode_keeps_one_workspace(stand_in, seed):
    cache = new_cache(B_max=1, H_kv=2, L_max=10, d=8)
    keys, values = kv(1, 2, 6, 8, seed)
    q = torch.randn(1, 4, 6, 8, generator=torch.Generator().manual_seed(seed))
    cache.attend(q[:, :, :3], keys[:, :, :3], values[:, :, :3], torch.arange(3), 0.3, 3)
    stand_in.calls.clear()
    for p in range(3, 6):
        cache.attend(
            q[:, :, p : p + 1],
            keys[:, :, p : p + 1],
            values[:, :, p : p + 1],
            torch.tensor([p]),
            0.3,
            None if p % 2 else p + 1,
        )  # None: as in a captured step
    made = sum(1 for c in stand_in.calls if c[0] == "decode_workspace")
    assert made <= 1, (
        f"{made} workspaces made over 3 decode steps: make it once and keep it (a CUDA graph replays "
        "the buffers it captured; a new one per step also costs an allocation per token)"
    )


# --------------------------------------------------------------------------- the model
def generate_and_compare(model, tokens: torch.Tensor, prompt: int, what: str, full=None, hint: str = "") -> None:
    """Prefill tokens[:, :prompt], decode the rest one at a time; compare with one full forward pass (``full``: its
    logits, else the model's own with the reference attention)."""
    full = reference_model_logits(model, tokens) if full is None else full
    device = tokens.device
    logits = [model.prefill(tokens[:, :prompt], torch.arange(prompt, device=device))]
    for p in range(prompt, tokens.shape[1]):
        logits.append(model.decode_one_token(tokens[:, p : p + 1], torch.tensor([p], device=device)))
    for i, step in enumerate(logits):
        position = prompt - 1 + i
        assert_close(
            step,
            full[:, position],
            **LOGITS,
            name=f"{what}: logits at position {position}",
            layout="row, vocabulary id",
            hint=hint or "prefill, then decode at position p, must give the full pass's logits at p. " + WRITE_HINT,
        )


def reference_model_logits(model, tokens):
    saved = model.attention_impl
    model.attention_impl = "reference"
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        model.attention_impl = saved


def tiny_model(
    seed: int, device: str, batch: int, length: int, max_seq_len: int, attention_impl=T6_ATTENTION, cache_cls=None
):
    """The llama-tiny preset with random weights, caches for ``batch`` rows of ``max_seq_len``, and random tokens."""
    model = random_model("llama-tiny", device=device, seed=seed, attention_impl=attention_impl)
    model.setup_caches(batch, max_seq_len, cache_cls=cache_cls)
    tokens = torch.randint(0, model.vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))
    return model, tokens.to(device)


@pytest.mark.cpu
def test_model_prefill_then_decode_equals_one_pass_on_cpu(seed):
    # The kit's reference attention over your cache (the update only): runs anywhere.
    model, tokens = tiny_model(seed, "cpu", 2, 15, 24, attention_impl="reference", cache_cls=cache_class())
    with torch.no_grad():
        generate_and_compare(model, tokens, prompt=6, what="llama-tiny on the CPU, your cache's update")


@pytest.mark.gpu
def test_model_on_your_kernels_equals_one_pass(seed):
    model, tokens = tiny_model(seed, "cuda", 2, 150, 200)
    with torch.no_grad():
        generate_and_compare(model, tokens, prompt=97, what="llama-tiny on your t5 and t6 kernels")


@pytest.mark.gpu
def test_model_logits_follow_what_your_kernels_return(stand_in, seed):
    # The model's attention is your cache's attend. With kernels that shift each head's output by a vector (these
    # stand-ins; the grader's shift by one of their own), the logits must move by exactly what the shift gives:
    # o_proj(O + shift) = o_proj(O) + W_o shift, the full pass of a model with that bias on its output projection.
    model, tokens = tiny_model(seed, "cuda", 2, 14, 24)
    shifted = random_model("llama-tiny", device="cuda", seed=seed)
    with torch.no_grad():
        for layer in shifted.layers:
            projection = layer.self_attn.o_proj
            shift = output_shift(layer.self_attn.n_heads, layer.self_attn.head_dim).reshape(-1)
            projection.bias = torch.nn.Parameter(projection.weight @ shift.to(projection.weight), requires_grad=False)
        generate_and_compare(
            model, tokens, 6, "llama-tiny on shifting stand-in kernels", full=shifted(tokens), hint=KERNEL_OUTPUT_HINT
        )


@pytest.mark.gpu
def test_chunked_prefill_equals_one_prefill(seed):
    model, tokens = tiny_model(seed, "cuda", 1, 260, 300)
    with torch.no_grad():
        whole = model.prefill(tokens, torch.arange(260, device="cuda"))
        model.prefill(tokens[:, :100], torch.arange(100, device="cuda"))
        chunked = model.prefill(tokens[:, 100:], torch.arange(100, 260, device="cuda"))
    assert_close(
        chunked,
        whole,
        **LOGITS,
        name="logits after prefilling 100 then 160 tokens",
        layout="row, id",
        hint="A second chunk attends to the cache so far plus itself: flash_attention over keys "
        "0 .. input_pos[-1], causal (bottom-right alignment).",
    )


@pytest.mark.gpu
def test_decode_step_replays_in_a_cuda_graph(seed):
    from assignment.model.cuda_graph import GraphDecoder

    model, tokens = tiny_model(seed, "cuda", 1, 140, 200)
    with torch.no_grad():
        runner = GraphDecoder(model)  # raises GraphCaptureError if the decode step syncs with the host
        full = reference_model_logits(model, tokens)
        runner.prefill(tokens[:, :64], torch.arange(64, device="cuda"))
        for p in range(64, 140):
            logits = runner.decode_one_token(tokens[:, p : p + 1], torch.tensor([p], device="cuda"))
            assert_close(
                logits,
                full[:, p],
                **LOGITS,
                name=f"graph replay at position {p}",
                layout="row, id",
                hint="Replays repeat the captured launches: the length must come from a GPU tensor "
                "(self.lengths), never from a Python int computed at capture time.",
            )


@pytest.mark.gpu
def test_shipped_checkpoint_generates_the_same_text():
    from assignment.model import load_checkpoint

    reference = load_checkpoint(device="cuda", max_seq_len=96, attention="reference")
    yours = load_checkpoint(device="cuda", max_seq_len=96, attention=T6_ATTENTION)
    prompt = torch.tensor([reference.tokenizer.encode("The history of")], device="cuda")
    texts = []
    for loaded in (reference, yours):
        model, tokens = loaded.model, prompt
        with torch.no_grad():
            logits = model.prefill(tokens, torch.arange(tokens.shape[1], device="cuda"))
            out = []
            for p in range(tokens.shape[1], tokens.shape[1] + 40):
                nxt = logits.argmax(-1, keepdim=True)
                out.append(int(nxt))
                logits = model.decode_one_token(nxt, torch.tensor([p], device="cuda"))
        texts.append(out)
    assert texts[1] == texts[0], (
        "greedy generation with the shipped checkpoint differs from the reference "
        f"attention's:\n  reference {texts[0]}\n  yours     {texts[1]}"
    )
