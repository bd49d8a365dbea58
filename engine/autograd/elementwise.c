/* Recording elementwise ops and their backward formulas (by forward ops or
   the activation backward kernels). Gradients use "=" semantics: the engine
   accumulates. */
#include <math.h>

#include "autograd/formula.h"

/* ---- unary ----------------------------------------------------------------- */
static tl_status neg_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    (void)node;
    return tl_neg(g[0], &gi[0]);
}

/* d|x|/dx = sign(x), 0 at 0 */
static tl_status abs_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *self, *zero = NULL, *pos = NULL, *neg = NULL, *neg_g = NULL, *partial = NULL;
    TL_TRY(tl_node_saved(node, 0, &self));
    tl_status status = tl_zeros(NULL, 0, self->dtype, tl_tensor_device(self), &zero);
    if (status == TL_OK) status = tl_gt(self, zero, &pos);
    if (status == TL_OK) status = tl_lt(self, zero, &neg);
    if (status == TL_OK) status = tl_neg(g[0], &neg_g);
    if (status == TL_OK) status = tl_where(neg, neg_g, zero, &partial);
    if (status == TL_OK) status = tl_where(pos, g[0], partial, &gi[0]);
    tl_release(zero), tl_release(pos), tl_release(neg), tl_release(neg_g), tl_release(partial);
    return status;
}

static tl_status relu_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *result;
    TL_TRY(tl_node_saved(node, 0, &result));
    return tl_relu_backward(g[0], result, &gi[0]);
}

/* d(x^p)/dx = p * x^(p-1) */
static tl_status pow_scalar_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *self, *power = NULL, *scaled = NULL;
    double p = node->scalar[0];
    TL_TRY(tl_node_saved(node, 0, &self));
    if (p == 0)
        return tl_zeros(self->shape, self->ndim, g[0]->dtype, tl_tensor_device(self), &gi[0]);
    tl_status status = tl_pow_scalar(self, p - 1.0, &power);
    if (status == TL_OK) status = tl_mul_number(power, p, &scaled);
    if (status == TL_OK) status = tl_mul(g[0], scaled, &gi[0]);
    tl_release(power), tl_release(scaled);
    return status;
}

/* the gradient passes where min <= x <= max */
static tl_status clamp_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *self, *bound = NULL, *inside = NULL, *masked = NULL;
    TL_TRY(tl_node_saved(node, 0, &self));
    tl_tensor *current = tl_retain(g[0]);
    tl_status status = TL_OK;
    for (int b = 0; b < 2 && status == TL_OK; b++) {
        if (!node->has_scalar[b]) continue;
        status = tl_full(NULL, 0, tl_scalar_float(node->scalar[b]), self->dtype,
                         tl_tensor_device(self), &bound);
        if (status == TL_OK)
            status = b == 0 ? tl_ge(self, bound, &inside) : tl_le(self, bound, &inside);
        if (status == TL_OK) status = tl_mask_or_zero(inside, current, &masked);
        if (status == TL_OK) {
            tl_release(current);
            current = masked;
            masked = NULL;
        }
        tl_release(bound), tl_release(inside);
        bound = inside = NULL;
    }
    if (status != TL_OK) {
        tl_release(current);
        return status;
    }
    gi[0] = current;
    return TL_OK;
}

tl_status tl_ag_neg(tl_tensor *a, tl_tensor **out) {
    return tl_record_unary("neg", neg_backward, tl_neg(a, out), a, out, false, false, NULL);
}
tl_status tl_ag_abs(tl_tensor *a, tl_tensor **out) {
    return tl_record_unary("abs", abs_backward, tl_abs(a, out), a, out, true, false, NULL);
}
tl_status tl_ag_relu(tl_tensor *a, tl_tensor **out) {
    return tl_record_unary("relu", relu_backward, tl_relu(a, out), a, out, false, true, NULL);
}

tl_status tl_ag_pow_scalar(tl_tensor *a, double exponent, tl_tensor **out) {
    tl_node *node;
    TL_TRY(tl_record_unary("pow", pow_scalar_backward, tl_pow_scalar(a, exponent, out), a, out,
                           true, false, &node));
    if (node) node->scalar[0] = exponent;
    return TL_OK;
}

tl_status tl_ag_clamp(tl_tensor *a, bool has_min, double min, bool has_max, double max,
                      tl_tensor **out) {
    tl_node *node;
    TL_TRY(tl_record_unary("clamp", clamp_backward, tl_clamp(a, has_min, min, has_max, max, out), a,
                           out, true, false, &node));
    if (node) {
        node->has_scalar[0] = has_min, node->scalar[0] = min;
        node->has_scalar[1] = has_max, node->scalar[1] = max;
    }
    return TL_OK;
}

/* ---- binary: gradients summed back to each input's shape ------------------- */

static tl_status add_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (node->needs_input_grad[0]) {
        gi[0] = tl_retain(g[0]);
        TL_TRY(tl_reduce_to_input(node, 0, TL_OK, gi));
    }
    if (node->needs_input_grad[1]) {
        gi[1] = tl_retain(g[0]);
        TL_TRY(tl_reduce_to_input(node, 1, TL_OK, gi));
    }
    return TL_OK;
}

static tl_status sub_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (node->needs_input_grad[0]) {
        gi[0] = tl_retain(g[0]);
        TL_TRY(tl_reduce_to_input(node, 0, TL_OK, gi));
    }
    if (node->needs_input_grad[1]) TL_TRY(tl_reduce_to_input(node, 1, tl_neg(g[0], &gi[1]), gi));
    return TL_OK;
}

/* slot 0: a (saved when b's gradient is needed), slot 1: b (when a's is) */
static tl_status mul_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *a, *b;
    if (node->needs_input_grad[0]) {
        TL_TRY(tl_node_saved(node, 1, &b));
        TL_TRY(tl_reduce_to_input(node, 0, tl_mul(g[0], b, &gi[0]), gi));
    }
    if (node->needs_input_grad[1]) {
        TL_TRY(tl_node_saved(node, 0, &a));
        TL_TRY(tl_reduce_to_input(node, 1, tl_mul(g[0], a, &gi[1]), gi));
    }
    return TL_OK;
}

/* d(a^b)/da = b * a^(b-1), d(a^b)/db = a^b * log(a); slots a, b, result */
static tl_status pow_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *a, *b;
    TL_TRY(tl_node_saved(node, 0, &a));
    TL_TRY(tl_node_saved(node, 1, &b));
    if (node->needs_input_grad[0]) {
        tl_tensor *b_minus_1 = NULL, *power = NULL;
        tl_status status = tl_add_number(b, -1.0, &b_minus_1);
        if (status == TL_OK) status = tl_pow(a, b_minus_1, &power);
        if (status == TL_OK) status = tl_mul3(g[0], b, power, &gi[0]);
        tl_release(b_minus_1), tl_release(power);
        TL_TRY(tl_reduce_to_input(node, 0, status, gi));
    }
    if (node->needs_input_grad[1]) {
        tl_tensor *result, *log_a = NULL;
        TL_TRY(tl_node_saved(node, 2, &result));
        tl_status status = tl_log(a, &log_a);
        if (status == TL_OK) status = tl_mul3(g[0], result, log_a, &gi[1]);
        tl_release(log_a);
        TL_TRY(tl_reduce_to_input(node, 1, status, gi));
    }
    return TL_OK;
}

/* slot 0: a (for b's gradient), slot 1: b (for a's) */
static void mul_saves(const bool *need, bool *save) {
    save[0] = need[1];
    save[1] = need[0];
}

static void pow_saves(const bool *need, bool *save) {
    (void)need;
    save[0] = save[1] = true;
}

static const char *const self_other[2] = {"self", "other"};

/* a binary op after its forward (forward_status, *out): recorded, saving the inputs saves picks
   (named by what); on a failure after the forward *out is released and set to NULL */
static tl_status binary(const char *name, tl_backward_fn backward, tl_saves_fn saves,
                        const char *const *what, tl_status forward_status, tl_tensor *a,
                        tl_tensor *b, tl_tensor **out, tl_node **node_out) {
    if (node_out) *node_out = NULL;
    TL_TRY(forward_status);
    tl_tensor *inputs[2] = {a, b};
    return tl_record_inputs(name, backward, 2, inputs, what, saves, out, node_out);
}

tl_status tl_ag_add(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    return binary("add", add_backward, NULL, NULL, tl_add(a, b, out), a, b, out, NULL);
}

tl_status tl_ag_sub(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    return binary("sub", sub_backward, NULL, NULL, tl_sub(a, b, out), a, b, out, NULL);
}

tl_status tl_ag_mul(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    return binary("mul", mul_backward, mul_saves, self_other, tl_mul(a, b, out), a, b, out, NULL);
}

tl_status tl_ag_pow(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    static const char *const what[2] = {"self", "exponent"};
    tl_node *node;
    TL_TRY(binary("pow", pow_backward, pow_saves, what, tl_pow(a, b, out), a, b, out, &node));
    if (!node || !node->needs_input_grad[1]) return TL_OK;
    return tl_record_save(node, 2, "result", *out, out);
}

/* where(c, a, b): a's gradient where c holds, b's elsewhere; slot 0: c */
static void where_saves(const bool *need, bool *save) {
    (void)need;
    save[0] = true;
}

static tl_status where_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *cond, *zero;
    TL_TRY(tl_node_saved(node, 0, &cond));
    TL_TRY(tl_zeros(NULL, 0, g[0]->dtype, tl_tensor_device(g[0]), &zero));
    tl_status status = TL_OK;
    if (node->needs_input_grad[1])
        status = tl_reduce_to_input(node, 1, tl_where(cond, g[0], zero, &gi[1]), gi);
    if (status == TL_OK && node->needs_input_grad[2])
        status = tl_reduce_to_input(node, 2, tl_where(cond, zero, g[0], &gi[2]), gi);
    tl_release(zero);
    return status;
}

tl_status tl_ag_where(tl_tensor *cond, tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    TL_TRY(tl_where(cond, a, b, out));
    tl_tensor *inputs[3] = {cond, a, b};
    static const char *const what[3] = {"condition", NULL, NULL};
    return tl_record_inputs("where", where_backward, 3, inputs, what, where_saves, out, NULL);
}

/* ---- casts: backward by composition, cast(grad, x.dtype) ------------------- */
static tl_status cast_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return tl_to(g[0], node->input_dtype[0], node->input_device[0], &gi[0]);
}

tl_status tl_ag_to(tl_tensor *a, tl_dtype dtype, tl_device device, tl_tensor **out) {
    TL_TRY(tl_to(a, dtype, device, out));
    if (*out == a) return TL_OK; /* nothing changed: the same tensor */
    tl_node *node;
    return tl_record("cast", cast_backward, 1, &a, out, &node);
}

tl_status tl_ag_cast(tl_tensor *a, tl_dtype dtype, tl_tensor **out) {
    return tl_ag_to(a, dtype, tl_tensor_device(a), out);
}

/* ---- in place: the same gradients; x's old values are kept only where they are read --- */
tl_status tl_ag_neg_(tl_tensor *x) {
    tl_node *node;
    tl_tensor *old;
    TL_TRY(tl_unary_inplace_begin("neg_", neg_backward, x, false, &node, &old));
    return tl_unary_inplace_end(node, tl_neg_(x), x, old, false);
}

tl_status tl_ag_abs_(tl_tensor *x) {
    tl_node *node;
    tl_tensor *old;
    TL_TRY(tl_unary_inplace_begin("abs_", abs_backward, x, true, &node, &old));
    return tl_unary_inplace_end(node, tl_abs_(x), x, old, false);
}

tl_status tl_ag_relu_(tl_tensor *x) {
    tl_node *node;
    tl_tensor *old;
    TL_TRY(tl_unary_inplace_begin("relu_", relu_backward, x, false, &node, &old));
    return tl_unary_inplace_end(node, tl_relu_(x), x, old, true);
}

tl_status tl_ag_clamp_(tl_tensor *x, bool has_min, double min, bool has_max, double max) {
    tl_node *node;
    tl_tensor *old;
    TL_TRY(tl_unary_inplace_begin("clamp_", clamp_backward, x, true, &node, &old));
    if (node) {
        node->has_scalar[0] = has_min, node->scalar[0] = min;
        node->has_scalar[1] = has_max, node->scalar[1] = max;
    }
    return tl_unary_inplace_end(node, tl_clamp_(x, has_min, min, has_max, max), x, old, false);
}

tl_status tl_ag_add_(tl_tensor *x, tl_tensor *other) {
    tl_node *node;
    TL_TRY(tl_inplace_begin("add_", add_backward, x, 1, &other, &node));
    return tl_inplace_end(node, tl_add_(x, other), x);
}

tl_status tl_ag_sub_(tl_tensor *x, tl_tensor *other) {
    tl_node *node;
    TL_TRY(tl_inplace_begin("sub_", sub_backward, x, 1, &other, &node));
    return tl_inplace_end(node, tl_sub_(x, other), x);
}

/* mul_saves: slot 0 x's old values (for other's gradient), slot 1 other (for x's) */
tl_status tl_ag_mul_(tl_tensor *x, tl_tensor *other) {
    return tl_binary_inplace("mul_", mul_backward, mul_saves, tl_mul_, x, other);
}

/* fill_ and copy_: x's old values get no gradient; copy_'s source gets the gradient, in its
   dtype and summed back over the dims it was broadcast along */
static tl_status fill_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    (void)node, (void)g, (void)gi;
    return TL_OK;
}

static tl_status copy_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (!node->needs_input_grad[1]) return TL_OK;
    return tl_reduce_to_input(node, 1, tl_cast(g[0], node->input_dtype[1], &gi[1]), gi);
}

tl_status tl_ag_fill_(tl_tensor *x, tl_scalar value) {
    tl_node *node;
    TL_TRY(tl_inplace_begin("fill_", fill_backward, x, 0, NULL, &node));
    return tl_inplace_end(node, tl_fill_(x, value), x);
}

tl_status tl_ag_copy_(tl_tensor *x, tl_tensor *src) {
    tl_node *node;
    TL_TRY(tl_inplace_begin("copy_", copy_backward, x, 1, &src, &node));
    return tl_inplace_end(node, tl_copy_(x, src), x);
}
