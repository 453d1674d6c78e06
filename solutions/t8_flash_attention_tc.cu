// t8: FlashAttention-2 forward on tensor cores, fp16 or bf16 in and out, fp32 accumulation.
//
// The algorithm is t4's (one query tile per block, one pass over K and V, online softmax, O and LSE out); what
// changes is where the arithmetic runs. Both products, S = Q K^T and O += P V, are mma.sync m16n8k16 tensor-core
// instructions: a warp multiplies a 16 x 16 tile of A by a 16 x 8 tile of B in one instruction, each lane holding
// a fixed piece ("fragment") of each operand in registers (kit.cuh: mma_m16n8k16 has the exact layout).
// BEGIN ONLY t8 reference
// flash_fwd_tc_kernel's body is written twice: the guided level's calls the helper functions below, and a TODO region
// cannot define a function, so the open level's reference (its ONLY t8 open block) is the same design written inline.
// END ONLY
//
// BEGIN ONLY t8 guided
// ---------------------------------------------------------------------------
// One block = BR = 128 query rows of one (batch, head): 4 warps, warp w owns rows 32w .. 32w + 31 (MT = 2 m16 tiles
// of 16 rows). Nothing is shared between warps but the K and V tiles in shared memory.
//
//                      key tile 0      key tile 1     ...       (BC = 64 keys each, cp.async, NSTAGE buffers)
//                   +--------------+--------------+
//   warp 0  (32 rows)| S = Q K^T    |              |      Q: A fragments (ldmatrix), see "Why these sizes"
//   warp 1           | 32 x 64 fp32 |     ...      |      S: 2 m16 tiles x 8 n-blocks of 16 x 8,
//   warp 2           | in registers |              |         4 floats per lane each (C fragments)
//   warp 3           +--------------+--------------+      P: S's registers re-packed as A fragments
//                          |  O += P V (V: 64 x d tile, ldmatrix.trans)
//                          v
//   O: 32 x d fp32 per warp in registers (2 x d/8 n-blocks of 16 x 8) for the whole key loop, with the running
//   row max m and row sum l of the rows a lane holds (rows g and g + 8 of each m16 tile).
//
// What one lane holds (lane = 4g + t), for one m16 tile of S (and of O, with d/8 n-blocks instead of 8):
//
//            keys  0..7        8..15              56..63
//          +-----------+-----------+-- ... --+-----------+
//   row g  | s[0][0..1]| s[1][0..1]|          | s[7][0..1]|   at columns 2t, 2t+1 of each n-block
//   row g+8| s[0][2..3]| s[1][2..3]|          | s[7][2..3]|
//          +-----------+-----------+-- ... --+-----------+
//
//   A row of S lives in the 4 lanes of a quad (4g .. 4g+3): its max and sum are 2 __shfl_xor_sync steps.
//   And s[2j], s[2j+1] (keys 16j .. 16j+15) are, element for element, the A fragment of a 16 x 16 tile:
//   P = exp(S - m) goes to the P V product straight from registers, packed two to a register (pack_f32x2).
//
// ---------------------------------------------------------------------------
// Shared memory: Q [BR][d], then NSTAGE stages of { K [BC][d], V [BC][d] }, all row-major, 2-byte elements.
// A row is d/8 chunks of 16 bytes (8 elements); ldmatrix reads one chunk per lane, 8 rows at a time.
// Unswizzled, the 8 rows of a matrix sit d*2 bytes apart (128 or 256, a multiple of 128): the same banks, an
// 8-way conflict. The XOR swizzle stores chunk c of row r at chunk c ^ (r & 7) of the row:
//
//   row 0:  0 1 2 3 4 5 6 7 | 8 ...        chunk c of rows 0..7 lands in 8 different 16-byte bank groups,
//   row 1:  1 0 3 2 5 4 7 6 | 9 ...        so an ldmatrix (8 rows, one logical chunk) is conflict-free, and
//   row 2:  2 3 0 1 6 7 4 5 | ...          so are the cp.async writes (8 consecutive chunks of one row).
//   ...                                    No padding: the tiles stay dense.
//
// ---------------------------------------------------------------------------
// The pipeline: tile t + NSTAGE - 1 is copied (cp.async, global -> shared without registers) while tile t is
// computed. One __syncthreads per tile: after it, tile t has landed for everyone and everyone is done with tile
// t - 1, whose buffer the next copy overwrites.
//
// Why these sizes. Each mma needs its B operand from shared memory (ldmatrix), and shared memory delivers 128 bytes
// per clock per SM: with 16 rows per warp, an ldmatrix.x4 (512 bytes) feeds 2 mma (8192 flops), 16 flops per byte,
// which caps the kernel near the tensor cores' own mma.sync rate. 32 rows per warp (MT = 2) let one K or V fragment
// feed 4 mma. The registers then decide the rest: a lane holds 32 x d / 32 floats of O (64 at d = 64, 128 at
// d = 128) and 64 of S. At d = 64 Q's fragments (32 registers) stay in registers for the whole loop; at d = 128
// they would not fit beside O and S, so each tile re-reads them from shared memory (16 ldmatrix beside the 64 of K
// and V: cheaper than 16 rows per warp). 2 blocks of 4 warps per SM: while one block waits at its __syncthreads or
// in its softmax (FMA and ex2 units), the other keeps the tensor cores busy. Measured on H100 against this choice
// (the kit's records of this kernel): d = 128 with 16 rows per warp (8 warps, Q in registers, 64- or 128-key
// tiles) 3-10% slower; issuing the next tile's S = Q K^T before this tile's softmax, to overlap the two inside a
// warp (needs a second S in registers, so 16 rows per warp), no faster at d = 128 and 30% slower at d = 64.
// Two codegen details matter as much: the K fragments use ldmatrix's "B order" (kit.cuh) so that each mma's B
// pair sits in consecutive registers (else 4 register moves per ldmatrix; d = 64 went from about 1.0x to 1.12x of
// FA2 once they were gone), and every ldmatrix address is one of 4 per-lane offsets plus a constant (FragAddr).
//
// The exponentials: exp(scale * s - scale * m) = exp2(s * (scale * log2 e) - m * (scale * log2 e)): one FFMA and
// one ex2 (kit::fast_exp2) per score; the scale is never applied to S or Q separately. m stays in raw score units;
// LSE = ln(sum_j exp(scale * s_j)) = (m * scale * log2 e) * ln 2 + ln(l).
//
// Causal (bottom-right): query i sees keys j <= i + Lk - Lq. Key tiles right of a query tile's last visible key
// are never loaded; a warp whose rows see nothing of a tile skips its arithmetic; only tiles that cross the
// diagonal (or the end of the keys) apply the element mask. Causal query tiles start longest first. A row that
// sees no key gets O = 0 and LSE = -inf.
//
// Grouped-query attention: query head h reads KV head h / (H / H_kv) straight from k and v (as in t4).
// ---------------------------------------------------------------------------
// END ONLY
// BEGIN ONLY t8 open
// ---------------------------------------------------------------------------
// At this level the kernel's body is yours to design (flash_fwd_tc_kernel, below): which warp computes which query
// rows, the shared-memory layout, how K and V get there, the fragments and the online softmax on them. The kit gives
// the launch (Cfg<D>, smem_bytes and the host code at the end of the file: one block of NW * 32 threads for every
// BR = 16 * MT * NW query rows of one (batch, head), with smem_bytes of dynamic shared memory), kit.cuh's device
// helpers (mma_m16n8k16 with the fragment layouts, ldmatrix_x4 and ldmatrix_x4_trans, cp_async16, pack_f32x2,
// fast_exp2), and nvcuda::wmma (<mma.h>) for a kernel on its fragments instead.
// ---------------------------------------------------------------------------
// END ONLY

#define KIT_TENSOR_CORES  // kit.cuh's mma.sync, ldmatrix and packing helpers (fp32 tasks' files have none)
#include "kit.cuh"

#include <math.h>
// BEGIN ONLY t8 open
#include <mma.h>  // nvcuda::wmma: tensor-core fragments through the C++ API, yours to use or not
// END ONLY

namespace t8fa {

using namespace kit;  // mma_m16n8k16, ldmatrix_x4(_trans), pack_f32x2, smem_addr, cp_async16, fast_exp2 (kit.cuh)

// Tile shapes, per head dimension: NW warps of MT m16 tiles (BR = 16 * MT * NW query rows), BC keys per tile,
// NSTAGE K/V buffers, MINB blocks per SM; QREG: Q's fragments stay in registers for the whole key loop (else they
// are re-read from shared memory for every tile: 32 rows x d = 128 of a warp's O registers leave no room).
template <int D>
struct Cfg;
template <>
struct Cfg<64> { static constexpr int NW = 4, MT = 2, BC = 64, NSTAGE = 2, MINB = 2; static constexpr bool QREG = true; };
template <>
struct Cfg<128> { static constexpr int NW = 4, MT = 2, BC = 64, NSTAGE = 2, MINB = 2; static constexpr bool QREG = false; };
// BEGIN ONLY t8 guided

// Where chunk c (16 bytes, 8 elements) of row r of a [rows][D] tile lives, in chunks from the tile's start.
template <int D>
__device__ __forceinline__ int swizzle(int r, int c) {
    // BEGIN SOLUTION t8: the XOR swizzle: chunk c of row r is stored at chunk c ^ (r & 7) of row r
    // PLAN: a row has D / 8 chunks; return r * (D / 8) + (c ^ (r & 7)).
    // PLAN: (every tile load and every ldmatrix address goes through this one function.)
    // STUB: return 0;
    return r * (D / 8) + (c ^ (r & 7));
    // END SOLUTION
}

// The byte offsets, from a swizzled [rows][D] tile's start, of the row this lane gives ldmatrix for the 16 x 16
// block whose top-left element is (r0, 8 * c0), in kit.cuh's two orders: a(r0, c0) in A order (row r0 + L % 16,
// chunk c0 + L / 16: Q, and V through .trans), b(r0, c0) in B order (row r0 + L % 8 + 8 (L / 16), chunk
// c0 + (L / 8) % 2: K). r0 is a multiple of 16 and c0 even, so the XOR of swizzle() only ever mixes the low 3 bits
// of the chunk with L & 7: swizzle(r0 + r, c0 + c) = swizzle(r, (c0 & 7) + c) + r0 * D / 8 + (c0 & ~7). Four
// per-lane offsets per order (c0 & 7 = 0, 2, 4, 6), computed once, then cover every block: with r0 and c0 known
// at compile time (unrolled loops), an address is one of them plus a constant. (Computed naively, each of the 64
// ldmatrix of a tile gets its own precomputed register, and the kernel runs out of registers.)
template <int D>
struct FragAddr {
    uint32_t off_a[4], off_b[4];
    __device__ __forceinline__ explicit FragAddr(int lane) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            off_a[c] = 16 * swizzle<D>(lane & 15, 2 * c + (lane >> 4));
            off_b[c] = 16 * swizzle<D>((lane & 7) + 8 * (lane >> 4), 2 * c + ((lane >> 3) & 1));
        }
    }
    __device__ __forceinline__ uint32_t a(int r0, int c0) const {
        return 16 * (r0 * (D / 8) + (c0 & ~7)) + off_a[(c0 & 7) >> 1];
    }
    __device__ __forceinline__ uint32_t b(int r0, int c0) const {
        return 16 * (r0 * (D / 8) + (c0 & ~7)) + off_b[(c0 & 7) >> 1];
    }
};

// Copy rows [row0, row0 + ROWS) of a (nrows x D) row-major matrix into a swizzled shared tile, asynchronously
// (cp.async; the caller commits the group). Rows >= nrows become zeros. NT threads take part.
template <int ROWS, int D, int NT, class T>
__device__ __forceinline__ void load_tile_async(T* dst, const T* src, int row0, int nrows, int tid) {
    constexpr int CH = D / 8;        // 16-byte chunks per row
    constexpr int RSTEP = NT / CH;   // rows between two chunks of one thread
    static_assert(NT % CH == 0 && ROWS % RSTEP == 0, "every thread copies the same column of ROWS / RSTEP rows");
    // BEGIN SOLUTION t8: copy a ROWS x D tile into swizzled shared memory with cp.async, zero rows past nrows
    // PLAN: thread tid copies chunk c = tid % CH of rows r = tid / CH + RSTEP * i (i < ROWS / RSTEP): consecutive
    // PLAN: threads take consecutive chunks of a row, so a warp reads whole rows (coalesced 16-byte reads).
    // PLAN: destination dst + 8 * swizzle<D>(r, c); source src + (row0 + r) * D + 8 * c (64-bit index): compute the
    // PLAN: first row's pointer once and step it by RSTEP * D (a constant) rather than recomputing it per chunk.
    // PLAN: a row row0 + r >= nrows is zero-filled: cp_async16(dst, src, 0) (src-size 0 reads nothing, writes zeros;
    // PLAN: src stays a valid address). Only a matrix's last tile has such rows: test once (row0 + ROWS <= nrows) and
    // PLAN: give the other tiles a loop without per-row checks.
    const int c = tid % CH, r_first = tid / CH;
    const T* g = src + (long long)(row0 + r_first) * D + 8 * c;
    if (row0 + ROWS <= nrows) {
#pragma unroll
        for (int i = 0; i < ROWS / RSTEP; ++i)
            cp_async16(dst + 8 * swizzle<D>(r_first + RSTEP * i, c), g + (long long)RSTEP * D * i, 16);
    } else {
#pragma unroll
        for (int i = 0; i < ROWS / RSTEP; ++i) {
            const int r = r_first + RSTEP * i;
            const bool ok = row0 + r < nrows;
            cp_async16(dst + 8 * swizzle<D>(r, c), ok ? g + (long long)RSTEP * D * i : src, ok ? 16 : 0);
        }
    }
    // END SOLUTION
}

// This warp's rows of Q (the tile rows r0 .. r0 + 16 * MT - 1 of the swizzled Q tile at qs_addr) as A fragments.
template <int MT, int KD, int D>
__device__ __forceinline__ void load_q_fragments(uint32_t (&qf)[MT][KD][4], uint32_t qs_addr, int r0,
                                                 const FragAddr<D>& frag) {
    // BEGIN SOLUTION t8: load this warp's Q rows into A fragments (ldmatrix_x4), once
    // PLAN: m16 tile mt is rows r0 + 16mt .. r0 + 16mt + 15; slice kk (kk < KD = D / 16) is columns 16kk .. 16kk + 15.
    // PLAN: ldmatrix_x4(qf[mt][kk], qs_addr + frag.a(r0 + 16mt, 2kk)) returns the A fragment a[0..3] (frag.a: kit.cuh's
    // PLAN: A order, this lane's row r0 + 16mt + (lane & 15), chunk 2kk + (lane >> 4), through swizzle()).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) ldmatrix_x4(qf[mt][kk], qs_addr + frag.a(r0 + 16 * mt, 2 * kk));
    // END SOLUTION
}

// S = Q K^T for this warp's rows and the NB * 8 keys of the K tile at ks_addr: C fragments, s[mt][nb] = rows of
// m16 tile mt, keys 8nb .. 8nb + 7. Q's A fragments come from qf (QREG), else straight from the Q tile at qs_addr
// (this warp's rows r0 .. r0 + 16 * MT - 1), one k16 slice at a time.
template <class T, bool QREG, int MT, int NB, int QM, int QK, int D>
__device__ __forceinline__ void tile_scores(float (&s)[MT][NB][4], const uint32_t (&qf)[QM][QK][4], uint32_t qs_addr,
                                            int r0, uint32_t ks_addr, const FragAddr<D>& frag) {
    constexpr int KD = D / 16;  // k16 slices of d
    static_assert(!QREG || (QM == MT && QK == KD), "qf holds every fragment when QREG");
    // BEGIN SOLUTION t8: S = Q K^T: ldmatrix the K fragments, mma with the Q fragments
    // PLAN: zero s. For each slice kk (16 of d): a[mt] = Q's A fragment of m16 tile mt, slice kk: qf[mt][kk] when
    // PLAN: QREG (if constexpr), else ldmatrix_x4(a[mt], qs_addr + frag.a(r0 + 16mt, 2kk)) as in load_q_fragments.
    // PLAN: Then for each pair of n-blocks j (keys 16j .. 16j + 15):
    // PLAN: ldmatrix_x4(b, ks_addr + frag.b(16j, 2kk)) (B order on the block of keys 16j.., columns 16kk.. of K);
    // PLAN: keys 16j..16j+7 take (b[0], b[1]), keys 16j+8..16j+15 take (b[2], b[3]) (kit.cuh);
    // PLAN: for each mt: mma_m16n8k16<T>(s[mt][2j], a[mt], b[0], b[1]) and (s[mt][2j + 1], a[mt], b[2], b[3]).
    // PLAN: one ldmatrix serves MT * 2 mma: load it once, outside the mt loop.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nb = 0; nb < NB; ++nb)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][nb][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            if constexpr (QREG) {
#pragma unroll
                for (int e = 0; e < 4; ++e) a[mt][e] = qf[mt][kk][e];
            } else {
                ldmatrix_x4(a[mt], qs_addr + frag.a(r0 + 16 * mt, 2 * kk));
            }
        }
#pragma unroll
        for (int j = 0; j < NB / 2; ++j) {
            uint32_t b[4];
            ldmatrix_x4(b, ks_addr + frag.b(16 * j, 2 * kk));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_m16n8k16<T>(s[mt][2 * j], a[mt], b[0], b[1]);
                mma_m16n8k16<T>(s[mt][2 * j + 1], a[mt], b[2], b[3]);
            }
        }
    }
    // END SOLUTION
}

// -inf where a key is past the end or (causal) right of the diagonal; w0: the warp's first query row, kv0: the
// tile's first key. Query i sees keys j <= i + Lk - Lq.
template <bool CAUSAL, int MT, int NB>
__device__ __forceinline__ void mask_scores(float (&s)[MT][NB][4], int w0, int kv0, int Lq, int Lk, int lane) {
    const int g = lane >> 2, t = lane & 3;  // this lane's rows g, g + 8 and columns 2t, 2t + 1 of every fragment
    (void)g;
    (void)t;
    // BEGIN SOLUTION t8: the mask: -inf where a key is past Lk or (causal) right of the diagonal
    // PLAN: element e of s[mt][nb] is row w0 + 16mt + g + 8(e / 2), key kv0 + 8nb + 2t + (e % 2) (the C layout).
    // PLAN: masked when key >= Lk, or CAUSAL and key > row + Lk - Lq.
    // PLAN: only tiles that need it pay: kv0 + 8NB > Lk, or CAUSAL and kv0 + 8NB - 1 > w0 + Lk - Lq (the warp's first row).
    if (kv0 + 8 * NB > Lk || (CAUSAL && kv0 + 8 * NB - 1 > w0 + (Lk - Lq))) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = w0 + 16 * mt + g + 8 * (e >> 1);
                    const int key = kv0 + 8 * nb + 2 * t + (e & 1);
                    if (key >= Lk || (CAUSAL && key > row + (Lk - Lq))) s[mt][nb][e] = -INFINITY;
                }
    }
    // END SOLUTION
}

// One step of the online softmax on a tile of scores: m (raw units) and l of this lane's rows updated, O rescaled,
// and s replaced by P = exp(scale * (s - m)). sl2 = scale * log2(e).
template <int MT, int NB, int ND>
__device__ __forceinline__ void online_softmax(float (&s)[MT][NB][4], float (&m)[MT][2], float (&l)[MT][2],
                                               float (&acc)[MT][ND][4], float sl2) {
    // BEGIN SOLUTION t8: online softmax on the C fragments: new row max, rescale O and l, P = exp2 in place
    // PLAN: for each mt and half h (row g: elements 0, 1; row g + 8: elements 2, 3 of every n-block):
    // PLAN: mx = max(m, this lane's 2 NB values), then over the quad: mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 1)), then 2.
    // PLAN: ms = mx * sl2 (0 if mx == -inf: a row that saw no key yet must not compute -inf - -inf).
    // PLAN: alpha = fast_exp2(m * sl2 - ms); m = mx; p = fast_exp2(fmaf(s, sl2, -ms)) written back into s;
    // PLAN: l = l * alpha + (sum of this lane's p: l stays a per-lane partial sum); acc[mt][*][2h], [2h + 1] *= alpha.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = m[mt][h];
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[mt][nb][2 * h], s[mt][nb][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ms = mx == -INFINITY ? 0.f : mx * sl2;
            const float alpha = fast_exp2(fmaf(m[mt][h], sl2, -ms));
            m[mt][h] = mx;
            float rs = 0.f;
#pragma unroll
            for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; ++e) {
                    s[mt][nb][e] = fast_exp2(fmaf(s[mt][nb][e], sl2, -ms));
                    rs += s[mt][nb][e];
                }
            l[mt][h] = fmaf(l[mt][h], alpha, rs);
#pragma unroll
            for (int nd = 0; nd < ND; ++nd) {
                acc[mt][nd][2 * h] *= alpha;
                acc[mt][nd][2 * h + 1] *= alpha;
            }
        }
    // END SOLUTION
}

// P (fp32 C fragments, NB n-blocks of 8 keys) as T A fragments: pa[mt][j] = the 16 x 16 tile of keys 16j .. 16j + 15.
template <class T, int MT, int NB, int KC>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[MT][KC][4], const float (&s)[MT][NB][4]) {
    static_assert(NB == 2 * KC, "two n-blocks of 8 keys make one k16 slice");
    // BEGIN SOLUTION t8: pack P (fp32 C fragments) into T A fragments, in registers
    // PLAN: keys 16j .. 16j + 15 are n-blocks 2j and 2j + 1 of s; the A fragment of that 16 x 16 tile is
    // PLAN: a[0] = s[2j][0..1], a[1] = s[2j][2..3], a[2] = s[2j+1][0..1], a[3] = s[2j+1][2..3] (kit.cuh),
    // PLAN: each pair packed with pack_f32x2<T>(lower column, higher column).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < KC; ++j) {
            pa[mt][j][0] = pack_f32x2<T>(s[mt][2 * j][0], s[mt][2 * j][1]);
            pa[mt][j][1] = pack_f32x2<T>(s[mt][2 * j][2], s[mt][2 * j][3]);
            pa[mt][j][2] = pack_f32x2<T>(s[mt][2 * j + 1][0], s[mt][2 * j + 1][1]);
            pa[mt][j][3] = pack_f32x2<T>(s[mt][2 * j + 1][2], s[mt][2 * j + 1][3]);
        }
    // END SOLUTION
}

// O += P V for this warp's rows: the V tile at vs_addr (16 * KC keys x D), P as A fragments.
template <class T, int MT, int ND, int KC, int D>
__device__ __forceinline__ void tile_pv(float (&acc)[MT][ND][4], const uint32_t (&pa)[MT][KC][4], uint32_t vs_addr,
                                        const FragAddr<D>& frag) {
    // BEGIN SOLUTION t8: O += P V: ldmatrix_x4_trans the V fragments, mma with the P fragments
    // PLAN: for each key slice j (keys 16j .. 16j + 15) and each pair of n-blocks of d (columns 16n .. 16n + 15):
    // PLAN: ldmatrix_x4_trans(b, vs_addr + frag.a(16j, 2n)) (A order on the block of keys 16j.., columns 16n.. of V);
    // PLAN: columns 16n..16n+7 take (b[0], b[1]), columns 16n+8..16n+15 take (b[2], b[3]) (kit.cuh);
    // PLAN: for each mt: mma_m16n8k16<T>(acc[mt][2n], pa[mt][j], b[0], b[1]) and (acc[mt][2n + 1], ..., b[2], b[3]).
#pragma unroll
    for (int j = 0; j < KC; ++j) {
#pragma unroll
        for (int n = 0; n < ND / 2; ++n) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, vs_addr + frag.a(16 * j, 2 * n));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_m16n8k16<T>(acc[mt][2 * n], pa[mt][j], b[0], b[1]);
                mma_m16n8k16<T>(acc[mt][2 * n + 1], pa[mt][j], b[2], b[3]);
            }
        }
    }
    // END SOLUTION
}

// The end of the key loop: O = acc / l and LSE for this warp's rows w0 .. w0 + 16 * MT - 1 (rows >= Lq are not
// stored). ob, lb: this (batch, head)'s O (Lq x D) and LSE (Lq).
template <class T, int MT, int ND>
__device__ __forceinline__ void store_output(T* ob, float* lb, const float (&acc)[MT][ND][4], const float (&m)[MT][2],
                                             const float (&l)[MT][2], int w0, int Lq, float sl2, int lane) {
    constexpr int D = 8 * ND;
    const int g = lane >> 2, t = lane & 3;
    (void)g;
    (void)t;
    // BEGIN SOLUTION t8: final normalisation O /= l and LSE = m * sl2 * ln 2 + ln(l), then store
    // PLAN: per mt and h: lt = l summed over the quad (__shfl_xor_sync 1 and 2: every lane takes part);
    // PLAN: row = w0 + 16mt + g + 8h; if row < Lq: columns 8nd + 2t, 2t + 1 of O get
    // PLAN: pack_f32x2<T>(acc[mt][nd][2h] * inv, acc[mt][nd][2h + 1] * inv) as one 4-byte store, inv = 1 / lt (0 if lt == 0);
    // PLAN: lane t == 0 writes LSE[row] = fmaf(m * sl2, kLn2, logf(lt)), or -INFINITY when lt == 0 (a row that saw no key).
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float lt = l[mt][h];
            lt += __shfl_xor_sync(0xffffffffu, lt, 1);
            lt += __shfl_xor_sync(0xffffffffu, lt, 2);
            const int row = w0 + 16 * mt + g + 8 * h;
            if (row < Lq) {
                const float inv = lt > 0.f ? 1.f / lt : 0.f;
                T* orow = ob + (long long)row * D + 2 * t;
#pragma unroll
                for (int nd = 0; nd < ND; ++nd)
                    *reinterpret_cast<uint32_t*>(orow + 8 * nd) =
                        pack_f32x2<T>(acc[mt][nd][2 * h] * inv, acc[mt][nd][2 * h + 1] * inv);
                if (t == 0) lb[row] = lt > 0.f ? fmaf(m[mt][h] * sl2, kLn2, logf(lt)) : -INFINITY;
            }
        }
    // END SOLUTION
}
// END ONLY

template <class T, int D, int BR, int BC>
constexpr size_t smem_bytes(int nstage) { return sizeof(T) * ((size_t)BR * D + (size_t)nstage * 2 * BC * D); }

template <class T, int D, int NW, int MT, int BC, int NSTAGE, int MINB, bool QREG, bool CAUSAL>
__global__ void __launch_bounds__(NW * 32, MINB)
flash_fwd_tc_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
                    float* __restrict__ lse, int BH, int H, int H_kv, int Lq, int Lk, float scale) {
    constexpr int NT = NW * 32;       // threads
    constexpr int BR = 16 * MT * NW;  // query rows per block
    // BEGIN ONLY t8 guided
    constexpr int NB = BC / 8;        // n-blocks (8 keys) of S per m16 tile
    constexpr int KD = D / 16;        // k16 slices of d: S = Q K^T takes KD mma per n-block
    constexpr int ND = D / 8;         // n-blocks (8 columns of d) of O per m16 tile
    constexpr int KC = BC / 16;       // k16 slices of the keys: O += P V takes KC mma per n-block
    // END ONLY
    constexpr int TILE = BC * D;      // elements of one K or V tile
    static_assert(D == 64 || D == 128, "head dimension");
    static_assert(BC % 16 == 0 && NSTAGE >= 2, "tile shape");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    // BEGIN OPEN t8: the kernel body: query rows to warps, shared-memory layout, K/V pipeline, fragments, softmax
    // PLAN: O and LSE of the BR = 16 * MT * NW query rows of one (batch, head) that this block computes; which
    // PLAN: (bh = b * H + h, query tile) a block takes is yours (the grid is ceil(Lq / BR) * BH blocks in x).
    // PLAN: q, o: (B, H, Lq, D) and k, v: (B, H_kv, Lk, D), row-major T (fp16 or bf16); lse: (B, H, Lq) fp32, natural
    // PLAN: log. Query head h reads KV head h / (H / H_kv). CAUSAL: query i sees keys j <= i + Lk - Lq; a row that
    // PLAN: sees no key gets O = 0 and LSE = -inf. Any Lq, Lk >= 1 (not tile multiples); D is 64 or 128.
    // PLAN: Both products on the tensor cores (kit.cuh's mma_m16n8k16, ldmatrix_x4 and _trans; or nvcuda::wmma),
    // PLAN: accumulated in fp32; exp(scale * (s - m)) = exp2 of a scaled score (fast_exp2); P rounded to T once.
    // PLAN: The launch is fixed: NW * 32 threads, smem_bytes<T, D, BR, BC>(NSTAGE) bytes of dynamic shared memory
    // PLAN: at smem_raw; declare __shared__ arrays for more. MT, BC, NSTAGE, MINB and QREG are the reference's
    // PLAN: choices (Cfg<D> above): use them or not. No atomics: the same bits every run.
    // PLAN: Aim: the reference's time on the two timed shapes (bf16, d 128; causal fp16 with grouped heads, d 64);
    // PLAN: the rubric gives the levels and their points.
    // BEGIN ONLY t8 guided
    T* Qs = reinterpret_cast<T*>(smem_raw);  // [BR][D] swizzled
    T* KVs = Qs + BR * D;                     // NSTAGE x { K [BC][D], V [BC][D] } swizzled

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    // Which (batch * head, query tile) this block computes. Blocks start in about the order of blockIdx.x.
    const int n_qtiles = (Lq + BR - 1) / BR;
    int bh, qtile;
    if constexpr (CAUSAL) {
        // The last query tiles see the most keys: the heaviest tile of every head first, then the next, ...
        bh = (int)(blockIdx.x % BH);
        qtile = n_qtiles - 1 - (int)(blockIdx.x / BH);
    } else {
        // All tiles of a head (and of the neighbouring heads of its GQA group) run together and share K, V in L2.
        qtile = (int)(blockIdx.x % n_qtiles);
        bh = (int)(blockIdx.x / n_qtiles);
    }
    const int q0 = qtile * BR;
    const int w0 = q0 + 16 * MT * warp;  // this warp's first query row

    long long bkv = 0;  // the (batch, KV head) pair whose K and V this block reads
    {
        // BEGIN SOLUTION t8: grouped-query attention: the (batch, KV head) whose K and V this block reads
        // PLAN: bh = b * H + h; K and V are (B, H_kv, Lk, d): bkv = b * H_kv + h / (H / H_kv).
        const int b = bh / H, h = bh % H;
        bkv = (long long)b * H_kv + h / (H / H_kv);
        // END SOLUTION
    }
    const T* qb = q + (long long)bh * Lq * D;
    const T* kb = k + bkv * Lk * D;
    const T* vb = v + bkv * Lk * D;

    // Key tiles this query tile visits.
    int n_tiles = (Lk + BC - 1) / BC;
    if constexpr (CAUSAL) {
        // BEGIN SOLUTION t8: causal tile skipping: stop after the last key tile any row of this tile sees
        // PLAN: the tile's last row, min(q0 + BR, Lq) - 1, sees keys up to last = that row + Lk - Lq.
        // PLAN: n_tiles = min(n_tiles, last / BC + 1); n_tiles = 0 if last < 0 (no row sees a key).
        const int last = min(q0 + BR, Lq) - 1 + (Lk - Lq);
        n_tiles = last < 0 ? 0 : min(n_tiles, last / BC + 1);
        // END SOLUTION
    }
    // A warp none of whose rows sees a key of tile it (causal) skips that tile's arithmetic.
    auto warp_sees = [&](int it) { return !CAUSAL || it * BC <= w0 + 16 * MT - 1 + (Lk - Lq); };
    auto load_kv = [&](int it) {  // K and V tile it into buffer it % NSTAGE (the caller commits)
        T* dst = KVs + (it % NSTAGE) * 2 * TILE;
        load_tile_async<BC, D, NT>(dst, kb, it * BC, Lk, tid);
        load_tile_async<BC, D, NT>(dst + TILE, vb, it * BC, Lk, tid);
    };
    const uint32_t kv_addr = smem_addr(KVs);
    auto k_addr = [&](int it) { return kv_addr + (uint32_t)((it % NSTAGE) * 2 * TILE * sizeof(T)); };

    // The pipeline's prologue: Q (one group), then K/V tiles 0 .. NSTAGE - 2 (one group each, maybe empty).
    load_tile_async<BR, D, NT>(Qs, qb, q0, Lq, tid);
    cp_async_commit();
#pragma unroll
    for (int it = 0; it < NSTAGE - 1; ++it) {
        if (it < n_tiles) load_kv(it);
        cp_async_commit();
    }
    cp_async_wait<NSTAGE - 1>();  // Q has landed
    __syncthreads();

    const FragAddr<D> frag(lane);  // frag.a / frag.b(r0, c0): this lane's ldmatrix offset, block at row r0, chunk c0
    const uint32_t qs_addr = smem_addr(Qs);
    uint32_t qf[QREG ? MT : 1][QREG ? KD : 1][4];  // QREG: this warp's rows of Q as A fragments, for the whole loop
    if constexpr (QREG) load_q_fragments(qf, qs_addr, 16 * MT * warp, frag);

    const float sl2 = scale * kLog2e;  // exp(scale * x) = exp2(x * sl2)
    float acc[MT][ND][4];              // O (unnormalised), C fragments
    float m[MT][2];                    // running row max of S (raw units) of rows g and g + 8 of each m16 tile
    float l[MT][2];                    // running row sum of P: this lane's share (its 2 * NB columns of each tile)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            m[mt][h] = -INFINITY;
            l[mt][h] = 0.f;
        }
#pragma unroll
        for (int nd = 0; nd < ND; ++nd)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nd][e] = 0.f;
    }

    for (int it = 0; it < n_tiles; ++it) {
        // Tile it has landed for everyone, and everyone is done with the buffer the next copy overwrites (tile
        // it - 1's).
        cp_async_wait<NSTAGE - 2>();
        __syncthreads();
        if (it + NSTAGE - 1 < n_tiles) load_kv(it + NSTAGE - 1);
        cp_async_commit();

        if (warp_sees(it)) {
            float s[MT][NB][4];  // S = Q K^T of this warp's rows and tile it, C fragments; then P in place
            tile_scores<T, QREG>(s, qf, qs_addr, 16 * MT * warp, k_addr(it), frag);
            mask_scores<CAUSAL>(s, w0, it * BC, Lq, Lk, lane);
            online_softmax(s, m, l, acc, sl2);
            uint32_t pa[MT][KC][4];
            pack_p<T>(pa, s);
            tile_pv<T>(acc, pa, k_addr(it) + TILE * (uint32_t)sizeof(T), frag);
        }
    }
    cp_async_wait<0>();  // no copy may still be writing when the block exits

    store_output(o + (long long)bh * Lq * D, lse + (long long)bh * Lq, acc, m, l, w0, Lq, sl2, lane);
    // END ONLY
    // BEGIN ONLY t8 open
    {  // a scope of its own: the file as it is (the kit's host build) holds the guided body too
        // The reference at the open level: the guided level's design, written inline (a TODO region cannot define
        // functions). 4 warps of 32 query rows (two m16 tiles each); 64-key K and V tiles copied by cp.async into a
        // 2-stage ring of XOR-swizzled shared tiles; fragments by ldmatrix; S, P and O in registers throughout.
        constexpr int NB = BC / 8, KD = D / 16;  // S = Q K^T: n-blocks (8 keys) per m16 tile; k16 slices of d
        constexpr int ND = D / 8, KC = BC / 16;  // O += P V: n-blocks (8 columns of d) per m16 tile; k16 slices of keys
        T* const q_tile = reinterpret_cast<T*>(smem_raw);  // [BR][D]: chunk c (8 elements) of row r at c ^ (r & 7)
        T* const kv_ring = q_tile + BR * D;                 // NSTAGE x { K [BC][D], V [BC][D] }, swizzled alike
        const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
        const int g = lane >> 2, t = lane & 3;  // this lane's rows g, g + 8 and columns 2t, 2t + 1 of each C fragment

        // Causal: the heaviest query tile of every head first; else all tiles of a head together (K, V shared in L2).
        const int n_qtiles = (Lq + BR - 1) / BR;
        const int bh = CAUSAL ? (int)(blockIdx.x % BH) : (int)(blockIdx.x / n_qtiles);
        const int q0 = BR * (CAUSAL ? n_qtiles - 1 - (int)(blockIdx.x / BH) : (int)(blockIdx.x % n_qtiles));
        const int r_warp = 16 * MT * warp, w0 = q0 + r_warp;  // this warp's first row: in the tile, in the head
        const long long kv_head = (long long)(bh / H) * H_kv + (bh % H) / (H / H_kv);
        const T* q_rows = q + (long long)bh * Lq * D;
        const T* k_rows = k + kv_head * Lk * D;
        const T* v_rows = v + kv_head * Lk * D;
        const int diag = Lk - Lq;  // causal: query i sees keys j <= i + diag
        int n_tiles = (Lk + BC - 1) / BC;
        if (CAUSAL) {  // no key tile past the last key the tile's last row sees
            const int last_key = min(q0 + BR, Lq) - 1 + diag;
            n_tiles = last_key < 0 ? 0 : min(n_tiles, last_key / BC + 1);
        }

        constexpr int CH = D / 8, RSTEP = NT / CH;  // 16-byte chunks per row; rows between one thread's chunks
        static_assert(BC % RSTEP == 0 && BR % BC == 0, "each thread copies one chunk of every RSTEP-th row");
        auto swz = [](int r, int c) { return r * CH + (c ^ (r & 7)); };  // in chunks from the tile's start
        // BC rows from row0 of a (nrows x D) matrix into a swizzled tile (cp.async, uncommitted); rows >= nrows: zeros.
        // Thread tid copies chunk tid % CH of rows tid / CH + RSTEP i: a warp reads whole rows.
        auto copy_rows = [&](T* dst, const T* src, int row0, int nrows) {
            const int c = tid % CH, r = tid / CH;
            const T* from = src + (long long)(row0 + r) * D + 8 * c;
            if (row0 + BC <= nrows) {  // every tile but a matrix's last: no per-row test
#pragma unroll
                for (int i = 0; i < BC / RSTEP; ++i)
                    cp_async16(dst + 8 * swz(r + RSTEP * i, c), from + (long long)RSTEP * D * i, 16);
            } else {
#pragma unroll
                for (int i = 0; i < BC / RSTEP; ++i) {
                    const bool inside = row0 + r + RSTEP * i < nrows;
                    cp_async16(dst + 8 * swz(r + RSTEP * i, c), inside ? from + (long long)RSTEP * D * i : src,
                               inside ? 16 : 0);
                }
            }
        };
        auto copy_kv = [&](int it) {  // K and V tile it into stage it % NSTAGE
            T* stage = kv_ring + (it % NSTAGE) * 2 * TILE;
            copy_rows(stage, k_rows, it * BC, Lk);
            copy_rows(stage + TILE, v_rows, it * BC, Lk);
        };
        // The prologue: Q (one group), then K/V tiles 0 .. NSTAGE - 2 (a group each, maybe empty).
#pragma unroll
        for (int i = 0; i < BR / BC; ++i) copy_rows(q_tile + i * BC * D, q_rows, q0 + i * BC, Lq);
        cp_async_commit();
#pragma unroll
        for (int it = 0; it < NSTAGE - 1; ++it) {
            if (it < n_tiles) copy_kv(it);
            cp_async_commit();
        }
        cp_async_wait<NSTAGE - 1>();  // Q has landed
        __syncthreads();

        // ldmatrix addresses: the byte offset of the row this lane gives for the 16 x 16 block at row r0 (a multiple of
        // 16), chunk c0 (even), in kit.cuh's A order (row L % 16, chunk L / 16) and B order (row L % 8 + 8 (L / 16),
        // chunk (L / 8) % 2). The XOR mixes only the chunk's low 3 bits with the row's, so four per-lane offsets
        // (c0 & 7 = 0, 2, 4, 6) plus a compile-time constant give every block.
        uint32_t off_a[4], off_b[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            off_a[c] = 16 * swz(lane & 15, 2 * c + (lane >> 4));
            off_b[c] = 16 * swz((lane & 7) + 8 * (lane >> 4), 2 * c + ((lane >> 3) & 1));
        }
        auto at_a = [&](int r0, int c0) { return (uint32_t)(16 * (r0 * CH + (c0 & ~7))) + off_a[(c0 & 7) >> 1]; };
        auto at_b = [&](int r0, int c0) { return (uint32_t)(16 * (r0 * CH + (c0 & ~7))) + off_b[(c0 & 7) >> 1]; };
        const uint32_t q_addr = smem_addr(q_tile), ring_addr = smem_addr(kv_ring);

        // QREG (d 64): this warp's Q as A fragments for the whole key loop; at d 128 they are re-read every tile.
        uint32_t qf[QREG ? MT : 1][QREG ? KD : 1][4];
        if constexpr (QREG) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int kk = 0; kk < KD; ++kk) ldmatrix_x4(qf[mt][kk], q_addr + at_a(r_warp + 16 * mt, 2 * kk));
        }

        const float sl2 = scale * kLog2e;  // exp(scale * x) = exp2(x * sl2); m stays in raw score units
        float acc[MT][ND][4];              // O, unnormalised: C fragments of m16 tile mt, columns 8 nd ..
        float m[MT][2], l[MT][2];          // running max and this lane's share of the sum, rows g and g + 8 of tile mt
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) m[mt][h] = -INFINITY, l[mt][h] = 0.f;
#pragma unroll
            for (int nd = 0; nd < ND; ++nd)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nd][e] = 0.f;
        }

        for (int it = 0; it < n_tiles; ++it) {
            cp_async_wait<NSTAGE - 2>();
            __syncthreads();  // tile it landed for all; all are done with the stage the next copy overwrites
            if (it + NSTAGE - 1 < n_tiles) copy_kv(it + NSTAGE - 1);
            cp_async_commit();
            const int kv0 = it * BC;
            if (CAUSAL && kv0 > w0 + 16 * MT - 1 + diag) continue;  // no row of this warp sees this tile
            const uint32_t k_addr = ring_addr + (uint32_t)((it % NSTAGE) * 2 * TILE * sizeof(T));
            const uint32_t v_addr = k_addr + (uint32_t)(TILE * sizeof(T));

            // S = Q K^T: s[mt][nb] holds rows of m16 tile mt, keys kv0 + 8 nb .. (a C fragment)
            float s[MT][NB][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mt][nb][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KD; ++kk) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    if constexpr (QREG) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) a[mt][e] = qf[mt][kk][e];
                    } else {
                        ldmatrix_x4(a[mt], q_addr + at_a(r_warp + 16 * mt, 2 * kk));
                    }
                }
#pragma unroll
                for (int j = 0; j < NB / 2; ++j) {  // keys 16 j .. 16 j + 15: B fragments of two n-blocks at once
                    uint32_t b[4];
                    ldmatrix_x4(b, k_addr + at_b(16 * j, 2 * kk));
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mma_m16n8k16<T>(s[mt][2 * j], a[mt], b[0], b[1]);
                        mma_m16n8k16<T>(s[mt][2 * j + 1], a[mt], b[2], b[3]);
                    }
                }
            }

            // -inf past the keys' end or right of the diagonal: only the tiles that reach either pay for the test
            if (kv0 + BC > Lk || (CAUSAL && kv0 + BC - 1 > w0 + diag)) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int row = w0 + 16 * mt + g + 8 * (e >> 1), key = kv0 + 8 * nb + 2 * t + (e & 1);
                            if (key >= Lk || (CAUSAL && key > row + diag)) s[mt][nb][e] = -INFINITY;
                        }
            }

            // The online softmax on the C fragments: a row lives in the 4 lanes of a quad
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float mx = m[mt][h];
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[mt][nb][2 * h], s[mt][nb][2 * h + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float ms = mx == -INFINITY ? 0.f : mx * sl2;  // a row with no key yet: no -inf - -inf
                    const float alpha = fast_exp2(fmaf(m[mt][h], sl2, -ms));
                    m[mt][h] = mx;
                    float row_sum = 0.f;
#pragma unroll
                    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
                        for (int e = 2 * h; e < 2 * h + 2; ++e) {
                            s[mt][nb][e] = fast_exp2(fmaf(s[mt][nb][e], sl2, -ms));
                            row_sum += s[mt][nb][e];
                        }
                    l[mt][h] = fmaf(l[mt][h], alpha, row_sum);
#pragma unroll
                    for (int nd = 0; nd < ND; ++nd) {
                        acc[mt][nd][2 * h] *= alpha;
                        acc[mt][nd][2 * h + 1] *= alpha;
                    }
                }

            // P stays in registers: n-blocks 2j and 2j + 1 of S are the A fragment of keys 16 j .. 16 j + 15
            uint32_t pa[MT][KC][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < KC; ++j) {
                    pa[mt][j][0] = pack_f32x2<T>(s[mt][2 * j][0], s[mt][2 * j][1]);
                    pa[mt][j][1] = pack_f32x2<T>(s[mt][2 * j][2], s[mt][2 * j][3]);
                    pa[mt][j][2] = pack_f32x2<T>(s[mt][2 * j + 1][0], s[mt][2 * j + 1][1]);
                    pa[mt][j][3] = pack_f32x2<T>(s[mt][2 * j + 1][2], s[mt][2 * j + 1][3]);
                }
            // O += P V: V's B fragments by ldmatrix .trans, in A order on the block of keys 16 j.., columns 16 n..
#pragma unroll
            for (int j = 0; j < KC; ++j)
#pragma unroll
                for (int n = 0; n < ND / 2; ++n) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, v_addr + at_a(16 * j, 2 * n));
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mma_m16n8k16<T>(acc[mt][2 * n], pa[mt][j], b[0], b[1]);
                        mma_m16n8k16<T>(acc[mt][2 * n + 1], pa[mt][j], b[2], b[3]);
                    }
                }
        }
        cp_async_wait<0>();  // no copy may still be writing when the block exits

        // O = acc / l (l summed over the quad) and LSE = m * sl2 * ln 2 + ln(l); -inf for a row that saw no key
        T* o_rows = o + (long long)bh * Lq * D;
        float* lse_rows = lse + (long long)bh * Lq;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float total = l[mt][h];
                total += __shfl_xor_sync(0xffffffffu, total, 1);
                total += __shfl_xor_sync(0xffffffffu, total, 2);
                const int row = w0 + 16 * mt + g + 8 * h;
                if (row < Lq) {
                    const float inv = total > 0.f ? 1.f / total : 0.f;
#pragma unroll
                    for (int nd = 0; nd < ND; ++nd)
                        *reinterpret_cast<uint32_t*>(o_rows + (long long)row * D + 8 * nd + 2 * t) =
                            pack_f32x2<T>(acc[mt][nd][2 * h] * inv, acc[mt][nd][2 * h + 1] * inv);
                    if (t == 0) lse_rows[row] = total > 0.f ? fmaf(m[mt][h] * sl2, kLn2, logf(total)) : -INFINITY;
                }
            }
    }
    // END ONLY
    // END OPEN
}

// --------------------------------------------------------------------------- host (the kit's)
// It runs in the host library, built from the kit's own copy of this file; every kernel it launches comes from
// the device module built from yours (kit.cuh: kit::launch).

template <class T, int D, bool CAUSAL>
static int launch(const void* q, const void* k, const void* v, void* o, float* lse, int BH, int H, int H_kv, int Lq,
                  int Lk, float scale, cudaStream_t stream) {
    using C = Cfg<D>;
    constexpr int BR = 16 * C::MT * C::NW;
    auto kern = flash_fwd_tc_kernel<T, D, C::NW, C::MT, C::BC, C::NSTAGE, C::MINB, C::QREG, CAUSAL>;
    const size_t smem = smem_bytes<T, D, BR, C::BC>(C::NSTAGE);
    cudaError_t e = kit::set_attribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return (int)e;
    const long long blocks = (long long)kit_ceil_div(Lq, BR) * BH;
    if (blocks > 0x7fffffffLL) return (int)cudaErrorInvalidValue;
    return (int)kit::launch(kern, dim3((unsigned)blocks), dim3(C::NW * 32), smem, stream, static_cast<const T*>(q),
                            static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), lse, BH, H, H_kv,
                            Lq, Lk, scale);
}

}  // namespace t8fa

// q, o: (B, H, Lq, d); k, v: (B, H_kv, Lk, d), H % H_kv == 0 (query head h reads KV head h / (H / H_kv)); all
// contiguous, fp16 (bf16 = 0) or bf16 (bf16 = 1), 16-byte aligned; lse: (B, H, Lq) fp32, natural log. d is 64 or
// 128. causal: query i sees keys j <= i + Lk - Lq. Returns a cudaError_t: cudaErrorInvalidValue for d not 64 or
// 128, a negative size, H_kv not dividing H, or a misaligned pointer.
KIT_API int t8_flash_attention_forward(void* module, const void* q, const void* k, const void* v, void* o, float* lse,
                                       int B, int H, int H_kv, int Lq, int Lk, int d, float scale, int causal,
                                       int bf16, void* stream) {
    kit::UseModule use(module);
    if (B < 0 || H < 0 || H_kv < 0 || Lq < 0 || Lk < 0) return (int)cudaErrorInvalidValue;
    if (H > 0 && (H_kv == 0 || H % H_kv != 0)) return (int)cudaErrorInvalidValue;
    if (d != 64 && d != 128) return (int)cudaErrorInvalidValue;
    const long long BH = (long long)B * H;
    if (BH == 0 || Lq == 0) return 0;
    if (BH > 0x7fffffffLL) return (int)cudaErrorInvalidValue;
    if (((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v) |
          reinterpret_cast<uintptr_t>(o)) & 15) != 0 || (reinterpret_cast<uintptr_t>(lse) & 3) != 0)
        return (int)cudaErrorInvalidValue;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int bh = (int)BH;
#define T8_LAUNCH(TYPE, D, CAUSAL) t8fa::launch<TYPE, D, CAUSAL>(q, k, v, o, lse, bh, H, H_kv, Lq, Lk, scale, s)
    if (bf16) {
        if (d == 64) return causal ? T8_LAUNCH(__nv_bfloat16, 64, true) : T8_LAUNCH(__nv_bfloat16, 64, false);
        return causal ? T8_LAUNCH(__nv_bfloat16, 128, true) : T8_LAUNCH(__nv_bfloat16, 128, false);
    }
    if (d == 64) return causal ? T8_LAUNCH(__half, 64, true) : T8_LAUNCH(__half, 64, false);
    return causal ? T8_LAUNCH(__half, 128, true) : T8_LAUNCH(__half, 128, false);
#undef T8_LAUNCH
}

// The configuration a call takes: 4 * bf16 + 2 * (d == 128) + causal (one per kernel instance), or -1 for a call
// the kernel refuses. The grader's own tests use it to prove that their shapes reach every configuration.
KIT_API int t8_flash_attention_config(int B, int H, int Lq, int d, int causal, int bf16) {
    if ((d != 64 && d != 128) || B <= 0 || H <= 0 || Lq <= 0) return -1;
    return 4 * (bf16 ? 1 : 0) + 2 * (d == 128 ? 1 : 0) + (causal ? 1 : 0);
}

// --------------------------------------------------------------------------- the sanitizer's scenario (kit code)

#include "kit_sanitize.cuh"  // the scenario's buffers and checks (host code)

// make sanitize T=t8 and the grader run this under compute-sanitizer memcheck and racecheck: every kernel
// instance (fp16 and bf16, d 64 and 128, causal or not) on ragged shapes, rows that see no key (Lq > Lk, causal),
// grouped-query heads and a one-row edge; each buffer exactly its size (kit::sanitize::attention_launch). `variant`
// is unused. Returns the number of failed launches.
KIT_API int t8_sanitize(void* module, int variant) {
    (void)variant;
    auto run = [&](int B, int H, int H_kv, int Lq, int Lk, int d, int causal, int bf16) {
        return kit::sanitize::attention_launch("t8", t8_flash_attention_forward, module, B, H, H_kv, Lq, Lk, d, causal, bf16);
    };
    int failures = 0;
    for (int bf16 : {0, 1})
        for (int causal : {0, 1})
            for (int d : {64, 128}) {
                failures += run(1, 2, 1, 70, 90, d, causal, bf16);    // multi-query: one KV head
                failures += run(1, 1, 1, 150, 37, d, causal, bf16);   // Lq > Lk: causal rows that see no key
                failures += run(2, 6, 2, 33, 200, d, causal, bf16);   // groups of 3 query heads, two batches
                failures += run(1, 1, 1, 1, 129, d, causal, bf16);    // one query row
            }
    return failures;
}
