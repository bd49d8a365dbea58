/* CPU batch norm over the channels (dim 1) of [N, C, S]: the forward with the statistics and
   the running update in one kernel, the per-channel sums and the input gradient of the backward;
   a channel per thread (OpenMP), its sums in double. */
#include <math.h>

#include "kernels/cpu/nn_kernels.h"

/* [N, C, S] of a contiguous tensor whose dim 1 has the channels */
typedef struct bn_geometry {
    int64_t N, ch, S, M; /* M = N * S, a channel's elements */
} bn_geometry;

static bn_geometry geometry_of(const tl_tensor *t) {
    bn_geometry g;
    g.N = t->shape[0], g.ch = t->shape[1];
    g.S = 1;
    for (int d = 2; d < t->ndim; d++) g.S *= t->shape[d];
    g.M = g.N * g.S;
    return g;
}

/* The batch's statistics of a channel as shifted sums (the channel's first element subtracted,
   so that the sums of squares keep their precision): sums in double; var is biased. The running
   statistics move in double, rounded once. */
#define DEFINE_BATCH_NORM(suffix, T, C, LOAD, STORE)                                               \
    static tl_status batch_norm_##suffix(tl_tensor *out, tl_tensor *mean, tl_tensor *invstd,       \
                                         tl_tensor *running_mean, tl_tensor *running_var,          \
                                         const tl_tensor *in, const tl_tensor *weight,             \
                                         const tl_tensor *bias, const tl_batch_norm_args *args) {  \
        const bn_geometry g = geometry_of(in);                                                     \
        const int64_t work = tl_numel(in);                                                         \
        const T *x = tl_data(in);                                                                  \
        T *y = tl_data(out);                                                                       \
        const C *w = weight ? (const C *)tl_data(weight) : NULL;                                   \
        const C *b = bias ? (const C *)tl_data(bias) : NULL;                                       \
        C *rm = running_mean ? (C *)tl_data(running_mean) : NULL;                                  \
        C *rv = running_var ? (C *)tl_data(running_var) : NULL;                                    \
        C *mu = tl_data(mean), *is = tl_data(invstd);                                              \
        const double momentum = args->momentum, eps = args->eps;                                   \
        const bool training = args->training;                                                      \
        NN_PARALLEL_FOR(work) for (int64_t c = 0; c < g.ch; c++) {                                 \
            C m, s;                                                                                \
            if (training) {                                                                        \
                const double shift = (double)LOAD(x[c * g.S]);                                     \
                double sum = 0, sq = 0;                                                            \
                for (int64_t n = 0; n < g.N; n++) {                                                \
                    const T *p = x + (n * g.ch + c) * g.S;                                         \
                    for (int64_t j = 0; j < g.S; j++) {                                            \
                        const double d = (double)LOAD(p[j]) - shift;                               \
                        sum += d;                                                                  \
                        sq += d * d;                                                               \
                    }                                                                              \
                }                                                                                  \
                const double dm = sum / (double)g.M;                                               \
                double var = sq / (double)g.M - dm * dm;                                           \
                if (var < 0) var = 0;                                                              \
                m = (C)(shift + dm), s = (C)(1.0 / sqrt(var + eps));                               \
                if (rm) {                                                                          \
                    rm[c] = (C)((1 - momentum) * (double)rm[c] + momentum * (shift + dm));         \
                    rv[c] = (C)((1 - momentum) * (double)rv[c] +                                   \
                                momentum * (var * (double)g.M / (double)(g.M - 1)));               \
                }                                                                                  \
            } else {                                                                               \
                m = rm[c], s = (C)(1.0 / sqrt((double)rv[c] + eps));                               \
            }                                                                                      \
            mu[c] = m, is[c] = s;                                                                  \
            for (int64_t n = 0; n < g.N; n++) {                                                    \
                const int64_t at = (n * g.ch + c) * g.S;                                           \
                for (int64_t j = 0; j < g.S; j++) {                                                \
                    C v = (LOAD(x[at + j]) - m) * s;                                               \
                    if (w) v *= w[c];                                                              \
                    if (b) v += b[c];                                                              \
                    y[at + j] = STORE(v);                                                          \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_BATCH_NORM)

/* sum_dy (first) and sum_dy_xhat (second) per channel, either NULL (in, mean, invstd are read
   only for second): sums in double of each element's value in C. */
#define DEFINE_BATCH_NORM_BACKWARD_REDUCE(suffix, T, C, LOAD, STORE)                               \
    static tl_status batch_norm_backward_reduce_##suffix(                                          \
        tl_tensor *first, tl_tensor *second, const tl_tensor *grad_out, const tl_tensor *in,       \
        const tl_tensor *mean, const tl_tensor *invstd, const tl_tensor *weight,                   \
        const tl_tensor *sum_dy, const tl_tensor *sum_dy_xhat) {                                   \
        (void)weight, (void)sum_dy, (void)sum_dy_xhat;                                             \
        const bn_geometry g = geometry_of(grad_out);                                               \
        const int64_t work = tl_numel(grad_out);                                                   \
        const T *gy = tl_data(grad_out);                                                           \
        const T *x = second ? (const T *)tl_data(in) : NULL;                                       \
        const C *mu = second ? (const C *)tl_data(mean) : NULL;                                    \
        const C *is = second ? (const C *)tl_data(invstd) : NULL;                                  \
        C *a = first ? (C *)tl_data(first) : NULL;                                                 \
        C *bx = second ? (C *)tl_data(second) : NULL;                                              \
        NN_PARALLEL_FOR(work) for (int64_t c = 0; c < g.ch; c++) {                                 \
            double sa = 0, sb = 0;                                                                 \
            const C m = x ? mu[c] : (C)0, s = x ? is[c] : (C)0;                                    \
            for (int64_t n = 0; n < g.N; n++) {                                                    \
                const int64_t at = (n * g.ch + c) * g.S;                                           \
                if (x) {                                                                           \
                    for (int64_t j = 0; j < g.S; j++) {                                            \
                        const C gv = LOAD(gy[at + j]);                                             \
                        sa += (double)gv;                                                          \
                        sb += (double)(gv * ((LOAD(x[at + j]) - m) * s));                          \
                    }                                                                              \
                } else {                                                                           \
                    for (int64_t j = 0; j < g.S; j++) sa += (double)LOAD(gy[at + j]);              \
                }                                                                                  \
            }                                                                                      \
            if (a) a[c] = (C)sa;                                                                   \
            if (bx) bx[c] = (C)sb;                                                                 \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_BATCH_NORM_BACKWARD_REDUCE)

/* grad_in (first) = k * (g - sum_dy * (1 / M) - xhat * sum_dy_xhat * (1 / M)) with the sums, k * g
   without them; k = invstd * weight (invstd without a weight). */
#define DEFINE_BATCH_NORM_BACKWARD_INPUT(suffix, T, C, LOAD, STORE)                                \
    static tl_status batch_norm_backward_input_##suffix(                                           \
        tl_tensor *first, tl_tensor *second, const tl_tensor *grad_out, const tl_tensor *in,       \
        const tl_tensor *mean, const tl_tensor *invstd, const tl_tensor *weight,                   \
        const tl_tensor *sum_dy, const tl_tensor *sum_dy_xhat) {                                   \
        (void)second;                                                                              \
        const bn_geometry g = geometry_of(in);                                                     \
        const int64_t work = tl_numel(in);                                                         \
        const T *gy = tl_data(grad_out), *x = tl_data(in);                                         \
        T *dx = tl_data(first);                                                                    \
        const C *mu = tl_data(mean), *is = tl_data(invstd);                                        \
        const C *w = weight ? (const C *)tl_data(weight) : NULL;                                   \
        const C *sa = sum_dy ? (const C *)tl_data(sum_dy) : NULL;                                  \
        const C *sb = sum_dy_xhat ? (const C *)tl_data(sum_dy_xhat) : NULL;                        \
        const double inv_M = 1.0 / (double)g.M;                                                    \
        NN_PARALLEL_FOR(work) for (int64_t c = 0; c < g.ch; c++) {                                 \
            const C m = mu[c], s = is[c], k = w ? s * w[c] : s;                                    \
            const C ma = sa ? (C)((double)sa[c] * inv_M) : (C)0;                                   \
            const C mb = sb ? (C)((double)sb[c] * inv_M) : (C)0;                                   \
            for (int64_t n = 0; n < g.N; n++) {                                                    \
                const int64_t at = (n * g.ch + c) * g.S;                                           \
                if (sa) {                                                                          \
                    for (int64_t j = 0; j < g.S; j++) {                                            \
                        const C xhat = (LOAD(x[at + j]) - m) * s;                                  \
                        dx[at + j] = STORE(k * (LOAD(gy[at + j]) - ma - xhat * mb));               \
                    }                                                                              \
                } else {                                                                           \
                    for (int64_t j = 0; j < g.S; j++) dx[at + j] = STORE(k * LOAD(gy[at + j]));    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_BATCH_NORM_BACKWARD_INPUT)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(batch_norm, batch_norm, batch_norm),
    TL_KERNELS_FLOATING(batch_norm_backward_reduce, batch_norm_backward,
                        batch_norm_backward_reduce),
    TL_KERNELS_FLOATING(batch_norm_backward_input, batch_norm_backward, batch_norm_backward_input),
};

TL_KERNEL_TABLE(tl_cpu_batch_norm_table, TL_DEVICE_CPU, entries);
