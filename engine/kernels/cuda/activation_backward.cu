/* CUDA kernels of the activation backward formulas, as cpu/activation_backward.c:
   out = grad * f'(saved), "=" semantics; f32 and f64 natively, bf16/f16 through f32. */
#include <math.h>

#include "kernels/cuda/elementwise.cuh"

__device__ __forceinline__ float d_erf(float x) {
    return erff(x);
}
__device__ __forceinline__ double d_erf(double x) {
    return erf(x);
}
__device__ __forceinline__ float d_exp(float x) {
    return expf(x);
}
__device__ __forceinline__ double d_exp(double x) {
    return exp(x);
}

/* saved: the forward's result for relu, tanh, sigmoid; its input for gelu */
struct m_relu_grad {
    template <class C> __device__ C operator()(C g, C y) const { return y > 0 ? g : (C)0; }
};
struct m_tanh_grad {
    template <class C> __device__ C operator()(C g, C y) const { return g * ((C)1 - y * y); }
};
struct m_sigmoid_grad {
    template <class C> __device__ C operator()(C g, C y) const { return g * y * ((C)1 - y); }
};
/* d/dx [x * Phi(x)] = Phi(x) + x * phi(x) */
struct m_gelu_grad {
    template <class C> __device__ C operator()(C g, C x) const {
        C cdf = (C)0.5 * ((C)1 + d_erf(x * (C)0.70710678118654752));
        C pdf = (C)0.39894228040143268 * d_exp((C)-0.5 * x * x);
        return g * (cdf + x * pdf);
    }
};

template <class IO, class M> struct tl_grad_fn {
    typedef typename IO::storage out_t;
    typedef typename IO::storage in_t;
    __device__ out_t operator()(in_t g, in_t s) const {
        return IO::store(M()(IO::load(g), IO::load(s)));
    }
};

template <class IO> static tl_status grad_op(tl_op op, const tl_cuda_launch *l) {
    switch (op) {
    case TL_OP_relu_backward:
        return tl_cuda_elementwise<2>(l, tl_grad_fn<IO, m_relu_grad>{});
    case TL_OP_gelu_backward:
        return tl_cuda_elementwise<2>(l, tl_grad_fn<IO, m_gelu_grad>{});
    case TL_OP_tanh_backward:
        return tl_cuda_elementwise<2>(l, tl_grad_fn<IO, m_tanh_grad>{});
    case TL_OP_sigmoid_backward:
        return tl_cuda_elementwise<2>(l, tl_grad_fn<IO, m_sigmoid_grad>{});
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
