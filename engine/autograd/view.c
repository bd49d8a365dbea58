/* Recording views; their backward maps the gradient back onto the input's shape. */
#include <stdlib.h>
#include <string.h>

#include "autograd/formula.h"
#include "ops/view.h"

/* view, reshape, flatten, squeeze, unsqueeze: the same elements, another shape */
static tl_status reshape_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return tl_reshape(g[0], node->input_shape[0], node->input_ndim[0], &gi[0]);
}

static tl_status transpose_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return tl_transpose(g[0], (int)node->ints[0], (int)node->ints[1], &gi[0]);
}

/* the inverse permutation sends each dim back */
static tl_status permute_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    int inverse[TL_MAX_DIMS];
    for (int i = 0; i < node->input_ndim[0]; i++) inverse[node->ints[i]] = i;
    return tl_permute(g[0], inverse, node->input_ndim[0], &gi[0]);
}

static tl_status expand_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return tl_sum_to_shape(tl_retain(g[0]), node->input_shape[0], node->input_ndim[0], &gi[0]);
}

/* narrow and select: zeros everywhere but the slice the view looked at */
static tl_status slice_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi, bool select) {
    tl_tensor *full, *slice;
    TL_TRY(tl_zeros(node->input_shape[0], node->input_ndim[0], g[0]->dtype, tl_tensor_device(g[0]),
                    &full));
    tl_status status = select ? tl_select(full, node->dim, node->ints[0], &slice)
                              : tl_narrow(full, node->dim, node->ints[0], node->ints[1], &slice);
    if (status == TL_OK) {
        status = tl_copy_(slice, g[0]);
        tl_release(slice);
    }
    if (status != TL_OK) {
        tl_release(full);
        return status;
    }
    gi[0] = full;
    return TL_OK;
}

static tl_status narrow_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return slice_backward(node, g, gi, false);
}
static tl_status select_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return slice_backward(node, g, gi, true);
}

static tl_status identity_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    (void)node;
    gi[0] = tl_retain(g[0]);
    return TL_OK;
}

/* Records *out as a view of t; on failure *out is released (by tl_record) and set to NULL, so
   no caller holds it. */
static tl_status record_view(const char *name, tl_backward_fn backward, tl_tensor *t,
                             tl_tensor **out_ref, tl_node **node_out) {
    tl_node *node;
    TL_TRY(tl_record(name, backward, 1, &t, out_ref, &node));
    const tl_tensor *out = *out_ref;
    /* a view (not a copy: reshape and contiguous may copy, clone does): an in-place change of
       its base afterwards makes its history stale (graph.c), and it cannot be changed in
       place itself (formula.c) */
    if (node && out->storage == t->storage) {
        node->is_view = true;
        node->view_version = t->storage->version;
    }
    if (node_out) *node_out = node;
    return TL_OK;
}

tl_status tl_ag_view(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out) {
    TL_TRY(tl_view(t, shape, ndim, out));
    return record_view("view", reshape_backward, t, out, NULL);
}

tl_status tl_ag_reshape(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out) {
    TL_TRY(tl_reshape(t, shape, ndim, out));
    return record_view("reshape", reshape_backward, t, out, NULL);
}

tl_status tl_ag_flatten(tl_tensor *t, int start_dim, int end_dim, tl_tensor **out) {
    TL_TRY(tl_flatten(t, start_dim, end_dim, out));
    return record_view("flatten", reshape_backward, t, out, NULL);
}

tl_status tl_ag_squeeze(tl_tensor *t, int dim, tl_tensor **out) {
    TL_TRY(tl_squeeze(t, dim, out));
    return record_view("squeeze", reshape_backward, t, out, NULL);
}

tl_status tl_ag_squeeze_all(tl_tensor *t, tl_tensor **out) {
    TL_TRY(tl_squeeze_all(t, out));
    return record_view("squeeze", reshape_backward, t, out, NULL);
}

tl_status tl_ag_unsqueeze(tl_tensor *t, int dim, tl_tensor **out) {
    TL_TRY(tl_unsqueeze(t, dim, out));
    return record_view("unsqueeze", reshape_backward, t, out, NULL);
}

tl_status tl_ag_transpose(tl_tensor *t, int dim0, int dim1, tl_tensor **out) {
    TL_TRY(tl_transpose(t, dim0, dim1, out));
    tl_node *node;
    TL_TRY(record_view("transpose", transpose_backward, t, out, &node));
    if (node) node->ints[0] = dim0, node->ints[1] = dim1;
    return TL_OK;
}

tl_status tl_ag_permute(tl_tensor *t, const int *dims, int ndim, tl_tensor **out) {
    TL_TRY(tl_permute(t, dims, ndim, out));
    tl_node *node;
    TL_TRY(record_view("permute", permute_backward, t, out, &node));
    if (node)
        for (int i = 0; i < ndim; i++) node->ints[i] = dims[i] < 0 ? dims[i] + ndim : dims[i];
    return TL_OK;
}

tl_status tl_ag_expand(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out) {
    TL_TRY(tl_expand(t, shape, ndim, out));
    return record_view("expand", expand_backward, t, out, NULL);
}

tl_status tl_ag_narrow(tl_tensor *t, int dim, int64_t start, int64_t length, tl_tensor **out) {
    TL_TRY(tl_narrow(t, dim, start, length, out));
    tl_node *node;
    TL_TRY(record_view("narrow", narrow_backward, t, out, &node));
    if (node) node->dim = dim, node->ints[0] = start, node->ints[1] = length;
    return TL_OK;
}

tl_status tl_ag_select(tl_tensor *t, int dim, int64_t index, tl_tensor **out) {
    TL_TRY(tl_select(t, dim, index, out));
    tl_node *node;
    TL_TRY(record_view("select", select_backward, t, out, &node));
    if (node) node->dim = dim, node->ints[0] = index;
    return TL_OK;
}

tl_status tl_ag_contiguous(tl_tensor *t, tl_tensor **out) {
    TL_TRY(tl_contiguous(t, out));
    if (*out == t) return TL_OK;
    return record_view("contiguous", identity_backward, t, out, NULL);
}

tl_status tl_ag_clone(tl_tensor *t, tl_tensor **out) {
    TL_TRY(tl_clone(t, out));
    return record_view("clone", identity_backward, t, out, NULL);
}

/* diagonal: zeros of the input's shape with g copied onto the diagonal the view looked at */
static tl_status diagonal_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *full, *diagonal = NULL;
    TL_TRY(tl_zeros(node->input_shape[0], node->input_ndim[0], g[0]->dtype, tl_tensor_device(g[0]),
                    &full));
    tl_status status =
        tl_diagonal(full, node->ints[0], (int)node->ints[1], (int)node->ints[2], &diagonal);
    if (status == TL_OK) status = tl_copy_(diagonal, g[0]);
    tl_release(diagonal);
    if (status != TL_OK) {
        tl_release(full);
        return status;
    }
    gi[0] = full;
    return TL_OK;
}

tl_status tl_ag_diagonal(tl_tensor *t, int64_t offset, int dim1, int dim2, tl_tensor **out) {
    TL_TRY(tl_diagonal(t, offset, dim1, dim2, out));
    tl_node *node;
    TL_TRY(record_view("diagonal", diagonal_backward, t, out, &node));
    if (node) node->ints[0] = offset, node->ints[1] = dim1, node->ints[2] = dim2;
    return TL_OK;
}

/* unfold: element j of window w came from position w * step + j along dim, windows overlap:
   g [.., W, .., size] with its last dim moved after dim and merged with it ([.., W size, ..]),
   scatter-added along dim at those positions into zeros of the input's shape */
static tl_status unfold_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const int d = node->dim, n = node->input_ndim[0];
    const int64_t size = node->ints[0], step = node->ints[1];
    const int64_t windows = g[0]->shape[d], count = windows * size;
    int perm[TL_MAX_DIMS];
    int64_t merged[TL_MAX_DIMS], along[TL_MAX_DIMS];
    for (int k = 0, p = 0; k < n; k++) {
        perm[p++] = k;
        if (k == d) perm[p++] = n;
        merged[k] = k == d ? count : g[0]->shape[k];
        along[k] = k == d ? count : 1;
    }
    int64_t *values = malloc(sizeof *values * (size_t)(count > 0 ? count : 1));
    if (!values) return tl_error(TL_ERR_MEMORY, "unfold: out of memory for its gradient");
    for (int64_t w = 0; w < windows; w++)
        for (int64_t j = 0; j < size; j++) values[w * size + j] = w * step + j;
    tl_tensor *moved = NULL, *flat = NULL, *line = NULL, *column = NULL, *index = NULL;
    tl_tensor *zeros = NULL;
    tl_status status = tl_permute(g[0], perm, n + 1, &moved);
    if (status == TL_OK) status = tl_reshape(moved, merged, n, &flat);
    if (status == TL_OK)
        status = tl_from_host(values, &count, 1, TL_I64, tl_tensor_device(g[0]), &line);
    if (status == TL_OK) status = tl_view(line, along, n, &column);
    if (status == TL_OK) status = tl_expand(column, merged, n, &index);
    if (status == TL_OK)
        status = tl_zeros(node->input_shape[0], n, g[0]->dtype, tl_tensor_device(g[0]), &zeros);
    if (status == TL_OK) status = tl_scatter_add(zeros, d, index, flat, &gi[0]);
    free(values);
    tl_release(moved), tl_release(flat), tl_release(line), tl_release(column);
    tl_release(index), tl_release(zeros);
    return status;
}

tl_status tl_ag_unfold(tl_tensor *t, int dim, int64_t size, int64_t step, tl_tensor **out) {
    TL_TRY(tl_unfold(t, dim, size, step, out));
    tl_node *node;
    TL_TRY(record_view("unfold", unfold_backward, t, out, &node));
    if (!node) return TL_OK;
    node->ints[0] = size, node->ints[1] = step;
    return tl_wrap_dim("unfold", dim, t->ndim, &node->dim);
}

tl_status tl_ag_movedim(tl_tensor *t, const int *from, const int *to, int n, tl_tensor **out) {
    int perm[TL_MAX_DIMS];
    TL_TRY(tl_movedim_order(t, from, to, n, perm));
    TL_TRY(tl_permute(t, perm, t->ndim, out));
    tl_node *node;
    TL_TRY(record_view("movedim", permute_backward, t, out, &node));
    if (node)
        for (int i = 0; i < t->ndim; i++) node->ints[i] = perm[i];
    return TL_OK;
}
