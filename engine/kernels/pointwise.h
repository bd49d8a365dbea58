/* The math of the pointwise ops (families POINTWISE, POINTWISE_BINARY, POINTWISE_TERNARY and
   POINTWISE_BACKWARD in tlua/ops.def), one line per op, shared by the CPU kernels
   (kernels/cpu/unary.c, binary.c, pointwise_ternary.c, activation_backward.c) and the CUDA
   kernels (kernels/cuda/unary.cu, binary.cu, pointwise_ternary.cu, activation_backward.cu). */
#ifndef TLUA_POINTWISE_H
#define TLUA_POINTWISE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TL_POINTWISE_FN static __host__ __device__ __forceinline__
#else
#define TL_POINTWISE_FN static inline
#endif

/* Every math function takes the op's numbers p0, p1, p2 after its inputs (the row's, resolved
   by the op layer: kernels/op.h's tl_op_numbers; an op without numbers ignores them), in its
   compute type. */
#define TL_POINTWISE_NUMBERS(T)     T p0, T p1, T p2
#define TL_POINTWISE_UNUSED_NUMBERS (void)p0, (void)p1, (void)p2

/* y = f(x): float_expr computes float32, bfloat16 and float16 (loaded to float, rounded to
   nearest even on store), double_expr float64. Integer and bool inputs of a FLOAT row compute in
   float32 (the op layer casts them). Defines tl_pointwise_<name>_f and tl_pointwise_<name>_d. A
   BOOL_OUT row's expressions give 0 or 1. */
#define TL_POINTWISE(name, float_expr, double_expr)                                                \
    TL_POINTWISE_FN float tl_pointwise_##name##_f(float x, TL_POINTWISE_NUMBERS(float)) {          \
        TL_POINTWISE_UNUSED_NUMBERS;                                                               \
        return float_expr;                                                                         \
    }                                                                                              \
    TL_POINTWISE_FN double tl_pointwise_##name##_d(double x, TL_POINTWISE_NUMBERS(double)) {       \
        TL_POINTWISE_UNUSED_NUMBERS;                                                               \
        return double_expr;                                                                        \
    }

/* The integer line of an INT, BOOL_OUT or BITS row: int_expr of int64 x (and numbers p0..p2 as
   int64), for int32, int64 and bool inputs (bool as 0 or 1); int32 results wrap to 32 bits, a
   BITS row's bool results keep the low bit. Defines tl_pointwise_<name>_i. */
#define TL_POINTWISE_INT(name, int_expr)                                                           \
    TL_POINTWISE_FN int64_t tl_pointwise_##name##_i(int64_t x, TL_POINTWISE_NUMBERS(int64_t)) {    \
        TL_POINTWISE_UNUSED_NUMBERS;                                                               \
        return int_expr;                                                                           \
    }

/* ---- helpers: integer arithmetic that wraps (computed unsigned, no undefined behaviour) and
   divides with a zero divisor giving 0 (torch raises on the CPU; documented) ---- */
TL_POINTWISE_FN int64_t tl_wrap_mul(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a * (uint64_t)b);
}
TL_POINTWISE_FN int64_t tl_wrap_add(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
/* a / b toward zero (INT64_MIN / -1 wraps), a % b with a's sign */
TL_POINTWISE_FN int64_t tl_div_trunc_i(int64_t a, int64_t b) {
    return b == 0 ? 0 : b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b;
}
TL_POINTWISE_FN int64_t tl_mod_trunc_i(int64_t a, int64_t b) {
    return b == 0 || b == -1 ? 0 : a % b;
}
/* a // b toward minus infinity, and a - b (a // b): b's sign */
TL_POINTWISE_FN int64_t tl_floor_divide_i(int64_t a, int64_t b) {
    int64_t r = tl_mod_trunc_i(a, b);
    return tl_div_trunc_i(a, b) - (r != 0 && ((r < 0) != (b < 0)) ? 1 : 0);
}
TL_POINTWISE_FN int64_t tl_remainder_i(int64_t a, int64_t b) {
    int64_t r = tl_mod_trunc_i(a, b);
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

/* ---- helpers: floating ---- */
/* x rounded half to even at `decimals` digits after the point (negative: before it), as torch:
   rint(x 10^d) / 10^d, or rint(x / 10^-d) 10^-d */
TL_POINTWISE_FN float tl_round_f(float x, float decimals) {
    if (decimals == 0) return rintf(x);
    const float scale = powf(10.0f, fabsf(decimals));
    return decimals > 0 ? rintf(x * scale) / scale : rintf(x / scale) * scale;
}
TL_POINTWISE_FN double tl_round_d(double x, double decimals) {
    if (decimals == 0) return rint(x);
    const double scale = pow(10.0, fabs(decimals));
    return decimals > 0 ? rint(x * scale) / scale : rint(x / scale) * scale;
}
/* The inverse of erf on (-1, 1) (+-inf at +-1, NaN beyond): M. Giles' single-precision
   polynomial ("Approximating the erfinv function", GPU Computing Gems, 2011) as a start, then two
   Newton steps on erf(x) - y (erf' = 2 / sqrt(pi) exp(-x^2)), each doubling the correct digits. */
TL_POINTWISE_FN double tl_erfinv_d(double y) {
    if (!(y > -1.0 && y < 1.0)) return y == 1.0 ? INFINITY : y == -1.0 ? -INFINITY : NAN;
    double w = -log((1.0 - y) * (1.0 + y)), x;
    if (w < 5.0) {
        w -= 2.5;
        x = 2.81022636e-08;
        x = 3.43273939e-07 + x * w, x = -3.5233877e-06 + x * w, x = -4.39150654e-06 + x * w;
        x = 0.00021858087 + x * w, x = -0.00125372503 + x * w, x = -0.00417768164 + x * w;
        x = 0.246640727 + x * w, x = 1.50140941 + x * w;
    } else {
        w = sqrt(w) - 3.0;
        x = -0.000200214257;
        x = 0.000100950558 + x * w, x = 0.00134934322 + x * w, x = -0.00367342844 + x * w;
        x = 0.00573950773 + x * w, x = -0.0076224613 + x * w, x = 0.00943887047 + x * w;
        x = 1.00167406 + x * w, x = 2.83297682 + x * w;
    }
    x *= y;
    for (int step = 0; step < 2; step++) x -= (erf(x) - y) / (1.12837916709551257 * exp(-x * x));
    return x;
}
/* The bits of a float and back (a union: no aliasing, no call) */
TL_POINTWISE_FN uint32_t tl_float_bits(float x) {
    union {
        float f;
        uint32_t u;
    } v = {.f = x};
    return v.u;
}
TL_POINTWISE_FN float tl_bits_float(uint32_t u) {
    union {
        uint32_t u;
        float f;
    } v = {.u = u};
    return v.f;
}
/* e^x in float without a branch or a call, so that a CPU loop of it vectorizes (libm's expf is a
   call per element); CUDA device code takes expf. e^x = 2^n e^r, n = x / ln 2 rounded (adding
   1.5 * 2^23 rounds it; the sum's low bits are n), r = x - n ln 2 with ln 2 in two parts (Cody and
   Waite: n ln2_hi is exact), |r| <= ln 2 / 2, e^r = 1 + r + r^2 P(r) (Cephes' expf polynomial,
   within 1.3 ulp), times 2^n as two factors 2^(n/2) (rounded) and 2^(n - n/2), each built in the
   exponent bits of a normal float, so that the last product overflows to +inf and rounds to
   subnormals and 0 as e^x does. x is first held in [-104, 89] (beyond: 0 and +inf); a NaN stays. */
TL_POINTWISE_FN float tl_exp_f(float x) {
#ifdef __CUDA_ARCH__
    return expf(x);
#else
    const float shift = 12582912.0f;
    float c = x < -104.0f ? -104.0f : x;
    c = c > 89.0f ? 89.0f : c;
    const float t = c * 1.44269504f + shift, n = t - shift;
    const float r = (c - n * 0.693359375f) + n * 2.12194440e-4f;
    float q = 1.9875691500e-4f;
    q = q * r + 1.3981999507e-3f;
    q = q * r + 8.3334519073e-3f;
    q = q * r + 4.1665795894e-2f;
    q = q * r + 1.6666665459e-1f;
    q = q * r + 5.0000001201e-1f;
    const float e = 1.0f + r + r * r * q;
    const float half = n * 0.5f + shift; /* n / 2 rounded, + shift */
    const uint32_t n1 = tl_float_bits(half) - tl_float_bits(shift);
    const uint32_t n2 = tl_float_bits(t) - tl_float_bits(shift) - n1;
    return e * tl_bits_float((n1 + 127) << 23) * tl_bits_float((n2 + 127) << 23);
#endif
}
/* erf in float without a branch or a call (as tl_exp_f; CUDA device code takes erff), within
   2.5 ulp: for |x| < 1, x P(x^2) (P fitted to erf(x) / x, relative error 3e-8); for |x| >= 1,
   sign(x) (1 - e^(Q(|x|) - x^2)), Q fitted to log(erfc(t)) + t^2 on [1, 4] (error 1.2e-8); from
   4 on erf is 1 in float (erfc(4) = 1.5e-8, under half an ulp of 1), |x| is held at 4. Both sides
   are computed and one chosen, so a loop of it vectorizes; a NaN takes the second side and stays.
 */
TL_POINTWISE_FN float tl_erf_f(float x) {
#ifdef __CUDA_ARCH__
    return erff(x);
#else
    const float s = x * x;
    float p = -5.660121678e-4f;
    p = p * s + 4.924781155e-3f;
    p = p * s + -2.671770006e-2f;
    p = p * s + 1.128041148e-1f;
    p = p * s + -3.761235476e-1f;
    p = p * s + 1.128379107f;
    const float small = x * p;
    const float a = fabsf(x), t = a > 4.0f ? 4.0f : a;
    float q = 1.599854158e-6f;
    q = q * t + -4.529881335e-5f;
    q = q * t + 5.902095581e-4f;
    q = q * t + -4.727719351e-3f;
    q = q * t + 2.632761560e-2f;
    q = q * t + -1.099098995e-1f;
    q = q * t + 3.679867387e-1f;
    q = q * t + -1.130119801f;
    q = q * t + 2.910570474e-4f;
    const float large = copysignf(1.0f - tl_exp_f(q - t * t), x);
    return a < 1.0f ? small : large;
#endif
}
/* floor(a / b) as torch computes it (from fmod, so that a = b (a // b) + remainder holds) */
TL_POINTWISE_FN double tl_floor_divide_d(double a, double b) {
    if (b == 0) return a / b;
    const double mod = fmod(a, b);
    double div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
    if (div == 0) return copysign(0.0, a / b);
    double floored = floor(div);
    return div - floored > 0.5 ? floored + 1 : floored;
}
TL_POINTWISE_FN float tl_floor_divide_f(float a, float b) {
    if (b == 0) return a / b;
    const float mod = fmodf(a, b);
    float div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
    if (div == 0) return copysignf(0.0f, a / b);
    float floored = floorf(div);
    return div - floored > 0.5f ? floored + 1 : floored;
}
/* log(1 + exp(x)) */
TL_POINTWISE_FN float tl_softplus_f(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}
TL_POINTWISE_FN double tl_softplus_d(double x) {
    return x > 20.0 ? x : log1p(exp(x));
}
/* selu's constants (Klambauer et al. 2017) */
#define TL_SELU_ALPHA 1.6732632423543772848170429916717
#define TL_SELU_SCALE 1.0507009873554804934193349852946

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
TL_POINTWISE(erf, tl_erf_f(x), erf(x))
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
/* rounding; integers are their own floor, ceiling, ... */
TL_POINTWISE(floor, floorf(x), floor(x))
TL_POINTWISE_INT(floor, x)
TL_POINTWISE(ceil, ceilf(x), ceil(x))
TL_POINTWISE_INT(ceil, x)
TL_POINTWISE(round, tl_round_f(x, p0), tl_round_d(x, p0))
TL_POINTWISE_INT(round, x)
TL_POINTWISE(trunc, truncf(x), trunc(x))
TL_POINTWISE_INT(trunc, x)
TL_POINTWISE(frac, x - truncf(x), x - trunc(x))
/* -1, 0 or 1 (NaN gives 0, as torch); sgn is sign for real numbers */
TL_POINTWISE(sign, (float)((0 < x) - (x < 0)), (double)((0 < x) - (x < 0)))
TL_POINTWISE_INT(sign, (x > 0) - (x < 0))
TL_POINTWISE(sgn, (float)((0 < x) - (x < 0)), (double)((0 < x) - (x < 0)))
TL_POINTWISE_INT(sgn, (x > 0) - (x < 0))
TL_POINTWISE(square, x *x, x *x)
TL_POINTWISE_INT(square, tl_wrap_mul(x, x))
TL_POINTWISE(erfinv, (float)tl_erfinv_d(x), tl_erfinv_d(x))
/* activations: softplus(beta = p0, threshold = p1) = log(1 + exp(beta x)) / beta, x past the
   threshold; mish = x tanh(softplus(x)); hardtanh = clamp(x, p0, p1); hardsigmoid =
   clamp(x / 6 + 1 / 2, 0, 1); hardswish = x hardsigmoid(x); leaky_relu(slope p0); elu(alpha p0)
   = alpha (exp(x) - 1) below 0; selu = scale elu(x, alpha) of fixed constants; celu(alpha p0) =
   alpha (exp(x / alpha) - 1) below 0 */
TL_POINTWISE(softplus, x *p0 > p1 ? x : log1pf(expf(p0 * x)) / p0,
             x *p0 > p1 ? x : log1p(exp(p0 * x)) / p0)
TL_POINTWISE(mish, x *tanhf(tl_softplus_f(x)), x *tanh(tl_softplus_d(x)))
TL_POINTWISE(hardtanh, x<p0 ? p0 : x> p1 ? p1 : x, x<p0 ? p0 : x> p1 ? p1 : x)
TL_POINTWISE(hardsigmoid,
             x <= -3.0f  ? 0.0f
             : x >= 3.0f ? 1.0f
                         : x / 6.0f + 0.5f,
             x <= -3.0  ? 0.0
             : x >= 3.0 ? 1.0
                        : x / 6.0 + 0.5)
TL_POINTWISE(hardswish,
             x <= -3.0f  ? 0.0f
             : x >= 3.0f ? x
                         : x * (x + 3.0f) / 6.0f,
             x <= -3.0  ? 0.0
             : x >= 3.0 ? x
                        : x * (x + 3.0) / 6.0)
TL_POINTWISE(leaky_relu, x > 0 ? x : x * p0, x > 0 ? x : x * p0)
TL_POINTWISE(elu, x > 0 ? x : p0 * expm1f(x), x > 0 ? x : p0 * expm1(x))
TL_POINTWISE(selu, (float)TL_SELU_SCALE *(x > 0 ? x : (float)TL_SELU_ALPHA * expm1f(x)),
             TL_SELU_SCALE *(x > 0 ? x : TL_SELU_ALPHA * expm1(x)))
TL_POINTWISE(celu, x > 0 ? x : p0 * expm1f(x / p0), x > 0 ? x : p0 * expm1(x / p0))
/* log(z / (1 - z)), z = x clamped to [eps, 1 - eps] when eps (p0) is given (not NaN) */
TL_POINTWISE_FN float tl_logit_f(float x, float eps) {
    const float z = eps != eps ? x : x < eps ? eps : x > 1.0f - eps ? 1.0f - eps : x;
    return logf(z / (1.0f - z));
}
TL_POINTWISE_FN double tl_logit_d(double x, double eps) {
    const double z = eps != eps ? x : x < eps ? eps : x > 1.0 - eps ? 1.0 - eps : x;
    return log(z / (1.0 - z));
}
TL_POINTWISE(logit, tl_logit_f(x, p0), tl_logit_d(x, p0))
/* NaN -> p0, +inf -> p1, -inf -> p2 (the dtype's largest and lowest unless given) */
TL_POINTWISE(nan_to_num,
             x != x           ? p0
             : x == INFINITY  ? p1
             : x == -INFINITY ? p2
                              : x,
             x != x           ? p0
             : x == INFINITY  ? p1
             : x == -INFINITY ? p2
                              : x)
TL_POINTWISE_INT(nan_to_num, x)
/* predicates (BOOL_OUT: 0 or 1): integers are never NaN nor infinite */
TL_POINTWISE(isnan, (float)(x != x), (double)(x != x))
TL_POINTWISE_INT(isnan, x * 0)
TL_POINTWISE(isinf, (float)(fabsf(x) == INFINITY), (double)(fabs(x) == INFINITY))
TL_POINTWISE_INT(isinf, x * 0)
TL_POINTWISE(isfinite, (float)(x - x == 0.0f), (double)(x - x == 0.0))
TL_POINTWISE_INT(isfinite, x * 0 + 1)
/* the sign bit, read from the bits (-0 and -NaN have it; GCC 12 fails to vectorise signbit) */
TL_POINTWISE_FN float tl_signbit_f(float x) {
#ifdef __CUDA_ARCH__
    return (float)(__float_as_uint(x) >> 31);
#else
    union {
        float f;
        uint32_t u;
    } bits = {x};
    return (float)(bits.u >> 31);
#endif
}
TL_POINTWISE_FN double tl_signbit_d(double x) {
#ifdef __CUDA_ARCH__
    return (double)((unsigned long long)__double_as_longlong(x) >> 63);
#else
    union {
        double f;
        uint64_t u;
    } bits = {x};
    return (double)(bits.u >> 63);
#endif
}
TL_POINTWISE(signbit, tl_signbit_f(x), tl_signbit_d(x))
TL_POINTWISE_INT(signbit, x < 0)
TL_POINTWISE(logical_not, (float)(x == 0), (double)(x == 0))
TL_POINTWISE_INT(logical_not, x == 0)
/* bits (BITS: integers and bool only) */
TL_POINTWISE_INT(bitwise_not, ~x)

/* Two inputs: defines tl_pointwise_<name>_f(a, b, p0, p1, p2) (float_expr) and
   tl_pointwise_<name>_d (double_expr), the inputs named as the macro's a and b. */
#define TL_POINTWISE_2(name, a, b, float_expr, double_expr)                                        \
    TL_POINTWISE_FN float tl_pointwise_##name##_f(float a, float b, TL_POINTWISE_NUMBERS(float)) { \
        TL_POINTWISE_UNUSED_NUMBERS;                                                               \
        return float_expr;                                                                         \
    }                                                                                              \
    TL_POINTWISE_FN double tl_pointwise_##name##_d(double a, double b,                             \
                                                   TL_POINTWISE_NUMBERS(double)) {                 \
        TL_POINTWISE_UNUSED_NUMBERS;                                                               \
        return double_expr;                                                                        \
    }

/* y = f(a, b) (inputs broadcast), as TL_POINTWISE; its integer line as TL_POINTWISE_INT. */
#define TL_POINTWISE_BINARY(name, float_expr, double_expr)                                         \
    TL_POINTWISE_2(name, a, b, float_expr, double_expr)
#define TL_POINTWISE_BINARY_INT(name, int_expr)                                                    \
    TL_POINTWISE_FN int64_t tl_pointwise_##name##_i(int64_t a, int64_t b,                          \
                                                    TL_POINTWISE_NUMBERS(int64_t)) {               \
        TL_POINTWISE_UNUSED_NUMBERS;                                                               \
        return int_expr;                                                                           \
    }

/* true division */
TL_POINTWISE_BINARY(div, a / b, a / b)
/* the angle of the point (b, a), in (-pi, pi] */
TL_POINTWISE_BINARY(atan2, atan2f(a, b), atan2(a, b))
/* sqrt(a^2 + b^2) without overflow; |a| with b's sign; a log(b), 0 where a = 0 (NaN b stays) */
TL_POINTWISE_BINARY(hypot, hypotf(a, b), hypot(a, b))
TL_POINTWISE_BINARY(copysign, copysignf(a, b), copysign(a, b))
TL_POINTWISE_BINARY(xlogy,
                    b != b   ? b
                    : a == 0 ? 0.0f
                             : a * logf(b),
                    b != b   ? b
                    : a == 0 ? 0.0
                             : a * log(b))
/* the larger and smaller, NaN winning (maximum, minimum) or losing (fmax, fmin) */
TL_POINTWISE_BINARY(maximum, a > b || a != a ? a : b, a > b || a != a ? a : b)
TL_POINTWISE_BINARY_INT(maximum, a > b ? a : b)
TL_POINTWISE_BINARY(minimum, a < b || a != a ? a : b, a < b || a != a ? a : b)
TL_POINTWISE_BINARY_INT(minimum, a < b ? a : b)
TL_POINTWISE_BINARY(fmax, fmaxf(a, b), fmax(a, b))
TL_POINTWISE_BINARY_INT(fmax, a > b ? a : b)
TL_POINTWISE_BINARY(fmin, fminf(a, b), fmin(a, b))
TL_POINTWISE_BINARY_INT(fmin, a < b ? a : b)
/* a - b trunc(a / b) (a's sign), a - b floor(a / b) (b's sign), floor(a / b); an integer
   divisor of 0 gives 0 */
TL_POINTWISE_BINARY(fmod, fmodf(a, b), fmod(a, b))
TL_POINTWISE_BINARY_INT(fmod, tl_mod_trunc_i(a, b))
TL_POINTWISE_FN float tl_remainder_f(float a, float b) {
    const float r = fmodf(a, b);
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
TL_POINTWISE_FN double tl_remainder_d(double a, double b) {
    const double r = fmod(a, b);
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}
TL_POINTWISE_BINARY(remainder, tl_remainder_f(a, b), tl_remainder_d(a, b))
TL_POINTWISE_BINARY_INT(remainder, tl_remainder_i(a, b))
TL_POINTWISE_BINARY(floor_divide, tl_floor_divide_f(a, b), tl_floor_divide_d(a, b))
TL_POINTWISE_BINARY_INT(floor_divide, tl_floor_divide_i(a, b))
/* bits (BITS) and truth (BOOL_OUT: 0 or 1, any non-zero is true) */
TL_POINTWISE_BINARY_INT(bitwise_and, a &b)
TL_POINTWISE_BINARY_INT(bitwise_or, a | b)
TL_POINTWISE_BINARY_INT(bitwise_xor, a ^ b)
TL_POINTWISE_BINARY(logical_and, (float)(a != 0 && b != 0), (double)(a != 0 && b != 0))
TL_POINTWISE_BINARY_INT(logical_and, a != 0 && b != 0)
TL_POINTWISE_BINARY(logical_or, (float)(a != 0 || b != 0), (double)(a != 0 || b != 0))
TL_POINTWISE_BINARY_INT(logical_or, a != 0 || b != 0)
TL_POINTWISE_BINARY(logical_xor, (float)((a != 0) != (b != 0)), (double)((a != 0) != (b != 0)))
TL_POINTWISE_BINARY_INT(logical_xor, (a != 0) != (b != 0))

/* y = f(a, b, c) (inputs broadcast), as TL_POINTWISE, and its integer line. */
#define TL_POINTWISE_TERNARY(name, float_expr, double_expr)                                        \
    TL_POINTWISE_FN float tl_pointwise_##name##_f(float a, float b, float c,                       \
                                                  TL_POINTWISE_NUMBERS(float)) {                   \
        TL_POINTWISE_UNUSED_NUMBERS;                                                               \
        return float_expr;                                                                         \
    }                                                                                              \
    TL_POINTWISE_FN double tl_pointwise_##name##_d(double a, double b, double c,                   \
                                                   TL_POINTWISE_NUMBERS(double)) {                 \
        TL_POINTWISE_UNUSED_NUMBERS;                                                               \
        return double_expr;                                                                        \
    }
#define TL_POINTWISE_TERNARY_INT(name, int_expr)                                                   \
    TL_POINTWISE_FN int64_t tl_pointwise_##name##_i(int64_t a, int64_t b, int64_t c,               \
                                                    TL_POINTWISE_NUMBERS(int64_t)) {               \
        TL_POINTWISE_UNUSED_NUMBERS;                                                               \
        return int_expr;                                                                           \
    }

/* a + c (b - a), from the nearer end (as torch: exact at c = 0 and c = 1) */
TL_POINTWISE_TERNARY(lerp, c < 0.5f ? a + c * (b - a) : b - (b - a) * (1.0f - c),
                     c < 0.5 ? a + c * (b - a) : b - (b - a) * (1.0 - c))
/* a + value b c, a + value b / c (value p0) */
TL_POINTWISE_TERNARY(addcmul, a + p0 * b * c, a + p0 * b * c)
TL_POINTWISE_TERNARY_INT(addcmul, tl_wrap_add(a, tl_wrap_mul(p0, tl_wrap_mul(b, c))))
TL_POINTWISE_TERNARY(addcdiv, a + p0 * (b / c), a + p0 * (b / c))
/* min(max(a, lo = b), hi = c), NaN winning (torch's clamp with tensor bounds; hi wins where
   lo > hi) */
TL_POINTWISE_TERNARY(clamp_tensor,
                     tl_pointwise_minimum_f(tl_pointwise_maximum_f(a, b, 0, 0, 0), c, 0, 0, 0),
                     tl_pointwise_minimum_d(tl_pointwise_maximum_d(a, b, 0, 0, 0), c, 0, 0, 0))
TL_POINTWISE_TERNARY_INT(clamp_tensor, a < b ? (b < c ? b : c) : (a < c ? a : c))

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
                      g *tl_pointwise_sigmoid_f(s, 0, 0, 0) *
                          (1.0f + s * (1.0f - tl_pointwise_sigmoid_f(s, 0, 0, 0))),
                      g *tl_pointwise_sigmoid_d(s, 0, 0, 0) *
                          (1.0 + s * (1.0 - tl_pointwise_sigmoid_d(s, 0, 0, 0))))

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
/* s = x: square' = 2 x; s = y: erfinv' = sqrt(pi) / 2 exp(y^2) */
TL_POINTWISE_BACKWARD(square_backward, g * 2.0f * s, g * 2.0 * s)
TL_POINTWISE_BACKWARD(erfinv_backward, g * 0.88622692545275801f * expf(s * s),
                      g * 0.88622692545275801 * exp(s * s))
/* s = x, the numbers the forward's: the activations' derivatives (at a kink, torch's side) */
TL_POINTWISE_BACKWARD(softplus_backward, s *p0 > p1 ? g : g / (1.0f + expf(-p0 * s)),
                      s *p0 > p1 ? g : g / (1.0 + exp(-p0 * s)))
/* mish' = tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x) */
TL_POINTWISE_FN float tl_mish_derivative_f(float x) {
    const float t = tanhf(tl_softplus_f(x));
    return t + x / (1.0f + expf(-x)) * (1.0f - t * t);
}
TL_POINTWISE_FN double tl_mish_derivative_d(double x) {
    const double t = tanh(tl_softplus_d(x));
    return t + x / (1.0 + exp(-x)) * (1.0 - t * t);
}
TL_POINTWISE_BACKWARD(mish_backward, g *tl_mish_derivative_f(s), g *tl_mish_derivative_d(s))
TL_POINTWISE_BACKWARD(hardtanh_backward, s <= p0 || s >= p1 ? 0.0f : g,
                      s <= p0 || s >= p1 ? 0.0 : g)
TL_POINTWISE_BACKWARD(hardsigmoid_backward, s > -3.0f && s < 3.0f ? g / 6.0f : 0.0f,
                      s > -3.0 && s < 3.0 ? g / 6.0 : 0.0)
TL_POINTWISE_BACKWARD(hardswish_backward,
                      s < -3.0f   ? 0.0f
                      : s <= 3.0f ? g * (s / 3.0f + 0.5f)
                                  : g,
                      s < -3.0   ? 0.0
                      : s <= 3.0 ? g * (s / 3.0 + 0.5)
                                 : g)
TL_POINTWISE_BACKWARD(leaky_relu_backward, s > 0 ? g : g * p0, s > 0 ? g : g * p0)
TL_POINTWISE_BACKWARD(elu_backward, s > 0 ? g : g * p0 * expf(s), s > 0 ? g : g * p0 * exp(s))
TL_POINTWISE_BACKWARD(selu_backward,
                      g *(float)TL_SELU_SCALE *(s > 0 ? 1.0f : (float)TL_SELU_ALPHA * expf(s)),
                      g *TL_SELU_SCALE *(s > 0 ? 1.0 : TL_SELU_ALPHA * exp(s)))
TL_POINTWISE_BACKWARD(celu_backward, s > 0 ? g : g * expf(s / p0), s > 0 ? g : g * exp(s / p0))
/* logit' = 1 / (x (1 - x)), 0 outside [eps, 1 - eps] when eps is given */
TL_POINTWISE_BACKWARD(logit_backward,
                      p0 == p0 && (s < p0 || s > 1.0f - p0) ? 0.0f : g / (s * (1.0f - s)),
                      p0 == p0 && (s < p0 || s > 1.0 - p0) ? 0.0 : g / (s * (1.0 - s)))
/* the gradient passes where x is finite */
TL_POINTWISE_BACKWARD(nan_to_num_backward, s - s == 0.0f ? g : 0.0f, s - s == 0.0 ? g : 0.0)

#endif
