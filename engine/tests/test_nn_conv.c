/* C unit test of conv2d and max_pool2d against float64 references, finite differences and
   the gating of their split backward kernels. */
#include "nn_test_support.h"

/* ---- conv2d --------------------------------------------------------------------------------- */
typedef struct conv_case {
    int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw;
    bool bias;
    int64_t dh, dw, groups; /* 0 reads as 1 */
} conv_case;

static int64_t one_if_zero(int64_t v) {
    return v ? v : 1;
}

static int64_t conv_out_dilated(int64_t size, int64_t k, int64_t s, int64_t p, int64_t d) {
    return (size + 2 * p - one_if_zero(d) * (k - 1) - 1) / s + 1;
}

static int64_t conv_out(int64_t size, int64_t k, int64_t s, int64_t p) {
    return conv_out_dilated(size, k, s, p, 1);
}

static int64_t out_h_of(const conv_case *c) {
    return conv_out_dilated(c->H, c->KH, c->sh, c->ph, c->dh);
}

static int64_t out_w_of(const conv_case *c) {
    return conv_out_dilated(c->W, c->KW, c->sw, c->pw, c->dw);
}

static tl_conv2d_options options_of(const conv_case *c) {
    return (tl_conv2d_options){{c->sh, c->sw},
                               {c->ph, c->pw},
                               {one_if_zero(c->dh), one_if_zero(c->dw)},
                               one_if_zero(c->groups)};
}

/* Direct convolution in float64; also its two gradients for an output gradient g. */
static void conv_ref(const conv_case *c, const double *x, const double *w, const double *b,
                     double *out, const double *g, double *gx, double *gw) {
    const int64_t OH = out_h_of(c), OW = out_w_of(c), groups = one_if_zero(c->groups);
    const int64_t group_c = c->C / groups, group_o = c->O / groups;
    const int64_t dh = one_if_zero(c->dh), dw = one_if_zero(c->dw);
    if (gx) memset(gx, 0, sizeof *gx * (size_t)(c->N * c->C * c->H * c->W));
    if (gw) memset(gw, 0, sizeof *gw * (size_t)(c->O * group_c * c->KH * c->KW));
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->O; o++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t at = ((n * c->O + o) * OH + oh) * OW + ow;
                    double sum = b ? b[o] : 0, go = g ? g[at] : 0;
                    /* output channel o of group o / group_o reads that group's inputs */
                    for (int64_t gc = 0; gc < group_c; gc++)
                        for (int64_t i = 0; i < c->KH; i++)
                            for (int64_t j = 0; j < c->KW; j++) {
                                int64_t ch = (o / group_o) * group_c + gc;
                                int64_t ih = oh * c->sh - c->ph + i * dh;
                                int64_t iw = ow * c->sw - c->pw + j * dw;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                int64_t xi = ((n * c->C + ch) * c->H + ih) * c->W + iw;
                                int64_t wi = ((o * group_c + gc) * c->KH + i) * c->KW + j;
                                sum += x[xi] * w[wi];
                                if (gx) gx[xi] += go * w[wi];
                                if (gw) gw[wi] += go * x[xi];
                            }
                    if (out) out[at] = sum;
                }
}

static tl_status conv_forward(const void *ctx, tl_tensor *const *in, tl_tensor **out) {
    const conv_case *c = ctx;
    const tl_conv2d_options o = options_of(c);
    return tl_ag_conv2d(in[0], in[1], c->bias ? in[2] : NULL, &o, out);
}

static const conv_case conv_cases[] = {
    {2, 3, 7, 6, 4, 3, 2, 2, 1, 1, 0, true, 1, 1, 1},
    {2, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1, false, 1, 1, 1},
    {1, 1, 6, 7, 2, 2, 3, 2, 3, 1, 1, true, 1, 1, 1},
    {3, 2, 4, 4, 2, 1, 1, 1, 1, 0, 0, true, 1, 1, 1},
    /* dilation, groups, depthwise (groups = channels, two outputs each) */
    {2, 2, 7, 8, 3, 3, 2, 1, 2, 2, 1, true, 2, 3, 1},
    {2, 4, 6, 5, 6, 3, 3, 2, 1, 1, 1, true, 1, 1, 2},
    {1, 3, 6, 6, 6, 3, 3, 1, 1, 2, 2, false, 2, 2, 3},
};

static void test_conv2d_forward(void) {
    const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_BF16, TL_F16};
    for (size_t k = 0; k < sizeof conv_cases / sizeof conv_cases[0]; k++) {
        const conv_case *c = &conv_cases[k];
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            tl_dtype dt = dtypes[d];
            tl_tensor *x = random_tensor((int64_t[]){c->N, c->C, c->H, c->W}, 4, dt, 1.0);
            tl_tensor *w = random_tensor(
                (int64_t[]){c->O, c->C / one_if_zero(c->groups), c->KH, c->KW}, 4, dt, 1.0);
            tl_tensor *b = random_tensor((int64_t[]){c->O}, 1, dt, 1.0), *out = NULL;
            const tl_conv2d_options o = options_of(c);
            OK(tl_conv2d(x, w, c->bias ? b : NULL, &o, &out));
            if (out) {
                double *xv = to_doubles(x), *wv = to_doubles(w), *bv = to_doubles(b);
                double *want = malloc(sizeof *want * (size_t)tl_numel(out));
                conv_ref(c, xv, wv, c->bias ? bv : NULL, want, NULL, NULL, NULL);
                char what[64];
                snprintf(what, sizeof what, "conv2d case %zu %s", k, dtype_tag(dt));
                CHECK(out->ndim == 4 && out->shape[2] == out_h_of(c) &&
                          out->shape[3] == out_w_of(c),
                      "%s: wrong output shape", what);
                check_close(what, out, want, tolerance(dt));
                free(xv), free(wv), free(bv), free(want);
            }
            tl_release(x), tl_release(w), tl_release(b), tl_release(out);
        }
    }
}

static void test_conv2d_grad(void) {
    for (size_t k = 0; k < sizeof conv_cases / sizeof conv_cases[0]; k++) {
        const conv_case *c = &conv_cases[k];
        tl_tensor *in[3] = {
            random_tensor((int64_t[]){c->N, c->C, c->H, c->W}, 4, TL_F64, 1.0),
            random_tensor((int64_t[]){c->O, c->C / one_if_zero(c->groups), c->KH, c->KW}, 4, TL_F64,
                          1.0),
            random_tensor((int64_t[]){c->O}, 1, TL_F64, 1.0),
        };
        for (int i = 0; i < 3; i++) OK(tl_set_requires_grad(in[i], true));
        char what[64];
        snprintf(what, sizeof what, "conv2d gradcheck case %zu", k);
        gradcheck(what, conv_forward, c, in, c->bias ? 3 : 2);
        for (int i = 0; i < 3; i++) tl_release(in[i]);
    }
}

/* 16-bit backward against the float64 functions on the same (rounded) values. */
static void test_conv2d_backward_16(void) {
    const conv_case *c = &conv_cases[0];
    const tl_dtype dtypes[] = {TL_F32, TL_BF16, TL_F16};
    int64_t xs[4] = {c->N, c->C, c->H, c->W},
            ws[4] = {c->O, c->C / one_if_zero(c->groups), c->KH, c->KW};
    int64_t gs[4] = {c->N, c->O, out_h_of(c), out_w_of(c)};
    const tl_conv2d_options o = options_of(c);
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        tl_dtype dt = dtypes[d];
        tl_tensor *x = random_tensor(xs, 4, dt, 1.0), *w = random_tensor(ws, 4, dt, 1.0);
        tl_tensor *g = random_tensor(gs, 4, dt, 1.0);
        tl_tensor *x64 = NULL, *w64 = NULL, *g64 = NULL;
        OK(tl_cast(x, TL_F64, &x64));
        OK(tl_cast(w, TL_F64, &w64));
        OK(tl_cast(g, TL_F64, &g64));
        tl_tensor *gi = NULL, *gw = NULL, *gb = NULL, *gi64 = NULL, *gw64 = NULL, *gb64 = NULL;
        OK(tl_conv2d_backward_input(g, w, xs, &o, &gi));
        OK(tl_conv2d_backward_weight(g, x, ws, &o, &gw));
        OK(tl_conv2d_backward_bias(g, &gb));
        OK(tl_conv2d_backward_input(g64, w64, xs, &o, &gi64));
        OK(tl_conv2d_backward_weight(g64, x64, ws, &o, &gw64));
        OK(tl_conv2d_backward_bias(g64, &gb64));
        if (gi && gw && gb && gi64 && gw64 && gb64) {
            CHECK(gi->dtype == dt && gw->dtype == dt && gb->dtype == dt, "16-bit grad dtypes");
            double *a = to_doubles(gi64), *b = to_doubles(gw64), *e = to_doubles(gb64);
            char what[64];
            snprintf(what, sizeof what, "conv2d backward %s input", dtype_tag(dt));
            check_close(what, gi, a, 2 * tolerance(dt));
            snprintf(what, sizeof what, "conv2d backward %s weight", dtype_tag(dt));
            check_close(what, gw, b, 2 * tolerance(dt));
            snprintf(what, sizeof what, "conv2d backward %s bias", dtype_tag(dt));
            check_close(what, gb, e, 2 * tolerance(dt));
            free(a), free(b), free(e);
        }
        tl_release(x), tl_release(w), tl_release(g), tl_release(x64), tl_release(w64);
        tl_release(g64), tl_release(gi), tl_release(gw), tl_release(gb), tl_release(gi64);
        tl_release(gw64), tl_release(gb64);
    }
}

/* A batch big enough to be split in chunks (the last one partial): forward and the three
   backward functions against the direct loops, in float32. */
static void test_conv2d_chunked(void) {
    conv_case c = {40, 32, 28, 28, 2, 3, 3, 1, 1, 1, 1, true, 1, 1, 1};
    int64_t xs[4] = {c.N, c.C, c.H, c.W}, ws[4] = {c.O, c.C, c.KH, c.KW};
    int64_t gs[4] = {c.N, c.O, 28, 28};
    tl_tensor *x = random_tensor(xs, 4, TL_F32, 1.0), *w = random_tensor(ws, 4, TL_F32, 0.2);
    tl_tensor *b = random_tensor((int64_t[]){c.O}, 1, TL_F32, 1.0);
    tl_tensor *g = random_tensor(gs, 4, TL_F32, 1.0);
    tl_tensor *out = NULL, *gi = NULL, *gw = NULL, *gb = NULL;
    tl_trace_event *events = NULL;
    int count = 0;
    tl_trace_begin();
    const tl_conv2d_options padded = {{1, 1}, {1, 1}, {1, 1}, 1};
    OK(tl_conv2d(x, w, b, &padded, &out));
    OK(tl_trace_end(&events, &count));
    int im2col_runs = 0;
    for (int i = 0; i < count; i++) im2col_runs += strcmp(events[i].op, "im2col") == 0;
    CHECK(im2col_runs > 1, "chunked conv2d: expected several im2col chunks, got %d", im2col_runs);
    free(events);
    OK(tl_conv2d_backward_input(g, w, xs, &padded, &gi));
    OK(tl_conv2d_backward_weight(g, x, ws, &padded, &gw));
    OK(tl_conv2d_backward_bias(g, &gb));
    double *xv = to_doubles(x), *wv = to_doubles(w), *bv = to_doubles(b), *gv = to_doubles(g);
    int64_t nx = count_of(xs, 4), nw = count_of(ws, 4), no = count_of(gs, 4);
    double *want = malloc(sizeof *want * (size_t)no), *want_gx = malloc(sizeof *want * (size_t)nx);
    double *want_gw = malloc(sizeof *want * (size_t)nw), want_gb[2] = {0, 0};
    conv_ref(&c, xv, wv, bv, want, gv, want_gx, want_gw);
    for (int64_t i = 0; i < no; i++) want_gb[(i / (28 * 28)) % 2] += gv[i];
    if (out && gi && gw && gb) {
        check_close("chunked conv2d forward", out, want, 1e-5);
        check_close("chunked conv2d backward input", gi, want_gx, 1e-5);
        check_close("chunked conv2d backward weight", gw, want_gw, 1e-4);
        check_close("chunked conv2d backward bias", gb, want_gb, 1e-4);
    }
    free(xv), free(wv), free(bv), free(gv), free(want), free(want_gx), free(want_gw);
    tl_release(x), tl_release(w), tl_release(b), tl_release(g), tl_release(out);
    tl_release(gi), tl_release(gw), tl_release(gb);
}

/* Only the needed gradients run, and only what they read is saved. */
static void test_conv2d_gating(void) {
    const conv_case *c = &conv_cases[0];
    int64_t xs[4] = {c->N, c->C, c->H, c->W},
            ws[4] = {c->O, c->C / one_if_zero(c->groups), c->KH, c->KW};
    for (int mode = 0; mode < 3; mode++) {
        /* mode 0: only weight and bias need grad; 1: only input; 2: weight, no bias */
        tl_tensor *x = random_tensor(xs, 4, TL_F64, 1.0), *w = random_tensor(ws, 4, TL_F64, 1.0);
        tl_tensor *b = random_tensor((int64_t[]){c->O}, 1, TL_F64, 1.0), *out = NULL;
        OK(tl_set_requires_grad(x, mode == 1));
        OK(tl_set_requires_grad(w, mode != 1));
        OK(tl_set_requires_grad(b, mode == 0));
        const tl_conv2d_options o = options_of(c);
        OK(tl_ag_conv2d(x, w, mode == 2 ? NULL : b, &o, &out));
        if (!out) continue;
        CHECK(tl_grad_fn_name(out) && strcmp(tl_grad_fn_name(out), "conv2d") == 0,
              "conv2d: grad_fn is %s", tl_grad_fn_name(out));
        /* what was not saved may change in place before backward */
        tl_bump_version(mode == 1 ? x : w);
        tl_tensor *seed = random_tensor(out->shape, 4, TL_F64, 1.0);
        tl_trace_event *events = NULL;
        int count = 0;
        tl_trace_begin();
        OK(tl_backward(out, seed, false));
        OK(tl_trace_end(&events, &count));
        bool input = mode == 1, weight = mode != 1, bias = mode == 0;
        CHECK(trace_has(events, count, "conv2d_backward_input") == input &&
                  trace_has(events, count, "col2im") == input,
              "conv2d gating mode %d: backward_input/col2im ran: %d", mode, !input);
        CHECK(trace_has(events, count, "conv2d_backward_weight") == weight &&
                  trace_has(events, count, "im2col") == weight,
              "conv2d gating mode %d: backward_weight/im2col ran: %d", mode, !weight);
        CHECK(trace_has(events, count, "conv2d_backward_bias") == bias,
              "conv2d gating mode %d: backward_bias ran: %d", mode, !bias);
        CHECK((tl_grad(x) != NULL) == input && (tl_grad(w) != NULL) == weight &&
                  (tl_grad(b) != NULL) == bias,
              "conv2d gating mode %d: wrong set of gradients", mode);
        free(events);
        tl_release(seed), tl_release(out), tl_release(x), tl_release(w), tl_release(b);
    }
    /* a saved input changed in place is an error naming the op */
    tl_tensor *x = random_tensor(xs, 4, TL_F64, 1.0), *w = random_tensor(ws, 4, TL_F64, 1.0);
    tl_tensor *out = NULL;
    OK(tl_set_requires_grad(w, true));
    OK(tl_ag_conv2d(x, w, NULL, NULL, &out));
    tl_bump_version(x);
    if (out) {
        tl_tensor *seed = random_tensor(out->shape, 4, TL_F64, 1.0);
        FAILS(tl_backward(out, seed, false), TL_ERR_AUTOGRAD, "conv2d");
        tl_release(seed);
    }
    tl_release(out), tl_release(x), tl_release(w);
}

static void test_conv2d_errors(void) {
    tl_tensor *x = random_tensor((int64_t[]){2, 3, 28, 28}, 4, TL_F32, 1.0);
    tl_tensor *w = random_tensor((int64_t[]){8, 1, 3, 3}, 4, TL_F32, 1.0);
    tl_tensor *w5 = random_tensor((int64_t[]){8, 3, 30, 3}, 4, TL_F32, 1.0);
    tl_tensor *w64 = random_tensor((int64_t[]){8, 3, 3, 3}, 4, TL_F64, 1.0);
    tl_tensor *b = random_tensor((int64_t[]){7}, 1, TL_F32, 1.0), *out = NULL;
    tl_tensor *x3 = random_tensor((int64_t[]){3, 28, 28}, 3, TL_F32, 1.0);
    FAILS(tl_conv2d(x, w, NULL, NULL, &out), TL_ERR_SHAPE,
          "conv2d: input has 3 channels but weight expects 1 (input shape [2, 3, 28, 28], weight "
          "shape [8, 1, 3, 3])");
    FAILS(tl_conv2d(x3, w, NULL, NULL, &out), TL_ERR_SHAPE, "input must be [N, C, H, W]");
    FAILS(tl_conv2d(x, w5, NULL, NULL, &out), TL_ERR_SHAPE, "larger than the padded input");
    FAILS(tl_conv2d(x, w64, NULL, NULL, &out), TL_ERR_DTYPE, "weight is float64");
    FAILS(tl_conv2d(x, w5, NULL, &(tl_conv2d_options){{0, 1}, {0, 0}, {1, 1}, 1}, &out),
          TL_ERR_ARGUMENT, "stride must be >= 1");
    tl_tensor *w3 = NULL;
    OK(tl_cast(w64, TL_F32, &w3));
    FAILS(tl_conv2d(x, w3, b, NULL, &out), TL_ERR_SHAPE, "bias must have shape [8]");
    FAILS(tl_conv2d(x, w3, NULL, &(tl_conv2d_options){{1, 1}, {-1, 0}, {1, 1}, 1}, &out),
          TL_ERR_ARGUMENT, "padding must be >= 0");
    CHECK(out == NULL, "conv2d: out was set by a failing call");
    tl_release(x), tl_release(w), tl_release(w5), tl_release(w64), tl_release(b);
    tl_release(x3), tl_release(w3);
}

/* ---- max_pool2d ----------------------------------------------------------------------------- */
typedef struct pool_case {
    int64_t N, C, H, W, KH, KW, sh, sw, ph, pw;
} pool_case;

static const pool_case pool_cases[] = {
    {2, 3, 7, 8, 3, 2, 2, 2, 1, 1},
    {2, 2, 6, 6, 2, 2, 2, 2, 0, 0},
    {1, 2, 5, 6, 3, 3, 1, 1, 1, 0}, /* overlapping windows: gradients add up */
};

static void pool_ref(const pool_case *c, const double *x, double *out, int64_t *indices) {
    int64_t OH = conv_out(c->H, c->KH, c->sh, c->ph), OW = conv_out(c->W, c->KW, c->sw, c->pw);
    for (int64_t p = 0; p < c->N * c->C; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                double best = -INFINITY;
                int64_t at = -1;
                for (int64_t i = 0; i < c->KH; i++)
                    for (int64_t j = 0; j < c->KW; j++) {
                        int64_t ih = oh * c->sh - c->ph + i, iw = ow * c->sw - c->pw + j;
                        if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                        double v = x[p * c->H * c->W + ih * c->W + iw];
                        if (at < 0 || v > best) best = v, at = ih * c->W + iw;
                    }
                out[(p * OH + oh) * OW + ow] = best;
                indices[(p * OH + oh) * OW + ow] = at;
            }
}

static tl_status pool_forward(const void *ctx, tl_tensor *const *in, tl_tensor **out) {
    const pool_case *c = ctx;
    return tl_ag_max_pool2d(in[0], c->KH, c->KW, c->sh, c->sw, c->ph, c->pw, out);
}

static void test_max_pool2d(void) {
    const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_BF16, TL_F16};
    for (size_t k = 0; k < sizeof pool_cases / sizeof pool_cases[0]; k++) {
        const pool_case *c = &pool_cases[k];
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            tl_tensor *x = random_tensor((int64_t[]){c->N, c->C, c->H, c->W}, 4, dtypes[d], 1.0);
            tl_tensor *out = NULL, *idx = NULL;
            OK(tl_max_pool2d(x, c->KH, c->KW, c->sh, c->sw, c->ph, c->pw, &out, &idx));
            if (out && idx) {
                int64_t n = tl_numel(out);
                double *xv = to_doubles(x), *want = malloc(sizeof *want * (size_t)n);
                int64_t *want_idx = malloc(sizeof *want_idx * (size_t)n), *got_idx = to_ints(idx);
                pool_ref(c, xv, want, want_idx);
                char what[64];
                snprintf(what, sizeof what, "max_pool2d case %zu %s", k, dtype_tag(dtypes[d]));
                check_close(what, out, want, 0); /* the maxima are input elements */
                CHECK(idx->dtype == TL_I64 &&
                          memcmp(got_idx, want_idx, sizeof *want_idx * (size_t)n) == 0,
                      "%s: wrong indices", what);
                free(xv), free(want), free(want_idx), free(got_idx);
                /* backward in this dtype against float64 on the same indices */
                tl_tensor *g = random_tensor(out->shape, 4, dtypes[d], 1.0), *g64 = NULL;
                tl_tensor *gi = NULL, *gi64 = NULL;
                OK(tl_cast(g, TL_F64, &g64));
                OK(tl_max_pool2d_backward(g, idx, x->shape, &gi));
                OK(tl_max_pool2d_backward(g64, idx, x->shape, &gi64));
                if (gi && gi64) {
                    double *e = to_doubles(gi64);
                    snprintf(what, sizeof what, "max_pool2d backward case %zu %s", k,
                             dtype_tag(dtypes[d]));
                    check_close(what, gi, e, tolerance(dtypes[d]));
                    free(e);
                }
                tl_release(g), tl_release(g64), tl_release(gi), tl_release(gi64);
            }
            tl_release(x), tl_release(out), tl_release(idx);
        }
        tl_tensor *x = random_tensor((int64_t[]){c->N, c->C, c->H, c->W}, 4, TL_F64, 1.0);
        OK(tl_set_requires_grad(x, true));
        char what[64];
        snprintf(what, sizeof what, "max_pool2d gradcheck case %zu", k);
        gradcheck(what, pool_forward, c, &x, 1);
        tl_release(x);
    }
    /* NaN wins its window */
    double v[4] = {1, NAN, 3, 2};
    tl_tensor *x = from_values(v, (int64_t[]){1, 1, 2, 2}, 4, TL_F32), *out = NULL, *idx = NULL;
    OK(tl_max_pool2d(x, 2, 2, 2, 2, 0, 0, &out, &idx));
    if (out) {
        double *o = to_doubles(out);
        int64_t *i = to_ints(idx);
        CHECK(isnan(o[0]) && i[0] == 1, "max_pool2d: NaN should win, got %g at %lld", o[0],
              (long long)i[0]);
        free(o), free(i);
    }
    tl_release(out), tl_release(idx);
    out = idx = NULL;
    FAILS(tl_max_pool2d(x, 2, 2, 2, 2, 2, 0, &out, &idx), TL_ERR_ARGUMENT, "half the kernel");
    FAILS(tl_max_pool2d(x, 3, 3, 1, 1, 0, 0, &out, &idx), TL_ERR_SHAPE, "larger than the padded");
    FAILS(tl_max_pool2d(x, 2, 2, 0, 1, 0, 0, &out, &idx), TL_ERR_ARGUMENT, "stride");
    CHECK(out == NULL && idx == NULL, "max_pool2d: outputs set by a failing call");
    tl_tensor *g = random_tensor((int64_t[]){1, 1, 1, 1}, 4, TL_F32, 1.0), *gi = NULL;
    tl_tensor *bad = int_tensor((int64_t[]){4}, (int64_t[]){1, 1, 1, 1}, 4, TL_I64);
    FAILS(tl_max_pool2d_backward(g, bad, x->shape, &gi), TL_ERR_INDEX,
          "max_pool2d_backward: indices holds 4 at position 0 (shape [1, 1, 1, 1]), out of range "
          "for the input plane (expected 0 <= index <= 3)");
    tl_release(x), tl_release(g), tl_release(bad);
}

int main(void) {
    test_conv2d_forward();
    test_conv2d_grad();
    test_conv2d_backward_16();
    test_conv2d_chunked();
    test_conv2d_gating();
    test_conv2d_errors();
    test_max_pool2d();
    if (failures) {
        printf("test_nn_conv: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_nn_conv: all passed\n");
    return 0;
}
