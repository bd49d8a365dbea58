/* C unit test of the bf16/f16 conversions against a reference written from the formats'
   definitions in double arithmetic (exhaustive decoding, round-to-nearest-even encoding). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tlua/dtype.h"

#include "check.h"

/* A 16-bit float format: exponent bits, mantissa bits, exponent bias. */
typedef struct format {
    const char *name;
    int exponent_bits, mantissa_bits, bias;
} format;

static const format f16 = {"float16", 5, 10, 15};
static const format bf16 = {"bfloat16", 8, 7, 127};

/* The value of bits in format f, from sign, exponent and mantissa. */
static double decode(const format *f, uint16_t bits) {
    int max_exponent = (1 << f->exponent_bits) - 1;
    int sign = bits >> 15, exponent = (bits >> f->mantissa_bits) & max_exponent;
    int mantissa = bits & ((1 << f->mantissa_bits) - 1);
    double magnitude;
    if (exponent == max_exponent)
        magnitude = mantissa ? NAN : INFINITY;
    else if (exponent == 0) /* subnormal: m * 2^(1 - bias - mantissa_bits) */
        magnitude = ldexp(mantissa, 1 - f->bias - f->mantissa_bits);
    else
        magnitude =
            ldexp((1 << f->mantissa_bits) + mantissa, exponent - f->bias - f->mantissa_bits);
    return sign ? -magnitude : magnitude;
}

/* x rounded to format f, to nearest with ties to even, as a double (inf past the largest). */
static double round_to(const format *f, double x) {
    if (isnan(x) || isinf(x) || x == 0) return x;
    double magnitude = fabs(x);
    int exponent;
    frexp(magnitude, &exponent);        /* magnitude = m 2^exponent, m in [0.5, 1) */
    int min_exponent = 1 - f->bias + 1; /* frexp's exponent of the smallest normal */
    if (exponent < min_exponent) exponent = min_exponent;
    double ulp = ldexp(1.0, exponent - 1 - f->mantissa_bits);
    double rounded = nearbyint(magnitude / ulp) * ulp; /* the quotient is exact; ties to even */
    double overflow = ldexp(1.0, (1 << f->exponent_bits) - 1 - f->bias);
    if (rounded >= overflow) rounded = INFINITY;
    return x < 0 ? -rounded : rounded;
}

static bool same(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void test_decoding(void) {
    int bad_f16 = 0, bad_bf16 = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if (!same(tl_f16_to_f32((uint16_t)h), decode(&f16, (uint16_t)h))) bad_f16++;
        if (!same(tl_bf16_to_f32((uint16_t)h), decode(&bf16, (uint16_t)h))) bad_bf16++;
    }
    CHECK(bad_f16 == 0, "float16 -> float32 differs from the format's definition for %d values",
          bad_f16);
    CHECK(bad_bf16 == 0, "bfloat16 -> float32 differs from the format's definition for %d values",
          bad_bf16);
}

static uint64_t state = 0x9e3779b97f4a7c15ull;
static uint32_t next_bits(void) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (uint32_t)(state >> 16);
}

/* Floats near each format's range and its ties, plus fully random bit patterns. */
static float sample(int i) {
    uint32_t u = next_bits();
    if (i % 4 == 1) u = (u & 0x80000000u) | (0x30000000u + (u & 0x1fffffffu)); /* f16 range */
    if (i % 4 == 2) u = (u & 0xffff8000u) | 0x8000u; /* a bf16 tie (half an ulp) */
    if (i % 4 == 3) u = (u & 0xffffe000u) | 0x1000u; /* an f16 tie in the normal range */
    float value;
    memcpy(&value, &u, sizeof value);
    return value;
}

static void test_encoding(void) {
    int bad_f16 = 0, bad_bf16 = 0;
    for (int i = 0; i < 400000; i++) {
        float x = sample(i);
        if (!same(decode(&f16, tl_f32_to_f16(x)), round_to(&f16, x))) {
            if (bad_f16++ < 3) printf("  float16(%a) is wrong\n", (double)x);
        }
        if (!same(decode(&bf16, tl_f32_to_bf16(x)), round_to(&bf16, x))) {
            if (bad_bf16++ < 3) printf("  bfloat16(%a) is wrong\n", (double)x);
        }
    }
    CHECK(bad_f16 == 0, "float32 -> float16 differs from round-to-nearest-even in %d cases",
          bad_f16);
    CHECK(bad_bf16 == 0, "float32 -> bfloat16 differs from round-to-nearest-even in %d cases",
          bad_bf16);
    /* hand-worked: the largest float16 and the tie above it, the smallest subnormal's half */
    CHECK(tl_f32_to_f16(65504.0f) == 0x7bff, "65504 is the largest float16");
    CHECK(tl_f32_to_f16(65520.0f) == 0x7c00, "65520 ties to even: +inf");
    CHECK(tl_f32_to_f16(0x1p-25f) == 0x0000, "2^-25 ties to even: +0");
    CHECK(tl_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80, "1 + 2^-8 ties to even: 1");
}

int main(void) {
    test_decoding();
    test_encoding();
    if (failures) {
        printf("test_half: %d failure(s) of %d checks\n", failures, checks);
        return 1;
    }
    printf("test_half: all %d checks passed\n", checks);
    return 0;
}
