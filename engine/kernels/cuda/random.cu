/* CUDA random kernels on Philox4x32-10, the device side: the same generator, the same mapping
   of counter blocks to elements and the same conversions as cpu/random.c, so a seed gives the
   CPU's numbers (randn up to the last bits of the double-precision log/sin/cos). */
#include "kernels/cuda/ops_common.cuh"

#define RANDOM_THREADS 256

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

struct philox_block {
    uint32_t w[4];
};

/* counter block {low, high, 0, 0} of the 64-bit counter, key {low, high} of the seed */
__device__ __forceinline__ philox_block philox(uint64_t counter, uint64_t seed) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
    for (int round = 0; round < 10; round++) {
        if (round > 0) k0 += PHILOX_W0, k1 += PHILOX_W1;
        const uint32_t hi0 = __umulhi(PHILOX_M0, c0), lo0 = PHILOX_M0 * c0;
        const uint32_t hi1 = __umulhi(PHILOX_M1, c2), lo1 = PHILOX_M1 * c2;
        const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c1 = lo1;
        c3 = lo0;
        c0 = n0;
        c2 = n2;
    }
    return philox_block{{c0, c1, c2, c3}};
}

__device__ __forceinline__ uint64_t word64(const philox_block &b, int half) {
    return (uint64_t)b.w[2 * half + 1] << 32 | b.w[2 * half];
}

/* uniform [0, 1) with `bits` random bits (exact in a double) */
__device__ __forceinline__ double uniform_bits(uint32_t w, int bits) {
    return (double)(w >> (32 - bits)) * ldexp(1.0, -bits);
}
__device__ __forceinline__ double uniform53(uint64_t u) {
    return (double)(u >> 11) * 0x1p-53;
}

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
        const philox_block x = philox(counter + (uint64_t)b, seed);
        double v[4] = {0, 0, 0, 0};
        if (!normal) {
#pragma unroll
            for (int j = 0; j < PER; j++)
                v[j] = F64 ? uniform53(word64(x, j)) : uniform_bits(x.w[j], bits);
        } else if (F64) {
            /* u1 in (0, 1] so that log(u1) is finite */
            box_muller(1.0 - uniform53(word64(x, 0)), uniform53(word64(x, 1)), &v[0], &v[1]);
        } else {
            box_muller(1.0 - uniform_bits(x.w[0], 24), uniform_bits(x.w[1], 24), &v[0], &v[1]);
            box_muller(1.0 - uniform_bits(x.w[2], 24), uniform_bits(x.w[3], 24), &v[2], &v[3]);
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
        const philox_block x = philox(counter + (uint64_t)b, seed);
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int64_t v = (int64_t)((uint64_t)low + word64(x, j) % range);
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
