/* C unit test of matmul and tl_gemm: results against a float64 triple loop for plain,
   transposed, batched, broadcast and 1-D operands; 16-bit GEMMs; errors; the trace. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm.h"
#include "tlua/tlua.h"

#include "check.h"

static double get(const tl_tensor *t, const int64_t *index) {
    tl_scalar v = tl_scalar_float(NAN);
    tl_get(t, index, &v);
    return tl_scalar_to_double(v);
}

static tl_tensor *randn(tl_dtype dtype, int ndim, const int64_t *shape) {
    tl_tensor *t = NULL;
    OK(tl_randn(shape, ndim, dtype, TL_CPU, &t));
    return t;
}
#define RANDN(dtype, ...)                                                                          \
    randn(dtype, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                        \
          (int64_t[]){__VA_ARGS__})

/* torch.matmul by definition, in float64, through tl_get: one element of a @ b. */
static double reference(const tl_tensor *a, const tl_tensor *b, const int64_t *out_index,
                        int out_ndim) {
    /* split the output index into batch, row and column as matmul lays them out */
    int nbatch = out_ndim - (a->ndim > 1) - (b->ndim > 1);
    int64_t row = a->ndim > 1 ? out_index[nbatch] : 0;
    int64_t col = b->ndim > 1 ? out_index[out_ndim - 1] : 0;
    int64_t k = a->shape[a->ndim - 1];
    int64_t ia[TL_MAX_DIMS], ib[TL_MAX_DIMS];
    int na = a->ndim > 2 ? a->ndim - 2 : 0, nb = b->ndim > 2 ? b->ndim - 2 : 0;
    for (int i = 0; i < na; i++) {
        int64_t v = out_index[nbatch - na + i];
        ia[i] = a->shape[i] == 1 ? 0 : v;
    }
    for (int i = 0; i < nb; i++) {
        int64_t v = out_index[nbatch - nb + i];
        ib[i] = b->shape[i] == 1 ? 0 : v;
    }
    double sum = 0;
    for (int64_t j = 0; j < k; j++) {
        if (a->ndim == 1)
            ia[0] = j;
        else
            ia[na] = row, ia[na + 1] = j;
        if (b->ndim == 1)
            ib[0] = j;
        else
            ib[nb] = j, ib[nb + 1] = col;
        sum += get(a, ia) * get(b, ib);
    }
    return sum;
}

/* Checks out = a @ b element by element; tol is relative to the sum of |terms|. */
static void check_against_reference(const char *what, const tl_tensor *a, const tl_tensor *b,
                                    const tl_tensor *out, double tol) {
    int64_t n = tl_numel(out), index[TL_MAX_DIMS] = {0};
    double worst = 0;
    for (int64_t e = 0; e < n; e++) {
        double want = reference(a, b, index, out->ndim), got = get(out, index);
        double err = fabs(got - want) / (1 + fabs(want));
        if (!(err <= worst)) worst = err;
        for (int d = out->ndim - 1; d >= 0; d--) {
            if (++index[d] < out->shape[d]) break;
            index[d] = 0;
        }
    }
    CHECK(worst <= tol, "%s: error %g > %g", what, worst, tol);
}

static void expect_shape(const char *what, const tl_tensor *t, int ndim, const int64_t *shape) {
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    char buf[128];
    CHECK(same, "%s: got shape %s", what, tl_shape_str(t, buf, sizeof buf));
}

/* a @ b against the reference; also checks the result shape and that exactly
   `gemm_runs` kernels ran (1: the operands were read in place, no copy). */
static void check_matmul(const char *what, tl_tensor *a, tl_tensor *b, int ndim,
                         const int64_t *shape, int kernel_runs) {
    tl_tensor *out = NULL;
    tl_trace_event *events = NULL;
    int count = 0;
    tl_trace_begin();
    tl_status status = tl_matmul(a, b, &out);
    OK(tl_trace_end(&events, &count));
    CHECK(status == TL_OK, "%s: %s", what, tl_last_error());
    if (status == TL_OK) {
        expect_shape(what, out, ndim, shape);
        double tol = a->dtype == TL_F64 ? 1e-12 : 1e-5;
        check_against_reference(what, a, b, out, tol);
        if (kernel_runs > 0)
            CHECK(count == kernel_runs, "%s: %d kernels ran, expected %d (first %s)", what, count,
                  kernel_runs, count ? events[0].kernel : "none");
    }
    free(events);
    tl_release(out);
}

static void test_shapes(tl_dtype dtype) {
    tl_tensor *a = RANDN(dtype, 5, 7), *b = RANDN(dtype, 7, 3);
    check_matmul("2-D", a, b, 2, (int64_t[]){5, 3}, 1);

    /* transposed views go to GEMM as they are */
    tl_tensor *at_base = RANDN(dtype, 7, 5), *bt_base = RANDN(dtype, 3, 7), *at, *bt;
    OK(tl_transpose(at_base, 0, 1, &at));
    OK(tl_transpose(bt_base, 0, 1, &bt));
    check_matmul("a transposed", at, b, 2, (int64_t[]){5, 3}, 1);
    check_matmul("b transposed", a, bt, 2, (int64_t[]){5, 3}, 1);
    check_matmul("both transposed", at, bt, 2, (int64_t[]){5, 3}, 1);

    /* a column block of a wider matrix: row stride 10 */
    tl_tensor *wide = RANDN(dtype, 5, 10), *slice;
    OK(tl_narrow(wide, 1, 2, 7, &slice));
    check_matmul("narrowed", slice, b, 2, (int64_t[]){5, 3}, 1);

    /* a broadcast column (stride 0) cannot be read by BLAS: one copy, then GEMM */
    tl_tensor *column = RANDN(dtype, 5, 1), *expanded;
    OK(tl_expand(column, (int64_t[]){5, 7}, 2, &expanded));
    check_matmul("expanded column", expanded, b, 2, (int64_t[]){5, 3}, 0);

    tl_tensor *v7 = RANDN(dtype, 7), *w7 = RANDN(dtype, 7);
    check_matmul("dot", v7, w7, 0, NULL, 1);
    check_matmul("vector @ matrix", v7, b, 1, (int64_t[]){3}, 1);
    check_matmul("matrix @ vector", a, v7, 1, (int64_t[]){5}, 1);
    tl_tensor *v7_wide = RANDN(dtype, 14), *pair, *every_other;
    OK(tl_view(v7_wide, (int64_t[]){7, 2}, 2, &pair));
    OK(tl_select(pair, 1, 0, &every_other)); /* stride 2 */
    check_matmul("strided dot", every_other, w7, 0, NULL, 1);

    tl_tensor *a3 = RANDN(dtype, 4, 5, 7), *b3 = RANDN(dtype, 4, 7, 3);
    check_matmul("batched", a3, b3, 3, (int64_t[]){4, 5, 3}, 1);
    check_matmul("batched @ 2-D (folded)", a3, b, 3, (int64_t[]){4, 5, 3}, 1);
    check_matmul("2-D @ batched (stride 0)", a, b3, 3, (int64_t[]){4, 5, 3}, 1);
    check_matmul("batched @ vector", a3, v7, 2, (int64_t[]){4, 5}, 1);
    check_matmul("vector @ batched", v7, b3, 2, (int64_t[]){4, 3}, 1);

    tl_tensor *a4 = RANDN(dtype, 2, 1, 5, 7), *b4 = RANDN(dtype, 3, 7, 4);
    check_matmul("broadcast batch", a4, b4, 4, (int64_t[]){2, 3, 5, 4}, 0);

    /* batches of a permuted tensor: batch stride 7, row stride 28, no copy */
    tl_tensor *p_base = RANDN(dtype, 5, 4, 7), *permuted;
    OK(tl_permute(p_base, (int[]){1, 0, 2}, 3, &permuted));
    check_matmul("permuted batch", permuted, b3, 3, (int64_t[]){4, 5, 3}, 1);
    /* two batch dims that no single stride walks: a copy */
    tl_tensor *q_base = RANDN(dtype, 3, 2, 5, 7), *swapped, *b23 = RANDN(dtype, 2, 3, 7, 4);
    OK(tl_permute(q_base, (int[]){1, 0, 2, 3}, 4, &swapped));
    check_matmul("unmergeable batch", swapped, b23, 4, (int64_t[]){2, 3, 5, 4}, 0);
    /* a transposed batched operand */
    tl_tensor *bt3_base = RANDN(dtype, 4, 3, 7), *bt3;
    OK(tl_transpose(bt3_base, 1, 2, &bt3));
    check_matmul("batched transposed", a3, bt3, 3, (int64_t[]){4, 5, 3}, 1);

    /* empty sizes: k = 0 gives zeros, m = 0 an empty result */
    tl_tensor *a_k0 = RANDN(dtype, 3, 0), *b_k0 = RANDN(dtype, 0, 4);
    check_matmul("k = 0", a_k0, b_k0, 2, (int64_t[]){3, 4}, 1);
    tl_tensor *a_m0 = RANDN(dtype, 0, 7);
    check_matmul("m = 0", a_m0, b, 2, (int64_t[]){0, 3}, 0);

    tl_tensor *big_a = RANDN(dtype, 67, 129), *big_b = RANDN(dtype, 129, 45);
    check_matmul("67x129x45", big_a, big_b, 2, (int64_t[]){67, 45}, 1);

    tl_tensor *all[] = {a,        b,        at_base, bt_base, at,       bt,     wide,        slice,
                        column,   expanded, v7,      w7,      v7_wide,  pair,   every_other, a3,
                        b3,       a4,       b4,      p_base,  permuted, q_base, swapped,     b23,
                        bt3_base, bt3,      a_k0,    b_k0,    a_m0,     big_a,  big_b};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tl_release(all[i]);
}

/* 16-bit matmul: float32 compute, one rounding at the end. */
static void test_half(tl_dtype dtype) {
    int64_t sa[2] = {9, 33}, sb[2] = {33, 6};
    tl_tensor *fa = RANDN(TL_F32, 9, 33), *fb = RANDN(TL_F32, 33, 6), *a = NULL, *b = NULL;
    OK(tl_empty(sa, 2, dtype, TL_CPU, &a));
    OK(tl_empty(sb, 2, dtype, TL_CPU, &b));
    OK(tl_copy_(a, fa));
    OK(tl_copy_(b, fb));
    tl_tensor *out = NULL;
    OK(tl_matmul(a, b, &out));
    if (out) {
        CHECK(out->dtype == dtype, "half matmul gives %s", tl_dtype_name(out->dtype));
        double eps = dtype == TL_BF16 ? 0x1p-8 : 0x1p-11, worst = 0;
        for (int64_t i = 0; i < 9; i++)
            for (int64_t j = 0; j < 6; j++) {
                double want = reference(a, b, (int64_t[]){i, j}, 2);
                double got = get(out, (int64_t[]){i, j});
                double err = fabs(got - want) / (fabs(want) + 1e-3);
                if (!(err <= worst)) worst = err;
            }
        CHECK(worst <= 1.01 * eps, "%s matmul: relative error %g > %g", tl_dtype_name(dtype), worst,
              eps);
    }
    tl_release(fa), tl_release(fb), tl_release(a), tl_release(b), tl_release(out);
}

static void expect_error(const char *what, tl_status status, tl_status expected,
                         const char *message) {
    CHECK(status == expected, "%s: status %d, expected %d (%s)", what, status, expected,
          tl_last_error());
    if (message)
        CHECK(strcmp(tl_last_error(), message) == 0, "%s: message \"%s\", expected \"%s\"", what,
              tl_last_error(), message);
}

static void test_errors(void) {
    tl_tensor *a = RANDN(TL_F32, 2, 3), *b = RANDN(TL_F32, 4, 5), *out = NULL;
    expect_error("size mismatch", tl_matmul(a, b, &out), TL_ERR_SHAPE,
                 "matmul: size mismatch, got [2, 3] @ [4, 5] (dim 2 of the first is 3, dim 1 "
                 "of the second is 4)");
    tl_tensor *v = RANDN(TL_F32, 4);
    expect_error("vector mismatch", tl_matmul(a, v, &out), TL_ERR_SHAPE,
                 "matmul: size mismatch, got [2, 3] @ [4] (dim 2 of the first is 3, dim 1 of "
                 "the second is 4)");
    tl_tensor *d = RANDN(TL_F64, 3, 2);
    expect_error("dtype mismatch", tl_matmul(a, d, &out), TL_ERR_DTYPE,
                 "matmul: expected both arguments of one dtype, got float32 and float64");
    tl_tensor *i1 = NULL, *i2 = NULL;
    OK(tl_zeros((int64_t[]){2, 2}, 2, TL_I32, TL_CPU, &i1));
    OK(tl_zeros((int64_t[]){2, 2}, 2, TL_I32, TL_CPU, &i2));
    expect_error("integers", tl_matmul(i1, i2, &out), TL_ERR_DTYPE,
                 "matmul: expected a floating dtype, got int32");
    tl_tensor *s = NULL;
    OK(tl_full(NULL, 0, tl_scalar_float(2), TL_F32, TL_CPU, &s));
    expect_error("0-dim", tl_matmul(s, a, &out), TL_ERR_SHAPE, NULL);
    tl_tensor *x = RANDN(TL_F32, 2, 2, 3), *y = RANDN(TL_F32, 3, 3, 4);
    expect_error("batch broadcast", tl_matmul(x, y, &out), TL_ERR_SHAPE, NULL);
    CHECK(out == NULL, "a failed matmul wrote its output");

    /* tl_gemm validates before it runs */
    float buf[16] = {0};
    GemmParams p = {.m = 2,
                    .n = 2,
                    .k = 2,
                    .alpha = 1,
                    .lda = 1,
                    .ldb = 2,
                    .ldc = 2,
                    .input_dtype = TL_F32,
                    .output_dtype = TL_F32,
                    .compute_dtype = TL_F32};
    expect_error("lda", tl_gemm(TL_OP_matmul, TL_CPU, &p, buf, buf, buf), TL_ERR_ARGUMENT, NULL);
    p.lda = 2;
    p.k = -1;
    expect_error("negative k", tl_gemm(TL_OP_matmul, TL_CPU, &p, buf, buf, buf), TL_ERR_ARGUMENT,
                 NULL);
    p.k = 2;
    p.output_dtype = TL_BF16;
    expect_error("f32 -> bf16", tl_gemm(TL_OP_matmul, TL_CPU, &p, buf, buf, buf), TL_ERR_DTYPE,
                 NULL);
    p.input_dtype = p.output_dtype = p.compute_dtype = TL_I32;
    expect_error("int gemm", tl_gemm(TL_OP_matmul, TL_CPU, &p, buf, buf, buf), TL_ERR_DTYPE, NULL);
    p.input_dtype = p.output_dtype = p.compute_dtype = TL_F32;
    p.batch_count = 2;
    p.stride_a = p.stride_b = 4;
    p.stride_c = 2;
    expect_error("overlapping batches", tl_gemm(TL_OP_matmul, TL_CPU, &p, buf, buf, buf),
                 TL_ERR_ARGUMENT, NULL);

    tl_tensor *all[] = {a, b, v, d, i1, i2, s, x, y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tl_release(all[i]);
}

/* tl_gemm directly: bf16 in, f32 out, a broadcast A (stride 0), beta = 1 accumulates, and
   beta = 0 ignores what C held (NaN). */
static void test_gemm_direct(void) {
    enum { M = 3, N = 4, K = 5, BATCH = 2 };
    float a[M * K], b[BATCH][K * N], c[BATCH][M * N], want[BATCH][M * N];
    uint16_t a16[M * K], b16[BATCH][K * N];
    for (int i = 0; i < M * K; i++) {
        a16[i] = tl_f32_to_bf16((float)(i % 7) - 3.0f);
        a[i] = tl_bf16_to_f32(a16[i]);
    }
    for (int t = 0; t < BATCH; t++)
        for (int i = 0; i < K * N; i++) {
            b16[t][i] = tl_f32_to_bf16(0.5f * (float)((i + t) % 5) - 1.0f);
            b[t][i] = tl_bf16_to_f32(b16[t][i]);
        }
    for (int t = 0; t < BATCH; t++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int l = 0; l < K; l++) s += (double)a[i + l * M] * b[t][l + j * K];
                want[t][i + j * M] = (float)s;
                c[t][i + j * M] = NAN;
            }
    GemmParams p = {.m = M,
                    .n = N,
                    .k = K,
                    .alpha = 1,
                    .beta = 0,
                    .lda = M,
                    .ldb = K,
                    .ldc = M,
                    .batch_count = BATCH,
                    .stride_a = 0,
                    .stride_b = K * N,
                    .stride_c = M * N,
                    .input_dtype = TL_BF16,
                    .output_dtype = TL_F32,
                    .compute_dtype = TL_F32};
    OK(tl_gemm(TL_OP_matmul, TL_CPU, &p, a16, b16, c));
    double worst = 0;
    for (int t = 0; t < BATCH; t++)
        for (int i = 0; i < M * N; i++) {
            double err = fabs(c[t][i] - want[t][i]);
            if (!(err <= worst)) worst = err;
        }
    CHECK(worst < 1e-5, "bf16 -> f32 batched gemm: error %g", worst);

    /* float32, beta = 1: C += A B */
    p.input_dtype = TL_F32;
    p.beta = 1;
    OK(tl_gemm(TL_OP_matmul, TL_CPU, &p, a, b, c));
    worst = 0;
    for (int t = 0; t < BATCH; t++)
        for (int i = 0; i < M * N; i++) {
            double err = fabs(c[t][i] - 2 * want[t][i]);
            if (!(err <= worst)) worst = err;
        }
    CHECK(worst < 1e-5, "f32 gemm with beta 1: error %g", worst);
}

static void test_trace(void) {
    tl_tensor *a = RANDN(TL_F32, 2, 3), *b = RANDN(TL_F32, 3, 4), *out = NULL;
    tl_trace_event *events = NULL;
    int count = 0;
    tl_trace_begin();
    OK(tl_matmul(a, b, &out));
    OK(tl_trace_end(&events, &count));
    CHECK(count == 1, "matmul ran %d kernels", count);
    if (count == 1) {
        tl_trace_event *e = &events[0];
        CHECK(strcmp(e->op, "matmul") == 0 && strcmp(e->kernel, "cpu_gemm_f32") == 0,
              "trace: %s / %s", e->op, e->kernel);
        const int64_t want[3][2] = {{2, 4}, {2, 3}, {3, 4}};
        bool same = e->ntensors == 3;
        for (int i = 0; same && i < 3; i++)
            same =
                e->ndims[i] == 2 && e->shapes[i][0] == want[i][0] && e->shapes[i][1] == want[i][1];
        CHECK(same, "trace shapes are not [2, 4], [2, 3], [3, 4]");
    }
    free(events);
    tl_release(a), tl_release(b), tl_release(out);
}

int main(void) {
    tl_manual_seed(1);
    test_shapes(TL_F64);
    test_shapes(TL_F32);
    test_half(TL_BF16);
    test_half(TL_F16);
    test_errors();
    test_gemm_direct();
    test_trace();
    if (failures)
        printf("%d failures\n", failures);
    else
        printf("test_matmul: all passed\n");
    return failures ? 1 : 0;
}
