/* CUDA binary elementwise kernels, as cpu/binary.c: add, sub, mul, pow and the pointwise binary
   ops for floating dtypes (bf16/f16 in f32); add, sub, mul, pow for int32/int64 (wrapping); eq,
   ne, lt, le, gt, ge for every dtype, giving bool. Keyed by the inputs' dtype. The math is
   kernels/arith.h's and kernels/pointwise.h's, shared with the CPU. */
#include <math.h>

#include "kernels/arith.h"
#include "kernels/pointwise.h"

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

/* every POINTWISE_BINARY row of ops.def: the math of kernels/pointwise.h in float or double */
#define POINTWISE_BINARY_MATH(name)                                                                \
    struct m_##name {                                                                              \
        __device__ float operator()(float a, float b) const {                                      \
            return tl_pointwise_##name##_f(a, b);                                                  \
        }                                                                                          \
        __device__ double operator()(double a, double b) const {                                   \
            return tl_pointwise_##name##_d(a, b);                                                  \
        }                                                                                          \
    };
#define POINTWISE_BINARY_OP(name, differentiable, backward) POINTWISE_BINARY_MATH(name)
#include "tlua/ops.def"

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
template <class E, class M> static tl_status arith(const tl_cuda_launch *l) {
    return tl_cuda_elementwise<2>(l, tl_binary_fn<E, M>{});
}

template <class E, class M> static tl_status compare(const tl_cuda_launch *l) {
    return tl_cuda_elementwise<2>(l, tl_compare_fn<E, M>{});
}

extern "C" tl_status tl_cuda_binary_run(tl_op op, int dtype, const tl_cuda_launch *l) {
    return tl_cuda_dispatch<TL_CUDA_ALL>(dtype, l->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        switch (op) {
        case TL_OP_eq:
            return compare<E, m_eq>(l);
        case TL_OP_ne:
            return compare<E, m_ne>(l);
        case TL_OP_lt:
            return compare<E, m_lt>(l);
        case TL_OP_le:
            return compare<E, m_le>(l);
        case TL_OP_gt:
            return compare<E, m_gt>(l);
        case TL_OP_ge:
            return compare<E, m_ge>(l);
        default:
            break;
        }
        if constexpr (E::dtype != TL_CUDA_BOOL) {
            switch (op) {
            case TL_OP_add:
                return arith<E, m_add>(l);
            case TL_OP_sub:
                return arith<E, m_sub>(l);
            case TL_OP_mul:
                return arith<E, m_mul>(l);
            case TL_OP_pow:
                return arith<E, m_pow>(l);
            default:
                break;
            }
        }
        if constexpr ((1u << E::dtype) & TL_CUDA_FLOATING) {
            switch (op) {
#define POINTWISE_BINARY_CASE(name)                                                                \
    case TL_OP_##name:                                                                             \
        return arith<E, m_##name>(l);
#define POINTWISE_BINARY_OP(name, differentiable, backward) POINTWISE_BINARY_CASE(name)
#include "tlua/ops.def"
            default:
                break;
            }
        }
        return tl_cuda_no_kernel(l->op);
    });
}
