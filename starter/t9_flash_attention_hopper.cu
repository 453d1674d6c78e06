// t9: FlashAttention-3 forward on Hopper (sm_90a), fp16 or bf16 in and out, fp32 accumulation.
//
// t8's algorithm (one query tile per block, one pass over K and V, online softmax, O and LSE out) on the machinery
// only Hopper has:
//   * TMA: one thread asks the copy engine for a whole K or V tile; it lands in shared memory already swizzled
//     and tells an mbarrier when its bytes are in. No thread computes an address or waits on a copy.
//   * wgmma: a warpgroup (4 warps, 128 threads) multiplies a 64-row tile in one asynchronous instruction stream,
//     B (and here A for S = Q K^T) read straight from shared memory; the accumulators stay in registers.
//   * warp specialisation: warpgroup 0 is the producer (one thread issues every copy; the warpgroup gives its
//     registers back with setmaxnreg), the NCWG consumer warpgroups own 64 query rows each and do the math.
//   * ping-pong: the consumers take turns at the tensor cores (named barriers pass the turn), so that one
//     warpgroup's softmax runs while the other's products do.
//   * overlap inside a warpgroup: the products of tile j (S_j = Q K_j^T) and of tile j - 1 (O += P_{j-1} V_{j-1})
//     are issued together, and the softmax of S_j runs while P_{j-1} V_{j-1} is still on the tensor cores.
//
// The wrappers (mbarrier, TMA, wgmma, descriptors, setmaxnreg) are the kit's: kit_hopper.cuh.
//
// ---------------------------------------------------------------------------
// Shared memory (every tile 1024-aligned, 128-byte swizzle, rows of 64 elements; d = 128 is two column blocks):
//   Q     [BM rows] x d                  one per work tile: q_full (landed), q_empty (every consumer warp is done)
//   K[s]  [BN rows] x d, STAGES stages   k_full[s]: the copy landed; k_empty[s]: every consumer warp is done with it
//   V[s]  [BN rows] x d, STAGES stages   v_full[s], v_empty[s] likewise
// The producer walks the key tiles in the consumers' order and waits for a stage to be empty before refilling it.
//
// The launch: work tiles (one query tile of one head each) in an order that keeps L2 busy with the K and V of a few
// heads at a time (the longest causal tiles first); at d 128 one persistent block per SM takes work tile after work
// tile (a q_empty mbarrier tells the producer when the next Q may come), at d 64 one block per work tile.
//
// The key tiles are visited from the last to the first: the only tiles that need the element mask (the end of the
// keys, the causal diagonal) come first, and every later tile runs the unmasked path.
//
// One consumer warpgroup, per key tile (OVERLAP):
//     wait K_j        issue S_j = Q K_j^T (d / 16 wgmma, A and B from shared memory)
//     wait V_{j+1}    issue O += P_{j+1} V_{j+1} (BN / 16 wgmma, P from registers)     (tiles run backwards)
//     wait S_j        release K_j; softmax of S_j (row max, exp2, row sums) while the P V product runs
//     wait P V        release V_{j+1}; rescale O by exp2(m_old - m_new); pack P_j for the next product
//
// Register fragments (kit_hopper.cuh): warp w of a consumer owns rows 16w .. 16w + 15 of its 64; lane 4g + t holds
// rows g and g + 8, columns 8n + 2t and 8n + 2t + 1 of every n-block n. A row's max and sum are 2 shuffles.
//
// The exponentials: exp(scale (s - m)) = exp2(s * scale log2 e - m * scale log2 e): one FFMA and one ex2 per score.
// Causal (bottom-right): query i sees keys j <= i + Lk - Lq; key tiles past a query tile's last visible key are
// never loaded; a row that sees no key gets O = 0 and LSE = -inf. Grouped-query heads: query head h reads KV head
// h / (H / H_kv) (the K and V maps are over the B * H_kv heads).

#define KIT_TENSOR_CORES  // kit.cuh's packing helpers (pack_f32x2)
#include "kit.cuh"
#include "kit_hopper.cuh"

namespace t9fa {

constexpr float kNegInf = -__builtin_huge_valf();

// The tile configuration per head dimension: consumer warpgroups (64 query rows each), keys per tile, stages of
// K and V, and the two schedules (each can be switched off: the ablation the handout measures).
template <int D>
struct Cfg;
// L2_MB: the K and V of the heads whose blocks run together should fit in about this much of L2 (the launch groups
// the heads accordingly; 50 MB on an H100, 60 on an H200, shared with the streaming Q and O). PERSISTENT: one block
// per SM that takes work tile after work tile (its next Q and K load while it stores this tile's O), or one block
// per work tile, which the hardware hands to whichever SM frees first. Measured on an H200: persistent blocks from
// 6% slower to 8% faster at d 128 (by shape), 8-16% slower at d 64 causal (192-row tiles of unequal length, dealt
// round-robin, leave SMs idle at the end).
template <>
struct Cfg<64> {
    static constexpr int NCWG = 3, BN = 128, STAGES = 4, CONSUMER_REGS = 160, PRODUCER_REGS = 24, L2_MB = 24;
    static constexpr bool PINGPONG = true, OVERLAP = true, PERSISTENT = false;
};
template <>
struct Cfg<128> {
    static constexpr int NCWG = 2, BN = 128, STAGES = 2, CONSUMER_REGS = 240, PRODUCER_REGS = 24, L2_MB = 24;
    static constexpr bool PINGPONG = true, OVERLAP = true, PERSISTENT = true;
};

template <int D>
struct Layout {
    using C = Cfg<D>;
    static constexpr int BM = 64 * C::NCWG;
    static constexpr int Q_ELEMS = BM * D, KV_ELEMS = C::BN * D;
    static constexpr int BYTES = 2 * (Q_ELEMS + 2 * C::STAGES * KV_ELEMS) + 1024;  // + the alignment slack
    static constexpr int THREADS = 128 * (C::NCWG + 1);
};

struct Barriers {
    uint64_t q_full, q_empty;
    uint64_t k_full[4], k_empty[4], v_full[4], v_empty[4];
};

// How many key tiles a query tile of rows m0 .. m0 + BM - 1 reads (causal: up to its last row's last visible key).
template <int BM, int BN, bool CAUSAL>
__device__ __forceinline__ int key_tiles(int m0, int Lq, int Lk) {
    int n = (Lk + BN - 1) / BN;
    if (CAUSAL) {
        // TODO(t9): causal tile skipping: stop after the last key tile any row of this query tile sees
        // PLAN: the tile's last row, min(m0 + BM, Lq) - 1, sees keys up to last = that row + Lk - Lq.
        // PLAN: n = min(n, last / BN + 1); n = 0 if last < 0 (no row of the tile sees a key).
        KIT_TODO(t9);
        // END TODO(t9)
    }
    return n;
}

// The element mask on a tile of S: keys past the end, and (causal) keys right of each row's diagonal.
template <int BN, bool CAUSAL>
__device__ __forceinline__ void mask_tile(float (&s)[BN / 2], int key0, int row, int Lq, int Lk, int t) {
    // TODO(t9): the mask: -inf where a key is past Lk or (causal) right of the row's diagonal
    // PLAN: this lane holds rows row (r = 0) and row + 8 (r = 1); s[4n + 2r + e] is key key0 + 8n + 2t + e.
    // PLAN: A row i sees keys j <= Lk - 1, and (causal) j <= i + Lk - Lq; set every other score to kNegInf.
    KIT_TODO(t9);
    // END TODO(t9)
}

// The online softmax of one tile for the two rows a lane holds: new maxima, s overwritten with exp2 of the scaled
// scores, the running (per-lane) sums updated; alpha: what O must be multiplied by for the new maxima.
template <int BN>
__device__ __forceinline__ void softmax_tile(float (&s)[BN / 2], float (&row_max)[2], float (&row_sum)[2],
                                             float (&alpha)[2], float scale_log2) {
    // TODO(t9): online softmax of one tile for the lane's two rows (r = 0: row g, r = 1: row g + 8)
    // PLAN: the row's new max: over s[4n + 2r], s[4n + 2r + 1] (every n-block n), then over the 4 lanes of the quad
    // PLAN: (__shfl_xor_sync with 1 and 2), and the old row_max[r]. A row still at kNegInf subtracts 0 instead.
    // PLAN: alpha[r] = exp2((old max - new max) * scale_log2): what O must be multiplied by (the caller does it).
    // PLAN: Each score becomes p = exp2(s * scale_log2 - max * scale_log2) (kit::fast_exp2, one fmaf), in place;
    // PLAN: row_sum[r] = row_sum[r] * alpha[r] + this lane's sum of its p (the quad is summed once, at the end).
    KIT_TODO(t9);
    // END TODO(t9)
}

template <int D>
__device__ __forceinline__ void rescale(float (&o)[D / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
        o[4 * n] *= alpha[0];
        o[4 * n + 1] *= alpha[0];
        o[4 * n + 2] *= alpha[1];
        o[4 * n + 3] *= alpha[1];
    }
}

// P (fp32 in s, after softmax_tile) packed as the A operand of O += P V: 16 keys per k step, 4 registers each.
template <class T, int BN>
__device__ __forceinline__ void pack_p(uint32_t (&p)[BN / 16][4], const float (&s)[BN / 2]) {
    // TODO(t9): pack P as wgmma's A operand: keys 16k .. 16k + 15 in p[k][0..3]
    // PLAN: the A operand of a k16 step is mma.sync's A fragment of the warp's 16 rows (kit_hopper.cuh): n-blocks
    // PLAN: 2k and 2k + 1 of S, each pair of neighbouring values packed into one register (kit::pack_f32x2<T>):
    // PLAN: p[k][0] = row g of n-block 2k, p[k][1] = row g + 8 of n-block 2k, p[k][2], p[k][3] the same of 2k + 1.
    KIT_TODO(t9);
    // END TODO(t9)
}

// S = Q K^T for one consumer warpgroup: d / 16 k steps, both operands K-major in shared memory.
template <class T, int D, int BM, int BN>
__device__ __forceinline__ void issue_qk(float (&s)[BN / 2], uint32_t q_tile, uint32_t k_tile) {
    // TODO(t9): S = Q K^T as D / 16 wgmma k16 steps, Q (A) and K (B) K-major in shared memory
    // PLAN: step k reads columns 16k .. 16k + 15 of d: column block k / 4 (64 columns; a block is the tile's rows x
    // PLAN: 128 bytes: BM * 128 for Q, BN * 128 for K), 32 bytes further per step inside it (the swizzle is applied by
    // PLAN: the hardware). kit::wgmma_ss<BN, T>(s, descriptor of Q, descriptor of K, accumulate): accumulate 0 on the
    // PLAN: first step (S = Q K^T afresh), 1 after. The caller fences, commits and waits.
    KIT_TODO(t9);
    // END TODO(t9)
}

// O += P V: BN / 16 k steps (16 keys each), P from registers, V MN-major in shared memory.
template <class T, int D, int BN>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const uint32_t (&p)[BN / 16][4], uint32_t v_tile) {
    // TODO(t9): O += P V as BN / 16 wgmma k16 steps, P (A) from registers, V (B) MN-major in shared memory
    // PLAN: step k multiplies keys 16k .. 16k + 15: p[k], and V's rows 16k .. (16 rows of 128 bytes further per step
    // PLAN: in the first column block; kit::wgmma_descriptor_mn_major takes the distance between column blocks,
    // PLAN: BN * 128). kit::wgmma_rs<D, T>(o, p[k], descriptor, 1): O accumulates across tiles.
    KIT_TODO(t9);
    // END TODO(t9)
}

// O += P V alone, waited for: its V stage's wait, the product, the wait for it (the schedule without the overlap,
// and the last tile's). The caller releases the stage.
template <class T, int D, int BN>
__device__ __forceinline__ void pv_and_wait(float (&o)[D / 2], uint32_t (&p)[BN / 16][4], uint32_t v_tile,
                                            uint64_t* v_full, uint32_t parity) {
    kit::mbarrier_wait(v_full, parity);
    kit::wgmma_fence();
    issue_pv<T, D, BN>(o, p, v_tile);
    kit::wgmma_commit();
    kit::wgmma_hold(o);
    kit::wgmma_hold(p);
    kit::wgmma_wait<0>();
    kit::wgmma_hold(o);
}

template <class T, int D, bool CAUSAL>
__global__ void __launch_bounds__(Layout<D>::THREADS, 1)
    flash_fwd_hopper_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                            const __grid_constant__ CUtensorMap v_map, T* __restrict__ o, float* __restrict__ lse,
                            int H, int H_kv, int Lq, int Lk, float scale_log2, int heads_per_group, int BH) {
#ifdef KIT_HOPPER_DEVICE
    using C = Cfg<D>;
    using L = Layout<D>;
    constexpr int BM = L::BM, BN = C::BN, STAGES = C::STAGES, NCWG = C::NCWG;
    extern __shared__ uint8_t smem_raw[];
    __shared__ Barriers bars;
    T* sQ = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
    T* sK = sQ + L::Q_ELEMS;
    T* sV = sK + STAGES * L::KV_ELEMS;

    // The block is persistent: it takes work tiles (one query tile of one head each) blockIdx.x, + gridDim.x, ...
    // while the producer already loads the next tile's Q and K as the consumers finish this one's. Work tile w: the
    // heads go in groups whose K and V fit in L2 together (heads_per_group, from the host), and inside a group the
    // tiles run query tile by query tile across its heads, so that the blocks at work at one time share their K and
    // V through L2 instead of each streaming its own from memory. Causal: the longest query tiles first.
    const int m_blocks = (Lq + BM - 1) / BM;
    const int work_tiles = BH * m_blocks;
    const int per_group = heads_per_group * m_blocks;
    auto locate = [&](int w, int& bh, int& m0) {
        const int group = w / per_group, in_group = w % per_group;
        const int heads_here = min(heads_per_group, BH - group * heads_per_group);
        const int m_index = in_group / heads_here;
        bh = group * heads_per_group + in_group % heads_here;
        m0 = (CAUSAL ? m_blocks - 1 - m_index : m_index) * BM;
    };

    if (threadIdx.x == 0) {
        kit::mbarrier_init(&bars.q_full, 1);
        kit::mbarrier_init(&bars.q_empty, 4 * NCWG);  // one arrival per consumer warp, once it has read Q for good
        for (int s = 0; s < STAGES; ++s) {
            kit::mbarrier_init(&bars.k_full[s], 1);
            kit::mbarrier_init(&bars.v_full[s], 1);
            kit::mbarrier_init(&bars.k_empty[s], 4 * NCWG);  // one arrival per consumer warp
            kit::mbarrier_init(&bars.v_empty[s], 4 * NCWG);
        }
        kit::fence_barrier_init();
    }
    __syncthreads();

    // The role, read through a shuffle so that the compiler knows it is the same in every lane of a warp: wgmma in a
    // branch it cannot prove uniform is serialised (ptxas warning C7520).
    const int warpgroup = __shfl_sync(0xffffffff, (int)threadIdx.x / 128, 0);
    if (warpgroup == 0) {  // ------------------------------------------------------------------ the producer
        kit::warpgroup_registers_dec<C::PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            kit::tma_prefetch_map(&q_map);
            kit::tma_prefetch_map(&k_map);
            kit::tma_prefetch_map(&v_map);
            int done = 0, rounds = 0;  // key tiles and query tiles this block has loaded so far
            for (int w = blockIdx.x; w < work_tiles; w += gridDim.x) {
                int bh, m0;
                locate(w, bh, m0);
                const int bh_kv = (bh / H) * H_kv + (bh % H) / (H / H_kv);
                const int n_tiles = key_tiles<BM, BN, CAUSAL>(m0, Lq, Lk);
                if (n_tiles == 0) continue;  // no row sees a key: nothing to load
                kit::mbarrier_wait(&bars.q_empty, (rounds & 1) ^ 1);  // the consumers are done with the last Q
                kit::mbarrier_arrive_expect_tx(&bars.q_full, L::Q_ELEMS * 2);
                for (int c = 0; c < D / 64; ++c)
                    kit::tma_load_3d(sQ + c * BM * 64, &q_map, &bars.q_full, c * 64, m0, bh);
                for (int it = 0; it < n_tiles; ++it) {
                    // TODO(t9): the producer's schedule: key tile j into the stage of the block's k-th, K then V
                    // PLAN: the consumers read this query tile's key tiles last first: j = n_tiles - 1 - it; counted over
                    // PLAN: the block's query tiles so far it is the k = done + it -th, in stage s = k % STAGES, pass
                    // PLAN: k / STAGES. For K, then V: wait until the stage is empty (mbarrier_wait on k_empty[s] with
                    // PLAN: the parity of the pass before, (k / STAGES & 1) ^ 1, which a fresh barrier passes at once),
                    // PLAN: announce the bytes coming (mbarrier_arrive_expect_tx on k_full[s]: L::KV_ELEMS * 2), then one
                    // PLAN: tma_load_3d per column block c of 64: into the stage's block c (c * BN * 64 elements in),
                    // PLAN: from column c * 64, row j * BN, head bh_kv of k_map.
                    KIT_TODO(t9);
                    // END TODO(t9)
                }
                done += n_tiles;
                ++rounds;
            }
        }
        return;
    }
    // ------------------------------------------------------------------------------------------------ a consumer
    kit::warpgroup_registers_inc<C::CONSUMER_REGS>();
    const int cw = warpgroup - 1;  // which 64 rows of the query tile
    const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
    const int g = lane / 4, t = lane % 4;
    const bool lane_releases = lane == 0;
    // Ping-pong: consumer cw waits on barrier 1 + cw for its turn at the tensor cores and passes the turn to the
    // next consumer (barrier 1 + (cw + 1) % NCWG) once its products are issued. The last consumer hands the first
    // turn out; so that every barrier sees as many arrivals as waits, it skips its arrival after its last tile.
    const int my_turn = 1 + cw, next_turn = 1 + (cw + 1) % NCWG;

    int done = 0, rounds = 0;  // key tiles and query tiles this block has consumed so far (the barriers' phases)
    for (int w = blockIdx.x; w < work_tiles; w += gridDim.x) {
        int bh, m0;
        locate(w, bh, m0);
        const int n_tiles = key_tiles<BM, BN, CAUSAL>(m0, Lq, Lk);
        const int row = m0 + 64 * cw + 16 * warp + g;  // and row + 8
        float o_acc[D / 2];
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o_acc[i] = 0.f;
        float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f}, alpha[2];

        if (n_tiles > 0) {
            kit::mbarrier_wait(&bars.q_full, rounds & 1);
            const uint32_t q_tile = kit::smem_u32(sQ) + 64 * cw * 128;
            const uint32_t k_base = kit::smem_u32(sK), v_base = kit::smem_u32(sV);
            if (C::PINGPONG && cw == NCWG - 1) kit::named_barrier_arrive(next_turn, 256);

            float s_acc[BN / 2];
            uint32_t p[BN / 16][4];
            // Tile it = 0 (key tile n_tiles - 1): S alone. Key tile it of this query tile is the block's (done + it)-th.
            const int s0 = done % STAGES;
            kit::mbarrier_wait(&bars.k_full[s0], (done / STAGES) & 1);
            if (C::PINGPONG) kit::named_barrier_sync(my_turn, 256);
            kit::wgmma_fence();
            issue_qk<T, D, BM, BN>(s_acc, q_tile, k_base + s0 * L::KV_ELEMS * 2);
            kit::wgmma_commit();
            kit::wgmma_hold(s_acc);
            if (C::PINGPONG && !(cw == NCWG - 1 && n_tiles == 1)) kit::named_barrier_arrive(next_turn, 256);
            kit::wgmma_wait<0>();
            kit::wgmma_hold(s_acc);
            __syncwarp();
            if (lane_releases) kit::mbarrier_arrive(&bars.k_empty[s0]);
            mask_tile<BN, CAUSAL>(s_acc, (n_tiles - 1) * BN, row, Lq, Lk, t);
            softmax_tile<BN>(s_acc, row_max, row_sum, alpha, scale_log2);
            pack_p<T, BN>(p, s_acc);

            for (int it = 1; it < n_tiles; ++it) {
                const int j = n_tiles - 1 - it, k = done + it, s = k % STAGES, sp = (k - 1) % STAGES;
                const uint32_t phase = (k / STAGES) & 1, phase_prev = ((k - 1) / STAGES) & 1;
                kit::mbarrier_wait(&bars.k_full[s], phase);
                if (C::PINGPONG) kit::named_barrier_sync(my_turn, 256);
                kit::wgmma_fence();
                issue_qk<T, D, BM, BN>(s_acc, q_tile, k_base + s * L::KV_ELEMS * 2);
                kit::wgmma_commit();
                if (C::OVERLAP) {
                    kit::mbarrier_wait(&bars.v_full[sp], phase_prev);
                    issue_pv<T, D, BN>(o_acc, p, v_base + sp * L::KV_ELEMS * 2);
                    kit::wgmma_commit();
                }
                kit::wgmma_hold(s_acc);
                kit::wgmma_hold(o_acc);
                kit::wgmma_hold(p);
                if (C::PINGPONG && !(cw == NCWG - 1 && it == n_tiles - 1)) kit::named_barrier_arrive(next_turn, 256);
                if (C::OVERLAP) {
                    kit::wgmma_wait<1>();  // S_j is in; P V may still run
                } else {
                    kit::wgmma_wait<0>();
                }
                kit::wgmma_hold(s_acc);
                __syncwarp();
                if (lane_releases) kit::mbarrier_arrive(&bars.k_empty[s]);
                const int key0 = j * BN;
                if (key0 + BN > Lk || (CAUSAL && key0 + BN - 1 > m0 + Lk - Lq))
                    mask_tile<BN, CAUSAL>(s_acc, key0, row, Lq, Lk, t);
                softmax_tile<BN>(s_acc, row_max, row_sum, alpha, scale_log2);
                if (C::OVERLAP) {
                    kit::wgmma_wait<0>();
                    kit::wgmma_hold(o_acc);
                    kit::wgmma_hold(p);
                } else {
                    pv_and_wait<T, D, BN>(o_acc, p, v_base + sp * L::KV_ELEMS * 2, &bars.v_full[sp], phase_prev);
                }
                __syncwarp();
                if (lane_releases) kit::mbarrier_arrive(&bars.v_empty[sp]);
                rescale<D>(o_acc, alpha);
                pack_p<T, BN>(p, s_acc);
            }
            // The last tile's P V.
            const int sl = (done + n_tiles - 1) % STAGES;
            pv_and_wait<T, D, BN>(o_acc, p, v_base + sl * L::KV_ELEMS * 2, &bars.v_full[sl],
                                  ((done + n_tiles - 1) / STAGES) & 1);
            __syncwarp();
            if (lane_releases) {
                kit::mbarrier_arrive(&bars.v_empty[sl]);
                kit::mbarrier_arrive(&bars.q_empty);  // every product that reads Q is done: the next Q may come
            }
            done += n_tiles;
            ++rounds;
        }

        // O = acc / l and LSE = ln(l) + m * scale, for the rows inside the tensor; a row that saw no key: 0 and -inf.
        // TODO(t9): the epilogue: O = acc / l and LSE for the lane's two rows, inside the tensor only
        // PLAN: l = row_sum[r] summed over the quad; a row with l = 0 saw no key: O = 0 and LSE = kNegInf.
        // PLAN: O's row i (row + 8r, if i < Lq): columns 8n + 2t, 8n + 2t + 1 from o_acc[4n + 2r], o_acc[4n + 2r + 1],
        // PLAN: packed to T, one 4-byte store each, at o + (bh * Lq + i) * D. The lane with t == 0 writes lse[bh * Lq + i]
        // PLAN: = max * scale_log2 * ln 2 + ln(l) (natural log; max 0 for a row still at kNegInf).
        KIT_TODO(t9);
        // END TODO(t9)
    }
#else
    __trap();  // built for an architecture without wgmma: the host code never launches this
#endif
}

// The device's SM count, asked once per device and module (kit::memo).
static int multiprocessors(int dev) {
    return kit::memo(reinterpret_cast<const void*>(&multiprocessors), dev, [dev] {
        int count = 0;
        return cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess ? count : -1;
    });
}

template <class T, int D, bool CAUSAL>
static int launch(const void* q, const void* k, const void* v, void* o, float* lse, int B, int H, int H_kv, int Lq,
                  int Lk, float scale, bool bf16, cudaStream_t stream) {
    using L = Layout<D>;
    constexpr int BM = L::BM, BN = Cfg<D>::BN;
    // With no keys (Lk 0) no key tile is ever loaded; the maps still need a row to describe.
    const int map_rows = Lk > 0 ? Lk : 1;
    CUtensorMap q_map, k_map, v_map;
    cudaError_t e = kit::tensor_map_3d(&q_map, q, bf16, B * H, Lq, D, BM);
    if (e == cudaSuccess) e = kit::tensor_map_3d(&k_map, k, bf16, B * H_kv, map_rows, D, BN);
    if (e == cudaSuccess) e = kit::tensor_map_3d(&v_map, v, bf16, B * H_kv, map_rows, D, BN);
    if (e != cudaSuccess) return (int)e;
    auto kern = flash_fwd_hopper_kernel<T, D, CAUSAL>;
    int dev = 0;
    e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return (int)e;
    // The kernel's shared memory allowed once per device and module (kit::memo): the model calls this per layer.
    const int set = kit::memo(reinterpret_cast<const void*>(kern), dev, [&] {
        return -(int)kit::set_attribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES);
    });
    if (set < 0) return -set;
    const long long work_tiles = (long long)kit_ceil_div(Lq, BM) * B * H;
    if (work_tiles > 0x7fffffffLL) return (int)cudaErrorInvalidValue;
    // Persistent: one block per SM (its shared memory allows no second), or one per work tile where there are fewer.
    long long blocks = work_tiles;
    if (Cfg<D>::PERSISTENT) {
        const int sms = multiprocessors(dev);
        if (sms <= 0) return (int)cudaErrorInvalidValue;
        blocks = work_tiles < sms ? work_tiles : sms;
    }
    // Query heads per group: as many as share K and V of about kL2Budget bytes (whole groups of grouped heads).
    constexpr long long kL2Budget = (long long)Cfg<D>::L2_MB << 20;
    const long long kv_head_bytes = 2ll * 2 * D * (Lk > 0 ? Lk : 1);
    const long long kv_heads = kL2Budget / kv_head_bytes > 0 ? kL2Budget / kv_head_bytes : 1;
    const int heads_per_group = (int)(kv_heads * (H / H_kv) < (long long)B * H ? kv_heads * (H / H_kv) : (long long)B * H);
    return (int)kit::launch(kern, dim3((unsigned)blocks), dim3(L::THREADS), L::BYTES, stream, q_map, k_map, v_map,
                            static_cast<T*>(o), lse, H, H_kv, Lq, Lk, scale * kit::kLog2e, heads_per_group, B * H);
}

// Whether the current device runs this file's kernels: compute capability 9.0 exactly (sm_90a code runs there only).
// Asked once per device and module (kit::memo): 1 yes, 2 no.
static bool hopper_device() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    return kit::memo(reinterpret_cast<const void*>(&hopper_device), device, [device] {
               int major = 0, minor = 0;
               cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
               cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
               return major == 9 && minor == 0 ? 1 : 2;
           }) == 1;
}

}  // namespace t9fa

// q, o: (B, H, Lq, d); k, v: (B, H_kv, Lk, d), H % H_kv == 0 (query head h reads KV head h / (H / H_kv)); all
// contiguous, fp16 (bf16 = 0) or bf16 (bf16 = 1), 16-byte aligned; lse: (B, H, Lq) fp32, natural log. d is 64 or
// 128. causal: query i sees keys j <= i + Lk - Lq. Returns a cudaError_t: cudaErrorNotSupported on a GPU that is not
// sm_90; cudaErrorInvalidValue for d not 64 or 128, a negative size, H_kv not dividing H, or a misaligned pointer.
KIT_API int t9_flash_attention_forward(void* module, const void* q, const void* k, const void* v, void* o, float* lse,
                                       int B, int H, int H_kv, int Lq, int Lk, int d, float scale, int causal,
                                       int bf16, void* stream) {
    kit::UseModule use(module);
    if (B < 0 || H < 0 || H_kv < 0 || Lq < 0 || Lk < 0) return (int)cudaErrorInvalidValue;
    if (H > 0 && (H_kv == 0 || H % H_kv != 0)) return (int)cudaErrorInvalidValue;
    if (d != 64 && d != 128) return (int)cudaErrorInvalidValue;
    if (!t9fa::hopper_device()) return (int)cudaErrorNotSupported;
    const long long BH = (long long)B * H;
    if (BH == 0 || Lq == 0) return 0;
    if (BH > 0x7fffffffLL) return (int)cudaErrorInvalidValue;
    if (((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v) |
          reinterpret_cast<uintptr_t>(o)) & 15) != 0 || (reinterpret_cast<uintptr_t>(lse) & 3) != 0)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
#define T9_LAUNCH(TYPE, D, CAUSAL) \
    t9fa::launch<TYPE, D, CAUSAL>(q, k, v, o, lse, B, H, H_kv, Lq, Lk, scale, bf16 != 0, s)
    if (bf16) {
        if (d == 64) return causal ? T9_LAUNCH(__nv_bfloat16, 64, true) : T9_LAUNCH(__nv_bfloat16, 64, false);
        return causal ? T9_LAUNCH(__nv_bfloat16, 128, true) : T9_LAUNCH(__nv_bfloat16, 128, false);
    }
    if (d == 64) return causal ? T9_LAUNCH(__half, 64, true) : T9_LAUNCH(__half, 64, false);
    return causal ? T9_LAUNCH(__half, 128, true) : T9_LAUNCH(__half, 128, false);
#undef T9_LAUNCH
}

// --------------------------------------------------------------------------- the sanitizer's scenario (kit code)

#include "kit_sanitize.cuh"  // the scenario's buffers and checks (host code)

// make sanitize T=t9 and the grader run this under compute-sanitizer memcheck and racecheck: every kernel instance
// (fp16 and bf16, d 64 and 128, causal or not) on ragged shapes, rows that see no key (Lq > Lk, causal), grouped
// heads, several passes over the stages and a one-row edge; each buffer exactly its size (the copy engine's reads
// past a tensor's end are its own zero fill, never a read of the buffer). `variant` is unused. Returns the number of
// failed launches.
KIT_API int t9_sanitize(void* module, int variant) {
    (void)variant;
    auto run = [&](int B, int H, int H_kv, int Lq, int Lk, int d, int causal, int bf16) {
        return kit::sanitize::attention_launch("t9", t9_flash_attention_forward, module, B, H, H_kv, Lq, Lk, d, causal, bf16);
    };
    int failures = 0;
    for (int bf16 : {0, 1})
        for (int causal : {0, 1})
            for (int d : {64, 128}) {
                failures += run(1, 2, 1, 70, 90, d, causal, bf16);    // multi-query: one KV head
                failures += run(1, 1, 1, 150, 37, d, causal, bf16);   // Lq > Lk: causal rows that see no key
                failures += run(2, 6, 2, 33, 700, d, causal, bf16);   // groups of 3 query heads, several passes
                failures += run(1, 1, 1, 1, 129, d, causal, bf16);    // one query row
            }
    return failures;
}
