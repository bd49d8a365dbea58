/* CPU multi-tensor Adam/AdamW (adam_step_multi): adam_step's update of every parameter of a call,
   with float32 moments and optional float32 master copies for bfloat16/float16 parameters,
   OpenMP over chunks of all the tensors at once. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/nn_kernels.h"

/* Elements of one task of the parallel loop. */
#define CHUNK 16384

/* The step's scalars in float (float32, bfloat16, float16 params) and double (float64), computed
   as cpu/optim.c computes them. */
typedef struct adam_scalars {
    float neg_step_size, correction2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd,
        shrink;
    double d_neg_step_size, d_correction2_sqrt, d_beta1, d_beta2, d_one_minus_beta1,
        d_one_minus_beta2, d_eps, d_wd, d_shrink;
    bool decoupled, l2;
} adam_scalars;

static adam_scalars scalars_of(const tl_optim_args *a) {
    const double correction1 = 1 - pow(a->beta1, (double)a->step);
    const double correction2 = 1 - pow(a->beta2, (double)a->step);
    adam_scalars s = {
        .d_neg_step_size = -(a->lr / correction1),
        .d_correction2_sqrt = sqrt(correction2),
        .d_beta1 = a->beta1,
        .d_beta2 = a->beta2,
        .d_one_minus_beta1 = 1 - a->beta1,
        .d_one_minus_beta2 = 1 - a->beta2,
        .d_eps = a->eps,
        .d_wd = a->weight_decay,
        .d_shrink = 1 - a->lr * a->weight_decay,
        .decoupled = a->decoupled,
        .l2 = !a->decoupled && a->weight_decay != 0,
    };
    s.neg_step_size = (float)s.d_neg_step_size, s.correction2_sqrt = (float)s.d_correction2_sqrt;
    s.beta1 = (float)s.d_beta1, s.beta2 = (float)s.d_beta2;
    s.one_minus_beta1 = (float)s.d_one_minus_beta1, s.one_minus_beta2 = (float)s.d_one_minus_beta2;
    s.eps = (float)s.d_eps, s.wd = (float)s.d_wd, s.shrink = (float)s.d_shrink;
    return s;
}

/* One element in float: the moments updated in place, the new parameter returned (the
   operations of cpu/optim.c's adam, in its order). */
static inline float adam_float(float p, float g, float *m, float *v, const adam_scalars *s) {
    if (s->decoupled) p = p * s->shrink;
    if (s->l2) g = g + s->wd * p;
    float mi = *m * s->beta1;
    mi = mi + s->one_minus_beta1 * g;
    float vi = *v * s->beta2;
    vi = vi + s->one_minus_beta2 * g * g;
    const float denom = sqrtf(vi) / s->correction2_sqrt + s->eps;
    *m = mi, *v = vi;
    return p + s->neg_step_size * (mi / denom);
}

static inline double adam_double(double p, double g, double *m, double *v, const adam_scalars *s) {
    if (s->decoupled) p = p * s->d_shrink;
    if (s->l2) g = g + s->d_wd * p;
    double mi = *m * s->d_beta1;
    mi = mi + s->d_one_minus_beta1 * g;
    double vi = *v * s->d_beta2;
    vi = vi + s->d_one_minus_beta2 * g * g;
    const double denom = sqrt(vi) / s->d_correction2_sqrt + s->d_eps;
    *m = mi, *v = vi;
    return p + s->d_neg_step_size * (mi / denom);
}

/* Elements [lo, hi) of parameter i. */
static void step_range(tl_tensor *param, const tl_tensor *grad, tl_tensor *exp_avg,
                       tl_tensor *exp_avg_sq, tl_tensor *master, int64_t lo, int64_t hi,
                       const adam_scalars *s) {
    switch (param->dtype) {
    case TL_F32: {
        float *restrict p = tl_data(param), *restrict m = tl_data(exp_avg),
                        *restrict v = tl_data(exp_avg_sq);
        const float *restrict g = tl_data(grad);
        for (int64_t i = lo; i < hi; i++) p[i] = adam_float(p[i], g[i], &m[i], &v[i], s);
        break;
    }
    case TL_F64: {
        double *restrict p = tl_data(param), *restrict m = tl_data(exp_avg),
                         *restrict v = tl_data(exp_avg_sq);
        const double *restrict g = tl_data(grad);
        for (int64_t i = lo; i < hi; i++) p[i] = adam_double(p[i], g[i], &m[i], &v[i], s);
        break;
    }
    case TL_BF16:
    case TL_F16: {
        uint16_t *restrict p = tl_data(param);
        const uint16_t *restrict g = tl_data(grad);
        float *restrict m = tl_data(exp_avg), *restrict v = tl_data(exp_avg_sq);
        float *restrict w = master ? tl_data(master) : NULL;
        if (param->dtype == TL_BF16) {
            for (int64_t i = lo; i < hi; i++) {
                const float x =
                    adam_float(w ? w[i] : tl_bf16_load(p[i]), tl_bf16_load(g[i]), &m[i], &v[i], s);
                if (w) w[i] = x;
                p[i] = tl_bf16_round(x);
            }
        } else {
            for (int64_t i = lo; i < hi; i++) {
                const float x =
                    adam_float(w ? w[i] : tl_f16_load(p[i]), tl_f16_load(g[i]), &m[i], &v[i], s);
                if (w) w[i] = x;
                p[i] = tl_f16_round(x);
            }
        }
        break;
    }
    default:
        break; /* the op admits floating params only */
    }
}

/* The parameter whose chunks include chunk c: the last i with first[i] <= c (first[n] the
   total; empty parameters have no chunk). */
static int64_t owner_of(const int64_t *first, int64_t n, int64_t c) {
    int64_t lo = 0, hi = n; /* first[lo] <= c < first[hi] */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (first[mid] <= c)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

static tl_status adam_multi(tl_tensor *const *params, const tl_tensor *const *grads,
                            tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                            tl_tensor *const *master, int64_t n, const tl_optim_args *args) {
    if (n <= 0) return TL_OK;
    int64_t *first = malloc(sizeof *first * (size_t)(n + 1));
    if (!first)
        return tl_error(TL_ERR_MEMORY, "adam_step_multi: out of memory (%lld params)",
                        (long long)n);
    int64_t elements = 0;
    first[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t numel = tl_numel(params[i]);
        first[i + 1] = first[i] + (numel + CHUNK - 1) / CHUNK;
        elements += numel;
    }
    const int64_t chunks = first[n];
    const adam_scalars s = scalars_of(args);
#pragma omp parallel for schedule(dynamic) if (elements > NN_PARALLEL_THRESHOLD)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t i = owner_of(first, n, c);
        const int64_t lo = (c - first[i]) * CHUNK, numel = tl_numel(params[i]);
        const int64_t hi = lo + CHUNK < numel ? lo + CHUNK : numel;
        step_range(params[i], grads[i], exp_avg[i], exp_avg_sq[i], master ? master[i] : NULL, lo,
                   hi, &s);
    }
    free(first);
    return TL_OK;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(adam_step_multi, TL_DTYPES_FLOATING, optim_multi, adam_multi),
};

TL_KERNEL_TABLE(tl_cpu_optim_multi_table, TL_DEVICE_CPU, entries);
