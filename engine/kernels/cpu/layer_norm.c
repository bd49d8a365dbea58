/* CPU layer norm over the last dim: forward (of x, or of x + residual) with mean/rstd, and the
   input, weight and one-pass backward. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/nn_kernels.h"

/* Mixed precision (kernel.h): a float32 layer norm's residual, out, grad_out and grad_residual
   may each be in a 16-bit type; another dtype's are in that dtype. branch_load_<suffix>(p,
   dtype, i) widens element i of p (in dtype) to the compute type; branch_store_<suffix> rounds
   v into it. */
static inline float branch_load_f32(const void *p, tl_dtype dtype, int64_t i) {
    switch (dtype) {
    case TL_BF16:
        return tl_bf16_load(((const uint16_t *)p)[i]);
    case TL_F16:
        return tl_f16_load(((const uint16_t *)p)[i]);
    default:
        return ((const float *)p)[i];
    }
}

static inline void branch_store_f32(void *p, tl_dtype dtype, int64_t i, float v) {
    switch (dtype) {
    case TL_BF16:
        ((uint16_t *)p)[i] = tl_bf16_round(v);
        return;
    case TL_F16:
        ((uint16_t *)p)[i] = tl_f16_round(v);
        return;
    default:
        ((float *)p)[i] = v;
    }
}

/* The other dtypes: their branch operands are in their own dtype (dtype unused). */
#define DEFINE_BRANCH_SAME(suffix, T, C, LOAD, STORE)                                              \
    static inline C branch_load_##suffix(const void *p, tl_dtype dtype, int64_t i) {               \
        (void)dtype;                                                                               \
        return LOAD(((const T *)p)[i]);                                                            \
    }                                                                                              \
    static inline void branch_store_##suffix(void *p, tl_dtype dtype, int64_t i, C v) {            \
        (void)dtype;                                                                               \
        ((T *)p)[i] = STORE(v);                                                                    \
    }

DEFINE_BRANCH_SAME(f64, double, double, NN_SAME, NN_SAME)
DEFINE_BRANCH_SAME(bf16, uint16_t, float, tl_bf16_load, tl_bf16_round)
DEFINE_BRANCH_SAME(f16, uint16_t, float, tl_f16_load, tl_f16_round)

/* The dtype of an optional operand (its own when NULL: unused). */
static tl_dtype dtype_or(const tl_tensor *t, tl_dtype otherwise) {
    return t ? t->dtype : otherwise;
}

#define COLUMN_BLOCK 64
/* The one-pass backward's chunks of rows: at most this many, whatever the threads, so that
   the weight's sums (per chunk, then over the chunks in order) do not depend on them. */
#define MAX_ROW_CHUNKS 64

/* T: element type; C: compute type, also mean's and rstd's; sums in double. With a residual,
   the row's sum s = x + residual is written first (rounded to T), then normalized as stored. */
#define DEFINE_LAYER_NORM(suffix, T, C, LOAD, STORE)                                               \
    static tl_status layer_norm_##suffix(                                                          \
        tl_tensor *out, tl_tensor *sum_out, tl_tensor *mean, tl_tensor *rstd, const tl_tensor *in, \
        const tl_tensor *residual, const tl_tensor *weight, const tl_tensor *bias, double eps) {   \
        const int64_t D = in->shape[in->ndim - 1], rows = D > 0 ? tl_numel(in) / D : 0,            \
                      work = rows * D;                                                             \
        const T *x = tl_data(in);                                                                  \
        const void *res = residual ? tl_data(residual) : NULL;                                     \
        const tl_dtype res_dtype = dtype_or(residual, in->dtype), y_dtype = out->dtype;            \
        const T *w = weight ? (const T *)tl_data(weight) : NULL;                                   \
        const T *b = bias ? (const T *)tl_data(bias) : NULL;                                       \
        void *y = tl_data(out);                                                                    \
        T *s_out = sum_out ? (T *)tl_data(sum_out) : NULL;                                         \
        C *mean_out = tl_data(mean), *rstd_out = tl_data(rstd);                                    \
        NN_PARALLEL_FOR(work) for (int64_t r = 0; r < rows; r++) {                                 \
            const T *xr = x + r * D;                                                               \
            if (res) {                                                                             \
                T *sr = s_out + r * D;                                                             \
                for (int64_t j = 0; j < D; j++)                                                    \
                    sr[j] = STORE(LOAD(xr[j]) + branch_load_##suffix(res, res_dtype, r * D + j));  \
                xr = sr;                                                                           \
            }                                                                                      \
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
                branch_store_##suffix(y, y_dtype, r *D + j, v);                                    \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_LAYER_NORM)

/* A row's operands in a branch dtype: grad_out (grad, read) and the residual's gradient
   (written when not NULL), at element `at`. */
typedef struct branch_row {
    const void *grad;
    void *residual;
    tl_dtype grad_dtype, residual_dtype;
    int64_t at;
} branch_row;

/* A row's input gradient: dr = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) + gs (gs, the
   sum's gradient, may be NULL), gw = grad_out * weight, xhat = (x - mean) * rstd; when sum_w is
   given, grad_out * xhat and grad_out are added to sum_w and sum_b per column (the one pass);
   the residual's gradient, when asked, is dr again in its dtype. */
#define DEFINE_INPUT_GRADIENT_ROW(suffix, T, C, LOAD, STORE)                                       \
    static void input_gradient_row_##suffix(T *dr, const branch_row *gr, const T *gs, const T *xr, \
                                            const T *w, C m, C s, int64_t D, double *sum_w,        \
                                            double *sum_b) {                                       \
        double sum_g = 0, sum_gx = 0;                                                              \
        for (int64_t j = 0; j < D; j++) {                                                          \
            C gw = branch_load_##suffix(gr->grad, gr->grad_dtype, gr->at + j);                     \
            if (w) gw *= LOAD(w[j]);                                                               \
            sum_g += (double)gw;                                                                   \
            sum_gx += (double)(gw * ((LOAD(xr[j]) - m) * s));                                      \
        }                                                                                          \
        const C a = (C)(sum_g / (double)D), c = (C)(sum_gx / (double)D);                           \
        for (int64_t j = 0; j < D; j++) {                                                          \
            const C gv = branch_load_##suffix(gr->grad, gr->grad_dtype, gr->at + j),               \
                    xhat = (LOAD(xr[j]) - m) * s;                                                  \
            const C gw = w ? gv * LOAD(w[j]) : gv;                                                 \
            C v = s * (gw - a - xhat * c);                                                         \
            if (gs) v += LOAD(gs[j]);                                                              \
            dr[j] = STORE(v);                                                                      \
            if (gr->residual)                                                                      \
                branch_store_##suffix(gr->residual, gr->residual_dtype, gr->at + j, v);            \
            if (sum_w) {                                                                           \
                sum_w[j] += (double)(gv * xhat);                                                   \
                sum_b[j] += (double)gv;                                                            \
            }                                                                                      \
        }                                                                                          \
    }

NN_FOR_FLOATING(DEFINE_INPUT_GRADIENT_ROW)

/* Row `at`'s branch operands: grad_out's, and the residual's gradient (NULL: not asked). */
static branch_row branch_row_of(const tl_tensor *grad_out, tl_tensor *grad_residual, int64_t at) {
    branch_row row = {tl_data(grad_out), grad_residual ? tl_data(grad_residual) : NULL,
                      grad_out->dtype, dtype_or(grad_residual, grad_out->dtype), at};
    return row;
}

/* grad_in, row by row (grad_weight, grad_bias unused). */
#define DEFINE_LAYER_NORM_BACKWARD_INPUT(suffix, T, C, LOAD, STORE)                                \
    static tl_status layer_norm_backward_input_##suffix(                                           \
        tl_tensor *grad_in, tl_tensor *grad_residual, tl_tensor *grad_weight,                      \
        tl_tensor *grad_bias, const tl_tensor *grad_out, const tl_tensor *grad_sum,                \
        const tl_tensor *in, const tl_tensor *mean, const tl_tensor *rstd,                         \
        const tl_tensor *weight) {                                                                 \
        (void)grad_weight, (void)grad_bias;                                                        \
        const int64_t D = in->shape[in->ndim - 1], rows = D > 0 ? tl_numel(in) / D : 0,            \
                      work = rows * D;                                                             \
        const T *x = tl_data(in);                                                                  \
        const T *gs = grad_sum ? (const T *)tl_data(grad_sum) : NULL;                              \
        const T *w = weight ? (const T *)tl_data(weight) : NULL;                                   \
        const C *mu = tl_data(mean), *rs = tl_data(rstd);                                          \
        T *dx = tl_data(grad_in);                                                                  \
        NN_PARALLEL_FOR(work) for (int64_t r = 0; r < rows; r++) {                                 \
            const branch_row gr = branch_row_of(grad_out, grad_residual, r * D);                   \
            input_gradient_row_##suffix(dx + r * D, &gr, gs ? gs + r * D : NULL, x + r * D, w,     \
                                        mu[r], rs[r], D, NULL, NULL);                              \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_LAYER_NORM_BACKWARD_INPUT)

/* grad_weight = sum over rows of grad_out * xhat, grad_bias = sum of grad_out (either may be
   NULL; in, mean and rstd are read only for grad_weight): each block of columns sums its rows
   in order, in double. grad_in, grad_sum and weight are unused. */
#define DEFINE_LAYER_NORM_BACKWARD_WEIGHT(suffix, T, C, LOAD, STORE)                               \
    static tl_status layer_norm_backward_weight_##suffix(                                          \
        tl_tensor *grad_in, tl_tensor *grad_residual, tl_tensor *grad_weight,                      \
        tl_tensor *grad_bias, const tl_tensor *grad_out, const tl_tensor *grad_sum,                \
        const tl_tensor *in, const tl_tensor *mean, const tl_tensor *rstd,                         \
        const tl_tensor *weight) {                                                                 \
        (void)grad_in, (void)grad_residual, (void)grad_sum, (void)weight;                          \
        const int64_t D = grad_out->shape[grad_out->ndim - 1],                                     \
                      rows = D > 0 ? tl_numel(grad_out) / D : 0, work = rows * D;                  \
        const int64_t blocks = (D + COLUMN_BLOCK - 1) / COLUMN_BLOCK;                              \
        const void *g = tl_data(grad_out);                                                         \
        const tl_dtype g_dtype = grad_out->dtype;                                                  \
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
                const int64_t at = r * D + j0;                                                     \
                if (x) {                                                                           \
                    const T *xr = x + at;                                                          \
                    const C m = mu[r], s = rs[r];                                                  \
                    for (int64_t j = 0; j < n; j++) {                                              \
                        const C gv = branch_load_##suffix(g, g_dtype, at + j);                     \
                        sum_w[j] += (double)(gv * ((LOAD(xr[j]) - m) * s));                        \
                        sum_b[j] += (double)gv;                                                    \
                    }                                                                              \
                } else {                                                                           \
                    for (int64_t j = 0; j < n; j++)                                                \
                        sum_b[j] += (double)branch_load_##suffix(g, g_dtype, at + j);              \
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

/* The one pass: the rows in chunks (a fixed number, MAX_ROW_CHUNKS at most), each chunk's rows
   in order writing their grad_in (as backward_input) and adding their grad_out * xhat and
   grad_out to the chunk's column sums (in double); then each column's sums over the chunks in
   chunk order. One read of grad_out and in instead of two; the result does not depend on the
   threads. grad_weight or grad_bias may be NULL. */
#define DEFINE_LAYER_NORM_BACKWARD(suffix, T, C, LOAD, STORE)                                      \
    static tl_status layer_norm_backward_##suffix(                                                 \
        tl_tensor *grad_in, tl_tensor *grad_residual, tl_tensor *grad_weight,                      \
        tl_tensor *grad_bias, const tl_tensor *grad_out, const tl_tensor *grad_sum,                \
        const tl_tensor *in, const tl_tensor *mean, const tl_tensor *rstd,                         \
        const tl_tensor *weight) {                                                                 \
        const int64_t D = in->shape[in->ndim - 1], rows = D > 0 ? tl_numel(in) / D : 0,            \
                      work = rows * D;                                                             \
        const int64_t most = rows < MAX_ROW_CHUNKS ? rows : MAX_ROW_CHUNKS;                        \
        const int64_t run = most > 0 ? (rows + most - 1) / most : 0;                               \
        const int64_t chunks = run > 0 ? (rows + run - 1) / run : 0;                               \
        double *partials =                                                                         \
            calloc((size_t)(chunks > 0 ? chunks : 1) * 2 * (size_t)D, sizeof *partials);           \
        if (!partials) return tl_error(TL_ERR_MEMORY, "layer_norm_backward: out of memory");       \
        const T *x = tl_data(in);                                                                  \
        const T *gs = grad_sum ? (const T *)tl_data(grad_sum) : NULL;                              \
        const T *w = weight ? (const T *)tl_data(weight) : NULL;                                   \
        const C *mu = tl_data(mean), *rs = tl_data(rstd);                                          \
        T *dx = tl_data(grad_in);                                                                  \
        T *dw = grad_weight ? (T *)tl_data(grad_weight) : NULL;                                    \
        T *db = grad_bias ? (T *)tl_data(grad_bias) : NULL;                                        \
        NN_PARALLEL_FOR(work) for (int64_t c = 0; c < chunks; c++) {                               \
            double *sum_w = partials + c * 2 * D, *sum_b = sum_w + D;                              \
            const int64_t r1 = (c + 1) * run < rows ? (c + 1) * run : rows;                        \
            for (int64_t r = c * run; r < r1; r++) {                                               \
                const branch_row gr = branch_row_of(grad_out, grad_residual, r * D);               \
                input_gradient_row_##suffix(dx + r * D, &gr, gs ? gs + r * D : NULL, x + r * D, w, \
                                            mu[r], rs[r], D, sum_w, sum_b);                        \
            }                                                                                      \
        }                                                                                          \
        for (int64_t j = 0; j < D; j++) {                                                          \
            double total_w = 0, total_b = 0;                                                       \
            for (int64_t c = 0; c < chunks; c++) {                                                 \
                total_w += partials[c * 2 * D + j];                                                \
                total_b += partials[c * 2 * D + D + j];                                            \
            }                                                                                      \
            if (dw) dw[j] = STORE((C)total_w);                                                     \
            if (db) db[j] = STORE((C)total_b);                                                     \
        }                                                                                          \
        free(partials);                                                                            \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_LAYER_NORM_BACKWARD)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(layer_norm, layer_norm, layer_norm),
    TL_KERNELS_FLOATING(add_layer_norm, layer_norm, layer_norm),
    TL_KERNELS_FLOATING(layer_norm_backward_input, layer_norm_backward, layer_norm_backward_input),
    TL_KERNELS_FLOATING(layer_norm_backward_weight, layer_norm_backward,
                        layer_norm_backward_weight),
    TL_KERNELS_FLOATING(layer_norm_backward, layer_norm_backward, layer_norm_backward),
};

TL_KERNEL_TABLE(tl_cpu_layer_norm_table, TL_DEVICE_CPU, entries);
