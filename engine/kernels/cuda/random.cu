/* CUDA random kernels on Philox4x32-10, the device side: the same generator, the same mapping
   of counter blocks to elements and the same conversions as cpu/random.c, so a seed gives the
   CPU's numbers (randn up to the last bits of the double-precision log/sin/cos). */
#include "kernels/cuda/ops_common.cuh"
#include "kernels/philox.h"

#define RANDOM_THREADS 256

__device__ __forceinline__ void box_muller(double u1, double u2, double *z0, double *z1) {
    const double r = sqrt(-2.0 * log(u1)), theta = 6.283185307179586 * u2;
    *z0 = r * cos(theta);
    *z1 = r * sin(theta);
}

/* One thread per Philox block: float64 takes 2 words per value (2 values per block), smaller
   dtypes one (4 per block), randn pairs them for Box-Muller. */
template <int D>
__global__ void __launch_bounds__(RANDOM_THREADS)
    random_floats(typename tl_elem<D>::T *out, int64_t n, uint64_t seed, uint64_t counter,
                  bool normal, int bits) {
    constexpr bool F64 = D == TL_CUDA_F64;
    constexpr int PER = F64 ? 2 : 4;
    const int64_t blocks = (n + PER - 1) / PER, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < blocks; b += stride) {
        const tl_philox_block x = tl_philox(counter + (uint64_t)b, seed);
        double v[4] = {0, 0, 0, 0};
        if (!normal) {
#pragma unroll
            for (int j = 0; j < PER; j++)
                v[j] = F64 ? tl_uniform53(tl_philox_word64(&x, j)) : tl_uniform_bits(x.w[j], bits);
        } else if (F64) {
            /* u1 in (0, 1] so that log(u1) is finite */
            box_muller(1.0 - tl_uniform53(tl_philox_word64(&x, 0)),
                       tl_uniform53(tl_philox_word64(&x, 1)), &v[0], &v[1]);
        } else {
            box_muller(1.0 - tl_uniform_bits(x.w[0], 24), tl_uniform_bits(x.w[1], 24), &v[0],
                       &v[1]);
            box_muller(1.0 - tl_uniform_bits(x.w[2], 24), tl_uniform_bits(x.w[3], 24), &v[2],
                       &v[3]);
        }
#pragma unroll
        for (int j = 0; j < PER; j++)
            if (b * PER + j < n) out[b * PER + j] = tl_elem<D>::from_wide(v[j]);
    }
}

/* low + (64 random bits mod range), two values per block */
template <int D>
__global__ void __launch_bounds__(RANDOM_THREADS)
    random_ints(typename tl_elem<D>::T *out, int64_t n, uint64_t seed, uint64_t counter,
                int64_t low, uint64_t range) {
    const int64_t blocks = (n + 1) / 2, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < blocks; b += stride) {
        const tl_philox_block x = tl_philox(counter + (uint64_t)b, seed);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int64_t v = (int64_t)((uint64_t)low + tl_philox_word64(&x, j) % range);
            if (b * 2 + j < n) {
                if constexpr (D == TL_CUDA_I32 || D == TL_CUDA_I64)
                    out[b * 2 + j] = tl_elem<D>::from_wide(v);
                else
                    out[b * 2 + j] = tl_elem<D>::from_wide((double)v);
            }
        }
    }
}

template <int D> static tl_status run_dtype(const tl_cuda_random *r) {
    typedef typename tl_elem<D>::T T;
    const int bits = D == TL_CUDA_BF16 ? 8 : D == TL_CUDA_F16 ? 11 : 24;
    const int per = r->kind == TL_CUDA_RANDINT || D == TL_CUDA_F64 ? 2 : 4;
    const unsigned grid =
        tl_cuda_grid(tl_ceil_div(tl_ceil_div(r->n, per), RANDOM_THREADS), r->at.sm_count);
    if (r->kind == TL_CUDA_RANDINT) {
        random_ints<D><<<grid, RANDOM_THREADS, 0, r->at.stream>>>((T *)r->out, r->n, r->seed,
                                                                  r->counter, r->low, r->range);
    } else if constexpr (D != TL_CUDA_I32 && D != TL_CUDA_I64) {
        random_floats<D><<<grid, RANDOM_THREADS, 0, r->at.stream>>>(
            (T *)r->out, r->n, r->seed, r->counter, r->kind == TL_CUDA_RANDN, bits);
    } else {
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype", r->at.op);
    }
    return tl_cuda_check_launch(r->at.op);
}

extern "C" tl_status tl_cuda_random_run(const tl_cuda_random *r) {
    return tl_cuda_dispatch<TL_CUDA_NUMERIC>(
        r->dtype, r->at.op, [&](auto e) -> tl_status { return run_dtype<decltype(e)::dtype>(r); });
}
