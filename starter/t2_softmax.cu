// t2_softmax.cu: numerically stable row softmax, y[r, :] = exp(x[r, :] - max) / sum.
//
// Design (read this first)
// ------------------------
// Softmax is memory bound: per element we read 4 bytes and write 4 bytes and do
// a handful of flops. The goal is therefore to touch DRAM exactly once per
// element in each direction (read x once, write y once) and to keep enough
// loads in flight to saturate the memory system. The row is loaded into
// REGISTERS, reduced (max, then sum of exponentials) while it sits there, and
// normalised from the registers, so x is never read twice.
//
// Which kernel handles a row depends on its length `cols`:
//
//   cols <= 1024          softmax_warp_kernel: one WARP per row. Each lane holds
//                         up to 32 elements; reductions are pure warp shuffles
//                         (no shared memory, no __syncthreads). 8 rows per block.
//   1024 < cols <= 16384  softmax_block_kernel, cluster size 1: one BLOCK per row,
//                         up to 1024 threads x 16 elements in registers. The
//                         reductions go warp -> shared memory -> warp.
//   16384 < cols <= 65536  (sm_90+) the same kernel launched as a thread-block
//                         CLUSTER of 2..8 blocks per row: each block holds a
//                         slice of the row in registers (256 threads x 32
//                         elements), reduces it, and the blocks exchange their
//                         (max, sum) pairs through distributed shared memory.
//                         Still one read and one write per element.
//   otherwise (longer rows, or sm_80)
//                         softmax_twopass_kernel: one block per row, an online
//                         (max, sum) pass followed by a normalise pass that
//                         re-reads the row. (A 16-block cluster could hold a
//                         262144-long row on chip, but measured slower on H200.)
//
// Vector loads: when cols % 4 == 0 and x, y are 16-byte aligned, every row start
// is 16-byte aligned, so each thread moves float4s (one 16-byte transaction
// instead of four). Otherwise the same kernels run a scalar path. Consecutive
// threads always touch consecutive addresses (coalescing). Plain cached loads and
// stores are used: on H200 the streaming hints (__ldcs/__stcs) measured 2-7% slower.
//
// Special values: padding slots and -inf entries contribute exp(-inf) = 0. A row
// that is entirely -inf has max = -inf; we then subtract 0 instead (so we never
// form -inf - (-inf) = NaN) and the sum is 0, and we write zeros.
// Offsets are 64-bit: rows * cols may exceed 2^31.
// The reductions are fixed trees of shuffles, so results are bitwise
// reproducible (no atomics).
#include "kit.cuh"

#include <math.h>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#define T2_NEG_INF (-INFINITY)

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// All 32 lanes end up with op(v_0, ..., v_31).
template <class Op>
__device__ __forceinline__ float warp_allreduce(float v, Op op) {
  // TODO(t2): butterfly all-reduce of v across the 32 lanes of a warp
  // PLAN: Use __shfl_xor_sync(0xffffffff, v, offset) for offset = 16, 8, 4, 2, 1.
  // PLAN: After each step combine v = op(v, other); after 5 steps every lane holds the result.
  KIT_TODO(t2);
  // END TODO(t2)
  return v;
}

// All threads of the block end up with op over the block. blockDim.x must be a
// multiple of 32 (<= 1024). `scratch` is a __shared__ float[32]. `identity` is
// the neutral element of op (-inf for max, 0 for sum).
template <class Op>
__device__ __forceinline__ float block_allreduce(float v, Op op, float* scratch, float identity) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  // TODO(t2): block all-reduce: warps reduce, lane 0s publish to scratch, one more warp reduce
  // PLAN: Reduce inside each warp with warp_allreduce; lane 0 of warp w writes scratch[w].
  // PLAN: __syncthreads() BEFORE writing too: scratch may still be read by a previous call.
  // PLAN: After a __syncthreads(), every warp reads scratch[lane] (identity for lane >= nwarps)
  // PLAN: and reduces again, so all threads get the same value without another barrier.
  KIT_TODO(t2);
  // END TODO(t2)
  return v;
}

// Register layout shared by the warp and block kernels. A group of `stride`
// threads (a warp, or a block) owns `len` consecutive elements of one row that
// start at `base`; thread `idx` of the group holds N = 4*NV values in v[]:
//   VEC:    v[4*i + j] = base[4*(i*stride + idx) + j]   (float4 i)
//   scalar: v[i]       = base[i*stride + idx]
// Slots at or past `len` hold -inf (they add exp(-inf) = 0 to the sum).
// Offsets inside the slice fit in 32 bits (len <= 262144), which saves registers.
template <int N, bool VEC>
__device__ __forceinline__ void load_row(float (&v)[N], const float* __restrict__ base, int len,
                                         int stride, int idx) {
  if (VEC) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const int c = 4 * (i * stride + idx);
      float4 q = make_float4(T2_NEG_INF, T2_NEG_INF, T2_NEG_INF, T2_NEG_INF);
      if (c < len) q = __ldg(reinterpret_cast<const float4*>(base + c));
      v[4 * i + 0] = q.x; v[4 * i + 1] = q.y; v[4 * i + 2] = q.z; v[4 * i + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int c = i * stride + idx;
      v[i] = (c < len) ? __ldg(base + c) : T2_NEG_INF;
    }
  }
}

// Maximum and sum of exp(v - max) over this thread's N values (thread-local).
// `m` receives the max; `s` the sum computed relative to that max.
template <int N>
__device__ __forceinline__ void thread_stats(const float (&v)[N], float& m, float& s) {
  // TODO(t2): thread-local max and sum of exponentials of the register row
  // PLAN: m = max of v[i]. Then s = sum of expf(v[i] - ms) where ms = (m == -inf ? 0 : m),
  // PLAN: so an all -inf slice gives s = 0 instead of NaN from (-inf) - (-inf).
  // PLAN: Unroll the loops (#pragma unroll) so v[] stays in registers.
  KIT_TODO(t2);
  // END TODO(t2)
}

// Write y = exp(v - m) * inv for this thread's values (same layout as load_row).
template <int N, bool VEC>
__device__ __forceinline__ void store_normalised(const float (&v)[N], float* __restrict__ base,
                                                 int len, int stride, int idx, float m, float inv) {
  // TODO(t2): normalise the register row and store it (float4 stores on the VEC path)
  // PLAN: Use ms = (m == -inf ? 0 : m) and write expf(v - ms) * inv (inv is 0 for an all -inf row).
  // PLAN: Visit exactly the slots load_row loaded (same index formula) and skip padding (c >= len).
  // PLAN: VEC: build a float4 and store it with one 16-byte store; scalar: one float per slot.
  KIT_TODO(t2);
  // END TODO(t2)
}

// Combine a partial (max m, sum s relative to m) into the total over a group:
// the reduced max M, and sum S = sum_g s_g * exp(m_g - M).
__device__ __forceinline__ float rescale_sum(float m, float s, float M) {
  return (m == T2_NEG_INF) ? 0.0f : s * expf(m - M);
}

// ---------------------------------------------------------------------------
// One warp per row, cols <= 128 * NV. Blocks of 8 warps = 8 rows (kWarpRows).
template <int NV, bool VEC>
__global__ void __launch_bounds__(256) softmax_warp_kernel(const float* __restrict__ x,
                                                           float* __restrict__ y,
                                                           int64_t rows, int64_t cols) {
  constexpr int N = 4 * NV;
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_grid = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
       row += warps_per_grid) {
    const float* xrow = x + row * cols;
    float* yrow = y + row * cols;
    float v[N];
    load_row<N, VEC>(v, xrow, (int)cols, 32, lane);
    float m, s;
    thread_stats<N>(v, m, s);
    // Lanes have different local maxima: reduce the max, rescale each lane's
    // sum to the row max, then reduce the sums.
    const float M = warp_allreduce(m, MaxOp());
    const float S = warp_allreduce(rescale_sum(m, s, M), SumOp());
    const float inv = (S > 0.0f) ? 1.0f / S : 0.0f;
    store_normalised<N, VEC>(v, yrow, (int)cols, 32, lane, M, inv);
  }
}

// Split cluster barrier (sm_90): every thread arrives, later every thread waits.
__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------
// One block per row slice. gridDim.x = csize * (number of row groups); the
// `csize` consecutive blocks with the same blockIdx.x / csize share one row and
// (when csize > 1) form a thread-block cluster. Block r of a cluster owns
// columns [r*chunk, min(cols, (r+1)*chunk)), chunk = a multiple of 4.
template <int NV, bool VEC>
__global__ void __launch_bounds__(NV >= 8 ? 512 : 1024, NV >= 8 ? 2 : 1) softmax_block_kernel(
    const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t cols, int csize,
    int64_t chunk) {
  constexpr int N = 4 * NV;
  __shared__ float scratch[32];
  const int rank = (int)(blockIdx.x % csize);
  const int64_t begin = (int64_t)rank * chunk;
  const int len = (int)(min(cols, begin + chunk) - begin);
  const int64_t groups = gridDim.x / csize;
  for (int64_t row = blockIdx.x / csize; row < rows; row += groups) {
    const float* xs = x + row * cols + begin;  // this block's slice of the row
    float* ys = y + row * cols + begin;
    float v[N];
    load_row<N, VEC>(v, xs, len, blockDim.x, threadIdx.x);
    float m, s;
    thread_stats<N>(v, m, s);
    float M = block_allreduce(m, MaxOp(), scratch, T2_NEG_INF);
    float S = block_allreduce(rescale_sum(m, s, M), SumOp(), scratch, 0.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (csize > 1) {
      // Exchange the per-block (max, sum) through distributed shared memory.
      // Every block reads all partials in the same order, so all blocks of the
      // row compute bitwise the same (M, S).
      __shared__ float part[2];  // this block's (max, sum), read by the other blocks
      cg::cluster_group cluster = cg::this_cluster();
      if (threadIdx.x == 0) { part[0] = M; part[1] = S; }
      cluster.sync();  // partials visible cluster-wide
      float Mc = T2_NEG_INF;
      for (int r = 0; r < csize; ++r) Mc = fmaxf(Mc, *cluster.map_shared_rank(&part[0], r));
      float Sc = 0.0f;
      for (int r = 0; r < csize; ++r)
        Sc += rescale_sum(*cluster.map_shared_rank(&part[0], r),
                          *cluster.map_shared_rank(&part[1], r), Mc);
      // A block must not overwrite `part` (next row) or exit while a peer may
      // still read it. Instead of a second full cluster.sync() here, arrive now
      // and wait only after the stores below: the barrier latency then hides
      // behind the memory traffic.
      cluster_arrive_release();
      M = Mc;
      S = Sc;
    }
#endif
    const float inv = (S > 0.0f) ? 1.0f / S : 0.0f;
    store_normalised<N, VEC>(v, ys, len, blockDim.x, threadIdx.x, M, inv);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (csize > 1) cluster_wait_acquire();
#endif
  }
}

// ---------------------------------------------------------------------------
// Fallback for rows too long to keep on chip: one block per row, two passes.
// Pass 1 keeps a running (max m, sum s) per thread ("online softmax": when a
// larger value arrives, rescale s by exp(m_old - m_new)). Pass 2 re-reads the
// row (recently read, so largely served from L2) and writes y.
__device__ __forceinline__ void online_update(float xv, float& m, float& s) {
  if (xv > m) {
    s = s * expf(m - xv) + 1.0f;  // exp(-inf) = 0 handles the initial m = -inf
    m = xv;
  } else if (xv != T2_NEG_INF) {
    s += expf(xv - m);
  }
}

template <bool VEC>
__global__ void __launch_bounds__(1024) softmax_twopass_kernel(const float* __restrict__ x,
                                                               float* __restrict__ y,
                                                               int64_t rows, int64_t cols) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xrow = x + row * cols;
    float* yrow = y + row * cols;
    float m = T2_NEG_INF, s = 0.0f;
    if (VEC) {
      for (int64_t c = 4 * (int64_t)threadIdx.x; c < cols; c += 4 * (int64_t)blockDim.x) {
        const float4 q = *reinterpret_cast<const float4*>(xrow + c);
        online_update(q.x, m, s); online_update(q.y, m, s);
        online_update(q.z, m, s); online_update(q.w, m, s);
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) online_update(xrow[c], m, s);
    }
    const float M = block_allreduce(m, MaxOp(), scratch, T2_NEG_INF);
    const float S = block_allreduce(rescale_sum(m, s, M), SumOp(), scratch, 0.0f);
    const float inv = (S > 0.0f) ? 1.0f / S : 0.0f;
    const float ms = (M == T2_NEG_INF) ? 0.0f : M;
    if (VEC) {
      for (int64_t c = 4 * (int64_t)threadIdx.x; c < cols; c += 4 * (int64_t)blockDim.x) {
        const float4 q = *reinterpret_cast<const float4*>(xrow + c);
        float4 o;
        o.x = expf(q.x - ms) * inv; o.y = expf(q.y - ms) * inv;
        o.z = expf(q.z - ms) * inv; o.w = expf(q.w - ms) * inv;
        *reinterpret_cast<float4*>(yrow + c) = o;
      }
    } else {
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        yrow[c] = expf(xrow[c] - ms) * inv;
    }
  }
}

// ---------------------------------------------------------------------------
// Host side: the kit's. It runs in the host library, built from the kit's own copy of this file, and
// every kernel it launches comes from the device module built from yours (kit.cuh: kit::launch).
static const int64_t kMaxGrid = 1 << 20;  // blocks; kernels loop over extra rows
// Cluster path: kClusterThreads threads x 32 values per block, at most kMaxCluster
// blocks per row. Measured on H200: 256-thread blocks (more, smaller blocks per SM,
// so one block's reduction/barrier phase overlaps other blocks' memory traffic)
// beat 512-thread blocks (81% vs 71% of copy bandwidth at 65536 columns), and
// 16-block clusters (262144 columns) were slower than the two-pass kernel, so the
// portable maximum of 8 is used.
static const int kClusterThreads = 256;
static const int kWarpRows = 8;  // rows (warps) per block of the warp kernel
static const int kMaxCluster = 8;
// Larger (non-portable) clusters would need cudaFuncAttributeNonPortableClusterSizeAllowed
// and an occupancy check before use.
static_assert(kMaxCluster >= 2 && kMaxCluster <= 8, "portable cluster sizes are 2..8 blocks");

template <int NV, bool VEC>
static cudaError_t launch_warp(const float* x, float* y, int64_t rows, int64_t cols,
                               cudaStream_t st) {
  const int64_t blocks = (rows + kWarpRows - 1) / kWarpRows;
  return kit::launch(softmax_warp_kernel<NV, VEC>, (unsigned)(blocks < kMaxGrid ? blocks : kMaxGrid), 32 * kWarpRows,
                     0, st, x, y, rows, cols);
}

// Block (csize == 1) or cluster (csize > 1) launch of softmax_block_kernel.
template <int NV, bool VEC>
static cudaError_t launch_block(const float* x, float* y, int64_t rows, int64_t cols, int csize,
                                int threads, cudaStream_t st) {
  // chunk: this block's share of the row, a multiple of 4 so float4s never straddle blocks.
  int64_t chunk = (cols + csize - 1) / csize;
  chunk = (chunk + 3) / 4 * 4;
  const int64_t groups = rows < kMaxGrid ? rows : kMaxGrid;
  if (csize == 1)
    return kit::launch(softmax_block_kernel<NV, VEC>, (unsigned)groups, threads, 0, st, x, y, rows, cols, 1, chunk);
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = csize;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)(groups * csize), 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.stream = st;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return kit::launch_ex(cfg, softmax_block_kernel<NV, VEC>, x, y, rows, cols, csize, chunk);
}

// Largest cluster (in blocks of kClusterThreads threads) we may launch: 0 = no clusters.
// Asked once per device and module (kit::memo).
template <bool VEC>
static int max_cluster_blocks(int dev) {
  return kit::memo(reinterpret_cast<const void*>(&max_cluster_blocks<VEC>), dev, [dev] {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    // The cluster exchange is compiled only for sm_90+; code built for an older
    // virtual arch (PTX JIT-compiled on a newer GPU) must not take that path.
    cudaFuncAttributes fa;
    const bool has_cluster_code =
        kit::attributes(softmax_block_kernel<8, VEC>, &fa) == cudaSuccess && fa.ptxVersion >= 90;
    cudaGetLastError();  // clear any error from the queries above
    return major >= 9 && has_cluster_code ? kMaxCluster : 0;
  });
}

// The path a row length takes (what the dispatch below launches; t2_softmax_path reports it).
enum T2Path { kWarp1, kWarp2, kWarp4, kWarp8, kBlock, kCluster, kTwoPass };

template <bool VEC>
static T2Path choose_path(int64_t cols) {
  if (cols <= 128) return kWarp1;
  if (cols <= 256) return kWarp2;
  if (cols <= 512) return kWarp4;
  if (cols <= 1024) return kWarp8;
  if (cols <= 16384) return kBlock;
  int dev = 0;
  cudaGetDevice(&dev);
  const int64_t per_block = 32 * kClusterThreads;  // values one block holds in registers
  return (cols + per_block - 1) / per_block <= max_cluster_blocks<VEC>(dev) ? kCluster : kTwoPass;
}

template <bool VEC>
static cudaError_t dispatch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t st) {
  switch (choose_path<VEC>(cols)) {
    case kWarp1: return launch_warp<1, VEC>(x, y, rows, cols, st);
    case kWarp2: return launch_warp<2, VEC>(x, y, rows, cols, st);
    case kWarp4: return launch_warp<4, VEC>(x, y, rows, cols, st);
    case kWarp8: return launch_warp<8, VEC>(x, y, rows, cols, st);
    case kBlock: {
      // 16 values per thread; round the thread count up to whole warps.
      int threads = (int)((cols + 15) / 16);
      threads = (threads + 31) / 32 * 32;
      return launch_block<4, VEC>(x, y, rows, cols, 1, threads, st);
    }
    case kCluster: {
      const int64_t per_block = 32 * kClusterThreads;
      return launch_block<8, VEC>(x, y, rows, cols, (int)((cols + per_block - 1) / per_block), kClusterThreads, st);
    }
    default: {
      const int64_t blocks = rows < kMaxGrid ? rows : kMaxGrid;
      return kit::launch(softmax_twopass_kernel<VEC>, (unsigned)blocks, 1024, 0, st, x, y, rows, cols);
    }
  }
}

KIT_API int t2_softmax_forward(void* module, const float* x, float* y, int64_t rows, int64_t cols, void* stream) {
  kit::UseModule use(module);
  if (rows <= 0 || cols <= 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  // Vector path: every row start is 16-byte aligned iff the bases are and cols % 4 == 0.
  const bool vec = (cols % 4 == 0) && ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0);
  return (int)(vec ? dispatch<true>(x, y, rows, cols, st) : dispatch<false>(x, y, rows, cols, st));
}

// Which path a call with this row length takes: 2 * T2Path + (float4 path). The grader's own tests
// use it to prove that their shapes reach every path on the GPU they run on.
KIT_API int t2_softmax_path(void* module, int64_t cols, int vec) {
  kit::UseModule use(module);
  return 2 * (int)(vec ? choose_path<true>(cols) : choose_path<false>(cols)) + (vec ? 1 : 0);
}

#include "kit_sanitize.cuh"  // the scenario's buffers and checks (host code)

// compute-sanitizer's launches (make sanitize, the grader; TaskCode.sanitize names this function): one row
// length per path (warp kernels with 4/8/16/32 values a lane, block, cluster on sm_90, two passes), each with
// aligned (float4) and misaligned (scalar) pointers. Returns the number of failed launches.
KIT_API int t2_sanitize(void* module, int /*variant*/) {
  using kit::sanitize::Buffer;
  const int64_t shapes[][2] = {{37, 33}, {9, 128}, {5, 255}, {3, 512}, {2, 1000}, {2, 4097},
                               {2, 16384}, {2, 16385}, {2, 65536}, {1, 70001}, {1, 262144}};
  int failures = 0;
  for (auto& s : shapes) {
    for (int offset = 0; offset < 2; ++offset) {
      Buffer x(s[0] * s[1], 1, offset), y(s[0] * s[1], 2, offset);
      char what[96];
      std::snprintf(what, sizeof what, "t2 rows %lld cols %lld offset %d", (long long)s[0], (long long)s[1], offset);
      failures += kit::sanitize::check(what, t2_softmax_forward(module, x.ptr, y.ptr, s[0], s[1], nullptr));
    }
  }
  return failures;
}
