/* CPU clip_grad_norm_multi: the total norm of many gradients (one double partial per chunk of
   every tensor, OpenMP over the chunks, the partials merged in chunk order, so the result does not
   depend on the thread count), then every gradient scaled in place when the coefficient is < 1. */
#include <math.h>
#include <stdlib.h>

#include "kernels/clip_norm.h"
#include "kernels/cpu/loop.h"
#include "kernels/cpu/nn_kernels.h"

#define OP_NAME "clip_grad_norm_multi"

/* |x|^p of one element (|x| for the 1 and infinity norms) in R: float (float32, bfloat16, float16
   grads) or double (float64). */
#define DEFINE_ELEMENT_NORM(name, R, ABS, POW)                                                     \
    static inline R name(R x, int mode, R p) {                                                     \
        switch (mode) {                                                                            \
        case TL_CLIP_NORM_TWO:                                                                     \
            return x * x;                                                                          \
        case TL_CLIP_NORM_P:                                                                       \
            return POW(ABS(x), p);                                                                 \
        default:                                                                                   \
            return ABS(x); /* ONE, INF */                                                          \
        }                                                                                          \
    }
DEFINE_ELEMENT_NORM(elem_f, float, fabsf, powf)
DEFINE_ELEMENT_NORM(elem_d, double, fabs, pow)

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

static tl_status clip_multi(tl_tensor *const *grads, int64_t n, double max_norm, double norm_type,
                            tl_tensor *total) {
    tl_cpu_chunks chunks;
    TL_TRY(tl_cpu_chunks_plan(&chunks, grads, n, OP_NAME));
    double *partials = malloc(sizeof *partials * (size_t)(chunks.count > 0 ? chunks.count : 1));
    if (!partials) {
        tl_cpu_chunks_free(&chunks);
        return tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory (%lld chunks)",
                        (long long)chunks.count);
    }
    const int mode = tl_clip_norm_mode(norm_type);
#pragma omp parallel for schedule(dynamic) if (chunks.elements > NN_PARALLEL_THRESHOLD)
    for (int64_t c = 0; c < chunks.count; c++) {
        int64_t lo, hi;
        const int64_t i = tl_cpu_chunk_range(&chunks, c, &lo, &hi);
        partials[c] = partial(grads[i], lo, hi, mode, norm_type);
    }
    double acc = 0;
    for (int64_t c = 0; c < chunks.count; c++) acc = tl_clip_merge(mode, acc, partials[c]);
    double value, coef;
    const bool f64 = total->dtype == TL_F64;
    tl_clip_norm_finish(acc, mode, norm_type, f64, max_norm, &value, &coef);
    if (f64)
        *(double *)tl_data(total) = value;
    else
        *(float *)tl_data(total) = (float)value;
    if (tl_clip_norm_scales(coef)) {
#pragma omp parallel for schedule(dynamic) if (chunks.elements > NN_PARALLEL_THRESHOLD)
        for (int64_t c = 0; c < chunks.count; c++) {
            int64_t lo, hi;
            const int64_t i = tl_cpu_chunk_range(&chunks, c, &lo, &hi);
            scale(grads[i], lo, hi, coef);
        }
    }
    free(partials);
    tl_cpu_chunks_free(&chunks);
    return TL_OK;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(clip_grad_norm_multi, TL_DTYPES_FLOATING, clip_norm_multi, clip_multi),
};

TL_KERNEL_TABLE(tl_cpu_clip_norm_table, TL_DEVICE_CPU, entries);
