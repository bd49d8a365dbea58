/* CUDA binary elementwise kernels and their table, as cpu/binary.c: add, sub, mul, pow for
   floating dtypes (bf16/f16 in f32) and int32/int64 (wrapping); the pointwise binary ops in the
   dtypes of their row's rule (tlua/ops.def); eq, ne, lt, le, gt, ge for every dtype, giving bool.
   Keyed by the inputs' dtype. The math is kernels/arith.h's and kernels/pointwise.h's, shared
   with the CPU. */
#include <math.h>

#include <type_traits>

#include "kernels/arith.h"
#include "kernels/pointwise.h"

#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/elementwise.cuh"

template <class E, class M> struct tl_binary_fn {
    typedef typename E::T out_t;
    typedef typename E::T in_t;
    __device__ out_t operator()(in_t a, in_t b) const {
        return E::store(M()(E::load(a), E::load(b)));
    }
};

template <class E, class M> struct tl_compare_fn {
    typedef uint8_t out_t;
    typedef typename E::T in_t;
    __device__ uint8_t operator()(in_t a, in_t b) const {
        return (uint8_t)(M()(E::load(a), E::load(b)) ? 1 : 0);
    }
};

/* ---- arithmetic in float, double, int32 and int64 ---------------------------------------- */
struct m_add {
    __device__ float operator()(float a, float b) const { return a + b; }
    __device__ double operator()(double a, double b) const { return a + b; }
    __device__ int32_t operator()(int32_t a, int32_t b) const { return tl_add_i32(a, b); }
    __device__ int64_t operator()(int64_t a, int64_t b) const { return tl_add_i64(a, b); }
};
struct m_sub {
    __device__ float operator()(float a, float b) const { return a - b; }
    __device__ double operator()(double a, double b) const { return a - b; }
    __device__ int32_t operator()(int32_t a, int32_t b) const { return tl_sub_i32(a, b); }
    __device__ int64_t operator()(int64_t a, int64_t b) const { return tl_sub_i64(a, b); }
};
struct m_mul {
    __device__ float operator()(float a, float b) const { return a * b; }
    __device__ double operator()(double a, double b) const { return a * b; }
    __device__ int32_t operator()(int32_t a, int32_t b) const { return tl_mul_i32(a, b); }
    __device__ int64_t operator()(int64_t a, int64_t b) const { return tl_mul_i64(a, b); }
};
struct m_pow {
    __device__ float operator()(float a, float b) const { return tl_pow_f(a, b); }
    __device__ double operator()(double a, double b) const { return tl_pow_d(a, b); }
    __device__ int32_t operator()(int32_t a, int32_t b) const {
        return (int32_t)(uint32_t)tl_pow_int(a, b);
    }
    __device__ int64_t operator()(int64_t a, int64_t b) const { return (int64_t)tl_pow_int(a, b); }
};

/* every POINTWISE_BINARY row of ops.def: the math of kernels/pointwise.h in float or double
   (floating rows) and its integer line in int64 (INT, BOOL_OUT and BITS rows); binary rows have
   no numbers */
#define POINTWISE_BINARY_FLOAT_MATH(name)                                                          \
    __device__ float operator()(float a, float b) const {                                          \
        return tl_pointwise_##name##_f(a, b, 0, 0, 0);                                             \
    }                                                                                              \
    __device__ double operator()(double a, double b) const {                                       \
        return tl_pointwise_##name##_d(a, b, 0, 0, 0);                                             \
    }
#define POINTWISE_BINARY_INT_MATH(name)                                                            \
    __device__ int64_t integer(int64_t a, int64_t b) const {                                       \
        return tl_pointwise_##name##_i(a, b, 0, 0, 0);                                             \
    }
#define POINTWISE_BINARY_MATH_FLOAT(name)      POINTWISE_BINARY_FLOAT_MATH(name)
#define POINTWISE_BINARY_MATH_FLOAT_ONLY(name) POINTWISE_BINARY_FLOAT_MATH(name)
#define POINTWISE_BINARY_MATH_INT(name)                                                            \
    POINTWISE_BINARY_FLOAT_MATH(name) POINTWISE_BINARY_INT_MATH(name)
#define POINTWISE_BINARY_MATH_BOOL_OUT(name)                                                       \
    POINTWISE_BINARY_FLOAT_MATH(name) POINTWISE_BINARY_INT_MATH(name)
#define POINTWISE_BINARY_MATH_BITS(name) POINTWISE_BINARY_INT_MATH(name)
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    struct m_##name {                                                                              \
        POINTWISE_BINARY_MATH_##dtypes(name)                                                       \
    };
#include "tlua/ops.def"

/* A pointwise binary row's functor over storage E, as unary.cu's tl_pointwise_fn: floating
   dtypes through the float or double math, integer and bool ones through the integer line
   (int32 wraps, a bool keeps the low bit); a Predicate (BOOL_OUT) stores non-zero as bool. */
template <class E, class M, bool Predicate> struct tl_pointwise_binary_fn {
    typedef typename std::conditional<Predicate, uint8_t, typename E::T>::type out_t;
    typedef typename E::T in_t;
    __device__ out_t operator()(in_t a, in_t b) const {
        if constexpr (((1u << E::dtype) & TL_CUDA_FLOATING) != 0) {
            const auto r = M()(E::load(a), E::load(b));
            if constexpr (Predicate)
                return r != 0;
            else
                return E::store(r);
        } else {
            const int64_t r = M().integer((int64_t)E::load(a), (int64_t)E::load(b));
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

template <class E, class M, unsigned Dtypes, bool Predicate>
static tl_status launch_pointwise(const tl_cuda_launch *l) {
    if constexpr (((Dtypes >> E::dtype) & 1u) == 0)
        return tl_cuda_no_kernel(l->op);
    else
        return tl_cuda_elementwise<2>(l, tl_pointwise_binary_fn<E, M, Predicate>{});
}

/* ---- comparisons (NaN compares unequal to everything) -------------------------------------- */
struct m_eq {
    template <class C> __device__ bool operator()(C a, C b) const { return a == b; }
};
struct m_ne {
    template <class C> __device__ bool operator()(C a, C b) const { return a != b; }
};
struct m_lt {
    template <class C> __device__ bool operator()(C a, C b) const { return a < b; }
};
struct m_le {
    template <class C> __device__ bool operator()(C a, C b) const { return a <= b; }
};
struct m_gt {
    template <class C> __device__ bool operator()(C a, C b) const { return a > b; }
};
struct m_ge {
    template <class C> __device__ bool operator()(C a, C b) const { return a >= b; }
};

/* ---- dispatch ---------------------------------------------------------------------------- */
template <class E, class M> static tl_status launch_arith(const tl_cuda_launch *l) {
    return tl_cuda_elementwise<2>(l, tl_binary_fn<E, M>{});
}

template <class E, class M> static tl_status launch_compare(const tl_cuda_launch *l) {
    return tl_cuda_elementwise<2>(l, tl_compare_fn<E, M>{});
}

/* op's functor for the inputs' dtype, over the operands of l */
static tl_status launch_binary(tl_op op, int dtype, const tl_cuda_launch *l) {
    return tl_cuda_dispatch<TL_CUDA_ALL>(dtype, l->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        switch (op) {
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    case TL_OP_##name:                                                                             \
        return launch_pointwise<E, m_##name, RULE_DTYPES_##dtypes,                                 \
                                RULE_DTYPES_##dtypes == RULE_DTYPES_BOOL_OUT>(l);
#include "tlua/ops.def"
        case TL_OP_eq:
            return launch_compare<E, m_eq>(l);
        case TL_OP_ne:
            return launch_compare<E, m_ne>(l);
        case TL_OP_lt:
            return launch_compare<E, m_lt>(l);
        case TL_OP_le:
            return launch_compare<E, m_le>(l);
        case TL_OP_gt:
            return launch_compare<E, m_gt>(l);
        case TL_OP_ge:
            return launch_compare<E, m_ge>(l);
        default:
            break;
        }
        if constexpr (E::dtype != TL_CUDA_BOOL) {
            switch (op) {
            case TL_OP_add:
                return launch_arith<E, m_add>(l);
            case TL_OP_sub:
                return launch_arith<E, m_sub>(l);
            case TL_OP_mul:
                return launch_arith<E, m_mul>(l);
            case TL_OP_pow:
                return launch_arith<E, m_pow>(l);
            default:
                break;
            }
        }
        return tl_cuda_no_kernel(l->op);
    });
}

/* ---- the table: one function per op serves every dtype (launch_binary dispatches) --------- */
static tl_status run_binary(tl_op op, tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                            const tl_op_args *args) {
    (void)args; /* no binary row has numbers */
    const tl_tensor *operands[] = {out, a, b};
    tl_cuda_launch l;
    TL_TRY(tl_cuda_launch_of(op, 3, operands, &l));
    return launch_binary(op, tl_cuda_dtype_of(a), &l);
}

template <tl_op OP>
static tl_status cuda_binary(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                             const tl_op_args *args) {
    return run_binary(OP, out, a, b, args);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(add, TL_DTYPES_NUMERIC, binary, cuda_binary<TL_OP_add>),
    TL_KERNEL(sub, TL_DTYPES_NUMERIC, binary, cuda_binary<TL_OP_sub>),
    TL_KERNEL(mul, TL_DTYPES_NUMERIC, binary, cuda_binary<TL_OP_mul>),
    TL_KERNEL(pow, TL_DTYPES_NUMERIC, binary, cuda_binary<TL_OP_pow>),
    TL_KERNEL(eq, TL_DTYPES_ALL, binary, cuda_binary<TL_OP_eq>),
    TL_KERNEL(ne, TL_DTYPES_ALL, binary, cuda_binary<TL_OP_ne>),
    TL_KERNEL(lt, TL_DTYPES_ALL, binary, cuda_binary<TL_OP_lt>),
    TL_KERNEL(le, TL_DTYPES_ALL, binary, cuda_binary<TL_OP_le>),
    TL_KERNEL(gt, TL_DTYPES_ALL, binary, cuda_binary<TL_OP_gt>),
    TL_KERNEL(ge, TL_DTYPES_ALL, binary, cuda_binary<TL_OP_ge>),
/* and every POINTWISE_BINARY row of ops.def, for the dtypes of its rule */
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    TL_KERNEL(name, TL_POINTWISE_DTYPES_##dtypes, binary, cuda_binary<TL_OP_##name>),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cuda_binary_table, TL_DEVICE_CUDA, entries);
