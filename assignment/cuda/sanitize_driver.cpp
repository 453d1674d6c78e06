// A small host program that loads a task's device module (the student's cubin) into the kit's host library
// for that file and launches its kernels on shapes that reach every path of the kit's host code, so
// compute-sanitizer can check them without starting Python and PyTorch under the sanitizer (minutes ->
// seconds).
//
//   sanitize_driver t2 <host.so> <module.cubin>          softmax: every row-length path, float4 and scalar
//   sanitize_driver t3 <host.so> <module.cubin>          GEMM: every tile configuration and transpose, both loaders
//   sanitize_driver t4 <host.so> <module.cubin> <0|1>    FlashAttention, non-causal (0) or causal (1), with
//                                                        grouped-query shapes (K and V with fewer heads than Q)
//   sanitize_driver t6 <host.so> <module.cubin>          decode attention: every head-per-warp configuration,
//                                                        group chunks, empty splits, per-row / broadcast / int64
//                                                        lengths
//
// Buffers are exactly the size a call may touch (cudaMalloc each), so a read or write one element
// past them is an error memcheck reports. Exit code: 0 when every launch returned success.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

// The host library's exports: those that launch take the device module first.
typedef int (*load_fn)(const void*, void**);
typedef int (*softmax_fn)(void*, const float*, float*, int64_t, int64_t, void*);
typedef int (*gemm_fn)(void*, const float*, const float*, float*, int, int, int, int, int, int, int64_t, int64_t,
                       int64_t, float, void*);
typedef int (*flash_fn)(void*, const float*, const float*, const float*, float*, float*, int, int, int, int, int,
                        int, float, int, void*);
typedef int (*decode_fn)(void*, const float*, const float*, const float*, const void*, int, int, float*, float*,
                         float*, int, int, int, int, int, int, float, void*);
typedef int (*splits_fn)(void*, int, int, int, int, int);
typedef long long (*workspace_fn)(int, int, int, int);

static void* module = nullptr;  // the student's device module, loaded into the host library

// A device buffer of n floats holding deterministic pseudo-random values in [-1, 1) (never zeros).
// `offset` floats are allocated in front and skipped, to hand the kernels a pointer that is not
// 16-byte aligned (their scalar paths).
struct Buffer {
  float* base = nullptr;
  float* ptr = nullptr;
  Buffer(size_t n, unsigned seed, int offset = 0) {
    std::vector<float> host(n + offset);
    unsigned state = seed * 2654435761u + 12345u;
    for (auto& x : host) {
      state = state * 1664525u + 1013904223u;
      x = (float)((state >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    cudaMalloc(&base, (n + offset) * sizeof(float));
    cudaMemcpy(base, host.data(), (n + offset) * sizeof(float), cudaMemcpyHostToDevice);
    ptr = base + offset;
  }
  ~Buffer() { cudaFree(base); }
};

static int report(const char* what, int status) {
  cudaError_t sync = cudaDeviceSynchronize();
  if (status != 0 || sync != cudaSuccess) {
    std::fprintf(stderr, "%s: status %d, sync %s\n", what, status, cudaGetErrorString(sync));
    return 1;
  }
  return 0;
}

static int run_t2(void* lib) {
  auto softmax = (softmax_fn)dlsym(lib, "t2_softmax_forward");
  if (!softmax) return std::fprintf(stderr, "t2_softmax_forward not exported\n"), 2;
  // One shape per path: warp kernels with 4/8/16/32 values a lane, block, cluster (sm_90), two passes.
  const int64_t shapes[][2] = {{37, 33}, {9, 128}, {5, 255}, {3, 512}, {2, 1000}, {2, 4097},
                               {2, 16384}, {2, 16385}, {2, 65536}, {1, 70001}, {1, 262144}};
  int failures = 0;
  for (auto& s : shapes) {
    for (int offset = 0; offset < 2; ++offset) {  // aligned (float4) and misaligned (scalar) pointers
      Buffer x(s[0] * s[1], 1, offset), y(s[0] * s[1], 2, offset);
      char what[96];
      std::snprintf(what, sizeof what, "t2 rows %lld cols %lld offset %d", (long long)s[0], (long long)s[1], offset);
      failures += report(what, softmax(module, x.ptr, y.ptr, s[0], s[1], nullptr));
    }
  }
  return failures;
}

static int run_t3(void* lib) {
  auto gemm = (gemm_fn)dlsym(lib, "t3_gemm_batched");
  if (!gemm) return std::fprintf(stderr, "t3_gemm_batched not exported\n"), 2;
  // batch, M, N, K: big 128x128 tiles, 256x64, 128x64 and 64x64 (for 108-132 SMs), aligned and not.
  // K is small: the configuration depends on M, N and the batch, and racecheck is slow per k step.
  const int shapes[][4] = {{3, 772, 772, 20}, {3, 771, 769, 19}, {36, 2048, 64, 8}, {36, 2047, 63, 7},
                           {70, 200, 40, 8}, {70, 201, 39, 7}, {2, 64, 128, 36}, {1, 33, 17, 5}};
  int failures = 0;
  for (auto& s : shapes) {
    const int batch = s[0], M = s[1], N = s[2], K = s[3];
    for (int t = 0; t < 4; ++t) {
      const int ta = t & 1, tb = t >> 1;
      Buffer a((size_t)batch * M * K, 3), b((size_t)batch * K * N, 4), c((size_t)batch * M * N, 5);
      char what[96];
      std::snprintf(what, sizeof what, "t3 batch %d M %d N %d K %d ta %d tb %d", batch, M, N, K, ta, tb);
      failures += report(what, gemm(module, a.ptr, b.ptr, c.ptr, batch, M, N, K, ta, tb, (int64_t)M * K, (int64_t)K * N,
                                    (int64_t)M * N, 1.5f, nullptr));
    }
  }
  return failures;
}

// K and V hold H_kv heads (H % H_kv == 0): a kernel that reads a query head's own index into them
// instead of its KV head's runs past their end, which memcheck reports.
static int run_flash(flash_fn flash, int B, int H, int H_kv, int Lq, int Lk, int d, int causal) {
  Buffer q((size_t)B * H * Lq * d, 6), k((size_t)B * H_kv * Lk * d, 7), v((size_t)B * H_kv * Lk * d, 8);
  Buffer o((size_t)B * H * Lq * d, 9), lse((size_t)B * H * Lq, 10);
  char what[112];
  std::snprintf(what, sizeof what, "t4 B %d H %d H_kv %d Lq %d Lk %d d %d causal %d", B, H, H_kv, Lq, Lk, d, causal);
  return report(what, flash(module, q.ptr, k.ptr, v.ptr, o.ptr, lse.ptr, B, H, H_kv, Lq, Lk, d, 0.125f, causal, nullptr));
}

static int run_t4(void* lib, int causal) {
  auto flash = (flash_fn)dlsym(lib, "t4_flash_attention_forward");
  if (!flash) return std::fprintf(stderr, "t4_flash_attention_forward not exported\n"), 2;
  int failures = 0;
  const int dims[] = {32, 64, 128};
  for (int d : dims) {
    failures += run_flash(flash, 1, 2, 1, 70, 90, d, causal);     // multi-query: one KV head
    failures += run_flash(flash, 1, 1, 1, 90, 37, d, causal);
    failures += run_flash(flash, 2, 1, 1, 129, 129, d, causal);
    failures += run_flash(flash, 2, 6, 2, 33, 65, d, causal);     // groups of 3 query heads, two batches
  }
  // A grid large enough for the reference's 128-row tiles at d = 64 (it picks tiles by grid size),
  // with groups of 4 query heads as in Llama 3.
  failures += run_flash(flash, 16, 16, 4, 257, 200, 64, causal);
  return failures;
}

// The cache holds L_max positions; lengths (int32 or int64, one per row or one for all) are at most L_max.
// n_splits 0: the kit's choice. Everything, the workspace included, is allocated to its exact size.
static int run_decode(void* lib, int B, int H, int H_kv, int L_max, int d, std::vector<long long> lengths, bool int64,
                      int n_splits) {
  auto decode = (decode_fn)dlsym(lib, "t6_decode_attention");
  auto splits = (splits_fn)dlsym(lib, "t6_decode_num_splits");
  auto workspace = (workspace_fn)dlsym(lib, "t6_decode_workspace_floats");
  if (!decode || !splits || !workspace) return std::fprintf(stderr, "t6 exports missing\n"), 2;
  const int n = n_splits > 0 ? n_splits : splits(module, B, H, H_kv, L_max, d);
  if (n <= 0) return std::fprintf(stderr, "t6_decode_num_splits returned %d\n", n), 1;
  Buffer q((size_t)B * H * d, 11), k((size_t)B * H_kv * L_max * d, 12), v((size_t)B * H_kv * L_max * d, 13);
  Buffer o((size_t)B * H * d, 14), lse((size_t)B * H, 15), ws((size_t)workspace(B, H, d, n), 16);
  const size_t bytes = lengths.size() * (int64 ? sizeof(long long) : sizeof(int));
  std::vector<int> narrow(lengths.begin(), lengths.end());
  void* len = nullptr;
  cudaMalloc(&len, bytes);
  cudaMemcpy(len, int64 ? (const void*)lengths.data() : (const void*)narrow.data(), bytes, cudaMemcpyHostToDevice);
  char what[128];
  std::snprintf(what, sizeof what, "t6 B %d H %d H_kv %d L_max %d d %d lengths[0] %lld (%zu, %s) splits %d", B, H,
                H_kv, L_max, d, lengths[0], lengths.size(), int64 ? "int64" : "int32", n);
  const int status = decode(module, q.ptr, k.ptr, v.ptr, len, int64 ? 1 : 0, lengths.size() > 1 ? 1 : 0, o.ptr, lse.ptr,
                            ws.ptr, B, H, H_kv, L_max, d, n, 0.125f, nullptr);
  const int failed = report(what, status);
  cudaFree(len);
  return failed;
}

static int run_t6(void* lib) {
  int failures = 0;
  const int dims[] = {32, 64, 128};
  for (int d : dims) {
    failures += run_decode(lib, 2, 8, 2, 300, d, {300, 1}, false, 0);      // groups of 4, a full cache
    failures += run_decode(lib, 1, 4, 4, 100, d, {37}, false, 7);         // multi-head, empty splits
    failures += run_decode(lib, 3, 12, 2, 64, d, {64, 0, 33}, true, 0);   // groups of 6, a row of length 0
    failures += run_decode(lib, 1, 32, 1, 129, d, {129}, false, 3);       // 32 heads per KV head: two blocks
    failures += run_decode(lib, 2, 8, 8, 70, d, {65}, true, 0);           // one int64 length for both rows
  }
  return failures;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s t2|t3|t4|t6 <host.so> <module.cubin> [causal 0|1]\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  std::ifstream file(argv[3], std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto load = (load_fn)dlsym(lib, "kit_module_load");
  if (image.empty() || !load) return std::fprintf(stderr, "cannot read %s or load it\n", argv[3]), 2;
  const int loaded = load(image.data(), &module);
  if (loaded != 0) return std::fprintf(stderr, "loading %s: %s\n", argv[3], cudaGetErrorString((cudaError_t)loaded)), 2;
  int failures;
  if (!std::strcmp(argv[1], "t2")) failures = run_t2(lib);
  else if (!std::strcmp(argv[1], "t3")) failures = run_t3(lib);
  else if (!std::strcmp(argv[1], "t4")) failures = run_t4(lib, argc > 4 ? std::atoi(argv[4]) : 0);
  else if (!std::strcmp(argv[1], "t6")) failures = run_t6(lib);
  else return std::fprintf(stderr, "unknown task %s\n", argv[1]), 2;
  std::printf("%d launches failed\n", failures);
  return failures ? 1 : 0;
}
