/* CUDA kernels of the pointwise backward ops and their table, as cpu/activation_backward.c: out =
   f(grad, saved) with the math of kernels/pointwise.h and the forward's numbers, "=" semantics;
   f32 and f64 natively, bf16/f16 through f32. */
#include <math.h>

#include "kernels/pointwise.h"

#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/elementwise.cuh"

/* every POINTWISE_BACKWARD row of ops.def: the math of kernels/pointwise.h */
#define BACKWARD_MATH(name)                                                                        \
    struct m_##name {                                                                              \
        double p0, p1, p2;                                                                         \
        __device__ float operator()(float g, float s) const {                                      \
            return tl_pointwise_##name##_f(g, s, (float)p0, (float)p1, (float)p2);                 \
        }                                                                                          \
        __device__ double operator()(double g, double s) const {                                   \
            return tl_pointwise_##name##_d(g, s, p0, p1, p2);                                      \
        }                                                                                          \
    };
#define POINTWISE_BACKWARD_OP(name, differentiable, backward) BACKWARD_MATH(name)
#include "tlua/ops.def"

template <class E, class M> struct tl_grad_fn {
    typedef typename E::T out_t;
    typedef typename E::T in_t;
    M m;
    __device__ out_t operator()(in_t g, in_t s) const {
        return E::store(m(E::load(g), E::load(s)));
    }
};

/* op's functor for the dtype with the numbers p, over the operands of l (out, grad, saved) */
static tl_status launch_activation_backward(tl_op op, int dtype, const tl_cuda_launch *l,
                                            const double *p) {
    return tl_cuda_floating(dtype, l->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        switch (op) {
#define BACKWARD_CASE(name)                                                                        \
    case TL_OP_##name:                                                                             \
        return tl_cuda_elementwise<2>(l, tl_grad_fn<E, m_##name>{m_##name{p[0], p[1], p[2]}});
#define POINTWISE_BACKWARD_OP(name, differentiable, backward) BACKWARD_CASE(name)
#include "tlua/ops.def"
        default:
            return tl_error(TL_ERR_DTYPE, "%s: no CUDA kernel for this op", l->op);
        }
    });
}

/* ---- the table: one function per op serves every floating dtype --------------------------- */
static tl_status run_activation_backward(tl_op op, tl_tensor *out, const tl_tensor *grad,
                                         const tl_tensor *saved, const tl_op_args *args) {
    static const double no_numbers[3] = {0, 0, 0};
    const tl_tensor *operands[] = {out, grad, saved};
    tl_cuda_launch l;
    TL_TRY(tl_cuda_launch_of(op, 3, operands, &l));
    return launch_activation_backward(op, tl_cuda_dtype_of(out), &l,
                                      args ? args->scalar : no_numbers);
}

template <tl_op OP>
static tl_status cuda_activation_backward(tl_tensor *out, const tl_tensor *grad,
                                          const tl_tensor *saved, const tl_op_args *args) {
    return run_activation_backward(OP, out, grad, saved, args);
}

/* every POINTWISE_BACKWARD row of ops.def */
static const tl_kernel_entry entries[] = {
#define POINTWISE_BACKWARD_OP(name, differentiable, backward)                                      \
    TL_KERNEL(name, TL_DTYPES_FLOATING, binary, cuda_activation_backward<TL_OP_##name>),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cuda_activation_backward_table, TL_DEVICE_CUDA, entries);
