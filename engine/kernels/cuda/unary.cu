/* CUDA unary elementwise kernels and their table, as cpu/unary.c: neg, abs, relu, pow_scalar,
   clamp for floating dtypes (bf16/f16 in f32, rounded to nearest even) and int32/int64
   (wrapping); every pointwise op in the dtypes of its row's rule (tlua/ops.def: floating; INT rows
   on integers too; BOOL_OUT rows on every dtype giving bool; BITS rows on integers and bool).
   The math is kernels/arith.h's and kernels/pointwise.h's, shared with the CPU. */
#include <math.h>

#include <type_traits>

#include "kernels/arith.h"
#include "kernels/pointwise.h"

#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/elementwise.cuh"

/* storage -> compute -> math -> storage */
template <class E, class M> struct tl_unary_fn {
    typedef typename E::T out_t;
    typedef typename E::T in_t;
    M m;
    __device__ out_t operator()(in_t x) const { return E::store(m(E::load(x))); }
};

/* ---- the math of each op in float, double, int32 and int64 ------------------------------- */
struct m_neg {
    __device__ float operator()(float x) const { return -x; }
    __device__ double operator()(double x) const { return -x; }
    __device__ int32_t operator()(int32_t x) const { return tl_neg_i32(x); }
    __device__ int64_t operator()(int64_t x) const { return tl_neg_i64(x); }
};
struct m_abs {
    __device__ float operator()(float x) const { return fabsf(x); }
    __device__ double operator()(double x) const { return fabs(x); }
    __device__ int32_t operator()(int32_t x) const { return tl_abs_i32(x); }
    __device__ int64_t operator()(int64_t x) const { return tl_abs_i64(x); }
};
struct m_relu {
    __device__ float operator()(float x) const { return tl_relu_f(x); }
    __device__ double operator()(double x) const { return tl_relu_d(x); }
    __device__ int32_t operator()(int32_t x) const { return (int32_t)tl_relu_i64(x); }
    __device__ int64_t operator()(int64_t x) const { return tl_relu_i64(x); }
};
/* the op layer sends only integral exponents >= 0 and integral bounds for integers */
template <class C> struct m_pow {
    C e;        /* floating */
    int64_t ie; /* integer */
    __device__ C operator()(C x) const {
        if constexpr (std::is_integral<C>::value && sizeof(C) == 4)
            return (int32_t)(uint32_t)tl_pow_int(x, ie);
        else if constexpr (std::is_integral<C>::value)
            return (int64_t)tl_pow_int(x, ie);
        else if constexpr (sizeof(C) == 4)
            return tl_pow_f(x, e);
        else
            return tl_pow_d(x, e);
    }
};
template <class C> struct m_clamp {
    C lo, hi;
    __device__ C operator()(C x) const {
        if constexpr (std::is_integral<C>::value)
            return (C)tl_clamp_i64(x, lo, hi);
        else if constexpr (sizeof(C) == 4)
            return tl_clamp_f(x, lo, hi);
        else
            return tl_clamp_d(x, lo, hi);
    }
};

/* every POINTWISE row of ops.def: the math of kernels/pointwise.h with its numbers, in float
   or double (floating rows) and its integer line in int64 (INT, BOOL_OUT and BITS rows) */
template <class C> struct tl_numbers { C p0, p1, p2; };
#define POINTWISE_FLOAT_MATH(name)                                                                 \
    __device__ float operator()(float x) const {                                                   \
        return tl_pointwise_##name##_f(x, f.p0, f.p1, f.p2);                                       \
    }                                                                                              \
    __device__ double operator()(double x) const {                                                 \
        return tl_pointwise_##name##_d(x, d.p0, d.p1, d.p2);                                       \
    }
#define POINTWISE_INT_MATH(name)                                                                   \
    __device__ int64_t integer(int64_t x) const {                                                  \
        return tl_pointwise_##name##_i(x, i.p0, i.p1, i.p2);                                       \
    }
#define POINTWISE_MATH_FLOAT(name)      POINTWISE_FLOAT_MATH(name)
#define POINTWISE_MATH_FLOAT_ONLY(name) POINTWISE_FLOAT_MATH(name)
#define POINTWISE_MATH_INT(name)        POINTWISE_FLOAT_MATH(name) POINTWISE_INT_MATH(name)
#define POINTWISE_MATH_BOOL_OUT(name)   POINTWISE_FLOAT_MATH(name) POINTWISE_INT_MATH(name)
#define POINTWISE_MATH_BITS(name)       POINTWISE_INT_MATH(name)
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    struct m_##name {                                                                              \
        tl_numbers<float> f;                                                                       \
        tl_numbers<double> d;                                                                      \
        tl_numbers<int64_t> i;                                                                     \
        POINTWISE_MATH_##dtypes(name)                                                              \
    };
#include "tlua/ops.def"

/* A pointwise row's functor over storage E: floating dtypes through the float or double math,
   integer and bool ones through the integer line (int32 wraps, a bool keeps the low bit); a
   Predicate (BOOL_OUT row) stores whether the result is non-zero, as bool. */
template <class E, class M, bool Predicate> struct tl_pointwise_fn {
    typedef typename std::conditional<Predicate, uint8_t, typename E::T>::type out_t;
    typedef typename E::T in_t;
    M m;
    __device__ out_t operator()(in_t x) const {
        if constexpr (((1u << E::dtype) & TL_CUDA_FLOATING) != 0) {
            const auto r = m(E::load(x));
            if constexpr (Predicate)
                return r != 0;
            else
                return E::store(r);
        } else {
            const int64_t r = m.integer((int64_t)E::load(x));
            if constexpr (Predicate)
                return r != 0;
            else if constexpr (E::dtype == TL_CUDA_BOOL)
                return (uint8_t)(r & 1);
            else if constexpr (sizeof(typename E::T) == 4)
                return (int32_t)(uint32_t)(uint64_t)r;
            else
                return r;
        }
    }
};

/* the dtypes each rule has kernels for */
enum : unsigned {
    RULE_DTYPES_FLOAT = TL_CUDA_FLOATING,
    RULE_DTYPES_FLOAT_ONLY = TL_CUDA_FLOATING,
    RULE_DTYPES_INT = TL_CUDA_NUMERIC,
    RULE_DTYPES_BOOL_OUT = TL_CUDA_ALL,
    RULE_DTYPES_BITS = TL_CUDA_INTEGER | 1u << TL_CUDA_BOOL,
};

/* ---- dispatch ---------------------------------------------------------------------------- */
template <class E, class M> static tl_status launch(const tl_cuda_launch *l, M m) {
    return tl_cuda_elementwise<1>(l, tl_unary_fn<E, M>{m});
}

/* a bound as the compute type: absent bounds are infinite (floating) or the type's limits,
   integral ones saturate */
template <class C> static C bound(bool has, double v, bool upper) {
    if constexpr (std::is_integral<C>::value) {
        const int64_t min = sizeof(C) == 4 ? INT32_MIN : INT64_MIN;
        const int64_t max = sizeof(C) == 4 ? INT32_MAX : INT64_MAX;
        int64_t b = has ? tl_double_to_i64(v) : upper ? max : min;
        return (C)(b < min ? min : b > max ? max : b);
    } else {
        return has ? (C)v : upper ? (C)INFINITY : (C)-INFINITY;
    }
}

/* a pointwise op's functor M with the numbers s, over the operands of l for E's dtype (its rule's
   dtypes only: the registry sends no other) */
template <class E, class M, unsigned Dtypes, bool Predicate>
static tl_status launch_pointwise(const tl_cuda_launch *l, const double *s) {
    M m;
    m.f = {(float)s[0], (float)s[1], (float)s[2]};
    m.d = {s[0], s[1], s[2]};
    m.i = {tl_double_to_i64(s[0]), tl_double_to_i64(s[1]), tl_double_to_i64(s[2])};
    if constexpr (((Dtypes >> E::dtype) & 1u) == 0)
        return tl_cuda_no_kernel(l->op);
    else
        return tl_cuda_elementwise<1>(l, tl_pointwise_fn<E, M, Predicate>{m});
}

/* op's functor for the dtype, over the operands of l; s and has: the op's scalars */
static tl_status launch_unary(tl_op op, int dtype, const tl_cuda_launch *l, const double *s,
                              const bool *has) {
    return tl_cuda_dispatch<TL_CUDA_ALL>(dtype, l->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::C C;
        switch (op) {
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    case TL_OP_##name:                                                                             \
        return launch_pointwise<E, m_##name, RULE_DTYPES_##dtypes,                                 \
                                RULE_DTYPES_##dtypes == RULE_DTYPES_BOOL_OUT>(l, s);
#include "tlua/ops.def"
        default:
            break;
        }
        if constexpr (E::dtype != TL_CUDA_BOOL) {
            switch (op) {
            case TL_OP_neg:
                return launch<E>(l, m_neg{});
            case TL_OP_abs:
                return launch<E>(l, m_abs{});
            case TL_OP_relu:
                return launch<E>(l, m_relu{});
            case TL_OP_pow_scalar:
                return launch<E>(l, m_pow<C>{std::is_integral<C>::value ? (C)0 : (C)s[0],
                                             tl_double_to_i64(s[0])});
            case TL_OP_clamp:
                return launch<E>(
                    l, m_clamp<C>{bound<C>(has[0], s[0], false), bound<C>(has[1], s[1], true)});
            default:
                break;
            }
        }
        return tl_cuda_no_kernel(l->op);
    });
}

/* ---- the table: one function per op serves every dtype (launch_unary dispatches) ---------- */
static tl_status run_unary(tl_op op, tl_tensor *out, const tl_tensor *in, const tl_op_args *args) {
    static const double no_scalar[3] = {0, 0, 0};
    static const bool no_flags[3] = {false, false, false};
    const tl_tensor *operands[] = {out, in};
    tl_cuda_launch l;
    TL_TRY(tl_cuda_launch_of(op, 2, operands, &l));
    return launch_unary(op, tl_cuda_dtype_of(in), &l, args ? args->scalar : no_scalar,
                        args ? args->has_scalar : no_flags);
}

template <tl_op OP>
static tl_status cuda_unary(tl_tensor *out, const tl_tensor *in, const tl_op_args *args) {
    return run_unary(OP, out, in, args);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(neg, TL_DTYPES_NUMERIC, unary, cuda_unary<TL_OP_neg>),
    TL_KERNEL(abs, TL_DTYPES_NUMERIC, unary, cuda_unary<TL_OP_abs>),
    TL_KERNEL(relu, TL_DTYPES_NUMERIC, unary, cuda_unary<TL_OP_relu>),
    TL_KERNEL(pow_scalar, TL_DTYPES_NUMERIC, unary, cuda_unary<TL_OP_pow_scalar>),
    TL_KERNEL(clamp, TL_DTYPES_NUMERIC, unary, cuda_unary<TL_OP_clamp>),
/* and every POINTWISE row of ops.def, for the dtypes of its rule */
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    TL_KERNEL(name, TL_POINTWISE_DTYPES_##dtypes, unary, cuda_unary<TL_OP_##name>),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cuda_unary_table, TL_DEVICE_CUDA, entries);
