/* CPU random kernels on Philox4x32-10, a counter-based generator: block c of a stream is
   philox(counter c, key seed), so any element can be computed on its own (in parallel here,
   and the same way on a GPU). */
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/philox.h"

#define PARALLEL_THRESHOLD 16384

/* How elements use the stream (engine/ops/random.c reserves blocks by the same rule):
   32-bit dtypes and below take one word per uniform (4 per block), randn pairs words for
   Box-Muller; float64 takes two words per uniform (2 per block); randint takes two words
   per value (2 per block). */
static void box_muller(double u1, double u2, double *z0, double *z1) {
    double r = sqrt(-2.0 * log(u1)), theta = 6.283185307179586 * u2;
    *z0 = r * cos(theta);
    *z1 = r * sin(theta);
}

static void store(tl_dtype dtype, void *data, int64_t i, double v) {
    switch (dtype) {
    case TL_F32:
        ((float *)data)[i] = (float)v;
        break;
    case TL_F64:
        ((double *)data)[i] = v;
        break;
    case TL_BF16:
        ((uint16_t *)data)[i] = tl_f32_to_bf16((float)v);
        break;
    case TL_F16:
        ((uint16_t *)data)[i] = tl_f32_to_f16((float)v);
        break;
    case TL_I32:
        ((int32_t *)data)[i] = (int32_t)v;
        break;
    case TL_I64:
        ((int64_t *)data)[i] = (int64_t)v;
        break;
    default:
        break;
    }
}

static int significand_bits(tl_dtype dtype) {
    return dtype == TL_BF16 ? 8 : dtype == TL_F16 ? 11 : 24;
}

static tl_status rand_kernel(tl_tensor *out, const tl_op_args *args) {
    int64_t n = tl_numel(out);
    void *data = tl_data(out);
    tl_dtype dtype = out->dtype;
    int per = dtype == TL_F64 ? 2 : 4, bits = significand_bits(dtype);
    int64_t blocks = (n + per - 1) / per;
#pragma omp parallel for if (n > PARALLEL_THRESHOLD)
    for (int64_t b = 0; b < blocks; b++) {
        tl_philox_block x = tl_philox(args->counter + (uint64_t)b, args->seed);
        for (int j = 0; j < per && b * per + j < n; j++) {
            double v = dtype == TL_F64 ? tl_uniform53(tl_philox_word64(&x, j))
                                       : tl_uniform_bits(x.w[j], bits);
            store(dtype, data, b * per + j, v);
        }
    }
    return TL_OK;
}

static tl_status randn_kernel(tl_tensor *out, const tl_op_args *args) {
    int64_t n = tl_numel(out);
    void *data = tl_data(out);
    tl_dtype dtype = out->dtype;
    int per = dtype == TL_F64 ? 2 : 4;
    int64_t blocks = (n + per - 1) / per;
#pragma omp parallel for if (n > PARALLEL_THRESHOLD)
    for (int64_t b = 0; b < blocks; b++) {
        tl_philox_block x = tl_philox(args->counter + (uint64_t)b, args->seed);
        double z[4] = {0, 0, 0, 0};
        if (dtype == TL_F64) {
            /* u1 in (0, 1] so that log(u1) is finite */
            box_muller(1.0 - tl_uniform53(tl_philox_word64(&x, 0)),
                       tl_uniform53(tl_philox_word64(&x, 1)), &z[0], &z[1]);
        } else {
            box_muller(1.0 - tl_uniform_bits(x.w[0], 24), tl_uniform_bits(x.w[1], 24), &z[0],
                       &z[1]);
            box_muller(1.0 - tl_uniform_bits(x.w[2], 24), tl_uniform_bits(x.w[3], 24), &z[2],
                       &z[3]);
        }
        for (int j = 0; j < per && b * per + j < n; j++) store(dtype, data, b * per + j, z[j]);
    }
    return TL_OK;
}

/* low + (64 random bits mod (high - low)); scalar[0..1] = [low, high), integers exact in a
   double (the op layer checks), high > low. */
static tl_status randint_kernel(tl_tensor *out, const tl_op_args *args) {
    int64_t n = tl_numel(out), low = (int64_t)args->scalar[0], high = (int64_t)args->scalar[1];
    uint64_t range = (uint64_t)high - (uint64_t)low;
    void *data = tl_data(out);
    tl_dtype dtype = out->dtype;
    int64_t blocks = (n + 1) / 2;
#pragma omp parallel for if (n > PARALLEL_THRESHOLD)
    for (int64_t b = 0; b < blocks; b++) {
        tl_philox_block x = tl_philox(args->counter + (uint64_t)b, args->seed);
        for (int j = 0; j < 2 && b * 2 + j < n; j++) {
            int64_t v = (int64_t)((uint64_t)low + tl_philox_word64(&x, j) % range);
            int64_t i = b * 2 + j;
            if (dtype == TL_I64)
                ((int64_t *)data)[i] = v;
            else if (dtype == TL_I32)
                ((int32_t *)data)[i] = (int32_t)v;
            else
                store(dtype, data, i, (double)v);
        }
    }
    return TL_OK;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(rand, TL_DTYPES_FLOATING, random, rand_kernel),
    TL_KERNEL(randn, TL_DTYPES_FLOATING, random, randn_kernel),
    TL_KERNEL(randint, TL_DTYPES_NUMERIC, random, randint_kernel),
};

TL_KERNEL_TABLE(tl_cpu_random_table, TL_DEVICE_CPU, entries);
