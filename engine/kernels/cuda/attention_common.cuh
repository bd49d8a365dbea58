/* CUDA attention, what the tensor-core path (attention_mma.cu) and the plain path with the entry
   points (attention.cu) share: operand slots, the dropout rule, strided row access, tile loads. */
#ifndef TLUA_KERNELS_CUDA_ATTENTION_COMMON_CUH
#define TLUA_KERNELS_CUDA_ATTENTION_COMMON_CUH

#include <math.h>

#include "kernels/cuda/ops_launch.h"
#include "kernels/kernel.h"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/philox.h"

/* The [B, H, rows, D] operands (kernels/kernel.h's attention): q, out, grad_out and grad_q have
   T rows, k, v, grad_k and grad_v S rows. */
enum {
    TL_CUDA_ATT_Q,
    TL_CUDA_ATT_K,
    TL_CUDA_ATT_V,
    TL_CUDA_ATT_OUT,
    TL_CUDA_ATT_GRAD_OUT,
    TL_CUDA_ATT_GRAD_Q,
    TL_CUDA_ATT_GRAD_K,
    TL_CUDA_ATT_GRAD_V,
    TL_CUDA_ATT_OPERANDS
};

/* One attention forward (q, k, v -> out, lse) or backward (grad_out, q, k, v, out, lse ->
   grad_q, grad_k, grad_v, any NULL when not wanted; delta scratch). data[i] NULL for an operand
   the call does not have; stride[i] = its strides of dims b, h and row in elements (the last
   dim's is 1). lse and delta are contiguous [B, H, T], float32 (float64 for float64). Dropout
   keeps element e = ((b H + h) T + i) S + j when tl_philox_uniform_f32(seed, counter, e) >=
   dropout, scaled by 1 / (1 - dropout). */
typedef struct tl_cuda_attention {
    tl_cuda_where at;
    int dtype; /* TL_CUDA_* */
    int64_t B, H, T, S, D;
    void *data[TL_CUDA_ATT_OPERANDS];
    int64_t stride[TL_CUDA_ATT_OPERANDS][3];
    void *lse, *delta;
    double scale, dropout;
    bool causal, cudnn;
    uint64_t seed, counter;
} tl_cuda_attention;

namespace {

enum {
    Q = TL_CUDA_ATT_Q,
    K = TL_CUDA_ATT_K,
    V = TL_CUDA_ATT_V,
    OUT = TL_CUDA_ATT_OUT,
    GRAD_OUT = TL_CUDA_ATT_GRAD_OUT,
    GRAD_Q = TL_CUDA_ATT_GRAD_Q,
    GRAD_K = TL_CUDA_ATT_GRAD_K,
    GRAD_V = TL_CUDA_ATT_GRAD_V,
};

constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;
constexpr int MAX_GRID_Y = 65535;

/* ---- dropout ------------------------------------------------------------------------------
   Element e is kept when tl_philox_uniform_f32(seed, counter, e) = (w >> 8) 2^-24 >= p, w its
   Philox word: (w >> 8) >= ceil(p 2^24) (exact in double), that is w >= threshold =
   ceil(p 2^24) 2^8. threshold 0: all kept (no dropout); p >= 1 keeps (almost) none, and its
   scale is 0 anyway. */
struct Dropout {
    uint64_t seed, counter;
    uint32_t threshold;
    const uint64_t *rng_cell; /* the device's generator correction (tl_rng_corrected) */
    /* Philox block `block` of the stream, as the correction turns it */
    __device__ __forceinline__ tl_philox_block philox(uint64_t block) const {
        uint64_t s = seed, c = counter;
        tl_rng_corrected(rng_cell, s, c);
        return tl_philox(c + block, s);
    }
    __device__ __forceinline__ bool keep(uint64_t e) const {
        const tl_philox_block b = philox(e / 4);
        return b.w[e % 4] >= threshold;
    }
    /* the keep bits of the 4 elements of Philox block `block` (bit w: element 4 block + w) */
    __device__ __forceinline__ uint32_t keep4(uint64_t block) const {
        const tl_philox_block b = philox(block);
        return (uint32_t)(b.w[0] >= threshold) | (uint32_t)(b.w[1] >= threshold) << 1 |
               (uint32_t)(b.w[2] >= threshold) << 2 | (uint32_t)(b.w[3] >= threshold) << 3;
    }
    /* elements e and e + 1, one Philox block unless they straddle two */
    __device__ __forceinline__ void keep2(uint64_t e, bool &k0, bool &k1) const {
        const tl_philox_block b = philox(e / 4);
        const int w = (int)(e % 4);
        k0 = b.w[w] >= threshold;
        if (w < 3) {
            k1 = b.w[w + 1] >= threshold;
        } else {
            const tl_philox_block c = philox(e / 4 + 1);
            k1 = c.w[0] >= threshold;
        }
    }
};

inline Dropout dropout_of(const tl_cuda_attention &a) {
    Dropout d = {a.seed, a.counter, 0, tl_cuda_rng_cell(a.at.device)};
    if (a.dropout > 0) {
        const double t = ceil((double)(float)a.dropout *
                              16777216.0); /* (float)p: rand >= p compares in float32 */
        d.threshold = t >= 16777216.0 ? 0xffffffffu : (uint32_t)t << 8;
    }
    return d;
}

inline double dropout_scale(const tl_cuda_attention &a) {
    return a.dropout <= 0 ? 1.0 : a.dropout >= 1 ? 0.0 : 1.0 / (1.0 - a.dropout);
}

/* operand `which` of (b, h) */
template <typename T>
__device__ __forceinline__ T *at_bh(const tl_cuda_attention &a, int which, int64_t b, int64_t h) {
    return (T *)a.data[which] + b * a.stride[which][0] + h * a.stride[which][1];
}

/* ==== the tensor-core path ==================================================================
   Shared-memory tiles are rows of D halves padded by 8 (16 bytes), so that the 8 row addresses
   of an ldmatrix fall in distinct banks. */

/* rows [0, valid) of a ROWS x D tile (row stride `stride` elements) -> shared (ld D + 8), the
   rest zeros */
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile(uint16_t *s, const uint16_t *g, int64_t stride,
                                          int64_t valid) {
    constexpr int PER_ROW = D / 8, CHUNKS = ROWS * PER_ROW;
#pragma unroll
    for (int t = 0; t < (CHUNKS + THREADS - 1) / THREADS; t++) {
        const int id = threadIdx.x + t * THREADS;
        if (CHUNKS % THREADS && id >= CHUNKS) break;
        const int row = id / PER_ROW, cc = id % PER_ROW;
        const bool ok = row < valid;
        copy16(s + row * (D + 8) + cc * 8, g + (ok ? row * stride : 0) + cc * 8, ok);
    }
}

} // namespace

/* The tensor-core path (attention_mma.cu): bf16/f16, head dims 32, 64, 128, 16-byte aligned rows.
 */
bool tl_attention_fits_mma(const tl_cuda_attention &a);
tl_status tl_attention_forward_mma(const tl_cuda_attention &a);
/* grad_k and grad_v as the struct says; grad_q too when want_q (through a float32 workspace). */
tl_status tl_attention_backward_mma(const tl_cuda_attention &a, bool want_q);

#endif
