/* The math of the elementwise ops with integer kernels (neg, abs, relu, pow_scalar, clamp, add,
   sub, mul, pow), written once for the CPU kernels (kernels/cpu/unary.c, binary.c) and the CUDA
   kernels (kernels/cuda/unary.cu, binary.cu, compiled as CUDA C++). Floating math in float
   (float32, bfloat16 and float16 compute in it) and double; integer math wraps (computed
   unsigned, no undefined behaviour). */
#ifndef TLUA_ARITH_H
#define TLUA_ARITH_H

#include <math.h>
#include <stdint.h>

#include "kernels/pointwise.h" /* TL_POINTWISE_FN */

/* ---- floating ------------------------------------------------------------------------------ */
/* max(x, 0) with NaN kept and -0 -> +0 */
TL_POINTWISE_FN float tl_relu_f(float x) {
    return x > 0 || x != x ? x : 0.0f;
}
TL_POINTWISE_FN double tl_relu_d(double x) {
    return x > 0 || x != x ? x : 0.0;
}
TL_POINTWISE_FN float tl_pow_f(float x, float e) {
    return e == 2.0f ? x * x : powf(x, e);
}
TL_POINTWISE_FN double tl_pow_d(double x, double e) {
    return e == 2.0 ? x * x : pow(x, e);
}
/* min(max(x, lo), hi) with NaN kept; absent bounds are infinite */
TL_POINTWISE_FN float tl_clamp_f(float x, float lo, float hi) {
    float y = x < lo ? lo : x;
    return y > hi ? hi : y;
}
TL_POINTWISE_FN double tl_clamp_d(double x, double lo, double hi) {
    double y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

/* ---- integer, wrapping ------------------------------------------------------------------- */
/* a uint64 sum modulo 2^64 as int64 (two's complement), with no implementation-defined
   conversion: integer sums (reduce, cumsum) accumulate in uint64 */
TL_POINTWISE_FN int64_t tl_wrap_to_i64(uint64_t u) {
    return u <= INT64_MAX ? (int64_t)u : -(int64_t)(UINT64_MAX - u) - 1;
}
TL_POINTWISE_FN int32_t tl_neg_i32(int32_t x) {
    return (int32_t)(0u - (uint32_t)x);
}
TL_POINTWISE_FN int64_t tl_neg_i64(int64_t x) {
    return (int64_t)(0u - (uint64_t)x);
}
TL_POINTWISE_FN int32_t tl_abs_i32(int32_t x) {
    return x < 0 ? tl_neg_i32(x) : x;
}
TL_POINTWISE_FN int64_t tl_abs_i64(int64_t x) {
    return x < 0 ? tl_neg_i64(x) : x;
}
TL_POINTWISE_FN int64_t tl_relu_i64(int64_t x) {
    return x > 0 ? x : 0;
}
TL_POINTWISE_FN int64_t tl_clamp_i64(int64_t x, int64_t lo, int64_t hi) {
    int64_t y = x < lo ? lo : x;
    return y > hi ? hi : y;
}
/* a ^ b, wrapping (truncate to int32 for int32); for b < 0 the truncated 1 / a^-b: 1 for a = 1,
   +-1 for a = -1, else 0 */
TL_POINTWISE_FN uint64_t tl_pow_int(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1u : a == -1 ? ((b & 1) ? ~(uint64_t)0 : 1u) : 0u;
    uint64_t x = (uint64_t)a, r = 1;
    for (; b > 0; b >>= 1, x *= x)
        if (b & 1) r *= x;
    return r;
}
TL_POINTWISE_FN int32_t tl_add_i32(int32_t a, int32_t b) {
    return (int32_t)((uint32_t)a + (uint32_t)b);
}
TL_POINTWISE_FN int64_t tl_add_i64(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
TL_POINTWISE_FN int32_t tl_sub_i32(int32_t a, int32_t b) {
    return (int32_t)((uint32_t)a - (uint32_t)b);
}
TL_POINTWISE_FN int64_t tl_sub_i64(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a - (uint64_t)b);
}
TL_POINTWISE_FN int32_t tl_mul_i32(int32_t a, int32_t b) {
    return (int32_t)((uint32_t)a * (uint32_t)b);
}
TL_POINTWISE_FN int64_t tl_mul_i64(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a * (uint64_t)b);
}

#endif
