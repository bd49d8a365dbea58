/* C unit test of the kernels' inline 16-bit conversions against the engine's converters. */
#include "kernels/cpu/nn_kernels.h"
#include "nn_test_support.h"

/* ---- the inline 16-bit conversions of the kernels ------------------------------------------ */
static bool same_bits_or_nan(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

static void test_conversions(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if (!same_bits_or_nan(tl_f16_load((uint16_t)h), tl_f16_to_f32((uint16_t)h))) bad++;
        if (!same_bits_or_nan(tl_bf16_load((uint16_t)h), tl_bf16_to_f32((uint16_t)h))) bad++;
    }
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)next_random();
        if (i % 2) u = (u & 0x80000000u) | (0x30000000u + (u & 0x1fffffffu)); /* near f16 range */
        float f;
        memcpy(&f, &u, sizeof f);
        uint16_t a = tl_f16_round(f), b = tl_f32_to_f16(f);
        if (a != b && !(isnan(f) && (a & 0x7c00) == 0x7c00 && (a & 0x3ff))) bad++;
        a = tl_bf16_round(f), b = tl_f32_to_bf16(f);
        if (a != b && !(isnan(f) && (a & 0x7f80) == 0x7f80 && (a & 0x7f))) bad++;
    }
    CHECK(bad == 0, "inline 16-bit conversions differ from tl_*_to_* in %d cases", bad);
}

int main(void) {
    test_conversions();
    if (failures) {
        printf("test_half: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_half: all passed\n");
    return 0;
}
