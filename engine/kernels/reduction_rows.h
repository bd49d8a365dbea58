/* The value reductions' rows over one real type, included per type by kernels/reduction.h. */

/* the larger (smaller) of a and b where a NaN wins: the NaN of either side stays */
TL_FOLD_FN TL_FOLD_REAL TL_FOLD_NAME(max)(TL_FOLD_REAL a, TL_FOLD_REAL b) {
    return (b != b || b > a) ? b : a;
}
TL_FOLD_FN TL_FOLD_REAL TL_FOLD_NAME(min)(TL_FOLD_REAL a, TL_FOLD_REAL b) {
    return (b != b || b < a) ? b : a;
}

/* ---- sums ------------------------------------------------------------------------------- */
TL_FOLD(sum, , s->a += x, s->a += t->a, s->a)
TL_IFOLD(sum, , s->u += (uint64_t)x, s->u += t->u, tl_fold_wrap(s->u))
/* the sum over n (a NaN for an empty line, as 0 / 0) */
TL_FOLD(mean, , s->a += x, s->a += t->a, s->a / (double)n)

/* ---- extremes (NaN wins, as max's) -------------------------------------------------------- */
TL_FOLD(amax, s->a = -INFINITY, s->a = TL_FOLD_NAME(max)(s->a, x),
        s->a = TL_FOLD_NAME(max)(s->a, t->a), s->a)
TL_IFOLD(amax, s->v = INT64_MIN, s->v = x > s->v ? x : s->v, s->v = t->v > s->v ? t->v : s->v, s->v)

TL_FOLD(amin, s->a = INFINITY, s->a = TL_FOLD_NAME(min)(s->a, x),
        s->a = TL_FOLD_NAME(min)(s->a, t->a), s->a)
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
TL_FOLD_FN void TL_FOLD_NAME(lse_step)(TL_FOLD_STATE *s, TL_FOLD_REAL x) {
    if (x != x || s->a != s->a) {
        s->a = x + s->a, s->b = 1;
    } else if (x > s->a) {
        s->b = s->b * TL_FOLD_NAME(exp)(s->a - x) + 1;
        s->a = x;
    } else if (x == s->a) {
        s->b += 1;
    } else if (x > -INFINITY) {
        s->b += TL_FOLD_NAME(exp)(x - s->a);
    }
}
TL_FOLD_FN void TL_FOLD_NAME(lse_merge)(TL_FOLD_STATE *s, const TL_FOLD_STATE *t) {
    if (t->a != t->a || s->a != s->a) {
        s->a = s->a + t->a, s->b = 1;
    } else if (t->b == 0) {
    } else if (s->b == 0) {
        *s = *t;
    } else if (t->a > s->a) {
        s->b = s->b * TL_FOLD_NAME(exp)(s->a - t->a) + t->b;
        s->a = t->a;
    } else {
        s->b += t->a == s->a ? t->b : t->b * TL_FOLD_NAME(exp)(t->a - s->a);
    }
}
/* the sum of e^(x - m) over a run (1 where x = m, as for equal infinities), in lanes */
TL_FOLD_FN TL_FOLD_REAL TL_FOLD_NAME(lse_terms)(const TL_FOLD_REAL *xs, int k, TL_FOLD_REAL m) {
    TL_FOLD_REAL lane[TL_FOLD_LANES] = {0}, sum = 0;
    int i = 0;
    for (; i + TL_FOLD_LANES <= k; i += TL_FOLD_LANES) {
        TL_FOLD_SIMD for (int j = 0; j < TL_FOLD_LANES; j++) {
            const TL_FOLD_REAL x = xs[i + j];
            lane[j] += x == m ? 1 : TL_FOLD_NAME(exp)(x - m);
        }
    }
    for (int j = 0; j < TL_FOLD_LANES; j++) sum += lane[j];
    for (; i < k; i++) sum += xs[i] == m ? 1 : TL_FOLD_NAME(exp)(xs[i] - m);
    return sum;
}
/* k elements at once: their largest m (amax's run: a NaN wins), then the sum of e^(x - m),
   merged as one run: no branch per element, an exp per element */
TL_FOLD_FN void TL_FOLD_NAME(lse_run)(TL_FOLD_STATE *s, const TL_FOLD_REAL *xs, int k) {
    TL_FOLD_STATE t = {-INFINITY, 0, 0};
    TL_FOLD_NAME(amax_run)(&t, xs, k, 0);
    t.b = TL_FOLD_NAME(lse_terms)(xs, k, t.a);
    TL_FOLD_NAME(lse_merge)(s, &t);
}
TL_FOLD_RUNS(logsumexp, s->a = -INFINITY, TL_FOLD_NAME(lse_step)(s, x),
             TL_FOLD_NAME(lse_merge)(s, t), s->b == 0 ? -INFINITY : s->a + log(s->b),
             TL_FOLD_NAME(lse_run)(s, xs, k))

/* ---- var, std (Welford): a the count, b the mean, c the sum of squared deviations; the
   variance is c / max(0, n - p), p the correction (1: the unbiased estimate) ----------------- */
TL_FOLD_FN void TL_FOLD_NAME(welford_step)(TL_FOLD_STATE *s, TL_FOLD_REAL x) {
    s->a += 1;
    const TL_FOLD_REAL d = x - s->b;
    s->b += d / s->a;
    s->c += d * (x - s->b);
}
/* Chan's combination of two runs' (count, mean, M2): with w = t's share of the count, the mean
   moves by d w and M2 gains t's plus d^2 s.count w (one division) */
TL_FOLD_FN void TL_FOLD_NAME(welford_merge)(TL_FOLD_STATE *s, const TL_FOLD_STATE *t) {
    if (t->a == 0) return;
    if (s->a == 0) {
        *s = *t;
        return;
    }
    const TL_FOLD_REAL n = s->a + t->a, d = t->b - s->b, w = t->a / n;
    s->b += d * w;
    s->c += t->c + d * d * (s->a * w);
    s->a = n;
}
/* k elements at once: their mean and squared deviations from it in two passes (the mean by
   1 / k, a constant in the kernels' unrolled runs), then merged as one run: a division per run,
   not per element */
TL_FOLD_FN void TL_FOLD_NAME(welford_run)(TL_FOLD_STATE *s, const TL_FOLD_REAL *xs, int k) {
    TL_FOLD_STATE t = {(TL_FOLD_REAL)k, 0, 0};
    for (int i = 0; i < k; i++) t.b += xs[i];
    t.b *= 1 / t.a;
    for (int i = 0; i < k; i++) t.c += (xs[i] - t.b) * (xs[i] - t.b);
    TL_FOLD_NAME(welford_merge)(s, &t);
}
TL_FOLD_FN double TL_FOLD_NAME(variance)(const TL_FOLD_STATE *s, double correction) {
    return s->c / fmax(0.0, s->a - correction);
}
TL_FOLD_RUNS(var, , TL_FOLD_NAME(welford_step)(s, x), TL_FOLD_NAME(welford_merge)(s, t),
             TL_FOLD_NAME(variance)(s, p), TL_FOLD_NAME(welford_run)(s, xs, k))
TL_FOLD_RUNS(std, , TL_FOLD_NAME(welford_step)(s, x), TL_FOLD_NAME(welford_merge)(s, t),
             sqrt(TL_FOLD_NAME(variance)(s, p)), TL_FOLD_NAME(welford_run)(s, xs, k))

/* ---- prod: wrapping for integers (of none: 1) ----------------------------------------------- */
TL_FOLD(prod, s->a = 1, s->a *= x, s->a *= t->a, s->a)
TL_IFOLD(prod, s->u = 1, s->u *= (uint64_t)x, s->u *= t->u, tl_fold_wrap(s->u))

/* ---- norm of order p: a the running value, by p:
     inf: max |x| (of none: 0);  -inf: min |x| (of none: +inf);  0: the count of non-zero x;
     1: sum |x|;  2: sqrt(sum x^2);  else: (sum |x|^p)^(1/p), pow in double.
   A NaN element makes the result NaN (TL_FOLD_NAME(max) and TL_FOLD_NAME(min) keep it).
   ----------------- */
TL_FOLD_FN TL_FOLD_REAL TL_FOLD_NAME(norm_term)(TL_FOLD_REAL x, double p) {
    const TL_FOLD_REAL m = fabs(x);
    return isinf(p) || p == 1 ? m
           : p == 2           ? m * m
           : p == 0           ? (TL_FOLD_REAL)(x != 0)
                              : (TL_FOLD_REAL)pow((double)m, p);
}
TL_FOLD_FN TL_FOLD_REAL TL_FOLD_NAME(norm_add)(TL_FOLD_REAL a, TL_FOLD_REAL b, double p) {
    return p == INFINITY    ? TL_FOLD_NAME(max)(a, b)
           : p == -INFINITY ? TL_FOLD_NAME(min)(a, b)
                            : a + b;
}
TL_FOLD_FN double TL_FOLD_NAME(norm_end)(TL_FOLD_REAL a, double p) {
    return isinf(p) || p == 0 || p == 1 ? a : p == 2 ? sqrt(a) : pow((double)a, 1 / p);
}
TL_FOLD(norm, s->a = tl_fold_norm_start(p),
        s->a = TL_FOLD_NAME(norm_add)(s->a, TL_FOLD_NAME(norm_term)(x, p), p),
        s->a = TL_FOLD_NAME(norm_add)(s->a, t->a, p), TL_FOLD_NAME(norm_end)(s->a, p))
