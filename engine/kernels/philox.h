/* Philox4x32-10, the engine's counter-based generator, for the CPU kernels and (as CUDA C++)
   the CUDA kernels: block c of a stream is philox(counter c, key seed), so any element can be
   computed on its own and a seed gives the same numbers on every device. */
#ifndef TLUA_KERNELS_PHILOX_H
#define TLUA_KERNELS_PHILOX_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TL_PHILOX_FN static __host__ __device__ __forceinline__
#else
#define TL_PHILOX_FN static inline
#endif

/* Salmon, Moraes, Dror and Shaw ("Parallel random numbers: as easy as 1, 2, 3", SC 2011):
   10 rounds of two 32x32->64 multiplies with a Weyl-sequence key schedule. The counter block
   is {low 32 bits of the 64-bit counter, high 32 bits, 0, 0}, the key {low 32 bits of the
   seed, high 32 bits}. */
enum {
    TL_PHILOX_M0 = 0xD2511F53u,
    TL_PHILOX_M1 = 0xCD9E8D57u,
    TL_PHILOX_W0 = 0x9E3779B9u,
    TL_PHILOX_W1 = 0xBB67AE85u,
};

typedef struct tl_philox_block {
    uint32_t w[4];
} tl_philox_block;

TL_PHILOX_FN tl_philox_block tl_philox(uint64_t counter, uint64_t seed) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        if (round > 0) k0 += (uint32_t)TL_PHILOX_W0, k1 += (uint32_t)TL_PHILOX_W1;
        uint64_t p0 = (uint64_t)(uint32_t)TL_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)(uint32_t)TL_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
    }
    tl_philox_block b = {{c0, c1, c2, c3}};
    return b;
}

/* Two words as one 64-bit value: half 0 is words 0-1, half 1 words 2-3. */
TL_PHILOX_FN uint64_t tl_philox_word64(const tl_philox_block *b, int half) {
    return (uint64_t)b->w[2 * half + 1] << 32 | b->w[2 * half];
}

/* Uniform [0, 1) with `bits` random bits (exact in a double), so that rounding to a dtype
   with that many significand bits never gives 1. */
TL_PHILOX_FN double tl_uniform_bits(uint32_t w, int bits) {
    return (double)(w >> (32 - bits)) * ldexp(1.0, -bits);
}
TL_PHILOX_FN double tl_uniform53(uint64_t u) {
    return (double)(u >> 11) * 0x1p-53;
}

/* The float32 uniform that `rand` draws for element e of a stream starting at block
   `counter`: block counter + e / 4, word e % 4, 24 bits (exactly (w >> 8) * 2^-24). Dropout
   keeps element e when this is >= p. */
TL_PHILOX_FN float tl_philox_uniform_f32(uint64_t seed, uint64_t counter, uint64_t e) {
    tl_philox_block b = tl_philox(counter + e / 4, seed);
    return (float)(b.w[e % 4] >> 8) * 0x1p-24f;
}

#endif
