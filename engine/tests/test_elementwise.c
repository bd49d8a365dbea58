/* C unit test of the elementwise ops, fill, copy and casts: values against hand-computed
   doubles, broadcasting, strided inputs, the parallel path, bf16/f16 rounding on
   hand-worked bit patterns, and errors that name the op. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "tlua/tlua.h"

#include "check.h"

/* a tensor of dtype holding values (stored through tl_dtype_store, not the kernels) */
static tl_tensor *make(tl_dtype dtype, int ndim, const int64_t *shape, const double *values) {
    tl_tensor *t = NULL;
    OK(tl_empty(shape, ndim, dtype, TL_CPU, &t));
    int64_t n = tl_numel(t);
    char *data = tl_data(t);
    for (int64_t i = 0; i < n; i++)
        tl_dtype_store(dtype, data + i * (int64_t)tl_dtype_size(dtype), tl_scalar_float(values[i]));
    return t;
}

/* element i in row-major order, as a double (tl_get: no kernel involved) */
static double at(const tl_tensor *t, int64_t i) {
    int64_t index[TL_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        index[d] = i % t->shape[d];
        i /= t->shape[d];
    }
    tl_scalar v = tl_scalar_float(NAN);
    OK(tl_get(t, index, &v));
    return tl_scalar_to_double(v);
}

static uint16_t bits16(const tl_tensor *t, int64_t i) {
    return ((const uint16_t *)tl_data(t))[i];
}

static void expect_values(const char *what, const tl_tensor *t, tl_dtype dtype, int ndim,
                          const int64_t *shape, const double *want, double tol) {
    if (!t) {
        CHECK(0, "%s: no result", what);
        return;
    }
    CHECK(t->dtype == dtype, "%s: dtype %s, expected %s", what, tl_dtype_name(t->dtype),
          tl_dtype_name(dtype));
    CHECK(t->ndim == ndim && memcmp(t->shape, shape, (size_t)ndim * sizeof *shape) == 0,
          "%s: wrong shape", what);
    int64_t n = tl_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double got = at(t, i);
        bool same =
            (isnan(want[i]) && isnan(got)) || fabs(got - want[i]) <= tol * (1 + fabs(want[i]));
        CHECK(same, "%s: element %lld is %.17g, expected %.17g", what, (long long)i, got, want[i]);
    }
}

static void expect_error(const char *what, tl_status got, tl_status want, const char *prefix) {
    CHECK(got == want, "%s: status %d, expected %d", what, (int)got, (int)want);
    CHECK(strncmp(tl_last_error(), prefix, strlen(prefix)) == 0,
          "%s: message '%s' does not start with '%s'", what, tl_last_error(), prefix);
}

static void test_binary(void) {
    int64_t s23[] = {2, 3}, s3[] = {3}, s32[] = {3, 2};
    tl_tensor *a = make(TL_F32, 2, s23, (double[]){1, 2, 3, 4, 5, 6});
    tl_tensor *b = make(TL_F32, 1, s3, (double[]){10, 20, 30});
    tl_tensor *r = NULL;
    OK(tl_add(a, b, &r));
    expect_values("add broadcast", r, TL_F32, 2, s23, (double[]){11, 22, 33, 14, 25, 36}, 0);
    tl_release(r), r = NULL;
    OK(tl_div(b, a, &r));
    expect_values("div broadcast", r, TL_F32, 2, s23, (double[]){10, 10, 10, 2.5, 4, 5}, 1e-7);
    tl_release(r), r = NULL;

    /* a transposed (non-contiguous) input: c is [3, 2], c^T is [2, 3] */
    tl_tensor *c = make(TL_F64, 2, s32, (double[]){1, 2, 3, 4, 5, 6}), *ct = NULL;
    OK(tl_transpose(c, 0, 1, &ct));
    OK(tl_sub(a, ct, &r)); /* f32 with f64: f64 */
    expect_values("sub transposed", r, TL_F64, 2, s23, (double[]){0, -1, -2, 2, 1, 0}, 0);
    tl_release(r), r = NULL;
    OK(tl_mul(ct, ct, &r));
    expect_values("mul transposed", r, TL_F64, 2, s23, (double[]){1, 9, 25, 4, 16, 36}, 0);
    tl_release(r), r = NULL;

    /* integers: wrap, true division gives float32, pow */
    tl_tensor *i = make(TL_I32, 1, s3, (double[]){7, -7, 2147483647});
    tl_tensor *j = make(TL_I32, 1, s3, (double[]){2, 2, 1});
    OK(tl_add(i, j, &r));
    expect_values("add int32 wraps", r, TL_I32, 1, s3, (double[]){9, -5, -2147483648.0}, 0);
    tl_release(r), r = NULL;
    OK(tl_div(i, j, &r));
    expect_values("div int32", r, TL_F32, 1, s3, (double[]){3.5, -3.5, 2147483648.0}, 1e-7);
    tl_release(r), r = NULL;
    OK(tl_pow(j, j, &r));
    expect_values("pow int32", r, TL_I32, 1, s3, (double[]){4, 4, 1}, 0);
    tl_release(r), r = NULL;
    OK(tl_mul(i, b, &r)); /* int32 with f32: f32 */
    expect_values("mul int32 f32", r, TL_F32, 1, s3, (double[]){70, -140, 2147483647.0 * 30}, 1e-7);
    tl_release(r), r = NULL;

    /* bool arithmetic counts as int64 */
    tl_tensor *t = make(TL_BOOL, 1, s3, (double[]){1, 0, 1});
    OK(tl_add(t, t, &r));
    expect_values("add bool", r, TL_I64, 1, s3, (double[]){2, 0, 2}, 0);
    tl_release(r), r = NULL;

    /* comparisons give bool, NaN compares unequal */
    tl_tensor *n = make(TL_F32, 1, s3, (double[]){10, NAN, 31});
    OK(tl_lt(b, n, &r));
    expect_values("lt", r, TL_BOOL, 1, s3, (double[]){0, 0, 1}, 0);
    tl_release(r), r = NULL;
    OK(tl_ne(n, n, &r));
    expect_values("ne NaN", r, TL_BOOL, 1, s3, (double[]){0, 1, 0}, 0);
    tl_release(r), r = NULL;
    OK(tl_ge(a, b, &r));
    expect_values("ge broadcast", r, TL_BOOL, 2, s23, (double[]){0, 0, 0, 0, 0, 0}, 0);
    tl_release(r), r = NULL;
    OK(tl_eq(t, t, &r));
    expect_values("eq bool", r, TL_BOOL, 1, s3, (double[]){1, 1, 1}, 0);
    tl_release(r), r = NULL;

    /* where: cond [2, 1] broadcast against a [3] and b 0-dim */
    int64_t s21[] = {2, 1};
    tl_tensor *cond = make(TL_BOOL, 2, s21, (double[]){1, 0});
    tl_tensor *zero = make(TL_I64, 0, NULL, (double[]){-1});
    OK(tl_where(cond, b, zero, &r));
    expect_values("where", r, TL_F32, 2, s23, (double[]){10, 20, 30, -1, -1, -1}, 0);
    tl_release(r), r = NULL;

    tl_release(a), tl_release(b), tl_release(c), tl_release(ct), tl_release(i);
    tl_release(j), tl_release(t), tl_release(n), tl_release(cond), tl_release(zero);
}

static void test_unary(void) {
    int64_t s4[] = {4};
    tl_tensor *x = make(TL_F32, 1, s4, (double[]){-2, -0.5, 1, 4});
    tl_tensor *r = NULL;
    struct {
        tl_status (*fn)(const tl_tensor *, tl_tensor **);
        const char *name;
        double want[4];
    } cases[] = {
        {tl_neg, "neg", {2, 0.5, -1, -4}},
        {tl_abs, "abs", {2, 0.5, 1, 4}},
        {tl_relu, "relu", {0, 0, 1, 4}},
        {tl_exp, "exp", {exp(-2), exp(-0.5), exp(1), exp(4)}},
        {tl_tanh, "tanh", {tanh(-2), tanh(-0.5), tanh(1), tanh(4)}},
        {tl_sigmoid,
         "sigmoid",
         {1 / (1 + exp(2)), 1 / (1 + exp(0.5)), 1 / (1 + exp(-1)), 1 / (1 + exp(-4))}},
        /* x * Phi(x) */
        {tl_gelu,
         "gelu",
         {-2 * 0.022750131948179195, -0.5 * 0.3085375387259869, 0.8413447460685429,
          4 * 0.9999683287581669}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        OK(cases[c].fn(x, &r));
        expect_values(cases[c].name, r, TL_F32, 1, s4, cases[c].want, 1e-6);
        tl_release(r), r = NULL;
    }
    OK(tl_sqrt(x, &r));
    expect_values("sqrt", r, TL_F32, 1, s4, (double[]){NAN, NAN, 1, 2}, 1e-7);
    tl_release(r), r = NULL;
    OK(tl_log(x, &r));
    expect_values("log", r, TL_F32, 1, s4, (double[]){NAN, NAN, 0, log(4)}, 1e-7);
    tl_release(r), r = NULL;
    OK(tl_pow_scalar(x, 2, &r));
    expect_values("pow_scalar 2", r, TL_F32, 1, s4, (double[]){4, 0.25, 1, 16}, 0);
    tl_release(r), r = NULL;
    OK(tl_clamp(x, true, -1, true, 2, &r));
    expect_values("clamp", r, TL_F32, 1, s4, (double[]){-1, -0.5, 1, 2}, 0);
    tl_release(r), r = NULL;
    OK(tl_clamp(x, false, 0, true, 0, &r));
    expect_values("clamp max only", r, TL_F32, 1, s4, (double[]){-2, -0.5, 0, 0}, 0);
    tl_release(r), r = NULL;

    /* f64 keeps its precision */
    tl_tensor *d = make(TL_F64, 1, s4, (double[]){-2, -0.5, 1, 4});
    OK(tl_exp(d, &r));
    expect_values("exp f64", r, TL_F64, 1, s4, (double[]){exp(-2), exp(-0.5), exp(1), exp(4)},
                  1e-15);
    tl_release(r), r = NULL;

    /* integers */
    tl_tensor *i = make(TL_I64, 1, s4, (double[]){-3, -1, 2, 5});
    OK(tl_neg(i, &r));
    expect_values("neg int64", r, TL_I64, 1, s4, (double[]){3, 1, -2, -5}, 0);
    tl_release(r), r = NULL;
    OK(tl_relu(i, &r));
    expect_values("relu int64", r, TL_I64, 1, s4, (double[]){0, 0, 2, 5}, 0);
    tl_release(r), r = NULL;
    OK(tl_clamp(i, true, -2, true, 3, &r));
    expect_values("clamp int64", r, TL_I64, 1, s4, (double[]){-2, -1, 2, 3}, 0);
    tl_release(r), r = NULL;
    OK(tl_clamp(i, true, -2.5, false, 0, &r));
    expect_values("clamp int64 by 2.5", r, TL_F32, 1, s4, (double[]){-2.5, -1, 2, 5}, 0);
    tl_release(r), r = NULL;
    OK(tl_pow_scalar(i, 3, &r));
    expect_values("pow_scalar int64", r, TL_I64, 1, s4, (double[]){-27, -1, 8, 125}, 0);
    tl_release(r), r = NULL;
    OK(tl_pow_scalar(i, 0.5, &r));
    expect_values("pow_scalar int64 0.5", r, TL_F32, 1, s4, (double[]){NAN, NAN, sqrt(2), sqrt(5)},
                  1e-7);
    tl_release(r), r = NULL;
    OK(tl_exp(i, &r));
    expect_values("exp int64", r, TL_F32, 1, s4, (double[]){exp(-3), exp(-1), exp(2), exp(5)},
                  1e-6);
    tl_release(r), r = NULL;
    tl_tensor *m = make(TL_I32, 1, (int64_t[]){1}, (double[]){-2147483648.0});
    OK(tl_abs(m, &r));
    expect_values("abs INT32_MIN wraps", r, TL_I32, 1, (int64_t[]){1}, (double[]){-2147483648.0},
                  0);
    tl_release(r), r = NULL;

    tl_release(x), tl_release(d), tl_release(i), tl_release(m);
}

/* bf16 / f16 rounding on hand-worked patterns, through casts and through arithmetic */
static void test_half(void) {
    int64_t s6[] = {6};
    /* bf16 keeps 8 significant bits: 1 + 2^-8 is half-way between 1 and 1 + 2^-7 (tie to
       even: 1.0), 1 + 3*2^-8 half-way between 1 + 2^-7 (odd) and 1 + 2^-6 (even: up) */
    tl_tensor *x =
        make(TL_F32, 1, s6,
             (double[]){1 + 0x1p-8, 1 + 3 * 0x1p-8, 1 + 0x1p-8 + 0x1p-20, NAN, -INFINITY, 3.4e38});
    tl_tensor *r = NULL;
    OK(tl_cast(x, TL_BF16, &r));
    if (r) {
        uint16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0, 0xff80, 0x7f80};
        for (int i = 0; i < 6; i++)
            if (i != 3)
                CHECK(bits16(r, i) == want[i], "bf16 %d: %04x, expected %04x", i, bits16(r, i),
                      want[i]);
        CHECK((bits16(r, 3) & 0x7f80) == 0x7f80 && (bits16(r, 3) & 0x7f), "bf16 NaN: %04x",
              bits16(r, 3));
    }
    tl_release(r), r = NULL;

    /* the same ties through bf16 arithmetic: 1 + 2^-8 and 1 + 3*2^-8 */
    int64_t s2[] = {2};
    tl_tensor *one = make(TL_BF16, 1, s2, (double[]){1, 1});
    tl_tensor *eps = make(TL_BF16, 1, s2, (double[]){0x1p-8, 3 * 0x1p-8});
    OK(tl_add(one, eps, &r));
    if (r)
        CHECK(r->dtype == TL_BF16 && bits16(r, 0) == 0x3f80 && bits16(r, 1) == 0x3f82,
              "bf16 add: %04x %04x", bits16(r, 0), bits16(r, 1));
    tl_release(r), r = NULL;

    /* f16: 65520 is half-way between 65504 and 65536 (inf): to even, inf; 65519 stays
       finite; 2^-25 is half-way between 0 and 2^-24: 0; 3*2^-25 half-way between 2^-24
       (odd) and 2^-23: 2^-23 */
    tl_tensor *h = make(TL_F32, 1, s6, (double[]){65520, 65519, 0x1p-25, 3 * 0x1p-25, NAN, -0.0});
    OK(tl_cast(h, TL_F16, &r));
    if (r) {
        uint16_t want[] = {0x7c00, 0x7bff, 0x0000, 0x0002, 0, 0x8000};
        for (int i = 0; i < 6; i++)
            if (i != 4)
                CHECK(bits16(r, i) == want[i], "f16 %d: %04x, expected %04x", i, bits16(r, i),
                      want[i]);
        CHECK((bits16(r, 4) & 0x7c00) == 0x7c00 && (bits16(r, 4) & 0x3ff), "f16 NaN: %04x",
              bits16(r, 4));
    }
    tl_release(r), r = NULL;

    /* f64 and int64 sources round once: through f32 first they would tie to 1.0 / 2^60 */
    tl_tensor *d = make(TL_F64, 1, (int64_t[]){1}, (double[]){1 + 0x1p-8 + 0x1p-30});
    OK(tl_cast(d, TL_BF16, &r));
    if (r) CHECK(bits16(r, 0) == 0x3f81, "f64 -> bf16: %04x, expected 3f81", bits16(r, 0));
    tl_release(r), r = NULL;
    tl_tensor *big = NULL;
    OK(tl_empty((int64_t[]){1}, 1, TL_I64, TL_CPU, &big));
    if (big) *(int64_t *)tl_data(big) = ((int64_t)1 << 60) + ((int64_t)1 << 52) + 1;
    OK(tl_cast(big, TL_BF16, &r));
    if (r) CHECK(bits16(r, 0) == 0x5d81, "int64 -> bf16: %04x, expected 5d81", bits16(r, 0));
    tl_release(r), r = NULL;

    /* the kernels' inline conversions agree with dtype.c: all f16, a sweep of f32 */
    int mismatches = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float a = tl_f16_load((uint16_t)b), want = tl_f16_to_f32((uint16_t)b);
        if (memcmp(&a, &want, sizeof a) != 0) mismatches++;
    }
    for (uint64_t b = 0; b <= 0xffffffffu; b += 997) {
        float f = tl_half_float_of((uint32_t)b);
        if (tl_f16_round(f) != tl_f32_to_f16(f) || tl_bf16_round(f) != tl_f32_to_bf16(f))
            mismatches++;
    }
    CHECK(mismatches == 0, "inline half conversions differ from dtype.c in %d cases", mismatches);

    tl_release(x), tl_release(one), tl_release(eps), tl_release(h), tl_release(d);
    tl_release(big);
}

static void test_cast(void) {
    int64_t s6[] = {6};
    tl_tensor *x = make(TL_F64, 1, s6, (double[]){-2.7, 2.7, NAN, 1e20, -1e20, 0.5});
    tl_tensor *r = NULL;
    OK(tl_cast(x, TL_I32, &r));
    expect_values("f64 -> int32", r, TL_I32, 1, s6,
                  (double[]){-2, 2, 0, 2147483647.0, -2147483648.0, 0}, 0);
    tl_release(r), r = NULL;
    OK(tl_cast(x, TL_I64, &r));
    expect_values("f64 -> int64", r, TL_I64, 1, s6,
                  (double[]){-2, 2, 0, 9223372036854775807.0, -9223372036854775808.0, 0}, 0);
    tl_release(r), r = NULL;
    OK(tl_cast(x, TL_BOOL, &r));
    expect_values("f64 -> bool", r, TL_BOOL, 1, s6, (double[]){1, 1, 1, 1, 1, 1}, 0);
    tl_release(r), r = NULL;
    /* every pair round-trips small integers */
    tl_tensor *v = make(TL_F32, 1, (int64_t[]){3}, (double[]){0, 1, 3});
    for (int from = 0; from < TL_DTYPE_COUNT; from++) {
        for (int to = 0; to < TL_DTYPE_COUNT; to++) {
            tl_tensor *a = NULL, *b = NULL;
            OK(tl_cast(v, (tl_dtype)from, &a));
            if (a) OK(tl_cast(a, (tl_dtype)to, &b));
            bool boolean = from == TL_BOOL || to == TL_BOOL;
            double want[] = {0, 1, boolean ? 1 : 3};
            if (b)
                expect_values(tl_dtype_name((tl_dtype)to), b, (tl_dtype)to, 1, (int64_t[]){3}, want,
                              0);
            tl_release(a), tl_release(b);
        }
    }
    /* same dtype: the input itself */
    OK(tl_cast(v, TL_F32, &r));
    CHECK(r == v, "cast to the same dtype returns the input");
    tl_release(r), r = NULL;
    OK(tl_to(v, TL_F32, TL_CPU, &r));
    CHECK(r == v, "to the same dtype and device returns the input");
    tl_release(r), r = NULL;
    OK(tl_to(v, TL_I64, TL_CPU, &r));
    expect_values("to int64", r, TL_I64, 1, (int64_t[]){3}, (double[]){0, 1, 3}, 0);
    tl_release(r), r = NULL;
    tl_release(x), tl_release(v);
}

static void test_fill_copy(void) {
    int64_t s23[] = {2, 3};
    tl_tensor *a = make(TL_F32, 2, s23, (double[]){0, 0, 0, 0, 0, 0}), *at_ = NULL, *col = NULL;
    uint64_t version = a->storage->version;
    OK(tl_transpose(a, 0, 1, &at_));
    OK(tl_select(at_, 0, 1, &col)); /* a[:, 1], stride 3 */
    OK(tl_fill_(col, tl_scalar_float(2.5)));
    expect_values("fill column", a, TL_F32, 2, s23, (double[]){0, 2.5, 0, 0, 2.5, 0}, 0);
    CHECK(a->storage->version > version, "fill_ bumps the version");

    /* copy_ broadcasts and casts: int64 [3] into a's [2, 3] */
    tl_tensor *row = make(TL_I64, 1, (int64_t[]){3}, (double[]){7, 8, 9});
    OK(tl_copy_(a, row));
    expect_values("copy broadcast", a, TL_F32, 2, s23, (double[]){7, 8, 9, 7, 8, 9}, 0);
    /* into a transposed view */
    tl_tensor *src = make(TL_F64, 2, (int64_t[]){3, 2}, (double[]){1, 2, 3, 4, 5, 6});
    OK(tl_copy_(at_, src));
    expect_values("copy transposed", a, TL_F32, 2, s23, (double[]){1, 3, 5, 2, 4, 6}, 0);

    /* overlapping: x[1..4] = x[0..3] goes through a temporary */
    tl_tensor *x = make(TL_I32, 1, (int64_t[]){5}, (double[]){0, 1, 2, 3, 4}), *lo = NULL,
              *hi = NULL;
    OK(tl_narrow(x, 0, 0, 4, &lo));
    OK(tl_narrow(x, 0, 1, 4, &hi));
    OK(tl_copy_(hi, lo));
    expect_values("copy overlapping", x, TL_I32, 1, (int64_t[]){5}, (double[]){0, 0, 1, 2, 3}, 0);
    OK(tl_copy_(x, x));
    expect_values("copy itself", x, TL_I32, 1, (int64_t[]){5}, (double[]){0, 0, 1, 2, 3}, 0);

    tl_release(a), tl_release(at_), tl_release(col), tl_release(row), tl_release(src);
    tl_release(x), tl_release(lo), tl_release(hi);
}

/* large, broadcast and strided: exercises the parallel ranges against a plain loop */
static void test_large(void) {
    int64_t rows = 317, cols = 331, shape[] = {cols, rows}, bshape[] = {cols};
    int64_t n = rows * cols;
    double *va = malloc((size_t)n * sizeof *va), *vb = malloc((size_t)cols * sizeof *vb);
    for (int64_t i = 0; i < n; i++) va[i] = (double)(i % 1000) - 500;
    for (int64_t i = 0; i < cols; i++) vb[i] = (double)i * 0.5;
    tl_tensor *a = make(TL_F32, 2, shape, va), *at_ = NULL, *b = make(TL_F32, 1, bshape, vb);
    tl_tensor *r = NULL;
    OK(tl_transpose(a, 0, 1, &at_)); /* [rows, cols], strides [1, rows] */
    OK(tl_add(at_, b, &r));
    int bad = 0;
    if (r) {
        const float *o = tl_data(r);
        for (int64_t i = 0; i < rows && bad < 5; i++)
            for (int64_t j = 0; j < cols; j++)
                if (o[i * cols + j] != (float)(va[j * rows + i] + vb[j])) bad++;
    }
    CHECK(r && bad == 0, "large strided add: %d wrong elements", bad);
    tl_release(r), r = NULL;
    /* large contiguous bf16 multiply against the scalar conversions */
    tl_tensor *h = NULL, *h2 = NULL;
    OK(tl_cast(a, TL_BF16, &h));
    OK(tl_mul(h, h, &h2));
    bad = 0;
    if (h2) {
        const uint16_t *in = tl_data(h), *o = tl_data(h2);
        for (int64_t i = 0; i < n; i++) {
            float v = tl_bf16_to_f32(in[i]);
            if (o[i] != tl_f32_to_bf16(v * v)) bad++;
        }
    }
    CHECK(h2 && bad == 0, "large bf16 mul: %d wrong elements", bad);
    tl_release(a), tl_release(at_), tl_release(b), tl_release(h), tl_release(h2);
    free(va), free(vb);
}

static void test_errors(void) {
    int64_t s23[] = {2, 3}, s4[] = {4};
    tl_tensor *a = make(TL_F32, 2, s23, (double[]){1, 2, 3, 4, 5, 6});
    tl_tensor *b = make(TL_F32, 1, s4, (double[]){1, 2, 3, 4});
    tl_tensor *r = NULL;
    expect_error("add shapes", tl_add(a, b, &r), TL_ERR_SHAPE, "add: ");
    expect_error("exp NULL", tl_exp(NULL, &r), TL_ERR_ARGUMENT, "exp: ");
    expect_error("where cond", tl_where(a, a, a, &r), TL_ERR_DTYPE, "where: ");
    expect_error("copy_ shapes", tl_copy_(a, b), TL_ERR_SHAPE, "copy_: ");
    expect_error("cast dtype", tl_cast(a, (tl_dtype)99, &r), TL_ERR_DTYPE, "cast: ");
    CHECK(r == NULL, "no result on errors");

    /* a tensor that claims to live on cuda:0 (never touched: the check comes first) */
    tl_storage storage = *a->storage;
    storage.device = (tl_device){.type = TL_DEVICE_CUDA, .index = 0};
    tl_tensor fake = *a;
    fake.storage = &storage;
    expect_error("add devices", tl_add(a, &fake, &r), TL_ERR_DEVICE, "add: ");
    CHECK(strcmp(tl_last_error(),
                 "add: expected both tensors on the same device, got cpu and cuda:0") == 0,
          "device message: %s", tl_last_error());
    expect_error("copy_ devices", tl_copy_(a, &fake), TL_ERR_DEVICE, "copy_: ");
    CHECK(r == NULL, "no result on errors");

    /* an expanded dst would be written twice per element */
    tl_tensor *e = NULL;
    OK(tl_expand(b, (int64_t[]){3, 4}, 2, &e));
    expect_error("copy_ expanded", tl_copy_(e, b), TL_ERR_ARGUMENT, "copy_: ");
    tl_release(a), tl_release(b), tl_release(e);
}

int main(void) {
    test_binary();
    test_unary();
    test_half();
    test_cast();
    test_fill_copy();
    test_large();
    test_errors();
    if (failures) {
        printf("%d failure(s)\n", failures);
        return 1;
    }
    printf("test_elementwise: all passed\n");
    return 0;
}
