/* The nn C tests' helpers: random tensors, float64 copies, error checks, finite differences. */
#ifndef TLUA_NN_TEST_SUPPORT_H
#define TLUA_NN_TEST_SUPPORT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static inline uint64_t next_random(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* uniform in [-1, 1) */
static inline double uniform(void) {
    return (double)(next_random() >> 11) / 4503599627370496.0 - 1.0;
}

static inline int64_t count_of(const int64_t *shape, int ndim) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* A CPU tensor of dtype from host values of host_dtype (float64 or int64). */
static inline tl_tensor *from_host_as(const void *values, tl_dtype host_dtype, const int64_t *shape,
                                      int ndim, tl_dtype dtype) {
    tl_tensor *wide = NULL, *t = NULL;
    OK(tl_from_host(values, shape, ndim, host_dtype, TL_CPU, &wide));
    if (dtype == host_dtype || !wide) return wide;
    OK(tl_cast(wide, dtype, &t));
    tl_release(wide);
    return t;
}

static inline tl_tensor *from_values(const double *values, const int64_t *shape, int ndim,
                                     tl_dtype dtype) {
    return from_host_as(values, TL_F64, shape, ndim, dtype);
}

/* A tensor of uniform values in [-scale, scale). */
static inline tl_tensor *random_tensor(const int64_t *shape, int ndim, tl_dtype dtype,
                                       double scale) {
    int64_t n = count_of(shape, ndim);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = scale * uniform();
    tl_tensor *t = from_values(v, shape, ndim, dtype);
    free(v);
    return t;
}

static inline tl_tensor *int_tensor(const int64_t *values, const int64_t *shape, int ndim,
                                    tl_dtype dtype) {
    return from_host_as(values, TL_I64, shape, ndim, dtype);
}

/* The elements cast to dtype (8 bytes each: float64 or int64), malloc'd, row-major. */
static inline void *to_host_as(const tl_tensor *t, tl_dtype dtype) {
    int64_t n = tl_numel(t);
    void *v = calloc((size_t)(n > 0 ? n : 1), 8);
    tl_tensor *cast = NULL;
    OK(tl_cast((tl_tensor *)t, dtype, &cast));
    if (cast) OK(tl_to_host(cast, v));
    tl_release(cast);
    return v;
}

/* The elements as doubles (malloc'd, row-major). */
static inline double *to_doubles(const tl_tensor *t) {
    return to_host_as(t, TL_F64);
}

static inline int64_t *to_ints(const tl_tensor *t) {
    return to_host_as(t, TL_I64);
}

/* max over elements of |got - want| / (1 + |want|); NaN counts as infinitely wrong */
static inline double max_error(const double *got, const double *want, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / (1 + fabs(want[i]));
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static inline void check_close(const char *what, const tl_tensor *t, const double *want,
                               double tol) {
    double *got = to_doubles(t);
    double err = max_error(got, want, tl_numel(t));
    CHECK(err <= tol, "%s: max error %g > %g", what, err, tol);
    free(got);
}

static inline bool trace_has(const tl_trace_event *events, int count, const char *op) {
    for (int i = 0; i < count; i++)
        if (strcmp(events[i].op, op) == 0) return true;
    return false;
}

static inline const char *dtype_tag(tl_dtype d) {
    return tl_dtype_name(d);
}

/* Tolerance of a forward result computed in dtype, relative to 1 + |value|. */
static inline double tolerance(tl_dtype d) {
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

static inline double loss_of(forward_fn f, const void *ctx, tl_tensor *const *inputs,
                             const double *r) {
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

static inline void gradcheck(const char *what, forward_fn f, const void *ctx,
                             tl_tensor *const *inputs, int count) {
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

#endif
