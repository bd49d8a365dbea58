/* The math of the value reductions (REDUCE_OP rows of tlua/ops.def), a few lines per op, shared by
 * the CPU kernels (kernels/cpu/reduce.c) and the CUDA kernels (kernels/cuda/reduce.cu). */
#ifndef TLUA_REDUCTION_H
#define TLUA_REDUCTION_H

#include <math.h>
#include <stdint.h>

#include "kernels/pointwise.h" /* tl_exp_f */

/* (inlined always: a run compiled into its caller, whose target may be wider, kernels/cpu/loop.h's
   TL_CPU_WIDE, vectorizes for it; a shared copy would be the baseline's) */
#ifdef __CUDACC__
#define TL_FOLD_FN static __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define TL_FOLD_FN static inline __attribute__((always_inline))
#else
#define TL_FOLD_FN static inline
#endif

/* A reduction folds the elements of a line into a state, in any grouping: init gives the state
   of no element, step adds one element x, merge adds the state t of a later run of elements
   (the kernels split lines in chunks and across threads, always merging in element order), and
   finish turns the state of the whole line (n elements) into the result. p is the op's number
   (std's correction, norm's order; 0 when it has none).
   Floating inputs fold in a real type, a, b, c as the op uses them: double (tl_fold) or float
   (tl_ffold: the CUDA kernels fold float32, bfloat16 and float16 in float but for counts, as
   torch's kernels accumulate; the CPU kernels fold a float32 line of some rows in float a block at
   a time, each block's state then merged in double). Each row's math is written once, in
   kernels/reduction_rows.h, which this header includes once per real type: the functions of
   TL_FOLD_NAME(x), tl_fold_x for double, and for float C++ overloads of them in CUDA, tl_ffold_x
   in C (no overloading); p stays double in both, finish gives a double. Integer and
   bool inputs (for the ops whose row allows them) fold exactly: in int64 v, or in uint64 u for sums
   and products, which wrap modulo 2^64 and become two's complement int64 once, in finish (a wrap
   per step is also what GCC 12 at -O3 vectorizes wrongly). */
typedef struct tl_fold {
    double a, b, c;
} tl_fold;
typedef struct tl_ffold {
    float a, b, c;
} tl_ffold;
typedef struct tl_ifold {
    int64_t v;
    uint64_t u;
} tl_ifold;

/* The name of a row's function in the real type of this pass (TL_FOLD_PREFIX: tl_fold_, or
   tl_ffold_ for the float pass in C) */
#define TL_FOLD_PASTE(a, b)  a##b
#define TL_FOLD_JOIN(a, b)   TL_FOLD_PASTE(a, b)
#define TL_FOLD_NAME(suffix) TL_FOLD_JOIN(TL_FOLD_PREFIX, suffix)

/* A run's lanes: the CPU folds a run in TL_FOLD_LANES independent partial states, element i
   into lane i mod TL_FOLD_LANES, merged at the end; the loop over the lanes of a row of elements
   (TL_FOLD_SIMD: an OpenMP simd loop) then vectorizes, where one state's chain of steps cannot
   (a float sum is not reassociated, a NaN-aware max is not a max instruction). The CUDA kernels'
   runs are a thread's few elements of a vector load: one lane, steps in order. */
#ifdef __CUDACC__
#define TL_FOLD_LANES 1
#define TL_FOLD_SIMD
#elif defined(__clang__) /* the fuzzing build: clang warns of a simd loop it leaves scalar */
#define TL_FOLD_LANES 16
#define TL_FOLD_SIMD
#else
#define TL_FOLD_LANES 16
#define TL_FOLD_SIMD  _Pragma("omp simd")
#endif

/* Defines TL_FOLD_NAME(<name>_init), _step, _merge, _finish and _run over s (TL_FOLD_STATE *),
   x (TL_FOLD_REAL), t (const TL_FOLD_STATE *), n (int64_t) and p (double). _run folds the k
   elements xs[0..k) into s, in any order (the CUDA kernels' vector loads, the CPU kernels'
   blocks of a contiguous line): by `run` where a row has a cheaper way (TL_FOLD_RUNS), else a
   step each (TL_FOLD: in lanes on the CPU, each lane's state in the arrays la, lb, lc). */
#define TL_FOLD_RUNS(name, init, step, merge, finish, run)                                         \
    TL_FOLD_FN void TL_FOLD_NAME(name##_init)(TL_FOLD_STATE * s, double p) {                       \
        (void)p;                                                                                   \
        s->a = s->b = s->c = 0;                                                                    \
        init;                                                                                      \
    }                                                                                              \
    TL_FOLD_FN void TL_FOLD_NAME(name##_step)(TL_FOLD_STATE * s, TL_FOLD_REAL x, double p) {       \
        (void)p;                                                                                   \
        step;                                                                                      \
    }                                                                                              \
    TL_FOLD_FN void TL_FOLD_NAME(name##_merge)(TL_FOLD_STATE * s, const TL_FOLD_STATE *t,          \
                                               double p) {                                         \
        (void)p;                                                                                   \
        merge;                                                                                     \
    }                                                                                              \
    TL_FOLD_FN double TL_FOLD_NAME(name##_finish)(const TL_FOLD_STATE *s, int64_t n, double p) {   \
        (void)n, (void)p;                                                                          \
        return finish;                                                                             \
    }                                                                                              \
    TL_FOLD_FN void TL_FOLD_NAME(name##_run)(TL_FOLD_STATE * s, const TL_FOLD_REAL *xs, int k,     \
                                             double p) {                                           \
        (void)p;                                                                                   \
        run;                                                                                       \
    }
#ifdef __CUDACC__
#define TL_FOLD_STEPS(name)                                                                        \
    for (int i = 0; i < k; i++) TL_FOLD_NAME(name##_step)(s, xs[i], p)
#else
#define TL_FOLD_STEPS(name)                                                                        \
    TL_FOLD_REAL la[TL_FOLD_LANES], lb[TL_FOLD_LANES], lc[TL_FOLD_LANES];                          \
    TL_FOLD_STATE u;                                                                               \
    TL_FOLD_NAME(name##_init)(&u, p);                                                              \
    for (int j = 0; j < TL_FOLD_LANES; j++) la[j] = u.a, lb[j] = u.b, lc[j] = u.c;                 \
    int i = 0;                                                                                     \
    for (; i + TL_FOLD_LANES <= k; i += TL_FOLD_LANES) {                                           \
        TL_FOLD_SIMD for (int j = 0; j < TL_FOLD_LANES; j++) {                                     \
            TL_FOLD_STATE v = {la[j], lb[j], lc[j]};                                               \
            TL_FOLD_NAME(name##_step)(&v, xs[i + j], p);                                           \
            la[j] = v.a, lb[j] = v.b, lc[j] = v.c;                                                 \
        }                                                                                          \
    }                                                                                              \
    for (int j = 0; j < TL_FOLD_LANES; j++) {                                                      \
        u = (TL_FOLD_STATE){la[j], lb[j], lc[j]};                                                  \
        TL_FOLD_NAME(name##_merge)(s, &u, p);                                                      \
    }                                                                                              \
    for (; i < k; i++) TL_FOLD_NAME(name##_step)(s, xs[i], p)
#endif
#define TL_FOLD(name, init, step, merge, finish)                                                   \
    TL_FOLD_RUNS(name, init, step, merge, finish, TL_FOLD_STEPS(name))

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
#else
/* on the CPU, a branch-free e^x, so that a run's loop of it vectorizes */
TL_FOLD_FN float tl_ffold_exp(float x) {
    return tl_exp_f(x);
}
#endif
TL_FOLD_FN double tl_fold_norm_start(double p) {
    return p == -INFINITY ? INFINITY : 0;
}

/* The rows in double (and the integer rows), then in float. */
#define TL_FOLD_STATE  tl_fold
#define TL_FOLD_REAL   double
#define TL_FOLD_PREFIX tl_fold_
#include "kernels/reduction_rows.h"
#undef TL_FOLD_STATE
#undef TL_FOLD_REAL
#undef TL_FOLD_PREFIX
#undef TL_IFOLD
#define TL_FOLD_STATE tl_ffold
#define TL_FOLD_REAL  float
#ifdef __CUDACC__
#define TL_FOLD_PREFIX tl_fold_
#else
#define TL_FOLD_PREFIX tl_ffold_
#endif
#define TL_IFOLD(name, init, step, merge, finish) /* made by the first pass */
#include "kernels/reduction_rows.h"
#undef TL_FOLD_STATE
#undef TL_FOLD_REAL
#undef TL_FOLD_PREFIX

#endif
