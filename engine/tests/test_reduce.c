/* C unit test of reductions, softmax and the random generator: results against plain loops,
   NaN, ties and empty cases, errors, and the Philox stream (seeding, a known answer). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlua/tlua.h"

#include "check.h"

static double get(const tl_tensor *t, const int64_t *index) {
    tl_scalar v = tl_scalar_float(NAN);
    tl_get(t, index, &v);
    return tl_scalar_to_double(v);
}

static double item(const tl_tensor *t) {
    tl_scalar v = tl_scalar_float(NAN);
    if (t) OK(tl_item(t, &v));
    return tl_scalar_to_double(v);
}

static tl_tensor *from_doubles(const double *values, int ndim, const int64_t *shape,
                               tl_dtype dtype) {
    tl_tensor *t = NULL;
    OK(tl_empty(shape, ndim, dtype, TL_CPU, &t));
    int64_t n = tl_numel(t), index[TL_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; e++) {
        tl_scalar v = tl_dtype_is_floating(dtype) ? tl_scalar_float(values[e])
                                                  : tl_scalar_int((int64_t)values[e]);
        OK(tl_set(t, index, v));
        for (int d = ndim - 1; d >= 0; d--) {
            if (++index[d] < shape[d]) break;
            index[d] = 0;
        }
    }
    return t;
}

static bool same_shape(const tl_tensor *t, int ndim, const int64_t *shape) {
    if (t->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d]) return false;
    return true;
}

/* ---- reductions against loops ------------------------------------------------------- */
typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN } which;

/* Loop reference of one output element: in's index with dim running. */
static void reference(const tl_tensor *in, int dim, int64_t *index, which w, double *value,
                      int64_t *arg) {
    double acc = w == R_SUM || w == R_MEAN ? 0 : NAN;
    int64_t best = -1;
    for (int64_t r = 0; r < in->shape[dim]; r++) {
        index[dim] = r;
        double v = get(in, index);
        if (w == R_SUM || w == R_MEAN) {
            acc += v;
        } else if (best < 0 || (isnan(v) && !isnan(acc)) || (w == R_MAX ? v > acc : v < acc)) {
            acc = v;
            best = r;
        }
    }
    index[dim] = 0;
    *value = w == R_MEAN ? acc / (double)in->shape[dim] : acc;
    *arg = best;
}

/* Reduces in along dim (keepdim both ways) and compares with the loop reference. */
static void check_dim(const char *what, const tl_tensor *in, int dim, which w, double tol) {
    for (int keep = 0; keep < 2; keep++) {
        tl_tensor *values = NULL, *indices = NULL, *args = NULL;
        tl_status status;
        switch (w) {
        case R_SUM:
            status = tl_sum_dim(in, dim, keep, &values);
            break;
        case R_MEAN:
            status = tl_mean_dim(in, dim, keep, &values);
            break;
        case R_MAX:
            status = tl_max_dim(in, dim, keep, &values, &indices);
            if (status == TL_OK) status = tl_argmax_dim(in, dim, keep, &args);
            break;
        default:
            status = tl_min_dim(in, dim, keep, &values, &indices);
            if (status == TL_OK) status = tl_argmin_dim(in, dim, keep, &args);
            break;
        }
        CHECK(status == TL_OK, "%s dim %d: %s", what, dim, tl_last_error());
        if (status != TL_OK) continue;
        int64_t shape[TL_MAX_DIMS];
        int ndim = 0;
        for (int d = 0; d < in->ndim; d++)
            if (d != dim || keep) shape[ndim++] = d == dim ? 1 : in->shape[d];
        CHECK(same_shape(values, ndim, shape), "%s dim %d keepdim %d: wrong shape", what, dim,
              keep);
        int64_t n = tl_numel(values), index[TL_MAX_DIMS] = {0}, out_index[TL_MAX_DIMS];
        double worst = 0;
        int64_t wrong_index = 0;
        for (int64_t e = 0; e < n; e++) {
            double want;
            int64_t want_arg;
            reference(in, dim, index, w, &want, &want_arg);
            int o = 0;
            for (int d = 0; d < in->ndim; d++)
                if (d != dim || keep) out_index[o++] = d == dim ? 0 : index[d];
            double got = get(values, out_index);
            double err =
                isnan(want) ? (isnan(got) ? 0 : INFINITY) : fabs(got - want) / (1 + fabs(want));
            if (!(err <= worst)) worst = err;
            if (indices && (int64_t)get(indices, out_index) != want_arg) wrong_index++;
            if (args && (int64_t)get(args, out_index) != want_arg) wrong_index++;
            for (int d = in->ndim - 1; d >= 0; d--) {
                if (d == dim) continue;
                if (++index[d] < in->shape[d]) break;
                index[d] = 0;
            }
        }
        CHECK(worst <= tol, "%s dim %d keepdim %d: error %g", what, dim, keep, worst);
        CHECK(wrong_index == 0, "%s dim %d keepdim %d: %lld wrong indices", what, dim, keep,
              (long long)wrong_index);
        if (indices) CHECK(indices->dtype == TL_I64, "%s: indices are not int64", what);
        tl_release(values), tl_release(indices), tl_release(args);
    }
}

static void check_all_dims(const char *what, const tl_tensor *in, double tol) {
    for (int dim = 0; dim < in->ndim; dim++) {
        check_dim(what, in, dim, R_SUM, tol);
        if (tl_dtype_is_floating(in->dtype)) check_dim(what, in, dim, R_MEAN, tol);
        check_dim(what, in, dim, R_MAX, 0);
        check_dim(what, in, dim, R_MIN, 0);
    }
}

static void test_dims(void) {
    tl_tensor *a = NULL, *t = NULL;
    OK(tl_randn((int64_t[]){3, 4, 5}, 3, TL_F64, TL_CPU, &a));
    check_all_dims("f64 [3, 4, 5]", a, 1e-14);
    OK(tl_transpose(a, 0, 2, &t)); /* non-contiguous: [5, 4, 3] */
    check_all_dims("f64 transposed", t, 1e-14);
    tl_release(a), tl_release(t);

    OK(tl_randn((int64_t[]){6, 70}, 2, TL_F32, TL_CPU, &a)); /* 70 lanes: two lane blocks */
    check_all_dims("f32 [6, 70]", a, 1e-6);
    tl_release(a);

    tl_tensor *h = NULL, *f = NULL;
    OK(tl_randn((int64_t[]){4, 9}, 2, TL_F32, TL_CPU, &f));
    OK(tl_empty((int64_t[]){4, 9}, 2, TL_BF16, TL_CPU, &h));
    OK(tl_copy_(h, f));
    check_all_dims("bf16 [4, 9]", h, 0x1p-8);
    tl_release(h);
    OK(tl_empty((int64_t[]){4, 9}, 2, TL_F16, TL_CPU, &h));
    OK(tl_copy_(h, f));
    check_all_dims("f16 [4, 9]", h, 0x1p-11);
    tl_release(h), tl_release(f);

    /* integers sum into int64, exactly */
    double iv[] = {3, -7, 2000000000, 2000000000, 5, 1, 0, -3};
    tl_tensor *i32 = from_doubles(iv, 2, (int64_t[]){2, 4}, TL_I32), *s = NULL;
    check_all_dims("int32 [2, 4]", i32, 0);
    OK(tl_sum_all(i32, &s));
    if (s) {
        CHECK(s->dtype == TL_I64 && s->ndim == 0, "sum of int32 is %s with %d dims",
              tl_dtype_name(s->dtype), s->ndim);
        CHECK(item(s) == 3999999999.0, "sum of int32: %.17g", item(s));
    }
    tl_release(s), s = NULL;
    double bv[] = {1, 0, 1, 1, 0, 1};
    tl_tensor *bools = from_doubles(bv, 1, (int64_t[]){6}, TL_BOOL);
    OK(tl_sum_all(bools, &s));
    if (s) CHECK(s->dtype == TL_I64 && item(s) == 4, "sum of bool: %g", item(s));
    tl_release(s), s = NULL;
    tl_tensor *i64 = from_doubles(iv, 2, (int64_t[]){4, 2}, TL_I64);
    check_all_dims("int64 [4, 2]", i64, 0);
    tl_release(i32), tl_release(bools), tl_release(i64);
}

/* Long dims take the split (chunked, parallel) path; the results must not change. */
static void test_large(void) {
    tl_tensor *a = NULL;
    OK(tl_randn((int64_t[]){2, 100003}, 2, TL_F64, TL_CPU, &a));
    check_dim("f64 [2, 100003]", a, 1, R_SUM, 1e-12);
    check_dim("f64 [2, 100003]", a, 1, R_MAX, 0);
    check_dim("f64 [2, 100003]", a, 1, R_MIN, 0);
    tl_tensor *t = NULL;
    OK(tl_transpose(a, 0, 1, &t)); /* [100003, 2] along dim 0: two strided lanes */
    check_dim("f64 [100003, 2]^T", t, 0, R_SUM, 1e-12);
    check_dim("f64 [100003, 2]^T", t, 0, R_MAX, 0);
    tl_release(a), tl_release(t);

    /* ties across chunk boundaries: the first index wins */
    tl_tensor *z = NULL, *arg = NULL;
    OK(tl_zeros((int64_t[]){200000}, 1, TL_F32, TL_CPU, &z));
    OK(tl_set(z, (int64_t[]){150000}, tl_scalar_float(1)));
    OK(tl_set(z, (int64_t[]){190000}, tl_scalar_float(1)));
    OK(tl_argmax_all(z, &arg));
    CHECK(item(arg) == 150000, "argmax with ties: %g", item(arg));
    tl_release(arg), arg = NULL;
    OK(tl_argmin_all(z, &arg));
    CHECK(item(arg) == 0, "argmin with ties: %g", item(arg));
    tl_release(arg), tl_release(z);

    /* a float32 sum of 1M numbers is accurate to ~1e-6 relative */
    tl_tensor *u = NULL, *s = NULL;
    int64_t n = 1 << 20;
    OK(tl_rand(&n, 1, TL_F32, TL_CPU, &u));
    OK(tl_sum_all(u, &s));
    if (u && s) {
        const float *data = tl_data(u);
        double want = 0;
        for (int64_t i = 0; i < n; i++) want += data[i];
        CHECK(fabs(item(s) - want) / want < 1e-6, "f32 sum of 1M: %.9g vs %.9g", item(s), want);
        tl_release(s), s = NULL;
        OK(tl_mean_all(u, &s));
        CHECK(fabs(item(s) - want / (double)n) < 1e-6, "f32 mean of 1M: %.9g", item(s));
    }
    tl_release(u), tl_release(s);
}

static void test_special(void) {
    /* NaN propagates through max and min, and its first index is returned */
    double nv[] = {1, NAN, 3, NAN, -2};
    tl_tensor *x = from_doubles(nv, 1, (int64_t[]){5}, TL_F32), *v = NULL, *i = NULL;
    OK(tl_max_dim(x, 0, false, &v, &i));
    CHECK(v && isnan(item(v)) && item(i) == 1, "max with NaN: %g at %g", item(v), item(i));
    tl_release(v), tl_release(i), v = i = NULL;
    OK(tl_min_all(x, &v));
    CHECK(v && isnan(item(v)), "min_all with NaN: %g", item(v));
    tl_release(v), tl_release(x), v = NULL;

    /* ties give the first index */
    double tv[] = {3, 1, 3, 1};
    x = from_doubles(tv, 1, (int64_t[]){4}, TL_F64);
    OK(tl_argmax_all(x, &i));
    CHECK(item(i) == 0, "argmax tie: %g", item(i));
    tl_release(i), i = NULL;
    OK(tl_argmin_all(x, &i));
    CHECK(item(i) == 1, "argmin tie: %g", item(i));
    tl_release(i), tl_release(x), i = NULL;

    /* argmax over all elements is a flat row-major index, also for a transposed view */
    double mv[] = {0, 5, 1, 2, 9, 3};
    tl_tensor *m = from_doubles(mv, 2, (int64_t[]){2, 3}, TL_F32), *mt = NULL;
    OK(tl_transpose(m, 0, 1, &mt)); /* [[0, 2], [5, 9], [1, 3]] */
    OK(tl_argmax_all(mt, &i));
    CHECK(item(i) == 3, "argmax of a transposed view: %g", item(i));
    tl_release(i), i = NULL;
    OK(tl_max_all(mt, &v));
    CHECK(item(v) == 9 && v->ndim == 0, "max_all: %g", item(v));
    tl_release(v), v = NULL;
    OK(tl_mean_all(mt, &v));
    CHECK(fabs(item(v) - 20.0 / 6) < 1e-6, "mean_all: %g", item(v));
    tl_release(v), tl_release(m), tl_release(mt), v = NULL;

    /* 0-dim inputs */
    tl_tensor *s = NULL;
    OK(tl_full(NULL, 0, tl_scalar_float(2.5), TL_F32, TL_CPU, &s));
    OK(tl_sum_dim(s, 0, true, &v));
    CHECK(v && v->ndim == 0 && item(v) == 2.5, "sum of a 0-dim tensor");
    tl_release(v), v = NULL;
    OK(tl_argmax_dim(s, -1, false, &i));
    CHECK(i && i->ndim == 0 && item(i) == 0, "argmax of a 0-dim tensor");
    tl_release(i), tl_release(s), i = NULL;

    /* empty tensors: sum 0, mean NaN, max an error */
    tl_tensor *e = NULL;
    OK(tl_empty((int64_t[]){0}, 1, TL_F32, TL_CPU, &e));
    OK(tl_sum_all(e, &v));
    CHECK(item(v) == 0, "sum of empty: %g", item(v));
    tl_release(v), v = NULL;
    OK(tl_mean_all(e, &v));
    CHECK(isnan(item(v)), "mean of empty: %g", item(v));
    tl_release(v), v = NULL;
    CHECK(tl_max_all(e, &v) == TL_ERR_SHAPE && v == NULL, "max of empty: %s", tl_last_error());
    CHECK(tl_argmin_all(e, &v) == TL_ERR_SHAPE, "argmin of empty: %s", tl_last_error());
    tl_release(e), e = NULL;
    OK(tl_empty((int64_t[]){2, 0}, 2, TL_F64, TL_CPU, &e));
    OK(tl_sum_dim(e, 1, false, &v));
    CHECK(v && same_shape(v, 1, (int64_t[]){2}) && get(v, (int64_t[]){1}) == 0,
          "sum over an empty dim");
    tl_release(v), v = NULL;
    CHECK(tl_max_dim(e, 1, false, &v, &i) == TL_ERR_SHAPE, "max over an empty dim: %s",
          tl_last_error());
    OK(tl_max_dim(e, 0, true, &v, &i)); /* reducing a non-empty dim of an empty tensor */
    CHECK(v && same_shape(v, 2, (int64_t[]){1, 0}), "max of [2, 0] along dim 1");
    tl_release(v), tl_release(i), tl_release(e), v = i = NULL;

    /* errors */
    tl_tensor *ints = NULL;
    OK(tl_zeros((int64_t[]){3}, 1, TL_I32, TL_CPU, &ints));
    CHECK(tl_mean_all(ints, &v) == TL_ERR_DTYPE &&
              strcmp(tl_last_error(), "mean: expected a floating dtype, got int32") == 0,
          "mean of int32: %s", tl_last_error());
    CHECK(tl_sum_dim(ints, 1, false, &v) == TL_ERR_INDEX, "sum dim out of range");
    CHECK(tl_sum_dim(ints, -2, false, &v) == TL_ERR_INDEX, "sum dim -2 of 1-D");
    OK(tl_sum_dim(ints, -1, false, &v));
    tl_release(v), tl_release(ints);
}

/* ---- softmax ---------------------------------------------------------------------- */
static void test_softmax(void) {
    double big[] = {1000, 1001};
    tl_tensor *x = from_doubles(big, 1, (int64_t[]){2}, TL_F32), *y = NULL, *ly = NULL;
    OK(tl_softmax(x, 0, &y));
    OK(tl_log_softmax(x, -1, &ly));
    double p1 = 1 / (1 + exp(1.0)), p0 = 1 - p1; /* softmax([0, 1]) */
    if (y && ly) {
        double a = get(y, (int64_t[]){0}), b = get(y, (int64_t[]){1});
        CHECK(fabs(a - p1) < 1e-6 && fabs(b - p0) < 1e-6, "softmax([1000, 1001]) = %g, %g", a, b);
        double la = get(ly, (int64_t[]){0}), lb = get(ly, (int64_t[]){1});
        CHECK(fabs(la - log(p1)) < 1e-6 && fabs(lb - log(p0)) < 1e-6,
              "log_softmax([1000, 1001]) = %g, %g", la, lb);
    }
    tl_release(x), tl_release(y), tl_release(ly), y = ly = NULL;

    /* a row of -inf gives NaN (as PyTorch); -inf next to numbers gives 0 */
    double inf_rows[] = {-INFINITY, -INFINITY, -INFINITY, 0, -INFINITY, 0};
    x = from_doubles(inf_rows, 2, (int64_t[]){2, 3}, TL_F64);
    OK(tl_softmax(x, 1, &y));
    OK(tl_log_softmax(x, 1, &ly));
    if (y && ly) {
        CHECK(isnan(get(y, (int64_t[]){0, 0})) && isnan(get(ly, (int64_t[]){0, 2})),
              "softmax of a -inf row is not NaN");
        CHECK(get(y, (int64_t[]){1, 1}) == 0 && get(y, (int64_t[]){1, 2}) == 0.5,
              "softmax of [0, -inf, 0]");
        CHECK(get(ly, (int64_t[]){1, 1}) == -INFINITY, "log_softmax of -inf");
    }
    tl_release(x), tl_release(y), tl_release(ly), y = ly = NULL;

    /* along each dim of a 3-D tensor, against loops */
    OK(tl_randn((int64_t[]){3, 4, 70}, 3, TL_F64, TL_CPU, &x));
    for (int dim = 0; dim < 3; dim++) {
        OK(tl_softmax(x, dim, &y));
        OK(tl_log_softmax(x, dim, &ly));
        if (!y || !ly) break;
        double worst = 0;
        int64_t index[3];
        for (index[0] = 0; index[0] < 3; index[0]++)
            for (index[1] = 0; index[1] < 4; index[1]++)
                for (index[2] = 0; index[2] < 70; index[2]++) {
                    int64_t j[3] = {index[0], index[1], index[2]};
                    double sum = 0;
                    for (j[dim] = 0; j[dim] < x->shape[dim]; j[dim]++) sum += exp(get(x, j));
                    double want = exp(get(x, index)) / sum;
                    double err = fabs(get(y, index) - want) +
                                 fabs(get(ly, index) - log(want)) / (1 + fabs(log(want)));
                    if (!(err <= worst)) worst = err;
                }
        CHECK(worst < 1e-12, "softmax along dim %d: error %g", dim, worst);
        tl_release(y), tl_release(ly), y = ly = NULL;
    }
    tl_release(x), x = NULL;

    /* 16-bit through float32; 0-dim gives 1; integers are refused */
    tl_tensor *f = NULL, *h = NULL;
    OK(tl_randn((int64_t[]){5, 8}, 2, TL_F32, TL_CPU, &f));
    OK(tl_empty((int64_t[]){5, 8}, 2, TL_BF16, TL_CPU, &h));
    OK(tl_copy_(h, f));
    OK(tl_softmax(h, 1, &y));
    if (y) {
        double row = 0;
        for (int64_t j = 0; j < 8; j++) row += get(y, (int64_t[]){2, j});
        CHECK(y->dtype == TL_BF16 && fabs(row - 1) < 0.02, "bf16 softmax row sums to %g", row);
    }
    tl_release(f), tl_release(h), tl_release(y), y = NULL;
    OK(tl_full(NULL, 0, tl_scalar_float(3), TL_F32, TL_CPU, &x));
    OK(tl_softmax(x, 0, &y));
    CHECK(y && y->ndim == 0 && item(y) == 1, "softmax of a 0-dim tensor");
    tl_release(x), tl_release(y), y = NULL;
    OK(tl_zeros((int64_t[]){3}, 1, TL_I64, TL_CPU, &x));
    CHECK(tl_softmax(x, 0, &y) == TL_ERR_DTYPE && y == NULL, "softmax of int64");
    tl_release(x);
}

/* ---- random ----------------------------------------------------------------------- */
static bool equal_tensors(const tl_tensor *a, const tl_tensor *b) {
    return a && b && a->dtype == b->dtype && tl_numel(a) == tl_numel(b) &&
           memcmp(tl_data(a), tl_data(b), (size_t)tl_numel(a) * tl_dtype_size(a->dtype)) == 0;
}

static void test_random(void) {
    /* Philox4x32-10 with key 0 and counter 0 gives the published answer
       6627e8d5 e169c58d bc57ac4c 9b00dbd8 (Random123's kat_vectors). */
    const uint32_t kat[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
    tl_tensor *a = NULL, *b = NULL;
    int64_t four = 4, two = 2;
    tl_manual_seed(0);
    OK(tl_rand(&four, 1, TL_F32, TL_CPU, &a));
    if (a)
        for (int j = 0; j < 4; j++) {
            double want = (double)(kat[j] >> 8) * 0x1p-24;
            CHECK(get(a, (int64_t[]){j}) == want, "rand word %d: %.9g vs %.9g", j,
                  get(a, (int64_t[]){j}), want);
        }
    tl_release(a), a = NULL;
    tl_manual_seed(0);
    OK(tl_randint(0, (int64_t)1 << 32, &two, 1, TL_I64, TL_CPU, &a));
    CHECK(a && get(a, (int64_t[]){0}) == kat[0] && get(a, (int64_t[]){1}) == kat[2],
          "randint words: %.0f %.0f", get(a, (int64_t[]){0}), get(a, (int64_t[]){1}));
    tl_release(a), a = NULL;

    /* same seed, same numbers; the next call differs */
    int64_t shape[2] = {300, 7};
    tl_dtype dtypes[] = {TL_F32, TL_F64, TL_BF16, TL_F16};
    for (int d = 0; d < 4; d++) {
        tl_manual_seed(42);
        OK(tl_randn(shape, 2, dtypes[d], TL_CPU, &a));
        tl_manual_seed(42);
        OK(tl_randn(shape, 2, dtypes[d], TL_CPU, &b));
        CHECK(equal_tensors(a, b), "randn %s: same seed, different numbers",
              tl_dtype_name(dtypes[d]));
        tl_release(b), b = NULL;
        OK(tl_randn(shape, 2, dtypes[d], TL_CPU, &b));
        CHECK(a && b && !equal_tensors(a, b), "randn %s: consecutive calls are equal",
              tl_dtype_name(dtypes[d]));
        tl_release(a), tl_release(b), a = b = NULL;
    }

    /* rand in [0, 1), randn with mean 0 and variance 1 */
    int64_t n = 200000;
    for (int d = 0; d < 4; d++) {
        OK(tl_rand(&n, 1, dtypes[d], TL_CPU, &a));
        OK(tl_randn(&n, 1, dtypes[d], TL_CPU, &b));
        if (!a || !b) break;
        double lo = 1, hi = 0, mean_u = 0, mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++) {
            double u = get(a, &i), z = get(b, &i);
            lo = u < lo ? u : lo, hi = u > hi ? u : hi;
            mean_u += u / (double)n;
            mean += z / (double)n;
            var += z * z / (double)n;
        }
        CHECK(lo >= 0 && hi < 1 && fabs(mean_u - 0.5) < 0.01, "rand %s: [%g, %g], mean %g",
              tl_dtype_name(dtypes[d]), lo, hi, mean_u);
        CHECK(fabs(mean) < 0.02 && fabs(var - 1) < 0.03, "randn %s: mean %g, variance %g",
              tl_dtype_name(dtypes[d]), mean, var);
        tl_release(a), tl_release(b), a = b = NULL;
    }

    /* randint: bounds, every value hit, float dtypes, errors */
    OK(tl_randint(-3, 4, &n, 1, TL_I32, TL_CPU, &a));
    if (a) {
        int64_t counts[7] = {0};
        bool in_range = true;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = (int64_t)get(a, &i);
            if (v < -3 || v >= 4)
                in_range = false;
            else
                counts[v + 3]++;
        }
        bool all_hit = true;
        for (int j = 0; j < 7; j++) all_hit = all_hit && counts[j] > n / 7 - 2000;
        CHECK(in_range && all_hit, "randint(-3, 4) is not uniform on [-3, 4)");
    }
    tl_release(a), a = NULL;
    OK(tl_randint(10, 12, &four, 1, TL_F32, TL_CPU, &a));
    if (a)
        for (int64_t i = 0; i < 4; i++)
            CHECK(get(a, &i) == 10 || get(a, &i) == 11, "randint float32: %g", get(a, &i));
    tl_release(a), a = NULL;
    CHECK(tl_randint(5, 5, &four, 1, TL_I64, TL_CPU, &a) == TL_ERR_ARGUMENT && a == NULL,
          "randint with high == low");
    CHECK(tl_randint(0, (int64_t)1 << 40, &four, 1, TL_I32, TL_CPU, &a) == TL_ERR_ARGUMENT,
          "randint beyond int32");
    CHECK(tl_rand(&four, 1, TL_I32, TL_CPU, &a) == TL_ERR_DTYPE, "rand of int32");

    /* randperm: a permutation, reproducible */
    int64_t m = 1000;
    tl_manual_seed(7);
    OK(tl_randperm(m, TL_I64, TL_CPU, &a));
    tl_manual_seed(7);
    OK(tl_randperm(m, TL_I32, TL_CPU, &b));
    if (a && b) {
        CHECK(a->dtype == TL_I64 && b->dtype == TL_I32, "randperm dtypes");
        bool *seen = calloc((size_t)m, 1);
        bool perm = seen != NULL, same = true, moved = false;
        for (int64_t i = 0; perm && i < m; i++) {
            int64_t v = (int64_t)get(a, &i);
            if (v < 0 || v >= m || seen[v])
                perm = false;
            else
                seen[v] = true;
            same = same && v == (int64_t)get(b, &i);
            moved = moved || v != i;
        }
        free(seen);
        CHECK(perm && same && moved, "randperm: permutation %d, reproducible %d, shuffled %d", perm,
              same, moved);
    }
    tl_release(a), tl_release(b), a = b = NULL;
    OK(tl_randperm(0, TL_I64, TL_CPU, &a));
    CHECK(a && tl_numel(a) == 0, "randperm(0)");
    tl_release(a);
}

/* cummax and cummin without indices (NULL): the values of a running max / min, as Lua computes
   them, and nothing else made */
static void test_cumulative_without_indices(void) {
    const float data[] = {3, 1, 4, 1, 5, 9, 2, 6};
    const float max_ref[] = {3, 3, 4, 4, 5, 9, 9, 9}, min_ref[] = {3, 1, 1, 1, 1, 1, 1, 1};
    const int64_t shape[] = {8};
    tl_tensor *x = NULL, *values = NULL;
    OK(tl_from_host(data, shape, 1, TL_F32, TL_CPU, &x));
    for (int which = 0; which < 2 && x; which++) {
        tl_status status =
            which == 0 ? tl_cummax(x, 0, &values, NULL) : tl_cummin(x, 0, &values, NULL);
        CHECK(status == TL_OK, "cum%s without indices: %s", which ? "min" : "max", tl_last_error());
        float got[8] = {0};
        if (status == TL_OK && tl_to_host(values, got) == TL_OK)
            for (int i = 0; i < 8; i++)
                CHECK(got[i] == (which == 0 ? max_ref : min_ref)[i], "cum%s[%d] = %g",
                      which ? "min" : "max", i, got[i]);
        tl_release(values), values = NULL;
    }
    tl_release(x);
}

int main(void) {
    tl_manual_seed(3);
    test_cumulative_without_indices();
    test_dims();
    test_large();
    test_special();
    test_softmax();
    test_random();
    if (failures)
        printf("%d failures\n", failures);
    else
        printf("test_reduce: all passed\n");
    return failures ? 1 : 0;
}
