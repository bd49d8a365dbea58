/* The gradients of the pointwise ops y = f(x) (family POINTWISE in tlua/ops.def), one formula
   per op; their recording wrappers tl_ag_<name> (and _with, and in place) are generated from the
   op table. The two- and three-input rows' are in autograd/pointwise_binary.c. */
#include "autograd/formula.h"

/* GRADIENT(name, SAVES) { ... } defines the gradient of the op `name`: g is the gradient of
   its output, saved the tensor SAVES names (INPUT: x, RESULT: y = f(x), NOTHING: NULL) and p
   the op's numbers as the forward resolved them (leaky_relu's negative_slope: p[0]); it sets
   *gi, the gradient of x ("=": the engine accumulates), by forward ops or backward kernels. */
#define SAVES_INPUT   true, false /* {input, result} */
#define SAVES_RESULT  false, true
#define SAVES_NOTHING false, false
#define GRADIENT(name, saves)                                                                      \
    static const bool name##_saves[2] = {SAVES_##saves};                                           \
    static tl_status name##_gradient(const tl_tensor *g, const tl_tensor *saved, const double *p,  \
                                     tl_tensor **gi)

/* exp' = exp */
GRADIENT(exp, RESULT) {
    (void)p;
    return tl_mul(g, saved, gi);
}

/* log' = 1 / x */
GRADIENT(log, INPUT) {
    (void)p;
    return tl_div(g, saved, gi);
}

/* sqrt' = 1 / (2 y) */
GRADIENT(sqrt, RESULT) {
    (void)p;
    tl_tensor *twice;
    TL_TRY(tl_mul_number(saved, 2.0, &twice));
    tl_status status = tl_div(g, twice, gi);
    tl_release(twice);
    return status;
}

/* Ops with a fused backward kernel (a POINTWISE_BACKWARD row, its math in kernels/pointwise.h):
   the gradient is tl_<name>_backward_with(g, saved, p), the numbers the forward's. tanh' =
   1 - y^2, sigmoid' = y (1 - y), gelu' = Phi(x) + x phi(x), gelu_tanh' its tanh approximation's
   derivative, silu' = s (1 + x (1 - s)) with s = sigmoid(x). */
#define GRADIENT_BY_KERNEL(name, saves)                                                            \
    GRADIENT(name, saves) {                                                                        \
        return tl_##name##_backward_with(g, saved, p, gi);                                         \
    }
GRADIENT_BY_KERNEL(tanh, RESULT)
GRADIENT_BY_KERNEL(sigmoid, RESULT)
GRADIENT_BY_KERNEL(erf, INPUT)
GRADIENT_BY_KERNEL(log1p, INPUT)
GRADIENT_BY_KERNEL(expm1, INPUT)
GRADIENT_BY_KERNEL(log2, INPUT)
GRADIENT_BY_KERNEL(log10, INPUT)
GRADIENT_BY_KERNEL(exp2, INPUT)
GRADIENT_BY_KERNEL(rsqrt, INPUT)
GRADIENT_BY_KERNEL(reciprocal, INPUT)
GRADIENT_BY_KERNEL(erfc, INPUT)
GRADIENT_BY_KERNEL(sinh, INPUT)
GRADIENT_BY_KERNEL(cosh, INPUT)
GRADIENT_BY_KERNEL(tan, INPUT)
GRADIENT_BY_KERNEL(asin, INPUT)
GRADIENT_BY_KERNEL(acos, INPUT)
GRADIENT_BY_KERNEL(atan, INPUT)
GRADIENT_BY_KERNEL(asinh, INPUT)
GRADIENT_BY_KERNEL(acosh, INPUT)
GRADIENT_BY_KERNEL(atanh, INPUT)
GRADIENT_BY_KERNEL(gelu, INPUT)
GRADIENT_BY_KERNEL(gelu_tanh, INPUT)
GRADIENT_BY_KERNEL(silu, INPUT)
GRADIENT_BY_KERNEL(square, INPUT)
GRADIENT_BY_KERNEL(erfinv, RESULT)
GRADIENT_BY_KERNEL(softplus, INPUT)
GRADIENT_BY_KERNEL(mish, INPUT)
GRADIENT_BY_KERNEL(hardtanh, INPUT)
GRADIENT_BY_KERNEL(hardsigmoid, INPUT)
GRADIENT_BY_KERNEL(hardswish, INPUT)
GRADIENT_BY_KERNEL(leaky_relu, INPUT)
GRADIENT_BY_KERNEL(elu, INPUT)
GRADIENT_BY_KERNEL(selu, INPUT)
GRADIENT_BY_KERNEL(celu, INPUT)
GRADIENT_BY_KERNEL(logit, INPUT)
GRADIENT_BY_KERNEL(nan_to_num, INPUT)

/* Steps (floor, ceil, round, trunc, sign, sgn): zero almost everywhere, as torch */
#define GRADIENT_ZERO(name)                                                                        \
    GRADIENT(name, NOTHING) {                                                                      \
        (void)saved, (void)p;                                                                      \
        return tl_zeros(g->shape, g->ndim, g->dtype, tl_tensor_device(g), gi);                     \
    }
GRADIENT_ZERO(floor)
GRADIENT_ZERO(ceil)
GRADIENT_ZERO(round)
GRADIENT_ZERO(trunc)
GRADIENT_ZERO(sign)
GRADIENT_ZERO(sgn)

/* frac' = 1 */
GRADIENT(frac, NOTHING) {
    (void)saved, (void)p;
    *gi = tl_retain((tl_tensor *)g);
    return TL_OK;
}

/* sin' = cos, cos' = -sin */
GRADIENT(sin, INPUT) {
    (void)p;
    tl_tensor *c;
    TL_TRY(tl_cos(saved, &c));
    tl_status status = tl_mul(g, c, gi);
    tl_release(c);
    return status;
}

GRADIENT(cos, INPUT) {
    (void)p;
    tl_tensor *s, *minus_g = NULL;
    TL_TRY(tl_sin(saved, &s));
    tl_status status = tl_neg(g, &minus_g);
    if (status == TL_OK) status = tl_mul(minus_g, s, gi);
    tl_release(s), tl_release(minus_g);
    return status;
}

/* ---- generated: the backward function and tl_ag_<name>, tl_ag_<name>_with of every POINTWISE
   row; the node keeps the numbers as resolved for the result's dtype (node->scalar) ---- */
#define POINTWISE_AUTOGRAD_true(name)                                                              \
    static tl_status name##_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {         \
        tl_tensor *saved = NULL;                                                                   \
        if (name##_saves[0] || name##_saves[1]) TL_TRY(tl_node_saved(node, 0, &saved));            \
        return name##_gradient(g[0], saved, node->scalar, &gi[0]);                                 \
    }                                                                                              \
    tl_status tl_ag_##name##_with(tl_tensor *a, const double *numbers, tl_tensor **out) {          \
        tl_node *node;                                                                             \
        TL_TRY(tl_record_unary(#name, name##_backward, tl_##name##_with(a, numbers, out), a, out,  \
                               name##_saves[0], name##_saves[1], &node));                          \
        if (node) tl_op_numbers(TL_OP_##name, (*out)->dtype, numbers, node->scalar);               \
        return TL_OK;                                                                              \
    }
/* a row without a gradient records nothing */
#define POINTWISE_AUTOGRAD_false(name)                                                             \
    tl_status tl_ag_##name##_with(tl_tensor *a, const double *numbers, tl_tensor **out) {          \
        return tl_##name##_with(a, numbers, out);                                                  \
    }
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    POINTWISE_AUTOGRAD_##differentiable(name)                                                      \
        tl_status tl_ag_##name(tl_tensor *a, tl_tensor **out) {                                    \
        return tl_ag_##name##_with(a, NULL, out);                                                  \
    }
#include "tlua/ops.def"

/* ---- generated: tl_ag_<name>_with_ in place, saving x's old values or x itself as the gradient
   reads them (a row without a gradient: x's old values get none, as fill_'s) ---- */
static tl_status no_gradient(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    (void)node, (void)g, (void)gi;
    return TL_OK;
}
#define POINTWISE_INPLACE_AUTOGRAD_true(name)                                                      \
    tl_status tl_ag_##name##_with_(tl_tensor *x, const double *numbers) {                          \
        tl_node *node;                                                                             \
        tl_tensor *old;                                                                            \
        TL_TRY(                                                                                    \
            tl_unary_inplace_begin(#name "_", name##_backward, x, name##_saves[0], &node, &old));  \
        if (node) tl_op_numbers(TL_OP_##name, x->dtype, numbers, node->scalar);                    \
        return tl_unary_inplace_end(node, tl_##name##_with_(x, numbers), x, old, name##_saves[1]); \
    }
#define POINTWISE_INPLACE_AUTOGRAD_false(name)                                                     \
    tl_status tl_ag_##name##_with_(tl_tensor *x, const double *numbers) {                          \
        tl_node *node;                                                                             \
        TL_TRY(tl_inplace_begin(#name "_", no_gradient, x, 0, NULL, &node));                       \
        return tl_inplace_end(node, tl_##name##_with_(x, numbers), x);                             \
    }
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    POINTWISE_INPLACE_AUTOGRAD_##differentiable(name) tl_status tl_ag_##name##_(tl_tensor *x) {    \
        return tl_ag_##name##_with_(x, NULL);                                                      \
    }
#include "tlua/ops.def"
