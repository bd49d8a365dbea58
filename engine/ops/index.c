/* gather and scatter_add along a dim: validate the shapes and the index range, allocate, and
 * dispatch to the index kernels. */
#include <string.h>

#include "kernels/kernel.h"
#include "ops/checks.h"
#include "tlua/nn.h"
#include "tlua/ops.h"

/* index: int64 or int32, of x's rank, on x's device, no larger than x along every dim (all_dims)
   or every dim but dim (gather: the source but along dim; scatter_add: the target but along
   dim, the source along every dim). */
static tl_status check_index(const char *op, const char *x_name, const tl_tensor *x,
                             const tl_tensor *index, int dim, bool all_dims) {
    char si[256], sx[256];
    if (index->dtype != TL_I64 && index->dtype != TL_I32)
        return tl_error(TL_ERR_DTYPE, "%s: index must be an int64 or int32 tensor, got %s", op,
                        tl_dtype_name(index->dtype));
    if (!tl_device_equal(tl_tensor_device(index), tl_tensor_device(x))) {
        char di[16], dx[16];
        return tl_error(TL_ERR_DEVICE, "%s: index is on %s but %s is on %s", op,
                        tl_device_name(tl_tensor_device(index), di), x_name,
                        tl_device_name(tl_tensor_device(x), dx));
    }
    if (index->ndim != x->ndim)
        return tl_error(TL_ERR_SHAPE, "%s: index must have as many dims as %s (%d), got %d", op,
                        x_name, x->ndim, index->ndim);
    for (int d = 0; d < x->ndim; d++)
        if ((all_dims || d != dim) && index->shape[d] > x->shape[d])
            return tl_error(
                TL_ERR_SHAPE, "%s: index (shape %s) is larger than %s (shape %s) along dim %d", op,
                tl_shape_str(index, si, sizeof si), x_name, tl_shape_str(x, sx, sizeof sx), d + 1);
    return TL_OK;
}

/* every index value in [0, size of target along dim) */
static tl_status check_range(const char *op, const tl_tensor *index, const tl_tensor *target,
                             int dim) {
    const tl_index_range range = {.op = op,
                                  .what = "index",
                                  .range_of = "the size along dim",
                                  .first = 0,
                                  .count = target->ndim ? target->shape[dim] : 1};
    return tl_check_index_range(index, &range);
}

static tl_status run_index(tl_op op, tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                           int dim) {
    const tl_tensor *traced[4] = {out, a, b, NULL};
    const tl_kernel_entry *kernel = tl_dispatch(op, tl_tensor_device(out), out->dtype, traced);
    if (!kernel) return tl_dispatch_status();
    const tl_op_args args = {.dim = dim};
    return kernel->fn.tensors((tl_tensor *const[]){out}, (const tl_tensor *const[]){a, b}, &args);
}

tl_status tl_gather(const tl_tensor *x, int dim, const tl_tensor *index, tl_tensor **out) {
    const char *op = "gather";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "index", index));
    int d;
    TL_TRY(tl_wrap_dim(op, dim, x->ndim, &d));
    TL_TRY(check_index(op, "x", x, index, d, false));
    TL_TRY(check_range(op, index, x, d));
    tl_tensor *y;
    TL_TRY(tl_empty(index->shape, index->ndim, x->dtype, tl_tensor_device(x), &y));
    tl_status status = tl_numel(y) ? run_index(TL_OP_gather, y, x, index, d) : TL_OK;
    if (status != TL_OK) {
        tl_release(y);
        return status;
    }
    *out = y;
    return TL_OK;
}

tl_status tl_scatter_add(const tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                         tl_tensor **out) {
    const char *op = "scatter_add";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "index", index));
    TL_TRY(tl_check_tensor_arg(op, "src", src));
    int d;
    TL_TRY(tl_wrap_dim(op, dim, x->ndim, &d));
    if (src->dtype != x->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: src must have x's dtype %s, got %s", op,
                        tl_dtype_name(x->dtype), tl_dtype_name(src->dtype));
    TL_TRY(check_index(op, "x", x, index, d, false));
    TL_TRY(check_index(op, "src", src, index, d, true));
    TL_TRY(check_range(op, index, x, d));
    tl_tensor *y;
    TL_TRY(tl_clone(x, &y));
    tl_status status = tl_numel(index) ? run_index(TL_OP_scatter_add, y, index, src, d) : TL_OK;
    if (status != TL_OK) {
        tl_release(y);
        return status;
    }
    *out = y;
    return TL_OK;
}

/* index_select through gather: index (1-d, or 0-d as one position) seen with x's rank, its
   values along dim and size 1 elsewhere, expanded to the result's shape (a view: nothing copied) */
tl_status tl_index_select_as_gather(const tl_tensor *x, int dim, const tl_tensor *index,
                                    tl_tensor **positions) {
    const char *op = "index_select";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "index", index));
    if (x->ndim == 0)
        return tl_error(TL_ERR_SHAPE, "%s: x must have at least one dim, got a 0-dim tensor", op);
    int d;
    TL_TRY(tl_wrap_dim(op, dim, x->ndim, &d));
    if (index->ndim > 1)
        return tl_error(TL_ERR_SHAPE, "%s: index must be a 1-d tensor of positions, got %d dims",
                        op, index->ndim);
    if (index->dtype != TL_I64 && index->dtype != TL_I32)
        return tl_error(TL_ERR_DTYPE, "%s: index must be an int64 or int32 tensor, got %s", op,
                        tl_dtype_name(index->dtype));
    TL_TRY(check_range(op, index, x, d));
    int64_t along[TL_MAX_DIMS], shape[TL_MAX_DIMS];
    const int64_t n = tl_numel(index);
    for (int k = 0; k < x->ndim; k++) {
        along[k] = k == d ? n : 1;
        shape[k] = k == d ? n : x->shape[k];
    }
    tl_tensor *column;
    TL_TRY(tl_reshape((tl_tensor *)index, along, x->ndim, &column));
    tl_status status = tl_expand(column, shape, x->ndim, positions);
    tl_release(column);
    return status;
}

tl_status tl_index_select(const tl_tensor *x, int dim, const tl_tensor *index, tl_tensor **out) {
    tl_tensor *positions;
    TL_TRY(tl_index_select_as_gather(x, dim, index, &positions));
    tl_status status = tl_gather(x, dim, positions, out);
    tl_release(positions);
    return status;
}
