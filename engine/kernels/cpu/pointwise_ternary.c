/* CPU kernels of the pointwise ternary ops (family POINTWISE_TERNARY in ops.def: lerp, addcmul,
   ...): out = f(a, b, c) with the math of kernels/pointwise.h and the op's numbers, inputs of
   out's dtype broadcast to its shape; floating dtypes (bf16/f16 in f32), and int32/int64 for INT
   rows (wrapping). */
#include <math.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/pointwise.h"

#define LOAD_SAME(v)  (v)
#define STORE_SAME(v) (v)
#define STORE_BF16(v) tl_bf16_round(v)
#define STORE_F16(v)  tl_f16_round(v)
#define STORE_I32(v)  ((int32_t)(uint32_t)(uint64_t)(v)) /* wraps */

/* Defines the kernel `name`: out = STORE(MATH(a, b, c, p0, p1, p2)) over elements of T loaded
   to CT, the numbers converted by NUMBER. A flat loop for dense operands. */
#define TERNARY_KERNEL(name, T, CT, LOAD, STORE, NUMBER, MATH)                                     \
    static void name##_loop(char **p, const int64_t *s, int64_t n, const void *ctx) {              \
        const tl_op_args *args = ctx;                                                              \
        const CT p0 = NUMBER(args->scalar[0]), p1 = NUMBER(args->scalar[1]),                       \
                 p2 = NUMBER(args->scalar[2]);                                                     \
        const int64_t size = (int64_t)sizeof(T);                                                   \
        if (s[0] == size && s[1] == size && s[2] == size && s[3] == size) {                        \
            T *o = (T *)p[0];                                                                      \
            const T *a = (const T *)p[1], *b = (const T *)p[2], *c = (const T *)p[3];              \
            for (int64_t i = 0; i < n; i++)                                                        \
                o[i] = STORE(MATH(LOAD(a[i]), LOAD(b[i]), LOAD(c[i]), p0, p1, p2));                \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT a = LOAD(*(const T *)(p[1] + i * s[1]));                                        \
                CT b = LOAD(*(const T *)(p[2] + i * s[2]));                                        \
                CT c = LOAD(*(const T *)(p[3] + i * s[3]));                                        \
                *(T *)(p[0] + i * s[0]) = STORE(MATH(a, b, c, p0, p1, p2));                        \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static tl_status name(tl_tensor *const *out, const tl_tensor *const *in,                       \
                          const tl_op_args *args) {                                                \
        tl_cpu_for_each(4, (const tl_tensor *const[]){out[0], in[0], in[1], in[2]}, name##_loop,   \
                        args);                                                                     \
        return TL_OK;                                                                              \
    }

#define AS_FLOAT(v)  ((float)(v))
#define AS_DOUBLE(v) (v)
#define FLOAT_KERNELS(op)                                                                          \
    TERNARY_KERNEL(op##_f32, float, float, LOAD_SAME, STORE_SAME, AS_FLOAT, tl_pointwise_##op##_f) \
    TERNARY_KERNEL(op##_f64, double, double, LOAD_SAME, STORE_SAME, AS_DOUBLE,                     \
                   tl_pointwise_##op##_d)                                                          \
    TERNARY_KERNEL(op##_bf16, uint16_t, float, tl_bf16_load, STORE_BF16, AS_FLOAT,                 \
                   tl_pointwise_##op##_f)                                                          \
    TERNARY_KERNEL(op##_f16, uint16_t, float, tl_f16_load, STORE_F16, AS_FLOAT,                    \
                   tl_pointwise_##op##_f)

/* every POINTWISE_TERNARY row of ops.def, by its dtypes rule */
#define TERNARY_KERNELS_FLOAT(op) FLOAT_KERNELS(op)
#define TERNARY_KERNELS_INT(op)                                                                    \
    FLOAT_KERNELS(op)                                                                              \
    TERNARY_KERNEL(op##_i32, int32_t, int64_t, LOAD_SAME, STORE_I32, tl_double_to_i64,             \
                   tl_pointwise_##op##_i)                                                          \
    TERNARY_KERNEL(op##_i64, int64_t, int64_t, LOAD_SAME, STORE_SAME, tl_double_to_i64,            \
                   tl_pointwise_##op##_i)
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    TERNARY_KERNELS_##dtypes(name)
#include "tlua/ops.def"

static const tl_kernel_entry entries[] = {
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    TL_POINTWISE_ENTRIES_##dtypes(name, tensors),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cpu_pointwise_ternary_table, TL_DEVICE_CPU, entries);
