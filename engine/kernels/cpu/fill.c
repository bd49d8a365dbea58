/* CPU fill kernels: every element of out (any strides) set to one value, for every dtype. */
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

#define FILL_LOOP(name, T)                                                                         \
    static void name(char **p, const int64_t *s, int64_t n, const void *ctx) {                     \
        T value;                                                                                   \
        memcpy(&value, ctx, sizeof value);                                                         \
        if (s[0] == (int64_t)sizeof(T)) {                                                          \
            T *o = (T *)p[0];                                                                      \
            for (int64_t i = 0; i < n; i++) o[i] = value;                                          \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) *(T *)(p[0] + i * s[0]) = value;                       \
        }                                                                                          \
    }

FILL_LOOP(fill8, uint8_t)
FILL_LOOP(fill16, uint16_t)
FILL_LOOP(fill32, uint32_t)
FILL_LOOP(fill64, uint64_t)

/* The value is converted once (tl_dtype_store: saturating float -> int, NaN -> 0,
   bool = value != 0, bf16/f16 rounded to nearest even), then copied as bits. */
static tl_status fill_kernel(tl_tensor *out, tl_scalar value) {
    static const tl_cpu_loop_fn loops[9] = {[1] = fill8, [2] = fill16, [4] = fill32, [8] = fill64};
    if (tl_numel(out) == 0) return TL_OK;
    uint64_t bits = 0;
    tl_dtype_store(out->dtype, &bits, value);
    const tl_tensor view = tl_distinct_elements(out); /* an expanded out: each element once */
    tl_cpu_for_each(1, (const tl_tensor *const[]){&view}, loops[tl_dtype_size(out->dtype)], &bits);
    return TL_OK;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(fill, TL_DTYPES_ALL, fill, fill_kernel),
};

TL_KERNEL_TABLE(tl_cpu_fill_table, TL_DEVICE_CPU, entries);
