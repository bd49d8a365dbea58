/* Internal to the CPU nn kernels: inline 16-bit float conversions and OpenMP helpers. */
#ifndef TLUA_CPU_NN_KERNELS_H
#define TLUA_CPU_NN_KERNELS_H

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

static inline float nn_bf16_to_f32(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t nn_f32_to_bf16(float value) {
    uint32_t u;
    memcpy(&u, &value, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float nn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu,
             mantissa = h & 0x3ffu, u;
    if (exponent == 0x1f) {
        u = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent == 0) {
        float f = (float)mantissa * 5.9604644775390625e-8f; /* subnormal: mantissa * 2^-24 */
        memcpy(&u, &f, sizeof u);
        u |= sign;
    } else {
        u = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t nn_f32_to_f16(float value) {
    uint32_t u;
    memcpy(&u, &value, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u >= 0x7f800000u) return sign | 0x7c00u | (u > 0x7f800000u ? 0x200u : 0u);
    if (u >= 0x477ff000u) return sign | 0x7c00u; /* rounds to 65520 or more: infinity */
    if (u < 0x38800000u) {
        /* below the smallest normal: adding 0.5 lets the FPU round to a multiple of 2^-24 */
        float f;
        memcpy(&f, &u, sizeof f);
        f += 0.5f;
        memcpy(&u, &f, sizeof u);
        return sign | (uint16_t)(u - 0x3f000000u);
    }
    u += 0xc8000fffu + ((u >> 13) & 1u); /* rebias the exponent by -112, round to even */
    return sign | (uint16_t)(u >> 13);
}

#endif
