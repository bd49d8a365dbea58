/* CUDA multi-tensor Adam/AdamW (adam_step_multi) and its table: a descriptor per parameter and
   their chunk offsets built on the host, put on the device with one copy on the stream, then one
   grid-stride launch over the chunks of every parameter, each CTA finding its parameter by a binary
   search of the descriptors' chunk offsets; 4-element vector accesses where the pointers allow; the
   arithmetic of cpu/optim_multi.c operation for operation (no FMA contraction), so both devices
   agree. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/adam.cuh"
#include "kernels/cuda/describe.cuh"

#define OP_NAME      "adam_step_multi"
#define ADAM_THREADS 256
#define ADAM_VEC     4

/* Elements of one chunk: a CTA's unit of work (a multiple of the vector width, 4). */
#define TL_CUDA_ADAM_CHUNK 32768

/* One parameter: contiguous tensors of numel elements; param and grad of dtype (TL_CUDA_F32,
   _F64, _BF16, _F16), the moments float64 for float64, else float32; master NULL or float32.
   Its chunks are first_chunk .. first_chunk + ceil(numel / TL_CUDA_ADAM_CHUNK) - 1 of the
   launch. vec: every pointer is aligned for accesses of 4 elements. */
typedef struct tl_cuda_adam_param {
    void *param;
    const void *grad;
    void *exp_avg, *exp_avg_sq;
    float *master;
    int64_t numel, first_chunk;
    int32_t dtype, vec;
} tl_cuda_adam_param;

/* Elements [lo, hi) of one parameter (lo a multiple of ADAM_VEC): E the param's tl_elem, M the
   moments' type (the compute type). */
template <class E>
__device__ __forceinline__ void adam_range(const tl_cuda_adam_param &d, int64_t lo, int64_t hi,
                                           const tl_cuda_adam_scalars &s) {
    typedef typename E::T T;
    typedef typename E::C C;
    const tl_adam_consts<C> k(s);
    T *p = (T *)d.param;
    const T *g = (const T *)d.grad;
    C *m = (C *)d.exp_avg, *v = (C *)d.exp_avg_sq;
    float *w = d.master;
    int64_t i = lo + (int64_t)threadIdx.x * ADAM_VEC;
    if (d.vec) {
        for (; i + ADAM_VEC <= hi; i += (int64_t)blockDim.x * ADAM_VEC) {
            tl_vec<T, ADAM_VEC> pv = *(const tl_vec<T, ADAM_VEC> *)(p + i);
            const tl_vec<T, ADAM_VEC> gv = *(const tl_vec<T, ADAM_VEC> *)(g + i);
            tl_vec<C, ADAM_VEC> mv = *(const tl_vec<C, ADAM_VEC> *)(m + i);
            tl_vec<C, ADAM_VEC> vv = *(const tl_vec<C, ADAM_VEC> *)(v + i);
            tl_vec<float, ADAM_VEC> wv;
            if (w) wv = *(const tl_vec<float, ADAM_VEC> *)(w + i);
#pragma unroll
            for (int j = 0; j < ADAM_VEC; j++) {
                const C x = tl_adam_elem<C>(w ? (C)wv.v[j] : E::load(pv.v[j]), E::load(gv.v[j]),
                                            mv.v[j], vv.v[j], k);
                if (w) wv.v[j] = (float)x;
                pv.v[j] = E::store(x);
            }
            *(tl_vec<T, ADAM_VEC> *)(p + i) = pv;
            *(tl_vec<C, ADAM_VEC> *)(m + i) = mv;
            *(tl_vec<C, ADAM_VEC> *)(v + i) = vv;
            if (w) *(tl_vec<float, ADAM_VEC> *)(w + i) = wv;
        }
        /* the tail of the last chunk: i is past the vectors, each thread takes its own */
        i = lo + (hi - lo) / ADAM_VEC * ADAM_VEC + threadIdx.x;
    } else {
        i = lo + threadIdx.x;
    }
    for (; i < hi; i += blockDim.x) {
        const C x = tl_adam_elem<C>(w ? (C)w[i] : E::load(p[i]), E::load(g[i]), m[i], v[i], k);
        if (w) w[i] = (float)x;
        p[i] = E::store(x);
    }
}

/* The descriptor whose chunks include chunk c: the last one with first_chunk <= c. */
__device__ __forceinline__ int64_t adam_owner(const tl_cuda_adam_param *params, int64_t count,
                                              int64_t c) {
    int64_t lo = 0, hi = count;
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (params[mid].first_chunk <= c)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

__global__ void __launch_bounds__(ADAM_THREADS)
    adam_multi_kernel(const tl_cuda_adam_param *params, int64_t count, int64_t chunks,
                      tl_cuda_adam_scalars s, const tl_optim_args a) {
    /* a step captured in a graph: lr and step from device memory, the scalars as the host makes
       them (each thread alone: two pow a thread, no synchronization) */
    if (a.hyper) s = tl_cuda_adam_scalars_at(a, a.hyper[0], a.hyper[1]);
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const tl_cuda_adam_param d = params[adam_owner(params, count, c)];
        const int64_t lo = (c - d.first_chunk) * TL_CUDA_ADAM_CHUNK;
        const int64_t hi = lo + TL_CUDA_ADAM_CHUNK < d.numel ? lo + TL_CUDA_ADAM_CHUNK : d.numel;
        switch (d.dtype) {
        case TL_CUDA_F32:
            adam_range<tl_elem<TL_CUDA_F32>>(d, lo, hi, s);
            break;
        case TL_CUDA_F64:
            adam_range<tl_elem<TL_CUDA_F64>>(d, lo, hi, s);
            break;
        case TL_CUDA_BF16:
            adam_range<tl_elem<TL_CUDA_BF16>>(d, lo, hi, s);
            break;
        case TL_CUDA_F16:
            adam_range<tl_elem<TL_CUDA_F16>>(d, lo, hi, s);
            break;
        default:
            break; /* the op admits floating params only */
        }
    }
}

/* count descriptors (on the device, ordered by first_chunk), chunks in all: one launch. */
static tl_status launch_adam_multi(const tl_cuda_where *at, const tl_cuda_adam_param *params,
                                   int64_t count, int64_t chunks, const tl_optim_args *args) {
    if (chunks <= 0) return TL_OK;
    const unsigned grid = tl_cuda_grid(chunks, at->sm_count, 8);
    const tl_cuda_adam_scalars s = tl_cuda_adam_scalars_of(args);
    adam_multi_kernel<<<grid, ADAM_THREADS, 0, at->stream>>>(params, count, chunks, s, *args);
    return tl_cuda_check_launch(at->op);
}

/* ---- the table -------------------------------------------------------------------------- */
/* p (NULL too) aligned for accesses of 4 elements of element_size bytes */
static bool vec_aligned(const void *p, size_t element_size) {
    return tl_cuda_aligned(p, 4 * element_size);
}

static tl_status cuda_adam_step_multi(tl_tensor *const *params, const tl_tensor *const *grads,
                                      tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                                      tl_tensor *const *master, int64_t n,
                                      const tl_optim_args *args) {
    if (n <= 0) return TL_OK;
    tl_cuda_adam_param *host = (tl_cuda_adam_param *)malloc(sizeof *host * (size_t)n);
    if (!host)
        return tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory (%lld params)", (long long)n);
    int64_t count = 0, chunks = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t numel = tl_numel(params[i]);
        if (numel == 0) continue;
        const size_t size = tl_dtype_size(params[i]->dtype),
                     moment = tl_dtype_size(exp_avg[i]->dtype);
        tl_cuda_adam_param *d = &host[count++];
        d->param = tl_data(params[i]);
        d->grad = tl_data(grads[i]);
        d->exp_avg = tl_data(exp_avg[i]);
        d->exp_avg_sq = tl_data(exp_avg_sq[i]);
        d->master = master ? tl_cuda_data<float>(master[i]) : nullptr;
        d->numel = numel;
        d->first_chunk = chunks;
        d->dtype = (int32_t)params[i]->dtype;
        d->vec = vec_aligned(d->param, size) && vec_aligned(d->grad, size) &&
                 vec_aligned(d->exp_avg, moment) && vec_aligned(d->exp_avg_sq, moment) &&
                 vec_aligned(d->master, sizeof(float));
        chunks += (numel + TL_CUDA_ADAM_CHUNK - 1) / TL_CUDA_ADAM_CHUNK;
    }
    tl_status status = TL_OK;
    if (count > 0) {
        tl_cuda_where at{};
        /* the descriptors go back to the cache behind the launch, in stream order */
        tl_cuda_scratch descriptors;
        const size_t bytes = sizeof *host * (size_t)count;
        status = tl_cuda_where_of(params[0], OP_NAME, &at);
        if (status == TL_OK)
            status = descriptors.stage(at, bytes, host, bytes, "parameter descriptors");
        if (status == TL_OK)
            status = launch_adam_multi(&at, (const tl_cuda_adam_param *)descriptors.ptr, count,
                                       chunks, args);
    }
    free(host);
    return status;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(adam_step_multi, TL_DTYPES_FLOATING, optim_multi, cuda_adam_step_multi),
};

TL_KERNEL_TABLE(tl_cuda_optim_multi_table, TL_DEVICE_CUDA, entries);
