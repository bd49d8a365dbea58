/* CPU unary elementwise kernels: neg, abs, relu, pow_scalar, clamp and every pointwise op.
   Floating dtypes compute in their own type (bf16/f16 in f32, rounded to nearest even);
   neg, abs, relu, clamp, pow_scalar also for int32/int64; the pointwise ops in the dtypes of
   their row's rule (tlua/ops.def: INT rows on integers, BOOL_OUT rows on every dtype giving
   bool, BITS rows on integers and bool). */
#include <math.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/arith.h"
#include "kernels/pointwise.h"

/* element <-> compute type */
#define LOAD_SAME(v)  (v)
#define LOAD_BOOL(v)  ((int64_t)((v) != 0))
#define STORE_SAME(v) (v)
#define STORE_BF16(v) tl_bf16_round(v)
#define STORE_F16(v)  tl_f16_round(v)
#define STORE_I32(v)  ((int32_t)(uint32_t)(uint64_t)(v)) /* wraps */
#define STORE_BOOL(v) ((uint8_t)((v) != 0))
#define STORE_BIT(v)  ((uint8_t)((v)&1)) /* a BITS row's bool: the low bit */

/* Defines the kernel `name`: out (TO) = STORE(EXPR), EXPR of x = LOAD(in of TI) of compute
   type CT, after SETUP (loop-invariant locals from args). A flat loop for dense operands. */
#define UNARY_KERNEL_TO(name, TO, TI, CT, LOAD, STORE, SETUP, EXPR)                                \
    UNARY_KERNEL_AS(, name, TO, TI, CT, LOAD, STORE, SETUP, EXPR)
/* the same, the loop declared with ATTR (TL_CPU_WIDE or nothing) */
#define UNARY_KERNEL_AS(ATTR, name, TO, TI, CT, LOAD, STORE, SETUP, EXPR)                          \
    ATTR static void name##_loop(char **p, const int64_t *s, int64_t n, const void *ctx) {         \
        const tl_op_args *args = ctx;                                                              \
        (void)args;                                                                                \
        SETUP                                                                                      \
        if (s[0] == (int64_t)sizeof(TO) && s[1] == (int64_t)sizeof(TI)) {                          \
            TO *o = (TO *)p[0];                                                                    \
            const TI *in = (const TI *)p[1];                                                       \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT x = LOAD(in[i]);                                                                \
                o[i] = STORE(EXPR);                                                                \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT x = LOAD(*(const TI *)(p[1] + i * s[1]));                                       \
                *(TO *)(p[0] + i * s[0]) = STORE(EXPR);                                            \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static tl_status name(tl_tensor *out, const tl_tensor *in, const tl_op_args *args) {           \
        tl_cpu_for_each(2, (const tl_tensor *const[]){out, in}, name##_loop, args);                \
        return TL_OK;                                                                              \
    }
#define UNARY_KERNEL(name, T, CT, LOAD, STORE, SETUP, EXPR)                                        \
    UNARY_KERNEL_TO(name, T, T, CT, LOAD, STORE, SETUP, EXPR)

/* The four floating kernels of an op: EXPR_F in float (f32, bf16, f16), EXPR_D in double; the
   float32 loop also for AVX2 (TL_CPU_WIDE). */
#define FLOAT_KERNELS(op, SETUP_F, EXPR_F, SETUP_D, EXPR_D)                                        \
    UNARY_KERNEL_AS(TL_CPU_WIDE, op##_f32, float, float, float, LOAD_SAME, STORE_SAME, SETUP_F,    \
                    EXPR_F)                                                                        \
    UNARY_KERNEL(op##_f64, double, double, LOAD_SAME, STORE_SAME, SETUP_D, EXPR_D)                 \
    UNARY_KERNEL(op##_bf16, uint16_t, float, tl_bf16_load, STORE_BF16, SETUP_F, EXPR_F)            \
    UNARY_KERNEL(op##_f16, uint16_t, float, tl_f16_load, STORE_F16, SETUP_F, EXPR_F)

#define INT_KERNELS(op, SETUP_32, SETUP_64, EXPR_32, EXPR_64)                                      \
    UNARY_KERNEL(op##_i32, int32_t, int32_t, LOAD_SAME, STORE_SAME, SETUP_32, EXPR_32)             \
    UNARY_KERNEL(op##_i64, int64_t, int64_t, LOAD_SAME, STORE_SAME, SETUP_64, EXPR_64)

#define NO_SETUP

/* ---- floating: the math of kernels/arith.h ------------------------------ */
#define SETUP_POW(CT) const CT e = (CT)args->scalar[0];
#define SETUP_CLAMP(CT)                                                                            \
    const CT lo = args->has_scalar[0] ? (CT)args->scalar[0] : (CT)-INFINITY;                       \
    const CT hi = args->has_scalar[1] ? (CT)args->scalar[1] : (CT)INFINITY;

FLOAT_KERNELS(neg, NO_SETUP, -x, NO_SETUP, -x)
FLOAT_KERNELS(abs, NO_SETUP, fabsf(x), NO_SETUP, fabs(x))
FLOAT_KERNELS(relu, NO_SETUP, tl_relu_f(x), NO_SETUP, tl_relu_d(x))
FLOAT_KERNELS(pow_scalar, SETUP_POW(float), tl_pow_f(x, e), SETUP_POW(double), tl_pow_d(x, e))
FLOAT_KERNELS(clamp, SETUP_CLAMP(float), tl_clamp_f(x, lo, hi), SETUP_CLAMP(double),
              tl_clamp_d(x, lo, hi))

/* ---- pointwise: every POINTWISE row of ops.def, the math from kernels/pointwise.h, by the
   row's dtypes rule; the numbers p0..p2 from args (resolved by the op layer) ---- */
#define SETUP_NUMBERS(CT)                                                                          \
    const CT p0 = args ? (CT)args->scalar[0] : 0;                                                  \
    const CT p1 = args ? (CT)args->scalar[1] : 0;                                                  \
    const CT p2 = args ? (CT)args->scalar[2] : 0;
#define SETUP_INT_NUMBERS                                                                          \
    const int64_t p0 = args ? tl_double_to_i64(args->scalar[0]) : 0;                               \
    const int64_t p1 = args ? tl_double_to_i64(args->scalar[1]) : 0;                               \
    const int64_t p2 = args ? tl_double_to_i64(args->scalar[2]) : 0;
#define MATH_F(op) tl_pointwise_##op##_f(x, p0, p1, p2)
#define MATH_D(op) tl_pointwise_##op##_d(x, p0, p1, p2)
#define MATH_I(op) tl_pointwise_##op##_i(x, p0, p1, p2)

#define POINTWISE_KERNELS_FLOAT(op)                                                                \
    FLOAT_KERNELS(op, SETUP_NUMBERS(float), MATH_F(op), SETUP_NUMBERS(double), MATH_D(op))
#define POINTWISE_KERNELS_FLOAT_ONLY(op) POINTWISE_KERNELS_FLOAT(op)
#define POINTWISE_KERNELS_INT(op)                                                                  \
    POINTWISE_KERNELS_FLOAT(op)                                                                    \
    UNARY_KERNEL(op##_i32, int32_t, int64_t, LOAD_SAME, STORE_I32, SETUP_INT_NUMBERS, MATH_I(op))  \
    UNARY_KERNEL(op##_i64, int64_t, int64_t, LOAD_SAME, STORE_SAME, SETUP_INT_NUMBERS, MATH_I(op))
#define POINTWISE_KERNELS_BOOL_OUT(op)                                                             \
    UNARY_KERNEL_TO(op##_f32, uint8_t, float, float, LOAD_SAME, STORE_BOOL, SETUP_NUMBERS(float),  \
                    MATH_F(op))                                                                    \
    UNARY_KERNEL_TO(op##_f64, uint8_t, double, double, LOAD_SAME, STORE_BOOL,                      \
                    SETUP_NUMBERS(double), MATH_D(op))                                             \
    UNARY_KERNEL_TO(op##_bf16, uint8_t, uint16_t, float, tl_bf16_load, STORE_BOOL,                 \
                    SETUP_NUMBERS(float), MATH_F(op))                                              \
    UNARY_KERNEL_TO(op##_f16, uint8_t, uint16_t, float, tl_f16_load, STORE_BOOL,                   \
                    SETUP_NUMBERS(float), MATH_F(op))                                              \
    UNARY_KERNEL_TO(op##_i32, uint8_t, int32_t, int64_t, LOAD_SAME, STORE_BOOL, SETUP_INT_NUMBERS, \
                    MATH_I(op))                                                                    \
    UNARY_KERNEL_TO(op##_i64, uint8_t, int64_t, int64_t, LOAD_SAME, STORE_BOOL, SETUP_INT_NUMBERS, \
                    MATH_I(op))                                                                    \
    UNARY_KERNEL(op##_b8, uint8_t, int64_t, LOAD_BOOL, STORE_BOOL, SETUP_INT_NUMBERS, MATH_I(op))
#define POINTWISE_KERNELS_BITS(op)                                                                 \
    UNARY_KERNEL(op##_i32, int32_t, int64_t, LOAD_SAME, STORE_I32, SETUP_INT_NUMBERS, MATH_I(op))  \
    UNARY_KERNEL(op##_i64, int64_t, int64_t, LOAD_SAME, STORE_SAME, SETUP_INT_NUMBERS, MATH_I(op)) \
    UNARY_KERNEL(op##_b8, uint8_t, int64_t, LOAD_BOOL, STORE_BIT, SETUP_INT_NUMBERS, MATH_I(op))
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec) POINTWISE_KERNELS_##dtypes(name)
#include "tlua/ops.def"

/* ---- integer: wrapping arithmetic of kernels/arith.h ------------------------- */
/* the op layer sends only integral exponents >= 0 and integral bounds here */
#define SETUP_IPOW const int64_t e = tl_double_to_i64(args->scalar[0]);
#define SETUP_CLAMP_I32                                                                            \
    const int32_t lo = args->has_scalar[0] ? tl_double_to_i32(args->scalar[0]) : INT32_MIN;        \
    const int32_t hi = args->has_scalar[1] ? tl_double_to_i32(args->scalar[1]) : INT32_MAX;
#define SETUP_CLAMP_I64                                                                            \
    const int64_t lo = args->has_scalar[0] ? tl_double_to_i64(args->scalar[0]) : INT64_MIN;        \
    const int64_t hi = args->has_scalar[1] ? tl_double_to_i64(args->scalar[1]) : INT64_MAX;

INT_KERNELS(neg, NO_SETUP, NO_SETUP, tl_neg_i32(x), tl_neg_i64(x))
INT_KERNELS(abs, NO_SETUP, NO_SETUP, tl_abs_i32(x), tl_abs_i64(x))
INT_KERNELS(relu, NO_SETUP, NO_SETUP, (int32_t)tl_relu_i64(x), tl_relu_i64(x))
INT_KERNELS(pow_scalar, SETUP_IPOW, SETUP_IPOW, (int32_t)(uint32_t)tl_pow_int(x, e),
            (int64_t)tl_pow_int(x, e))
INT_KERNELS(clamp, SETUP_CLAMP_I32, SETUP_CLAMP_I64, (int32_t)tl_clamp_i64(x, lo, hi),
            tl_clamp_i64(x, lo, hi))

/* ---- the table ----------------------------------------------------------- */
static const tl_kernel_entry entries[] = {
    TL_CPU_KERNELS_NUMERIC(neg, unary),   TL_CPU_KERNELS_NUMERIC(abs, unary),
    TL_CPU_KERNELS_NUMERIC(relu, unary),  TL_CPU_KERNELS_NUMERIC(pow_scalar, unary),
    TL_CPU_KERNELS_NUMERIC(clamp, unary),
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    TL_POINTWISE_ENTRIES_##dtypes(name, unary),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cpu_unary_table, TL_DEVICE_CPU, entries);
