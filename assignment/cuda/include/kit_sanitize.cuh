// kit_sanitize.cuh: what the tasks' sanitizer scenarios share (host code, the kit's).
//
// A CUDA task's file holds its own scenario, beside its KIT_API forward function in the host part:
//
//     KIT_API int t4_sanitize(void* module, int variant)
//
// launches the task's kernels through the file's KIT_API functions (with `module`, the student's device
// module) on shapes that reach every path of the kit's host code, each buffer allocated to exactly the
// size a call may touch (a read or write one element past it is an error memcheck reports), and returns
// how many launches failed (a failing launch also says so on stderr). `variant` is the task's own choice
// (t4/t5: causal or not); 0 where a task has one scenario. The task's TaskCode names the function
// (assignment/tasks: Sanitize), and assignment/cuda/sanitize_driver.cpp calls it under compute-sanitizer.
// Like the rest of the host code, it runs only in the host library: the device module parses and drops it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <vector>

namespace kit {
namespace sanitize {

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
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
};

// A device copy of `bytes` bytes of host memory (lengths, indices), exactly their size.
struct DeviceCopy {
    void* ptr = nullptr;
    DeviceCopy(const void* host, size_t bytes) {
        cudaMalloc(&ptr, bytes);
        cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice);
    }
    ~DeviceCopy() { cudaFree(ptr); }
    DeviceCopy(const DeviceCopy&) = delete;
    DeviceCopy& operator=(const DeviceCopy&) = delete;
};

// 1 (and a line on stderr naming the launch) when the call returned an error or the device did; else 0.
inline int check(const char* what, int status) {
    const cudaError_t sync = cudaDeviceSynchronize();
    if (status != 0 || sync != cudaSuccess) {
        std::fprintf(stderr, "%s: status %d, sync %s\n", what, status, cudaGetErrorString(sync));
        return 1;
    }
    return 0;
}

// One launch of a two-byte attention forward (t8's and t9's KIT_API signature) on its own exactly-sized buffers:
// q, o (B, H, Lq, d), k, v (B, H_kv, Lk, d) of fp16/bf16 as arbitrary bit patterns (memory and races do not depend
// on the values; n two-byte elements are n / 2 floats, n even since d is), lse (B, H, Lq) fp32. 1 if it failed.
template <class Forward>
int attention_launch(const char* task, Forward forward, void* module, int B, int H, int H_kv, int Lq, int Lk, int d,
                     int causal, int bf16) {
    Buffer q((size_t)B * H * Lq * d / 2, 6), k((size_t)B * H_kv * Lk * d / 2, 7);
    Buffer v((size_t)B * H_kv * Lk * d / 2, 8), o((size_t)B * H * Lq * d / 2, 9), lse((size_t)B * H * Lq, 10);
    char what[128];
    std::snprintf(what, sizeof what, "%s B %d H %d H_kv %d Lq %d Lk %d d %d causal %d bf16 %d", task, B, H, H_kv, Lq,
                  Lk, d, causal, bf16);
    return check(what, forward(module, q.ptr, k.ptr, v.ptr, o.ptr, lse.ptr, B, H, H_kv, Lq, Lk, d, 0.125f, causal,
                               bf16, nullptr));
}

}  // namespace sanitize
}  // namespace kit
