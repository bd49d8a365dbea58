/* Recording shape ops: flip, roll, constant pad and diag_embed with nodes of their own (each
   gradient is the same op undone: flip(g), roll(g, -shifts), pad(g, -pads), diagonal(g)); tril,
   triu, tile, repeat_interleave, diag and the other pad modes run their compositions
   (ops/compose.h) through recorded steps, which make their gradients. */
#include "autograd/formula.h"
#include "ops/compose.h"

/* ---- the recording composer ----------------------------------------------------------------
   A composition releases what it holds when a step fails, so a failed step must leave *out NULL:
   a recording op whose node could not be made has released its result already (tl_record). */
static tl_status settled(tl_status status, tl_tensor **out) {
    if (status != TL_OK) *out = NULL;
    return status;
}
static tl_status recorded_cat(tl_tensor *const *list, int n, int dim, tl_tensor **out) {
    return settled(tl_ag_cat(list, n, dim, out), out);
}
static tl_status recorded_flip(tl_tensor *t, const int *dims, int ndims, tl_tensor **out) {
    return settled(tl_ag_flip(t, dims, ndims, out), out);
}
static tl_status recorded_index_select(tl_tensor *x, int dim, tl_tensor *index, tl_tensor **out) {
    return settled(tl_ag_index_select(x, dim, index, out), out);
}
static tl_status recorded_where(tl_tensor *cond, tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    return settled(tl_ag_where(cond, a, b, out), out);
}
static tl_status recorded_diag_embed(tl_tensor *x, int64_t offset, int dim1, int dim2,
                                     tl_tensor **out) {
    return settled(tl_ag_diag_embed(x, offset, dim1, dim2, out), out);
}
/* the view steps (autograd/view.c) leave *out NULL on failure themselves */
static const tl_composer recording = {
    .narrow = tl_ag_narrow,
    .reshape = tl_ag_reshape,
    .expand = tl_ag_expand,
    .clone = tl_ag_clone,
    .cat = recorded_cat,
    .flip = recorded_flip,
    .index_select = recorded_index_select,
    .where = recorded_where,
    .diagonal = tl_ag_diagonal,
    .diag_embed = recorded_diag_embed,
};

tl_status tl_ag_tril(tl_tensor *x, int64_t k, tl_tensor **out) {
    return tl_triangle_with(&recording, x, k, false, out);
}
tl_status tl_ag_triu(tl_tensor *x, int64_t k, tl_tensor **out) {
    return tl_triangle_with(&recording, x, k, true, out);
}
tl_status tl_ag_tile(tl_tensor *x, const int64_t *reps, int n, tl_tensor **out) {
    return tl_tile_with(&recording, x, reps, n, out);
}
tl_status tl_ag_repeat_interleave(tl_tensor *x, int64_t repeats, int dim, bool flatten,
                                  tl_tensor **out) {
    return tl_repeat_interleave_with(&recording, x, repeats, dim, flatten, out);
}
tl_status tl_ag_repeat_interleave_counts(tl_tensor *x, const tl_tensor *repeats, int dim,
                                         bool flatten, tl_tensor **out) {
    return tl_repeat_interleave_counts_with(&recording, x, repeats, dim, flatten, out);
}
tl_status tl_ag_diag(tl_tensor *x, int64_t k, tl_tensor **out) {
    return tl_diag_with(&recording, x, k, out);
}

/* ---- flip: its own inverse. ints: the flipped dims (0-based), dim: their count ------------- */
static tl_status flip_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    int dims[TL_MAX_DIMS];
    for (int i = 0; i < node->dim; i++) dims[i] = (int)node->ints[i];
    return tl_flip(g[0], dims, node->dim, &gi[0]);
}

tl_status tl_ag_flip(tl_tensor *x, const int *dims, int ndims, tl_tensor **out) {
    int wrapped[TL_MAX_DIMS];
    TL_TRY(tl_flip_dims(x, dims, ndims, wrapped));
    TL_TRY(tl_flip(x, dims, ndims, out));
    tl_node *node;
    TL_TRY(tl_record("flip", flip_backward, 1, &x, out, &node)); /* releases *out on failure */
    if (!node) return TL_OK;
    node->dim = ndims;
    for (int i = 0; i < ndims; i++) node->ints[i] = wrapped[i];
    return TL_OK;
}

/* ---- roll: rolled back. ints: each dim's shift in [0, size) (keepdim: one shift of the
   elements in row-major order, ints[0] in [0, numel)) ------------------------------------- */
static tl_status roll_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const bool flat = node->keepdim;
    int64_t back[TL_MAX_DIMS];
    if (flat) {
        const int64_t numel = tl_numel(g[0]);
        back[0] = node->ints[0] ? numel - node->ints[0] : 0;
    } else {
        for (int d = 0; d < node->input_ndim[0]; d++)
            back[d] = node->ints[d] ? node->input_shape[0][d] - node->ints[d] : 0;
    }
    return tl_roll_normalized(g[0], back, flat, &gi[0]);
}

tl_status tl_ag_roll(tl_tensor *x, const int64_t *shifts, const int *dims, int n, tl_tensor **out) {
    int64_t shift[TL_MAX_DIMS];
    TL_TRY(tl_roll_shifts(x, shifts, dims, n, shift));
    TL_TRY(tl_roll_normalized(x, shift, n == 0, out));
    tl_node *node;
    TL_TRY(tl_record("roll", roll_backward, 1, &x, out, &node));
    if (!node) return TL_OK;
    node->keepdim = n == 0;
    for (int d = 0; d < (n == 0 ? 1 : x->ndim); d++) node->ints[d] = shift[d];
    return TL_OK;
}

/* ---- pad, constant mode: the gradient is g cut where x was padded (and zero-padded where x
   was cut): pad(g, -pads). ints: each padded dim's pad before it, dim: their count; the pads
   after come from the shapes ---------------------------------------------------------------- */
static tl_status pad_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    int64_t back[2 * TL_MAX_DIMS];
    const int n = node->input_ndim[0];
    for (int i = 0; i < node->dim; i++) {
        const int d = n - 1 - i;
        const int64_t before = node->ints[i];
        const int64_t after = node->output_shape[0][d] - node->input_shape[0][d] - before;
        back[2 * i] = -before;
        back[2 * i + 1] = -after;
    }
    return tl_pad(g[0], back, 2 * node->dim, TL_PAD_CONSTANT, tl_scalar_int(0), &gi[0]);
}

tl_status tl_ag_pad(tl_tensor *x, const int64_t *pads, int npads, tl_pad_mode mode, tl_scalar value,
                    tl_tensor **out) {
    if (mode != TL_PAD_CONSTANT) return tl_pad_edges_with(&recording, x, pads, npads, mode, out);
    TL_TRY(tl_pad(x, pads, npads, mode, value, out));
    tl_node *node;
    TL_TRY(tl_record("pad", pad_backward, 1, &x, out, &node));
    if (!node) return TL_OK;
    node->dim = npads / 2;
    for (int i = 0; i < npads / 2; i++) node->ints[i] = pads[2 * i];
    return TL_OK;
}

/* ---- diag_embed: the gradient is g's diagonal (a view). ints: offset, dim1, dim2 ---------- */
static tl_status diag_embed_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return tl_diagonal(g[0], node->ints[0], (int)node->ints[1], (int)node->ints[2], &gi[0]);
}

tl_status tl_ag_diag_embed(tl_tensor *x, int64_t offset, int dim1, int dim2, tl_tensor **out) {
    TL_TRY(tl_diag_embed(x, offset, dim1, dim2, out));
    tl_node *node;
    TL_TRY(tl_record("diag_embed", diag_embed_backward, 1, &x, out, &node));
    if (!node) return TL_OK;
    node->ints[0] = offset;
    TL_TRY(tl_wrap_dim("diag_embed", dim1, x->ndim + 1, &dim1));
    TL_TRY(tl_wrap_dim("diag_embed", dim2, x->ndim + 1, &dim2));
    node->ints[1] = dim1, node->ints[2] = dim2;
    return TL_OK;
}
