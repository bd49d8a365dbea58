/* CPU where kernels: out = cond ? a : b, cond bool, a/b/out of one dtype (keyed by it).
   Only the element size matters, so dtypes of one size share a loop. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

#define WHERE_LOOP(name, T)                                                                        \
    static void name(char **p, const int64_t *s, int64_t n, const void *ctx) {                     \
        (void)ctx;                                                                                 \
        const int64_t size = (int64_t)sizeof(T);                                                   \
        if (s[0] == size && s[1] == 1 && s[2] == size && s[3] == size) {                           \
            T *o = (T *)p[0];                                                                      \
            const uint8_t *c = (const uint8_t *)p[1];                                              \
            const T *a = (const T *)p[2], *b = (const T *)p[3];                                    \
            for (int64_t i = 0; i < n; i++) o[i] = c[i] ? a[i] : b[i];                             \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++)                                                        \
                *(T *)(p[0] + i * s[0]) = *(const uint8_t *)(p[1] + i * s[1])                      \
                                              ? *(const T *)(p[2] + i * s[2])                      \
                                              : *(const T *)(p[3] + i * s[3]);                     \
        }                                                                                          \
    }

WHERE_LOOP(where8, uint8_t)
WHERE_LOOP(where16, uint16_t)
WHERE_LOOP(where32, uint32_t)
WHERE_LOOP(where64, uint64_t)

static tl_status where_kernel(tl_tensor *out, const tl_tensor *cond, const tl_tensor *a,
                              const tl_tensor *b) {
    static const tl_cpu_loop_fn loops[9] = {
        [1] = where8, [2] = where16, [4] = where32, [8] = where64};
    tl_cpu_for_each(4, (const tl_tensor *const[]){out, cond, a, b},
                    loops[tl_dtype_size(out->dtype)], NULL);
    return TL_OK;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(where, TL_DTYPES_ALL, ternary, where_kernel),
};

TL_KERNEL_TABLE(tl_cpu_where_table, TL_DEVICE_CPU, entries);
