/* Recording cat (each piece's gradient a view of the result's gradient) and split and unbind
   (the pieces' gradients joined into one buffer). */
#include "autograd/formula.h"
#include "core/storage.h"
#include "ops/view.h"

/* node->dim: the joined dim; the pieces' sizes along it come from their recorded shapes (an
   empty piece, skipped by cat, takes a zero gradient of its shape). */
static tl_status cat_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    int64_t at = 0;
    for (int i = 0; i < node->num_inputs; i++) {
        int64_t numel = 1;
        for (int k = 0; k < node->input_ndim[i]; k++) numel *= node->input_shape[i][k];
        const int64_t size = numel ? node->input_shape[i][node->dim] : 0;
        tl_status status = TL_OK;
        if (node->needs_input_grad[i]) {
            status = numel ? tl_narrow(g[0], node->dim, at, size, &gi[i])
                           : tl_zeros(node->input_shape[i], node->input_ndim[i],
                                      node->input_dtype[i], node->input_device[i], &gi[i]);
        }
        if (status != TL_OK) return status;
        at += size;
    }
    return TL_OK;
}

tl_status tl_ag_cat(tl_tensor *const *list, int n, int dim, tl_tensor **out) {
    TL_TRY(tl_cat(list, n, dim, out));
    int r = 0;
    while (r < n - 1 && tl_numel(list[r]) == 0) r++;
    tl_node *node;
    TL_TRY(tl_record("cat", cat_backward, n, list, out, &node)); /* releases *out */
    if (node) TL_TRY(tl_wrap_dim("cat", dim, list[r]->ndim, &node->dim));
    return TL_OK;
}

/* ---- split, chunk, unbind: one node of many views ---------------------------------------------
   node->dim is the dim cut; node->keepdim says whether the pieces keep it (split) or lose it
   (unbind: piece i is slice i). The input's gradient is one buffer with each piece's gradient in
   its slice. When the pieces' gradients already lie in one dense buffer in that arrangement (a
   fused backward wrote them side by side), the input's gradient is a view of it: no kernel. */

static int64_t piece_length(const tl_node *node, int i) {
    return node->keepdim ? node->output_shape[i][node->dim] : 1;
}

/* The input's gradient as a view of the storage the pieces' gradients g share, or NULL when
   they are not laid out as the slices of one dense tensor of the input's shape. */
static tl_status pieces_as_view(tl_node *node, tl_tensor *const *g, tl_tensor **out) {
    *out = NULL;
    const int d = node->dim, ndim = node->input_ndim[0], n = node->num_outputs;
    int first = -1, second = -1;
    for (int i = 0; i < n; i++) {
        if (tl_numel(g[i]) == 0) continue;
        if (first < 0)
            first = i;
        else if (second < 0)
            second = i;
    }
    if (first < 0) return TL_OK;
    const tl_tensor *f = g[first];
    /* the input's strides: the first piece's, and along d the step between pieces */
    int64_t strides[TL_MAX_DIMS];
    for (int k = 0, j = 0; k < ndim; k++)
        strides[k] = k == d && !node->keepdim ? 0 : f->strides[j++];
    int64_t before = 0;
    for (int i = 0; i < first; i++) before += piece_length(node, i);
    if (second >= 0) {
        int64_t between = 0;
        for (int i = first; i < second; i++) between += piece_length(node, i);
        const int64_t step = g[second]->offset - f->offset;
        if (step <= 0 || step % between) return TL_OK;
        strides[d] = step / between;
    } else if (!node->keepdim || node->input_shape[0][d] != piece_length(node, first)) {
        return TL_OK; /* one piece of several: nothing to join it with */
    }
    if (f->offset < before * strides[d]) return TL_OK;
    const int64_t base = f->offset - before * strides[d];
    int64_t at = 0;
    for (int i = 0; i < n; at += piece_length(node, i), i++) {
        const tl_tensor *p = g[i];
        if (tl_numel(p) == 0) continue;
        if (p->storage != f->storage || p->dtype != f->dtype || p->offset != base + at * strides[d])
            return TL_OK;
        for (int k = 0, j = 0; k < ndim; k++) {
            if (k == d && !node->keepdim) continue;
            if (p->shape[j] != 1 && p->strides[j] != strides[k]) return TL_OK;
            j++;
        }
    }
    if (!tl_is_dense_layout(node->input_shape[0], strides, ndim)) return TL_OK;
    return tl_make_view(f, node->input_shape[0], strides, ndim, base, out);
}

static tl_status split_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *joined;
    TL_TRY(pieces_as_view(node, g, &joined));
    if (joined) {
        gi[0] = joined;
        return TL_OK;
    }
    TL_TRY(tl_empty(node->input_shape[0], node->input_ndim[0], node->output_dtype[0],
                    tl_tensor_device(g[0]), &joined));
    tl_status status = TL_OK;
    int64_t at = 0;
    for (int i = 0; i < node->num_outputs && status == TL_OK; i++) {
        const int64_t length = piece_length(node, i);
        tl_tensor *slice = NULL;
        if (length > 0 && tl_numel(g[i]) > 0) {
            status = node->keepdim ? tl_narrow(joined, node->dim, at, length, &slice)
                                   : tl_select(joined, node->dim, at, &slice);
            if (status == TL_OK) status = tl_copy_(slice, g[i]);
            tl_release(slice);
        }
        at += length;
    }
    if (status != TL_OK) {
        tl_release(joined);
        return status;
    }
    gi[0] = joined;
    return TL_OK;
}

/* Makes the n views out (of t, cut along dim d) the outputs of one node. */
static tl_status record_pieces(const char *name, tl_tensor *t, int d, bool keepdim, int n,
                               tl_tensor **out) {
    if (n == 0) return TL_OK;
    if (!tl_dtype_is_floating(t->dtype) || !tl_should_record(1, &t)) {
        for (int i = 0; i < n; i++) tl_mark_no_grad(1, &t, out[i]);
        return TL_OK;
    }
    tl_node *node;
    tl_status status = tl_node_new_multi(name, split_backward, 1, &t, n, &node);
    if (status == TL_OK) {
        node->dim = d;
        node->keepdim = keepdim;
        node->is_view = true;
        node->view_version = t->storage->version;
        for (int i = 0; i < n && status == TL_OK; i++) status = tl_node_set_output(node, i, out[i]);
        tl_node_release(node); /* the pieces hold it */
    }
    if (status != TL_OK)
        for (int i = 0; i < n; i++) tl_release(out[i]), out[i] = NULL;
    return status;
}

tl_status tl_ag_split(tl_tensor *t, int dim, const int64_t *sizes, int n, tl_tensor **out) {
    TL_TRY(tl_split(t, dim, sizes, n, out));
    int d;
    TL_TRY(tl_wrap_dim("split", dim, t->ndim, &d));
    return record_pieces("split", t, d, true, n, out);
}

tl_status tl_ag_unbind(tl_tensor *t, int dim, tl_tensor **out) {
    TL_TRY(tl_unbind(t, dim, out));
    int d;
    TL_TRY(tl_wrap_dim("unbind", dim, t->ndim, &d));
    return record_pieces("unbind", t, d, false, (int)t->shape[d], out);
}
