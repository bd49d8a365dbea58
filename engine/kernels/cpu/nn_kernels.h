/* Internal to the CPU nn kernels: inline 16-bit float conversions and OpenMP helpers. */
#ifndef TLUA_CPU_NN_KERNELS_H
#define TLUA_CPU_NN_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

#ifdef _OPENMP
#include <omp.h>
static inline int nn_max_threads(void) {
    return omp_get_max_threads();
}
static inline int nn_thread_id(void) {
    return omp_get_thread_num();
}
#else
static inline int nn_max_threads(void) {
    return 1;
}
static inline int nn_thread_id(void) {
    return 0;
}
#endif

/* Elements touched before an OpenMP loop is worth its start-up. */
#define NN_PARALLEL_THRESHOLD 32768

/* Inside a macro: an OpenMP for over the next loop when work (elements touched) is large. */
#define NN_PRAGMA(x) _Pragma(#x)
#define NN_PARALLEL_FOR(work)                                                                      \
    NN_PRAGMA(omp parallel for schedule(static) if ((work) > NN_PARALLEL_THRESHOLD))

/* bf16/f16 conversions: tl_bf16_load, tl_bf16_round, tl_f16_load, tl_f16_round */
#include "kernels/cpu/convert.h"

/* Instantiates a kernel-defining macro once per floating dtype: DEFINE(suffix, T, C, LOAD,
   STORE) with T the element type, C the compute type (float for bfloat16 and float16), LOAD
   T -> C and STORE C -> T (rounded to nearest even for the 16-bit types). */
#define NN_SAME(x) (x)
#define NN_FOR_FLOATING(DEFINE)                                                                    \
    DEFINE(f32, float, float, NN_SAME, NN_SAME)                                                    \
    DEFINE(f64, double, double, NN_SAME, NN_SAME)                                                  \
    DEFINE(bf16, uint16_t, float, tl_bf16_load, tl_bf16_round)                                     \
    DEFINE(f16, uint16_t, float, tl_f16_load, tl_f16_round)

/* exp and sqrt in the compute type C of the kernels above: expf/sqrtf for float, exp/sqrt for
   double (chosen at compile time). */
#define NN_EXP(x)  _Generic((x), float : expf, double : exp)(x)
#define NN_SQRT(x) _Generic((x), float : sqrtf, double : sqrt)(x)

#endif
