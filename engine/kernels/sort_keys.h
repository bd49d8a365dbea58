/* The sort family's order of elements as unsigned keys, one source for the CPU kernels and (as
   CUDA C++) the CUDA kernels: a key per dtype whose unsigned order is the elements' order, NaN
   above +inf (torch's order) and -0 equal to +0; and back from a key to the element's bits. */
#ifndef TLUA_KERNELS_SORT_KEYS_H
#define TLUA_KERNELS_SORT_KEYS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TL_SORT_FN static __host__ __device__ __forceinline__
#else
#define TL_SORT_FN static inline
#endif

/* A float of `width` bits (16, 32 or 64) whose non-sign bits above `exponent` (the bits of +inf)
   are a NaN: its sign flipped when positive and every bit flipped when negative gives an
   unsigned order equal to the floats' order (IEEE 754 bits are sign and magnitude). Every NaN
   takes the largest key (all ones) and -0 the key of +0, so ties among them keep their order in a
   stable sort. */
TL_SORT_FN uint64_t tl_sort_key_float(uint64_t bits, int width, uint64_t exponent) {
    const uint64_t sign = (uint64_t)1 << (width - 1), all = sign | (sign - 1);
    const uint64_t magnitude = bits & (sign - 1);
    if (magnitude > exponent) return all; /* NaN */
    if (magnitude == 0) return sign;      /* -0 and +0 */
    return bits & sign ? ~bits & all : bits | sign;
}

/* The bits a float key stands for (NaN as the positive quiet NaN, zero as +0). */
TL_SORT_FN uint64_t tl_sort_float_of_key(uint64_t key, int width, uint64_t exponent) {
    const uint64_t sign = (uint64_t)1 << (width - 1), all = sign | (sign - 1);
    if (key == all) return exponent | (exponent & (~exponent + 1)) >> 1; /* the quiet NaN */
    return key & sign ? key & ~sign : ~key & all;
}

/* Whether the float's bits come back unchanged from its key: false for -0 and for a NaN other
   than the positive quiet NaN (a kernel then reads the sorted values from the input). */
TL_SORT_FN bool tl_sort_float_keeps_bits(uint64_t bits, int width, uint64_t exponent) {
    return tl_sort_float_of_key(tl_sort_key_float(bits, width, exponent), width, exponent) == bits;
}

/* A two's complement integer of `width` bits: its sign bit flipped. */
TL_SORT_FN uint64_t tl_sort_key_int(uint64_t bits, int width) {
    const uint64_t sign = (uint64_t)1 << (width - 1);
    return (bits ^ sign) & (sign | (sign - 1));
}

/* The exponent bits (+inf without its sign) of each floating dtype. */
enum {
    TL_SORT_F16_INF = 0x7c00u,
    TL_SORT_BF16_INF = 0x7f80u,
    TL_SORT_F32_INF = 0x7f800000u,
};
#define TL_SORT_F64_INF 0x7ff0000000000000ull

#endif
