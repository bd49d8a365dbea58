/* C unit test of the nn ops against float64 references, finite differences and PyTorch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/nn_kernels.h"
#include "tlua/nn.h"
#include "tlua/tlua.h"

#include "check.h"
/* expr fails with status and a message containing text */
#define FAILS(expr, status, text)                                                                  \
    do {                                                                                           \
        tl_status s_ = (expr);                                                                     \
        CHECK(s_ == (status), "%s: expected status %d, got %d (%s)", #expr, (int)(status),         \
              (int)s_, tl_last_error());                                                           \
        CHECK(strstr(tl_last_error(), text) != NULL, "%s: message '%s' lacks '%s'", #expr,         \
              tl_last_error(), text);                                                              \
    } while (0)

/* ---- helpers ----------------------------------------------------------------------------- */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t next_random(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* uniform in [-1, 1) */
static double uniform(void) {
    return (double)(next_random() >> 11) / 4503599627370496.0 - 1.0;
}

static int64_t count_of(const int64_t *shape, int ndim) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

static tl_tensor *from_values(const double *values, const int64_t *shape, int ndim,
                              tl_dtype dtype) {
    tl_tensor *t64 = NULL, *t = NULL;
    OK(tl_from_host(values, shape, ndim, TL_F64, TL_CPU, &t64));
    if (dtype == TL_F64 || !t64) return t64;
    OK(tl_cast(t64, dtype, &t));
    tl_release(t64);
    return t;
}

/* A tensor of uniform values in [-scale, scale). */
static tl_tensor *random_tensor(const int64_t *shape, int ndim, tl_dtype dtype, double scale) {
    int64_t n = count_of(shape, ndim);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = scale * uniform();
    tl_tensor *t = from_values(v, shape, ndim, dtype);
    free(v);
    return t;
}

static tl_tensor *int_tensor(const int64_t *values, const int64_t *shape, int ndim,
                             tl_dtype dtype) {
    tl_tensor *t64 = NULL, *t = NULL;
    OK(tl_from_host(values, shape, ndim, TL_I64, TL_CPU, &t64));
    if (dtype == TL_I64 || !t64) return t64;
    OK(tl_cast(t64, dtype, &t));
    tl_release(t64);
    return t;
}

/* The elements as doubles (malloc'd, row-major). */
static double *to_doubles(const tl_tensor *t) {
    int64_t n = tl_numel(t);
    double *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    tl_tensor *t64 = NULL;
    OK(tl_cast((tl_tensor *)t, TL_F64, &t64));
    if (t64) OK(tl_to_host(t64, v));
    tl_release(t64);
    return v;
}

static int64_t *to_ints(const tl_tensor *t) {
    int64_t n = tl_numel(t);
    int64_t *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    tl_tensor *t64 = NULL;
    OK(tl_cast((tl_tensor *)t, TL_I64, &t64));
    if (t64) OK(tl_to_host(t64, v));
    tl_release(t64);
    return v;
}

/* max over elements of |got - want| / (1 + |want|); NaN counts as infinitely wrong */
static double max_error(const double *got, const double *want, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / (1 + fabs(want[i]));
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static void check_close(const char *what, const tl_tensor *t, const double *want, double tol) {
    double *got = to_doubles(t);
    double err = max_error(got, want, tl_numel(t));
    CHECK(err <= tol, "%s: max error %g > %g", what, err, tol);
    free(got);
}

static bool trace_has(const tl_trace_event *events, int count, const char *op) {
    for (int i = 0; i < count; i++)
        if (strcmp(events[i].op, op) == 0) return true;
    return false;
}

static const char *dtype_tag(tl_dtype d) {
    return tl_dtype_name(d);
}

/* Tolerance of a forward result computed in dtype, relative to 1 + |value|. */
static double tolerance(tl_dtype d) {
    switch (d) {
    case TL_F64:
        return 1e-12;
    case TL_F32:
        return 2e-5;
    case TL_F16:
        return 4e-3;
    default:
        return 3e-2; /* bfloat16 */
    }
}

/* ---- finite-difference gradient check -----------------------------------------------------
   f computes an output from float64 leaf inputs with recording ops; the loss is
   sum(out * R) for a fixed random R, so backward(out, R) gives its gradients. */
typedef tl_status (*forward_fn)(const void *ctx, tl_tensor *const *inputs, tl_tensor **out);

static double loss_of(forward_fn f, const void *ctx, tl_tensor *const *inputs, const double *r) {
    bool previous = tl_set_grad_enabled(false);
    tl_tensor *out = NULL;
    double loss = NAN;
    if (f(ctx, inputs, &out) == TL_OK) {
        double *v = to_doubles(out);
        loss = 0;
        for (int64_t i = 0; i < tl_numel(out); i++) loss += v[i] * r[i];
        free(v);
        tl_release(out);
    }
    tl_set_grad_enabled(previous);
    return loss;
}

static void gradcheck(const char *what, forward_fn f, const void *ctx, tl_tensor *const *inputs,
                      int count) {
    const double h = 1e-6, tol = 1e-6;
    for (int i = 0; i < count; i++)
        if (inputs[i]) OK(tl_set_grad(inputs[i], NULL));
    tl_tensor *out = NULL, *seed = NULL;
    OK(f(ctx, inputs, &out));
    if (!out) return;
    seed = random_tensor(out->shape, out->ndim, TL_F64, 1.0);
    double *r = to_doubles(seed);
    OK(tl_backward(out, seed, false));
    for (int i = 0; i < count; i++) {
        if (!inputs[i] || !tl_requires_grad(inputs[i])) continue;
        tl_tensor *g = tl_grad(inputs[i]);
        CHECK(g != NULL, "%s: input %d got no gradient", what, i);
        if (!g) continue;
        double *analytic = to_doubles(g);
        double *data = tl_data(inputs[i]);
        double worst = 0;
        int64_t worst_at = -1;
        for (int64_t e = 0; e < tl_numel(inputs[i]); e++) {
            double orig = data[e];
            data[e] = orig + h;
            double plus = loss_of(f, ctx, inputs, r);
            data[e] = orig - h;
            double minus = loss_of(f, ctx, inputs, r);
            data[e] = orig;
            double numeric = (plus - minus) / (2 * h);
            double err = fabs(numeric - analytic[e]) / (1 + fabs(numeric));
            if (!(err <= worst)) worst = err, worst_at = e;
        }
        CHECK(worst <= tol, "%s: gradient of input %d off by %g at element %lld", what, i, worst,
              (long long)worst_at);
        free(analytic);
    }
    free(r);
    tl_release(seed), tl_release(out);
}

/* ---- the inline 16-bit conversions of the kernels ------------------------------------------ */
static bool same_bits_or_nan(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

static void test_conversions(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if (!same_bits_or_nan(tl_f16_load((uint16_t)h), tl_f16_to_f32((uint16_t)h))) bad++;
        if (!same_bits_or_nan(tl_bf16_load((uint16_t)h), tl_bf16_to_f32((uint16_t)h))) bad++;
    }
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)next_random();
        if (i % 2) u = (u & 0x80000000u) | (0x30000000u + (u & 0x1fffffffu)); /* near f16 range */
        float f;
        memcpy(&f, &u, sizeof f);
        uint16_t a = tl_f16_round(f), b = tl_f32_to_f16(f);
        if (a != b && !(isnan(f) && (a & 0x7c00) == 0x7c00 && (a & 0x3ff))) bad++;
        a = tl_bf16_round(f), b = tl_f32_to_bf16(f);
        if (a != b && !(isnan(f) && (a & 0x7f80) == 0x7f80 && (a & 0x7f))) bad++;
    }
    CHECK(bad == 0, "inline 16-bit conversions differ from tl_*_to_* in %d cases", bad);
}

/* ---- conv2d --------------------------------------------------------------------------------- */
typedef struct conv_case {
    int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw;
    bool bias;
} conv_case;

static int64_t conv_out(int64_t size, int64_t k, int64_t s, int64_t p) {
    return (size + 2 * p - k) / s + 1;
}

/* Direct convolution in float64; also its two gradients for an output gradient g. */
static void conv_ref(const conv_case *c, const double *x, const double *w, const double *b,
                     double *out, const double *g, double *gx, double *gw) {
    int64_t OH = conv_out(c->H, c->KH, c->sh, c->ph), OW = conv_out(c->W, c->KW, c->sw, c->pw);
    if (gx) memset(gx, 0, sizeof *gx * (size_t)(c->N * c->C * c->H * c->W));
    if (gw) memset(gw, 0, sizeof *gw * (size_t)(c->O * c->C * c->KH * c->KW));
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t o = 0; o < c->O; o++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    int64_t at = ((n * c->O + o) * OH + oh) * OW + ow;
                    double sum = b ? b[o] : 0, go = g ? g[at] : 0;
                    for (int64_t ch = 0; ch < c->C; ch++)
                        for (int64_t i = 0; i < c->KH; i++)
                            for (int64_t j = 0; j < c->KW; j++) {
                                int64_t ih = oh * c->sh - c->ph + i, iw = ow * c->sw - c->pw + j;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                int64_t xi = ((n * c->C + ch) * c->H + ih) * c->W + iw;
                                int64_t wi = ((o * c->C + ch) * c->KH + i) * c->KW + j;
                                sum += x[xi] * w[wi];
                                if (gx) gx[xi] += go * w[wi];
                                if (gw) gw[wi] += go * x[xi];
                            }
                    if (out) out[at] = sum;
                }
}

static tl_status conv_forward(const void *ctx, tl_tensor *const *in, tl_tensor **out) {
    const conv_case *c = ctx;
    return tl_ag_conv2d(in[0], in[1], c->bias ? in[2] : NULL, c->sh, c->sw, c->ph, c->pw, out);
}

static const conv_case conv_cases[] = {
    {2, 3, 7, 6, 4, 3, 2, 2, 1, 1, 0, true},
    {2, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1, false},
    {1, 1, 6, 7, 2, 2, 3, 2, 3, 1, 1, true},
    {3, 2, 4, 4, 2, 1, 1, 1, 1, 0, 0, true},
};

static void test_conv2d_forward(void) {
    const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_BF16, TL_F16};
    for (size_t k = 0; k < sizeof conv_cases / sizeof conv_cases[0]; k++) {
        const conv_case *c = &conv_cases[k];
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            tl_dtype dt = dtypes[d];
            tl_tensor *x = random_tensor((int64_t[]){c->N, c->C, c->H, c->W}, 4, dt, 1.0);
            tl_tensor *w = random_tensor((int64_t[]){c->O, c->C, c->KH, c->KW}, 4, dt, 1.0);
            tl_tensor *b = random_tensor((int64_t[]){c->O}, 1, dt, 1.0), *out = NULL;
            OK(tl_conv2d(x, w, c->bias ? b : NULL, c->sh, c->sw, c->ph, c->pw, &out));
            if (out) {
                double *xv = to_doubles(x), *wv = to_doubles(w), *bv = to_doubles(b);
                double *want = malloc(sizeof *want * (size_t)tl_numel(out));
                conv_ref(c, xv, wv, c->bias ? bv : NULL, want, NULL, NULL, NULL);
                char what[64];
                snprintf(what, sizeof what, "conv2d case %zu %s", k, dtype_tag(dt));
                CHECK(out->ndim == 4 && out->shape[2] == conv_out(c->H, c->KH, c->sh, c->ph) &&
                          out->shape[3] == conv_out(c->W, c->KW, c->sw, c->pw),
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
            random_tensor((int64_t[]){c->O, c->C, c->KH, c->KW}, 4, TL_F64, 1.0),
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
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->O, c->C, c->KH, c->KW};
    int64_t gs[4] = {c->N, c->O, conv_out(c->H, c->KH, c->sh, c->ph),
                     conv_out(c->W, c->KW, c->sw, c->pw)};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        tl_dtype dt = dtypes[d];
        tl_tensor *x = random_tensor(xs, 4, dt, 1.0), *w = random_tensor(ws, 4, dt, 1.0);
        tl_tensor *g = random_tensor(gs, 4, dt, 1.0);
        tl_tensor *x64 = NULL, *w64 = NULL, *g64 = NULL;
        OK(tl_cast(x, TL_F64, &x64));
        OK(tl_cast(w, TL_F64, &w64));
        OK(tl_cast(g, TL_F64, &g64));
        tl_tensor *gi = NULL, *gw = NULL, *gb = NULL, *gi64 = NULL, *gw64 = NULL, *gb64 = NULL;
        OK(tl_conv2d_backward_input(g, w, xs, c->sh, c->sw, c->ph, c->pw, &gi));
        OK(tl_conv2d_backward_weight(g, x, ws, c->sh, c->sw, c->ph, c->pw, &gw));
        OK(tl_conv2d_backward_bias(g, &gb));
        OK(tl_conv2d_backward_input(g64, w64, xs, c->sh, c->sw, c->ph, c->pw, &gi64));
        OK(tl_conv2d_backward_weight(g64, x64, ws, c->sh, c->sw, c->ph, c->pw, &gw64));
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
    conv_case c = {40, 32, 28, 28, 2, 3, 3, 1, 1, 1, 1, true};
    int64_t xs[4] = {c.N, c.C, c.H, c.W}, ws[4] = {c.O, c.C, c.KH, c.KW};
    int64_t gs[4] = {c.N, c.O, 28, 28};
    tl_tensor *x = random_tensor(xs, 4, TL_F32, 1.0), *w = random_tensor(ws, 4, TL_F32, 0.2);
    tl_tensor *b = random_tensor((int64_t[]){c.O}, 1, TL_F32, 1.0);
    tl_tensor *g = random_tensor(gs, 4, TL_F32, 1.0);
    tl_tensor *out = NULL, *gi = NULL, *gw = NULL, *gb = NULL;
    tl_trace_event *events = NULL;
    int count = 0;
    tl_trace_begin();
    OK(tl_conv2d(x, w, b, 1, 1, 1, 1, &out));
    OK(tl_trace_end(&events, &count));
    int im2col_runs = 0;
    for (int i = 0; i < count; i++) im2col_runs += strcmp(events[i].op, "im2col") == 0;
    CHECK(im2col_runs > 1, "chunked conv2d: expected several im2col chunks, got %d", im2col_runs);
    free(events);
    OK(tl_conv2d_backward_input(g, w, xs, 1, 1, 1, 1, &gi));
    OK(tl_conv2d_backward_weight(g, x, ws, 1, 1, 1, 1, &gw));
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
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->O, c->C, c->KH, c->KW};
    for (int mode = 0; mode < 3; mode++) {
        /* mode 0: only weight and bias need grad; 1: only input; 2: weight, no bias */
        tl_tensor *x = random_tensor(xs, 4, TL_F64, 1.0), *w = random_tensor(ws, 4, TL_F64, 1.0);
        tl_tensor *b = random_tensor((int64_t[]){c->O}, 1, TL_F64, 1.0), *out = NULL;
        OK(tl_set_requires_grad(x, mode == 1));
        OK(tl_set_requires_grad(w, mode != 1));
        OK(tl_set_requires_grad(b, mode == 0));
        OK(tl_ag_conv2d(x, w, mode == 2 ? NULL : b, c->sh, c->sw, c->ph, c->pw, &out));
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
    OK(tl_ag_conv2d(x, w, NULL, 1, 1, 0, 0, &out));
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
    FAILS(tl_conv2d(x, w, NULL, 1, 1, 0, 0, &out), TL_ERR_SHAPE,
          "conv2d: input has 3 channels but weight expects 1 (input shape [2, 3, 28, 28], weight "
          "shape [8, 1, 3, 3])");
    FAILS(tl_conv2d(x3, w, NULL, 1, 1, 0, 0, &out), TL_ERR_SHAPE, "input must be [N, C, H, W]");
    FAILS(tl_conv2d(x, w5, NULL, 1, 1, 0, 0, &out), TL_ERR_SHAPE, "larger than the padded input");
    FAILS(tl_conv2d(x, w64, NULL, 1, 1, 0, 0, &out), TL_ERR_DTYPE, "weight is float64");
    FAILS(tl_conv2d(x, w5, NULL, 0, 1, 0, 0, &out), TL_ERR_ARGUMENT, "stride must be >= 1");
    tl_tensor *w3 = NULL;
    OK(tl_cast(w64, TL_F32, &w3));
    FAILS(tl_conv2d(x, w3, b, 1, 1, 0, 0, &out), TL_ERR_SHAPE, "bias must have shape [8]");
    FAILS(tl_conv2d(x, w3, NULL, 1, 1, -1, 0, &out), TL_ERR_ARGUMENT, "padding must be >= 0");
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
    FAILS(tl_max_pool2d_backward(g, bad, x->shape, &gi), TL_ERR_INDEX, "index 4");
    tl_release(x), tl_release(g), tl_release(bad);
}

/* ---- embedding ------------------------------------------------------------------------------ */
static tl_status embedding_forward(const void *ctx, tl_tensor *const *in, tl_tensor **out) {
    return tl_ag_embedding((tl_tensor *)ctx, in[0], out);
}

static void test_embedding(void) {
    const int64_t V = 5, D = 4, values[6] = {3, 0, 3, 4, 1, 3};
    const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_BF16, TL_F16};
    for (int it = 0; it < 2; it++) {
        tl_dtype index_dtype = it ? TL_I32 : TL_I64;
        tl_tensor *idx = int_tensor(values, (int64_t[]){2, 3}, 2, index_dtype);
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            tl_tensor *w = random_tensor((int64_t[]){V, D}, 2, dtypes[d], 1.0), *out = NULL;
            OK(tl_embedding(idx, w, &out));
            if (out) {
                CHECK(out->ndim == 3 && out->shape[0] == 2 && out->shape[1] == 3 &&
                          out->shape[2] == D,
                      "embedding: wrong output shape");
                double *wv = to_doubles(w), want[24];
                for (int i = 0; i < 6; i++)
                    for (int j = 0; j < D; j++) want[i * D + j] = wv[values[i] * D + j];
                check_close("embedding forward", out, want, 0);
                /* backward: rows summed per index */
                tl_tensor *g = random_tensor(out->shape, 3, dtypes[d], 1.0), *gw = NULL;
                OK(tl_embedding_backward(g, idx, V, &gw));
                if (gw) {
                    double *gv = to_doubles(g), sums[20] = {0};
                    for (int i = 0; i < 6; i++)
                        for (int j = 0; j < D; j++) sums[values[i] * D + j] += gv[i * D + j];
                    check_close("embedding backward", gw, sums, tolerance(dtypes[d]));
                    free(gv);
                }
                free(wv);
                tl_release(g), tl_release(gw);
            }
            tl_release(w), tl_release(out);
        }
        tl_tensor *w = random_tensor((int64_t[]){V, D}, 2, TL_F64, 1.0);
        OK(tl_set_requires_grad(w, true));
        gradcheck("embedding gradcheck", embedding_forward, idx, &w, 1);
        tl_release(w), tl_release(idx);
    }
    /* an index out of range: named with V, nothing written */
    tl_tensor *w = random_tensor((int64_t[]){V, D}, 2, TL_F32, 1.0), *out = NULL;
    tl_tensor *bad = int_tensor((int64_t[]){1, 7, 2}, (int64_t[]){3}, 1, TL_I64);
    tl_tensor *neg = int_tensor((int64_t[]){1, -1, 2}, (int64_t[]){3}, 1, TL_I32);
    FAILS(tl_embedding(bad, w, &out), TL_ERR_INDEX, "index 7 at flat position 1");
    FAILS(tl_embedding(bad, w, &out), TL_ERR_INDEX, "weight with 5 rows");
    FAILS(tl_embedding(neg, w, &out), TL_ERR_INDEX, "index -1");
    tl_tensor *fidx = random_tensor((int64_t[]){3}, 1, TL_F32, 1.0);
    FAILS(tl_embedding(fidx, w, &out), TL_ERR_DTYPE, "indices must be int64 or int32");
    CHECK(out == NULL, "embedding: out was set by a failing call");
    tl_release(w), tl_release(bad), tl_release(neg), tl_release(fidx);
}

/* ---- cross_entropy -------------------------------------------------------------------------- */
typedef struct ce_case {
    tl_tensor *target;
    double smoothing;
} ce_case;

static double ce_ref(const double *x, const int64_t *t, int64_t N, int64_t C, double s) {
    double total = 0;
    for (int64_t i = 0; i < N; i++) {
        const double *row = x + i * C;
        double m = row[0], sum = 0, sum_x = 0;
        for (int64_t c = 1; c < C; c++) m = row[c] > m ? row[c] : m;
        for (int64_t c = 0; c < C; c++) sum += exp(row[c] - m), sum_x += row[c];
        double lse = m + log(sum);
        total += (1 - s) * (lse - row[t[i]]) + s / (double)C * ((double)C * lse - sum_x);
    }
    return total / (double)N;
}

static tl_status ce_forward(const void *ctx, tl_tensor *const *in, tl_tensor **out) {
    const ce_case *c = ctx;
    return tl_ag_cross_entropy(in[0], c->target, c->smoothing, out);
}

static void test_cross_entropy(void) {
    const int64_t N = 6, C = 5, targets[6] = {0, 4, 2, 2, 1, 3};
    const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_BF16, TL_F16};
    const double smoothings[2] = {0, 0.1};
    for (int it = 0; it < 2; it++) {
        tl_tensor *t = int_tensor(targets, &N, 1, it ? TL_I32 : TL_I64);
        for (int si = 0; si < 2; si++) {
            for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
                tl_tensor *x = random_tensor((int64_t[]){N, C}, 2, dtypes[d], 3.0);
                tl_tensor *loss = NULL, *lse = NULL;
                OK(tl_cross_entropy(x, t, smoothings[si], &loss, &lse));
                if (loss) {
                    double *xv = to_doubles(x), want = ce_ref(xv, targets, N, C, smoothings[si]);
                    CHECK(loss->ndim == 0 && loss->dtype == dtypes[d], "cross_entropy: loss "
                                                                       "must be 0-dim");
                    check_close("cross_entropy forward", loss, &want, tolerance(dtypes[d]));
                    free(xv);
                }
                tl_release(x), tl_release(loss), tl_release(lse);
            }
            tl_tensor *x = random_tensor((int64_t[]){N, C}, 2, TL_F64, 3.0);
            OK(tl_set_requires_grad(x, true));
            ce_case c = {t, smoothings[si]};
            gradcheck("cross_entropy gradcheck", ce_forward, &c, &x, 1);
            tl_release(x);
        }
        tl_release(t);
    }
    /* golden values from PyTorch 1.13:
       /usr/bin/python3 -c "import torch; x = torch.tensor([[1.0, 2.0, 0.5, -0.25],
         [-1.0, 0.0, 3.0, 1.5], [0.3, -0.7, 0.1, 2.2]], dtype=torch.float64,
         requires_grad=True); l = torch.nn.functional.cross_entropy(x, torch.tensor([1, 2, 0]),
         label_smoothing=0.2); l.backward(); print(l.item(), x.grad)" */
    const double xv[12] = {1.0, 2.0, 0.5, -0.25, -1.0, 0.0, 3.0, 1.5, 0.3, -0.7, 0.1, 2.2};
    const double golden_loss = 1.1981893875226279;
    const double golden_grad[12] = {
        0.055619257881470263, -0.086839818180771064,  0.027176962837452471,  0.0040435974618483334,
        -0.01193846223737503, -0.0038140744852836399, -0.025182118515491434, 0.040934655238150111,
        -0.24576408462750818, -0.0028457124475367761, 0.014092432618827564,  0.2345173644562174};
    tl_tensor *x = from_values(xv, (int64_t[]){3, 4}, 2, TL_F64), *loss = NULL;
    tl_tensor *t = int_tensor((int64_t[]){1, 2, 0}, (int64_t[]){3}, 1, TL_I64);
    OK(tl_set_requires_grad(x, true));
    OK(tl_ag_cross_entropy(x, t, 0.2, &loss));
    if (loss) {
        check_close("cross_entropy golden loss", loss, &golden_loss, 1e-14);
        OK(tl_backward(loss, NULL, false));
        if (tl_grad(x)) check_close("cross_entropy golden grad", tl_grad(x), golden_grad, 1e-14);
    }
    tl_release(loss), tl_release(x);
    /* large logits stay finite */
    const double big[6] = {1000, 999, -1000, 50, 1e4, 1e4 - 1};
    x = from_values(big, (int64_t[]){2, 3}, 2, TL_F32), loss = NULL;
    tl_tensor *t2 = int_tensor((int64_t[]){1, 2}, (int64_t[]){2}, 1, TL_I64);
    OK(tl_cross_entropy(x, t2, 0, &loss, NULL));
    if (loss) {
        double want = ((log(1 + exp(-1.0)) + 1) + (log(1 + exp(-1.0)) + 1)) / 2;
        check_close("cross_entropy large logits", loss, &want, 1e-5);
    }
    tl_release(loss);
    loss = NULL;
    /* errors */
    tl_tensor *bad = int_tensor((int64_t[]){1, 3}, (int64_t[]){2}, 1, TL_I64);
    tl_tensor *short_t = int_tensor((int64_t[]){1}, (int64_t[]){1}, 1, TL_I64);
    FAILS(tl_cross_entropy(x, bad, 0, &loss, NULL), TL_ERR_INDEX,
          "target 3 at position 1 is out of range for 3 classes");
    FAILS(tl_cross_entropy(x, short_t, 0, &loss, NULL), TL_ERR_SHAPE, "target must be [2]");
    FAILS(tl_cross_entropy(x, t2, 1.5, &loss, NULL), TL_ERR_ARGUMENT, "label_smoothing");
    CHECK(loss == NULL, "cross_entropy: loss set by a failing call");
    tl_release(x), tl_release(t), tl_release(t2), tl_release(bad), tl_release(short_t);
}

/* ---- layer_norm ----------------------------------------------------------------------------- */
typedef struct norm_case {
    bool weight, bias;
    double eps;
} norm_case;

static tl_status norm_forward(const void *ctx, tl_tensor *const *in, tl_tensor **out) {
    const norm_case *c = ctx;
    return tl_ag_layer_norm(in[0], c->weight ? in[1] : NULL, c->bias ? in[2] : NULL, c->eps, out);
}

static void norm_ref(const double *x, const double *w, const double *b, int64_t rows, int64_t D,
                     double eps, double *out, double *mean, double *rstd) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * D;
        double mu = 0, var = 0;
        for (int64_t j = 0; j < D; j++) mu += xr[j];
        mu /= (double)D;
        for (int64_t j = 0; j < D; j++) var += (xr[j] - mu) * (xr[j] - mu);
        double s = 1 / sqrt(var / (double)D + eps);
        mean[r] = mu, rstd[r] = s;
        for (int64_t j = 0; j < D; j++)
            out[r * D + j] = (xr[j] - mu) * s * (w ? w[j] : 1) + (b ? b[j] : 0);
    }
}

static void test_layer_norm(void) {
    const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_BF16, TL_F16};
    const int64_t shape[3] = {2, 3, 7}, D = 7, rows = 6;
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        tl_tensor *x = random_tensor(shape, 3, dtypes[d], 2.0);
        tl_tensor *w = random_tensor(&D, 1, dtypes[d], 1.0),
                  *b = random_tensor(&D, 1, dtypes[d], 1.0);
        tl_tensor *out = NULL, *mean = NULL, *rstd = NULL;
        OK(tl_layer_norm(x, w, b, 1e-5, &out, &mean, &rstd));
        if (out) {
            double *xv = to_doubles(x), *wv = to_doubles(w), *bv = to_doubles(b);
            double want[42], want_mean[6], want_rstd[6];
            norm_ref(xv, wv, bv, rows, D, 1e-5, want, want_mean, want_rstd);
            CHECK(mean->ndim == 2 && mean->shape[1] == 3, "layer_norm: mean shape");
            check_close("layer_norm forward", out, want, tolerance(dtypes[d]));
            check_close("layer_norm mean", mean, want_mean, dtypes[d] == TL_F64 ? 1e-12 : 1e-6);
            check_close("layer_norm rstd", rstd, want_rstd, dtypes[d] == TL_F64 ? 1e-12 : 1e-5);
            free(xv), free(wv), free(bv);
        }
        tl_release(x), tl_release(w), tl_release(b), tl_release(out), tl_release(mean);
        tl_release(rstd);
    }
    const norm_case cases[] = {
        {true, true, 1e-5}, {false, false, 1e-5}, {true, false, 0.1}, {false, true, 1e-3}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tl_tensor *in[3] = {random_tensor(shape, 3, TL_F64, 2.0), random_tensor(&D, 1, TL_F64, 1.0),
                            random_tensor(&D, 1, TL_F64, 1.0)};
        for (int i = 0; i < 3; i++) OK(tl_set_requires_grad(in[i], true));
        if (!cases[k].weight) OK(tl_set_requires_grad(in[1], false));
        if (!cases[k].bias) OK(tl_set_requires_grad(in[2], false));
        char what[64];
        snprintf(what, sizeof what, "layer_norm gradcheck case %zu", k);
        gradcheck(what, norm_forward, &cases[k], in, 3);
        for (int i = 0; i < 3; i++) tl_release(in[i]);
    }
    /* 16-bit backward against float64 on the same values */
    for (size_t d = 1; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        tl_tensor *x = random_tensor(shape, 3, dtypes[d], 2.0),
                  *w = random_tensor(&D, 1, dtypes[d], 1.0);
        tl_tensor *g = random_tensor(shape, 3, dtypes[d], 1.0);
        tl_tensor *x64 = NULL, *w64 = NULL, *g64 = NULL, *out = NULL, *mean = NULL, *rstd = NULL;
        tl_tensor *out64 = NULL, *mean64 = NULL, *rstd64 = NULL;
        OK(tl_cast(x, TL_F64, &x64));
        OK(tl_cast(w, TL_F64, &w64));
        OK(tl_cast(g, TL_F64, &g64));
        OK(tl_layer_norm(x, w, NULL, 1e-5, &out, &mean, &rstd));
        OK(tl_layer_norm(x64, w64, NULL, 1e-5, &out64, &mean64, &rstd64));
        tl_tensor *gi = NULL, *gw = NULL, *gb = NULL, *gi64 = NULL, *gw64 = NULL, *gb64 = NULL;
        OK(tl_layer_norm_backward_input(g, x, mean, rstd, w, &gi));
        OK(tl_layer_norm_backward_weight(g, x, mean, rstd, &gw, &gb));
        OK(tl_layer_norm_backward_input(g64, x64, mean64, rstd64, w64, &gi64));
        OK(tl_layer_norm_backward_weight(g64, x64, mean64, rstd64, &gw64, &gb64));
        if (gi && gw && gb && gi64 && gw64 && gb64) {
            double *a = to_doubles(gi64), *b = to_doubles(gw64), *c = to_doubles(gb64);
            check_close("layer_norm 16-bit backward input", gi, a, 3 * tolerance(dtypes[d]));
            check_close("layer_norm 16-bit backward weight", gw, b, 3 * tolerance(dtypes[d]));
            check_close("layer_norm 16-bit backward bias", gb, c, 3 * tolerance(dtypes[d]));
            free(a), free(b), free(c);
        }
        tl_release(x), tl_release(w), tl_release(g), tl_release(x64), tl_release(w64);
        tl_release(g64), tl_release(out), tl_release(mean), tl_release(rstd), tl_release(out64);
        tl_release(mean64), tl_release(rstd64), tl_release(gi), tl_release(gw), tl_release(gb);
        tl_release(gi64), tl_release(gw64), tl_release(gb64);
    }
    /* gating: only the bias needs grad, so the input kernel never runs and nothing is saved */
    tl_tensor *x = random_tensor(shape, 3, TL_F64, 2.0), *w = random_tensor(&D, 1, TL_F64, 1.0);
    tl_tensor *b = random_tensor(&D, 1, TL_F64, 1.0), *out = NULL;
    OK(tl_set_requires_grad(b, true));
    OK(tl_ag_layer_norm(x, w, b, 1e-5, &out));
    tl_bump_version(x), tl_bump_version(w);
    if (out) {
        tl_tensor *seed = random_tensor(shape, 3, TL_F64, 1.0);
        tl_trace_event *events = NULL;
        int count = 0;
        tl_trace_begin();
        OK(tl_backward(out, seed, false));
        OK(tl_trace_end(&events, &count));
        CHECK(!trace_has(events, count, "layer_norm_backward_input") &&
                  trace_has(events, count, "layer_norm_backward_weight"),
              "layer_norm gating: wrong kernels ran");
        if (tl_grad(b)) {
            double *s = to_doubles(seed), want[7] = {0};
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < D; j++) want[j] += s[r * D + j];
            check_close("layer_norm bias grad", tl_grad(b), want, 1e-12);
            free(s);
        }
        free(events);
        tl_release(seed);
    }
    tl_release(out), tl_release(x), tl_release(w), tl_release(b);
    /* errors */
    x = random_tensor(shape, 3, TL_F32, 1.0), out = NULL;
    tl_tensor *w6 = random_tensor((int64_t[]){6}, 1, TL_F32, 1.0);
    FAILS(tl_layer_norm(x, w6, NULL, 1e-5, &out, NULL, NULL), TL_ERR_SHAPE,
          "weight must be [7] (the last dim of input [2, 3, 7]), got [6]");
    FAILS(tl_layer_norm(x, NULL, NULL, -1, &out, NULL, NULL), TL_ERR_ARGUMENT, "eps");
    CHECK(out == NULL, "layer_norm: out set by a failing call");
    tl_release(x), tl_release(w6);
}

/* ---- optimizer steps ------------------------------------------------------------------------ */
#define PARAMS 6

static double grad_at(int t, int i) {
    return (double)((i * 7 + t * 3) % 11 - 5) / 4;
}

/* torch.optim.SGD written out in double. */
static void sgd_ref(double *p, double *buf, int steps, double lr, double momentum, double dampening,
                    double wd, bool nesterov) {
    for (int t = 0; t < steps; t++)
        for (int i = 0; i < PARAMS; i++) {
            double d = grad_at(t, i) + wd * p[i];
            if (momentum != 0) {
                buf[i] = t == 0 ? d : buf[i] * momentum + (1 - dampening) * d;
                d = nesterov ? d + momentum * buf[i] : buf[i];
            }
            p[i] -= lr * d;
        }
}

/* torch.optim.Adam / AdamW written out in double. */
static void adam_ref(double *p, double *m, double *v, int steps, double lr, double b1, double b2,
                     double eps, double wd, bool decoupled) {
    for (int t = 0; t < steps; t++) {
        double c1 = 1 - pow(b1, t + 1), c2 = 1 - pow(b2, t + 1);
        for (int i = 0; i < PARAMS; i++) {
            double g = grad_at(t, i);
            if (decoupled)
                p[i] *= 1 - lr * wd;
            else
                g += wd * p[i];
            m[i] = m[i] * b1 + (1 - b1) * g;
            v[i] = v[i] * b2 + (1 - b2) * g * g;
            p[i] -= lr / c1 * m[i] / (sqrt(v[i]) / sqrt(c2) + eps);
        }
    }
}

typedef enum { SGD, SGD_NESTEROV, ADAM, ADAMW } optim_kind;

/* Runs steps of kind in dtype from the standard start; returns the params as doubles. */
static double *run_optim(optim_kind kind, tl_dtype dtype, int steps) {
    const int64_t n = PARAMS;
    double p0[PARAMS], zeros[PARAMS] = {0};
    for (int i = 0; i < PARAMS; i++) p0[i] = (i - 2.5) / 2;
    tl_tensor *p = from_values(p0, &n, 1, dtype), *s0 = from_values(zeros, &n, 1, dtype);
    tl_tensor *s1 = from_values(zeros, &n, 1, dtype);
    for (int t = 0; t < steps; t++) {
        double g[PARAMS];
        for (int i = 0; i < PARAMS; i++) g[i] = grad_at(t, i);
        tl_tensor *grad = from_values(g, &n, 1, dtype);
        uint64_t version = p->storage->version;
        switch (kind) {
        case SGD:
            OK(tl_sgd_step(p, grad, s0, 0.1, 0.9, 0.1, 0.01, false, t == 0));
            break;
        case SGD_NESTEROV:
            OK(tl_sgd_step(p, grad, s0, 0.1, 0.9, 0, 0.01, true, t == 0));
            break;
        case ADAM:
            OK(tl_adam_step(p, grad, s0, s1, t + 1, 0.01, 0.9, 0.999, 1e-8, 0.1, false));
            break;
        case ADAMW:
            OK(tl_adam_step(p, grad, s0, s1, t + 1, 0.01, 0.9, 0.999, 1e-8, 0.1, true));
            break;
        }
        CHECK(p->storage->version > version, "optimizer step did not bump the version");
        tl_release(grad);
    }
    double *out = to_doubles(p);
    tl_release(p), tl_release(s0), tl_release(s1);
    return out;
}

static void test_optim(void) {
    const int steps = 4;
    /* float64 against the formulas in double */
    for (int kind = SGD; kind <= ADAMW; kind++) {
        double p[PARAMS], a[PARAMS] = {0}, b[PARAMS] = {0};
        for (int i = 0; i < PARAMS; i++) p[i] = (i - 2.5) / 2;
        if (kind == SGD) sgd_ref(p, a, steps, 0.1, 0.9, 0.1, 0.01, false);
        if (kind == SGD_NESTEROV) sgd_ref(p, a, steps, 0.1, 0.9, 0, 0.01, true);
        if (kind == ADAM) adam_ref(p, a, b, steps, 0.01, 0.9, 0.999, 1e-8, 0.1, false);
        if (kind == ADAMW) adam_ref(p, a, b, steps, 0.01, 0.9, 0.999, 1e-8, 0.1, true);
        double *got = run_optim((optim_kind)kind, TL_F64, steps);
        double err = max_error(got, p, PARAMS);
        CHECK(err < 1e-14, "optimizer %d float64: off the formulas by %g", kind, err);
        free(got);
    }
    /* float32 against PyTorch 1.13 (4 steps, params (i - 2.5) / 2, grads ((7i + 3t) % 11 - 5) / 4):
       /usr/bin/python3 -c "
       import torch
       def run(make):
           p = torch.tensor([(i - 2.5) / 2 for i in range(6)], requires_grad=True)
           opt = make([p])
           for t in range(4):
               p.grad = torch.tensor([((i * 7 + t * 3) % 11 - 5) / 4 for i in range(6)])
               opt.step()
           print(', '.join('%.9gf' % v for v in p.tolist()))
       run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01))
       run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01))
       run(lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1))
       run(lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1))" */
    const double golden[4][PARAMS] = {
        {-0.821478903f, -1.091488f, -0.218154192f, -0.0657845289f, 0.607697845f, 1.48103166f},
        {-0.811747432f, -1.17026281f, -0.20959343f, -0.147713929f, 0.614317894f, 1.57498717f},
        {-1.22257435f, -0.773430467f, -0.239735976f, 0.232119411f, 0.729228079f, 1.26480901f},
        {-1.22010064f, -0.772233844f, -0.239940554f, 0.231902093f, 0.72838217f, 1.26478505f},
    };
    for (int kind = SGD; kind <= ADAMW; kind++) {
        double *got = run_optim((optim_kind)kind, TL_F32, steps);
        double err = max_error(got, golden[kind], PARAMS);
        CHECK(err < 2e-6, "optimizer %d float32: off PyTorch by %g", kind, err);
        free(got);
        got = run_optim((optim_kind)kind, TL_BF16, steps);
        err = max_error(got, golden[kind], PARAMS);
        CHECK(err < 3e-2, "optimizer %d bfloat16: off PyTorch by %g", kind, err);
        free(got);
    }
    /* errors: nothing is written */
    const int64_t n = PARAMS, m = 5;
    tl_tensor *p = random_tensor(&n, 1, TL_F32, 1.0), *g = random_tensor(&n, 1, TL_F32, 1.0);
    tl_tensor *g5 = random_tensor(&m, 1, TL_F32, 1.0), *g64 = random_tensor(&n, 1, TL_F64, 1.0);
    tl_tensor *buf = random_tensor(&n, 1, TL_F32, 1.0);
    double *before = to_doubles(p);
    uint64_t version = p->storage->version;
    FAILS(tl_sgd_step(p, g5, NULL, 0.1, 0, 0, 0, false, true), TL_ERR_SHAPE,
          "grad has shape [5] but param has [6]");
    FAILS(tl_sgd_step(p, g64, NULL, 0.1, 0, 0, 0, false, true), TL_ERR_DTYPE, "grad is float64");
    FAILS(tl_sgd_step(p, g, NULL, 0.1, 0.9, 0, 0, false, true), TL_ERR_ARGUMENT,
          "needs a momentum_buffer");
    FAILS(tl_sgd_step(p, g, buf, 0.1, 0.9, 0.5, 0, true, true), TL_ERR_ARGUMENT, "nesterov");
    FAILS(tl_sgd_step(p, g, NULL, -1, 0, 0, 0, false, true), TL_ERR_ARGUMENT, "lr must be >= 0");
    FAILS(tl_adam_step(p, g, buf, g5, 1, 0.1, 0.9, 0.999, 1e-8, 0, false), TL_ERR_SHAPE,
          "exp_avg_sq has shape [5]");
    FAILS(tl_adam_step(p, g, buf, buf, 0, 0.1, 0.9, 0.999, 1e-8, 0, false), TL_ERR_ARGUMENT,
          "step counts from 1");
    FAILS(tl_adam_step(p, g, buf, buf, 1, 0.1, 1.0, 0.999, 1e-8, 0, true), TL_ERR_ARGUMENT,
          "betas");
    double *after = to_doubles(p);
    CHECK(memcmp(before, after, sizeof *before * PARAMS) == 0 && p->storage->version == version,
          "optimizer: a failing step wrote the param");
    free(before), free(after);
    tl_release(p), tl_release(g), tl_release(g5), tl_release(g64), tl_release(buf);
}

int main(void) {
    test_conversions();
    test_conv2d_forward();
    test_conv2d_grad();
    test_conv2d_backward_16();
    test_conv2d_chunked();
    test_conv2d_gating();
    test_conv2d_errors();
    test_max_pool2d();
    test_embedding();
    test_cross_entropy();
    test_layer_norm();
    test_optim();
    if (failures) {
        printf("test_nn: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_nn: all passed\n");
    return 0;
}
