/* CUDA unary elementwise kernels, as cpu/unary.c: neg, abs, relu, pow_scalar, clamp and every
   pointwise op for floating dtypes (bf16/f16 in f32, rounded to nearest even); neg, abs, relu,
   pow_scalar, clamp also for int32/int64 (wrapping). */
#include <math.h>

#include "kernels/pointwise.h"

#include "kernels/cuda/elementwise.cuh"

/* storage -> compute -> math -> storage */
template <class IO, class M> struct tl_unary_fn {
    typedef typename IO::storage out_t;
    typedef typename IO::storage in_t;
    M m;
    __device__ out_t operator()(in_t x) const { return IO::store(m(IO::load(x))); }
};

/* integers: storage is the compute type */
template <class T, class M> struct tl_int_unary_fn {
    typedef T out_t;
    typedef T in_t;
    M m;
    __device__ T operator()(T x) const { return m(x); }
};

/* ---- floating math, in float or double ------------------------------------------------- */
__device__ __forceinline__ float d_abs(float x) {
    return fabsf(x);
}
__device__ __forceinline__ double d_abs(double x) {
    return fabs(x);
}
__device__ __forceinline__ float d_pow(float x, float e) {
    return powf(x, e);
}
__device__ __forceinline__ double d_pow(double x, double e) {
    return pow(x, e);
}

struct m_neg {
    template <class C> __device__ C operator()(C x) const { return -x; }
};
struct m_abs {
    template <class C> __device__ C operator()(C x) const { return d_abs(x); }
};
/* max(x, 0) with NaN kept and -0 -> +0 */
struct m_relu {
    template <class C> __device__ C operator()(C x) const { return x > 0 || x != x ? x : (C)0; }
};
template <class C> struct m_pow {
    C e;
    __device__ C operator()(C x) const { return e == (C)2 ? x * x : d_pow(x, e); }
};
/* min(max(x, lo), hi) with NaN kept */
template <class C> struct m_clamp {
    C lo, hi;
    __device__ C operator()(C x) const {
        C y = x < lo ? lo : x;
        return y > hi ? hi : y;
    }
};

/* every POINTWISE row of ops.def: the math of kernels/pointwise.h in float or double */
#define POINTWISE_MATH(name)                                                                       \
    struct m_##name {                                                                              \
        __device__ float operator()(float x) const { return tl_pointwise_##name##_f(x); }          \
        __device__ double operator()(double x) const { return tl_pointwise_##name##_d(x); }        \
    };
#define OP(name, family, differentiable, backward)                                                 \
    TL_IF_FAMILY(family, POINTWISE, POINTWISE_MATH, name)
#include "tlua/ops.def"
#undef OP

/* ---- integer math, wrapping (through unsigned) ---------------------------------------- */
struct m_ineg {
    __device__ int32_t operator()(int32_t x) const { return (int32_t)(0u - (uint32_t)x); }
    __device__ int64_t operator()(int64_t x) const { return (int64_t)(0ull - (uint64_t)x); }
};
struct m_iabs {
    template <class T> __device__ T operator()(T x) const { return x < 0 ? m_ineg()(x) : x; }
};
struct m_irelu {
    template <class T> __device__ T operator()(T x) const { return x > 0 ? x : 0; }
};
/* x ^ e for e >= 0 by squaring, wrapping */
struct m_ipow {
    int64_t e;
    template <class T> __device__ T operator()(T x) const {
        uint64_t b = (uint64_t)(int64_t)x, r = 1;
        for (int64_t k = e; k > 0; k >>= 1, b *= b)
            if (k & 1) r *= b;
        return (T)r;
    }
};
template <class T> struct m_iclamp {
    T lo, hi;
    __device__ T operator()(T x) const {
        T y = x < lo ? lo : x;
        return y > hi ? hi : y;
    }
};

/* ---- dispatch ---------------------------------------------------------------------------- */
template <class IO, class M> static tl_status run_float(const tl_cuda_launch *l, M m) {
    return tl_cuda_elementwise<1>(l, tl_unary_fn<IO, M>{m});
}

template <class T, class M> static tl_status run_int(const tl_cuda_launch *l, M m) {
    return tl_cuda_elementwise<1>(l, tl_int_unary_fn<T, M>{m});
}

static tl_status no_kernel(const tl_cuda_launch *l) {
    return tl_error(TL_ERR_DTYPE, "%s: no CUDA kernel for this dtype", l->op);
}

template <class IO>
static tl_status float_op(tl_op op, const tl_cuda_launch *l, const double *s, const bool *has) {
    typedef typename IO::compute C;
    switch (op) {
    case TL_OP_neg:
        return run_float<IO>(l, m_neg{});
    case TL_OP_abs:
        return run_float<IO>(l, m_abs{});
    case TL_OP_relu:
        return run_float<IO>(l, m_relu{});
    case TL_OP_pow_scalar:
        return run_float<IO>(l, m_pow<C>{(C)s[0]});
    case TL_OP_clamp:
        return run_float<IO>(
            l, m_clamp<C>{has[0] ? (C)s[0] : (C)-INFINITY, has[1] ? (C)s[1] : (C)INFINITY});
#define POINTWISE_CASE(name)                                                                       \
    case TL_OP_##name:                                                                             \
        return run_float<IO>(l, m_##name{});
#define OP(name, family, differentiable, backward)                                                 \
    TL_IF_FAMILY(family, POINTWISE, POINTWISE_CASE, name)
#include "tlua/ops.def"
#undef OP
    default:
        return no_kernel(l);
    }
}

static int64_t host_to_i64(double v) {
    return v != v ? 0 : v >= 0x1p63 ? INT64_MAX : v <= -0x1p63 ? INT64_MIN : (int64_t)v;
}

template <class T>
static tl_status int_op(tl_op op, const tl_cuda_launch *l, const double *s, const bool *has, T min,
                        T max) {
    switch (op) {
    case TL_OP_neg:
        return run_int<T>(l, m_ineg{});
    case TL_OP_abs:
        return run_int<T>(l, m_iabs{});
    case TL_OP_relu:
        return run_int<T>(l, m_irelu{});
    case TL_OP_pow_scalar:
        return run_int<T>(l, m_ipow{host_to_i64(s[0])});
    case TL_OP_clamp: {
        /* the op layer sends integral bounds; out-of-range ones saturate */
        int64_t lo = has[0] ? host_to_i64(s[0]) : (int64_t)min;
        int64_t hi = has[1] ? host_to_i64(s[1]) : (int64_t)max;
        lo = lo < (int64_t)min ? (int64_t)min : lo > (int64_t)max ? (int64_t)max : lo;
        hi = hi < (int64_t)min ? (int64_t)min : hi > (int64_t)max ? (int64_t)max : hi;
        return run_int<T>(l, m_iclamp<T>{(T)lo, (T)hi});
    }
    default:
        return no_kernel(l);
    }
}

extern "C" tl_status tl_cuda_unary_run(tl_op op, int dtype, const tl_cuda_launch *l,
                                       const double *scalar, const bool *has_scalar) {
    switch (dtype) {
    case TL_CUDA_F32:
        return float_op<tl_f32_io>(op, l, scalar, has_scalar);
    case TL_CUDA_F64:
        return float_op<tl_f64_io>(op, l, scalar, has_scalar);
    case TL_CUDA_BF16:
        return float_op<tl_bf16_io>(op, l, scalar, has_scalar);
    case TL_CUDA_F16:
        return float_op<tl_f16_io>(op, l, scalar, has_scalar);
    case TL_CUDA_I32:
        return int_op<int32_t>(op, l, scalar, has_scalar, INT32_MIN, INT32_MAX);
    case TL_CUDA_I64:
        return int_op<int64_t>(op, l, scalar, has_scalar, INT64_MIN, INT64_MAX);
    default:
        return no_kernel(l);
    }
}
