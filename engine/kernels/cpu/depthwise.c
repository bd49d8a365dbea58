/* CPU depthwise conv2d (groups = input channels, each input channel read by M = O / C outputs) by
   direct loops: the forward and both gradients, OpenMP over planes, deterministic. */
#include <stdlib.h>

#include "kernels/cpu/nn_kernels.h"

/* output columns summed at a time in the forward's row (on the stack) */
#define DEPTHWISE_ROW 256

/* The geometry of one problem: x [N, C, H, W], weight [C M, 1, KH, KW], y [N, C M, OH, OW]; output
   o reads input channel o / M. y[n, o, oh, ow] = sum over i < KH, j < KW of
   x[n, o / M, oh sh - ph + i dh, ow sw - pw + j dw] w[o, i, j] (the taps outside x read 0). */
typedef struct depthwise {
    int64_t n, c, h, w, o, m, kh, kw, oh, ow;
    int64_t sh, sw, ph, pw, dh, dw;
} depthwise;

static depthwise geometry(const tl_tensor *x, const tl_tensor *weight, const tl_tensor *y,
                          const tl_conv2d_options *o) {
    return (depthwise){.n = x->shape[0],
                       .c = x->shape[1],
                       .h = x->shape[2],
                       .w = x->shape[3],
                       .o = weight->shape[0],
                       .m = weight->shape[0] / x->shape[1],
                       .kh = weight->shape[2],
                       .kw = weight->shape[3],
                       .oh = y->shape[2],
                       .ow = y->shape[3],
                       .sh = o->stride[0],
                       .sw = o->stride[1],
                       .ph = o->padding[0],
                       .pw = o->padding[1],
                       .dh = o->dilation[0],
                       .dw = o->dilation[1]};
}

/* The smallest x >= 0 with x * step >= a (step >= 1; no a + step, which may overflow). */
static inline int64_t first_at_least(int64_t a, int64_t step) {
    return a <= 0 ? 0 : (a - 1) / step + 1;
}

/* The output columns ow in [*lo, *hi) whose input column ow sw - pw + j dw is inside the image. */
static inline void columns_inside(const depthwise *g, int64_t j, int64_t *lo, int64_t *hi) {
    const int64_t tap = j * g->dw - g->pw; /* the input column of ow = 0 */
    int64_t a = first_at_least(-tap, g->sw), b = first_at_least(g->w - tap, g->sw);
    *lo = a < g->ow ? a : g->ow;
    *hi = b < g->ow ? b : g->ow;
    if (*hi < *lo) *hi = *lo;
}

#define DEFINE_DEPTHWISE(suffix, T, C, LOAD, STORE)                                                \
    /* y plane (n, o): sums the taps row by row into a compute-type row */                         \
    static tl_status forward_##suffix(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,      \
                                      const tl_conv2d_options *options) {                          \
        const depthwise g = geometry(a, b, out, options);                                          \
        const T *x = tl_data(a), *w = tl_data(b);                                                  \
        T *y = tl_data(out);                                                                       \
        NN_PARALLEL_FOR(g.n *g.o *g.oh *g.ow *g.kh *g.kw)                                          \
        for (int64_t plane = 0; plane < g.n * g.o; plane++) {                                      \
            const int64_t n = plane / g.o, o = plane % g.o;                                        \
            const T *xp = x + (n * g.c + o / g.m) * g.h * g.w;                                     \
            const T *wp = w + o * g.kh * g.kw;                                                     \
            T *yp = y + plane * g.oh * g.ow;                                                       \
            C row[DEPTHWISE_ROW];                                                                  \
            for (int64_t oh = 0; oh < g.oh; oh++)                                                  \
                for (int64_t ow0 = 0; ow0 < g.ow; ow0 += DEPTHWISE_ROW) {                          \
                    const int64_t width = g.ow - ow0 < DEPTHWISE_ROW ? g.ow - ow0 : DEPTHWISE_ROW; \
                    for (int64_t k = 0; k < width; k++) row[k] = 0;                                \
                    for (int64_t i = 0; i < g.kh; i++) {                                           \
                        const int64_t ih = oh * g.sh - g.ph + i * g.dh;                            \
                        if (ih < 0 || ih >= g.h) continue;                                         \
                        for (int64_t j = 0; j < g.kw; j++) {                                       \
                            const C wv = LOAD(wp[i * g.kw + j]);                                   \
                            const int64_t base =                                                   \
                                ih * g.w + j * g.dw - g.pw; /* column of ow = 0 */                 \
                            int64_t lo, hi;                                                        \
                            columns_inside(&g, j, &lo, &hi);                                       \
                            if (lo < ow0) lo = ow0;                                                \
                            if (hi > ow0 + width) hi = ow0 + width;                                \
                            for (int64_t ow = lo; ow < hi; ow++)                                   \
                                row[ow - ow0] += LOAD(xp[base + ow * g.sw]) * wv;                  \
                        }                                                                          \
                    }                                                                              \
                    for (int64_t k = 0; k < width; k++) yp[oh * g.ow + ow0 + k] = STORE(row[k]);   \
                }                                                                                  \
        }                                                                                          \
        return TL_OK;                                                                              \
    }                                                                                              \
    /* dx plane (n, c): each of its M outputs' gradients spread back over the taps that read it,   \
       in a compute-type plane (a scatter within the plane: planes are independent) */             \
    static tl_status backward_input_##suffix(tl_tensor *out, const tl_tensor *a,                   \
                                             const tl_tensor *b,                                   \
                                             const tl_conv2d_options *options) {                   \
        const depthwise g = geometry(out, b, a, options);                                          \
        const T *gy = tl_data(a), *w = tl_data(b);                                                 \
        T *dx = tl_data(out);                                                                      \
        const size_t plane_bytes = (size_t)(g.h * g.w > 0 ? g.h * g.w : 1) * sizeof(C);            \
        char *scratch = malloc((size_t)nn_max_threads() * plane_bytes);                            \
        if (!scratch) return tl_error(TL_ERR_MEMORY, "conv2d: out of memory for the gradient");    \
        NN_PARALLEL_FOR(g.n *g.o *g.oh *g.ow *g.kh *g.kw)                                          \
        for (int64_t plane = 0; plane < g.n * g.c; plane++) {                                      \
            const int64_t n = plane / g.c, c = plane % g.c;                                        \
            C *acc = (C *)(scratch + (size_t)nn_thread_id() * plane_bytes);                        \
            for (int64_t e = 0; e < g.h * g.w; e++) acc[e] = 0;                                    \
            for (int64_t o = c * g.m; o < (c + 1) * g.m; o++) {                                    \
                const T *gp = gy + (n * g.o + o) * g.oh * g.ow;                                    \
                const T *wp = w + o * g.kh * g.kw;                                                 \
                for (int64_t oh = 0; oh < g.oh; oh++) {                                            \
                    for (int64_t i = 0; i < g.kh; i++) {                                           \
                        const int64_t ih = oh * g.sh - g.ph + i * g.dh;                            \
                        if (ih < 0 || ih >= g.h) continue;                                         \
                        for (int64_t j = 0; j < g.kw; j++) {                                       \
                            const C wv = LOAD(wp[i * g.kw + j]);                                   \
                            const int64_t base = ih * g.w + j * g.dw - g.pw;                       \
                            int64_t lo, hi;                                                        \
                            columns_inside(&g, j, &lo, &hi);                                       \
                            for (int64_t ow = lo; ow < hi; ow++)                                   \
                                acc[base + ow * g.sw] += LOAD(gp[oh * g.ow + ow]) * wv;            \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            T *dp = dx + plane * g.h * g.w;                                                        \
            for (int64_t e = 0; e < g.h * g.w; e++) dp[e] = STORE(acc[e]);                         \
        }                                                                                          \
        free(scratch);                                                                             \
        return TL_OK;                                                                              \
    }                                                                                              \
    /* dw[o, i, j]: the sum over samples and output positions of gy x at that tap (in double for   \
       float64, else float32), one output channel per iteration */                                 \
    static tl_status backward_weight_##suffix(tl_tensor *out, const tl_tensor *a,                  \
                                              const tl_tensor *b,                                  \
                                              const tl_conv2d_options *options) {                  \
        const depthwise g = geometry(b, out, a, options);                                          \
        const T *gy = tl_data(a), *x = tl_data(b);                                                 \
        T *dw = tl_data(out);                                                                      \
        NN_PARALLEL_FOR(g.n *g.o *g.oh *g.ow *g.kh *g.kw)                                          \
        for (int64_t o = 0; o < g.o; o++) {                                                        \
            for (int64_t i = 0; i < g.kh; i++) {                                                   \
                for (int64_t j = 0; j < g.kw; j++) {                                               \
                    C sum = 0;                                                                     \
                    int64_t lo, hi;                                                                \
                    columns_inside(&g, j, &lo, &hi);                                               \
                    for (int64_t n = 0; n < g.n; n++) {                                            \
                        const T *gp = gy + (n * g.o + o) * g.oh * g.ow;                            \
                        const T *xp = x + (n * g.c + o / g.m) * g.h * g.w;                         \
                        for (int64_t oh = 0; oh < g.oh; oh++) {                                    \
                            const int64_t ih = oh * g.sh - g.ph + i * g.dh;                        \
                            if (ih < 0 || ih >= g.h) continue;                                     \
                            const int64_t base = ih * g.w + j * g.dw - g.pw;                       \
                            const T *gr = gp + oh * g.ow;                                          \
                            for (int64_t ow = lo; ow < hi; ow++)                                   \
                                sum += LOAD(gr[ow]) * LOAD(xp[base + ow * g.sw]);                  \
                        }                                                                          \
                    }                                                                              \
                    dw[(o * g.kh + i) * g.kw + j] = STORE(sum);                                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_DEPTHWISE)

static const tl_kernel_entry entries[] = {
    TL_KERNEL(conv2d_depthwise, TL_DTYPES_F32, conv, forward_f32),
    TL_KERNEL(conv2d_depthwise, TL_DTYPES_F64, conv, forward_f64),
    TL_KERNEL(conv2d_depthwise, TL_DTYPES_BF16, conv, forward_bf16),
    TL_KERNEL(conv2d_depthwise, TL_DTYPES_F16, conv, forward_f16),
    TL_KERNEL(conv2d_depthwise_backward_input, TL_DTYPES_F32, conv, backward_input_f32),
    TL_KERNEL(conv2d_depthwise_backward_input, TL_DTYPES_F64, conv, backward_input_f64),
    TL_KERNEL(conv2d_depthwise_backward_input, TL_DTYPES_BF16, conv, backward_input_bf16),
    TL_KERNEL(conv2d_depthwise_backward_input, TL_DTYPES_F16, conv, backward_input_f16),
    TL_KERNEL(conv2d_depthwise_backward_weight, TL_DTYPES_F32, conv, backward_weight_f32),
    TL_KERNEL(conv2d_depthwise_backward_weight, TL_DTYPES_F64, conv, backward_weight_f64),
    TL_KERNEL(conv2d_depthwise_backward_weight, TL_DTYPES_BF16, conv, backward_weight_bf16),
    TL_KERNEL(conv2d_depthwise_backward_weight, TL_DTYPES_F16, conv, backward_weight_f16),
};

TL_KERNEL_TABLE(tl_cpu_depthwise_table, TL_DEVICE_CPU, entries);
