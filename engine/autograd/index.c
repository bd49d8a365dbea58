/* Recording gather and scatter_add: each one's gradient is the other (no kernel of its own). */
#include "autograd/formula.h"

/* x's gradient from gather: g added at the positions it was read from,
   scatter_add(zeros like x, dim, index, g). Saved: index. */
static tl_status gather_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *index, *zeros = NULL;
    TL_TRY(tl_node_saved(node, 0, &index));
    tl_status status = tl_zeros(node->input_shape[0], node->input_ndim[0], node->input_dtype[0],
                                node->input_device[0], &zeros);
    if (status == TL_OK) status = tl_scatter_add(zeros, node->dim, index, g[0], &gi[0]);
    tl_release(zeros);
    return status;
}

tl_status tl_ag_gather(tl_tensor *x, int dim, tl_tensor *index, tl_tensor **out) {
    TL_TRY(tl_gather(x, dim, index, out));
    tl_node *node;
    TL_TRY(tl_record("gather", gather_backward, 1, &x, *out, &node)); /* releases *out */
    if (!node) return TL_OK;
    TL_TRY(tl_wrap_dim("gather", dim, x->ndim, &node->dim));
    return tl_record_save(node, 0, "index", index, *out);
}

/* x's gradient is g; src's is g read where src was added, gather(g, dim, index), with zeros
   where src reached past index's extent. Saved: index. */
static tl_status scatter_add_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (node->needs_input_grad[0]) gi[0] = tl_retain(g[0]);
    if (!node->needs_input_grad[1]) return TL_OK;
    tl_tensor *index, *read = NULL, *grad = NULL, *part = NULL;
    TL_TRY(tl_node_saved(node, 0, &index));
    tl_status status = tl_gather(g[0], node->dim, index, &read);
    bool whole = status == TL_OK && index->ndim == node->input_ndim[1];
    for (int d = 0; whole && d < index->ndim; d++)
        whole = index->shape[d] == node->input_shape[1][d];
    if (status == TL_OK && whole) {
        gi[1] = read;
        return TL_OK;
    }
    if (status == TL_OK)
        status = tl_zeros(node->input_shape[1], node->input_ndim[1], node->input_dtype[1],
                          node->input_device[1], &grad);
    part = grad ? tl_retain(grad) : NULL;
    for (int d = 0; status == TL_OK && d < index->ndim; d++) {
        tl_tensor *narrower = NULL;
        status = tl_narrow(part, d, 0, index->shape[d], &narrower);
        tl_release(part);
        part = narrower;
    }
    if (status == TL_OK) status = tl_copy_(part, read);
    tl_release(part), tl_release(read);
    if (status != TL_OK) {
        tl_release(grad);
        return status;
    }
    gi[1] = grad;
    return TL_OK;
}

tl_status tl_ag_scatter_add(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src,
                            tl_tensor **out) {
    TL_TRY(tl_scatter_add(x, dim, index, src, out));
    tl_node *node;
    TL_TRY(tl_record("scatter_add", scatter_add_backward, 2, (tl_tensor *[]){x, src}, *out,
                     &node)); /* releases *out */
    if (!node) return TL_OK;
    TL_TRY(tl_wrap_dim("scatter_add", dim, x->ndim, &node->dim));
    return tl_record_save(node, 0, "index", index, *out);
}

tl_status tl_ag_index_select(tl_tensor *x, int dim, tl_tensor *index, tl_tensor **out) {
    tl_tensor *positions;
    TL_TRY(tl_index_select_as_gather(x, dim, index, &positions));
    tl_status status = tl_ag_gather(x, dim, positions, out);
    tl_release(positions);
    return status;
}
