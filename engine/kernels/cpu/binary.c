/* CPU binary elementwise kernels: add, sub, mul, pow (floating dtypes and int32/int64, wrapping),
   the pointwise binary ops (in the dtypes of their row's rule, tlua/ops.def) and the comparisons
   eq, ne, lt, le, gt, ge for every dtype, giving bool. Keyed by the inputs' dtype; bf16/f16
   compute in f32. */
#include <math.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/arith.h"
#include "kernels/pointwise.h"

/* element <-> compute type */
#define LOAD_SAME(v)   (v)
#define LOAD_BOOL(v)   ((v) != 0)
#define STORE_SAME(v)  (v)
#define STORE_BF16(v)  tl_bf16_round(v)
#define STORE_F16(v)   tl_f16_round(v)
#define STORE_BOOL(v)  ((uint8_t)(v))
#define STORE_I32(v)   ((int32_t)(uint32_t)(uint64_t)(v)) /* wraps */
#define STORE_BIT(v)   ((uint8_t)((v)&1))                 /* a BITS row's bool: the low bit */
#define STORE_TRUTH(v) ((uint8_t)((v) != 0))

/* Defines the kernel `name`: out (TO) = STORE(EXPR) of a, b = LOAD(inputs of TI) in
   compute type CT, after SETUP (locals from args, the op's numbers). Flat loops for dense
   operands and for a broadcast scalar operand. */
#define BINARY_KERNEL_SETUP(name, TO, TI, CT, LOAD, STORE, SETUP, EXPR)                            \
    BINARY_KERNEL_AS(, name, TO, TI, CT, LOAD, STORE, SETUP, EXPR)
/* the same, the loop declared with ATTR (TL_CPU_WIDE or nothing) */
#define BINARY_KERNEL_AS(ATTR, name, TO, TI, CT, LOAD, STORE, SETUP, EXPR)                         \
    ATTR static void name##_loop(char **p, const int64_t *s, int64_t n, const void *ctx) {         \
        const tl_op_args *args = ctx;                                                              \
        (void)args;                                                                                \
        SETUP                                                                                      \
        const int64_t so = (int64_t)sizeof(TO), si = (int64_t)sizeof(TI);                          \
        TO *o = (TO *)p[0];                                                                        \
        const TI *pa = (const TI *)p[1], *pb = (const TI *)p[2];                                   \
        if (s[0] == so && s[1] == si && s[2] == si) {                                              \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT a = LOAD(pa[i]), b = LOAD(pb[i]);                                               \
                o[i] = STORE(EXPR);                                                                \
            }                                                                                      \
        } else if (s[0] == so && s[1] == si && s[2] == 0) {                                        \
            const CT b = LOAD(pb[0]);                                                              \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT a = LOAD(pa[i]);                                                                \
                o[i] = STORE(EXPR);                                                                \
            }                                                                                      \
        } else if (s[0] == so && s[1] == 0 && s[2] == si) {                                        \
            const CT a = LOAD(pa[0]);                                                              \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT b = LOAD(pb[i]);                                                                \
                o[i] = STORE(EXPR);                                                                \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT a = LOAD(*(const TI *)(p[1] + i * s[1]));                                       \
                CT b = LOAD(*(const TI *)(p[2] + i * s[2]));                                       \
                *(TO *)(p[0] + i * s[0]) = STORE(EXPR);                                            \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static tl_status name(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,                  \
                          const tl_op_args *args) {                                                \
        tl_cpu_for_each(3, (const tl_tensor *const[]){out, a, b}, name##_loop, args);              \
        return TL_OK;                                                                              \
    }
#define BINARY_KERNEL(name, TO, TI, CT, LOAD, STORE, EXPR)                                         \
    BINARY_KERNEL_SETUP(name, TO, TI, CT, LOAD, STORE, , EXPR)

/* The four floating kernels of an arithmetic op: EXPR_F in float, EXPR_D in double; the float32
   loop also for AVX2 (TL_CPU_WIDE). */
#define FLOAT_KERNELS(op, EXPR_F, EXPR_D)                                                          \
    BINARY_KERNEL_AS(TL_CPU_WIDE, op##_f32, float, float, float, LOAD_SAME, STORE_SAME, , EXPR_F)  \
    BINARY_KERNEL(op##_f64, double, double, double, LOAD_SAME, STORE_SAME, EXPR_D)                 \
    BINARY_KERNEL(op##_bf16, uint16_t, uint16_t, float, tl_bf16_load, STORE_BF16, EXPR_F)          \
    BINARY_KERNEL(op##_f16, uint16_t, uint16_t, float, tl_f16_load, STORE_F16, EXPR_F)

#define INT_KERNELS(op, EXPR_32, EXPR_64)                                                          \
    BINARY_KERNEL(op##_i32, int32_t, int32_t, int32_t, LOAD_SAME, STORE_SAME, EXPR_32)             \
    BINARY_KERNEL(op##_i64, int64_t, int64_t, int64_t, LOAD_SAME, STORE_SAME, EXPR_64)

/* A comparison for every dtype (bool read as bytes, any non-zero byte is true). */
#define COMPARE_KERNELS(op, EXPR)                                                                  \
    BINARY_KERNEL(op##_f32, uint8_t, float, float, LOAD_SAME, STORE_BOOL, EXPR)                    \
    BINARY_KERNEL(op##_f64, uint8_t, double, double, LOAD_SAME, STORE_BOOL, EXPR)                  \
    BINARY_KERNEL(op##_bf16, uint8_t, uint16_t, float, tl_bf16_load, STORE_BOOL, EXPR)             \
    BINARY_KERNEL(op##_f16, uint8_t, uint16_t, float, tl_f16_load, STORE_BOOL, EXPR)               \
    BINARY_KERNEL(op##_i32, uint8_t, int32_t, int32_t, LOAD_SAME, STORE_BOOL, EXPR)                \
    BINARY_KERNEL(op##_i64, uint8_t, int64_t, int64_t, LOAD_SAME, STORE_BOOL, EXPR)                \
    BINARY_KERNEL(op##_bool, uint8_t, uint8_t, int, LOAD_BOOL, STORE_BOOL, EXPR)

/* ---- arithmetic: the math of kernels/arith.h (integers wrap) ------------- */
FLOAT_KERNELS(add, a + b, a + b)
FLOAT_KERNELS(sub, a - b, a - b)
FLOAT_KERNELS(mul, a *b, a *b)
FLOAT_KERNELS(pow, tl_pow_f(a, b), tl_pow_d(a, b))

/* every POINTWISE_BINARY row of ops.def, the math from kernels/pointwise.h, by its dtypes rule
   (binary rows have no numbers: p0..p2 are 0) */
#define NUMBERS(CT)                                                                                \
    const CT p0 = 0;                                                                               \
    const CT p1 = 0;                                                                               \
    const CT p2 = 0;
#define MATH_F(op) tl_pointwise_##op##_f(a, b, p0, p1, p2)
#define MATH_D(op) tl_pointwise_##op##_d(a, b, p0, p1, p2)
#define MATH_I(op) tl_pointwise_##op##_i(a, b, p0, p1, p2)
#define POINTWISE_FLOAT(op)                                                                        \
    BINARY_KERNEL_AS(TL_CPU_WIDE, op##_f32, float, float, float, LOAD_SAME, STORE_SAME,            \
                     NUMBERS(float), MATH_F(op))                                                   \
    BINARY_KERNEL_SETUP(op##_f64, double, double, double, LOAD_SAME, STORE_SAME, NUMBERS(double),  \
                        MATH_D(op))                                                                \
    BINARY_KERNEL_SETUP(op##_bf16, uint16_t, uint16_t, float, tl_bf16_load, STORE_BF16,            \
                        NUMBERS(float), MATH_F(op))                                                \
    BINARY_KERNEL_SETUP(op##_f16, uint16_t, uint16_t, float, tl_f16_load, STORE_F16,               \
                        NUMBERS(float), MATH_F(op))
#define POINTWISE_INTEGER(op)                                                                      \
    BINARY_KERNEL_SETUP(op##_i32, int32_t, int32_t, int64_t, LOAD_SAME, STORE_I32,                 \
                        NUMBERS(int64_t), MATH_I(op))                                              \
    BINARY_KERNEL_SETUP(op##_i64, int64_t, int64_t, int64_t, LOAD_SAME, STORE_SAME,                \
                        NUMBERS(int64_t), MATH_I(op))
#define POINTWISE_BINARY_KERNELS_FLOAT(op)      POINTWISE_FLOAT(op)
#define POINTWISE_BINARY_KERNELS_FLOAT_ONLY(op) POINTWISE_FLOAT(op)
#define POINTWISE_BINARY_KERNELS_INT(op)        POINTWISE_FLOAT(op) POINTWISE_INTEGER(op)
#define POINTWISE_BINARY_KERNELS_BOOL_OUT(op)                                                      \
    BINARY_KERNEL_SETUP(op##_f32, uint8_t, float, float, LOAD_SAME, STORE_TRUTH, NUMBERS(float),   \
                        MATH_F(op))                                                                \
    BINARY_KERNEL_SETUP(op##_f64, uint8_t, double, double, LOAD_SAME, STORE_TRUTH,                 \
                        NUMBERS(double), MATH_D(op))                                               \
    BINARY_KERNEL_SETUP(op##_bf16, uint8_t, uint16_t, float, tl_bf16_load, STORE_TRUTH,            \
                        NUMBERS(float), MATH_F(op))                                                \
    BINARY_KERNEL_SETUP(op##_f16, uint8_t, uint16_t, float, tl_f16_load, STORE_TRUTH,              \
                        NUMBERS(float), MATH_F(op))                                                \
    BINARY_KERNEL_SETUP(op##_i32, uint8_t, int32_t, int64_t, LOAD_SAME, STORE_TRUTH,               \
                        NUMBERS(int64_t), MATH_I(op))                                              \
    BINARY_KERNEL_SETUP(op##_i64, uint8_t, int64_t, int64_t, LOAD_SAME, STORE_TRUTH,               \
                        NUMBERS(int64_t), MATH_I(op))                                              \
    BINARY_KERNEL_SETUP(op##_b8, uint8_t, uint8_t, int64_t, LOAD_BOOL, STORE_TRUTH,                \
                        NUMBERS(int64_t), MATH_I(op))
#define POINTWISE_BINARY_KERNELS_BITS(op)                                                          \
    POINTWISE_INTEGER(op)                                                                          \
    BINARY_KERNEL_SETUP(op##_b8, uint8_t, uint8_t, int64_t, LOAD_BOOL, STORE_BIT,                  \
                        NUMBERS(int64_t), MATH_I(op))
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    POINTWISE_BINARY_KERNELS_##dtypes(name)
#include "tlua/ops.def"

INT_KERNELS(add, tl_add_i32(a, b), tl_add_i64(a, b))
INT_KERNELS(sub, tl_sub_i32(a, b), tl_sub_i64(a, b))
INT_KERNELS(mul, tl_mul_i32(a, b), tl_mul_i64(a, b))
INT_KERNELS(pow, (int32_t)(uint32_t)tl_pow_int(a, b), (int64_t)tl_pow_int(a, b))

/* ---- comparisons (NaN compares unequal to everything) --------------------- */
COMPARE_KERNELS(eq, a == b)
COMPARE_KERNELS(ne, a != b)
COMPARE_KERNELS(lt, a < b)
COMPARE_KERNELS(le, a <= b)
COMPARE_KERNELS(gt, a > b)
COMPARE_KERNELS(ge, a >= b)

/* ---- the table ----------------------------------------------------------- */
#define COMPARE_ENTRIES(op)                                                                        \
    TL_CPU_KERNELS_NUMERIC(op, binary), TL_KERNEL(op, TL_DTYPES_BOOL, binary, op##_bool)

static const tl_kernel_entry entries[] = {
    TL_CPU_KERNELS_NUMERIC(add, binary),
    TL_CPU_KERNELS_NUMERIC(sub, binary),
    TL_CPU_KERNELS_NUMERIC(mul, binary),
    TL_CPU_KERNELS_NUMERIC(pow, binary),
    COMPARE_ENTRIES(eq),
    COMPARE_ENTRIES(ne),
    COMPARE_ENTRIES(lt),
    COMPARE_ENTRIES(le),
    COMPARE_ENTRIES(gt),
    COMPARE_ENTRIES(ge),
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    TL_POINTWISE_ENTRIES_##dtypes(name, binary),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cpu_binary_table, TL_DEVICE_CPU, entries);
