/* The folds of scatter_reduce's kernels (prod, amax, amin), written once for the CPU kernels
   (kernels/cpu/index.c) and the CUDA kernels (kernels/cuda/index.cu): target <- fold(target,
   src). sum and mean are scatter_add's kernel (the op divides mean's sums). Floating folds in
   float (float32, bfloat16, float16) or double; NaN wins amax and amin, as torch's; integer
   products wrap (computed in uint64, the low bits kept). */
#ifndef TLUA_SCATTER_REDUCE_H
#define TLUA_SCATTER_REDUCE_H

#include <stdint.h>

#include "kernels/pointwise.h" /* TL_POINTWISE_FN */

/* tl_op_args.scalar[0] of a scatter_reduce kernel */
typedef enum tl_scatter_mode {
    TL_SCATTER_PROD = 1,
    TL_SCATTER_AMAX = 2,
    TL_SCATTER_AMIN = 3,
} tl_scatter_mode;

TL_POINTWISE_FN float tl_scatter_fold_f(int mode, float t, float s) {
    if (mode == TL_SCATTER_PROD) return t * s;
    if (s != s || t != t) return s != s ? s : t; /* NaN propagates */
    if (mode == TL_SCATTER_AMAX) return s > t ? s : t;
    return s < t ? s : t;
}
TL_POINTWISE_FN double tl_scatter_fold_d(int mode, double t, double s) {
    if (mode == TL_SCATTER_PROD) return t * s;
    if (s != s || t != t) return s != s ? s : t;
    if (mode == TL_SCATTER_AMAX) return s > t ? s : t;
    return s < t ? s : t;
}
/* int32 and int64 values as int64; the caller keeps the low 32 bits of an int32 product */
TL_POINTWISE_FN int64_t tl_scatter_fold_i(int mode, int64_t t, int64_t s) {
    if (mode == TL_SCATTER_PROD) {
        const uint64_t u = (uint64_t)t * (uint64_t)s; /* wraps */
        return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)(UINT64_MAX - u) - 1;
    }
    if (mode == TL_SCATTER_AMAX) return s > t ? s : t;
    return s < t ? s : t;
}

#endif
