// t6: decode attention over a KV cache, split over the key length ("split-KV"), fp32 on CUDA cores.
//
// One new token per sequence: q is ONE query vector per (batch, head), and it attends to the first
// L positions of that sequence's cache. Per (b, h):
//     O = softmax(scale * q K[0:L]^T) V[0:L]          LSE = log sum_j exp(scale * q . k_j)
// There is almost no arithmetic per byte (2 flops per K or V float read, per query head that shares
// the KV head): decode is memory-bound, and the goal is to stream K and V through the SMs once, at
// the speed of a device-to-device copy.
//
// ---------------------------------------------------------------------------
// Why split-KV. One (batch, KV head) is one long stream of keys. At batch 1 with 8 KV heads, one
// block per KV head would leave 124 of an H100's 132 SMs idle. So the key range is cut into
// n_splits pieces, one block each, and a second small kernel merges their results:
//
//   keys  0 ............................................ L-1          (L read from device memory)
//         | split 0 | split 1 | split 2 | ... | split n-1 |  (empty)   every split: the same number
//         +----+----+----+----+----+----+     +----+                  of 32-key tiles; the last
//              |         |         |               |                  ones may be short or empty
//        (O_0, lse_0) (O_1, lse_1) ...        (O_n-1, lse_n-1)        partial results, normalised
//              \_________|_________|_______________/
//                             combine:  M = max_s lse_s,  w_s = 2^(lse_s - M)
//                                       O = sum_s w_s O_s / sum_s w_s,  LSE = M + log2(sum_s w_s)
//
// A split that starts past L is empty: it writes lse = -inf and O = 0, and gets weight 0.
//
// The length lives on the device (an int per batch row), so a CUDA graph captured once replays
// unchanged while the sequence grows: the grid (n_splits blocks per KV head) is fixed at launch
// from the cache's capacity L_max and the SM count, and each block computes ITS key range from
// the L it reads. Every split gets ceil(ceil(L / 32) / n_splits) tiles, so at any L the work is
// spread over all splits, and the workspace (n_splits partial results per query head) never changes.
//
// BEGIN ONLY t6 open
// ---------------------------------------------------------------------------
// At this level the split kernel's body is yours to design (decode_split_kernel, below): which thread scores
// which keys for which of the block's query heads, the shared-memory layout, how K and V get there and when,
// and how the block's threads merge their partial softmax states into one row per head. The kit gives the
// launch (the host code at the end of the file: one block of NT = 128 threads for every (split, KV head and
// chunk of at most 4 * HPW of its query heads, batch row), split_smem_bytes<D, HPW>() bytes of dynamic shared
// memory, n_splits chosen from the cache's capacity and the SM count), the combine kernel that merges the
// splits' rows, kit.cuh's device helpers (fast_exp2, cp_async16, cp_async_commit and cp_async_wait), and the
// reference's own helpers in this file (load_kv_tile_async, max_over_keys, sum_over_keys: yours to use or not).
// END ONLY
// BEGIN ONLY t6 guided
// ---------------------------------------------------------------------------
// One block = one (batch b, KV head, split) and ALL the query heads of that KV head (up to 16; a
// larger group takes several blocks). Grouped-query attention is what makes decode cheaper than it
// looks: the G = H / H_kv query heads of a group share one K/V stream, so each K/V tile is read
// from memory once and used G times.
//
//   4 warps, 128 threads. The block streams its keys in tiles of 32 through a double-buffered
//   cp.async pipeline in shared memory: while the warps compute tile t, tile t+1 is in flight.
//   The warps split each tile's KEYS, not the heads: warp w takes keys 8w .. 8w+7 of every tile
//   for ALL the block's heads, so each K and V row in shared memory is read by one warp only.
//   A lane is (kk, hl) = (lane / 4, lane % 4): head slot hl holds heads hl, hl+4, hl+8, hl+12 of
//   the block (HPW of them):
//
//   S:    lane (kk, hl) scores the warp's key kk against each of its heads:
//             s[i] = q_{head hl+4i} . k_{8w+kk}     (q and k from shared memory; the 4 lanes of a
//                                                    key read the same k float4: one broadcast)
//   softmax over the warp's 8 keys of the tile, per head (the 8 lanes with the same hl):
//             m_new = max(m, max of s over those lanes);  alpha = 2^(m - m_new);  p = 2^(s - m_new)
//             l = alpha * l + p   (a per-lane partial sum, added up over the 8 lanes at the end)
//   P V:  the same lane owns columns kk*d/8 .. kk*d/8 + d/8-1 of its heads' O rows:
//             acc = alpha * acc + sum_{j<8} p_(j, hl) * V[8w+j][my columns]   (__shfl_sync from lane 4j+hl)
//   end:  each warp has a partial softmax state per head over its quarter of the keys; the four are
//         merged through shared memory (the same LSE-weighted merge as the combine) and the block
//         writes O_s = acc / l and lse_s = m + log2(l) for each head to the workspace.
//
// Why this layout and not "one warp per head" (lane j = key j for every head of the warp): that
// reads each K and V row of the tile once PER WARP, four times in all, and a warp's P V is one
// chain of 32 dependent FMAs per column; measured on an H100 it cost 5-15% of the kernel's speed.
// Here each K/V element leaves shared memory once, a lane's P V is 8 keys deep with HPW * d/8
// independent accumulators, and the dot product runs on four partial sums.
//
// Scores are in log2 units: q is multiplied by scale * log2(e) once when it is loaded, so every
// exponential is a single ex2 instruction. The partial LSEs stay in log2 units; the combine
// converts the final LSE to natural log.
//
// Shared memory (float4 units):
//   Qs [4*HPW][d/4 + 1]            the block's query heads, pre-scaled (rows past the group: zeros);
//                                  padded so that the 4 head slots read in one instruction sit in
//                                  different bank groups
//   2 x { Ks [32][d/4 + 1]         K tile, each row padded by one float4: the 8 keys a warp reads
//                                  at one column fall in 8 different bank groups
//         Vs [32][d/4] }           V tile: a lane reads d/8 consecutive floats of a row
//   after the last tile, the stages hold the four warps' partial O rows for the merge.
//   d = 128: 68 KB a block, d = 64: 35 KB, d = 32: 18 KB; registers (174-192 a thread at d = 128,
//   127-128 at d = 64) allow 2 and 4 blocks per SM.
//
// Bandwidth: each SM has 2-4 blocks x one 16-32 KB tile of loads in flight, 64 KB, above the
// ~30 KB per SM that Little's law asks for at ~3 TB/s and ~1.5 us of loaded latency. Measured
// (H100): a copy of this kernel with the arithmetic removed reads at torch.sum's speed over the
// same bytes; the full kernel is within 4-6% of it at L 32768. Deeper pipelines (3-4 stages) and
// more resident blocks were measured and were slower: fewer blocks per SM, or two waves.
// END ONLY
// Split count: the kit's host code picks it so that the grid is about one full wave of resident
// blocks (see choose_splits): at B 1, H_kv 8 that is 32 splits at d = 128 and 64 at d = 64.
// The combine is a second, small kernel; on sm_90 it is launched as a programmatic dependent of
// the split kernel, so its launch overlaps the split kernel and it starts as soon as that ends.
// ---------------------------------------------------------------------------

#include "kit.cuh"

#include <math.h>

#include <atomic>
#include <cstdlib>

namespace t6dec {

using namespace kit;  // fast_exp2, cp_async16, cp_async_commit/wait, kLog2e, kLn2 (kit.cuh)

constexpr int TK = 32;                 // keys per tile
constexpr int NWARPS = 4;
constexpr int NT = 32 * NWARPS;        // threads of a split block
constexpr int LPK = 4;                 // lanes per key: head slots of a lane layout (lane = 4 * kk + hl)
constexpr int KPW = TK / NWARPS;       // keys of a tile per warp (8)
constexpr int MAX_GROUP = 16;          // query heads per block, at most (larger groups: several blocks)
constexpr int NSTAGE = 2;              // K/V tiles in shared memory: one being computed, one loading
constexpr int MAX_SPLITS = 4096;
constexpr int COMBINE_THREADS = 128;
// Per-block fixed cost (first tile's latency, q load, the final reduction and stores), in units of
// the time one tile takes at the block's share of the bandwidth: for the split-count cost model.
constexpr double BLOCK_OVERHEAD_TILES = 1.0;
static_assert(LPK * KPW == 32, "a warp's lanes are its KPW keys times LPK head slots");

// Max / sum over the KPW lanes that hold the same head slot (lanes hl, hl + 4, ..., hl + 28): the
// warp's 8 keys of one head. Every lane of the warp must call them.
__device__ __forceinline__ float max_over_keys(float x) {
#pragma unroll
    for (int o = LPK; o < 32; o <<= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float sum_over_keys(float x) {
#pragma unroll
    for (int o = LPK; o < 32; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Copy keys row0 .. row0+31 of K and V (rows of D floats) into a pipeline stage, asynchronously.
// Rows >= row_end are zero-filled and never read from memory: positions past L may hold anything
// (garbage, NaN), and a zero V row times p = 0 adds nothing.
template <int D>
__device__ __forceinline__ void load_kv_tile_async(float4* Ks, float4* Vs, const float* kb, const float* vb,
                                                   int row0, int row_end, int tid) {
    constexpr int D4 = D / 4, KROW = D4 + 1;
    static_assert((TK * D4) % NT == 0, "whole float4 chunks per thread");
#pragma unroll
    for (int it = 0; it < TK * D4 / NT; ++it) {  // consecutive threads, consecutive 16 bytes: coalesced
        const int idx = tid + it * NT;
        const int row = idx / D4, c = idx % D4;
        const bool ok = row0 + row < row_end;
        const long long off = ok ? (long long)(row0 + row) * D + 4 * c : 0;
        cp_async16(Ks + row * KROW + c, kb + off, ok ? 16 : 0);
        cp_async16(Vs + row * D4 + c, vb + off, ok ? 16 : 0);
    }
}

template <int D, int HPW>
constexpr size_t split_smem_bytes() {
    return sizeof(float4) * ((size_t)LPK * HPW * (D / 4 + 1) + (size_t)NSTAGE * TK * (2 * (D / 4) + 1));
}
// Blocks per SM the split kernel is built for: the register budget per thread (65536 / (128 x MINB)),
// kept high enough that nothing spills. Registers, not shared memory, then limit d = 128 to 2 blocks
// and d = 64 to 4; capping them to fit 3 and 5-6 was measured on an H100 and was slower (1-3%).
// d = 32 with 8 or 16 heads a block takes 4 (6 spills).
template <int D, int HPW>
struct Occupancy { static constexpr int MINB = D == 128 ? 2 : D == 64 ? 4 : HPW == 1 ? 8 : 4; };

// Grid: (n_splits, H_kv * chunks, B); block (split, KV head and group chunk, batch row).
template <int D, int HPW>
__global__ void __launch_bounds__(NT, Occupancy<D, HPW>::MINB)
decode_split_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                    const void* __restrict__ lengths, int lengths_int64, int lengths_per_batch,
                    float* __restrict__ o_part, float* __restrict__ lse_part, int H, int H_kv, int L_max,
                    int n_splits, int chunks, float qscale) {
    constexpr int GB = LPK * HPW;            // head slots of a block: the query heads it serves, at most
    extern __shared__ float4 smem[];         // split_smem_bytes<D, HPW>() bytes (the launch's)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The combine grid may launch now (programmatic dependent launch): its blocks wait in hardware
    // for this whole grid to finish, so its launch latency hides behind this kernel.
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    // BEGIN OPEN t6: the split kernel's body: threads to keys and heads, shared memory, K/V loads, the block's merge
    // PLAN: Block (split = blockIdx.x, KV head kvh = blockIdx.y / chunks, chunk = blockIdx.y % chunks, batch row
    // PLAN: b = blockIdx.z) serves the query heads h0 = kvh * G + chunk * GB .. of KV head kvh (G = H / H_kv; at most
    // PLAN: GB of them, fewer in a group's last chunk) over its share of the keys 0 .. L - 1. L is read here, from
    // PLAN: lengths[lengths_per_batch ? b : 0] (int64 when lengths_int64, else int32), clamped to 0 .. L_max: the same
    // PLAN: grid serves every length (a captured CUDA graph replays it while the cache grows), so the key range of a
    // PLAN: split follows L, and any split may get no key.
    // PLAN: q: (B, H, D); k, v: (B, H_kv, L_max, D), fp32; positions >= L may hold anything, NaN included, and must
    // PLAN: never reach an output. For each of its heads h the block writes row r = (b * H + h) * n_splits + split of
    // PLAN: the workspace: o_part[r * D ..] = the softmax of its keys' scores applied to their V rows (normalised),
    // PLAN: lse_part[r] = the log-sum-exp of those scores in log2 units (scores scale * q . k; qscale = scale * log2(e),
    // PLAN: fast_exp2 is 2^x); a split with no key writes O = 0 and lse = -inf. The kit's combine kernel (below)
    // PLAN: merges the n_splits rows of every head into O and LSE.
    // PLAN: fp32 throughout; no atomics: the same bits every run. The launch is fixed: NT threads, split_smem_bytes<D,
    // PLAN: HPW>() bytes of dynamic shared memory at smem; declare __shared__ arrays for more. TK, NSTAGE and MINB are
    // PLAN: the reference's choices, as are load_kv_tile_async, max_over_keys and sum_over_keys: use them or not.
    // PLAN: Aim: the reference's time at B 1 H 32 H_kv 8 L 32768 d 128 (K and V streamed at about 86% of a device
    // PLAN: copy's bandwidth); the rubric gives the levels and their points.
    constexpr int D4 = D / 4, KROW = D4 + 1, QROW = D4 + 1;
    constexpr int CW = D / KPW, CW4 = CW / 4;  // columns of a lane's share of an O row: d/8 (4, 8, 16)
    constexpr int STAGE = TK * (KROW + D4);  // float4s per pipeline stage (K tile, then V tile)
    static_assert(CW % 4 == 0, "a lane's columns are whole float4s");
    // The end-of-split merge reuses the pipeline stages: NWARPS partial O rows per head slot, their m and l.
    static_assert(sizeof(float) * NWARPS * GB * (D + 2) <= sizeof(float4) * NSTAGE * STAGE, "merge space");
    float4* Qs = smem;                       // [GB][QROW]
    float4* stages = Qs + GB * QROW;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int hl = lane % LPK, kk = lane / LPK;  // my head slot; my key (S) and my column chunk (P V)
    const int split = blockIdx.x;
    const int kvh = blockIdx.y / chunks, chunk = blockIdx.y % chunks;
    const int b = blockIdx.z;
    const int G = H / H_kv;                  // query heads per KV head
    const int gb = min(GB, G - chunk * GB);  // query heads in this block: slots >= gb are unused
    const int h0 = kvh * G + chunk * GB;     // the block's first query head

    // The current length, read on the device, clamped to the cache.
    const int row = lengths_per_batch ? b : 0;
    const long long raw = lengths_int64 ? reinterpret_cast<const long long*>(lengths)[row]
                                        : (long long)reinterpret_cast<const int*>(lengths)[row];
    const int L = (int)min(max(raw, 0LL), (long long)L_max);
    // This split's keys [start, end): whole tiles, the same number for every split.
    const long long tiles_per_split = (((long long)L + TK - 1) / TK + n_splits - 1) / n_splits;
    const int start = (int)min(split * tiles_per_split * TK, (long long)L);
    const int end = (int)min(start + tiles_per_split * TK, (long long)L);
    const int n_tiles = (end - start + TK - 1) / TK;  // 0: an empty split

    const long long kv_head = (long long)b * H_kv + kvh;
    const float* kb = k + kv_head * L_max * D;
    const float* vb = v + kv_head * L_max * D;

    // Start the first NSTAGE-1 tiles, then load q (scaled into log2 units) while they are in flight.
#pragma unroll
    for (int t = 0; t < NSTAGE - 1; ++t) {
        if (t < n_tiles) {
            float4* st = stages + t * STAGE;
            load_kv_tile_async<D>(st, st + TK * KROW, kb, vb, start + t * TK, end, tid);
        }
        cp_async_commit();
    }
    for (int idx = tid; idx < GB * D4; idx += NT) {
        const int i = idx / D4, c = idx % D4;
        const float4 x = i < gb ? __ldg(reinterpret_cast<const float4*>(q + ((long long)b * H + h0 + i) * D) + c)
                                : make_float4(0.f, 0.f, 0.f, 0.f);  // slots past the group
        Qs[i * QROW + c] = make_float4(x.x * qscale, x.y * qscale, x.z * qscale, x.w * qscale);
    }

    // This warp's online-softmax state over ITS keys, for my heads hl + LPK*i: the running max m (log2
    // units; the same in the 8 lanes of a head), my partial sum l, and my CW columns of the head's
    // unnormalised O row.
    float m[HPW], l[HPW], acc[HPW][CW], s[HPW];
#pragma unroll
    for (int i = 0; i < HPW; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.f;
        s[i] = 0.f;
#pragma unroll
        for (int e = 0; e < CW; ++e) acc[i][e] = 0.f;
    }
    const int myrow = warp * KPW + kk;  // the tile row (key) I score

    for (int t = 0; t < n_tiles; ++t) {
        cp_async_wait<NSTAGE - 2>();  // tile t has landed (for this thread's copies)
        __syncthreads();              // ... for everyone's; and everyone is done with tile t-1's stage
        if (t + NSTAGE - 1 < n_tiles) {
            float4* st = stages + ((t + NSTAGE - 1) % NSTAGE) * STAGE;
            load_kv_tile_async<D>(st, st + TK * KROW, kb, vb, start + (t + NSTAGE - 1) * TK, end, tid);
        }
        cp_async_commit();
        const float4* Ks = stages + (t % NSTAGE) * STAGE;  // [TK][KROW]
        const float4* Vs = Ks + TK * KROW;                  // [TK][D4]
        const int key = start + t * TK + myrow;             // the key this lane scores

        // BEGIN SOLUTION t6: scores of my key against my heads (-inf past the split's end)
        // PLAN: for each of my heads i < HPW (slot hl + LPK*i): s[i] = sum over c = 0 .. D/4 - 1 of
        // PLAN: Qs[(hl + LPK*i) * QROW + c] . Ks[myrow * KROW + c] (float4s, 4 FMA each; load my K float4 once per c and reuse
        // PLAN: it for every head). Four partial sums (x, y, z, w) instead of one shorten the chain of dependent FMAs.
        // PLAN: Q is pre-scaled by scale * log2(e): s comes out in log2 units. Slots >= gb hold zeros: compute them anyway.
        // PLAN: if key >= end (only on the split's last tile): s[i] = -INFINITY (its K row is zeros, not the cache's).
        {
            float sx[HPW], sy[HPW], sz[HPW], sw[HPW];
#pragma unroll
            for (int i = 0; i < HPW; ++i) sx[i] = sy[i] = sz[i] = sw[i] = 0.f;
#pragma unroll
            for (int c = 0; c < D4; ++c) {
                const float4 kf = Ks[myrow * KROW + c];
#pragma unroll
                for (int i = 0; i < HPW; ++i) {
                    const float4 qf = Qs[(hl + LPK * i) * QROW + c];
                    sx[i] = fmaf(qf.x, kf.x, sx[i]);
                    sy[i] = fmaf(qf.y, kf.y, sy[i]);
                    sz[i] = fmaf(qf.z, kf.z, sz[i]);
                    sw[i] = fmaf(qf.w, kf.w, sw[i]);
                }
            }
#pragma unroll
            for (int i = 0; i < HPW; ++i) s[i] = key < end ? (sx[i] + sy[i]) + (sz[i] + sw[i]) : -INFINITY;
        }
        // END SOLUTION

        // BEGIN SOLUTION t6: online softmax over the warp's 8 keys and O += P V, for each of my heads
        // PLAN: for i < HPW: m_new = max(m[i], max_over_keys(s[i])) (the 8 lanes of my head slot); mu = (m_new == -inf ? 0 : m_new);
        // PLAN: alpha = fast_exp2(m[i] - mu); p[i] = fast_exp2(s[i] - mu) (my key's weight); l[i] = l[i] * alpha + p[i]; m[i] = m_new;
        // PLAN: acc[i][e] *= alpha (the old O was relative to the old max).
        // PLAN: then for each of the warp's keys j = 0..7 (tile row warp*KPW + j): my CW columns of its V row are the float4s
        // PLAN: Vs[(warp*KPW + j) * D/4 + kk*CW/4 + u], u < CW/4; p of key j for my head i is on lane j*LPK + hl:
        // PLAN: pj = __shfl_sync(0xffffffff, p[i], j*LPK + hl); acc[i][e] += pj * v[e]. Every lane must take part in every shuffle.
        float p[HPW];
#pragma unroll
        for (int i = 0; i < HPW; ++i) {
            const float m_new = fmaxf(m[i], max_over_keys(s[i]));
            const float mu = m_new == -INFINITY ? 0.f : m_new;
            const float alpha = fast_exp2(m[i] - mu);
            p[i] = fast_exp2(s[i] - mu);
            l[i] = fmaf(l[i], alpha, p[i]);
            m[i] = m_new;
#pragma unroll
            for (int e = 0; e < CW; ++e) acc[i][e] *= alpha;
        }
#pragma unroll
        for (int j = 0; j < KPW; ++j) {
            const float4* vrow = Vs + (warp * KPW + j) * D4 + kk * CW4;
            float vj[CW];
#pragma unroll
            for (int u = 0; u < CW4; ++u) {
                const float4 f = vrow[u];
                vj[4 * u] = f.x; vj[4 * u + 1] = f.y; vj[4 * u + 2] = f.z; vj[4 * u + 3] = f.w;
            }
#pragma unroll
            for (int i = 0; i < HPW; ++i) {
                const float pj = __shfl_sync(0xffffffffu, p[i], j * LPK + hl);
#pragma unroll
                for (int e = 0; e < CW; ++e) acc[i][e] = fmaf(pj, vj[e], acc[i][e]);
            }
        }
        // END SOLUTION
    }

    // The four warps' states of each head meet in shared memory: once every copy has landed and every
    // warp is past its last tile, the stages are free.
    cp_async_wait<0>();
    __syncthreads();
    float* mo = reinterpret_cast<float*>(stages);  // [NWARPS][GB][D]  each warp's unnormalised O rows
    float* mm = mo + NWARPS * GB * D;             // [NWARPS][GB]     their running maxes (log2 units)
    float* ml = mm + NWARPS * GB;                 // [NWARPS][GB]     their sums

    // BEGIN SOLUTION t6: publish my warp's state: its O rows, m and l for each of my heads
    // PLAN: for i < HPW (head slot g = hl + LPK*i): lt = sum_over_keys(l[i]) (the 8 lanes' partial sums; all lanes take part);
    // PLAN: my CW columns of acc[i] go to mo[(warp * GB + g) * D + kk*CW + e] (float4 stores);
    // PLAN: the lane with kk == 0 writes mm[warp * GB + g] = m[i] and ml[warp * GB + g] = lt.
#pragma unroll
    for (int i = 0; i < HPW; ++i) {
        const float lt = sum_over_keys(l[i]);
        const int g = hl + LPK * i;
        float4* dst = reinterpret_cast<float4*>(mo + (warp * GB + g) * D + kk * CW);
#pragma unroll
        for (int u = 0; u < CW4; ++u)
            dst[u] = make_float4(acc[i][4 * u], acc[i][4 * u + 1], acc[i][4 * u + 2], acc[i][4 * u + 3]);
        if (kk == 0) {
            mm[warp * GB + g] = m[i];
            ml[warp * GB + g] = lt;
        }
    }
    // END SOLUTION
    __syncthreads();

    // BEGIN SOLUTION t6: merge the warps and write this split's partial O (normalised) and LSE (log2 units)
    // PLAN: the block's threads share the gb * D/4 (head g, float4 column c4) outputs: for each, M = max over warps w of mm[w*GB + g],
    // PLAN: Ms = (M == -inf ? 0 : M), f_w = fast_exp2(mm[w*GB + g] - Ms), W = sum_w f_w * ml[w*GB + g], o = sum_w f_w * (float4 c4 of
    // PLAN: mo row (w*GB + g)), warps in order 0..3 (bitwise repeatable). The head's partial row is r = (b * H + h0 + g) * n_splits + split:
    // PLAN: O at o_part + r * D gets o / W (zeros when W == 0); the c4 == 0 thread writes lse_part[r] = M + log2f(W), or -INFINITY
    // PLAN: when W == 0 (an empty split: weight 0 in the combine).
    for (int idx = tid; idx < gb * D4; idx += NT) {
        const int g = idx / D4, c4 = idx % D4;
        float M = mm[g];
#pragma unroll
        for (int w = 1; w < NWARPS; ++w) M = fmaxf(M, mm[w * GB + g]);
        const float Ms = M == -INFINITY ? 0.f : M;
        float W = 0.f;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < NWARPS; ++w) {
            const float f = fast_exp2(mm[w * GB + g] - Ms);
            const float4 x = reinterpret_cast<const float4*>(mo + (w * GB + g) * D)[c4];
            W = fmaf(f, ml[w * GB + g], W);
            o.x = fmaf(f, x.x, o.x); o.y = fmaf(f, x.y, o.y); o.z = fmaf(f, x.z, o.z); o.w = fmaf(f, x.w, o.w);
        }
        const float inv = W > 0.f ? 1.f / W : 0.f;
        const long long r = ((long long)b * H + h0 + g) * n_splits + split;
        reinterpret_cast<float4*>(o_part + r * D)[c4] = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
        if (c4 == 0) lse_part[r] = W > 0.f ? M + log2f(W) : -INFINITY;
    }
    // END SOLUTION
    // END OPEN
}

// Merge the n_splits partial results of one (b, h) row; grid: B * H blocks of COMBINE_THREADS.
// Thread (r, c4) owns float4 column c4 of the row and the splits r, r + R, r + 2R, ...; it merges
// them into a running (max, weight sum, weighted O) exactly as the split kernel merges tiles, so all
// its loads are independent and in flight at once. Then the R partial states are merged once more.
template <int D>
__global__ void __launch_bounds__(COMBINE_THREADS)
decode_combine_kernel(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                      float* __restrict__ out, float* __restrict__ lse, int n_splits) {
    constexpr int D4 = D / 4, R = COMBINE_THREADS / D4;  // R partial rows read at once (4, 8, 16)
    __shared__ float4 red_o[R][D4];
    __shared__ float red_m[R], red_w[R];
    const long long bh = blockIdx.x;
    const float* lp = lse_part + bh * n_splits;                                    // [n_splits], log2 units
    const float4* op = reinterpret_cast<const float4*>(o_part + bh * n_splits * D);  // [n_splits][D4]
    float4* orow = reinterpret_cast<float4*>(out + bh * D);
    const int tid = threadIdx.x;
    const int c4 = tid % D4, r = tid / D4;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");  // the split grid is done and its writes visible
#endif

    // BEGIN SOLUTION t6: combine the splits with LSE weights: O = sum w_s O_s / sum w_s, LSE = M + log2(sum w_s)
    // PLAN: my splits s = r, r + R, ... (R = COMBINE_THREADS / (D/4)): keep a running max mloc, weight sum ws and a = sum w O
    // PLAN: (float4 column c4): m_new = max(mloc, lp[s]); mu = (m_new == -inf ? 0 : m_new); alpha = fast_exp2(mloc - mu);
    // PLAN: w = fast_exp2(lp[s] - mu) (0 for an empty split, whose O row is zeros); ws = ws * alpha + w; a = a * alpha + w * op[s * D/4 + c4].
    // PLAN: publish red_m[r], red_w[r] (thread c4 == 0) and red_o[r][c4], __syncthreads(); then threads r == 0 merge the R
    // PLAN: states in a fixed order (bitwise repeatable): M = max red_m, f = fast_exp2(red_m[rr] - Ms) with Ms = (M == -inf ? 0 : M),
    // PLAN: W = sum f * red_w[rr], o = sum f * red_o[rr][c4]; orow[c4] = o / W (zeros when W == 0);
    // PLAN: thread 0 writes lse[bh] = (M + log2f(W)) * ln(2) (natural log), or -INFINITY when W == 0 (a row of length 0).
    float mloc = -INFINITY, ws = 0.f;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int s = r; s < n_splits; s += R) {
        const float ls = lp[s];
        const float4 o = op[(long long)s * D4 + c4];
        const float m_new = fmaxf(mloc, ls);
        const float mu = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = fast_exp2(mloc - mu), w = fast_exp2(ls - mu);
        ws = fmaf(ws, alpha, w);
        a.x = fmaf(w, o.x, a.x * alpha); a.y = fmaf(w, o.y, a.y * alpha);
        a.z = fmaf(w, o.z, a.z * alpha); a.w = fmaf(w, o.w, a.w * alpha);
        mloc = m_new;
    }
    red_o[r][c4] = a;
    if (c4 == 0) {
        red_m[r] = mloc;
        red_w[r] = ws;
    }
    __syncthreads();
    if (r == 0) {
        float M = red_m[0];
#pragma unroll
        for (int rr = 1; rr < R; ++rr) M = fmaxf(M, red_m[rr]);
        const float Ms = M == -INFINITY ? 0.f : M;
        float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
        float W = 0.f;
#pragma unroll
        for (int rr = 0; rr < R; ++rr) {
            const float f = fast_exp2(red_m[rr] - Ms);
            const float4 o = red_o[rr][c4];
            t.x = fmaf(f, o.x, t.x); t.y = fmaf(f, o.y, t.y); t.z = fmaf(f, o.z, t.z); t.w = fmaf(f, o.w, t.w);
            W = fmaf(f, red_w[rr], W);
        }
        const float inv = W > 0.f ? 1.f / W : 0.f;
        orow[c4] = make_float4(t.x * inv, t.y * inv, t.z * inv, t.w * inv);
        if (c4 == 0) lse[bh] = W > 0.f ? (M + log2f(W)) * kLn2 : -INFINITY;
    }
    // END SOLUTION
}

// --------------------------------------------------------------------------- host (the kit's)
// It runs in the host library, built from the kit's own copy of this file, and every kernel it launches
// comes from the device module built from yours (kit.cuh: kit::launch).

// Query heads per head slot (HPW: a lane serves that many) for a group of G query heads (a block takes at
// most MAX_GROUP = 4 slots x 4 of them).
static int heads_per_slot(int G) {
    const int gb = G < MAX_GROUP ? G : MAX_GROUP;
    return gb <= LPK ? 1 : gb <= 2 * LPK ? 2 : 4;
}

// Allow the split kernel its shared memory, once per device and module (kit::memo: a launch inside
// CUDA-graph capture then makes no call but the two launches), and report its resident blocks per SM
// when asked.
template <int D, int HPW>
static cudaError_t configure(int* blocks_per_sm) {
    auto kern = decode_split_kernel<D, HPW>;
    const int smem = (int)split_smem_bytes<D, HPW>();
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    const int set = kit::memo(reinterpret_cast<const void*>(kern), dev, [&] {
        cudaError_t a = kit::set_attribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (a == cudaSuccess) a = kit::set_attribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
        return -(int)a;  // 0 when both were set (remembered); a negative error is asked again next time
    });
    if (set < 0) return (cudaError_t)-set;
    if (blocks_per_sm) return kit::occupancy(blocks_per_sm, kern, NT, smem);
    return cudaSuccess;
}

template <int D>
static cudaError_t configure_d(int hpw, int* blocks_per_sm) {
    return hpw == 1 ? configure<D, 1>(blocks_per_sm) : hpw == 2 ? configure<D, 2>(blocks_per_sm)
                                                                : configure<D, 4>(blocks_per_sm);
}

static cudaError_t configure_any(int d, int hpw, int* blocks_per_sm) {
    return d == 32 ? configure_d<32>(hpw, blocks_per_sm) : d == 64 ? configure_d<64>(hpw, blocks_per_sm)
                                                                   : configure_d<128>(hpw, blocks_per_sm);
}

// The split count: blocks run in waves of (SMs x resident blocks per SM); a wave lasts as long as
// its blocks' tiles (ceil(tiles / n)) plus a fixed per-block cost. Minimise waves x that over n,
// the smallest n on ties (fewer partial results to combine). With B * H_kv * chunks (b, KV head)
// streams this gives about one full wave: B 1, H_kv 8 on 132 SMs -> 32 splits at d = 128
// (2 blocks per SM), 64 at d = 64 (4 per SM). Chosen from the cache's capacity L_max: the split
// SIZE follows the current length on the device, so the same grid serves every length.
static int choose_splits(long long streams, int L_max, int sms, int blocks_per_sm) {
    const long long tiles = ((long long)(L_max > 0 ? L_max : 1) + TK - 1) / TK;
    const long long per_wave = (long long)sms * (blocks_per_sm > 0 ? blocks_per_sm : 1);
    const long long most = tiles < MAX_SPLITS ? tiles : MAX_SPLITS;
    int best = 1;
    double best_cost = INFINITY;
    for (long long n = 1; n <= most; ++n) {
        const long long waves = (streams * n + per_wave - 1) / per_wave;
        const double cost = (double)waves * ((double)((tiles + n - 1) / n) + BLOCK_OVERHEAD_TILES);
        if (cost < best_cost - 1e-9) {
            best_cost = cost;
            best = (int)n;
        }
    }
    return best;
}

// Programmatic dependent launch of the combine: on sm_90 and later, unless KIT_T6_PDL=0 (A/B timing)
// or the device refused one before (then the plain launch, which is always correct, takes over).
// Remembered per device and module (kit::memo): 1 no, 2 yes.
constexpr int MAX_DEVICES = 64;
static std::atomic<bool> pdl_refused[MAX_DEVICES];

static bool use_pdl(int* device) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEVICES) {
        cudaGetLastError();
        return false;
    }
    *device = dev;
    if (pdl_refused[dev].load()) return false;
    const int state = kit::memo(reinterpret_cast<const void*>(&use_pdl), dev, [dev] {
        int major = 0;
        const char* env = getenv("KIT_T6_PDL");
        const bool off = env != nullptr && env[0] == '0';
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            cudaGetLastError();
            major = 0;
        }
        return !off && major >= 9 ? 2 : 1;
    });
    return state == 2;
}

template <int D>
static cudaError_t launch_combine(const float* o_part, const float* lse_part, float* out, float* lse, int n_splits,
                                  long long rows, cudaStream_t stream) {
    int dev = -1;
    if (use_pdl(&dev)) {
        cudaLaunchConfig_t config = {};
        cudaLaunchAttribute attribute[1];
        attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute[0].val.programmaticStreamSerializationAllowed = 1;
        config.gridDim = dim3((unsigned)rows);
        config.blockDim = dim3(COMBINE_THREADS);
        config.dynamicSmemBytes = 0;
        config.stream = stream;
        config.attrs = attribute;
        config.numAttrs = 1;
        if (kit::launch_ex(config, decode_combine_kernel<D>, o_part, lse_part, out, lse, n_splits) == cudaSuccess)
            return cudaSuccess;
        cudaGetLastError();  // refused at launch (nothing ran): never ask again on this device
        pdl_refused[dev].store(true);
    }
    return kit::launch(decode_combine_kernel<D>, (unsigned)rows, COMBINE_THREADS, 0, stream, o_part, lse_part, out, lse,
                       n_splits);
}

template <int D, int HPW>
static int launch(const float* q, const float* k, const float* v, const void* lengths, int len64, int per_batch,
                  float* out, float* lse, float* ws, int B, int H, int H_kv, int L_max, int n_splits, float scale,
                  cudaStream_t stream) {
    cudaError_t e = configure<D, HPW>(nullptr);
    if (e != cudaSuccess) return (int)e;
    const int G = H / H_kv;
    const int chunks = (G + LPK * HPW - 1) / (LPK * HPW);
    float* o_part = ws;                                        // [B][H][n_splits][D]
    float* lse_part = ws + (long long)B * H * n_splits * D;    // [B][H][n_splits], log2 units
    const dim3 grid(n_splits, H_kv * chunks, B);
    e = kit::launch(decode_split_kernel<D, HPW>, grid, NT, split_smem_bytes<D, HPW>(), stream, q, k, v, lengths,
                    len64, per_batch, o_part, lse_part, H, H_kv, L_max, n_splits, chunks, scale * kLog2e);
    if (e != cudaSuccess) return (int)e;
    return (int)launch_combine<D>(o_part, lse_part, out, lse, n_splits, (long long)B * H, stream);
}

template <int D>
static int launch_d(int hpw, const float* q, const float* k, const float* v, const void* lengths, int len64,
                    int per_batch, float* out, float* lse, float* ws, int B, int H, int H_kv, int L_max,
                    int n_splits, float scale, cudaStream_t s) {
    if (hpw == 1) return launch<D, 1>(q, k, v, lengths, len64, per_batch, out, lse, ws, B, H, H_kv, L_max, n_splits, scale, s);
    if (hpw == 2) return launch<D, 2>(q, k, v, lengths, len64, per_batch, out, lse, ws, B, H, H_kv, L_max, n_splits, scale, s);
    return launch<D, 4>(q, k, v, lengths, len64, per_batch, out, lse, ws, B, H, H_kv, L_max, n_splits, scale, s);
}

static bool valid_shape(int B, int H, int H_kv, int L_max, int d) {
    if (B <= 0 || H <= 0 || H_kv <= 0 || L_max < 0 || H % H_kv != 0) return false;
    if (d != 32 && d != 64 && d != 128) return false;
    const int G = H / H_kv;
    const long long chunks = (G + MAX_GROUP - 1) / MAX_GROUP;
    return B <= 65535 && (long long)H_kv * chunks <= 65535;
}

}  // namespace t6dec

// q (B, H, d); k_cache, v_cache (B, H_kv, L_max, d) with H % H_kv == 0 (query head h reads KV head
// h / (H / H_kv)); out (B, H, d); lse (B, H), natural log. All contiguous fp32, q, the caches, out
// and workspace 16-byte aligned. lengths: int32 (lengths_int64 == 0) or int64 on the device, one
// per batch row (lengths_per_batch != 0) or one for all rows; clamped to [0, L_max]; a row of
// length 0 gets O = 0 and LSE = -inf. workspace: t6_decode_workspace_floats(B, H, d, n_splits)
// floats, no initialisation needed. Two kernel launches on `stream`, nothing allocated, no host
// synchronisation: safe to capture in a CUDA graph.
KIT_API int t6_decode_attention(void* module, const float* q, const float* k_cache, const float* v_cache,
                                const void* lengths, int lengths_int64, int lengths_per_batch, float* out, float* lse,
                                float* workspace, int B, int H, int H_kv, int L_max, int d, int n_splits, float scale,
                                void* stream) {
    kit::UseModule use(module);
    if (B == 0 || H == 0) return 0;
    if (!t6dec::valid_shape(B, H, H_kv, L_max, d)) return (int)cudaErrorInvalidValue;
    if (n_splits < 1 || n_splits > t6dec::MAX_SPLITS || lengths == nullptr) return (int)cudaErrorInvalidValue;
    if (((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k_cache) | reinterpret_cast<uintptr_t>(v_cache) |
          reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(workspace)) & 15) != 0)
        return (int)cudaErrorMisalignedAddress;
    const long long parts = (long long)B * H * n_splits;
    if ((long long)B * H > 2147483647LL || parts * d > (1LL << 62)) return (int)cudaErrorInvalidValue;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int hpw = t6dec::heads_per_slot(H / H_kv);
    const int len64 = lengths_int64 ? 1 : 0, per_batch = lengths_per_batch ? 1 : 0;
    switch (d) {
        case 32:
            return t6dec::launch_d<32>(hpw, q, k_cache, v_cache, lengths, len64, per_batch, out, lse, workspace, B, H,
                                       H_kv, L_max, n_splits, scale, s);
        case 64:
            return t6dec::launch_d<64>(hpw, q, k_cache, v_cache, lengths, len64, per_batch, out, lse, workspace, B, H,
                                       H_kv, L_max, n_splits, scale, s);
        default:
            return t6dec::launch_d<128>(hpw, q, k_cache, v_cache, lengths, len64, per_batch, out, lse, workspace, B,
                                        H, H_kv, L_max, n_splits, scale, s);
    }
}

// The split count the kit uses for this shape on the current device (>= 1), or -cudaError_t when
// the shape is invalid (-1) or a device query fails.
KIT_API int t6_decode_num_splits(void* module, int B, int H, int H_kv, int L_max, int d) {
    kit::UseModule use(module);
    if (!t6dec::valid_shape(B, H, H_kv, L_max, d)) return -(int)cudaErrorInvalidValue;
    int dev = 0, sms = 0, per_sm = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const int hpw = t6dec::heads_per_slot(H / H_kv);
    if (e == cudaSuccess) e = t6dec::configure_any(d, hpw, &per_sm);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return -(int)e;
    }
    const int G = H / H_kv;
    const long long chunks = (G + t6dec::LPK * hpw - 1) / (t6dec::LPK * hpw);
    return t6dec::choose_splits((long long)B * H_kv * chunks, L_max, sms, per_sm);
}

// Floats of workspace a call with n_splits splits needs: each split's partial O row (d floats) and
// LSE for every (batch, query head).
KIT_API long long t6_decode_workspace_floats(int B, int H, int d, int n_splits) {
    if (B < 0 || H < 0 || d <= 0 || n_splits <= 0) return -1;
    return (long long)B * H * n_splits * (d + 1);
}

// Limits the wrapper checks against: the largest split count and group size per block.
KIT_API int t6_decode_max_splits() { return t6dec::MAX_SPLITS; }

#include "kit_sanitize.cuh"  // the scenario's buffers and checks (host code)

// compute-sanitizer's launches (make sanitize, the grader; TaskCode.sanitize names this function): every
// head-per-warp configuration and d, group chunks, empty splits, per-row / broadcast / int32 / int64 lengths.
// The cache holds L_max positions; lengths are at most L_max; n_splits 0 takes the kit's choice
// (t6_decode_num_splits). Everything, the workspace included, is allocated to its exact size. Returns the
// number of failed launches.
KIT_API int t6_sanitize(void* module, int /*variant*/) {
    auto run = [&](int B, int H, int H_kv, int L_max, int d, std::vector<long long> lengths, bool int64,
                   int n_splits) {
        using kit::sanitize::Buffer;
        const int n = n_splits > 0 ? n_splits : t6_decode_num_splits(module, B, H, H_kv, L_max, d);
        if (n <= 0) return std::fprintf(stderr, "t6_decode_num_splits returned %d\n", n), 1;
        Buffer q((size_t)B * H * d, 11), k((size_t)B * H_kv * L_max * d, 12), v((size_t)B * H_kv * L_max * d, 13);
        Buffer o((size_t)B * H * d, 14), lse((size_t)B * H, 15);
        Buffer ws((size_t)t6_decode_workspace_floats(B, H, d, n), 16);
        const std::vector<int> narrow(lengths.begin(), lengths.end());
        const kit::sanitize::DeviceCopy len(int64 ? (const void*)lengths.data() : (const void*)narrow.data(),
                                            lengths.size() * (int64 ? sizeof(long long) : sizeof(int)));
        char what[128];
        std::snprintf(what, sizeof what, "t6 B %d H %d H_kv %d L_max %d d %d lengths[0] %lld (%zu, %s) splits %d", B,
                      H, H_kv, L_max, d, lengths[0], lengths.size(), int64 ? "int64" : "int32", n);
        return kit::sanitize::check(what, t6_decode_attention(module, q.ptr, k.ptr, v.ptr, len.ptr, int64 ? 1 : 0,
                                                              lengths.size() > 1 ? 1 : 0, o.ptr, lse.ptr, ws.ptr, B, H,
                                                              H_kv, L_max, d, n, 0.125f, nullptr));
    };
    int failures = 0;
    for (int d : {32, 64, 128}) {
        failures += run(2, 8, 2, 300, d, {300, 1}, false, 0);     // groups of 4, a full cache
        failures += run(1, 4, 4, 100, d, {37}, false, 7);         // multi-head, empty splits
        failures += run(3, 12, 2, 64, d, {64, 0, 33}, true, 0);   // groups of 6, a row of length 0
        failures += run(1, 32, 1, 129, d, {129}, false, 3);       // 32 heads per KV head: two blocks
        failures += run(2, 8, 8, 70, d, {65}, true, 0);           // one int64 length for both rows
    }
    return failures;
}
