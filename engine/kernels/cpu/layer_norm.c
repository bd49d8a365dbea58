/* CPU layer norm over the last dim: forward with mean/rstd, input and weight backward. */
#include <math.h>

#include "kernels/cpu/nn_kernels.h"

#define COLUMN_BLOCK 64

/* T: element type; C: compute type, also mean's and rstd's; sums in double. */
#define DEFINE_LAYER_NORM(suffix, T, C, LOAD, STORE)                                               \
    static tl_status layer_norm_##suffix(tl_tensor *out, tl_tensor *mean, tl_tensor *rstd,         \
                                         const tl_tensor *in, const tl_tensor *weight,             \
                                         const tl_tensor *bias, double eps) {                      \
        const int64_t D = in->shape[in->ndim - 1], rows = D > 0 ? tl_numel(in) / D : 0,            \
                      work = rows * D;                                                             \
        const T *x = tl_data(in);                                                                  \
        const T *w = weight ? (const T *)tl_data(weight) : NULL;                                   \
        const T *b = bias ? (const T *)tl_data(bias) : NULL;                                       \
        T *y = tl_data(out);                                                                       \
        C *mean_out = tl_data(mean), *rstd_out = tl_data(rstd);                                    \
        NN_PARALLEL_FOR(work) for (int64_t r = 0; r < rows; r++) {                                 \
            const T *xr = x + r * D;                                                               \
            T *yr = y + r * D;                                                                     \
            double sum = 0, sq = 0;                                                                \
            for (int64_t j = 0; j < D; j++) sum += (double)LOAD(xr[j]);                            \
            const double mu = sum / (double)D;                                                     \
            for (int64_t j = 0; j < D; j++) {                                                      \
                const double d = (double)LOAD(xr[j]) - mu;                                         \
                sq += d * d;                                                                       \
            }                                                                                      \
            const C m = (C)mu, s = (C)(1.0 / sqrt(sq / (double)D + eps));                          \
            mean_out[r] = m;                                                                       \
            rstd_out[r] = s;                                                                       \
            for (int64_t j = 0; j < D; j++) {                                                      \
                C v = (LOAD(xr[j]) - m) * s;                                                       \
                if (w) v *= LOAD(w[j]);                                                            \
                if (b) v += LOAD(b[j]);                                                            \
                yr[j] = STORE(v);                                                                  \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_LAYER_NORM)

/* grad_in = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = grad_out * weight,
   xhat = (x - mean) * rstd. `second` is unused. */
#define DEFINE_LAYER_NORM_BACKWARD_INPUT(suffix, T, C, LOAD, STORE)                                \
    static tl_status layer_norm_backward_input_##suffix(                                           \
        tl_tensor *grad_in, tl_tensor *second, const tl_tensor *grad_out, const tl_tensor *in,     \
        const tl_tensor *mean, const tl_tensor *rstd, const tl_tensor *weight) {                   \
        (void)second;                                                                              \
        const int64_t D = in->shape[in->ndim - 1], rows = D > 0 ? tl_numel(in) / D : 0,            \
                      work = rows * D;                                                             \
        const T *x = tl_data(in), *g = tl_data(grad_out);                                          \
        const T *w = weight ? (const T *)tl_data(weight) : NULL;                                   \
        const C *mu = tl_data(mean), *rs = tl_data(rstd);                                          \
        T *dx = tl_data(grad_in);                                                                  \
        NN_PARALLEL_FOR(work) for (int64_t r = 0; r < rows; r++) {                                 \
            const T *xr = x + r * D, *gr = g + r * D;                                              \
            T *dr = dx + r * D;                                                                    \
            const C m = mu[r], s = rs[r];                                                          \
            double sum_g = 0, sum_gx = 0;                                                          \
            for (int64_t j = 0; j < D; j++) {                                                      \
                C gw = LOAD(gr[j]);                                                                \
                if (w) gw *= LOAD(w[j]);                                                           \
                sum_g += (double)gw;                                                               \
                sum_gx += (double)(gw * ((LOAD(xr[j]) - m) * s));                                  \
            }                                                                                      \
            const C a = (C)(sum_g / (double)D), c = (C)(sum_gx / (double)D);                       \
            for (int64_t j = 0; j < D; j++) {                                                      \
                C gw = LOAD(gr[j]);                                                                \
                if (w) gw *= LOAD(w[j]);                                                           \
                const C xhat = (LOAD(xr[j]) - m) * s;                                              \
                dr[j] = STORE(s * (gw - a - xhat * c));                                            \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_LAYER_NORM_BACKWARD_INPUT)

/* grad_weight = sum over rows of grad_out * xhat, grad_bias = sum of grad_out (either may be
   NULL; in, mean and rstd are read only for grad_weight): each block of columns sums its rows
   in order, in double. */
#define DEFINE_LAYER_NORM_BACKWARD_WEIGHT(suffix, T, C, LOAD, STORE)                               \
    static tl_status layer_norm_backward_weight_##suffix(                                          \
        tl_tensor *grad_weight, tl_tensor *grad_bias, const tl_tensor *grad_out,                   \
        const tl_tensor *in, const tl_tensor *mean, const tl_tensor *rstd,                         \
        const tl_tensor *weight) {                                                                 \
        (void)weight;                                                                              \
        const int64_t D = grad_out->shape[grad_out->ndim - 1],                                     \
                      rows = D > 0 ? tl_numel(grad_out) / D : 0, work = rows * D;                  \
        const int64_t blocks = (D + COLUMN_BLOCK - 1) / COLUMN_BLOCK;                              \
        const T *g = tl_data(grad_out);                                                            \
        const T *x = grad_weight ? (const T *)tl_data(in) : NULL;                                  \
        const C *mu = grad_weight ? (const C *)tl_data(mean) : NULL;                               \
        const C *rs = grad_weight ? (const C *)tl_data(rstd) : NULL;                               \
        T *dw = grad_weight ? (T *)tl_data(grad_weight) : NULL;                                    \
        T *db = grad_bias ? (T *)tl_data(grad_bias) : NULL;                                        \
        NN_PARALLEL_FOR(work) for (int64_t block = 0; block < blocks; block++) {                   \
            const int64_t j0 = block * COLUMN_BLOCK,                                               \
                          n = D - j0 < COLUMN_BLOCK ? D - j0 : COLUMN_BLOCK;                       \
            double sum_w[COLUMN_BLOCK] = {0}, sum_b[COLUMN_BLOCK] = {0};                           \
            for (int64_t r = 0; r < rows; r++) {                                                   \
                const T *gr = g + r * D + j0;                                                      \
                if (x) {                                                                           \
                    const T *xr = x + r * D + j0;                                                  \
                    const C m = mu[r], s = rs[r];                                                  \
                    for (int64_t j = 0; j < n; j++) {                                              \
                        const C gv = LOAD(gr[j]);                                                  \
                        sum_w[j] += (double)(gv * ((LOAD(xr[j]) - m) * s));                        \
                        sum_b[j] += (double)gv;                                                    \
                    }                                                                              \
                } else {                                                                           \
                    for (int64_t j = 0; j < n; j++) sum_b[j] += (double)LOAD(gr[j]);               \
                }                                                                                  \
            }                                                                                      \
            for (int64_t j = 0; j < n; j++) {                                                      \
                if (dw) dw[j0 + j] = STORE((C)sum_w[j]);                                           \
                if (db) db[j0 + j] = STORE((C)sum_b[j]);                                           \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_LAYER_NORM_BACKWARD_WEIGHT)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(layer_norm, layer_norm, layer_norm),
    TL_KERNELS_FLOATING(layer_norm_backward_input, layer_norm_backward, layer_norm_backward_input),
    TL_KERNELS_FLOATING(layer_norm_backward_weight, layer_norm_backward,
                        layer_norm_backward_weight),
};

TL_KERNEL_TABLE(tl_cpu_layer_norm_table, TL_DEVICE_CPU, entries);
