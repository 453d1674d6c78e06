"""The tensor-core kinds of numeric theory question (those the registry gives to the tensor-core task): the
fragments of ``mma.sync`` m16n8k16 and of ``pack_p``, shared-memory bank conflicts of padded and swizzled tiles
under ``ldmatrix`` and plain loads, and a tensor-core attention pass on the roofline.

Each kind is a function of a ``Draw``, as kinds.py's are: the question's numbers, its statement and its parts.
"""

from __future__ import annotations

from assignment.theory.kinds import ROOFLINE_GPUS, Draw, number_text


def _fragments(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    # An element of A in the top-right or bottom-left quarter (so that the order of the quarters, a2 a3 before
    # a4 a5, matters) whose row and column differ mod 8 (so that reading the table transposed names another lane).
    row, col = draw.integer(0, 7), draw.integer(0, 6)
    col += 1 if col >= row else 0
    if draw.integer(0, 1):
        row += 8
    else:
        col += 8
    # An element of B whose column differs from its row mod 8 (again: transposed, another lane).
    b_row = draw.integer(0, 15)
    b_col = draw.integer(0, 6)
    b_col += 1 if b_col >= b_row % 8 else 0
    # A lane whose two numbers differ (l = 4g + t with g != t), so that swapping them names another row and key.
    lane = draw.choice([lane for lane in range(32) if lane // 4 != lane % 4])
    params = {
        "a_row": row,
        "a_col": col,
        "b_row": b_row,
        "b_col": b_col,
        "lane": lane,
        "element": draw.integer(0, 3),
        "ntile": draw.integer(0, 7),
    }
    p = params
    text = """\
One warp runs mma.sync.aligned.m16n8k16.row.col.f32 with fp16 or bf16 inputs (the layout is the same for both):
D~=~A~B~+~C with A of 16~×~16 (rows m, columns k), B of 16~×~8 (rows k, columns n) and C,~D of 16~×~8 in fp32.
Each of the 32 lanes (0~…~31) holds fixed elements of each operand, as the PTX ISA's "Matrix Fragments for
mma.m16n8k16 with floating point type" lays them out (the t8 section draws them). Name them as the PTX ISA
does: a lane holds a0~…~a7 of A, b0~…~b3 of B and c0~…~c3 of C (in kit.cuh, register a[k] holds a(2k) in
its low 16 bits and a(2k+1) in its high ones; mma_m16n8k16's first B register holds b0 and b1, its second b2
and b3; d[i] holds ci).

In t8, a warp's 16~×~64 tile of scores S~=~Q~K_jᵀ is 8 n-tiles of 8 keys (n-tile j holds keys
8j~…~8j~+~7 of the tile), each the C fragment of one mma. pack_p turns the C fragments of n-tiles 2m and
2m~+~1 into the A fragment of P for keys 16m~…~16m~+~15, the A operand of P~V_j, in the same lanes."""
    parts = [
        (f"A: the lane that holds the element in row {p['a_row']}, column {p['a_col']}", "lane"),
        ("A: which of that lane's a0 … a7 it is (the i of ai)", "index"),
        (f"B: the lane that holds the element in row {p['b_row']}, column {p['b_col']}", "lane"),
        ("B: which of that lane's b0 … b3 it is (the i of bi)", "index"),
        (
            f"S: the key (0 … 63, the column of the 16 × 64 tile) of lane {p['lane']}'s c{p['element']} "
            f"of n-tile {p['ntile']}",
            "key",
        ),
        ("that score in P's A fragment after pack_p: which of the lane's a0 … a7 it is (the i of ai)", "index"),
    ]
    return params, text, parts


# The layouts of a 16-bit tile in shared memory: padded by `pad` values a row (0: none), or t8's XOR swizzle.
TILE_LAYOUTS = (
    {"layout": "padded", "pad": 0},
    {"layout": "padded", "pad": 8},
    {"layout": "padded", "pad": 16},
    {"layout": "padded", "pad": 24},
    {"layout": "padded", "pad": 32},
    {"layout": "swizzled", "pad": 0},
)


def _bank_conflicts(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    params = dict(draw.choice(TILE_LAYOUTS))
    rows, cols = draw.choice((64, 128)), draw.choice((64, 128))
    params.update(
        rows=rows,
        cols=cols,
        element=(draw.integer(0, rows - 1), draw.integer(0, cols - 1)),
        block=(draw.integer(0, rows - 16), 16 * draw.integer(0, cols // 16 - 1)),
        column=(draw.integer(0, rows - 32), draw.integer(0, cols - 1)),
        # Without ldmatrix: a0 a1 of an A fragment (Q, P) in one 32-bit load, or b0 of V's B fragment in 16 bits.
        fragment=draw.choice(("a", "v")),
    )
    p = params
    if p["layout"] == "swizzled":
        layout = """\
It is XOR-swizzled as t8 stores its tiles: chunk k of row r (its elements 8k~…~8k~+~7, 16 bytes) is stored at
chunk k~⊕~(r~mod~8) of row r (⊕: bitwise exclusive or), so element (r,~c) is at byte
2rC~+~16~(⌊c/8⌋~⊕~(r~mod~8))~+~2~(c~mod~8)."""
    elif p["pad"]:
        layout = f"""\
Each row is padded with p~=~{p["pad"]} unused values, so element (r,~c) is at byte 2~(r~(C~+~p)~+~c)."""
    else:
        layout = """\
Its rows follow each other with no padding and no swizzle: element (r,~c) is at byte 2~(rC~+~c)."""
    (r2, c2), (r0, c0), (r1, c1) = p["element"], p["block"], p["column"]
    text = f"""\
A tile of R~=~{rows} rows and C~=~{cols} columns of fp16 values (2 bytes each) is stored row-major in shared
memory from byte 0. {layout}

Shared memory has 32 banks of 4 bytes: byte b is in bank ⌊b/4⌋~mod~32. A warp's shared-memory instruction
is served in phases, and a phase takes as many wavefronts (passes) as the largest number of different 4-byte
words that one bank must deliver in it; lanes that read the same word share it. A load of 32 bits or less a
lane is one phase of all 32 lanes. ldmatrix.x4 is one phase per 8~×~8 matrix: the 8 row addresses that lanes
8i~…~8i~+~7 give for matrix i, 16 bytes from each. Count the wavefronts of one instruction, all its phases
together: 1 for a 32-lane load without conflicts, at least 4 for ldmatrix.x4."""
    parts = [
        ("the bytes the tile takes, padding included", "bytes"),
        (f"the bank of the element in row {r2}, column {c2}", "bank"),
        (
            f"ldmatrix.x4 of the 16 × 16 block of rows {r0} … {r0 + 15}, columns {c0} … {c0 + 15} in t8's A "
            f"order: lane L gives the address of row {r0} + (L mod 16), columns {c0} + 8⌊L/16⌋ … + 7",
            "wavefronts",
        ),
        (
            (
                f"32-bit loads, the A fragment's a0 a1 without ldmatrix: lane L = 4g + t reads the elements in row "
                f"{r0} + g, columns {c0} + 2t and {c0} + 2t + 1"
            )
            if p["fragment"] == "a"
            else (
                f"16-bit loads, b0 of V's B fragment without ldmatrix: lane L = 4g + t reads the element in row "
                f"{r0} + 2t, column {c0} + g"
            ),
            "wavefronts",
        ),
        (f"16-bit loads of a column: lane L reads the element in row {r1} + L, column {c1}", "wavefronts"),
    ]
    return params, text, parts


def _attention_intensity(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    gpu = draw.choice(ROOFLINE_GPUS)
    heads = draw.choice((8, 16, 32))
    params = {
        "gpu": gpu["gpu"],
        "peak": gpu["bf16"],  # fp16 and bf16 tensor-core peaks are the same on these GPUs
        "bandwidth": gpu["bandwidth"],
        "dtype": draw.choice(("fp16", "bf16")),
        "B": draw.choice((1, 2, 4, 8, 16)),
        "H": heads,
        "H_kv": heads // draw.choice((1, 4, 8)),
        "L": draw.choice((256, 512, 1024, 1500, 2048, 4096, 6000, 8192, 16384)),
        "d": draw.choice((64, 128)),
        "Br": draw.choice((64, 128)),
    }
    p = params
    text = f"""\
A FlashAttention forward pass on tensor cores in {p["dtype"]} (2~bytes a value), no mask: batch
B~=~{p["B"]}, H~=~{p["H"]} query heads sharing H_kv~=~{p["H_kv"]} key/value heads (query head h reads KV head
⌊h~/~(H/H_kv)⌋), L~=~{p["L"]} queries and L keys a head, head dimension d~=~{p["d"]}.

Count FLOPs as 2 per multiply-add of the two matrix products, QKᵀ and PV, and nothing else (no softmax):
4~·~B~·~H~·~L²~·~d. The ideal traffic between HBM and the chip reads Q, K and V once and writes O once, all in
{p["dtype"]} (K and V have H_kv heads), and writes the log-sum-exp once: one fp32 value (4~bytes) per query
row and head. The GPU: an {p["gpu"].replace(" ", "~")} with a dense fp16/bf16 tensor-core peak of
{number_text(p["peak"] / 1e12)}~TFLOP/s and {number_text(p["bandwidth"] / 1e12)}~TB/s of HBM bandwidth
(1~GFLOP~=~10⁹~FLOP, 1~MB~=~10⁶~bytes, 1~TB/s~=~10¹²~bytes/s)."""
    parts = [
        ("the FLOPs of the forward pass", "GFLOP"),
        ("its ideal traffic", "MB"),
        ("its arithmetic intensity with the ideal traffic, FLOPs over bytes", "FLOP/byte"),
        ("the GPU's ridge point, peak over bandwidth", "FLOP/byte"),
        ("the shortest time the roofline allows, max(FLOPs / peak, bytes / bandwidth)", "µs"),
        (
            f"the arithmetic intensity if L2 never helps: every thread block (one batch element, one query head, "
            f"B_r = {p['Br']} query rows, a head's last block holding the rows left) reads its Q rows and the whole "
            "K and V of its KV head from HBM, and writes its O rows and their LSE",
            "FLOP/byte",
        ),
    ]
    return params, text, parts


TENSOR_CORE_KINDS = {
    "fragments": _fragments,
    "bank_conflicts": _bank_conflicts,
    "attention_intensity": _attention_intensity,
}
