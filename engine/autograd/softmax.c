/* Recording softmax_ and log_softmax_ in place: the gradient reads only the result, which is x. */
#include "autograd/formula.h"

/* slot 0: the result (x after the op). The gradient is written over the incoming gradient or
   the saved result when nothing else holds them, so the in-place chain needs no new tensor. */
static tl_status inplace_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi,
                                  bool log_mode) {
    tl_tensor *y;
    TL_TRY(tl_node_saved(node, 0, &y));
    tl_status (*into)(tl_tensor *, const tl_tensor *, const tl_tensor *, int) =
        log_mode ? tl_log_softmax_backward_into : tl_softmax_backward_into;
    tl_tensor *target = tl_grad_is_disposable(g[0])                                  ? g[0]
                        : tl_saved_is_disposable(node, 0) && g[0]->dtype == y->dtype ? y
                                                                                     : NULL;
    if (!target)
        return (log_mode ? tl_log_softmax_backward : tl_softmax_backward)(g[0], y, node->dim,
                                                                          &gi[0]);
    TL_TRY(into(target, g[0], y, node->dim));
    gi[0] = tl_retain(target);
    return TL_OK;
}

static tl_status softmax_inplace_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return inplace_backward(node, g, gi, false);
}

static tl_status log_softmax_inplace_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return inplace_backward(node, g, gi, true);
}

static tl_status record(const char *name, tl_backward_fn backward,
                        tl_status (*op)(tl_tensor *, int), tl_tensor *x, int dim) {
    tl_node *node;
    tl_tensor *old;
    TL_TRY(tl_unary_inplace_begin(name, backward, x, false, &node, &old));
    if (node) {
        tl_status status = tl_wrap_dim(name, dim, x->ndim, &node->dim);
        if (status != TL_OK) {
            tl_node_release(node);
            tl_release(old);
            return status;
        }
        if (x->ndim == 0) node->dim = 0;
    }
    return tl_unary_inplace_end(node, op(x, dim), x, old, true);
}

tl_status tl_ag_softmax_(tl_tensor *x, int dim) {
    return record("softmax_", softmax_inplace_backward, tl_softmax_, x, dim);
}

tl_status tl_ag_log_softmax_(tl_tensor *x, int dim) {
    return record("log_softmax_", log_softmax_inplace_backward, tl_log_softmax_, x, dim);
}
