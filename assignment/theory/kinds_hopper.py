"""The Hopper kinds of numeric theory question (those the registry gives to the Hopper task): the TMA pipeline's
shared memory, stages and mbarrier phases; the registers a warp-specialised block gives each warpgroup under
``setmaxnreg``; a FlashAttention pass at fp8 on the roofline.

Each kind is a function of a ``Draw``, as kinds.py's are: the question's numbers, its statement and its parts.
The draws are shaped so that every question has an answer worth asking (at least two stages fit; the reference's
own configurations are among them), never by computing one.
"""

from __future__ import annotations

from assignment.theory.kinds import ROOFLINE_GPUS, SHARED_MEMORY_GPUS, Draw, number_text

# The Hopper GPUs of the kit's tables (one block's opt-in shared memory: 227 KB on both).
HOPPER_SHARED_MEMORY = next(gpu for gpu in SHARED_MEMORY_GPUS if "sm_90" in gpu["gpu"])
# Dense fp8 (e4m3 or e5m2) tensor-core peaks from the datasheets, twice the 16-bit ones.
FP8_PEAKS = {"NVIDIA H100 SXM": 1979e12, "NVIDIA H200 SXM": 1979e12}
HOPPER_ROOFLINE_GPUS = tuple(gpu for gpu in ROOFLINE_GPUS if gpu["gpu"] in FP8_PEAKS)
REGISTERS_PER_SM = 65536


def _pipeline_depth(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    d = draw.choice((64, 128))
    # At d = 128 three consumer warpgroups leave room for one stage only at the widest key tiles: not drawn.
    consumers = draw.choice((1, 2, 3) if d == 64 else (1, 2))
    keys_per_tile = 16 * draw.integer(4, 12)
    params = {
        "per_block": HOPPER_SHARED_MEMORY["per_block"],
        "d": d,
        "consumers": consumers,
        "Bc": keys_per_tile,
        "stages": draw.integer(2, 4),
        "Lk": keys_per_tile * draw.integer(2, 30) + draw.integer(1, keys_per_tile - 1),  # a ragged last tile
        "iteration": draw.integer(3, 40),
    }
    p = params
    text = f"""\
A FlashAttention-3 block on an H100 (fp16 or bf16, 2~bytes a value) keeps in shared memory one Q tile of
B_r~=~64~·~W rows, W~=~{p["consumers"]} consumer warpgroups of 64 query rows each, and S stages of one K tile and
one V tile of B_c~=~{p["Bc"]} keys each; every tile has d~=~{p["d"]} columns. The tiles start 1024-aligned (the
128-byte swizzle), which costs 1024 bytes of slack once for the whole carve-up. Beside them sit the mbarriers,
8~bytes each: one for Q and four per stage (K full, K empty, V full, V empty). One block may use at most
{p["per_block"]}~bytes (227~KB, the opt-in maximum; 1~KB~=~1024~bytes).

One producer thread fills the stages in the order the consumers read the key tiles: the consumers' key tile
number i (i~=~0,~1,~2,~…) goes into stage i~mod~S. Before it refills a stage, the producer waits on that stage's
empty barrier; then it calls mbarrier.arrive.expect_tx on the full barrier with the bytes the copy engine will
write, and issues the copies (TMA), which complete the barrier's phase when that many bytes have landed. The
copy engine writes the whole box of B_c~×~d values, filling with zeros what lies past the end of the tensor,
and counts every byte it writes. A barrier's phases are numbered 0,~1,~2,~… from its initialisation;
mbarrier.try_wait.parity with parity P returns once the most recent phase of parity P has completed, and a
freshly initialised barrier treats the phase before phase 0 (parity 1) as completed. Each empty barrier
completes a phase when every consumer warp has released the stage once."""
    parts = [
        (
            f"the bytes of shared memory the block takes with S = {p['stages']} stages, slack and mbarriers included",
            "bytes",
        ),
        ("the largest number of stages S with which the block fits in one block's maximum", "stages"),
        (
            f"the keys are Lk = {p['Lk']} long: the bytes the producer announces with expect_tx on the K full "
            "barrier for the last key tile, the one that holds the last key",
            "bytes",
        ),
        (
            f"with S = {p['stages']} stages (the schedule's rules hold for any S): the stage that the consumers' key "
            f"tile i = {p['iteration']} goes into",
            "stage",
        ),
        (
            "how many phases that stage's K full barrier has completed when the consumers' wait for tile i returns",
            "phases",
        ),
        (
            "the parity the producer passes to mbarrier.try_wait.parity on that stage's K empty barrier before it "
            "copies tile i",
            "parity",
        ),
    ]
    return params, text, parts


def _register_budget(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    params = {
        "registers": REGISTERS_PER_SM,
        "consumers": draw.choice((2, 3, 4)),
        "producer": draw.choice((24, 32, 40, 56)),
        "d": draw.choice((64, 128)),
        "Bc": draw.choice((64, 96, 128, 176)),
        "other": draw.choice((32, 40, 48)),
    }
    p = params
    text = f"""\
A warp-specialised FlashAttention-3 block has one producer warpgroup and W~=~{p["consumers"]} consumer warpgroups
(128 threads each) and is launched with __launch_bounds__(threads,~1): one block per SM. An SM has
{p["registers"]} 32-bit registers. The compiler gives every thread of the kernel the same register count R at
launch: a multiple of 8, the largest with which the whole block fits in the SM's registers.

Then the warpgroups trade registers with setmaxnreg, whose count must be a multiple of 8 from 24 to 256. The
producer warpgroup runs setmaxnreg.dec to {p["producer"]} registers a thread, returning the rest to a pool that
belongs to the block; every consumer warpgroup runs setmaxnreg.inc to the same count C, taking C~−~R registers a
thread from that pool, which holds only what the producer returned (the block never gets more registers than it
was given at launch).

A consumer thread of the overlapped schedule holds at once, in fp32 registers, its share of the score tile S
(64~×~B_c per warpgroup, spread evenly over the 128 threads) and of the output accumulator O (64~×~d, d~=~{p["d"]}),
and P packed as 16-bit pairs (64~×~B_c per warpgroup, two values per 32-bit register, spread evenly)."""
    parts = [
        ("the register count R every thread gets at launch", "registers"),
        ("the registers the producer warpgroup returns to the block's pool", "registers"),
        ("the largest count C the consumer warpgroups can all get", "registers"),
        (f"the registers a consumer thread's S, O and P take for B_c = {p['Bc']}", "registers"),
        (
            f"the largest B_c, a multiple of 16, that leaves at least {p['other']} of the C registers of (c) for "
            "everything else (addresses, counters, the row statistics, temporaries); 0 if none does",
            "keys",
        ),
    ]
    return params, text, parts


def _fp8_intensity(draw: Draw) -> tuple[dict, str, list[tuple[str, str]]]:
    gpu = draw.choice(HOPPER_ROOFLINE_GPUS)
    heads = draw.choice((8, 16, 32))
    params = {
        "gpu": gpu["gpu"],
        "peak_fp8": FP8_PEAKS[gpu["gpu"]],
        "peak_bf16": gpu["bf16"],
        "bandwidth": gpu["bandwidth"],
        "B": draw.choice((1, 2, 4, 8, 16)),
        "H": heads,
        "H_kv": heads // draw.choice((1, 4, 8)),
        "L": draw.choice((512, 1024, 2048, 4096, 8192, 16384)),
        "d": draw.choice((64, 128)),
        "causal": draw.choice((False, True)),
    }
    p = params
    mask = (
        "causal: query i sees keys j~≤~i, and only the pairs the mask keeps are computed"
        if p["causal"]
        else "no mask: every query sees every key"
    )
    text = f"""\
A FlashAttention forward pass on Hopper's tensor cores with Q, K and V in fp8 (1~byte a value) and O written in
bf16 (2~bytes): batch B~=~{p["B"]}, H~=~{p["H"]} query heads sharing H_kv~=~{p["H_kv"]} key/value heads, L~=~{p["L"]}
queries and L keys a head, head dimension d~=~{p["d"]}; {mask}.

Count FLOPs as 4~·~d per (query, key) pair that is computed (the two matrix products, 2 FLOPs a multiply-add;
nothing for the softmax). The ideal traffic between HBM and the chip reads Q, K and V once and writes O once
(K and V have H_kv heads), and writes the log-sum-exp once: one fp32 value (4~bytes) per query row and head.
The same pass in bf16 has Q, K, V and O all in bf16. The GPU: an {p["gpu"].replace(" ", "~")} with dense
tensor-core peaks of {number_text(p["peak_fp8"] / 1e12)}~TFLOP/s in fp8 and {number_text(p["peak_bf16"] / 1e12)}~TFLOP/s
in bf16, and {number_text(p["bandwidth"] / 1e12)}~TB/s of HBM bandwidth (1~GFLOP~=~10⁹~FLOP, 1~MB~=~10⁶~bytes,
1~TB/s~=~10¹²~bytes/s). The roofline's shortest time is max(FLOPs~/~peak, bytes~/~bandwidth)."""
    parts = [
        ("the FLOPs of the pass", "GFLOP"),
        ("its ideal traffic in fp8", "MB"),
        ("its arithmetic intensity in fp8, FLOPs over bytes", "FLOP/byte"),
        ("the shortest time the roofline allows in fp8", "µs"),
        ("the roofline's speedup of fp8 over bf16: the bf16 pass's shortest time over the fp8 pass's", "no unit"),
        (
            "the shortest length L (queries = keys, everything else as above) at which the fp8 pass is "
            "compute-bound: its intensity at least the fp8 peak over the bandwidth",
            "tokens",
        ),
    ]
    return params, text, parts


HOPPER_KINDS = {
    "pipeline_depth": _pipeline_depth,
    "register_budget": _register_budget,
    "fp8_intensity": _fp8_intensity,
}
