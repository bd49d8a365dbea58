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
   Floating inputs fold in a real type, a, b, c as the op uses them: double (tl_fold), and in
   CUDA C++ also float (tl_ffold: the CUDA kernels fold float32, bfloat16 and float16 in float
   but for counts, as torch's kernels accumulate). Each row's math is written once, in
   kernels/reduction_rows.h, which this header includes once per real type (the float functions are
   C++ overloads of the double ones; p stays double in both, finish gives a double). Integer and
   bool inputs (for the ops whose row allows them) fold exactly: in int64 v, or in uint64 u for sums
   and products, which wrap modulo 2^64 and become two's complement int64 once, in finish (a wrap
   per step is also what GCC 12 at -O3 vectorizes wrongly). */
typedef struct tl_fold {
    double a, b, c;
} tl_fold;
#ifdef __CUDACC__
typedef struct tl_ffold {
    float a, b, c;
} tl_ffold;
#endif
typedef struct tl_ifold {
    int64_t v;
    uint64_t u;
} tl_ifold;

/* Defines tl_fold_<name>_init, _step, _merge, _finish and _run over s (TL_FOLD_STATE *),
   x (TL_FOLD_REAL), t (const TL_FOLD_STATE *), n (int64_t) and p (double). _run folds the k
   elements xs[0..k) into s, in any order (the CUDA kernels' vector loads): by `run` where a row
   has a cheaper way (TL_FOLD_RUNS), else a step each (TL_FOLD). */
#define TL_FOLD_RUNS(name, init, step, merge, finish, run)                                         \
    TL_FOLD_FN void tl_fold_##name##_init(TL_FOLD_STATE *s, double p) {                            \
        (void)p;                                                                                   \
        s->a = s->b = s->c = 0;                                                                    \
        init;                                                                                      \
    }                                                                                              \
    TL_FOLD_FN void tl_fold_##name##_step(TL_FOLD_STATE *s, TL_FOLD_REAL x, double p) {            \
        (void)p;                                                                                   \
        step;                                                                                      \
    }                                                                                              \
    TL_FOLD_FN void tl_fold_##name##_merge(TL_FOLD_STATE *s, const TL_FOLD_STATE *t, double p) {   \
        (void)p;                                                                                   \
        merge;                                                                                     \
    }                                                                                              \
    TL_FOLD_FN double tl_fold_##name##_finish(const TL_FOLD_STATE *s, int64_t n, double p) {       \
        (void)n, (void)p;                                                                          \
        return finish;                                                                             \
    }                                                                                              \
    TL_FOLD_FN void tl_fold_##name##_run(TL_FOLD_STATE *s, const TL_FOLD_REAL *xs, int k,          \
                                         double p) {                                               \
        (void)p;                                                                                   \
        run;                                                                                       \
    }
#define TL_FOLD(name, init, step, merge, finish)                                                   \
    TL_FOLD_RUNS(name, init, step, merge, finish,                                                  \
                 for (int i = 0; i < k; i++) tl_fold_##name##_step(s, xs[i], p))

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
/* norm's state of no element (kernels/reduction_rows.h): +inf for the order -inf, else 0 */
/* e^x in the fold's real type. Folding in float on a GPU it is the hardware's base-2
   exponential (__expf: a few ulp where e^x is near 1, the terms that carry a logsumexp; more
   only where e^x is far below the float sum's last bit) */
TL_FOLD_FN double tl_fold_exp(double x) {
    return exp(x);
}
#ifdef __CUDACC__
TL_FOLD_FN float tl_fold_exp(float x) {
#ifdef __CUDA_ARCH__
    return __expf(x);
#else
    return expf(x);
#endif
}
#endif
TL_FOLD_FN double tl_fold_norm_start(double p) {
    return p == -INFINITY ? INFINITY : 0;
}

/* The rows in double (and the integer rows), then, in CUDA C++, in float. */
#define TL_FOLD_STATE tl_fold
#define TL_FOLD_REAL  double
#include "kernels/reduction_rows.h"
#ifdef __CUDACC__
#undef TL_FOLD_STATE
#undef TL_FOLD_REAL
#undef TL_IFOLD
#define TL_FOLD_STATE                             tl_ffold
#define TL_FOLD_REAL                              float
#define TL_IFOLD(name, init, step, merge, finish) /* made by the first pass */
#include "kernels/reduction_rows.h"
#endif
#undef TL_FOLD_STATE
#undef TL_FOLD_REAL

#endif
