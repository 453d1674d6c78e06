"""The answer keys of the Hopper kinds of theory question (assignment/theory/kinds_hopper.py words and draws them):
the TMA pipeline's shared memory and mbarrier phases, the registers of a warp-specialised block under setmaxnreg,
a FlashAttention pass at fp8 on the roofline. Instructor-only, like grader/grade/theory.py, which lists them in its
``KEYS``. Each follows the counting convention its question states; tests/kit/test_theory_t9.py checks them against
the reference kernel's own configurations and against a step-by-step model of the mbarriers.
"""

from __future__ import annotations

from fractions import Fraction

MBARRIER_BYTES = 8
ALIGNMENT_SLACK = 1024  # the carve-up's 1024-byte alignment (the 128-byte swizzle's atom)
VALUE_BYTES = 2  # fp16 / bf16
WARPGROUP = 128


def pipeline_bytes(p: dict, stages: int) -> int:
    """Shared memory of the question's block: the Q tile, `stages` K and V tiles, the slack, the mbarriers."""
    q_rows = 64 * p["consumers"]
    tiles = VALUE_BYTES * p["d"] * (q_rows + 2 * stages * p["Bc"])
    return tiles + ALIGNMENT_SLACK + MBARRIER_BYTES * (1 + 4 * stages)


def pipeline_depth_key(p: dict) -> list[float]:
    deepest = 0
    while pipeline_bytes(p, deepest + 1) <= p["per_block"]:
        deepest += 1
    passes = p["iteration"] // p["stages"]  # the passes over the stages before tile i's
    return [
        pipeline_bytes(p, p["stages"]),
        deepest,
        VALUE_BYTES * p["Bc"] * p["d"],  # the whole box: the zero fill past Lk is written and counted too
        p["iteration"] % p["stages"],
        passes + 1,  # phase `passes` of the full barrier is tile i's copy
        (passes + 1) % 2,  # the phase before (`passes` - 1): the consumers' release of the previous pass
    ]


def launch_registers(p: dict) -> int:
    threads = WARPGROUP * (p["consumers"] + 1)
    return p["registers"] // threads // 8 * 8


def consumer_registers(p: dict) -> int:
    """The largest setmaxnreg count (a multiple of 8) the consumers can take from what the producer returned."""
    launch = launch_registers(p)
    return launch + 8 * ((launch - p["producer"]) // (8 * p["consumers"]))


def register_budget_key(p: dict) -> list[float]:
    launch, consumer = launch_registers(p), consumer_registers(p)

    def arrays(keys: int) -> int:  # S (fp32), O (fp32), P (two 16-bit values a register), per thread
        return (64 * keys + 64 * p["d"]) // WARPGROUP + 64 * keys // 2 // WARPGROUP

    widest = 0
    while arrays(widest + 16) + p["other"] <= consumer:
        widest += 16
    return [launch, WARPGROUP * (launch - p["producer"]), consumer, arrays(p["Bc"]), widest]


def _fp8_work(p: dict, length: int) -> tuple[int, int, int]:
    """(FLOPs, fp8 bytes, bf16 bytes) at `length` queries and keys a head."""
    B, H, H_kv, d = p["B"], p["H"], p["H_kv"], p["d"]
    pairs = length * (length + 1) // 2 if p["causal"] else length * length
    flops = 4 * d * B * H * pairs
    lse = 4 * B * H * length

    def traffic(input_bytes: int) -> int:  # Q, K and V in the input type; O in bf16; the LSE in fp32
        return input_bytes * B * length * d * (H + 2 * H_kv) + 2 * B * H * length * d + lse

    return flops, traffic(1), traffic(2)


def fp8_intensity_key(p: dict) -> list[float]:
    flops, fp8_bytes, bf16_bytes = _fp8_work(p, p["L"])
    fp8_time = max(flops / p["peak_fp8"], fp8_bytes / p["bandwidth"])
    bf16_time = max(flops / p["peak_bf16"], bf16_bytes / p["bandwidth"])
    # The shortest compute-bound length, exactly: the intensity grows with the length, so search upwards from a
    # bound below it (halving until memory-bound), comparing in integers (peaks and bandwidths are whole numbers).
    ridge = Fraction(int(p["peak_fp8"])) / Fraction(int(p["bandwidth"]))

    def compute_bound(length: int) -> bool:
        f, b, _ = _fp8_work(p, length)
        return Fraction(f, b) >= ridge

    high = 1
    while not compute_bound(high):
        high *= 2
    low = high // 2  # memory-bound (or 0)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if compute_bound(middle) else (middle, high)
    return [flops / 1e9, fp8_bytes / 1e6, flops / fp8_bytes, fp8_time * 1e6, bf16_time / fp8_time, high]
