/* The gradients of the pointwise ops (families POINTWISE and POINTWISE_BINARY in tlua/ops.def),
   one formula per op; their recording wrappers tl_ag_<name> are generated from the op table. */
#include "autograd/formula.h"

/* GRADIENT(name, SAVES) { ... } defines the gradient of the op `name`: g is the gradient of
   its output, saved the tensor SAVES names (INPUT: x, RESULT: y = f(x)); it sets *gi, the
   gradient of x ("=": the engine accumulates), by forward ops or backward kernels. */
#define SAVES_INPUT  true, false /* {input, result} */
#define SAVES_RESULT false, true
#define GRADIENT(name, saves)                                                                      \
    static const bool name##_saves[2] = {SAVES_##saves};                                           \
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

/* Ops with a fused backward kernel (a POINTWISE_BACKWARD row, its math in kernels/pointwise.h):
   the gradient is tl_<name>_backward(g, saved). tanh' = 1 - y^2, sigmoid' = y (1 - y),
   gelu' = Phi(x) + x phi(x), gelu_tanh' its tanh approximation's derivative,
   silu' = s (1 + x (1 - s)) with s = sigmoid(x). */
#define GRADIENT_BY_KERNEL(name, saves)                                                            \
    GRADIENT(name, saves) {                                                                        \
        return tl_##name##_backward(g, saved, gi);                                                 \
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

/* ---- pointwise binary ops ------------------------------------------------------------------
   GRADIENT2(name, save_a, save_b) { ... } defines the gradients of the two-input op `name`:
   g is the gradient of its output; need[0], need[1] say which of ga (for a), gb (for b) to set,
   at the output's shape (the generated code sums each back to its input's shape). a and b are
   the inputs, saved when save_a / save_b (expressions of need) hold, else NULL. */
#define GRADIENT2(name, save_a, save_b)                                                            \
    static void name##_saves(const bool *need, bool *save) {                                       \
        (void)need;                                                                                \
        save[0] = (save_a);                                                                        \
        save[1] = (save_b);                                                                        \
    }                                                                                              \
    static tl_status name##_gradient2(const tl_tensor *g, const tl_tensor *a, const tl_tensor *b,  \
                                      const bool *need, tl_tensor **ga, tl_tensor **gb)

/* d(a/b)/da = 1/b, d(a/b)/db = -(a/b)/b */
GRADIENT2(div, need[1], true) {
    if (need[0]) TL_TRY(tl_div(g, b, ga));
    if (!need[1]) return TL_OK;
    tl_tensor *g_over_b = NULL, *quotient = NULL, *product = NULL;
    tl_status status = tl_div(g, b, &g_over_b);
    if (status == TL_OK) status = tl_div(a, b, &quotient);
    if (status == TL_OK) status = tl_mul(g_over_b, quotient, &product);
    if (status == TL_OK) status = tl_neg(product, gb);
    tl_release(g_over_b), tl_release(quotient), tl_release(product);
    return status;
}

/* atan2(a, b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2) */
GRADIENT2(atan2, true, true) {
    tl_tensor *aa = NULL, *bb = NULL, *r2 = NULL, *g_over = NULL, *neg_a = NULL;
    tl_status status = tl_mul(a, a, &aa);
    if (status == TL_OK) status = tl_mul(b, b, &bb);
    if (status == TL_OK) status = tl_add(aa, bb, &r2);
    if (status == TL_OK) status = tl_div(g, r2, &g_over);
    if (status == TL_OK && need[0]) status = tl_mul(g_over, b, ga);
    if (status == TL_OK && need[1]) status = tl_neg(a, &neg_a);
    if (status == TL_OK && need[1]) status = tl_mul(g_over, neg_a, gb);
    tl_release(aa), tl_release(bb), tl_release(r2), tl_release(g_over), tl_release(neg_a);
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
        return tl_record_unary(#name, name##_backward, tl_##name(a, out), a, out, name##_saves[0], \
                               name##_saves[1], NULL);                                             \
    }
#define POINTWISE_OP(name, differentiable, backward) POINTWISE_AUTOGRAD(name)
#include "tlua/ops.def"

/* ---- generated: tl_ag_<name>_ in place, saving x's old values or x itself as the gradient
   reads them ---- */
#define POINTWISE_INPLACE_AUTOGRAD(name)                                                           \
    tl_status tl_ag_##name##_(tl_tensor *x) {                                                      \
        tl_node *node;                                                                             \
        tl_tensor *old;                                                                            \
        TL_TRY(                                                                                    \
            tl_unary_inplace_begin(#name "_", name##_backward, x, name##_saves[0], &node, &old));  \
        return tl_unary_inplace_end(node, tl_##name##_(x), x, old, name##_saves[1]);               \
    }
#define POINTWISE_OP(name, differentiable, backward) POINTWISE_INPLACE_AUTOGRAD(name)
#include "tlua/ops.def"

/* ---- generated: the same for every POINTWISE_BINARY row ---------------------------- */
#define POINTWISE_BINARY_AUTOGRAD(name)                                                            \
    static tl_status name##_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {         \
        bool save[2];                                                                              \
        name##_saves(node->needs_input_grad, save);                                                \
        tl_tensor *saved[2] = {NULL, NULL};                                                        \
        for (int i = 0; i < 2; i++)                                                                \
            if (save[i]) TL_TRY(tl_node_saved(node, i, &saved[i]));                                \
        TL_TRY(                                                                                    \
            name##_gradient2(g[0], saved[0], saved[1], node->needs_input_grad, &gi[0], &gi[1]));   \
        for (int i = 0; i < 2; i++)                                                                \
            if (gi[i]) TL_TRY(tl_reduce_to_input(node, i, TL_OK, gi));                             \
        return TL_OK;                                                                              \
    }                                                                                              \
    tl_status tl_ag_##name(tl_tensor *a, tl_tensor *b, tl_tensor **out) {                          \
        TL_TRY(tl_##name(a, b, out));                                                              \
        tl_tensor *inputs[2] = {a, b};                                                             \
        tl_node *node;                                                                             \
        TL_TRY(tl_record(#name, name##_backward, 2, inputs, *out, &node));                         \
        if (!node) return TL_OK;                                                                   \
        bool save[2];                                                                              \
        name##_saves(node->needs_input_grad, save);                                                \
        if (save[0]) TL_TRY(tl_record_save(node, 0, "self", a, *out));                             \
        if (save[1]) TL_TRY(tl_record_save(node, 1, "other", b, *out));                            \
        return TL_OK;                                                                              \
    }
#define POINTWISE_BINARY_OP(name, differentiable, backward) POINTWISE_BINARY_AUTOGRAD(name)
#include "tlua/ops.def"

/* ---- generated: tl_ag_<name>_ in place (x's old values copied when they are read) ---- */
#define POINTWISE_BINARY_INPLACE_AUTOGRAD(name)                                                    \
    tl_status tl_ag_##name##_(tl_tensor *x, tl_tensor *other) {                                    \
        return tl_binary_inplace(#name "_", name##_backward, name##_saves, tl_##name##_, x,        \
                                 other);                                                           \
    }
#define POINTWISE_BINARY_OP(name, differentiable, backward) POINTWISE_BINARY_INPLACE_AUTOGRAD(name)
#include "tlua/ops.def"
