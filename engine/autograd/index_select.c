/* Recording indexing by a list of positions: index_add, index_copy and index_fill (in place too)
 * as recorded scatters through tl_index_positions' view of the index, take and masked_select as
 * recorded reshapes and gathers (their gradients come with those ops), and masked_fill_. */
#include <math.h>

#include "autograd/formula.h"
#include "ops/checks.h"

/* status, with *out cleared when it failed: a recording op that fails has released its result */
static tl_status made(tl_status status, tl_tensor **out) {
    if (status != TL_OK) *out = NULL;
    return status;
}

/* ---- along a dim ----------------------------------------------------------------------------- */
/* alpha * src, recorded (src itself, retained, when alpha is 1) */
static tl_status scaled_src(const char *op, tl_tensor *x, tl_tensor *src, double alpha,
                            tl_tensor **out) {
    if (!tl_dtype_is_floating(x->dtype) && alpha != floor(alpha))
        return tl_error(TL_ERR_ARGUMENT, "%s: alpha must be an integer for an %s x, got %g", op,
                        tl_dtype_name(x->dtype), alpha);
    if (alpha == 1) {
        *out = tl_retain(src);
        return TL_OK;
    }
    tl_tensor *factor;
    const tl_scalar a =
        tl_dtype_is_floating(x->dtype) ? tl_scalar_float(alpha) : tl_scalar_int((int64_t)alpha);
    TL_TRY(tl_full(NULL, 0, a, x->dtype, tl_tensor_device(x), &factor));
    tl_status status = made(tl_ag_mul(src, factor, out), out);
    tl_release(factor);
    return status;
}

/* the positions (x's rank) of an index_* op; *scaled: alpha * src when src is given */
static tl_status begin(const char *op, tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src,
                       double alpha, bool in_place, int *d, tl_tensor **positions,
                       tl_tensor **scaled) {
    *scaled = NULL;
    if (in_place) TL_TRY(tl_check_writable(op, "x", x));
    TL_TRY(tl_index_positions(op, x, dim, index, src, d, positions));
    tl_status status = src ? scaled_src(op, x, src, alpha, scaled) : TL_OK;
    if (status != TL_OK) tl_release(*positions);
    return status;
}

static tl_status end(tl_tensor *positions, tl_tensor *scaled, tl_status status) {
    tl_release(positions), tl_release(scaled);
    return status;
}

tl_status tl_ag_index_add(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src, double alpha,
                          tl_tensor **out) {
    tl_tensor *positions, *scaled;
    int d;
    TL_TRY(begin("index_add", x, dim, index, src, alpha, false, &d, &positions, &scaled));
    return end(positions, scaled, tl_ag_scatter_add(x, d, positions, scaled, out));
}

tl_status tl_ag_index_add_(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src, double alpha) {
    tl_tensor *positions, *scaled;
    int d;
    TL_TRY(begin("index_add_", x, dim, index, src, alpha, true, &d, &positions, &scaled));
    return end(positions, scaled, tl_ag_scatter_add_(x, d, positions, scaled));
}

tl_status tl_ag_index_copy(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src,
                           tl_tensor **out) {
    tl_tensor *positions, *scaled;
    int d;
    TL_TRY(begin("index_copy", x, dim, index, src, 1, false, &d, &positions, &scaled));
    return end(positions, scaled, tl_ag_scatter(x, d, positions, scaled, out));
}

tl_status tl_ag_index_copy_(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src) {
    tl_tensor *positions, *scaled;
    int d;
    TL_TRY(begin("index_copy_", x, dim, index, src, 1, true, &d, &positions, &scaled));
    return end(positions, scaled, tl_ag_scatter_(x, d, positions, scaled));
}

tl_status tl_ag_index_fill(tl_tensor *x, int dim, tl_tensor *index, tl_scalar value,
                           tl_tensor **out) {
    tl_tensor *positions, *none;
    int d;
    TL_TRY(tl_check_tensor_arg("index_fill", "x", x));
    TL_TRY(tl_scalar_check_fits("index_fill", x->dtype, value));
    TL_TRY(begin("index_fill", x, dim, index, NULL, 1, false, &d, &positions, &none));
    return end(positions, none, tl_ag_scatter_value(x, d, positions, value, out));
}

tl_status tl_ag_index_fill_(tl_tensor *x, int dim, tl_tensor *index, tl_scalar value) {
    tl_tensor *positions, *none;
    int d;
    TL_TRY(tl_check_tensor_arg("index_fill_", "x", x));
    TL_TRY(tl_scalar_check_fits("index_fill_", x->dtype, value));
    TL_TRY(begin("index_fill_", x, dim, index, NULL, 1, true, &d, &positions, &none));
    return end(positions, none, tl_ag_scatter_value_(x, d, positions, value));
}

/* ---- flat positions and masks ---------------------------------------------------------------- */
/* x's elements in row-major order, shape broadcast to shape first (a recorded view and copy) */
static tl_status flat_of(tl_tensor *x, const int64_t *shape, int ndim, tl_tensor **flat) {
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    tl_tensor *spread;
    TL_TRY(tl_ag_expand(x, shape, ndim, &spread));
    tl_status status = made(tl_ag_reshape(spread, &n, 1, flat), flat);
    tl_release(spread);
    return status;
}

tl_status tl_ag_take(tl_tensor *x, tl_tensor *index, tl_tensor **out) {
    tl_tensor *positions, *flat = NULL, *picked = NULL;
    TL_TRY(tl_take_positions(x, index, &positions));
    tl_status status = made(flat_of(x, x->shape, x->ndim, &flat), &flat);
    if (status == TL_OK) status = made(tl_ag_gather(flat, 0, positions, &picked), &picked);
    if (status == TL_OK) status = tl_ag_reshape(picked, index->shape, index->ndim, out);
    tl_release(positions), tl_release(flat), tl_release(picked);
    return status;
}

tl_status tl_ag_masked_select(tl_tensor *x, tl_tensor *mask, tl_tensor **out) {
    int64_t shape[TL_MAX_DIMS];
    int ndim;
    tl_tensor *positions, *flat = NULL;
    TL_TRY(tl_masked_positions(x, mask, shape, &ndim, &positions));
    tl_status status = made(flat_of(x, shape, ndim, &flat), &flat);
    if (status == TL_OK) status = tl_ag_gather(flat, 0, positions, out);
    tl_release(positions), tl_release(flat);
    return status;
}

/* masked_fill_: x's old values get g where the mask is false; value gets g where it is true,
   summed back to its shape. Saved: mask. */
static tl_status masked_fill_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *mask, *zero = NULL;
    TL_TRY(tl_node_saved(node, 0, &mask));
    tl_status status =
        tl_full(NULL, 0, tl_scalar_int(0), g[0]->dtype, tl_tensor_device(g[0]), &zero);
    if (status == TL_OK && node->needs_input_grad[0]) status = tl_where(mask, zero, g[0], &gi[0]);
    if (status == TL_OK && node->needs_input_grad[1])
        status = tl_reduce_to_input(node, 1, tl_where(mask, g[0], zero, &gi[1]), gi);
    tl_release(zero);
    return status;
}

tl_status tl_ag_masked_fill_(tl_tensor *x, tl_tensor *mask, tl_tensor *value) {
    const char *op = "masked_fill_";
    TL_TRY(tl_masked_fill_check(op, x, mask, value));
    tl_node *node;
    TL_TRY(tl_inplace_begin(op, masked_fill_backward, x, 1, &value, &node));
    tl_tensor *kept = NULL; /* mask, copied when writing x would change it */
    tl_status status = TL_OK;
    if (node) status = x->storage == mask->storage ? tl_clone(mask, &kept) : TL_OK;
    if (node && status == TL_OK && !kept) kept = tl_retain(mask);
    if (status == TL_OK) status = tl_masked_fill_(x, mask, value);
    status = tl_inplace_end(node, status, x);
    if (status == TL_OK && node) status = tl_node_save(node, 0, "mask", kept);
    tl_release(kept);
    return status;
}
