/* Small tensor arithmetic shared by backward formulas, and recording one-input ops and
   two-operand products. */
#include <stdlib.h>

#include "autograd/autocast.h"
#include "autograd/formula.h"

static tl_status with_number(tl_status (*op)(const tl_tensor *, const tl_tensor *, tl_tensor **),
                             const tl_tensor *t, double v, tl_tensor **out) {
    tl_tensor *number;
    TL_TRY(tl_full(NULL, 0, tl_scalar_float(v), t->dtype, tl_tensor_device(t), &number));
    tl_status status = op(t, number, out);
    tl_release(number);
    return status;
}

tl_status tl_mul_number(const tl_tensor *t, double v, tl_tensor **out) {
    return with_number(tl_mul, t, v, out);
}

tl_status tl_add_number(const tl_tensor *t, double v, tl_tensor **out) {
    return with_number(tl_add, t, v, out);
}

tl_status tl_mask_or_zero(const tl_tensor *mask, const tl_tensor *t, tl_tensor **out) {
    tl_tensor *zero;
    TL_TRY(tl_zeros(NULL, 0, t->dtype, tl_tensor_device(t), &zero));
    tl_status status = tl_where(mask, t, zero, out);
    tl_release(zero);
    return status;
}

tl_status tl_mul3(const tl_tensor *a, const tl_tensor *b, const tl_tensor *c, tl_tensor **out) {
    tl_tensor *ab;
    TL_TRY(tl_mul(a, b, &ab));
    tl_status status = tl_mul(ab, c, out);
    tl_release(ab);
    return status;
}

tl_status tl_record_inputs(const char *name, tl_backward_fn backward, int count,
                           tl_tensor *const *inputs, const char *const *what, tl_saves_fn saves,
                           tl_tensor **out, tl_node **node_out) {
    if (node_out) *node_out = NULL;
    if (saves && count > 4) { /* the room save[] has */
        tl_release(*out);
        *out = NULL;
        return tl_error(TL_ERR_ARGUMENT, "%s: %d inputs to save from (at most 4)", name, count);
    }
    tl_node *node = NULL;
    tl_status status = tl_record(name, backward, count, inputs, out, &node);
    if (status == TL_OK && node && saves) {
        bool save[4] = {false, false, false, false};
        saves(node->needs_input_grad, save);
        for (int i = 0; i < count && status == TL_OK; i++)
            if (save[i]) status = tl_record_save(node, i, what[i], inputs[i], out);
    }
    if (status == TL_OK && node_out) *node_out = node;
    return status;
}

tl_status tl_record_unary(const char *name, tl_backward_fn backward, tl_status forward_status,
                          tl_tensor *a, tl_tensor **out, bool save_input, bool save_result,
                          tl_node **node_out) {
    if (node_out) *node_out = NULL;
    TL_TRY(forward_status);
    tl_node *node;
    tl_status status = tl_record(name, backward, 1, &a, out, &node);
    if (status == TL_OK && node && save_input) status = tl_record_save(node, 0, "self", a, out);
    if (status == TL_OK && node && save_result)
        status = tl_record_save(node, 0, "result", *out, out);
    if (status == TL_OK && node_out) *node_out = node;
    return status;
}

/* a product's backward reads a for b's gradient and b for a's */
static void product_saves(const bool *need, bool *save) {
    save[0] = need[1];
    save[1] = need[0];
}

static tl_status record_product(const char *name, tl_backward_fn backward, tl_product_fn product,
                                tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    TL_TRY(product(a, b, out));
    tl_tensor *inputs[2] = {a, b};
    static const char *const what[2] = {"self", "other"};
    return tl_record_inputs(name, backward, 2, inputs, what, product_saves, out, NULL);
}

tl_status tl_ag_product(tl_op op, const char *name, tl_backward_fn backward, tl_product_fn product,
                        tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    tl_tensor *operands[2] = {a, b};
    bool casted[2];
    TL_TRY(tl_autocast_operands(op, operands, 2, casted));
    return tl_autocast_release(
        operands, 2, casted,
        record_product(name, backward, product, operands[0], operands[1], out));
}

tl_status tl_reduce_to_input(tl_node *node, int i, tl_status status, tl_tensor **gi) {
    if (status != TL_OK) return status;
    tl_tensor *full = gi[i];
    gi[i] = NULL;
    return tl_sum_to_shape(full, node->input_shape[i], node->input_ndim[i], &gi[i]);
}

/* ---- in-place recording --------------------------------------------------------------- */
/* tl_inplace_begin over inputs = {x, operands...} (1 + count of them) */
static tl_status inplace_begin(const char *name, tl_backward_fn backward, tl_tensor *x, int count,
                               tl_tensor *const *inputs, tl_node **node) {
    if (!x || !tl_should_record(1 + count, inputs)) return TL_OK;
    if (tl_requires_grad(x) && tl_is_leaf(x))
        return tl_error(TL_ERR_AUTOGRAD,
                        "%s: x is a leaf tensor that requires grad, and an in-place op would "
                        "overwrite the values its gradient is for; use the out-of-place op (or "
                        "change it inside no_grad)",
                        name);
    tl_node *producer = x->autograd ? x->autograd->grad_fn : NULL;
    if (producer && producer->is_view)
        return tl_error(
            TL_ERR_AUTOGRAD,
            "%s: x is a view (made by '%s') of a tensor that requires grad; an in-place "
            "op on it is not recorded for its base: apply the op to the base, or to "
            "a clone() of the view",
            name, producer->name);
    if (!tl_requires_grad(x) && x->storage->refcount > 1)
        return tl_error(TL_ERR_AUTOGRAD,
                        "%s: an operand requires grad, so x would start a history, but x shares "
                        "its memory with other tensors (views of it, or the tensor it views), "
                        "which would not have it; clone() x first",
                        name);
    return tl_node_new(name, backward, 1 + count, inputs, node);
}

tl_status tl_inplace_begin(const char *name, tl_backward_fn backward, tl_tensor *x, int count,
                           tl_tensor *const *operands, tl_node **node) {
    *node = NULL;
    tl_tensor *local[4], **inputs = local;
    if (count < 0) return tl_error(TL_ERR_ARGUMENT, "%s: %d operands", name, count);
    if (count >= 4 && !(inputs = malloc(sizeof *inputs * ((size_t)count + 1))))
        return tl_error(TL_ERR_MEMORY, "%s: out of memory recording the graph", name);
    inputs[0] = x;
    for (int i = 0; i < count; i++) inputs[1 + i] = operands[i];
    tl_status status = inplace_begin(name, backward, x, count, inputs, node);
    if (inputs != local) free(inputs);
    return status;
}

tl_status tl_inplace_end(tl_node *node, tl_status status, tl_tensor *x) {
    if (!node) return status;
    if (status == TL_OK) status = tl_node_set_output(node, 0, x);
    tl_node_release(node); /* x holds it now (or it is freed on failure) */
    return status;
}

tl_status tl_unary_inplace_begin(const char *name, tl_backward_fn backward, tl_tensor *x,
                                 bool save_input, tl_node **node, tl_tensor **old) {
    *old = NULL;
    TL_TRY(tl_inplace_begin(name, backward, x, 0, NULL, node));
    if (!*node || !save_input) return TL_OK;
    tl_status status = tl_clone(x, old);
    if (status != TL_OK) {
        tl_node_release(*node);
        *node = NULL;
    }
    return status;
}

tl_status tl_unary_inplace_end(tl_node *node, tl_status status, tl_tensor *x, tl_tensor *old,
                               bool save_result) {
    status = tl_inplace_end(node, status, x);
    if (status == TL_OK && node && old) status = tl_node_save(node, 0, "self", old);
    if (status == TL_OK && node && save_result) status = tl_node_save(node, 0, "result", x);
    tl_release(old);
    return status;
}

tl_status tl_binary_inplace(const char *name, tl_backward_fn backward, tl_saves_fn saves,
                            tl_status (*op)(tl_tensor *x, const tl_tensor *other), tl_tensor *x,
                            tl_tensor *other) {
    tl_node *node;
    TL_TRY(tl_inplace_begin(name, backward, x, 1, &other, &node));
    bool save[2] = {false, false};
    if (node) saves(node->needs_input_grad, save);
    tl_tensor *kept[2] = {NULL, NULL};
    tl_status status = save[0] ? tl_clone(x, &kept[0]) : TL_OK;
    if (status == TL_OK && save[1]) {
        if (x->storage == other->storage)
            status = tl_clone(other, &kept[1]);
        else
            kept[1] = tl_retain(other);
    }
    if (status == TL_OK) status = op(x, other);
    status = tl_inplace_end(node, status, x);
    if (status == TL_OK && kept[0]) status = tl_node_save(node, 0, "self", kept[0]);
    if (status == TL_OK && kept[1]) status = tl_node_save(node, 1, "other", kept[1]);
    tl_release(kept[0]), tl_release(kept[1]);
    return status;
}

bool tl_grad_is_disposable(const tl_tensor *g) {
    return g->refcount == 1 && g->storage->refcount == 1 && !g->autograd && tl_is_contiguous(g) &&
           (size_t)tl_numel(g) * tl_dtype_size(g->dtype) == g->storage->nbytes;
}

bool tl_saved_is_disposable(const tl_node *node, int slot) {
    const tl_tensor *t = slot >= 0 && slot < node->num_saved ? node->saved[slot].tensor : NULL;
    return node->last_use && t && tl_grad_is_disposable(t);
}
