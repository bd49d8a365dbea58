/* Indexing by a list of positions, through the index kernels: index_select, index_add, index_copy
 * and index_fill along a dim (gathers and scatters through a view of the 1-d index), take (flat
 * positions), masked_select and masked_fill_. Everything is checked before the first write. */
#include <math.h>

#include "ops/checks.h"
#include "tlua/nn.h"
#include "tlua/ops.h"

static tl_status check_positions_dtype(const char *op, const tl_tensor *index) {
    if (index->dtype != TL_I64 && index->dtype != TL_I32)
        return tl_error(TL_ERR_DTYPE, "%s: index must be an int64 or int32 tensor, got %s", op,
                        tl_dtype_name(index->dtype));
    return TL_OK;
}

static tl_status check_same_device(const char *op, const char *name, const tl_tensor *t,
                                   const tl_tensor *x) {
    if (tl_device_equal(tl_tensor_device(t), tl_tensor_device(x))) return TL_OK;
    char dt[16], dx[16];
    return tl_error(TL_ERR_DEVICE, "%s: %s is on %s but x is on %s", op, name,
                    tl_device_name(tl_tensor_device(t), dt),
                    tl_device_name(tl_tensor_device(x), dx));
}

/* index values within [base, base + count) (count: what range_of names; base: the index's
   index_base) */
static tl_status check_within(const char *op, const tl_tensor *index, const char *range_of,
                              int64_t count) {
    const tl_index_range range = {.op = op,
                                  .what = "index",
                                  .range_of = range_of,
                                  .note = index->index_base == 1 ? "indices count from 1" : NULL,
                                  .first = index->index_base,
                                  .count = count};
    return tl_check_index_range(index, &range);
}

tl_status tl_index_positions(const char *op, const tl_tensor *x, int dim, const tl_tensor *index,
                             const tl_tensor *src, int *d, tl_tensor **positions) {
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "index", index));
    if (x->ndim == 0)
        return tl_error(TL_ERR_SHAPE, "%s: x must have at least one dim, got a 0-dim tensor", op);
    TL_TRY(tl_wrap_dim(op, dim, x->ndim, d));
    if (index->ndim > 1)
        return tl_error(TL_ERR_SHAPE, "%s: index must be a 1-d tensor of positions, got %d dims",
                        op, index->ndim);
    TL_TRY(check_positions_dtype(op, index));
    TL_TRY(check_same_device(op, "index", index, x));
    const int64_t n = tl_numel(index);
    int64_t along[TL_MAX_DIMS], shape[TL_MAX_DIMS];
    for (int k = 0; k < x->ndim; k++) {
        along[k] = k == *d ? n : 1;
        shape[k] = k == *d ? n : x->shape[k];
    }
    if (src) {
        TL_TRY(tl_check_tensor_arg(op, "src", src));
        TL_TRY(check_same_device(op, "src", src, x));
        if (src->dtype != x->dtype)
            return tl_error(TL_ERR_DTYPE, "%s: src must have x's dtype %s, got %s", op,
                            tl_dtype_name(x->dtype), tl_dtype_name(src->dtype));
        bool fits = src->ndim == x->ndim;
        for (int k = 0; fits && k < x->ndim; k++) fits = src->shape[k] == shape[k];
        if (!fits) {
            char ss[256], sx[256];
            return tl_error(TL_ERR_SHAPE,
                            "%s: src must have x's shape %s with index's length %lld along dim "
                            "%d, got shape %s",
                            op, tl_shape_str(x, sx, sizeof sx), (long long)n, *d + 1,
                            tl_shape_str(src, ss, sizeof ss));
        }
    }
    TL_TRY(check_within(op, index, "the size along dim", x->shape[*d]));
    tl_tensor *column;
    TL_TRY(tl_reshape((tl_tensor *)index, along, x->ndim, &column));
    tl_status status = tl_expand(column, shape, x->ndim, positions);
    tl_release(column);
    return status;
}

/* ---- along a dim ----------------------------------------------------------------------------- */
tl_status tl_index_select_as_gather(const tl_tensor *x, int dim, const tl_tensor *index,
                                    tl_tensor **positions) {
    int d;
    return tl_index_positions("index_select", x, dim, index, NULL, &d, positions);
}

tl_status tl_index_select(const tl_tensor *x, int dim, const tl_tensor *index, tl_tensor **out) {
    tl_tensor *positions;
    TL_TRY(tl_index_select_as_gather(x, dim, index, &positions));
    tl_status status = tl_gather(x, dim, positions, out);
    tl_release(positions);
    return status;
}

tl_status tl_index_add_scaled(const char *op, const tl_tensor *x, const tl_tensor *src,
                              double alpha, tl_tensor **scaled) {
    if (!op) op = "index_add";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "src", src));
    if (!tl_dtype_is_floating(x->dtype) && alpha != floor(alpha))
        return tl_error(TL_ERR_ARGUMENT, "%s: alpha must be an integer for an %s x, got %g", op,
                        tl_dtype_name(x->dtype), alpha);
    if (alpha == 1) {
        *scaled = tl_retain((tl_tensor *)src);
        return TL_OK;
    }
    tl_tensor *factor;
    const tl_scalar a =
        tl_dtype_is_floating(x->dtype) ? tl_scalar_float(alpha) : tl_scalar_int((int64_t)alpha);
    TL_TRY(tl_full(NULL, 0, a, x->dtype, tl_tensor_device(x), &factor));
    tl_status status = tl_mul(src, factor, scaled);
    tl_release(factor);
    return status;
}

/* the two steps every index_* op takes: its positions, then one scatter (in place or not) */
typedef struct index_write {
    const char *op;
    tl_tensor *positions, *src; /* src: the values written (index_add: scaled by alpha) */
    int d;
} index_write;

static tl_status index_write_begin(index_write *w, const char *op, const tl_tensor *x, int dim,
                                   const tl_tensor *index, const tl_tensor *src, double alpha) {
    w->op = op;
    w->positions = w->src = NULL;
    TL_TRY(tl_index_positions(op, x, dim, index, src, &w->d, &w->positions));
    tl_status status = src ? tl_index_add_scaled(op, x, src, alpha, &w->src) : TL_OK;
    if (status != TL_OK) tl_release(w->positions);
    return status;
}

static tl_status index_write_end(index_write *w, tl_status status) {
    tl_release(w->positions), tl_release(w->src);
    return status;
}

tl_status tl_index_add(const tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                       double alpha, tl_tensor **out) {
    index_write w;
    TL_TRY(index_write_begin(&w, "index_add", x, dim, index, src, alpha));
    return index_write_end(&w, tl_scatter_add(x, w.d, w.positions, w.src, out));
}

tl_status tl_index_add_(tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                        double alpha) {
    index_write w;
    TL_TRY(index_write_begin(&w, "index_add_", x, dim, index, src, alpha));
    return index_write_end(&w, tl_scatter_add_(x, w.d, w.positions, w.src));
}

tl_status tl_index_copy(const tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                        tl_tensor **out) {
    index_write w;
    TL_TRY(index_write_begin(&w, "index_copy", x, dim, index, src, 1));
    return index_write_end(&w, tl_scatter(x, w.d, w.positions, w.src, out));
}

tl_status tl_index_copy_(tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src) {
    index_write w;
    TL_TRY(index_write_begin(&w, "index_copy_", x, dim, index, src, 1));
    return index_write_end(&w, tl_scatter_(x, w.d, w.positions, w.src));
}

tl_status tl_index_fill(const tl_tensor *x, int dim, const tl_tensor *index, tl_scalar value,
                        tl_tensor **out) {
    index_write w;
    TL_TRY(tl_check_tensor_arg("index_fill", "x", x));
    TL_TRY(tl_scalar_check_fits("index_fill", x->dtype, value));
    TL_TRY(index_write_begin(&w, "index_fill", x, dim, index, NULL, 1));
    return index_write_end(&w, tl_scatter_value(x, w.d, w.positions, value, out));
}

tl_status tl_index_fill_(tl_tensor *x, int dim, const tl_tensor *index, tl_scalar value) {
    index_write w;
    TL_TRY(tl_check_tensor_arg("index_fill_", "x", x));
    TL_TRY(tl_scalar_check_fits("index_fill_", x->dtype, value));
    TL_TRY(index_write_begin(&w, "index_fill_", x, dim, index, NULL, 1));
    return index_write_end(&w, tl_scatter_value_(x, w.d, w.positions, value));
}

/* ---- flat positions -------------------------------------------------------------------------- */
tl_status tl_take_positions(const tl_tensor *x, const tl_tensor *index, tl_tensor **flat) {
    const char *op = "take";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "index", index));
    TL_TRY(check_positions_dtype(op, index));
    TL_TRY(check_same_device(op, "index", index, x));
    TL_TRY(check_within(op, index, "x's number of elements", tl_numel(x)));
    const int64_t n = tl_numel(index);
    return tl_reshape((tl_tensor *)index, &n, 1, flat);
}

tl_status tl_take(const tl_tensor *x, const tl_tensor *index, tl_tensor **out) {
    tl_tensor *flat_index = NULL, *flat = NULL, *picked = NULL;
    TL_TRY(tl_take_positions(x, index, &flat_index));
    const int64_t n = tl_numel(x);
    tl_status status = tl_reshape((tl_tensor *)x, &n, 1, &flat);
    if (status == TL_OK) status = tl_gather(flat, 0, flat_index, &picked);
    if (status == TL_OK) status = tl_reshape(picked, index->shape, index->ndim, out);
    tl_release(flat_index), tl_release(flat), tl_release(picked);
    return status;
}

/* ---- masks ----------------------------------------------------------------------------------- */
static tl_status check_mask(const char *op, const tl_tensor *x, const tl_tensor *mask) {
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "mask", mask));
    if (mask->dtype != TL_BOOL)
        return tl_error(TL_ERR_DTYPE, "%s: mask must be a bool tensor, got %s", op,
                        tl_dtype_name(mask->dtype));
    return check_same_device(op, "mask", mask, x);
}

tl_status tl_masked_positions(const tl_tensor *x, const tl_tensor *mask, int64_t *shape, int *ndim,
                              tl_tensor **positions) {
    const char *op = "masked_select";
    TL_TRY(check_mask(op, x, mask));
    TL_TRY(tl_broadcast_shapes(op, x->shape, x->ndim, mask->shape, mask->ndim, shape, ndim));
    tl_tensor *spread = NULL, *flat = NULL, *found = NULL;
    int64_t n = 1;
    for (int k = 0; k < *ndim; k++) n *= shape[k]; /* no larger than x's or mask's, expanded */
    tl_status status = tl_expand((tl_tensor *)mask, shape, *ndim, &spread);
    if (status == TL_OK) status = tl_reshape(spread, &n, 1, &flat);
    if (status == TL_OK) status = tl_nonzero(flat, &found); /* [count, 1]; CUDA waits once */
    if (status == TL_OK) status = tl_reshape(found, (int64_t[]){found->shape[0]}, 1, positions);
    tl_release(spread), tl_release(flat), tl_release(found);
    return status;
}

tl_status tl_masked_select(const tl_tensor *x, const tl_tensor *mask, tl_tensor **out) {
    int64_t shape[TL_MAX_DIMS];
    int ndim;
    tl_tensor *positions = NULL, *spread = NULL, *flat = NULL;
    TL_TRY(tl_masked_positions(x, mask, shape, &ndim, &positions));
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    tl_status status = tl_expand((tl_tensor *)x, shape, ndim, &spread);
    if (status == TL_OK) status = tl_reshape(spread, &n, 1, &flat);
    if (status == TL_OK) status = tl_gather(flat, 0, positions, out);
    tl_release(positions), tl_release(spread), tl_release(flat);
    return status;
}

/* t (the argument named name) broadcasts to x's shape exactly */
static tl_status check_broadcasts(const char *op, const char *name, const tl_tensor *t,
                                  const tl_tensor *x) {
    bool fits = t->ndim <= x->ndim;
    for (int k = 1; fits && k <= t->ndim; k++) {
        const int64_t m = t->shape[t->ndim - k], s = x->shape[x->ndim - k];
        fits = m == s || m == 1;
    }
    if (fits) return TL_OK;
    char st[256], sx[256];
    return tl_error(TL_ERR_SHAPE, "%s: %s of shape %s does not broadcast to x's shape %s", op, name,
                    tl_shape_str(t, st, sizeof st), tl_shape_str(x, sx, sizeof sx));
}

tl_status tl_masked_fill_check(const char *op, const tl_tensor *x, const tl_tensor *mask,
                               const tl_tensor *value) {
    TL_TRY(check_mask(op, x, mask));
    TL_TRY(tl_check_tensor_arg(op, "value", value));
    TL_TRY(check_same_device(op, "value", value, x));
    if (value->dtype != x->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: value must have x's dtype %s, got %s", op,
                        tl_dtype_name(x->dtype), tl_dtype_name(value->dtype));
    TL_TRY(tl_check_writable(op, "x", x));
    TL_TRY(check_broadcasts(op, "mask", mask, x));
    return check_broadcasts(op, "value", value, x);
}

tl_status tl_masked_fill_(tl_tensor *x, const tl_tensor *mask, const tl_tensor *value) {
    TL_TRY(tl_masked_fill_check("masked_fill_", x, mask, value));
    tl_tensor *filled;
    TL_TRY(tl_where(mask, value, x, &filled)); /* read whole before x is written */
    tl_status status = tl_copy_(x, filled);
    tl_release(filled);
    return status;
}
