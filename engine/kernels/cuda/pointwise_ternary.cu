/* CUDA kernels of the pointwise ternary ops and their table, as cpu/pointwise_ternary.c: out =
   f(a, b, c) with the math of kernels/pointwise.h and the op's numbers, inputs of out's dtype
   broadcast to its shape; floating dtypes (bf16/f16 in f32), int32/int64 for INT rows (wrapping),
   through the shared elementwise launch. */
#include <math.h>

#include "kernels/pointwise.h"

#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/elementwise.cuh"

/* every POINTWISE_TERNARY row of ops.def: the math in float, double and (INT rows) int64 */
#define TERNARY_FLOAT_MATH(name)                                                                   \
    __device__ float operator()(float a, float b, float c) const {                                 \
        return tl_pointwise_##name##_f(a, b, c, (float)p0, (float)p1, (float)p2);                  \
    }                                                                                              \
    __device__ double operator()(double a, double b, double c) const {                             \
        return tl_pointwise_##name##_d(a, b, c, p0, p1, p2);                                       \
    }
#define TERNARY_MATH_FLOAT(name) TERNARY_FLOAT_MATH(name)
#define TERNARY_MATH_INT(name)                                                                     \
    TERNARY_FLOAT_MATH(name)                                                                       \
    __device__ int64_t operator()(int64_t a, int64_t b, int64_t c) const {                         \
        return tl_pointwise_##name##_i(a, b, c, tl_double_to_i64(p0), tl_double_to_i64(p1),        \
                                       tl_double_to_i64(p2));                                      \
    }
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    struct m_##name {                                                                              \
        double p0, p1, p2;                                                                         \
        TERNARY_MATH_##dtypes(name)                                                                \
    };
#include "tlua/ops.def"

/* storage -> compute (int64 for the integers, whose int32 results wrap) -> math -> storage */
template <class E, class M> struct tl_ternary_fn {
    typedef typename E::T out_t;
    typedef typename E::T in_t;
    M m;
    __device__ out_t operator()(in_t a, in_t b, in_t c) const {
        if constexpr (((1u << E::dtype) & TL_CUDA_FLOATING) != 0)
            return E::store(m(E::load(a), E::load(b), E::load(c)));
        else
            return (out_t)(uint64_t)m((int64_t)a, (int64_t)b, (int64_t)c);
    }
};

/* op's functor for the dtype with the numbers p, over the operands of l (out, a, b, c) */
static tl_status launch_ternary(tl_op op, int dtype, const tl_cuda_launch *l, const double *p) {
    return tl_cuda_dispatch<TL_CUDA_NUMERIC>(dtype, l->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        constexpr bool integer = ((1u << E::dtype) & TL_CUDA_INTEGER) != 0;
        switch (op) {
#define TERNARY_CASE_FLOAT(name)                                                                   \
    case TL_OP_##name:                                                                             \
        if constexpr (integer)                                                                     \
            return tl_cuda_no_kernel(l->op);                                                       \
        else                                                                                       \
            return tl_cuda_elementwise<3>(l, tl_ternary_fn<E, m_##name>{{p[0], p[1], p[2]}});
#define TERNARY_CASE_INT(name)                                                                     \
    case TL_OP_##name:                                                                             \
        return tl_cuda_elementwise<3>(l, tl_ternary_fn<E, m_##name>{{p[0], p[1], p[2]}});
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    TERNARY_CASE_##dtypes(name)
#include "tlua/ops.def"
        default:
            return tl_cuda_no_kernel(l->op);
        }
    });
}

/* ---- the table: one function per op serves every dtype (launch_ternary dispatches) -------- */
template <tl_op OP>
static tl_status cuda_pointwise_ternary(tl_tensor *const *out, const tl_tensor *const *in,
                                        const tl_op_args *args) {
    const tl_tensor *operands[] = {out[0], in[0], in[1], in[2]};
    tl_cuda_launch l;
    TL_TRY(tl_cuda_launch_of(OP, 4, operands, &l));
    return launch_ternary(OP, tl_cuda_dtype_of(out[0]), &l, args->scalar);
}

static const tl_kernel_entry entries[] = {
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    TL_KERNEL(name, TL_POINTWISE_DTYPES_##dtypes, tensors, cuda_pointwise_ternary<TL_OP_##name>),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cuda_pointwise_ternary_table, TL_DEVICE_CUDA, entries);
