/* CUDA dropout kernel and its table: one pass, the mask drawn from Philox in registers. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/elementwise.cuh" /* tl_vec, tl_offsets_at, tl_cuda_blocks, launches */
#include "kernels/cuda/ops_common.cuh"  /* tl_rng_corrected */
#include "kernels/philox.h"

/* out = in * keep / (1 - p) over n elements, element e (out's row-major index) kept when the
   float32 uniform `rand` draws for it from (seed, counter) is >= threshold ((float)p; 1 drops
   all). dense: out and in contiguous; else geometry holds out's row-major dims (size-1 dims
   dropped, merged where both allow) with the strides of out (operand 0) and in (operand 1). */
typedef struct tl_cuda_dropout {
    tl_cuda_where at;
    int dtype; /* TL_CUDA_* */
    void *out;
    const void *in;
    int64_t n;
    bool dense;
    tl_cuda_geometry geometry;
    uint64_t seed, counter;
    float threshold;
    double keep_div; /* 1 - p */
} tl_cuda_dropout;

/* As cpu/dropout.c: element e's uniform is the float32 `rand` value of block counter + e / 4,
   word e % 4 (kernels/philox.h); a kept element becomes x / (1 - p) (IEEE division in the
   compute type), a dropped one x * 0. */
template <class E>
__device__ __forceinline__ typename E::T dropout_one(typename E::T v, float u, float threshold,
                                                     typename E::C q) {
    typedef typename E::C C;
    const C x = E::load(v);
    C y;
    if constexpr (sizeof(C) == 4)
        y = u >= threshold ? __fdiv_rn(x, q) : __fmul_rn(x, 0.0f);
    else
        y = u >= threshold ? __ddiv_rn(x, q) : __dmul_rn(x, 0.0);
    return E::store(y);
}

/* The uniforms of 4 elements from one Philox block. */
__device__ __forceinline__ void dropout_uniforms(uint64_t seed, uint64_t block, float *u) {
    const tl_philox_block x = tl_philox(block, seed);
#pragma unroll
    for (int j = 0; j < 4; j++) u[j] = (float)(x.w[j] >> 8) * 0x1p-24f;
}

/* Elements a thread of the dense kernel takes: 16 bytes of 2- and 4-byte types (8 or 4), 4 of
   float64 (32 bytes); a multiple of 4, so whole Philox blocks. */
template <typename T> __host__ __device__ constexpr int dropout_group() {
    return sizeof(T) == 2 ? 8 : 4;
}

/* Dense out and in: thread groups of G consecutive elements, vector loads and stores where the
   pointers are aligned for them (vec_ok) and the group is whole. */
template <class E>
__global__ void __launch_bounds__(TL_CUDA_THREADS)
    dropout_dense(typename E::T *out, const typename E::T *in, int64_t n, uint64_t seed,
                  uint64_t counter, const uint64_t *rng_cell, float threshold, typename E::C q,
                  bool vec_ok) {
    typedef typename E::T T;
    tl_rng_corrected(rng_cell, seed, counter);
    constexpr int G = dropout_group<T>();
    const int64_t groups = (n + G - 1) / G, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += stride) {
        const int64_t e0 = g * G;
        float u[G];
#pragma unroll
        for (int b = 0; b < G / 4; b++)
            dropout_uniforms(seed, counter + (uint64_t)(e0 / 4 + b), u + 4 * b);
        if (vec_ok && e0 + G <= n) {
            tl_vec<T, G> v = *reinterpret_cast<const tl_vec<T, G> *>(in + e0);
#pragma unroll
            for (int j = 0; j < G; j++) v.v[j] = dropout_one<E>(v.v[j], u[j], threshold, q);
            *reinterpret_cast<tl_vec<T, G> *>(out + e0) = v;
        } else {
#pragma unroll
            for (int j = 0; j < G; j++)
                if (e0 + j < n) out[e0 + j] = dropout_one<E>(in[e0 + j], u[j], threshold, q);
        }
    }
}

/* Any strides: one Philox block (4 elements) per thread, each element's offsets in out
   (operand 0) and in (operand 1) from its row-major index over g. */
template <class E>
__global__ void __launch_bounds__(TL_CUDA_THREADS)
    dropout_strided(typename E::T *out, const typename E::T *in, int64_t n, uint64_t seed,
                    uint64_t counter, const uint64_t *rng_cell, float threshold, typename E::C q,
                    const __grid_constant__ tl_cuda_geometry g) {
    tl_rng_corrected(rng_cell, seed, counter);
    const int64_t blocks = (n + 3) / 4, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < blocks; b += stride) {
        float u[4];
        dropout_uniforms(seed, counter + (uint64_t)b, u);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t e = b * 4 + j;
            if (e >= n) break;
            int64_t off[2];
            tl_offsets_at<2>(g, n, e, off);
            out[off[0]] = dropout_one<E>(in[off[1]], u[j], threshold, q);
        }
    }
}

enum { DROPOUT_DENSE_VECTOR, DROPOUT_DENSE_SCALAR, DROPOUT_STRIDED };
static const tl_kernel_variant dropout_variants[] = {
    TL_VARIANT(dropout, TL_DTYPES_FLOATING, "dense_vector",
               "out and in contiguous and aligned for a group of elements: vector accesses"),
    TL_VARIANT(dropout, TL_DTYPES_FLOATING, "dense_scalar",
               "out and in contiguous, one not aligned for a group: one element per access"),
    TL_VARIANT(dropout, TL_DTYPES_FLOATING, "strided",
               "out or in not contiguous: offsets from the strides, 4 elements per thread"),
};

template <class E> static tl_status launch_dtype(const tl_cuda_dropout *d) {
    typedef typename E::T T;
    typedef typename E::C C;
    T *out = (T *)d->out;
    const T *in = (const T *)d->in;
    const C q = (C)d->keep_div;
    cudaError_t err;
    if (d->dense) {
        constexpr int G = dropout_group<T>();
        const bool vec_ok =
            tl_cuda_aligned(out, sizeof(T) * G) && tl_cuda_aligned(in, sizeof(T) * G);
        tl_variant_ran(&dropout_variants[vec_ok ? DROPOUT_DENSE_VECTOR : DROPOUT_DENSE_SCALAR],
                       (tl_dtype)d->dtype);
        err = tl_cuda_launch_kernel<dropout_dense<E>>(
            d->at.device, tl_cuda_blocks((d->n + G - 1) / G, d->at.sm_count), TL_CUDA_THREADS,
            d->at.stream, out, in, d->n, d->seed, d->counter, tl_cuda_rng_cell(d->at.device),
            d->threshold, q, vec_ok);
    } else {
        tl_variant_ran(&dropout_variants[DROPOUT_STRIDED], (tl_dtype)d->dtype);
        err = tl_cuda_launch_kernel<dropout_strided<E>>(
            d->at.device, tl_cuda_blocks((d->n + 3) / 4, d->at.sm_count), TL_CUDA_THREADS,
            d->at.stream, out, in, d->n, d->seed, d->counter, tl_cuda_rng_cell(d->at.device),
            d->threshold, q, d->geometry);
    }
    return err == cudaSuccess ? TL_OK : tl_cuda_fail(err, d->at.op, "kernel launch");
}

static tl_status launch_dropout(const tl_cuda_dropout *d) {
    return tl_cuda_floating(d->dtype, d->at.op,
                            [&](auto e) -> tl_status { return launch_dtype<decltype(e)>(d); });
}

/* ---- the table -------------------------------------------------------------------------- */
static tl_status cuda_dropout(tl_tensor *out, const tl_tensor *in, const tl_op_args *args) {
    double p = args->scalar[0];
    tl_cuda_dropout d{};
    d.dtype = tl_cuda_dtype_of(out);
    d.out = tl_data(out);
    d.in = tl_data(in);
    d.n = tl_numel(out);
    d.dense = tl_is_contiguous(out) && tl_is_contiguous(in);
    d.seed = args->seed;
    d.counter = args->counter;
    d.threshold = (float)p;
    d.keep_div = 1.0 - p;
    if (d.n == 0) return TL_OK;
    if (!d.dense) {
        const tl_tensor *operands[] = {out, in};
        tl_cuda_geometry_of(&d.geometry, 2, operands);
    }
    TL_TRY(tl_cuda_where_of(out, "dropout", &d.at));
    return launch_dropout(&d);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(dropout, TL_DTYPES_FLOATING, unary, cuda_dropout),
};

TL_KERNEL_TABLE(tl_cuda_dropout_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_dropout_variants, TL_DEVICE_CUDA, dropout_variants);
