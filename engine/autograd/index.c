/* Recording gather, scatter_add and scatter (in place too): their gradients are each other's
 * (no kernel of their own). */
#include "autograd/formula.h"
#include "autograd/index.h"

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
    TL_TRY(tl_record("gather", gather_backward, 1, &x, out, &node)); /* releases *out */
    if (!node) return TL_OK;
    TL_TRY(tl_wrap_dim("gather", dim, x->ndim, &node->dim));
    return tl_record_save(node, 0, "index", index, out);
}

/* read (index's shape, taken) as src's gradient: zero-padded to src's shape (node input 1)
   where src reached past index's extent */
tl_status tl_scatter_src_grad(tl_node *node, tl_tensor *read, tl_tensor **out) {
    bool whole = read->ndim == node->input_ndim[1];
    for (int d = 0; whole && d < read->ndim; d++) whole = read->shape[d] == node->input_shape[1][d];
    if (whole) {
        *out = read;
        return TL_OK;
    }
    tl_tensor *grad = NULL, *part = NULL;
    tl_status status = tl_zeros(node->input_shape[1], node->input_ndim[1], node->input_dtype[1],
                                node->input_device[1], &grad);
    part = grad ? tl_retain(grad) : NULL;
    for (int d = 0; status == TL_OK && d < read->ndim; d++) {
        tl_tensor *narrower = NULL;
        status = tl_narrow(part, d, 0, read->shape[d], &narrower);
        tl_release(part);
        part = narrower;
    }
    if (status == TL_OK) status = tl_copy_(part, read);
    tl_release(part), tl_release(read);
    if (status != TL_OK) {
        tl_release(grad);
        return status;
    }
    *out = grad;
    return TL_OK;
}

/* t read back at the places src was written to or added at: gather(t, dim, index), padded */
static tl_status read_back(tl_node *node, const tl_tensor *t, const tl_tensor *index,
                           tl_tensor **out) {
    tl_tensor *read;
    TL_TRY(tl_gather(t, node->dim, index, &read));
    return tl_scatter_src_grad(node, read, out);
}

/* scatter_add: x's gradient is g; src's is g read where src was added. Saved: index. */
static tl_status scatter_add_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (node->needs_input_grad[0]) gi[0] = tl_retain(g[0]);
    if (!node->needs_input_grad[1]) return TL_OK;
    tl_tensor *index;
    TL_TRY(tl_node_saved(node, 0, &index));
    return read_back(node, g[0], index, &gi[1]);
}

/* scatter: x's gradient is g with the written places zeroed (their old values were lost); src's
   (when src is an input) is g read where src was written. Of duplicates each written value gets
   the place's gradient. Saved: index. */
static tl_status scatter_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *index;
    TL_TRY(tl_node_saved(node, 0, &index));
    if (node->needs_input_grad[0])
        TL_TRY(tl_scatter_value(g[0], node->dim, index, tl_scalar_int(0), &gi[0]));
    if (node->num_inputs < 2 || !node->needs_input_grad[1]) return TL_OK;
    return read_back(node, g[0], index, &gi[1]);
}

/* records op (out of place: *out made from x and src) with its index saved */
static tl_status record_scatter(const char *name, tl_backward_fn backward, tl_tensor *x, int dim,
                                tl_tensor *index, tl_tensor *src, tl_tensor **out) {
    tl_node *node;
    TL_TRY(tl_record(name, backward, src ? 2 : 1, (tl_tensor *[]){x, src}, out,
                     &node)); /* releases *out */
    if (!node) return TL_OK;
    TL_TRY(tl_wrap_dim(name, dim, x->ndim, &node->dim));
    return tl_record_save(node, 0, "index", index, out);
}

/* the same in place: x's old history and src are the node's inputs, x its output */
static tl_status scatter_in_place(const char *name, tl_backward_fn backward, tl_tensor *x, int dim,
                                  tl_tensor *index, tl_tensor *src, tl_status (*op)(void *),
                                  void *call) {
    tl_node *node;
    TL_TRY(tl_inplace_begin(name, backward, x, src ? 1 : 0, &src, &node));
    tl_tensor *kept = NULL; /* index, copied when writing x would change it */
    tl_status status = TL_OK;
    if (node) status = x->storage == index->storage ? tl_clone(index, &kept) : TL_OK;
    if (node && status == TL_OK && !kept) kept = tl_retain(index);
    if (status == TL_OK) status = op(call);
    status = tl_inplace_end(node, status, x);
    if (status == TL_OK && node) status = tl_wrap_dim(name, dim, x->ndim, &node->dim);
    if (status == TL_OK && node) status = tl_node_save(node, 0, "index", kept);
    tl_release(kept);
    return status;
}

/* the in-place calls, one argument block for scatter_in_place */
typedef struct scatter_call {
    tl_tensor *x, *index, *src;
    int dim;
    tl_scalar value;
} scatter_call;
static tl_status call_scatter_add_(void *c) {
    scatter_call *a = c;
    return tl_scatter_add_(a->x, a->dim, a->index, a->src);
}
static tl_status call_scatter_(void *c) {
    scatter_call *a = c;
    return tl_scatter_(a->x, a->dim, a->index, a->src);
}
static tl_status call_scatter_value_(void *c) {
    scatter_call *a = c;
    return tl_scatter_value_(a->x, a->dim, a->index, a->value);
}

tl_status tl_ag_scatter_add(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src,
                            tl_tensor **out) {
    TL_TRY(tl_scatter_add(x, dim, index, src, out));
    return record_scatter("scatter_add", scatter_add_backward, x, dim, index, src, out);
}

tl_status tl_ag_scatter(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src, tl_tensor **out) {
    TL_TRY(tl_scatter(x, dim, index, src, out));
    return record_scatter("scatter", scatter_backward, x, dim, index, src, out);
}

tl_status tl_ag_scatter_value(tl_tensor *x, int dim, tl_tensor *index, tl_scalar value,
                              tl_tensor **out) {
    TL_TRY(tl_scatter_value(x, dim, index, value, out));
    return record_scatter("scatter", scatter_backward, x, dim, index, NULL, out);
}

tl_status tl_ag_scatter_add_(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src) {
    scatter_call c = {.x = x, .index = index, .src = src, .dim = dim};
    return scatter_in_place("scatter_add_", scatter_add_backward, x, dim, index, src,
                            call_scatter_add_, &c);
}

tl_status tl_ag_scatter_(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src) {
    scatter_call c = {.x = x, .index = index, .src = src, .dim = dim};
    return scatter_in_place("scatter_", scatter_backward, x, dim, index, src, call_scatter_, &c);
}

tl_status tl_ag_scatter_value_(tl_tensor *x, int dim, tl_tensor *index, tl_scalar value) {
    scatter_call c = {.x = x, .index = index, .dim = dim, .value = value};
    return scatter_in_place("scatter_", scatter_backward, x, dim, index, NULL, call_scatter_value_,
                            &c);
}

tl_status tl_ag_index_select(tl_tensor *x, int dim, tl_tensor *index, tl_tensor **out) {
    tl_tensor *positions;
    TL_TRY(tl_index_select_as_gather(x, dim, index, &positions));
    tl_status status = tl_ag_gather(x, dim, positions, out);
    tl_release(positions);
    return status;
}
