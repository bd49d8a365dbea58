/* The scalar math of clip_grad_norm_multi, written once for the CPU kernel
   (kernels/cpu/clip_norm.c) and the CUDA kernels (kernels/cuda/clip_norm.cu, compiled as CUDA C++):
   which norm, the merge of partial results, the total and the coefficient as
   torch.nn.utils.clip_grad_norm_ makes them. */
#ifndef TLUA_CLIP_NORM_H
#define TLUA_CLIP_NORM_H

#include <math.h>
#include <stdbool.h>

#ifdef __CUDACC__
#define TL_CLIP_FN static __host__ __device__ __forceinline__
#else
#define TL_CLIP_FN static inline
#endif

/* The norm: sum |x| (1), sum x*x (2), max |x| (INFINITY), sum |x|^p (any other p >= 1). */
enum { TL_CLIP_NORM_ONE, TL_CLIP_NORM_TWO, TL_CLIP_NORM_INF, TL_CLIP_NORM_P };

TL_CLIP_FN int tl_clip_norm_mode(double p) {
    return p == 1.0   ? TL_CLIP_NORM_ONE
           : p == 2.0 ? TL_CLIP_NORM_TWO
           : isinf(p) ? TL_CLIP_NORM_INF
                      : TL_CLIP_NORM_P;
}

/* The larger of two |x| values with NaN propagated (the first NaN kept). */
TL_CLIP_FN double tl_clip_nan_max(double a, double b) {
    return a != a ? a : (b != b || b > a) ? b : a;
}

/* Two partial results merged: a sum, or the max for the infinity norm. */
TL_CLIP_FN double tl_clip_merge(int mode, double a, double b) {
    return mode == TL_CLIP_NORM_INF ? tl_clip_nan_max(a, b) : a + b;
}

/* From acc (the sum of |x|^p, or max |x|, over every element): *total = the norm in the total's
   dtype (float32 unless f64; held exactly in a double) and *coef = max_norm * (1 / (total +
   1e-6)) computed in that dtype, as torch 1.13 computes max_norm / (total + 1e-6) (Tensor's
   __rtruediv__ is reciprocal() * other). */
TL_CLIP_FN void tl_clip_norm_finish(double acc, int mode, double p, bool f64, double max_norm,
                                    double *total, double *coef) {
    const double norm = mode == TL_CLIP_NORM_ONE || mode == TL_CLIP_NORM_INF ? acc
                        : mode == TL_CLIP_NORM_TWO                           ? sqrt(acc)
                                                                             : pow(acc, 1.0 / p);
    if (f64) {
        const double r = 1.0 / (norm + 1e-6);
        *total = norm;
        *coef = max_norm * r;
    } else {
        const float t = (float)norm;
        const float r = 1.0f / (t + (float)1e-6);
        *total = t;
        *coef = (float)max_norm * r;
    }
}

/* Whether the grads are scaled: coef < 1 or NaN (torch multiplies by clamp(coef, max = 1), which
   leaves them as they are when coef >= 1). */
TL_CLIP_FN bool tl_clip_norm_scales(double coef) {
    return !(coef >= 1.0);
}

#endif
