/* C unit test of the fused softmax / log_softmax backward: results against a double-precision
   reference, in place into grad and into output (and partly overlapping), strided and expanded
   operands, 0-dim and empty tensors, errors; on the CPU and, when present, on CUDA. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tlua/tlua.h"

#include "check.h"

static const tl_device CUDA0 = {.type = TL_DEVICE_CUDA, .index = 0};

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double normalish(void) { /* a sum of uniforms in [-3, 3) */
    double s = 0;
    for (int i = 0; i < 6; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        s += (double)(rng >> 11) * 0x1p-53 - 0.5;
    }
    return s;
}

/* a tensor of shape with random values, in dtype on device */
static tl_tensor *random_tensor(int ndim, const int64_t *shape, tl_dtype dtype, tl_device device) {
    tl_tensor *host = NULL, *out = NULL;
    OK(tl_empty(shape, ndim, TL_F64, TL_CPU, &host));
    if (!host) return NULL;
    double *data = tl_data(host);
    for (int64_t i = 0; i < tl_numel(host); i++) data[i] = normalish();
    OK(tl_to(host, dtype, device, &out));
    tl_release(host);
    return out;
}

/* t's elements as doubles in row-major order (malloc'd) */
static double *values(const tl_tensor *t) {
    tl_tensor *host = NULL;
    double *out = malloc(sizeof(double) * (size_t)(tl_numel(t) + 1));
    OK(tl_to((tl_tensor *)t, TL_F64, TL_CPU, &host));
    if (host) OK(tl_to_host(host, out));
    tl_release(host);
    return out;
}

/* The gradient from output y and grad g (row-major doubles of shape) along dim. */
static double *reference(const double *y, const double *g, int ndim, const int64_t *shape, int dim,
                         bool log_mode) {
    int64_t outer = 1, inner = 1, len = ndim ? shape[dim] : 1, n = 1;
    for (int d = 0; d < ndim; d++) {
        n *= shape[d];
        if (d < dim) outer *= shape[d];
        if (d > dim) inner *= shape[d];
    }
    double *out = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t first = o * len * inner + i;
            double sum = 0;
            for (int64_t r = 0; r < len; r++) {
                int64_t p = first + r * inner;
                sum += log_mode ? g[p] : g[p] * y[p];
            }
            for (int64_t r = 0; r < len; r++) {
                int64_t p = first + r * inner;
                out[p] = log_mode ? g[p] - exp(y[p]) * sum : y[p] * (g[p] - sum);
            }
        }
    return out;
}

static double tolerance(tl_dtype dtype) {
    return dtype == TL_F64 ? 1e-12 : dtype == TL_F32 ? 1e-5 : dtype == TL_F16 ? 4e-3 : 3e-2;
}

/* |got - want| <= tol (1 + |want|) everywhere, or bit for bit (as doubles) when exact */
static void compare(const char *what, const tl_tensor *got, const double *want, double tol,
                    bool exact) {
    if (!got) {
        CHECK(0, "%s: no result (%s)", what, tl_last_error());
        return;
    }
    double *v = values(got), worst = 0;
    int64_t n = tl_numel(got), bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs(v[i] - want[i]);
        if (exact ? v[i] != want[i] : !(err <= tol * (1 + fabs(want[i])))) bad++;
        if (!(err <= worst)) worst = err;
    }
    CHECK(bad == 0, "%s: %lld of %lld elements off (worst %g)", what, (long long)bad, (long long)n,
          worst);
    free(v);
}

typedef tl_status (*backward_fn)(const tl_tensor *, const tl_tensor *, int, tl_tensor **);
typedef tl_status (*into_fn)(tl_tensor *, const tl_tensor *, const tl_tensor *, int);

/* A view of base as the case wants it: transposed (first and last dims swapped) or itself. */
static tl_tensor *view_of(tl_tensor *base, bool transposed) {
    tl_tensor *out = NULL;
    if (!base) return NULL;
    if (transposed && base->ndim > 1)
        OK(tl_transpose(base, 0, base->ndim - 1, &out));
    else
        out = tl_retain(base);
    return out;
}

/* A new tensor like base (a copy of it when copy, else uninitialised), seen as the case sees
   base; *owner gets the new base, to release. */
static tl_tensor *new_view(tl_tensor *base, bool copy, bool transposed, tl_tensor **owner) {
    *owner = NULL;
    OK(copy ? tl_clone(base, owner) : tl_empty_like(base, owner));
    return view_of(*owner, transposed);
}

/* The result of y (a view of y_base) and g (of g_base) along d out of place against the
   reference, then into a fresh tensor, into grad itself and into output itself: equal to the
   out-of-place result bit for bit on the CPU (one order of summation), within the tolerance on
   CUDA (its kernels differ by geometry). */
static void check_modes(const char *what, bool log_mode, bool cpu, tl_tensor *y_base,
                        tl_tensor *g_base, tl_tensor *y, tl_tensor *g, int d, bool transposed,
                        bool expanded) {
    backward_fn backward = log_mode ? tl_log_softmax_backward : tl_softmax_backward;
    into_fn into = log_mode ? tl_log_softmax_backward_into : tl_softmax_backward_into;
    double *yv = values(y), *gv = values(g);
    double *want = reference(yv, gv, y->ndim, y->shape, d, log_mode);
    double tol = tolerance(y->dtype);
    tl_tensor *gi = NULL;
    OK(backward(g, y, d, &gi));
    compare(what, gi, want, tol, false);
    double *got = gi && cpu ? values(gi) : want;
    const double *same = cpu ? got : want;
    char label[200];

    /* into a fresh tensor of y's geometry */
    tl_tensor *fresh_base, *fresh = new_view(y_base, false, transposed, &fresh_base);
    snprintf(label, sizeof label, "%s: into a fresh tensor", what);
    OK(into(fresh, g, y, d));
    compare(label, fresh, same, tol, cpu);

    /* into grad itself (an expanded grad cannot take it) */
    if (!expanded) {
        tl_tensor *gb, *g2 = new_view(g_base, true, transposed, &gb);
        snprintf(label, sizeof label, "%s: in place into grad", what);
        OK(into(g2, g2, y, d));
        compare(label, g2, same, tol, cpu);
        tl_release(g2), tl_release(gb);
    } else {
        tl_tensor *g2 = NULL;
        OK(tl_clone(g, &g2));
        CHECK(into(g, g2, y, d) == TL_ERR_ARGUMENT, "%s: into an expanded grad", what);
        tl_release(g2);
    }

    /* into output itself, which bumps its version */
    tl_tensor *yb, *y2 = new_view(y_base, true, transposed, &yb);
    uint64_t version = yb ? yb->storage->version : 0;
    snprintf(label, sizeof label, "%s: in place into output", what);
    OK(into(y2, g, y2, d));
    compare(label, y2, same, tol, cpu);
    CHECK(yb && yb->storage->version > version, "%s: the version did not change", label);

    tl_release(y2), tl_release(yb), tl_release(fresh), tl_release(fresh_base), tl_release(gi);
    if (got != want) free(got);
    free(yv), free(gv), free(want);
}

/* One case: y = op(x) along dim of a base shape, seen through view_of; grad random, or
   expanded over dim `expand` (-1: not). The result out of place against the reference, then
   into a fresh tensor, into grad itself and into output itself. */
static void run_case(tl_device device, tl_dtype dtype, bool log_mode, int ndim,
                     const int64_t *shape, int dim, bool transposed, int expand) {
    char what[160];
    snprintf(what, sizeof what, "%s %s on %s, %d dims, dim %d%s, expand %d",
             log_mode ? "log_softmax_backward" : "softmax_backward", tl_dtype_name(dtype),
             device.type == TL_DEVICE_CUDA ? "cuda" : "cpu", ndim, dim,
             transposed ? ", transposed" : "", expand);
    tl_tensor *x = random_tensor(ndim, shape, dtype, device), *y_base = NULL, *g_base = NULL;
    OK(log_mode ? tl_log_softmax(x, dim, &y_base) : tl_softmax(x, dim, &y_base));
    if (expand >= 0) {
        int64_t small[TL_MAX_DIMS];
        memcpy(small, shape, sizeof small[0] * (size_t)ndim);
        small[expand] = 1;
        tl_tensor *s = random_tensor(ndim, small, dtype, device);
        OK(tl_expand(s, shape, ndim, &g_base));
        tl_release(s);
    } else {
        g_base = random_tensor(ndim, shape, dtype, device);
    }
    tl_tensor *y = view_of(y_base, transposed), *g = view_of(g_base, transposed);
    int d = transposed && ndim > 1 ? (dim == 0 ? ndim - 1 : dim == ndim - 1 ? 0 : dim) : dim;
    if (y && g)
        check_modes(what, log_mode, device.type == TL_DEVICE_CPU, y_base, g_base, y, g, d,
                    transposed, expand >= 0);
    else
        CHECK(0, "%s: setup failed (%s)", what, tl_last_error());
    tl_release(x), tl_release(y_base), tl_release(g_base), tl_release(y), tl_release(g);
}

static void test_cases(tl_device device) {
    const tl_dtype dtypes[] = {TL_F32, TL_F64, TL_BF16, TL_F16};
    const int64_t rows[] = {4, 7}, cube[] = {3, 5, 70}, wide[] = {2, 1500};
    for (int t = 0; t < 4; t++)
        for (int log_mode = 0; log_mode < 2; log_mode++) {
            tl_dtype dt = dtypes[t];
            for (int dim = 0; dim < 2; dim++)
                for (int tr = 0; tr < 2; tr++) {
                    run_case(device, dt, log_mode, 2, rows, dim, tr, -1);
                    run_case(device, dt, log_mode, 2, rows, dim, tr, 0);
                    run_case(device, dt, log_mode, 2, rows, dim, tr, 1);
                }
            for (int dim = 0; dim < 3; dim++) {
                run_case(device, dt, log_mode, 3, cube, dim, false, -1);
                run_case(device, dt, log_mode, 3, cube, dim, true, dim == 2 ? 0 : 2);
            }
            run_case(device, dt, log_mode, 2, wide, 1, false, -1);
            run_case(device, dt, log_mode, 2, wide, 0, true, -1);
        }
}

/* grad and grad_input in one storage, apart by one element: grad is read from a copy */
static void test_partial_overlap(void) {
    const int64_t base_shape[] = {2, 8}, shape[] = {2, 7};
    tl_tensor *base = random_tensor(2, base_shape, TL_F32, TL_CPU), *x = NULL, *y = NULL;
    tl_tensor *g = NULL, *gi = NULL, *copy = NULL, *want = NULL;
    x = random_tensor(2, shape, TL_F32, TL_CPU);
    OK(tl_softmax(x, 1, &y));
    OK(tl_narrow(base, 1, 0, 7, &g));
    OK(tl_narrow(base, 1, 1, 7, &gi));
    OK(tl_clone(g, &copy));
    OK(tl_softmax_backward(copy, y, 1, &want));
    OK(tl_softmax_backward_into(gi, g, y, 1));
    if (want && gi) {
        double *w = values(want);
        compare("softmax_backward into memory overlapping grad", gi, w, 0, true);
        free(w);
    }
    tl_release(base), tl_release(x), tl_release(y), tl_release(g), tl_release(gi);
    tl_release(copy), tl_release(want);
}

/* 0-dim (seen as [1]: the gradient is 0), empty, and grad in another dtype (cast) */
static void test_edges(void) {
    tl_tensor *x = NULL, *y = NULL, *g = NULL, *gi = NULL;
    OK(tl_full(NULL, 0, tl_scalar_float(0.75), TL_F32, TL_CPU, &x));
    OK(tl_full(NULL, 0, tl_scalar_float(-2.5), TL_F32, TL_CPU, &g));
    for (int log_mode = 0; log_mode < 2; log_mode++) {
        OK(log_mode ? tl_log_softmax(x, 0, &y) : tl_softmax(x, 0, &y));
        OK((log_mode ? tl_log_softmax_backward : tl_softmax_backward)(g, y, -1, &gi));
        const double zero = 0;
        CHECK(gi && gi->ndim == 0, "0-dim: the result is not 0-dim");
        if (gi) compare("0-dim backward", gi, &zero, 1e-7, false);
        tl_release(y), tl_release(gi), y = gi = NULL;
    }
    tl_release(x), tl_release(g), x = g = NULL;

    const int64_t empty[] = {0, 5};
    OK(tl_zeros(empty, 2, TL_F32, TL_CPU, &y));
    OK(tl_softmax_backward(y, y, 1, &gi));
    CHECK(gi && gi->ndim == 2 && gi->shape[0] == 0 && gi->shape[1] == 5, "empty: wrong shape");
    OK(tl_log_softmax_backward_into(y, y, y, 0));
    tl_release(y), tl_release(gi), y = gi = NULL;

    const int64_t shape[] = {3, 6};
    x = random_tensor(2, shape, TL_BF16, TL_CPU);
    g = random_tensor(2, shape, TL_F64, TL_CPU);
    OK(tl_softmax(x, 1, &y));
    OK(tl_softmax_backward(g, y, 1, &gi));
    if (gi && y && g) {
        CHECK(gi->dtype == TL_BF16, "a float64 grad: result dtype %s", tl_dtype_name(gi->dtype));
        tl_tensor *cast = NULL;
        OK(tl_cast(g, TL_BF16, &cast));
        double *yv = values(y), *gv = values(cast);
        double *want = reference(yv, gv, 2, shape, 1, false);
        compare("softmax_backward of a float64 grad", gi, want, tolerance(TL_BF16), false);
        free(yv), free(gv), free(want), tl_release(cast);
    }
    tl_release(x), tl_release(y), tl_release(g), tl_release(gi);
}

static void expect_error(const char *what, tl_status status, tl_status code, const char *part) {
    CHECK(status == code, "%s: status %d, expected %d", what, (int)status, (int)code);
    CHECK(status == TL_OK || strstr(tl_last_error(), part), "%s: message '%s' lacks '%s'", what,
          tl_last_error(), part);
}

static void test_errors(void) {
    const int64_t shape[] = {3, 5}, other[] = {3, 4};
    tl_tensor *y = random_tensor(2, shape, TL_F32, TL_CPU), *g = NULL, *small = NULL;
    tl_tensor *ints = NULL, *wide = NULL, *expanded = NULL, *gi = NULL;
    g = random_tensor(2, other, TL_F32, TL_CPU);
    expect_error("grad's shape", tl_softmax_backward(g, y, 1, &gi), TL_ERR_SHAPE,
                 "softmax_backward: grad of shape [3, 4] does not match output's shape [3, 5]");
    tl_release(g);
    g = random_tensor(2, shape, TL_F32, TL_CPU);
    expect_error("dim", tl_log_softmax_backward(g, y, 2, &gi), TL_ERR_INDEX,
                 "log_softmax_backward");
    OK(tl_zeros(shape, 2, TL_I32, TL_CPU, &ints));
    expect_error("integer output", tl_softmax_backward(g, ints, 1, &gi), TL_ERR_DTYPE,
                 "expected output of a floating dtype, got int32");
    expect_error("NULL grad", tl_softmax_backward(NULL, y, 1, &gi), TL_ERR_ARGUMENT, "'grad'");
    OK(tl_zeros(shape, 2, TL_F64, TL_CPU, &wide));
    expect_error("grad_input's dtype", tl_softmax_backward_into(wide, g, y, 1), TL_ERR_DTYPE,
                 "expected grad_input of output's dtype float32, got float64");
    small = random_tensor(1, shape + 1, TL_F32, TL_CPU);
    OK(tl_expand(small, shape, 2, &expanded));
    expect_error("expanded grad_input", tl_softmax_backward_into(expanded, g, y, 1),
                 TL_ERR_ARGUMENT, "grad_input of shape [3, 5] has elements that share memory");
    tl_tensor *narrow = NULL;
    OK(tl_narrow(y, 1, 0, 4, &narrow));
    expect_error("grad_input's shape", tl_log_softmax_backward_into(narrow, g, y, 1), TL_ERR_SHAPE,
                 "grad_input of shape [3, 4] does not match output's shape [3, 5]");
    if (tl_cuda_device_count() > 0) {
        tl_tensor *gc = NULL;
        OK(tl_to(g, TL_F32, CUDA0, &gc));
        expect_error("devices", tl_softmax_backward(gc, y, 1, &gi), TL_ERR_DEVICE,
                     "expected grad on output's device cpu");
        tl_release(gc);
    }
    CHECK(gi == NULL, "a failed call set its result");
    tl_release(y), tl_release(g), tl_release(small), tl_release(ints), tl_release(wide);
    tl_release(expanded), tl_release(narrow);
}

int main(void) {
    test_cases(TL_CPU);
    if (tl_cuda_device_count() > 0) test_cases(CUDA0);
    test_partial_overlap();
    test_edges();
    test_errors();
    if (failures)
        printf("%d failures of %d checks\n", failures, checks);
    else
        printf("test_softmax_backward: all %d checks passed\n", checks);
    return failures ? 1 : 0;
}
