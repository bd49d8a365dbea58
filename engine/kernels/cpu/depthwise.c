/* CPU depthwise conv2d (groups = input channels, each input channel read by M = O / C outputs): the
   forward and both gradients, OpenMP over planes, deterministic whatever the thread count. Stride 1
   takes flat correlations over zero-bordered copies of the planes (depthwise_flat.c); other
   strides take direct loops. */
#include <stdlib.h>

#include "kernels/cpu/depthwise.h"

/* output columns summed at a time in the direct forward's row (on the stack) */
#define DEPTHWISE_ROW 256

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

/* each kernel's paths: the flat correlations (stride 1), the same redone by the direct loops when
   a sum is not finite (depthwise.h), and the direct loops (strides above 1); in this order */
enum {
    FORWARD_FLAT,
    FORWARD_REDONE,
    FORWARD_DIRECT,
    INPUT_FLAT,
    INPUT_REDONE,
    INPUT_DIRECT,
    WEIGHT_FLAT,
    WEIGHT_REDONE,
    WEIGHT_DIRECT,
};
#define REDONE_CONDITION                                                                           \
    "stride 1, a sum not finite (an inf or nan read): redone by the direct loops"
static const tl_kernel_variant depthwise_variants[] = {
    [FORWARD_FLAT] = TL_VARIANT(conv2d_depthwise, TL_DTYPES_FLOATING, "flat",
                                "stride 1: flat correlations over zero-bordered plane copies"),
    [FORWARD_REDONE] =
        TL_VARIANT(conv2d_depthwise, TL_DTYPES_FLOATING, "flat_redone", REDONE_CONDITION),
    [FORWARD_DIRECT] = TL_VARIANT(conv2d_depthwise, TL_DTYPES_FLOATING, "direct",
                                  "a stride above 1: direct loops over the taps inside the image"),
    [INPUT_FLAT] = TL_VARIANT(conv2d_depthwise_backward_input, TL_DTYPES_FLOATING, "flat",
                              "stride 1: the gradient correlated with the flipped kernel, flat"),
    [INPUT_REDONE] = TL_VARIANT(conv2d_depthwise_backward_input, TL_DTYPES_FLOATING, "flat_redone",
                                REDONE_CONDITION),
    [INPUT_DIRECT] = TL_VARIANT(conv2d_depthwise_backward_input, TL_DTYPES_FLOATING, "direct",
                                "a stride above 1: direct loops scattering into the plane"),
    [WEIGHT_FLAT] = TL_VARIANT(conv2d_depthwise_backward_weight, TL_DTYPES_FLOATING, "flat",
                               "stride 1: flat dot products, per tap, of the plane copies"),
    [WEIGHT_REDONE] = TL_VARIANT(conv2d_depthwise_backward_weight, TL_DTYPES_FLOATING,
                                 "flat_redone", REDONE_CONDITION),
    [WEIGHT_DIRECT] = TL_VARIANT(conv2d_depthwise_backward_weight, TL_DTYPES_FLOATING, "direct",
                                 "a stride above 1: direct loops over the taps inside the image"),
};

/* The direct loops of one pass (any stride), over dense tensors of one dtype. */
typedef tl_status (*direct_fn)(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                               const depthwise *g);

/* Runs pass of g: by flat correlations at stride 1 (redone by direct when a sum is not finite),
   else by direct; records the paths taken. */
static tl_status run_pass(depthwise_pass pass, tl_tensor *out, const tl_tensor *a,
                          const tl_tensor *b, const depthwise *g, direct_fn direct) {
    static const int first_variant[] = {[DEPTHWISE_FORWARD] = FORWARD_FLAT,
                                        [DEPTHWISE_INPUT] = INPUT_FLAT,
                                        [DEPTHWISE_WEIGHT] = WEIGHT_FLAT};
    const tl_kernel_variant *paths = &depthwise_variants[first_variant[pass]];
    if (g->sh != 1 || g->sw != 1) {
        tl_variant_ran(&paths[2], out->dtype);
        return direct(out, a, b, g);
    }
    tl_variant_ran(&paths[0], out->dtype);
    bool finite;
    TL_TRY(tl_cpu_depthwise_flat(pass, out, a, b, g, &finite));
    if (finite) return TL_OK;
    tl_variant_ran(&paths[1], out->dtype);
    return direct(out, a, b, g);
}

/* Per dtype: the direct loops of each pass, then the kernels, which pick the path. */
#define DEFINE_DEPTHWISE(suffix, T, C, LOAD, STORE)                                                \
    /* y plane (n, o): sums the taps row by row into a compute-type row */                         \
    static tl_status direct_forward_##suffix(tl_tensor *out, const tl_tensor *a,                   \
                                             const tl_tensor *b, const depthwise *gp) {            \
        const depthwise g = *gp;                                                                   \
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
    static tl_status direct_input_##suffix(tl_tensor *out, const tl_tensor *a, const tl_tensor *b, \
                                           const depthwise *gp) {                                  \
        const depthwise g = *gp;                                                                   \
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
    static tl_status direct_weight_##suffix(tl_tensor *out, const tl_tensor *a,                    \
                                            const tl_tensor *b, const depthwise *gp) {             \
        const depthwise g = *gp;                                                                   \
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
    }                                                                                              \
    static tl_status forward_##suffix(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,      \
                                      const tl_conv2d_options *options) {                          \
        const depthwise g = depthwise_geometry(a, b, out, options);                                \
        return run_pass(DEPTHWISE_FORWARD, out, a, b, &g, direct_forward_##suffix);                \
    }                                                                                              \
    static tl_status backward_input_##suffix(tl_tensor *out, const tl_tensor *a,                   \
                                             const tl_tensor *b,                                   \
                                             const tl_conv2d_options *options) {                   \
        const depthwise g = depthwise_geometry(out, b, a, options);                                \
        return run_pass(DEPTHWISE_INPUT, out, a, b, &g, direct_input_##suffix);                    \
    }                                                                                              \
    static tl_status backward_weight_##suffix(tl_tensor *out, const tl_tensor *a,                  \
                                              const tl_tensor *b,                                  \
                                              const tl_conv2d_options *options) {                  \
        const depthwise g = depthwise_geometry(b, out, a, options);                                \
        return run_pass(DEPTHWISE_WEIGHT, out, a, b, &g, direct_weight_##suffix);                  \
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
TL_VARIANT_TABLE(tl_cpu_depthwise_variants, TL_DEVICE_CPU, depthwise_variants);
