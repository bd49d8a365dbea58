/* The math of the pointwise ops (families POINTWISE, POINTWISE_BINARY and POINTWISE_BACKWARD
   in tlua/ops.def), one line per op, shared by the CPU kernels (kernels/cpu/unary.c, binary.c,
   activation_backward.c) and the CUDA kernels (kernels/cuda/unary.cu, binary.cu,
   activation_backward.cu). */
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
/* PyTorch's gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
TL_POINTWISE(gelu_tanh,
             0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x))),
             0.5 * x * (1.0 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x))))
/* x * sigmoid(x) */
TL_POINTWISE(silu, x / (1.0f + expf(-x)), x / (1.0 + exp(-x)))
TL_POINTWISE(sin, sinf(x), sin(x))
TL_POINTWISE(cos, cosf(x), cos(x))
/* the error function, 2 / sqrt(pi) times the integral of exp(-t^2) from 0 to x */
TL_POINTWISE(erf, erff(x), erf(x))
/* logarithms and exponentials, reciprocals, hyperbolic and inverse trigonometric functions */
TL_POINTWISE(log1p, log1pf(x), log1p(x))
TL_POINTWISE(expm1, expm1f(x), expm1(x))
TL_POINTWISE(log2, log2f(x), log2(x))
TL_POINTWISE(log10, log10f(x), log10(x))
TL_POINTWISE(exp2, exp2f(x), exp2(x))
TL_POINTWISE(rsqrt, 1.0f / sqrtf(x), 1.0 / sqrt(x))
TL_POINTWISE(reciprocal, 1.0f / x, 1.0 / x)
TL_POINTWISE(erfc, erfcf(x), erfc(x))
TL_POINTWISE(sinh, sinhf(x), sinh(x))
TL_POINTWISE(cosh, coshf(x), cosh(x))
TL_POINTWISE(tan, tanf(x), tan(x))
TL_POINTWISE(asin, asinf(x), asin(x))
TL_POINTWISE(acos, acosf(x), acos(x))
TL_POINTWISE(atan, atanf(x), atan(x))
TL_POINTWISE(asinh, asinhf(x), asinh(x))
TL_POINTWISE(acosh, acoshf(x), acosh(x))
TL_POINTWISE(atanh, atanhf(x), atanh(x))

/* Two inputs: defines tl_pointwise_<name>_f(a, b) (float_expr) and tl_pointwise_<name>_d(a, b)
   (double_expr), the parameters named as the macro's a and b. */
#define TL_POINTWISE_2(name, a, b, float_expr, double_expr)                                        \
    TL_POINTWISE_FN float tl_pointwise_##name##_f(float a, float b) {                              \
        return float_expr;                                                                         \
    }                                                                                              \
    TL_POINTWISE_FN double tl_pointwise_##name##_d(double a, double b) {                           \
        return double_expr;                                                                        \
    }

/* y = f(a, b) (inputs broadcast), as TL_POINTWISE. */
#define TL_POINTWISE_BINARY(name, float_expr, double_expr)                                         \
    TL_POINTWISE_2(name, a, b, float_expr, double_expr)

/* true division */
TL_POINTWISE_BINARY(div, a / b, a / b)
/* the angle of the point (b, a), in (-pi, pi] */
TL_POINTWISE_BINARY(atan2, atan2f(a, b), atan2(a, b))

/* Backward kernels: out = f(g, s) where g is the gradient of the output and s the saved
   tensor (the forward's result y or input x, as the op's gradient formula saves). */
#define TL_POINTWISE_BACKWARD(name, float_expr, double_expr)                                       \
    TL_POINTWISE_2(name, g, s, float_expr, double_expr)

/* s = y: relu' = [y > 0], tanh' = 1 - y^2, sigmoid' = y (1 - y) */
TL_POINTWISE_BACKWARD(relu_backward, s > 0 ? g : 0.0f, s > 0 ? g : 0.0)
TL_POINTWISE_BACKWARD(tanh_backward, g *(1.0f - s * s), g *(1.0 - s * s))
TL_POINTWISE_BACKWARD(sigmoid_backward, g *s *(1.0f - s), g *s *(1.0 - s))
/* s = x: erf' = 2 / sqrt(pi) exp(-x^2) */
TL_POINTWISE_BACKWARD(erf_backward, g * 1.12837916709551257f * expf(-s * s),
                      g * 1.12837916709551257 * exp(-s * s))
/* s = x: gelu' = Phi(x) + x phi(x) */
TL_POINTWISE_BACKWARD(gelu_backward,
                      g *(0.5f * (1.0f + erff(s * 0.70710678118654752f)) +
                          s * 0.39894228040143268f * expf(-0.5f * s * s)),
                      g *(0.5 * (1.0 + erf(s * 0.70710678118654752)) +
                          s * 0.39894228040143268 * exp(-0.5 * s * s)))
/* s = x: gelu_tanh' = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 0.044715 x^2), with
   t = tanh(sqrt(2 / pi) (x + 0.044715 x^3)) */
TL_POINTWISE_FN float tl_gelu_tanh_derivative_f(float x) {
    const float t = tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * 0.79788456080286536f * (1.0f + 0.134145f * x * x);
}
TL_POINTWISE_FN double tl_gelu_tanh_derivative_d(double x) {
    const double t = tanh(0.79788456080286536 * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) +
           0.5 * x * (1.0 - t * t) * 0.79788456080286536 * (1.0 + 0.134145 * x * x);
}
TL_POINTWISE_BACKWARD(gelu_tanh_backward, g *tl_gelu_tanh_derivative_f(s),
                      g *tl_gelu_tanh_derivative_d(s))
/* s = x: silu' = sigmoid(x) (1 + x (1 - sigmoid(x))) */
TL_POINTWISE_BACKWARD(silu_backward,
                      g *tl_pointwise_sigmoid_f(s) *
                          (1.0f + s * (1.0f - tl_pointwise_sigmoid_f(s))),
                      g *tl_pointwise_sigmoid_d(s) * (1.0 + s * (1.0 - tl_pointwise_sigmoid_d(s))))

/* s = x: the derivatives of the functions above, times g */
TL_POINTWISE_BACKWARD(log1p_backward, g / (1.0f + s), g / (1.0 + s))
TL_POINTWISE_BACKWARD(expm1_backward, g *expf(s), g *exp(s))
TL_POINTWISE_BACKWARD(log2_backward, g / (s * 0.69314718055994531f), g / (s * 0.69314718055994531))
TL_POINTWISE_BACKWARD(log10_backward, g / (s * 2.30258509299404568f), g / (s * 2.30258509299404568))
TL_POINTWISE_BACKWARD(exp2_backward, g *exp2f(s) * 0.69314718055994531f,
                      g *exp2(s) * 0.69314718055994531)
TL_POINTWISE_BACKWARD(rsqrt_backward, -0.5f * g / (s * sqrtf(s)), -0.5 * g / (s * sqrt(s)))
TL_POINTWISE_BACKWARD(reciprocal_backward, -g / (s * s), -g / (s * s))
TL_POINTWISE_BACKWARD(erfc_backward, g * -1.12837916709551257f * expf(-s * s),
                      g * -1.12837916709551257 * exp(-s * s))
TL_POINTWISE_BACKWARD(sinh_backward, g *coshf(s), g *cosh(s))
TL_POINTWISE_BACKWARD(cosh_backward, g *sinhf(s), g *sinh(s))
TL_POINTWISE_BACKWARD(tan_backward, g *(1.0f + tanf(s) * tanf(s)), g *(1.0 + tan(s) * tan(s)))
TL_POINTWISE_BACKWARD(asin_backward, g / sqrtf(1.0f - s * s), g / sqrt(1.0 - s * s))
TL_POINTWISE_BACKWARD(acos_backward, -g / sqrtf(1.0f - s * s), -g / sqrt(1.0 - s * s))
TL_POINTWISE_BACKWARD(atan_backward, g / (1.0f + s * s), g / (1.0 + s * s))
TL_POINTWISE_BACKWARD(asinh_backward, g / sqrtf(s * s + 1.0f), g / sqrt(s * s + 1.0))
TL_POINTWISE_BACKWARD(acosh_backward, g / sqrtf(s * s - 1.0f), g / sqrt(s * s - 1.0))
TL_POINTWISE_BACKWARD(atanh_backward, g / (1.0f - s * s), g / (1.0 - s * s))

#endif
