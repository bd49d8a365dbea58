/* CUDA index kernels along a dim and their table, the dtypes of cpu/index.c: gather and scatter
 * (elements moved by size; of duplicates in scatter any one wins), scatter_add (atomic adds:
 * duplicates add in any order) and scatter_reduce's prod, amax and amin (compare-and-swap loops).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/fault_guard.h"
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/scatter_reduce.h"

#define INDEX_THREADS 256

/* The walk over the index's elements (row-major): element p's offsets in the three tensors
   (0: out or target, 1: index, 2: source), the tensor indexed along dim (skip) taking none for
   that dim; the index value times `along` adds it. */
typedef struct index_walk {
    int ndim, dim, skip;
    bool wide;              /* int64 index, else int32 */
    int64_t n, size, along; /* elements; the indexed tensor's size and stride along dim */
    int64_t shape[TL_MAX_DIMS];
    int64_t strides[3][TL_MAX_DIMS];
    const volatile unsigned int
        *failed; /* writes: the index checks' failure flag (fault_guard.h) */
} index_walk;

/* Whether a queued index check failed before this write kernel started (read once per block,
   from mapped host memory): then the kernel writes nothing, so an in-place op with a bad index
   leaves its target as it was. */
__device__ __forceinline__ bool checks_failed(const index_walk &w) {
    __shared__ bool failed;
    if (threadIdx.x == 0) failed = w.failed && *w.failed != 0;
    __syncthreads();
    return failed;
}

__device__ __forceinline__ void walk_offsets(const index_walk &w, int64_t p, int64_t off[3]) {
    off[0] = off[1] = off[2] = 0;
    for (int d = w.ndim - 1; d >= 0; d--) {
        const int64_t i = p % w.shape[d];
        p /= w.shape[d];
        for (int k = 0; k < 3; k++)
            if (k != w.skip || d != w.dim) off[k] += i * w.strides[k][d];
    }
}

__device__ __forceinline__ int64_t index_value(const index_walk &w, const void *index, int64_t at) {
    return w.wide ? ((const int64_t *)index)[at] : (int64_t)((const int32_t *)index)[at];
}

/* out[p] = src[p along dim at index[p]]; an index outside [0, size) (the queued check reports
   it) reads zero */
template <typename U>
__global__ void __launch_bounds__(INDEX_THREADS)
    gather_kernel(U *out, const U *src, const void *index, const __grid_constant__ index_walk w) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < w.n; p += stride) {
        int64_t off[3];
        walk_offsets(w, p, off);
        const int64_t v = index_value(w, index, off[1]);
        out[off[0]] = v >= 0 && v < w.size ? src[off[2] + v * w.along] : U(0);
    }
}

/* target[p along dim at index[p]] += src[p], atomically; an index out of range adds nothing */
__device__ __forceinline__ void add_at(float *t, float v) {
    atomicAdd(t, v);
}
__device__ __forceinline__ void add_at(double *t, double v) {
    atomicAdd(t, v);
}
__device__ __forceinline__ void add_at(__nv_bfloat16 *t, __nv_bfloat16 v) {
    atomicAdd(t, v);
}
__device__ __forceinline__ void add_at(__half *t, __half v) {
    atomicAdd(t, v);
}
__device__ __forceinline__ void add_at(int32_t *t, int32_t v) {
    atomicAdd((int *)t, (int)v);
}
__device__ __forceinline__ void add_at(int64_t *t, int64_t v) { /* wraps, as two's complement */
    atomicAdd((unsigned long long *)t, (unsigned long long)v);
}

template <typename T>
__global__ void __launch_bounds__(INDEX_THREADS)
    scatter_add_kernel(T *target, const T *src, const void *index,
                       const __grid_constant__ index_walk w) {
    if (checks_failed(w)) return;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < w.n; p += stride) {
        int64_t off[3];
        walk_offsets(w, p, off);
        const int64_t v = index_value(w, index, off[1]);
        if (v >= 0 && v < w.size) add_at(target + off[0] + v * w.along, src[off[2]]);
    }
}

/* target[p along dim at index[p]] = src[p]; duplicates race (one of them wins); an index out of
   range writes nothing */
template <typename U>
__global__ void __launch_bounds__(INDEX_THREADS)
    scatter_kernel(U *target, const U *src, const void *index,
                   const __grid_constant__ index_walk w) {
    if (checks_failed(w)) return;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < w.n; p += stride) {
        int64_t off[3];
        walk_offsets(w, p, off);
        const int64_t v = index_value(w, index, off[1]);
        if (v >= 0 && v < w.size) target[off[0] + v * w.along] = src[off[2]];
    }
}

/* The unsigned type of an element's bits, for atomicCAS (16-bit CAS needs compute 7.0) */
template <int Bytes> struct cas_bits;
template <> struct cas_bits<2> { typedef unsigned short U; };
template <> struct cas_bits<4> { typedef unsigned int U; };
template <> struct cas_bits<8> { typedef unsigned long long U; };

/* the fold of kernels/scatter_reduce.h in E's compute type */
template <class E>
__device__ __forceinline__ typename E::C fold(int mode, typename E::C t, typename E::C s) {
    typedef typename E::C C;
    if constexpr (E::dtype == TL_CUDA_F64)
        return tl_scatter_fold_d(mode, t, s);
    else if constexpr (E::dtype == TL_CUDA_I32 || E::dtype == TL_CUDA_I64)
        return (C)tl_scatter_fold_i(mode, (int64_t)t, (int64_t)s); /* int32 keeps its low bits */
    else
        return tl_scatter_fold_f(mode, t, s);
}

/* *at = fold(*at, s) atomically: a compare-and-swap loop on the element's bits */
template <class E>
__device__ __forceinline__ void fold_at(typename E::T *at, typename E::T s, int mode) {
    typedef typename E::T T;
    typedef typename cas_bits<sizeof(T)>::U U;
    U *bits = (U *)at;
    U seen = *(volatile U *)bits, expected;
    do {
        expected = seen;
        T current;
        memcpy(&current, &expected, sizeof current);
        const T next = E::store(fold<E>(mode, E::load(current), E::load(s)));
        U wanted;
        memcpy(&wanted, &next, sizeof wanted);
        if (wanted == expected) return;
        seen = atomicCAS(bits, expected, wanted);
    } while (seen != expected);
}

template <class E>
__global__ void __launch_bounds__(INDEX_THREADS)
    scatter_reduce_kernel(typename E::T *target, const typename E::T *src, const void *index,
                          const __grid_constant__ index_walk w, int mode) {
    if (checks_failed(w)) return;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < w.n; p += stride) {
        int64_t off[3];
        walk_offsets(w, p, off);
        const int64_t v = index_value(w, index, off[1]);
        if (v >= 0 && v < w.size) fold_at<E>(target + off[0] + v * w.along, src[off[2]], mode);
    }
}

/* ---- launches ------------------------------------------------------------------------------ */
/* The walk of index over (t0, index, t2), t[skip] indexed along dim. */
static void walk_of(index_walk *w, const tl_tensor *index, const tl_tensor *t0, const tl_tensor *t2,
                    int dim, int skip) {
    const tl_tensor *t[3] = {t0, index, t2};
    memset(w, 0, sizeof *w);
    w->ndim = index->ndim;
    w->dim = dim;
    w->skip = skip;
    w->wide = index->dtype == TL_I64;
    w->n = tl_numel(index);
    for (int d = 0; d < index->ndim; d++) {
        w->shape[d] = index->shape[d];
        for (int k = 0; k < 3; k++) w->strides[k][d] = t[k]->strides[d];
    }
    const tl_tensor *indexed = t[skip];
    w->size = indexed->ndim ? indexed->shape[dim] : 1;
    w->along = indexed->ndim ? indexed->strides[dim] : 0;
}

static tl_status cuda_gather(tl_tensor *const *out, const tl_tensor *const *in,
                             const tl_op_args *args) {
    const tl_tensor *src = in[0], *index = in[1];
    index_walk w;
    walk_of(&w, index, out[0], src, args->dim, 2);
    if (w.n == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out[0], "gather", &at));
    const unsigned grid = tl_cuda_grid(tl_ceil_div(w.n, INDEX_THREADS), at.sm_count);
    void *o = tl_data(out[0]);
    const void *s = tl_data(src), *i = tl_data(index);
    switch (tl_dtype_size(src->dtype)) { /* elements move as bits */
    case 1:
        gather_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>((uint8_t *)o, (const uint8_t *)s, i,
                                                             w);
        break;
    case 2:
        gather_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>((uint16_t *)o, (const uint16_t *)s, i,
                                                             w);
        break;
    case 4:
        gather_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>((uint32_t *)o, (const uint32_t *)s, i,
                                                             w);
        break;
    default:
        gather_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>((uint64_t *)o, (const uint64_t *)s, i,
                                                             w);
        break;
    }
    return tl_cuda_check_launch(at.op);
}

template <typename T>
static tl_status launch_scatter_add(const tl_cuda_where &at, tl_tensor *target,
                                    const tl_tensor *src, const tl_tensor *index,
                                    const index_walk &w) {
    const unsigned grid = tl_cuda_grid(tl_ceil_div(w.n, INDEX_THREADS), at.sm_count);
    scatter_add_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>(
        (T *)tl_data(target), (const T *)tl_data(src), tl_data(index), w);
    return tl_cuda_check_launch(at.op);
}

static tl_status cuda_scatter_add(tl_tensor *const *out, const tl_tensor *const *in,
                                  const tl_op_args *args) {
    tl_tensor *target = out[0];
    const tl_tensor *index = in[0], *src = in[1];
    index_walk w;
    walk_of(&w, index, target, src, args->dim, 0);
    if (w.n == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(target, "scatter_add", &at));
    TL_TRY(tl_cuda_fault_flag(at.device, at.op, &w.failed));
    switch (target->dtype) {
    case TL_F32:
        return launch_scatter_add<float>(at, target, src, index, w);
    case TL_F64:
        return launch_scatter_add<double>(at, target, src, index, w);
    case TL_BF16:
        return launch_scatter_add<__nv_bfloat16>(at, target, src, index, w);
    case TL_F16:
        return launch_scatter_add<__half>(at, target, src, index, w);
    case TL_I32:
        return launch_scatter_add<int32_t>(at, target, src, index, w);
    case TL_I64:
        return launch_scatter_add<int64_t>(at, target, src, index, w);
    default:
        return tl_error(TL_ERR_DTYPE, "scatter_add: no CUDA kernel for %s",
                        tl_dtype_name(target->dtype));
    }
}

static tl_status cuda_scatter(tl_tensor *const *out, const tl_tensor *const *in,
                              const tl_op_args *args) {
    tl_tensor *target = out[0];
    const tl_tensor *index = in[0], *src = in[1];
    index_walk w;
    walk_of(&w, index, target, src, args->dim, 0);
    if (w.n == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(target, "scatter", &at));
    TL_TRY(tl_cuda_fault_flag(at.device, at.op, &w.failed));
    const unsigned grid = tl_cuda_grid(tl_ceil_div(w.n, INDEX_THREADS), at.sm_count);
    void *t = tl_data(target);
    const void *s = tl_data(src), *i = tl_data(index);
    switch (tl_dtype_size(target->dtype)) { /* elements move as bits */
    case 1:
        scatter_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>((uint8_t *)t, (const uint8_t *)s, i,
                                                              w);
        break;
    case 2:
        scatter_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>((uint16_t *)t, (const uint16_t *)s, i,
                                                              w);
        break;
    case 4:
        scatter_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>((uint32_t *)t, (const uint32_t *)s, i,
                                                              w);
        break;
    default:
        scatter_kernel<<<grid, INDEX_THREADS, 0, at.stream>>>((uint64_t *)t, (const uint64_t *)s, i,
                                                              w);
        break;
    }
    return tl_cuda_check_launch(at.op);
}

/* each fold of scatter_reduce is a variant (args->scalar[0]: a tl_scatter_mode) */
static const tl_kernel_variant scatter_reduce_variants[] = {
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "prod", "reduce = \"prod\""),
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "amax", "reduce = \"amax\""),
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "amin", "reduce = \"amin\""),
};

static tl_status cuda_scatter_reduce(tl_tensor *const *out, const tl_tensor *const *in,
                                     const tl_op_args *args) {
    tl_tensor *target = out[0];
    const tl_tensor *index = in[0], *src = in[1];
    const int mode = (int)args->scalar[0];
    tl_variant_ran(&scatter_reduce_variants[mode - TL_SCATTER_PROD], target->dtype);
    index_walk w;
    walk_of(&w, index, target, src, args->dim, 0);
    if (w.n == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(target, "scatter_reduce", &at));
    TL_TRY(tl_cuda_fault_flag(at.device, at.op, &w.failed));
    const unsigned grid = tl_cuda_grid(tl_ceil_div(w.n, INDEX_THREADS), at.sm_count);
    return tl_cuda_dispatch<TL_CUDA_NUMERIC>(
        tl_cuda_dtype_of(target), "scatter_reduce", [&](auto e) {
            typedef decltype(e) E;
            typedef typename E::T T;
            scatter_reduce_kernel<E><<<grid, INDEX_THREADS, 0, at.stream>>>(
                (T *)tl_data(target), (const T *)tl_data(src), tl_data(index), w, mode);
            return tl_cuda_check_launch(at.op);
        });
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(gather, TL_DTYPES_ALL, tensors, cuda_gather),
    TL_KERNEL(scatter_add, TL_DTYPES_NUMERIC, tensors, cuda_scatter_add),
    TL_KERNEL(scatter, TL_DTYPES_ALL, tensors, cuda_scatter),
    TL_KERNEL(scatter_reduce, TL_DTYPES_NUMERIC, tensors, cuda_scatter_reduce),
};

TL_KERNEL_TABLE(tl_cuda_index_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_scatter_reduce_variants, TL_DEVICE_CUDA, scatter_reduce_variants);
