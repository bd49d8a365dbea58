/* CUDA random kernels (rand, randn, randint) on Philox4x32-10 and their table, the dtypes of
   cpu/random.c: the same generator, the same mapping
   of counter blocks to elements and the same conversions as cpu/random.c, so a seed gives the
   CPU's numbers (randn up to the last bits of the double-precision log/sin/cos). */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/philox.h"

#define RANDOM_THREADS 256

enum { TL_CUDA_RAND, TL_CUDA_RANDN, TL_CUDA_RANDINT };
/* n contiguous elements of dtype from Philox blocks counter, counter + 1, ... of seed;
   randint: low + (64 bits mod range). */
typedef struct tl_cuda_random {
    tl_cuda_where at;
    int kind, dtype;
    void *out;
    int64_t n;
    uint64_t seed, counter;
    int64_t low;
    uint64_t range;
} tl_cuda_random;

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
                  const uint64_t *rng_cell, bool normal, int bits) {
    tl_rng_corrected(rng_cell, seed, counter);
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
                const uint64_t *rng_cell, int64_t low, uint64_t range) {
    tl_rng_corrected(rng_cell, seed, counter);
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

template <int D> static tl_status launch_dtype(const tl_cuda_random *r) {
    typedef typename tl_elem<D>::T T;
    const int bits = D == TL_CUDA_BF16 ? 8 : D == TL_CUDA_F16 ? 11 : 24;
    const int per = r->kind == TL_CUDA_RANDINT || D == TL_CUDA_F64 ? 2 : 4;
    const unsigned grid =
        tl_cuda_grid(tl_ceil_div(tl_ceil_div(r->n, per), RANDOM_THREADS), r->at.sm_count);
    const uint64_t *cell = tl_cuda_rng_cell(r->at.device);
    if (r->kind == TL_CUDA_RANDINT) {
        random_ints<D><<<grid, RANDOM_THREADS, 0, r->at.stream>>>(
            (T *)r->out, r->n, r->seed, r->counter, cell, r->low, r->range);
    } else if constexpr (D != TL_CUDA_I32 && D != TL_CUDA_I64) {
        random_floats<D><<<grid, RANDOM_THREADS, 0, r->at.stream>>>(
            (T *)r->out, r->n, r->seed, r->counter, cell, r->kind == TL_CUDA_RANDN, bits);
    } else {
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype", r->at.op);
    }
    return tl_cuda_check_launch(r->at.op);
}

static tl_status launch_random(const tl_cuda_random *r) {
    return tl_cuda_dispatch<TL_CUDA_NUMERIC>(r->dtype, r->at.op, [&](auto e) -> tl_status {
        return launch_dtype<decltype(e)::dtype>(r);
    });
}

/* ---- the table: the streams are the CPU's, element for element -------------------------- */
static tl_status run_random(const char *op, int kind, tl_tensor *out, const tl_op_args *args) {
    tl_cuda_random r{};
    r.kind = kind;
    r.dtype = tl_cuda_dtype_of(out);
    r.out = tl_data(out);
    r.n = tl_numel(out);
    r.seed = args->seed;
    r.counter = args->counter;
    if (kind == TL_CUDA_RANDINT) {
        int64_t low = (int64_t)args->scalar[0], high = (int64_t)args->scalar[1];
        r.low = low;
        r.range = (uint64_t)high - (uint64_t)low;
    }
    if (r.n == 0) return TL_OK;
    if (!tl_is_contiguous(out))
        return tl_error(TL_ERR_ARGUMENT, "%s: the CUDA kernel needs a contiguous output", op);
    TL_TRY(tl_cuda_where_of(out, op, &r.at));
    return launch_random(&r);
}

static tl_status cuda_rand(tl_tensor *out, const tl_op_args *args) {
    return run_random("rand", TL_CUDA_RAND, out, args);
}

static tl_status cuda_randn(tl_tensor *out, const tl_op_args *args) {
    return run_random("randn", TL_CUDA_RANDN, out, args);
}

static tl_status cuda_randint(tl_tensor *out, const tl_op_args *args) {
    return run_random("randint", TL_CUDA_RANDINT, out, args);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(rand, TL_DTYPES_FLOATING, random, cuda_rand),
    TL_KERNEL(randn, TL_DTYPES_FLOATING, random, cuda_randn),
    TL_KERNEL(randint, TL_DTYPES_NUMERIC, random, cuda_randint),
};

TL_KERNEL_TABLE(tl_cuda_random_table, TL_DEVICE_CUDA, entries);
