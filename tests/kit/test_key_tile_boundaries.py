"""t5's sweep of key lengths reaches every offset of the last key tile, in every tile configuration of the kit's kernel.

Grading builds t5 with the kit's t4 regions, so t5's functions run in the kit's kernel, whose configurations are the
``Cfg`` structs of solutions/t4_flash_attention.cu. A full query tile (rows q0 .. q0 + BR - 1, all below Lq) sees keys
up to q0 + BR - 1 + Lk - Lq; a loop bound one tile short shows only when that key sits at one particular offset of
its key tile, which none of the registry's causal shapes may reach. The hidden suite's sweep
(``attention_checks.boundary_shapes``) must reach every offset, for every (BR, BC) the kernel can take; which grid
takes which configuration on the GPU is tests/kit/test_hidden_coverage.py's to check.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.hidden.attention_checks import BOUNDARY_GRIDS, KEY_TILE, boundary_shapes

pytestmark = pytest.mark.kit
KERNEL = Path(__file__).resolve().parents[2] / "solutions" / "t4_flash_attention.cu"
CFG = re.compile(r"struct Cfg<(\d+), (?:true|false)> \{ static constexpr int BR = (\d+), BC = (\d+)")


def tile_configs() -> list[tuple[int, int]]:
    """(BR, BC) of every configuration of the kit's attention kernel."""
    found = [(int(br), int(bc)) for _, br, bc in CFG.findall(KERNEL.read_text(encoding="utf-8"))]
    assert len(found) >= 4, f"expected the Cfg structs of {KERNEL.name} (d 32, 64, 64 big, 128), found {found}"
    return found


def offsets_of_the_last_keys(shape: dict, BR: int, BC: int) -> set[int]:
    """The offsets, within their key tiles, of the last key each full query tile of ``shape`` sees (tiles whose last
    row sees some key)."""
    Lq, Lk = shape["Lq"], shape["Lk"]
    last_keys = (q0 + BR - 1 + Lk - Lq for q0 in range(0, Lq - BR + 1, BR))
    return {key % BC for key in last_keys if 0 <= key < Lk}


def test_every_configuration_takes_key_tiles_of_key_tile_keys_and_whole_tiles_of_query_rows():
    # What makes Lk - Lq alone decide the offset, whatever q0: BR a multiple of BC.
    for BR, BC in tile_configs():
        assert BC == KEY_TILE, (
            f"a configuration of {KERNEL.name} takes BC = {BC} keys a tile; the sweep assumes {KEY_TILE}"
        )
        assert BR % BC == 0, f"BR = {BR} is no multiple of BC = {BC}: the offsets then depend on q0 too"


@pytest.mark.parametrize("grid", sorted(BOUNDARY_GRIDS))
def test_the_sweep_reaches_every_offset_of_the_last_key_tile(grid):
    shapes = boundary_shapes(BOUNDARY_GRIDS[grid])
    for BR, BC in sorted(set(tile_configs())):
        reached = set().union(*(offsets_of_the_last_keys(shape, BR, BC) for shape in shapes))
        missed = sorted(set(range(BC)) - reached)
        assert not missed, f"the {grid} grid's sweep never puts the last key of a {BR}-row tile at offsets {missed}"
