/* CPU multi-tensor Adam/AdamW (adam_step_multi): adam_step's update of every parameter of a call,
   with float32 moments and optional float32 master copies for bfloat16/float16 parameters,
   OpenMP over chunks of all the tensors at once (loop.h's tl_cpu_chunks). */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/loop.h"
#include "kernels/cpu/nn_kernels.h"

/* The step's scalars in both compute types, float (float32, bfloat16, float16 params) and double
   (float64), computed as cpu/optim.c computes them. */
typedef struct adam_float_scalars {
    float neg_step_size, correction2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd,
        shrink;
} adam_float_scalars;
typedef struct adam_double_scalars {
    double neg_step_size, correction2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd,
        shrink;
} adam_double_scalars;
typedef struct adam_scalars {
    adam_float_scalars f; /* the d ones rounded */
    adam_double_scalars d;
    bool decoupled, l2;
} adam_scalars;

static adam_scalars scalars_of(const tl_optim_args *a) {
    const double correction1 = 1 - pow(a->beta1, (double)a->step);
    const double correction2 = 1 - pow(a->beta2, (double)a->step);
    adam_scalars s = {
        .d = {.neg_step_size = -(a->lr / correction1),
              .correction2_sqrt = sqrt(correction2),
              .beta1 = a->beta1,
              .beta2 = a->beta2,
              .one_minus_beta1 = 1 - a->beta1,
              .one_minus_beta2 = 1 - a->beta2,
              .eps = a->eps,
              .wd = a->weight_decay,
              .shrink = 1 - a->lr * a->weight_decay},
        .decoupled = a->decoupled,
        .l2 = !a->decoupled && a->weight_decay != 0,
    };
    s.f = (adam_float_scalars){
        (float)s.d.neg_step_size,   (float)s.d.correction2_sqrt, (float)s.d.beta1, (float)s.d.beta2,
        (float)s.d.one_minus_beta1, (float)s.d.one_minus_beta2,  (float)s.d.eps,   (float)s.d.wd,
        (float)s.d.shrink};
    return s;
}

/* One element in R with the scalars s->K: the moments updated in place, the new parameter
   returned (the operations of cpu/optim.c's adam, in its order). */
#define DEFINE_ADAM_ELEMENT(name, R, K)                                                            \
    static inline R name(R p, R g, R *m, R *v, const adam_scalars *s) {                            \
        if (s->decoupled) p = p * s->K.shrink;                                                     \
        if (s->l2) g = g + s->K.wd * p;                                                            \
        R mi = *m * s->K.beta1;                                                                    \
        mi = mi + s->K.one_minus_beta1 * g;                                                        \
        R vi = *v * s->K.beta2;                                                                    \
        vi = vi + s->K.one_minus_beta2 * g * g;                                                    \
        const R denom = NN_SQRT(vi) / s->K.correction2_sqrt + s->K.eps;                            \
        *m = mi, *v = vi;                                                                          \
        return p + s->K.neg_step_size * (mi / denom);                                              \
    }
DEFINE_ADAM_ELEMENT(adam_float, float, f)
DEFINE_ADAM_ELEMENT(adam_double, double, d)

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

static tl_status adam_multi(tl_tensor *const *params, const tl_tensor *const *grads,
                            tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                            tl_tensor *const *master, int64_t n, const tl_optim_args *args) {
    if (n <= 0) return TL_OK;
    tl_cpu_chunks chunks;
    TL_TRY(tl_cpu_chunks_plan(&chunks, params, n, "adam_step_multi"));
    const adam_scalars s = scalars_of(args);
#pragma omp parallel for schedule(dynamic) if (chunks.elements > NN_PARALLEL_THRESHOLD)
    for (int64_t c = 0; c < chunks.count; c++) {
        int64_t lo, hi;
        const int64_t i = tl_cpu_chunk_range(&chunks, c, &lo, &hi);
        step_range(params[i], grads[i], exp_avg[i], exp_avg_sq[i], master ? master[i] : NULL, lo,
                   hi, &s);
    }
    tl_cpu_chunks_free(&chunks);
    return TL_OK;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(adam_step_multi, TL_DTYPES_FLOATING, optim_multi, adam_multi),
};

TL_KERNEL_TABLE(tl_cpu_optim_multi_table, TL_DEVICE_CPU, entries);
