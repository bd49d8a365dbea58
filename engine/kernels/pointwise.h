/* The math of the pointwise ops (family POINTWISE in tlua/ops.def), one line per op, shared by
   the CPU kernels (kernels/cpu/unary.c) and the CUDA kernels (kernels/cuda/unary.cu). */
#ifndef TLUA_POINTWISE_H
#define TLUA_POINTWISE_H

#include <math.h>

#ifdef __CUDACC__
#define TL_POINTWISE_FN static __host__ __device__ __forceinline__
#else
#define TL_POINTWISE_FN static inline
#endif

/* y = f(x): float_expr computes float32, bfloat16 and float16 (loaded to float, rounded to
   nearest even on store), double_expr float64. Integer and bool inputs compute in float32
   (the op layer casts them). Defines tl_pointwise_<name>_f and tl_pointwise_<name>_d. */
#define TL_POINTWISE(name, float_expr, double_expr)                                                \
    TL_POINTWISE_FN float tl_pointwise_##name##_f(float x) {                                       \
        return float_expr;                                                                         \
    }                                                                                              \
    TL_POINTWISE_FN double tl_pointwise_##name##_d(double x) {                                     \
        return double_expr;                                                                        \
    }

TL_POINTWISE(exp, expf(x), exp(x))
TL_POINTWISE(log, logf(x), log(x))
TL_POINTWISE(sqrt, sqrtf(x), sqrt(x))
TL_POINTWISE(tanh, tanhf(x), tanh(x))
TL_POINTWISE(sigmoid, 1.0f / (1.0f + expf(-x)), 1.0 / (1.0 + exp(-x)))
/* x * Phi(x), the exact (erf) form */
TL_POINTWISE(gelu, 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)),
             0.5 * x * (1.0 + erf(x * 0.70710678118654752)))
/* x * sigmoid(x) */
TL_POINTWISE(silu, x / (1.0f + expf(-x)), x / (1.0 + exp(-x)))
TL_POINTWISE(sin, sinf(x), sin(x))
TL_POINTWISE(cos, cosf(x), cos(x))

#endif
