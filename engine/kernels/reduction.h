/* The math of the value reductions (REDUCE_OP rows of tlua/ops.def), a few lines per op, shared by
 * the CPU kernels (kernels/cpu/reduce.c) and the CUDA kernels (kernels/cuda/reduce.cu). */
#ifndef TLUA_REDUCTION_H
#define TLUA_REDUCTION_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TL_FOLD_FN static __host__ __device__ __forceinline__
#else
#define TL_FOLD_FN static inline
#endif

/* A reduction folds the elements of a line into a state, in any grouping: init gives the state
   of no element, step adds one element x, merge adds the state t of a later run of elements
   (the kernels split lines in chunks and across threads, always merging in element order), and
   finish turns the state of the whole line (n elements) into the result. p is the op's number
   (std's correction, norm's order; 0 when it has none).
   Floating inputs fold in double: a, b, c as the op uses them. Integer and bool inputs (for the
   ops whose row allows them) fold exactly: in int64 v, or in uint64 u for sums and products,
   which wrap modulo 2^64 and become two's complement int64 once, in finish (a wrap per step is
   also what GCC 12 at -O3 vectorizes wrongly). */
typedef struct tl_fold {
    double a, b, c;
} tl_fold;
typedef struct tl_ifold {
    int64_t v;
    uint64_t u;
} tl_ifold;

/* Defines tl_fold_<name>_init, _step, _merge and _finish over s (tl_fold *), x (double),
   t (const tl_fold *), n (int64_t) and p (double). */
#define TL_FOLD(name, init, step, merge, finish)                                                   \
    TL_FOLD_FN void tl_fold_##name##_init(tl_fold *s, double p) {                                  \
        (void)p;                                                                                   \
        s->a = s->b = s->c = 0;                                                                    \
        init;                                                                                      \
    }                                                                                              \
    TL_FOLD_FN void tl_fold_##name##_step(tl_fold *s, double x, double p) {                        \
        (void)p;                                                                                   \
        step;                                                                                      \
    }                                                                                              \
    TL_FOLD_FN void tl_fold_##name##_merge(tl_fold *s, const tl_fold *t, double p) {               \
        (void)p;                                                                                   \
        merge;                                                                                     \
    }                                                                                              \
    TL_FOLD_FN double tl_fold_##name##_finish(const tl_fold *s, int64_t n, double p) {             \
        (void)n, (void)p;                                                                          \
        return finish;                                                                             \
    }

/* The same for integer and bool inputs, in tl_ifold (x: int64_t). */
#define TL_IFOLD(name, init, step, merge, finish)                                                  \
    TL_FOLD_FN void tl_ifold_##name##_init(tl_ifold *s) {                                          \
        s->v = 0, s->u = 0;                                                                        \
        init;                                                                                      \
    }                                                                                              \
    TL_FOLD_FN void tl_ifold_##name##_step(tl_ifold *s, int64_t x) {                               \
        step;                                                                                      \
    }                                                                                              \
    TL_FOLD_FN void tl_ifold_##name##_merge(tl_ifold *s, const tl_ifold *t) {                      \
        merge;                                                                                     \
    }                                                                                              \
    TL_FOLD_FN int64_t tl_ifold_##name##_finish(const tl_ifold *s, int64_t n) {                    \
        (void)n;                                                                                   \
        return finish;                                                                             \
    }

/* u as two's complement int64 (no implementation-defined conversion) */
TL_FOLD_FN int64_t tl_fold_wrap(uint64_t u) {
    return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(UINT64_MAX - u) - 1;
}
/* the larger (smaller) of a and b where a NaN wins: the NaN of either side stays */
TL_FOLD_FN double tl_fold_max(double a, double b) {
    return (b != b || b > a) ? b : a;
}
TL_FOLD_FN double tl_fold_min(double a, double b) {
    return (b != b || b < a) ? b : a;
}

/* ---- sums ------------------------------------------------------------------------------- */
TL_FOLD(sum, , s->a += x, s->a += t->a, s->a)
TL_IFOLD(sum, , s->u += (uint64_t)x, s->u += t->u, tl_fold_wrap(s->u))
/* the sum over n (a NaN for an empty line, as 0 / 0) */
TL_FOLD(mean, , s->a += x, s->a += t->a, s->a / (double)n)

/* ---- extremes (NaN wins, as max's) -------------------------------------------------------- */
TL_FOLD(amax, s->a = -INFINITY, s->a = tl_fold_max(s->a, x), s->a = tl_fold_max(s->a, t->a), s->a)
TL_IFOLD(amax, s->v = INT64_MIN, s->v = x > s->v ? x : s->v, s->v = t->v > s->v ? t->v : s->v, s->v)

TL_FOLD(amin, s->a = INFINITY, s->a = tl_fold_min(s->a, x), s->a = tl_fold_min(s->a, t->a), s->a)
TL_IFOLD(amin, s->v = INT64_MAX, s->v = x < s->v ? x : s->v, s->v = t->v < s->v ? t->v : s->v, s->v)

/* ---- truth: all (of none: true), any, count_nonzero; NaN is non-zero ----------------------- */
TL_FOLD(all, s->a = 1, s->a = s->a != 0 && x != 0, s->a = s->a != 0 && t->a != 0, s->a)
TL_IFOLD(all, s->v = 1, s->v = s->v && x != 0, s->v = s->v && t->v, s->v)
TL_FOLD(any, , s->a = s->a != 0 || x != 0, s->a = s->a != 0 || t->a != 0, s->a)
TL_IFOLD(any, , s->v = s->v || x != 0, s->v = s->v || t->v, s->v)
TL_FOLD(count_nonzero, , s->a += x != 0, s->a += t->a, s->a)
TL_IFOLD(count_nonzero, , s->u += x != 0, s->u += t->u, tl_fold_wrap(s->u))

/* ---- logsumexp: a the largest element so far, b the sum of exp(x - a) (0: no element) ------
   log sum exp(x) = a + log b. A NaN stays; equal infinities add exp(0) = 1. */
TL_FOLD_FN void tl_fold_lse_step(tl_fold *s, double x) {
    if (x != x || s->a != s->a) {
        s->a = x + s->a, s->b = 1;
    } else if (x > s->a) {
        s->b = s->b * exp(s->a - x) + 1;
        s->a = x;
    } else if (x == s->a) {
        s->b += 1;
    } else if (x > -INFINITY) {
        s->b += exp(x - s->a);
    }
}
TL_FOLD_FN void tl_fold_lse_merge(tl_fold *s, const tl_fold *t) {
    if (t->a != t->a || s->a != s->a) {
        s->a = s->a + t->a, s->b = 1;
    } else if (t->b == 0) {
    } else if (s->b == 0) {
        *s = *t;
    } else if (t->a > s->a) {
        s->b = s->b * exp(s->a - t->a) + t->b;
        s->a = t->a;
    } else {
        s->b += t->a == s->a ? t->b : t->b * exp(t->a - s->a);
    }
}
TL_FOLD(logsumexp, s->a = -INFINITY, tl_fold_lse_step(s, x), tl_fold_lse_merge(s, t),
        s->b == 0 ? -INFINITY : s->a + log(s->b))

/* ---- var, std (Welford): a the count, b the mean, c the sum of squared deviations; the
   variance is c / max(0, n - p), p the correction (1: the unbiased estimate) ----------------- */
TL_FOLD_FN void tl_fold_welford_step(tl_fold *s, double x) {
    s->a += 1;
    const double d = x - s->b;
    s->b += d / s->a;
    s->c += d * (x - s->b);
}
/* Chan's combination of two runs' (count, mean, M2) */
TL_FOLD_FN void tl_fold_welford_merge(tl_fold *s, const tl_fold *t) {
    if (t->a == 0) return;
    if (s->a == 0) {
        *s = *t;
        return;
    }
    const double n = s->a + t->a, d = t->b - s->b;
    s->b += d * (t->a / n);
    s->c += t->c + d * d * (s->a * t->a / n);
    s->a = n;
}
TL_FOLD_FN double tl_fold_variance(const tl_fold *s, double correction) {
    return s->c / fmax(0.0, s->a - correction);
}
TL_FOLD(var, , tl_fold_welford_step(s, x), tl_fold_welford_merge(s, t), tl_fold_variance(s, p))
TL_FOLD(std, , tl_fold_welford_step(s, x), tl_fold_welford_merge(s, t),
        sqrt(tl_fold_variance(s, p)))

/* ---- prod: wrapping for integers (of none: 1) ----------------------------------------------- */
TL_FOLD(prod, s->a = 1, s->a *= x, s->a *= t->a, s->a)
TL_IFOLD(prod, s->u = 1, s->u *= (uint64_t)x, s->u *= t->u, tl_fold_wrap(s->u))

/* ---- norm of order p: a the running value, by p:
     inf: max |x| (of none: 0);  -inf: min |x| (of none: +inf);  0: the count of non-zero x;
     1: sum |x|;  2: sqrt(sum x^2);  else: (sum |x|^p)^(1/p).
   A NaN element makes the result NaN (tl_fold_max and tl_fold_min keep it). ----------------- */
TL_FOLD_FN double tl_fold_norm_start(double p) {
    return p == -INFINITY ? INFINITY : 0;
}
TL_FOLD_FN double tl_fold_norm_term(double x, double p) {
    const double m = fabs(x);
    return isinf(p) || p == 1 ? m : p == 2 ? m * m : p == 0 ? (double)(x != 0) : pow(m, p);
}
TL_FOLD_FN double tl_fold_norm_add(double a, double b, double p) {
    return p == INFINITY ? tl_fold_max(a, b) : p == -INFINITY ? tl_fold_min(a, b) : a + b;
}
TL_FOLD_FN double tl_fold_norm_end(double a, double p) {
    return isinf(p) || p == 0 || p == 1 ? a : p == 2 ? sqrt(a) : pow(a, 1 / p);
}
TL_FOLD(norm, s->a = tl_fold_norm_start(p),
        s->a = tl_fold_norm_add(s->a, tl_fold_norm_term(x, p), p),
        s->a = tl_fold_norm_add(s->a, t->a, p), tl_fold_norm_end(s->a, p))

#endif
