/* The gradients of the pointwise ops (family POINTWISE in tlua/ops.def), one formula per op;
   their recording wrappers tl_ag_<name> are generated from the op table below. */
#include "autograd/formula.h"

/* GRADIENT(name, SAVES) { ... } defines the gradient of the op `name`: g is the gradient of
   its output, saved the tensor SAVES names (INPUT: x, RESULT: y = f(x)); it sets *gi, the
   gradient of x ("=": the engine accumulates), by forward ops or backward kernels. */
#define SAVES_INPUT  true, false
#define SAVES_RESULT false, true
#define GRADIENT(name, saves)                                                                      \
    static tl_status name##_record(tl_backward_fn backward, tl_status forward, tl_tensor *a,       \
                                   tl_tensor **out) {                                              \
        return tl_record_unary(#name, backward, forward, a, out, SAVES_##saves, NULL);             \
    }                                                                                              \
    static tl_status name##_gradient(const tl_tensor *g, const tl_tensor *saved, tl_tensor **gi)

/* exp' = exp */
GRADIENT(exp, RESULT) {
    return tl_mul(g, saved, gi);
}

/* log' = 1 / x */
GRADIENT(log, INPUT) {
    return tl_div(g, saved, gi);
}

/* sqrt' = 1 / (2 y) */
GRADIENT(sqrt, RESULT) {
    tl_tensor *twice;
    TL_TRY(tl_mul_number(saved, 2.0, &twice));
    tl_status status = tl_div(g, twice, gi);
    tl_release(twice);
    return status;
}

/* tanh' = 1 - y^2, sigmoid' = y (1 - y), gelu' = Phi(x) + x phi(x): backward kernels
   (POINTWISE_BACKWARD rows, their math in kernels/pointwise.h) */
GRADIENT(tanh, RESULT) {
    return tl_tanh_backward(g, saved, gi);
}

GRADIENT(sigmoid, RESULT) {
    return tl_sigmoid_backward(g, saved, gi);
}

GRADIENT(gelu, INPUT) {
    return tl_gelu_backward(g, saved, gi);
}

/* silu' = s (1 + x (1 - s)) with s = sigmoid(x): a backward kernel */
GRADIENT(silu, INPUT) {
    return tl_silu_backward(g, saved, gi);
}

/* sin' = cos, cos' = -sin */
GRADIENT(sin, INPUT) {
    tl_tensor *c;
    TL_TRY(tl_cos(saved, &c));
    tl_status status = tl_mul(g, c, gi);
    tl_release(c);
    return status;
}

GRADIENT(cos, INPUT) {
    tl_tensor *s, *minus_g = NULL;
    TL_TRY(tl_sin(saved, &s));
    tl_status status = tl_neg(g, &minus_g);
    if (status == TL_OK) status = tl_mul(minus_g, s, gi);
    tl_release(s), tl_release(minus_g);
    return status;
}

/* ---- generated: the backward function and tl_ag_<name> of every POINTWISE row ---- */
#define POINTWISE_AUTOGRAD(name)                                                                   \
    static tl_status name##_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {         \
        tl_tensor *saved;                                                                          \
        TL_TRY(tl_node_saved(node, 0, &saved));                                                    \
        return name##_gradient(g[0], saved, &gi[0]);                                               \
    }                                                                                              \
    tl_status tl_ag_##name(tl_tensor *a, tl_tensor **out) {                                        \
        return name##_record(name##_backward, tl_##name(a, out), a, out);                          \
    }
#define OP(name, family, differentiable, backward)                                                 \
    TL_IF_FAMILY(family, POINTWISE, POINTWISE_AUTOGRAD, name)
#include "tlua/ops.def"
#undef OP
