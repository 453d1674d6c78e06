"""The hidden correctness shapes reach every configuration the reference dispatches to, on this GPU.

Each reference file exports a hook that reports the configuration its host code picks for a call
(t2_softmax_path, t3_gemm_config, t4_flash_attention_config, t8_flash_attention_config). A configuration that no correctness
shape reaches would be graded only by timing, or not at all.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import pytest
import torch

from assignment.cuda.compiler import load_library
from assignment.cuda.wrappers import load_kernels
from assignment.registry import load_registry
from grader.hidden.attention_checks import BOUNDARY_GRIDS

pytestmark = [pytest.mark.kit, pytest.mark.gpu]
REPO = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()


def hook(filename: str, symbol: str, argtypes, module: bool = False):
    """The reference's hook; ``module``: one that asks the reference's device module (the kernels it would
    launch), which it takes first."""
    if not module:
        function = getattr(load_library(REPO / "solutions" / filename), symbol)
        function.argtypes, function.restype = argtypes, ctypes.c_int
        return function
    loaded = load_kernels(REPO / "solutions" / filename)
    function = getattr(loaded.host, symbol)
    function.argtypes, function.restype = (ctypes.c_void_p, *argtypes), ctypes.c_int
    return functools.partial(function, loaded.module)


def test_t2_shapes_reach_every_path():
    path = hook("t2_softmax.cu", "t2_softmax_path", (ctypes.c_int64, ctypes.c_int), module=True)
    sweep = sorted({c + e for c in [2**p for p in range(1, 19)] + [1000, 4097, 70001] for e in (-1, 0, 1)})
    reachable = {path(cols, vec) for cols in sweep for vec in (0, 1) if not vec or cols % 4 == 0}
    shapes = REGISTRY.task("t2").hidden.fixed
    reached = {path(s["cols"], int(s["cols"] % 4 == 0)) for s in shapes}
    assert reachable <= reached, (
        f"paths no hidden t2 shape reaches on {torch.cuda.get_device_name()}: {sorted(reachable - reached)}"
    )


def test_t3_shapes_reach_every_tile_configuration_with_both_loaders():
    config = hook("t3_gemm.cu", "t3_gemm_config", (ctypes.c_int,) * 6)
    reachable = {
        config(b, m, n, k, ta, tb)
        for b in (1, 4, 36, 70)
        for m in (64, 200, 772, 2048, 2047)
        for n in (40, 63, 64, 772, 769)
        for k in (36, 35)
        for ta in (0, 1)
        for tb in (0, 1)
    }
    shapes = REGISTRY.task("t3").hidden.fixed
    reached = {config(s["batch"], s["M"], s["N"], s["K"], ta, tb) for s in shapes for ta in (0, 1) for tb in (0, 1)}
    assert reachable <= reached, f"configurations no hidden t3 shape reaches: {sorted(reachable - reached)}"
    assert len(reachable) == 8, f"expected 4 tiles x 2 loaders, found {sorted(reachable)}"


def test_t4_and_t5_shapes_reach_every_kernel_configuration():
    config = hook("t4_flash_attention.cu", "t4_flash_attention_config", (ctypes.c_int,) * 5)
    reachable = {
        config(b, h, lq, d, causal)
        for b in (1, 8, 64)
        for h in (1, 8, 16)
        for lq in (1, 777, 1500, 4096)
        for d in (32, 64, 128)
        for causal in (0, 1)
    }
    reached = set()
    for task_id, causal in (("t4", 0), ("t5", 1)):
        for s in REGISTRY.task(task_id).hidden.fixed:
            reached |= {config(s["B"], s["H"], s["Lq"], d, causal) for d in (32, 64, 128)}
    assert reachable <= reached, f"configurations no hidden t4/t5 shape reaches: {sorted(reachable - reached)}"


def test_t5_boundary_sweep_grids_reach_both_heights_of_query_tile():
    # The hidden sweep of the last key tile's offsets (test_t5_hidden.test_every_offset_of_the_last_key_tile) runs
    # the small grid at every d and the large one at d = 64: between them, the 64- and the 128-row tiles.
    config = hook("t4_flash_attention.cu", "t4_flash_attention_config", (ctypes.c_int,) * 5)

    def big_tiles(grid: dict, d: int) -> bool:  # bit 1 of the configuration: the 128-row tiles at d = 64
        return bool(config(grid["B"], grid["H"], grid["Lq"], d, 1) & 2)

    assert big_tiles(BOUNDARY_GRIDS["large"], 64), (
        f"the large boundary grid does not reach the 128-row tiles on {torch.cuda.get_device_name()}"
    )
    assert not any(big_tiles(BOUNDARY_GRIDS["small"], d) for d in (32, 64, 128)), (
        "the small boundary grid takes the 128-row tiles: the 64-row tiles at d = 64 go unswept"
    )


def test_t8_shapes_reach_every_kernel_configuration():
    if not REGISTRY.task("t8").available:
        pytest.skip("t8 is not available in this registry")
    config = hook("t8_flash_attention_tc.cu", "t8_flash_attention_config", (ctypes.c_int,) * 6)
    flags = [(causal, bf16) for causal in (0, 1) for bf16 in (0, 1)]
    reachable = {
        config(b, h, lq, d, causal, bf16)
        for b in (1, 8, 64)
        for h in (1, 8, 16, 32)
        for lq in (1, 777, 1500, 4096, 8192)
        for d in (64, 128)
        for causal, bf16 in flags
    }
    shapes = REGISTRY.task("t8").hidden.fixed
    reached = {config(s["B"], s["H"], s["Lq"], d, c, bf) for s in shapes for d in (64, 128) for c, bf in flags}
    assert reachable <= reached, f"configurations no hidden t8 shape reaches: {sorted(reachable - reached)}"


def test_the_sanitizer_scenario_reaches_the_128_row_tiles():
    # t4_sanitize's grid for the big tiles (solutions/t4_flash_attention.cu: run(2, 8, 2, 129, 200, 64)): small, so
    # racecheck stays quick, and still on the 128-row tiles, causal (t5) and not (t4), on this GPU.
    config = hook("t4_flash_attention.cu", "t4_flash_attention_config", (ctypes.c_int,) * 5)
    source = (REPO / "solutions" / "t4_flash_attention.cu").read_text()
    assert "run(2, 8, 2, 129, 200, 64)" in source, "the scenario's grid changed: change it here too"
    for causal in (0, 1):
        assert config(2, 8, 129, 64, causal) & 2, (
            f"the sanitizer scenario's d = 64 grid does not reach the 128-row tiles on {torch.cuda.get_device_name()}"
        )
