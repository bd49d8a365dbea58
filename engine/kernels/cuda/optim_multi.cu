/* CUDA multi-tensor Adam/AdamW (adam_step_multi), the device side: one grid-stride launch over
   the chunks of every parameter, each CTA finding its parameter by a binary search of the
   descriptors' chunk offsets; 4-element vector accesses where the pointers allow; the arithmetic
   of cpu/optim_multi.c operation for operation (no FMA contraction), so both devices agree. */
#include "kernels/cuda/ops_common.cuh"
#include "kernels/cuda/optim_multi_launch.h"

#define ADAM_THREADS 256
#define ADAM_VEC     4

/* The scalars in the compute type C. */
template <typename C> struct adam_consts {
    C neg_step_size, correction2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd,
        shrink;
    bool decoupled, l2;
    __device__ explicit adam_consts(const tl_cuda_adam_scalars &s)
        : neg_step_size((C)s.neg_step_size), correction2_sqrt((C)s.correction2_sqrt),
          beta1((C)s.beta1), beta2((C)s.beta2), one_minus_beta1((C)s.one_minus_beta1),
          one_minus_beta2((C)s.one_minus_beta2), eps((C)s.eps), wd((C)s.wd), shrink((C)s.shrink),
          decoupled(s.decoupled), l2(s.l2) {}
};

/* One element: the moments updated in place, the new parameter returned. */
template <typename C>
__device__ __forceinline__ C adam_elem(C p, C g, C &m, C &v, const adam_consts<C> &k) {
    if (k.decoupled) p = tl_mul(p, k.shrink);
    if (k.l2) g = tl_add(g, tl_mul(k.wd, p));
    C mi = tl_mul(m, k.beta1);
    mi = tl_add(mi, tl_mul(k.one_minus_beta1, g));
    C vi = tl_mul(v, k.beta2);
    vi = tl_add(vi, tl_mul(tl_mul(k.one_minus_beta2, g), g));
    const C denom = tl_add(tl_div(tl_sqrt(vi), k.correction2_sqrt), k.eps);
    m = mi, v = vi;
    return tl_add(p, tl_mul(k.neg_step_size, tl_div(mi, denom)));
}

/* Elements [lo, hi) of one parameter (lo a multiple of ADAM_VEC): E the param's tl_elem, M the
   moments' type (the compute type). */
template <class E>
__device__ __forceinline__ void adam_range(const tl_cuda_adam_param &d, int64_t lo, int64_t hi,
                                           const tl_cuda_adam_scalars &s) {
    typedef typename E::T T;
    typedef typename E::C C;
    const adam_consts<C> k(s);
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
                const C x = adam_elem<C>(w ? (C)wv.v[j] : E::load(pv.v[j]), E::load(gv.v[j]),
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
        const C x = adam_elem<C>(w ? (C)w[i] : E::load(p[i]), E::load(g[i]), m[i], v[i], k);
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
                      tl_cuda_adam_scalars s) {
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

extern "C" tl_status tl_cuda_adam_multi_run(const tl_cuda_where *at,
                                            const tl_cuda_adam_param *params, int64_t count,
                                            int64_t chunks, const tl_cuda_adam_scalars *s) {
    if (chunks <= 0) return TL_OK;
    const unsigned grid = tl_cuda_grid(chunks, at->sm_count, 8);
    adam_multi_kernel<<<grid, ADAM_THREADS, 0, at->stream>>>(params, count, chunks, *s);
    return tl_cuda_check_launch(at->op);
}
