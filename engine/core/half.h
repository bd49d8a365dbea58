/* Element conversions shared by core/dtype.c, the CPU kernels and the CUDA kernels (C and CUDA
   C++): bf16/f16 <-> f32 (round to nearest even, NaN kept quiet), f64/int64 -> f32 rounded to odd
   (so a second rounding to bf16/f16 is correct) and float -> integer without undefined behaviour.
 */
#ifndef TLUA_CORE_HALF_H
#define TLUA_CORE_HALF_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define TL_HALF_FN static __host__ __device__ __forceinline__
#else
#define TL_HALF_FN static inline
#endif

TL_HALF_FN uint32_t tl_half_bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

TL_HALF_FN float tl_half_float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

TL_HALF_FN float tl_bf16_load(uint16_t h) {
    return tl_half_float_of((uint32_t)h << 16);
}

TL_HALF_FN uint16_t tl_bf16_round(float f) {
    uint32_t u = tl_half_bits_of(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x0040u; /* quiet NaN, sign and top payload kept */
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

TL_HALF_FN float tl_f16_load(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t rest = h & 0x7fffu;
    /* normal: rebias the exponent 15 -> 127; inf/NaN: all-ones exponent;
       subnormal: mantissa * 2^-24, exact in f32 */
    uint32_t normal = (rest << 13) + ((127u - 15u) << 23);
    uint32_t special = 0x7f800000u | ((rest & 0x3ffu) << 13);
    uint32_t subnormal = tl_half_bits_of((float)rest * 0x1p-24f);
    uint32_t bits = rest >= 0x7c00u ? special : rest >= 0x0400u ? normal : subnormal;
    return tl_half_float_of(sign | bits);
}

TL_HALF_FN uint16_t tl_f16_round(float f) {
    uint32_t u = tl_half_bits_of(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    /* normal: rebias 127 -> 15 and round the 13 dropped bits to even */
    uint32_t rebased = abs - ((127u - 15u) << 23);
    uint32_t normal = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
    /* subnormal (|f| < 2^-14): adding 0.5 (ulp 2^-24) lets the FPU round |f| to a
       multiple of 2^-24, to even; the low bits are then the f16 encoding (1024 is
       the smallest normal, also right) */
    uint32_t subnormal = tl_half_bits_of(tl_half_float_of(abs) + 0.5f) - 0x3f000000u;
    uint32_t nan = 0x7e00u | ((abs >> 13) & 0x3ffu);
    uint32_t bits = abs > 0x7f800000u    ? nan
                    : abs >= 0x477ff000u ? 0x7c00u /* rounds to >= 65520: infinity */
                    : abs >= 0x38800000u ? normal
                                         : subnormal;
    return (uint16_t)(sign | bits);
}

/* f64 -> f32 rounded to odd (truncated, last bit set when inexact). Rounding that to
   bf16/f16 to nearest even gives the f64 correctly rounded, without double rounding. */
TL_HALF_FN float tl_double_to_f32_odd(double v) {
    float f = (float)v;
    if ((double)f == v || f != f) return f; /* exact, or NaN */
    uint32_t u = tl_half_bits_of(f);
    bool away = v > 0 ? (double)f > v : (double)f < v;
    if (away) u -= 1; /* one step back toward zero (in magnitude; inf -> max finite) */
    return tl_half_float_of(u | 1u);
}

TL_HALF_FN int tl_half_clz64(uint64_t m) {
#ifdef __CUDA_ARCH__
    return __clzll((long long)m);
#else
    return __builtin_clzll(m);
#endif
}

/* int64 -> f32 rounded to odd, for the same purpose. */
TL_HALF_FN float tl_i64_to_f32_odd(int64_t v) {
    uint64_t m = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;
    int shift = m >> 24 ? 40 - tl_half_clz64(m) : 0; /* keep the top 24 bits */
    uint64_t kept = m >> shift;
    kept |= (kept << shift) != m;                   /* sticky bit */
    float f = (float)kept * (float)(1ull << shift); /* both exact */
    return v < 0 ? -f : f;
}

/* Truncation toward zero as C does, NaN -> 0, out of range -> the nearest bound
   (where C leaves the result undefined). */
TL_HALF_FN int32_t tl_double_to_i32(double v) {
    return v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
}

TL_HALF_FN int64_t tl_double_to_i64(double v) {
    return v != v ? 0 : v >= 0x1p63 ? INT64_MAX : v <= -0x1p63 ? INT64_MIN : (int64_t)v;
}

#endif
