/* CPU unary elementwise kernels: neg, abs, relu, pow_scalar, clamp and every pointwise op.
   Floating dtypes compute in their own type (bf16/f16 in f32, rounded to nearest even);
   neg, abs, relu, clamp, pow_scalar also for int32/int64. */
#include <math.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/pointwise.h"

/* element <-> compute type */
#define LOAD_SAME(v)  (v)
#define STORE_SAME(v) (v)
#define STORE_BF16(v) tl_bf16_round(v)
#define STORE_F16(v)  tl_f16_round(v)

/* Defines the kernel `name`: out = STORE(EXPR), EXPR of x = LOAD(in) of compute type CT,
   after SETUP (loop-invariant locals from args). A flat loop for dense operands. */
#define UNARY_KERNEL(name, T, CT, LOAD, STORE, SETUP, EXPR)                                        \
    static void name##_loop(char **p, const int64_t *s, int64_t n, const void *ctx) {              \
        const tl_op_args *args = ctx;                                                              \
        (void)args;                                                                                \
        SETUP                                                                                      \
        if (s[0] == (int64_t)sizeof(T) && s[1] == (int64_t)sizeof(T)) {                            \
            T *o = (T *)p[0];                                                                      \
            const T *in = (const T *)p[1];                                                         \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT x = LOAD(in[i]);                                                                \
                o[i] = STORE(EXPR);                                                                \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                CT x = LOAD(*(const T *)(p[1] + i * s[1]));                                        \
                *(T *)(p[0] + i * s[0]) = STORE(EXPR);                                             \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static tl_status name(tl_tensor *out, const tl_tensor *in, const tl_op_args *args) {           \
        tl_cpu_for_each(2, (const tl_tensor *const[]){out, in}, name##_loop, args);                \
        return TL_OK;                                                                              \
    }

/* The four floating kernels of an op: EXPR_F in float (f32, bf16, f16), EXPR_D in double. */
#define FLOAT_KERNELS(op, SETUP_F, EXPR_F, SETUP_D, EXPR_D)                                        \
    UNARY_KERNEL(op##_f32, float, float, LOAD_SAME, STORE_SAME, SETUP_F, EXPR_F)                   \
    UNARY_KERNEL(op##_f64, double, double, LOAD_SAME, STORE_SAME, SETUP_D, EXPR_D)                 \
    UNARY_KERNEL(op##_bf16, uint16_t, float, tl_bf16_load, STORE_BF16, SETUP_F, EXPR_F)            \
    UNARY_KERNEL(op##_f16, uint16_t, float, tl_f16_load, STORE_F16, SETUP_F, EXPR_F)

#define INT_KERNELS(op, SETUP_32, SETUP_64, EXPR)                                                  \
    UNARY_KERNEL(op##_i32, int32_t, int32_t, LOAD_SAME, STORE_SAME, SETUP_32, EXPR)                \
    UNARY_KERNEL(op##_i64, int64_t, int64_t, LOAD_SAME, STORE_SAME, SETUP_64, EXPR)

#define NO_SETUP

/* ---- floating ------------------------------------------------------------ */
/* max(x, 0) with NaN kept and -0 -> +0 */
static inline float relu_f(float x) {
    return x > 0 || x != x ? x : 0.0f;
}
static inline double relu_d(double x) {
    return x > 0 || x != x ? x : 0.0;
}
static inline float pow_f(float x, float e) {
    return e == 2.0f ? x * x : powf(x, e);
}
static inline double pow_d(double x, double e) {
    return e == 2.0 ? x * x : pow(x, e);
}
/* min(max(x, lo), hi) with NaN kept; absent bounds are infinite */
static inline float clamp_f(float x, float lo, float hi) {
    float y = x < lo ? lo : x;
    return y > hi ? hi : y;
}
static inline double clamp_d(double x, double lo, double hi) {
    double y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

#define SETUP_POW(CT) const CT e = (CT)args->scalar[0];
#define SETUP_CLAMP(CT)                                                                            \
    const CT lo = args->has_scalar[0] ? (CT)args->scalar[0] : (CT)-INFINITY;                       \
    const CT hi = args->has_scalar[1] ? (CT)args->scalar[1] : (CT)INFINITY;

FLOAT_KERNELS(neg, NO_SETUP, -x, NO_SETUP, -x)
FLOAT_KERNELS(abs, NO_SETUP, fabsf(x), NO_SETUP, fabs(x))
FLOAT_KERNELS(relu, NO_SETUP, relu_f(x), NO_SETUP, relu_d(x))
FLOAT_KERNELS(pow_scalar, SETUP_POW(float), pow_f(x, e), SETUP_POW(double), pow_d(x, e))
FLOAT_KERNELS(clamp, SETUP_CLAMP(float), clamp_f(x, lo, hi), SETUP_CLAMP(double),
              clamp_d(x, lo, hi))

/* ---- pointwise: every POINTWISE row of ops.def, the math from kernels/pointwise.h ---- */
#define POINTWISE_KERNELS(op)                                                                      \
    FLOAT_KERNELS(op, NO_SETUP, tl_pointwise_##op##_f(x), NO_SETUP, tl_pointwise_##op##_d(x))
#define OP(name, family, differentiable, backward)                                                 \
    TL_IF_FAMILY(family, POINTWISE, POINTWISE_KERNELS, name)
#include "tlua/ops.def"
#undef OP

/* ---- integer: wrapping arithmetic (through unsigned, no undefined behaviour) ---- */
static inline int32_t wrap_neg32(int32_t x) {
    return (int32_t)(0u - (uint32_t)x);
}
static inline int64_t wrap_neg64(int64_t x) {
    return (int64_t)(0u - (uint64_t)x);
}
/* x ^ e for e >= 0 by squaring, wrapping */
static inline uint64_t ipow(uint64_t x, int64_t e) {
    uint64_t r = 1;
    for (; e > 0; e >>= 1, x *= x)
        if (e & 1) r *= x;
    return r;
}
static inline int32_t clamp32(int32_t x, int32_t lo, int32_t hi) {
    int32_t y = x < lo ? lo : x;
    return y > hi ? hi : y;
}
static inline int64_t clamp64(int64_t x, int64_t lo, int64_t hi) {
    int64_t y = x < lo ? lo : x;
    return y > hi ? hi : y;
}

/* the op layer sends only integral exponents >= 0 and integral bounds here */
#define SETUP_IPOW const int64_t e = tl_double_to_i64(args->scalar[0]);
#define SETUP_CLAMP_I32                                                                            \
    const int32_t lo = args->has_scalar[0] ? tl_double_to_i32(args->scalar[0]) : INT32_MIN;        \
    const int32_t hi = args->has_scalar[1] ? tl_double_to_i32(args->scalar[1]) : INT32_MAX;
#define SETUP_CLAMP_I64                                                                            \
    const int64_t lo = args->has_scalar[0] ? tl_double_to_i64(args->scalar[0]) : INT64_MIN;        \
    const int64_t hi = args->has_scalar[1] ? tl_double_to_i64(args->scalar[1]) : INT64_MAX;

UNARY_KERNEL(neg_i32, int32_t, int32_t, LOAD_SAME, STORE_SAME, NO_SETUP, wrap_neg32(x))
UNARY_KERNEL(neg_i64, int64_t, int64_t, LOAD_SAME, STORE_SAME, NO_SETUP, wrap_neg64(x))
UNARY_KERNEL(abs_i32, int32_t, int32_t, LOAD_SAME, STORE_SAME, NO_SETUP, x < 0 ? wrap_neg32(x) : x)
UNARY_KERNEL(abs_i64, int64_t, int64_t, LOAD_SAME, STORE_SAME, NO_SETUP, x < 0 ? wrap_neg64(x) : x)
INT_KERNELS(relu, NO_SETUP, NO_SETUP, x > 0 ? x : 0)
UNARY_KERNEL(pow_scalar_i32, int32_t, int32_t, LOAD_SAME, STORE_SAME, SETUP_IPOW,
             (int32_t)(uint32_t)ipow((uint64_t)(int64_t)x, e))
UNARY_KERNEL(pow_scalar_i64, int64_t, int64_t, LOAD_SAME, STORE_SAME, SETUP_IPOW,
             (int64_t)ipow((uint64_t)x, e))
UNARY_KERNEL(clamp_i32, int32_t, int32_t, LOAD_SAME, STORE_SAME, SETUP_CLAMP_I32,
             clamp32(x, lo, hi))
UNARY_KERNEL(clamp_i64, int64_t, int64_t, LOAD_SAME, STORE_SAME, SETUP_CLAMP_I64,
             clamp64(x, lo, hi))

/* ---- the table ----------------------------------------------------------- */
#define ENTRY(op, dtype, suffix)                                                                   \
    {                                                                                              \
        TL_OP_##op, dtype, "cpu_" #op "_" #suffix, {                                               \
            .unary = op##_##suffix                                                                 \
        }                                                                                          \
    }
#define FLOAT_ENTRIES(op)                                                                          \
    ENTRY(op, TL_F32, f32), ENTRY(op, TL_F64, f64), ENTRY(op, TL_BF16, bf16), ENTRY(op, TL_F16, f16)
#define INT_ENTRIES(op) ENTRY(op, TL_I32, i32), ENTRY(op, TL_I64, i64)

#define POINTWISE_ENTRIES(op) FLOAT_ENTRIES(op),

static const tl_kernel_entry entries[] = {
    FLOAT_ENTRIES(neg),   INT_ENTRIES(neg),   FLOAT_ENTRIES(abs),        INT_ENTRIES(abs),
    FLOAT_ENTRIES(relu),  INT_ENTRIES(relu),  FLOAT_ENTRIES(pow_scalar), INT_ENTRIES(pow_scalar),
    FLOAT_ENTRIES(clamp), INT_ENTRIES(clamp),
#define OP(name, family, differentiable, backward)                                                 \
    TL_IF_FAMILY(family, POINTWISE, POINTWISE_ENTRIES, name)
#include "tlua/ops.def"
#undef OP
};

TL_KERNEL_TABLE(tl_cpu_unary_table, TL_DEVICE_CPU, entries);
