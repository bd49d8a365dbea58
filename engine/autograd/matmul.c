/* Recording matmul: saves other only for the input's gradient and input only
   for other's, and calls only the backward kernels that are needed. */
#include "autograd/formula.h"

/* slot 0: input (kept when other's gradient is needed), slot 1: other */
static tl_status matmul_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (node->needs_input_grad[0]) {
        tl_tensor *other;
        TL_TRY(tl_node_saved(node, 1, &other));
        TL_TRY(tl_matmul_backward_input(g[0], other, node->input_shape[0], node->input_ndim[0],
                                        &gi[0]));
    }
    if (node->needs_input_grad[1]) {
        tl_tensor *input;
        TL_TRY(tl_node_saved(node, 0, &input));
        TL_TRY(tl_matmul_backward_other(g[0], input, node->input_shape[1], node->input_ndim[1],
                                        &gi[1]));
    }
    return TL_OK;
}

tl_status tl_ag_matmul(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    return tl_ag_product(TL_OP_matmul, "matmul", matmul_backward, tl_matmul, a, b, out);
}

/* x <- x @ w: x's gradient is g @ w^T (slot 0: w), written over g when backward owns it */
static tl_status matmul_inplace_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *w;
    TL_TRY(tl_node_saved(node, 0, &w));
    if (!tl_grad_is_disposable(g[0]) || g[0]->dtype != w->dtype)
        return tl_matmul_backward_input(g[0], w, node->input_shape[0], node->input_ndim[0], &gi[0]);
    tl_tensor *w_t;
    TL_TRY(tl_transpose(w, 0, 1, &w_t));
    tl_status status = tl_matmul_(g[0], w_t);
    tl_release(w_t);
    if (status == TL_OK) gi[0] = tl_retain(g[0]);
    return status;
}

tl_status tl_ag_matmul_(tl_tensor *x, tl_tensor *w) {
    if (w && tl_requires_grad(w) && tl_is_grad_enabled())
        return tl_error(TL_ERR_AUTOGRAD,
                        "matmul_: w requires grad, and its gradient x^T @ grad needs x before "
                        "the product, which matmul_ overwrites; use x:matmul(w), or freeze w");
    tl_node *node;
    TL_TRY(tl_inplace_begin("matmul_", matmul_inplace_backward, x, 1, &w, &node));
    tl_status status = tl_inplace_end(node, tl_matmul_(x, w), x);
    if (status == TL_OK && node) status = tl_node_save(node, 0, "w", w);
    return status;
}
