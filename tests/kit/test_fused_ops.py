"""The model's fused elementwise kernels (assignment/model/fused_ops.cu) equal their PyTorch definitions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from assignment.model import fused_ops
from assignment.model.llama import RMSNorm, apply_rope, rope_tables
from assignment.model.presets import random_model

pytestmark = pytest.mark.kit
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the fused kernels run on one")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


@pytest.fixture
def unfused(monkeypatch):
    """Call an op through its PyTorch definition."""

    def run(fn, *args):
        with monkeypatch.context() as m:
            m.setattr(fused_ops, "library", lambda: None)
            return fn(*args)

    return run


def test_without_a_gpu_the_ops_are_their_pytorch_definitions():
    torch.manual_seed(0)
    norm = RMSNorm(64, 1e-5)
    norm.weight.data.uniform_(0.5, 1.5)
    x, delta = torch.randn(2, 3, 64), torch.randn(2, 3, 64)
    with torch.no_grad():
        summed, normed = fused_ops.add_rms_norm(x.clone(), delta, norm)
        assert torch.equal(summed, x + delta) and torch.equal(normed, norm(x + delta))
        gate_up = torch.randn(4, 10)
        assert torch.equal(fused_ops.silu_mul(gate_up), F.silu(gate_up[:, :5]) * gate_up[:, 5:])
        w, row = torch.randn(7, 64), torch.randn(1, 64)
        assert torch.equal(fused_ops.linear(row, w), F.linear(row, w))


@gpu
@pytest.mark.parametrize("shape", [(1, 1, 2048), (2, 7, 2048), (3, 5, 128)])
def test_add_rms_norm_matches_and_updates_the_residual_in_place(shape, unfused):
    torch.manual_seed(1)
    norm = RMSNorm(shape[-1], 1e-5).cuda()
    norm.weight.data.uniform_(0.5, 1.5)
    x, delta = torch.randn(*shape, device="cuda") * 3, torch.randn(*shape, device="cuda")
    with torch.no_grad():
        want_x, want_y = unfused(fused_ops.add_rms_norm, x.clone(), delta, norm)
        got_x, got_y = fused_ops.add_rms_norm(x, delta, norm)
        assert got_x.data_ptr() == x.data_ptr(), "the residual is updated in place"
        assert _rel(got_x, want_x) < 1e-6 and _rel(got_y, want_y) < 1e-5
        only_x, only_y = fused_ops.add_rms_norm(want_x.clone(), None, norm)
        assert torch.equal(only_x, want_x) and _rel(only_y, norm(want_x)) < 1e-5


@gpu
@pytest.mark.parametrize("B, T, H, H_kv, d", [(1, 1, 32, 8, 64), (2, 9, 4, 2, 128), (1, 3, 6, 6, 32)])
def test_rope_split_rotates_q_and_k_and_splits_the_heads(B, T, H, H_kv, d, unfused):
    torch.manual_seed(2)
    cos, sin = (t.cuda() for t in _tables(d, 40))
    positions = torch.randint(0, 40, (T,), device="cuda")
    cos, sin = cos[positions], sin[positions]
    qkv = torch.randn(B, T, H + 2 * H_kv, d, device="cuda")
    with torch.no_grad():
        want = unfused(fused_ops.rope_split, qkv, cos, sin, H, H_kv, apply_rope)
        got = fused_ops.rope_split(qkv, cos, sin, H, H_kv, apply_rope)
    for name, g, w in zip("qkv", got, want):
        assert g.shape == w.shape and g.is_contiguous(), name
        assert _rel(g, w) < 1e-6, f"{name}: max relative error {_rel(g, w):.2e}"


def _tables(d: int, length: int):
    class Config:  # what rope_tables reads of a model config
        head_dim, rope_theta, rope_scaling = d, 10000.0, None

    return rope_tables(Config, length)


@gpu
@pytest.mark.parametrize("rows, n", [(1, 8192), (5, 300)])
def test_silu_mul(rows, n, unfused):
    gate_up = torch.randn(rows, 2 * n, device="cuda") * 4
    with torch.no_grad():
        assert _rel(fused_ops.silu_mul(gate_up), unfused(fused_ops.silu_mul, gate_up)) < 1e-6


@gpu
def test_the_model_with_fused_ops_gives_the_logits_of_the_pytorch_ops(unfused):
    model = random_model("llama-tiny", device="cuda", seed=3)
    assert fused_ops.library() is not None, fused_ops._state.get("why")
    tokens = torch.randint(0, model.config.vocab_size, (2, 17), device="cuda")
    with torch.no_grad():
        fused = model(tokens)
        plain = unfused(model, tokens)
    assert _rel(fused, plain) < 1e-5


@gpu
@pytest.mark.parametrize("N, K, bias", [(3072, 2048, False), (2048, 8192, True), (1001, 36, True), (5, 2052, False)])
def test_gemv_for_one_token_matches_f_linear_and_is_repeatable(N, K, bias):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(4)
    w = torch.randn(N, K, device="cuda") / K**0.5
    b = torch.randn(N, device="cuda") if bias else None
    x = torch.randn(1, 1, K, device="cuda")
    with torch.no_grad():
        got, want = fused_ops.linear(x, w, b), F.linear(x.double(), w.double(), None if b is None else b.double())
        assert got.shape == (1, 1, N) and _rel(got.double(), want) < 1e-5
        assert torch.equal(fused_ops.linear(x, w, b), got), "the same call twice must give the same bits"
        two_rows = torch.randn(2, K, device="cuda")
        assert torch.equal(fused_ops.linear(two_rows, w, b), F.linear(two_rows, w, b))  # more rows: cuBLAS
