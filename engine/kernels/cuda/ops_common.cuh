/* Internal: device helpers of the CUDA reduction, softmax, random and nn kernels: arithmetic
   rounded as the CPU's (never contracted into FMAs), the offsets of a position, warp and block
   reductions in a fixed order, scratch memory. */
#ifndef TLUA_CUDA_OPS_COMMON_CUH
#define TLUA_CUDA_OPS_COMMON_CUH

#include <stdint.h>
#include <string.h>

#include "kernels/cuda/elementwise.cuh" /* tl_elem, tl_cuda_floating, tl_cuda_blocks */
#include "kernels/cuda/ops_launch.h"

/* ---- arithmetic as the CPU does it: each operation rounded on its own ------------------- */
__device__ __forceinline__ float tl_add(float a, float b) {
    return __fadd_rn(a, b);
}
__device__ __forceinline__ double tl_add(double a, double b) {
    return __dadd_rn(a, b);
}
__device__ __forceinline__ float tl_sub(float a, float b) {
    return __fsub_rn(a, b);
}
__device__ __forceinline__ double tl_sub(double a, double b) {
    return __dsub_rn(a, b);
}
__device__ __forceinline__ float tl_mul(float a, float b) {
    return __fmul_rn(a, b);
}
__device__ __forceinline__ double tl_mul(double a, double b) {
    return __dmul_rn(a, b);
}
__device__ __forceinline__ float tl_div(float a, float b) {
    return __fdiv_rn(a, b);
}
__device__ __forceinline__ double tl_div(double a, double b) {
    return __ddiv_rn(a, b);
}
__device__ __forceinline__ float tl_sqrt(float a) {
    return __fsqrt_rn(a);
}
__device__ __forceinline__ double tl_sqrt(double a) {
    return __dsqrt_rn(a);
}
/* expf for float compute (bfloat16/float16/float32), exp for double, as the CPU kernels */
__device__ __forceinline__ float tl_exp(float a) {
    return expf(a);
}
__device__ __forceinline__ double tl_exp(double a) {
    return exp(a);
}

/* ---- positions ------------------------------------------------------------------------------- */
/* Offsets of position j in the first N tensors of p. */
template <int N>
__device__ __forceinline__ void tl_position_offsets(const tl_cuda_positions &p, int64_t j,
                                                    int64_t *off) {
#pragma unroll
    for (int k = 0; k < N; k++) off[k] = 0;
    for (int d = p.ndim - 1; d >= 0; d--) {
        int64_t size = p.shape[d], q = j / size, r = j - q * size;
#pragma unroll
        for (int k = 0; k < N; k++) off[k] += r * p.strides[k][d];
        j = q;
    }
}

/* ---- reductions in a fixed order ------------------------------------------------------------ */
/* v from lane + offset (any trivially copyable type of whole 32-bit words) */
template <typename S> __device__ __forceinline__ S tl_shfl_down(const S &v, int offset) {
    static_assert(sizeof(S) % 4 == 0, "shuffled states are whole words");
    constexpr int W = (int)(sizeof(S) / 4);
    int w[W];
    memcpy(w, &v, sizeof(S));
#pragma unroll
    for (int i = 0; i < W; i++) w[i] = __shfl_down_sync(0xffffffffu, w[i], offset);
    S out;
    memcpy(&out, w, sizeof(S));
    return out;
}

/* v of lane 0 of the warp */
template <typename S> __device__ __forceinline__ S tl_shfl_idx0(const S &v) {
    constexpr int W = (int)(sizeof(S) / 4);
    int w[W];
    memcpy(w, &v, sizeof(S));
#pragma unroll
    for (int i = 0; i < W; i++) w[i] = __shfl_sync(0xffffffffu, w[i], 0);
    S out;
    memcpy(&out, w, sizeof(S));
    return out;
}

/* A tree over the 32 lanes of a warp (all active): lane 0 gets merge of every lane's s. */
template <typename S, typename M> __device__ __forceinline__ S tl_warp_reduce(S s, M merge) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) s = merge(s, tl_shfl_down(s, offset));
    return s;
}

/* Merges of the reductions below, summing in double: one sum, or two side by side (a, b). */
struct tl_sum_merge {
    __device__ double operator()(double a, double b) const { return a + b; }
};
struct tl_sum2 {
    double a, b;
};
struct tl_sum2_merge {
    __device__ tl_sum2 operator()(tl_sum2 x, tl_sum2 y) const {
        return tl_sum2{x.a + y.a, x.b + y.b};
    }
};

/* The same over the whole block (blockDim.x a multiple of 32, at most 1024; every thread
   calls it): thread 0 gets the result. smem holds 32 states. identity is merge's neutral
   element. Ends with a barrier, so smem may be reused at once. */
template <typename S, typename M>
__device__ __forceinline__ S tl_block_reduce(S s, M merge, S identity, S *smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    s = tl_warp_reduce(s, merge);
    if (warps == 1) return s;
    if (lane == 0) smem[warp] = s;
    __syncthreads();
    if (warp == 0) s = tl_warp_reduce(lane < warps ? smem[lane] : identity, merge);
    __syncthreads();
    return s;
}

/* The reduction of each group of G consecutive threads (G = 32 or blockDim.x): the group's first
   thread gets the result; the broadcast version gives it to every thread of the group. */
template <typename S, typename M>
__device__ __forceinline__ S tl_group_reduce(S s, M merge, S identity, S *smem, int group) {
    return group == 32 ? tl_warp_reduce(s, merge) : tl_block_reduce(s, merge, identity, smem);
}
template <typename S, typename M>
__device__ __forceinline__ S tl_group_allreduce(S s, M merge, S identity, S *smem, int group) {
    s = tl_group_reduce(s, merge, identity, smem, group);
    if (group == 32) return tl_shfl_idx0(s);
    if (threadIdx.x == 0) smem[0] = s;
    __syncthreads();
    s = smem[0];
    __syncthreads();
    return s;
}

/* ---- rows of a group of threads each ------------------------------------------------------ */
/* The rows a block takes, grid-stride, a group of G consecutive threads per row (G = 32 or
   blockDim.x): body(r, valid) for each of this thread's rows r, with valid false past the last
   row. Every thread of a group makes the same calls, so the body may reduce over its group
   (tl_group_reduce); the thread's place in its group is threadIdx.x % group. */
template <typename F>
__device__ __forceinline__ void tl_for_each_group_row(int64_t rows, int group, F body) {
    const int per_block = (int)blockDim.x / group;
    for (int64_t first = (int64_t)blockIdx.x * per_block; first < rows;
         first += (int64_t)gridDim.x * per_block) {
        const int64_t r = first + (int)threadIdx.x / group;
        body(r, r < rows);
    }
}

/* ---- random streams -------------------------------------------------------------------- */
/* The stream (seed, counter) an op reserved, as the device's generator correction turns it
   (tl_cuda_rng_cell: zeros, except while a CUDA graph replays kernels captured with a stream
   counted from the capture's first block). */
__device__ __forceinline__ void tl_rng_corrected(const uint64_t *cell, uint64_t &seed,
                                                 uint64_t &counter) {
    seed ^= cell[0];
    counter += cell[1];
}

/* ---- scratch memory of the device, given back after the launches that use it -------------- */
struct tl_cuda_scratch {
    int device = -1;
    void *ptr = nullptr;
    tl_status get(const tl_cuda_where &at, size_t bytes) {
        device = at.device;
        return tl_cuda_malloc(at.device, bytes, at.op, &ptr);
    }
    /* bytes of scratch whose first host_bytes are a copy of host (descriptors built on the
       host): tl_cuda_stage on at's stream, so nothing waits (and a graph keeps the bytes); what
       names the copy in errors */
    tl_status stage(const tl_cuda_where &at, size_t bytes, const void *host, size_t host_bytes,
                    const char *what) {
        TL_TRY(get(at, bytes));
        return tl_cuda_stage(at.device, at.stream, ptr, host, host_bytes, at.op, what);
    }
    ~tl_cuda_scratch() {
        if (ptr) tl_cuda_free(device, ptr);
    }
};

/* At most a few waves of blocks; grid-stride loops cover the rest. */
static inline unsigned tl_cuda_grid(int64_t blocks, int sm_count, int per_sm = 32) {
    int64_t cap = (int64_t)sm_count * per_sm;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks > 0 ? blocks : 1);
}

static inline int64_t tl_ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

#endif
