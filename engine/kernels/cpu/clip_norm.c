/* CPU clip_grad_norm_multi: the total norm of many gradients (one double partial per chunk of
   every tensor, OpenMP over the chunks, the partials merged in chunk order, so the result does not
   depend on the thread count), then every gradient scaled in place when the coefficient is < 1. */
#include <math.h>
#include <stdlib.h>

#include "kernels/clip_norm.h"
#include "kernels/cpu/nn_kernels.h"

#define OP_NAME "clip_grad_norm_multi"

/* Elements of one chunk: one partial result, one task of the parallel loops. */
#define CHUNK 16384

/* |x|^p of one element in float (float32, bfloat16, float16 grads) or double (float64). */
static inline float elem_f(float x, int mode, float p) {
    switch (mode) {
    case TL_CLIP_NORM_TWO:
        return x * x;
    case TL_CLIP_NORM_P:
        return powf(fabsf(x), p);
    default:
        return fabsf(x); /* ONE, INF */
    }
}
static inline double elem_d(double x, int mode, double p) {
    switch (mode) {
    case TL_CLIP_NORM_TWO:
        return x * x;
    case TL_CLIP_NORM_P:
        return pow(fabs(x), p);
    default:
        return fabs(x);
    }
}

/* Elements [lo, hi) of a 16-bit float grad loaded to float. */
static double half_partial(const uint16_t *g, bool bf16, int64_t lo, int64_t hi, int mode,
                           float p) {
    double acc = 0;
    for (int64_t i = lo; i < hi; i++) {
        const float x = bf16 ? tl_bf16_load(g[i]) : tl_f16_load(g[i]);
        acc = tl_clip_merge(mode, acc, (double)elem_f(x, mode, p));
    }
    return acc;
}

/* The partial result (sum of |x|^p, or max |x|) of elements [lo, hi) of grad. */
static double partial(const tl_tensor *grad, int64_t lo, int64_t hi, int mode, double p) {
    double acc = 0;
    switch (grad->dtype) {
    case TL_F32: {
        const float *g = tl_data(grad);
        const float pf = (float)p;
        for (int64_t i = lo; i < hi; i++)
            acc = tl_clip_merge(mode, acc, (double)elem_f(g[i], mode, pf));
        break;
    }
    case TL_F64: {
        const double *g = tl_data(grad);
        for (int64_t i = lo; i < hi; i++) acc = tl_clip_merge(mode, acc, elem_d(g[i], mode, p));
        break;
    }
    case TL_BF16:
    case TL_F16:
        acc = half_partial(tl_data(grad), grad->dtype == TL_BF16, lo, hi, mode, (float)p);
        break;
    default:
        break; /* the op admits floating grads only */
    }
    return acc;
}

/* Elements [lo, hi) of grad times coef (a value of the total's dtype), as torch's mul_ by the
   0-dim coefficient: in float for float32, the coefficient rounded to the grad's dtype first for
   bfloat16/float16, in double for float64. */
static void scale(tl_tensor *grad, int64_t lo, int64_t hi, double coef) {
    switch (grad->dtype) {
    case TL_F32: {
        float *g = tl_data(grad);
        const float c = (float)coef;
        for (int64_t i = lo; i < hi; i++) g[i] = g[i] * c;
        break;
    }
    case TL_F64: {
        double *g = tl_data(grad);
        for (int64_t i = lo; i < hi; i++) g[i] = g[i] * coef;
        break;
    }
    case TL_BF16: {
        uint16_t *g = tl_data(grad);
        const float c = tl_bf16_load(tl_bf16_round((float)coef));
        for (int64_t i = lo; i < hi; i++) g[i] = tl_bf16_round(tl_bf16_load(g[i]) * c);
        break;
    }
    case TL_F16: {
        uint16_t *g = tl_data(grad);
        const float c = tl_f16_load(tl_f16_round((float)coef));
        for (int64_t i = lo; i < hi; i++) g[i] = tl_f16_round(tl_f16_load(g[i]) * c);
        break;
    }
    default:
        break;
    }
}

/* The grad whose chunks include chunk c: the last i with first[i] <= c (first[n] the total;
   empty grads have no chunk). */
static int64_t owner_of(const int64_t *first, int64_t n, int64_t c) {
    int64_t lo = 0, hi = n; /* first[lo] <= c < first[hi] */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (first[mid] <= c)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Chunk c's range [*lo, *hi) in its grad, which it returns. */
static int64_t chunk_range(tl_tensor *const *grads, const int64_t *first, int64_t n, int64_t c,
                           int64_t *lo, int64_t *hi) {
    const int64_t i = owner_of(first, n, c), numel = tl_numel(grads[i]);
    *lo = (c - first[i]) * CHUNK;
    *hi = *lo + CHUNK < numel ? *lo + CHUNK : numel;
    return i;
}

static tl_status clip_multi(tl_tensor *const *grads, int64_t n, double max_norm, double norm_type,
                            tl_tensor *total) {
    int64_t *first = malloc(sizeof *first * (size_t)(n + 1));
    if (!first)
        return tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory (%lld grads)", (long long)n);
    int64_t elements = 0;
    first[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t numel = tl_numel(grads[i]);
        first[i + 1] = first[i] + (numel + CHUNK - 1) / CHUNK;
        elements += numel;
    }
    const int64_t chunks = first[n];
    double *partials = malloc(sizeof *partials * (size_t)(chunks > 0 ? chunks : 1));
    if (!partials) {
        free(first);
        return tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory (%lld chunks)", (long long)chunks);
    }
    const int mode = tl_clip_norm_mode(norm_type);
#pragma omp parallel for schedule(dynamic) if (elements > NN_PARALLEL_THRESHOLD)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t lo, hi;
        const int64_t i = chunk_range(grads, first, n, c, &lo, &hi);
        partials[c] = partial(grads[i], lo, hi, mode, norm_type);
    }
    double acc = 0;
    for (int64_t c = 0; c < chunks; c++) acc = tl_clip_merge(mode, acc, partials[c]);
    double value, coef;
    const bool f64 = total->dtype == TL_F64;
    tl_clip_norm_finish(acc, mode, norm_type, f64, max_norm, &value, &coef);
    if (f64)
        *(double *)tl_data(total) = value;
    else
        *(float *)tl_data(total) = (float)value;
    if (tl_clip_norm_scales(coef)) {
#pragma omp parallel for schedule(dynamic) if (elements > NN_PARALLEL_THRESHOLD)
        for (int64_t c = 0; c < chunks; c++) {
            int64_t lo, hi;
            const int64_t i = chunk_range(grads, first, n, c, &lo, &hi);
            scale(grads[i], lo, hi, coef);
        }
    }
    free(partials);
    free(first);
    return TL_OK;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(clip_grad_norm_multi, TL_DTYPES_FLOATING, clip_norm_multi, clip_multi),
};

TL_KERNEL_TABLE(tl_cpu_clip_norm_table, TL_DEVICE_CPU, entries);
