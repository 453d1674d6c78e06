// kit.cuh: the few definitions every task's CUDA file shares.
//
// A task's .cu file is built twice, never mixing the two builds:
//   * the DEVICE MODULE: the file with the student's TODO regions, compiled to a cubin (device code only:
//     nothing of it can run on the host) and loaded at run time with cudaLibraryLoadData;
//   * the HOST LIBRARY: the kit's own copy of the file (its regions are the kit's), compiled into a shared
//     library whose KIT_API functions the Python side calls with ctypes. They return a cudaError_t as int
//     (0 on success) and take the device module as their first argument: every kernel they launch is looked
//     up in that module by name (kit::launch below), so the host code is always the kit's and the kernels
//     are always the module's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define KIT_API extern "C" __attribute__((visibility("default")))

// A TODO region of a starter file. The Python loader refuses to launch a
// kernel whose task still has KIT_TODO in its source and raises
// NotImplementedError("tN: ..."), so this trap is only a last line of defence
// (for instance if a file is compiled and launched by hand).
#define KIT_TODO(task) __trap()

static inline unsigned kit_ceil_div(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

// Device helpers the attention kernels (t4/t5, t6) share: kit code, usable in the TODO regions.
namespace kit {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// 2^x with the hardware's approximate exp2 (flushes denormals): scores pre-scaled by log2(e) use it for e^x.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// cp.async: 16-byte (or 4-byte) global -> shared copy, zero-filled where src_bytes is 0 (rows past the end).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, int src_bytes) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- tensor cores (t8): mma.sync, ldmatrix and packing, so that no TODO region needs inline assembly.
// Only a file that defines KIT_TENSOR_CORES before it includes this header has them: a TODO region of an fp32
// task cannot reach the tensor cores through the kit's helpers (and no region can define a macro).
#ifdef KIT_TENSOR_CORES
//
// Element types: T is __half (fp16) or __nv_bfloat16 (bf16); both are 2 bytes, and the instructions below move
// them two to a 32-bit register, the element with the lower column (or k) index in the low 16 bits.
// Lane numbering inside a warp: lane = 4 * g + t, g = lane / 4 (the "group", 0..7), t = lane % 4 (0..3).

// The shared-memory address (a 32-bit offset in the shared window) of a pointer into shared memory: what
// ldmatrix takes. Adding a byte offset to it is cheaper than converting a new pointer.
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// Two fp32 values rounded (to nearest even) into one register of two T: lo in bits 0..15, hi in bits 16..31.
// This is how a thread turns its pair of fp32 accumulator values (c[0], c[1] below) into one A-operand register.
template <class T>
__device__ __forceinline__ uint32_t pack_f32x2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack_f32x2<__half>(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));  // the first source goes to the upper half
    return r;
}
template <>
__device__ __forceinline__ uint32_t pack_f32x2<__nv_bfloat16>(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// d += A B on the tensor cores, one warp: A 16 x 16 (T), B 16 x 8 (T), d 16 x 8 (fp32).
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32. Every lane holds a fixed piece of each operand
// ("fragments"; g, t as above; [r][c] is row r, column c; a register holds two neighbouring columns):
//
//   A (16 x 16, rows m, columns k)   a[0] = A[g][2t, 2t+1]     a[2] = A[g][2t+8, 2t+9]
//                                    a[1] = A[g+8][2t, 2t+1]   a[3] = A[g+8][2t+8, 2t+9]
//       (the four 8 x 8 quarters of A: a[0] top-left, a[1] bottom-left, a[2] top-right, a[3] bottom-right)
//   B (16 x 8, rows k, columns n)    b[0] = B[2t, 2t+1][g]     b[1] = B[2t+8, 2t+9][g]
//       (lane g*4+t holds column g of B: B is "col", each register two neighbouring k of one column)
//   d (16 x 8 fp32)                  d[0], d[1] = D[g][2t, 2t+1]    d[2], d[3] = D[g+8][2t, 2t+1]
//
//   So a row of d (or of A) is spread over the 4 lanes of a quad (lanes 4g .. 4g+3): a reduction along a row
//   is two __shfl_xor_sync steps (lane masks 1 and 2). And the d layout of two neighbouring n-blocks
//   (columns 0..7 and 8..15) is exactly the A layout of one 16 x 16 tile: d0[0..1] -> a[0], d0[2..3] -> a[1],
//   d1[0..1] -> a[2], d1[2..3] -> a[3] (after pack_f32x2), so a product can feed the next mma from registers.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                     uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                            uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8 x 8 matrices of 2-byte elements from shared memory, one warp.
// Lanes 8i .. 8i+7 give the addresses of the 8 rows of matrix i (16 contiguous bytes each, 16-byte aligned);
// afterwards r[i] of lane 4g + t holds row g, elements 2t and 2t+1, of matrix i.
// Which lane points where decides which quarter of a 16 x 16 block (rows of 16 elements = two 16-byte chunks)
// lands in which register. Two rules serve every operand of t8:
//   * "A order", lane L -> row L % 16, chunk L / 16: r[0..3] = top-left, bottom-left, top-right, bottom-right.
//     On a row-major A (Q rows x d) that is the A fragment a[0..3] itself; on V through ldmatrix_x4_trans, below.
//   * "B order", lane L -> row L % 8 + 8 (L / 16), chunk (L / 8) % 2: r[0..3] = top-left, top-right, bottom-left,
//     bottom-right. On a block of K (16 keys x 16 of d, K row-major: B = K^T is "col") it gives the B fragments
//     of two n-blocks of S = Q K^T: keys 0..7: b0 = r[0], b1 = r[1]; keys 8..15: b0 = r[2], b1 = r[3].
// (mma reads its B operand from two consecutive registers: an order that gave b0, b1 in r[0], r[2] would cost
// two register moves per mma.)
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
// The same with each matrix transposed: r[i] of lane 4g + t holds column g, rows 2t and 2t+1, of matrix i. In A order
// on a 16 x 16 block of V (16 keys x 16 of d, V row-major) it gives the B fragments of two n-blocks of
// O += P V (B = V, k = keys): d columns 0..7: b0 = r[0], b1 = r[1]; columns 8..15: b0 = r[2], b1 = r[3].
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
// Two matrices (lanes 0..15 give the addresses; lanes 16..31 must still pass a valid shared address).
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}
#endif  // KIT_TENSOR_CORES

}  // namespace kit

// --------------------------------------------------------------------------- the host side (the kit's)
//
// Only the host library runs this: in the device module these functions are parsed and dropped.
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace kit {

// A loaded device module: the cubin's kernels, looked up once each by the name of the kit's kernel of the
// same template instance, and what the host code remembers per device about them (kit::memo).
struct Module {
    cudaLibrary_t library = nullptr;
    std::mutex lock;
    std::unordered_map<const void*, cudaKernel_t> kernels;  // the kit's kernel (host stub) -> the module's
    std::map<std::pair<const void*, int>, int> memo;        // (key, device) -> value
};

// The module the exported function running on this thread was given (kit::UseModule).
inline thread_local Module* current_module = nullptr;

// Every KIT_API function that launches opens with one: the module its launches come from, for this call.
struct UseModule {
    Module* previous;
    explicit UseModule(void* module) : previous(current_module) { current_module = static_cast<Module*>(module); }
    ~UseModule() { current_module = previous; }
    UseModule(const UseModule&) = delete;
    UseModule& operator=(const UseModule&) = delete;
};

// The current module's kernel that has the name of the kit's kernel `kit_kernel` (the same template
// instance of the same source): both files are the kit's outside the TODO regions, so the names agree.
inline cudaError_t module_kernel(const void* kit_kernel, cudaKernel_t* out) {
    Module* module = current_module;
    if (module == nullptr || module->library == nullptr) return cudaErrorInvalidResourceHandle;
    std::lock_guard<std::mutex> guard(module->lock);
    auto found = module->kernels.find(kit_kernel);
    if (found != module->kernels.end()) {
        *out = found->second;
        return cudaSuccess;
    }
    const char* name = nullptr;
    cudaError_t e = cudaFuncGetName(&name, kit_kernel);
    if (e == cudaSuccess) e = cudaLibraryGetKernel(out, module->library, name);
    if (e != cudaSuccess) return e;
    module->kernels.emplace(kit_kernel, *out);
    return cudaSuccess;
}

template <class... P>
inline cudaError_t module_kernel(void (*kernel)(P...), cudaKernel_t* out) {
    return module_kernel(reinterpret_cast<const void*>(kernel), out);
}

// The arguments of a launch, converted to the kernel's own parameter types (its signature is known from
// the kit's kernel, so a launch cannot pass an int where the kernel reads an int64_t).
template <class... P>
struct Arguments {
    std::tuple<std::decay_t<P>...> values;
    void* pointers[sizeof...(P) + 1];
    template <class... A>
    explicit Arguments(A&&... args) : values(static_cast<std::decay_t<P>>(std::forward<A>(args))...) {
        fill(std::index_sequence_for<P...>{});
    }
    template <std::size_t... I>
    void fill(std::index_sequence<I...>) {
        ((pointers[I] = static_cast<void*>(&std::get<I>(values))), ...);
        pointers[sizeof...(P)] = nullptr;
    }
    Arguments(const Arguments&) = delete;
    Arguments& operator=(const Arguments&) = delete;
};

// kernel<<<grid, block, smem, stream>>>(args...), with the current module's kernel.
template <class... P, class... A>
inline cudaError_t launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "kit::launch: one argument per kernel parameter");
    cudaKernel_t k;
    cudaError_t e = module_kernel(kernel, &k);
    if (e != cudaSuccess) return e;
    Arguments<P...> arguments(std::forward<A>(args)...);
    return cudaLaunchKernel(reinterpret_cast<const void*>(k), grid, block, arguments.pointers, smem, stream);
}

// cudaLaunchKernelEx(config, kernel, args...) (clusters, programmatic dependent launch), likewise.
template <class... P, class... A>
inline cudaError_t launch_ex(const cudaLaunchConfig_t& config, void (*kernel)(P...), A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "kit::launch_ex: one argument per kernel parameter");
    cudaKernel_t k;
    cudaError_t e = module_kernel(kernel, &k);
    if (e != cudaSuccess) return e;
    Arguments<P...> arguments(std::forward<A>(args)...);
    return cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(k), arguments.pointers);
}

// cudaFuncSetAttribute, cudaFuncGetAttributes and the occupancy query, on the current module's kernel.
template <class... P>
inline cudaError_t set_attribute(void (*kernel)(P...), cudaFuncAttribute attribute, int value) {
    cudaKernel_t k;
    cudaError_t e = module_kernel(kernel, &k);
    return e != cudaSuccess ? e : cudaFuncSetAttribute(reinterpret_cast<const void*>(k), attribute, value);
}
template <class... P>
inline cudaError_t attributes(void (*kernel)(P...), cudaFuncAttributes* out) {
    cudaKernel_t k;
    cudaError_t e = module_kernel(kernel, &k);
    return e != cudaSuccess ? e : cudaFuncGetAttributes(out, reinterpret_cast<const void*>(k));
}
template <class... P>
inline cudaError_t occupancy(int* blocks_per_sm, void (*kernel)(P...), int threads, size_t smem) {
    cudaKernel_t k;
    cudaError_t e = module_kernel(kernel, &k);
    return e != cudaSuccess ? e : cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                                      blocks_per_sm, reinterpret_cast<const void*>(k), threads, smem);
}

// What the host code remembers about the current module on one device (an attribute already set, a
// capability): `compute()` runs the first time (key, device) is asked for, under no lock, and a value it
// returns below zero (an error) is not remembered. A module of its own, so a student's build and the
// reference's, loaded side by side, never share what was set up for the other.
template <class F>
inline int memo(const void* key, int device, F compute) {
    Module* module = current_module;
    if (module == nullptr) return compute();
    {
        std::lock_guard<std::mutex> guard(module->lock);
        auto found = module->memo.find({key, device});
        if (found != module->memo.end()) return found->second;
    }
    const int value = compute();
    if (value >= 0) {
        std::lock_guard<std::mutex> guard(module->lock);
        module->memo[{key, device}] = value;
    }
    return value;
}

}  // namespace kit

// Load a cubin (the bytes of a device module built by the kit) into a module handle for the functions above.
KIT_API int kit_module_load(const void* image, void** module) {
    if (image == nullptr || module == nullptr) return (int)cudaErrorInvalidValue;
    kit::Module* loaded = new kit::Module();
    cudaError_t e = cudaLibraryLoadData(&loaded->library, image, nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (e != cudaSuccess) {
        delete loaded;
        return (int)e;
    }
    *module = loaded;
    return 0;
}

KIT_API int kit_module_unload(void* module) {
    kit::Module* loaded = static_cast<kit::Module*>(module);
    if (loaded == nullptr) return 0;
    const cudaError_t e = cudaLibraryUnload(loaded->library);
    delete loaded;
    return (int)e;
}

// The runtime's text for a code this library returned.
KIT_API const char* kit_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

// The grader compiles device printf out of a student's module (KIT_DEVICE_PRINTF=off, compiler.py): a debugging
// printf left in a kernel then costs neither time nor output. Last in this header, after <cstdio> (which would
// #undef it; a task file's later includes find it already included), and only where device code is compiled.
#include <cstdio>
#if defined(KIT_NO_DEVICE_PRINTF) && defined(__CUDA_ARCH__)
#define printf(...) (0)
#endif
