/* CUDA kernels of the pointwise backward ops, as cpu/activation_backward.c: out = f(grad, saved)
   with the math of kernels/pointwise.h, "=" semantics; f32 and f64 natively, bf16/f16 through
   f32. */
#include <math.h>

#include "kernels/pointwise.h"

#include "kernels/cuda/elementwise.cuh"

/* every POINTWISE_BACKWARD row of ops.def: the math of kernels/pointwise.h */
#define BACKWARD_MATH(name)                                                                        \
    struct m_##name {                                                                              \
        __device__ float operator()(float g, float s) const {                                      \
            return tl_pointwise_##name##_f(g, s);                                                  \
        }                                                                                          \
        __device__ double operator()(double g, double s) const {                                   \
            return tl_pointwise_##name##_d(g, s);                                                  \
        }                                                                                          \
    };
#define OP(name, family, differentiable, backward)                                                 \
    TL_IF_FAMILY(family, POINTWISE_BACKWARD, BACKWARD_MATH, name)
#include "tlua/ops.def"
#undef OP

template <class IO, class M> struct tl_grad_fn {
    typedef typename IO::storage out_t;
    typedef typename IO::storage in_t;
    __device__ out_t operator()(in_t g, in_t s) const {
        return IO::store(M()(IO::load(g), IO::load(s)));
    }
};

template <class IO> static tl_status grad_op(tl_op op, const tl_cuda_launch *l) {
    switch (op) {
#define BACKWARD_CASE(name)                                                                        \
    case TL_OP_##name:                                                                             \
        return tl_cuda_elementwise<2>(l, tl_grad_fn<IO, m_##name>{});
#define OP(name, family, differentiable, backward)                                                 \
    TL_IF_FAMILY(family, POINTWISE_BACKWARD, BACKWARD_CASE, name)
#include "tlua/ops.def"
#undef OP
    default:
        return tl_error(TL_ERR_DTYPE, "%s: no CUDA kernel for this op", l->op);
    }
}

extern "C" tl_status tl_cuda_activation_backward_run(tl_op op, int dtype, const tl_cuda_launch *l) {
    switch (dtype) {
    case TL_CUDA_F32:
        return grad_op<tl_f32_io>(op, l);
    case TL_CUDA_F64:
        return grad_op<tl_f64_io>(op, l);
    case TL_CUDA_BF16:
        return grad_op<tl_bf16_io>(op, l);
    case TL_CUDA_F16:
        return grad_op<tl_f16_io>(op, l);
    default:
        return tl_error(TL_ERR_DTYPE, "%s: no CUDA kernel for this dtype", l->op);
    }
}
