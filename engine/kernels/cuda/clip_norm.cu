/* CUDA clip_grad_norm_multi and its table: a descriptor per gradient and their chunk offsets
   built on the host and put on the device with one copy on the stream, scratch for the partials
   and the coefficient from the caching allocator; then one grid-stride launch writes a double
   partial per chunk of every gradient (each CTA finds its gradient by a binary search of the
   descriptors' chunk offsets, |x|^p in the grad's compute type, sums in double, a fixed reduction
   tree), one block merges the partials in chunk order into the total and the coefficient, and a
   last launch scales every gradient by the coefficient it reads from device memory (nothing when it
   is >= 1). No atomics and no host synchronization: the result does not depend on the grid. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/clip_norm.h"
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"

#define OP_NAME      "clip_grad_norm_multi"
#define CLIP_THREADS 256
#define CLIP_VEC     4

/* Elements of one chunk: one partial result, a CTA's unit of work (a multiple of the vector
   width, 4). */
#define TL_CUDA_CLIP_CHUNK 16384

/* One gradient: numel contiguous elements of dtype (TL_CUDA_F32, _F64, _BF16, _F16); its chunks
   are first_chunk .. first_chunk + ceil(numel / TL_CUDA_CLIP_CHUNK) - 1 of the launch. vec: data
   is aligned for accesses of 4 elements. */
typedef struct tl_cuda_clip_grad {
    void *data;
    int64_t numel, first_chunk;
    int32_t dtype, vec;
} tl_cuda_clip_grad;

/* count descriptors (on the device, ordered by first_chunk), chunks in all; partials: chunks
   doubles and coef: one double, device scratch; total: the 0-dim result (float64 when total_f64,
   else float32); mode: TL_CLIP_NORM_* of kernels/clip_norm.h, p the norm type. */
typedef struct tl_cuda_clip {
    tl_cuda_where at;
    const tl_cuda_clip_grad *grads;
    int64_t count, chunks;
    double *partials, *coef;
    void *total;
    bool total_f64;
    int mode;
    double p, max_norm;
} tl_cuda_clip;

/* |x|^p of one element in the compute type C (float for float32, bfloat16 and float16, double for
   float64), each operation rounded on its own as the CPU kernel computes it. */
template <int MODE> __device__ __forceinline__ float clip_elem(float x, float p) {
    if constexpr (MODE == TL_CLIP_NORM_TWO)
        return tl_mul(x, x);
    else if constexpr (MODE == TL_CLIP_NORM_P)
        return powf(fabsf(x), p);
    else
        return fabsf(x); /* ONE, INF */
}
template <int MODE> __device__ __forceinline__ double clip_elem(double x, double p) {
    if constexpr (MODE == TL_CLIP_NORM_TWO)
        return tl_mul(x, x);
    else if constexpr (MODE == TL_CLIP_NORM_P)
        return pow(fabs(x), p);
    else
        return fabs(x);
}

/* One element merged into a thread's double state. */
template <int MODE> __device__ __forceinline__ double clip_merge(double acc, double v) {
    if constexpr (MODE == TL_CLIP_NORM_INF)
        return tl_clip_nan_max(acc, v);
    else
        return tl_add(acc, v);
}

/* The merge of the block reduction (a functor for tl_block_reduce). */
template <int MODE> struct clip_merge_op {
    __device__ double operator()(double a, double b) const { return clip_merge<MODE>(a, b); }
};

/* This thread's state over elements [lo, hi) of one grad (lo a multiple of CLIP_VEC). */
template <int MODE, class E>
__device__ __forceinline__ double clip_thread_partial(const tl_cuda_clip_grad &d, int64_t lo,
                                                      int64_t hi, double p) {
    typedef typename E::T T;
    typedef typename E::C C;
    const T *g = (const T *)d.data;
    const C pc = (C)p;
    double acc = 0;
    int64_t i = lo + (int64_t)threadIdx.x * CLIP_VEC;
    if (d.vec) {
        for (; i + CLIP_VEC <= hi; i += (int64_t)blockDim.x * CLIP_VEC) {
            const tl_vec<T, CLIP_VEC> v = *(const tl_vec<T, CLIP_VEC> *)(g + i);
#pragma unroll
            for (int j = 0; j < CLIP_VEC; j++)
                acc = clip_merge<MODE>(acc, (double)clip_elem<MODE>(E::load(v.v[j]), pc));
        }
        /* the tail of the last chunk: each thread takes its own element */
        i = lo + (hi - lo) / CLIP_VEC * CLIP_VEC + threadIdx.x;
    } else {
        i = lo + threadIdx.x;
    }
    for (; i < hi; i += blockDim.x)
        acc = clip_merge<MODE>(acc, (double)clip_elem<MODE>(E::load(g[i]), pc));
    return acc;
}

/* The descriptor whose chunks include chunk c: the last one with first_chunk <= c. */
__device__ __forceinline__ const tl_cuda_clip_grad &clip_owner(const tl_cuda_clip_grad *grads,
                                                               int64_t count, int64_t c) {
    int64_t lo = 0, hi = count;
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (grads[mid].first_chunk <= c)
            lo = mid;
        else
            hi = mid;
    }
    return grads[lo];
}

/* Chunk c's range [lo, hi) in its grad d. */
__device__ __forceinline__ void clip_chunk_range(const tl_cuda_clip_grad &d, int64_t c, int64_t &lo,
                                                 int64_t &hi) {
    lo = (c - d.first_chunk) * TL_CUDA_CLIP_CHUNK;
    hi = lo + TL_CUDA_CLIP_CHUNK < d.numel ? lo + TL_CUDA_CLIP_CHUNK : d.numel;
}

/* partials[c] = the merge of chunk c's elements, for every chunk. */
template <int MODE>
__global__ void __launch_bounds__(CLIP_THREADS)
    clip_partials_kernel(const tl_cuda_clip_grad *grads, int64_t count, int64_t chunks, double p,
                         double *partials) {
    __shared__ double smem[32];
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const tl_cuda_clip_grad d = clip_owner(grads, count, c);
        int64_t lo, hi;
        clip_chunk_range(d, c, lo, hi);
        double acc = 0;
        switch (d.dtype) {
        case TL_CUDA_F32:
            acc = clip_thread_partial<MODE, tl_elem<TL_CUDA_F32>>(d, lo, hi, p);
            break;
        case TL_CUDA_F64:
            acc = clip_thread_partial<MODE, tl_elem<TL_CUDA_F64>>(d, lo, hi, p);
            break;
        case TL_CUDA_BF16:
            acc = clip_thread_partial<MODE, tl_elem<TL_CUDA_BF16>>(d, lo, hi, p);
            break;
        case TL_CUDA_F16:
            acc = clip_thread_partial<MODE, tl_elem<TL_CUDA_F16>>(d, lo, hi, p);
            break;
        default:
            break; /* the op admits floating grads only */
        }
        acc = tl_block_reduce(acc, clip_merge_op<MODE>(), 0.0, smem);
        if (threadIdx.x == 0) partials[c] = acc;
    }
}

/* One block: the partials merged in chunk order (thread t takes t, t + blockDim.x, ..., then a
   fixed tree), the total written in its dtype and the coefficient to *coef. */
template <int MODE>
__global__ void __launch_bounds__(CLIP_THREADS)
    clip_finish_kernel(const double *partials, int64_t chunks, double p, double max_norm,
                       void *total, bool total_f64, double *coef) {
    __shared__ double smem[32];
    double acc = 0;
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x)
        acc = clip_merge<MODE>(acc, partials[c]);
    acc = tl_block_reduce(acc, clip_merge_op<MODE>(), 0.0, smem);
    if (threadIdx.x == 0) {
        double value, k;
        tl_clip_norm_finish(acc, MODE, p, total_f64, max_norm, &value, &k);
        if (total_f64)
            *(double *)total = value;
        else
            *(float *)total = (float)value;
        *coef = k;
    }
}

/* Elements [lo, hi) of one grad times k (lo a multiple of CLIP_VEC), as the CPU's scale: in float
   for float32, the coefficient rounded to the grad's dtype first for bfloat16/float16 (as torch's
   mul_ by a 0-dim tensor), in double for float64. */
template <class E>
__device__ __forceinline__ void clip_scale_range(const tl_cuda_clip_grad &d, int64_t lo, int64_t hi,
                                                 double k) {
    typedef typename E::T T;
    typedef typename E::C C;
    T *g = (T *)d.data;
    const C kc = E::load(E::store((C)k));
    int64_t i = lo + (int64_t)threadIdx.x * CLIP_VEC;
    if (d.vec) {
        for (; i + CLIP_VEC <= hi; i += (int64_t)blockDim.x * CLIP_VEC) {
            tl_vec<T, CLIP_VEC> v = *(const tl_vec<T, CLIP_VEC> *)(g + i);
#pragma unroll
            for (int j = 0; j < CLIP_VEC; j++) v.v[j] = E::store(tl_mul(E::load(v.v[j]), kc));
            *(tl_vec<T, CLIP_VEC> *)(g + i) = v;
        }
        i = lo + (hi - lo) / CLIP_VEC * CLIP_VEC + threadIdx.x;
    } else {
        i = lo + threadIdx.x;
    }
    for (; i < hi; i += blockDim.x) g[i] = E::store(tl_mul(E::load(g[i]), kc));
}

/* Every chunk scaled by *coef when it is < 1 or NaN; nothing is written otherwise. */
__global__ void __launch_bounds__(CLIP_THREADS)
    clip_scale_kernel(const tl_cuda_clip_grad *grads, int64_t count, int64_t chunks,
                      const double *coef) {
    const double k = *coef;
    if (!tl_clip_norm_scales(k)) return;
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const tl_cuda_clip_grad d = clip_owner(grads, count, c);
        int64_t lo, hi;
        clip_chunk_range(d, c, lo, hi);
        switch (d.dtype) {
        case TL_CUDA_F32:
            clip_scale_range<tl_elem<TL_CUDA_F32>>(d, lo, hi, k);
            break;
        case TL_CUDA_F64:
            clip_scale_range<tl_elem<TL_CUDA_F64>>(d, lo, hi, k);
            break;
        case TL_CUDA_BF16:
            clip_scale_range<tl_elem<TL_CUDA_BF16>>(d, lo, hi, k);
            break;
        case TL_CUDA_F16:
            clip_scale_range<tl_elem<TL_CUDA_F16>>(d, lo, hi, k);
            break;
        default:
            break;
        }
    }
}

/* The first two launches for one norm. */
template <int MODE> static tl_status launch_norm(const tl_cuda_clip *c) {
    if (c->chunks > 0) {
        const unsigned grid = tl_cuda_grid(c->chunks, c->at.sm_count, 8);
        clip_partials_kernel<MODE><<<grid, CLIP_THREADS, 0, c->at.stream>>>(
            c->grads, c->count, c->chunks, c->p, c->partials);
        TL_TRY(tl_cuda_check_launch(c->at.op));
    }
    clip_finish_kernel<MODE><<<1, CLIP_THREADS, 0, c->at.stream>>>(
        c->partials, c->chunks, c->p, c->max_norm, c->total, c->total_f64, c->coef);
    return tl_cuda_check_launch(c->at.op);
}

/* Three launches, whatever count is: the partials of every chunk, the total and the coefficient
   (one block), the scaling (which reads the coefficient on the device). No synchronization. */
static tl_status launch_clip_norm(const tl_cuda_clip *c) {
    switch (c->mode) {
    case TL_CLIP_NORM_ONE:
        TL_TRY(launch_norm<TL_CLIP_NORM_ONE>(c));
        break;
    case TL_CLIP_NORM_TWO:
        TL_TRY(launch_norm<TL_CLIP_NORM_TWO>(c));
        break;
    case TL_CLIP_NORM_INF:
        TL_TRY(launch_norm<TL_CLIP_NORM_INF>(c));
        break;
    default:
        TL_TRY(launch_norm<TL_CLIP_NORM_P>(c));
        break;
    }
    if (c->chunks <= 0) return TL_OK;
    const unsigned grid = tl_cuda_grid(c->chunks, c->at.sm_count, 8);
    clip_scale_kernel<<<grid, CLIP_THREADS, 0, c->at.stream>>>(c->grads, c->count, c->chunks,
                                                               c->coef);
    return tl_cuda_check_launch(c->at.op);
}

/* ---- the table -------------------------------------------------------------------------- */
/* Descriptors of the non-empty grads in host (n of room): their count, *chunks the chunks. */
static int64_t describe_grads(tl_tensor *const *grads, int64_t n, tl_cuda_clip_grad *host,
                              int64_t *chunks) {
    int64_t count = 0;
    *chunks = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t numel = tl_numel(grads[i]);
        if (numel == 0) continue;
        tl_cuda_clip_grad *d = &host[count++];
        d->data = tl_data(grads[i]);
        d->numel = numel;
        d->first_chunk = *chunks;
        d->dtype = (int32_t)grads[i]->dtype;
        d->vec = tl_cuda_aligned(d->data, 4 * tl_dtype_size(grads[i]->dtype));
        *chunks += (numel + TL_CUDA_CLIP_CHUNK - 1) / TL_CUDA_CLIP_CHUNK;
    }
    return count;
}

static tl_status cuda_clip_grad_norm_multi(tl_tensor *const *grads, int64_t n, double max_norm,
                                           double norm_type, tl_tensor *total) {
    tl_cuda_clip_grad *host = (tl_cuda_clip_grad *)malloc(sizeof *host * (size_t)(n > 0 ? n : 1));
    if (!host) return tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory (%lld grads)", (long long)n);
    int64_t chunks = 0;
    const int64_t count = describe_grads(grads, n, host, &chunks);
    /* one block of scratch: the descriptors, the partials, the coefficient (8-byte aligned); it
       goes back to the cache behind the launches, in stream order */
    const size_t desc_bytes = sizeof *host * (size_t)count;
    const size_t bytes = desc_bytes + sizeof(double) * (size_t)(chunks + 1);
    tl_cuda_clip c{};
    c.count = count;
    c.chunks = chunks;
    c.total = tl_data(total);
    c.total_f64 = total->dtype == TL_F64;
    c.mode = tl_clip_norm_mode(norm_type);
    c.p = norm_type;
    c.max_norm = max_norm;
    tl_cuda_scratch scratch;
    tl_status status = tl_cuda_where_of(total, OP_NAME, &c.at);
    if (status == TL_OK)
        status = scratch.stage(c.at, bytes, host, desc_bytes, "gradient descriptors");
    if (status == TL_OK) {
        c.grads = (const tl_cuda_clip_grad *)scratch.ptr;
        c.partials = (double *)((char *)scratch.ptr + desc_bytes);
        c.coef = c.partials + chunks;
        status = launch_clip_norm(&c);
    }
    free(host);
    return status;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(clip_grad_norm_multi, TL_DTYPES_FLOATING, clip_norm_multi, cuda_clip_grad_norm_multi),
};

TL_KERNEL_TABLE(tl_cuda_clip_norm_table, TL_DEVICE_CUDA, entries);
