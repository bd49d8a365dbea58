/* CUDA binary elementwise kernels, as cpu/binary.c: add, sub, mul, pow and the pointwise binary
   ops for floating dtypes (bf16/f16 in f32); add, sub, mul, pow for int32/int64 (wrapping); eq,
   ne, lt, le, gt, ge for every dtype, giving bool. Keyed by the inputs' dtype. */
#include <math.h>

#include "kernels/pointwise.h"

#include "kernels/cuda/elementwise.cuh"

/* integer and bool storage */
template <class T> struct tl_int_io {
    typedef T storage;
    typedef T compute;
    __device__ static T load(T x) { return x; }
    __device__ static T store(T x) { return x; }
};
struct tl_bool_io {
    typedef uint8_t storage;
    typedef int compute;
    __device__ static int load(uint8_t x) { return x != 0; }
};

template <class IO, class M> struct tl_binary_fn {
    typedef typename IO::storage out_t;
    typedef typename IO::storage in_t;
    __device__ out_t operator()(in_t a, in_t b) const {
        return IO::store(M()(IO::load(a), IO::load(b)));
    }
};

template <class IO, class M> struct tl_compare_fn {
    typedef uint8_t out_t;
    typedef typename IO::storage in_t;
    __device__ uint8_t operator()(in_t a, in_t b) const {
        return (uint8_t)(M()(IO::load(a), IO::load(b)) ? 1 : 0);
    }
};

/* ---- floating arithmetic ----------------------------------------------------------------- */
__device__ __forceinline__ float d_pow(float a, float b) {
    return b == 2.0f ? a * a : powf(a, b);
}
__device__ __forceinline__ double d_pow(double a, double b) {
    return b == 2.0 ? a * a : pow(a, b);
}

struct m_add {
    template <class C> __device__ C operator()(C a, C b) const { return a + b; }
};
struct m_sub {
    template <class C> __device__ C operator()(C a, C b) const { return a - b; }
};
struct m_mul {
    template <class C> __device__ C operator()(C a, C b) const { return a * b; }
};
struct m_pow {
    template <class C> __device__ C operator()(C a, C b) const { return d_pow(a, b); }
};

/* ---- integer arithmetic, wrapping (computed unsigned) --------------------------------------- */
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
#define OP(name, family, differentiable, backward)                                                 \
    TL_IF_FAMILY(family, POINTWISE_BINARY, POINTWISE_BINARY_MATH, name)
#include "tlua/ops.def"
#undef OP

template <class T> struct tl_unsigned;
template <> struct tl_unsigned<int32_t> { typedef uint32_t type; };
template <> struct tl_unsigned<int64_t> { typedef uint64_t type; };

struct m_iadd {
    template <class T> __device__ T operator()(T a, T b) const {
        typedef typename tl_unsigned<T>::type U;
        return (T)((U)a + (U)b);
    }
};
struct m_isub {
    template <class T> __device__ T operator()(T a, T b) const {
        typedef typename tl_unsigned<T>::type U;
        return (T)((U)a - (U)b);
    }
};
struct m_imul {
    template <class T> __device__ T operator()(T a, T b) const {
        typedef typename tl_unsigned<T>::type U;
        return (T)((U)a * (U)b);
    }
};
/* a ^ b, wrapping; for b < 0 the truncated 1 / a^-b: 1 for a = 1, +-1 for a = -1, else 0 */
struct m_ipow {
    template <class T> __device__ T operator()(T a, T b) const {
        int64_t x = a, e = b;
        uint64_t r = 1;
        if (e < 0) {
            r = x == 1 ? 1u : x == -1 ? ((e & 1) ? ~0ull : 1u) : 0u;
        } else {
            for (uint64_t base = (uint64_t)x; e > 0; e >>= 1, base *= base)
                if (e & 1) r *= base;
        }
        return (T)r;
    }
};

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
static tl_status no_kernel(const tl_cuda_launch *l) {
    return tl_error(TL_ERR_DTYPE, "%s: no CUDA kernel for this dtype", l->op);
}

template <class IO, class M> static tl_status arith(const tl_cuda_launch *l) {
    return tl_cuda_elementwise<2>(l, tl_binary_fn<IO, M>{});
}

template <class IO> static tl_status compare(tl_op op, const tl_cuda_launch *l) {
    switch (op) {
    case TL_OP_eq:
        return tl_cuda_elementwise<2>(l, tl_compare_fn<IO, m_eq>{});
    case TL_OP_ne:
        return tl_cuda_elementwise<2>(l, tl_compare_fn<IO, m_ne>{});
    case TL_OP_lt:
        return tl_cuda_elementwise<2>(l, tl_compare_fn<IO, m_lt>{});
    case TL_OP_le:
        return tl_cuda_elementwise<2>(l, tl_compare_fn<IO, m_le>{});
    case TL_OP_gt:
        return tl_cuda_elementwise<2>(l, tl_compare_fn<IO, m_gt>{});
    case TL_OP_ge:
        return tl_cuda_elementwise<2>(l, tl_compare_fn<IO, m_ge>{});
    default:
        return no_kernel(l);
    }
}

template <class IO> static tl_status float_op(tl_op op, const tl_cuda_launch *l) {
    switch (op) {
    case TL_OP_add:
        return arith<IO, m_add>(l);
    case TL_OP_sub:
        return arith<IO, m_sub>(l);
    case TL_OP_mul:
        return arith<IO, m_mul>(l);
#define POINTWISE_BINARY_CASE(name)                                                                \
    case TL_OP_##name:                                                                             \
        return arith<IO, m_##name>(l);
#define OP(name, family, differentiable, backward)                                                 \
    TL_IF_FAMILY(family, POINTWISE_BINARY, POINTWISE_BINARY_CASE, name)
#include "tlua/ops.def"
#undef OP
    case TL_OP_pow:
        return arith<IO, m_pow>(l);
    default:
        return compare<IO>(op, l);
    }
}

template <class T> static tl_status int_op(tl_op op, const tl_cuda_launch *l) {
    typedef tl_int_io<T> IO;
    switch (op) {
    case TL_OP_add:
        return arith<IO, m_iadd>(l);
    case TL_OP_sub:
        return arith<IO, m_isub>(l);
    case TL_OP_mul:
        return arith<IO, m_imul>(l);
    case TL_OP_pow:
        return arith<IO, m_ipow>(l);
    default:
        return compare<IO>(op, l);
    }
}

extern "C" tl_status tl_cuda_binary_run(tl_op op, int dtype, const tl_cuda_launch *l) {
    switch (dtype) {
    case TL_CUDA_F32:
        return float_op<tl_f32_io>(op, l);
    case TL_CUDA_F64:
        return float_op<tl_f64_io>(op, l);
    case TL_CUDA_BF16:
        return float_op<tl_bf16_io>(op, l);
    case TL_CUDA_F16:
        return float_op<tl_f16_io>(op, l);
    case TL_CUDA_I32:
        return int_op<int32_t>(op, l);
    case TL_CUDA_I64:
        return int_op<int64_t>(op, l);
    case TL_CUDA_BOOL:
        return compare<tl_bool_io>(op, l);
    default:
        return no_kernel(l);
    }
}
