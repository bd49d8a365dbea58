/* C unit test of the functional tl_linear, its split gradients and tl_outer (no autograd),
   against float64 loops, and their errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlua/tlua.h"

#include "check.h"

static tl_tensor *filled(const int64_t *shape, int ndim, tl_dtype dtype, double scale) {
    tl_tensor *t = NULL;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *values = malloc((size_t)n * sizeof *values);
    for (int64_t i = 0; i < n; i++) values[i] = scale * sin(0.7 * (double)i + scale);
    tl_tensor *f64 = NULL;
    OK(tl_from_host(values, shape, ndim, TL_F64, TL_CPU, &f64));
    OK(tl_cast(f64, dtype, &t));
    tl_release(f64);
    free(values);
    return t;
}

static double *values_of(const tl_tensor *t) {
    int64_t n = tl_numel(t);
    double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    tl_tensor *f64 = NULL, *dense = NULL;
    OK(tl_cast((tl_tensor *)t, TL_F64, &f64));
    OK(tl_contiguous(f64, &dense));
    memcpy(out, tl_data(dense), (size_t)n * sizeof *out);
    tl_release(f64), tl_release(dense);
    return out;
}

static void check_values(const char *what, const tl_tensor *t, const double *want, int64_t n,
                         double tol) {
    CHECK(tl_numel(t) == n, "%s: %lld elements, expected %lld", what, (long long)tl_numel(t),
          (long long)n);
    if (tl_numel(t) != n) return;
    double *got = values_of(t);
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(got[i] - want[i]) / (1 + fabs(want[i])));
    CHECK(worst <= tol, "%s: max relative error %g > %g", what, worst, tol);
    free(got);
}

/* x [2, 3, I], weight [O, I], bias [O]: out, grad_input, grad_weight and grad_bias against
   loops in double, for grad g = a fixed tensor [2, 3, O]. */
static void test_linear(tl_dtype dtype, double tol) {
    enum { B = 2, T = 3, I = 5, O = 4, N = B * T };
    int64_t xs[3] = {B, T, I}, ws[2] = {O, I}, bs[1] = {O}, gs[3] = {B, T, O};
    tl_tensor *x = filled(xs, 3, dtype, 1.0), *w = filled(ws, 2, dtype, 0.5);
    tl_tensor *b = filled(bs, 1, dtype, 0.25), *g = filled(gs, 3, dtype, 0.75);
    double *xv = values_of(x), *wv = values_of(w), *bv = values_of(b), *gv = values_of(g);
    double out[N * O], gx[N * I], gw[O * I], gb[O];
    for (int r = 0; r < N; r++)
        for (int o = 0; o < O; o++) {
            out[r * O + o] = bv[o];
            for (int i = 0; i < I; i++) out[r * O + o] += xv[r * I + i] * wv[o * I + i];
        }
    for (int r = 0; r < N; r++)
        for (int i = 0; i < I; i++) {
            gx[r * I + i] = 0;
            for (int o = 0; o < O; o++) gx[r * I + i] += gv[r * O + o] * wv[o * I + i];
        }
    for (int o = 0; o < O; o++) {
        gb[o] = 0;
        for (int r = 0; r < N; r++) gb[o] += gv[r * O + o];
        for (int i = 0; i < I; i++) {
            gw[o * I + i] = 0;
            for (int r = 0; r < N; r++) gw[o * I + i] += gv[r * O + o] * xv[r * I + i];
        }
    }
    tl_tensor *y = NULL, *y_nobias = NULL, *dx = NULL, *dw = NULL, *db = NULL;
    OK(tl_linear(x, w, b, &y));
    CHECK(y && y->ndim == 3 && y->shape[0] == B && y->shape[1] == T && y->shape[2] == O,
          "linear: output shape");
    if (y) check_values("linear", y, out, N * O, tol);
    OK(tl_linear(x, w, NULL, &y_nobias));
    for (int r = 0; r < N; r++)
        for (int o = 0; o < O; o++) out[r * O + o] -= bv[o];
    if (y_nobias) check_values("linear without bias", y_nobias, out, N * O, tol);
    OK(tl_linear_backward_input(g, w, &dx));
    CHECK(dx && dx->ndim == 3 && dx->shape[2] == I, "linear_backward_input: shape");
    if (dx) check_values("linear_backward_input", dx, gx, N * I, tol);
    OK(tl_linear_backward_weight(g, x, &dw));
    if (dw) check_values("linear_backward_weight", dw, gw, O * I, tol);
    OK(tl_linear_backward_bias(g, &db));
    if (db) check_values("linear_backward_bias", db, gb, O, tol);
    free(xv), free(wv), free(bv), free(gv);
    tl_release(x), tl_release(w), tl_release(b), tl_release(g);
    tl_release(y), tl_release(y_nobias), tl_release(dx), tl_release(dw), tl_release(db);
}

static void test_outer(void) {
    int64_t as[1] = {3}, bs[1] = {4};
    tl_tensor *a = filled(as, 1, TL_F32, 1.0), *b = filled(bs, 1, TL_F32, 2.0), *out = NULL;
    double *av = values_of(a), *bv = values_of(b), want[12];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) want[i * 4 + j] = av[i] * bv[j];
    OK(tl_outer(a, b, &out));
    if (out) check_values("outer", out, want, 12, 1e-6);
    free(av), free(bv);
    tl_release(a), tl_release(b), tl_release(out);
}

/* expr fails with a message containing text, and *out stays NULL */
static void expect_error(const char *what, tl_status status, tl_tensor *out, const char *text) {
    CHECK(status != TL_OK, "%s: expected an error", what);
    CHECK(strstr(tl_last_error(), text) != NULL, "%s: message '%s' lacks '%s'", what,
          tl_last_error(), text);
    CHECK(out == NULL, "%s: an output was made", what);
    tl_release(out);
}

static void test_errors(void) {
    int64_t xs[2] = {2, 3}, ws[2] = {4, 5}, w3[2] = {4, 3}, bs[1] = {5}, v[1] = {3};
    tl_tensor *x = filled(xs, 2, TL_F32, 1), *w = filled(ws, 2, TL_F32, 1);
    tl_tensor *good_w = filled(w3, 2, TL_F32, 1), *w64 = filled(w3, 2, TL_F64, 1);
    tl_tensor *bias = filled(bs, 1, TL_F32, 1), *xi = filled(xs, 2, TL_I32, 1);
    tl_tensor *vec = filled(v, 1, TL_F32, 1), *out = NULL;
    expect_error("feature mismatch", tl_linear(x, w, NULL, &out), out,
                 "linear: input has 3 features but weight expects 5");
    expect_error("bias shape", tl_linear(x, good_w, bias, &out), out,
                 "linear: bias must have shape [4], got [5]");
    expect_error("dtype mixing", tl_linear(x, w64, NULL, &out), out,
                 "linear: input is float32 but weight is float64");
    expect_error("integer input", tl_linear(xi, good_w, NULL, &out), out,
                 "linear: input is int32 but weight is float32");
    expect_error("missing weight", tl_linear(x, NULL, NULL, &out), out,
                 "linear: weight is missing");
    expect_error("grad shape", tl_linear_backward_input(x, good_w, &out), out,
                 "linear_backward_input: grad must be [..., 4], got [2, 3]");
    expect_error("outer ranks", tl_outer(x, vec, &out), out,
                 "outer: expected two 1-D tensors, got shapes [2, 3] and [3]");
    tl_release(x), tl_release(w), tl_release(good_w), tl_release(w64), tl_release(bias);
    tl_release(xi), tl_release(vec);
}

int main(void) {
    test_linear(TL_F64, 1e-12);
    test_linear(TL_F32, 1e-5);
    test_linear(TL_BF16, 3e-2);
    test_outer();
    test_errors();
    if (failures) {
        printf("test_linear: %d failure(s) of %d checks\n", failures, checks);
        return 1;
    }
    printf("test_linear: all %d checks passed\n", checks);
    return 0;
}
