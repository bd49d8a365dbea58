/* gather, scatter, scatter_add and scatter_reduce along a dim, and the in-place scatters: validate
 * the shapes and the index range (everything before the first write), allocate, and dispatch to
 * the index kernels. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernel.h"
#include "kernels/scatter_reduce.h"
#include "ops/checks.h"
#include "core/storage.h"
#include "tlua/cuda.h"
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

tl_status tl_index_view(tl_tensor *t, int64_t base, tl_tensor **out) {
    TL_TRY(tl_check_tensor_arg("index_view", "t", t));
    if (t->dtype != TL_I64 && t->dtype != TL_I32)
        return tl_error(TL_ERR_DTYPE, "index_view: t must be an int64 or int32 tensor, got %s",
                        tl_dtype_name(t->dtype));
    TL_TRY(tl_make_view(t, t->shape, t->strides, t->ndim, t->offset, out));
    (*out)->index_base = base;
    return TL_OK;
}

/* the range of index values along dim of target: [base, base + size), base the index's own */
static tl_index_range range_along(const char *op, const tl_tensor *index, const tl_tensor *target,
                                  int dim) {
    return (tl_index_range){.op = op,
                            .what = "index",
                            .range_of = "the size along dim",
                            .note = index->index_base == 1 ? "indices count from 1" : NULL,
                            .first = index->index_base,
                            .count = target->ndim ? target->shape[dim] : 1};
}

/* every index value in range_along's range */
static tl_status check_range(const char *op, const tl_tensor *index, const tl_tensor *target,
                             int dim) {
    const tl_index_range range = range_along(op, index, target, dim);
    return tl_check_index_range(index, &range);
}

/* runs op's kernel: out, {a, b}; mode: scatter_reduce's fold (args.scalar[0]); range: what
   gather's kernel checks its index values against (NULL for the others) */
static tl_status run_index_kernel(tl_op op, tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                                  int dim, int mode, const tl_index_range *range) {
    const tl_tensor *traced[4] = {out, a, b, NULL};
    const tl_kernel_entry *kernel = tl_dispatch(op, tl_tensor_device(out), out->dtype, traced);
    if (!kernel) return tl_dispatch_status();
    const tl_op_args args = {.dim = dim, .scalar = {mode}, .index_range = range};
    return kernel->fn.tensors((tl_tensor *const[]){out}, (const tl_tensor *const[]){a, b}, &args);
}
static tl_status run_index_mode(tl_op op, tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                                int dim, int mode) {
    return run_index_kernel(op, out, a, b, dim, mode, NULL);
}
static tl_status run_index(tl_op op, tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                           int dim) {
    return run_index_kernel(op, out, a, b, dim, 0, NULL);
}

tl_status tl_gather(const tl_tensor *x, int dim, const tl_tensor *index, tl_tensor **out) {
    const char *op = "gather";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "index", index));
    int d;
    TL_TRY(tl_wrap_dim(op, dim, x->ndim, &d));
    TL_TRY(check_index(op, "x", x, index, d, false));
    tl_tensor *y;
    TL_TRY(tl_empty(index->shape, index->ndim, x->dtype, tl_tensor_device(x), &y));
    tl_status status = TL_OK;
    if (tl_numel(y)) { /* the kernel checks the index values as it reads them */
        const tl_index_range range = range_along(op, index, x, d);
        status = run_index_kernel(TL_OP_gather, y, x, index, d, 0, &range);
        if (status == TL_OK && tl_tensor_device(y).type == TL_DEVICE_CUDA && tl_sync_checks())
            status = tl_cuda_synchronize(tl_tensor_device(y).index);
    }
    if (status != TL_OK) {
        tl_release(y);
        return status;
    }
    *out = y;
    return TL_OK;
}

/* ---- scatters: x with src (or a value) written, added or folded in at index ---------------
   The checks every scatter makes: index of x's rank on x's device, no larger than src anywhere
   nor than x but along dim, its values in range; src of x's dtype. *d gets the wrapped dim. */
static tl_status check_scatter(const char *op, const tl_tensor *x, int dim, const tl_tensor *index,
                               const tl_tensor *src, int *d) {
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "index", index));
    TL_TRY(tl_check_tensor_arg(op, "src", src));
    TL_TRY(tl_wrap_dim(op, dim, x->ndim, d));
    if (src->dtype != x->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: src must have x's dtype %s, got %s", op,
                        tl_dtype_name(x->dtype), tl_dtype_name(src->dtype));
    TL_TRY(check_index(op, "x", x, index, *d, false));
    TL_TRY(check_index(op, "src", src, index, *d, true));
    return check_range(op, index, x, *d);
}

/* value as a tensor of x's dtype on its device, expanded to index's shape (stride 0): the src
   of a scatter of one value */
static tl_status value_as_src(const char *op, const tl_tensor *x, const tl_tensor *index,
                              tl_scalar value, tl_tensor **src) {
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "index", index));
    TL_TRY(tl_scalar_check_fits(op, x->dtype, value));
    tl_tensor *one;
    TL_TRY(tl_full(NULL, 0, value, x->dtype, tl_tensor_device(x), &one));
    tl_status status = tl_expand(one, index->shape, index->ndim, src);
    tl_release(one);
    return status;
}

/* op's kernel into target (a fresh copy, or x itself in place, already checked) */
static tl_status scatter_into(tl_op op, tl_tensor *target, const tl_tensor *index,
                              const tl_tensor *src, int d) {
    return tl_numel(index) ? run_index(op, target, index, src, d) : TL_OK;
}

/* out-of-place: a copy of x, then op's kernel */
static tl_status scatter_copy(tl_op op, const tl_tensor *x, const tl_tensor *index,
                              const tl_tensor *src, int d, tl_tensor **out) {
    tl_tensor *y;
    TL_TRY(tl_clone(x, &y));
    tl_status status = scatter_into(op, y, index, src, d);
    if (status != TL_OK) {
        tl_release(y);
        return status;
    }
    *out = y;
    return TL_OK;
}

/* in place: x writable, src and index read from copies where they share memory with x */
static tl_status scatter_in_place(tl_op op, const char *name, tl_tensor *x, const tl_tensor *index,
                                  const tl_tensor *src, int d) {
    TL_TRY(tl_check_writable(name, "x", x));
    tl_tensor *src_copy = NULL, *index_copy = NULL;
    tl_status status = TL_OK;
    if (tl_may_overlap(x, src)) status = tl_clone(src, &src_copy);
    if (status == TL_OK && tl_may_overlap(x, index)) status = tl_clone(index, &index_copy);
    if (status == TL_OK)
        status = scatter_into(op, x, index_copy ? index_copy : index, src_copy ? src_copy : src, d);
    tl_release(src_copy), tl_release(index_copy);
    if (status == TL_OK) tl_bump_version(x);
    return status;
}

tl_status tl_scatter_add(const tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                         tl_tensor **out) {
    int d;
    TL_TRY(check_scatter("scatter_add", x, dim, index, src, &d));
    return scatter_copy(TL_OP_scatter_add, x, index, src, d, out);
}

tl_status tl_scatter_add_(tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src) {
    int d;
    TL_TRY(check_scatter("scatter_add_", x, dim, index, src, &d));
    return scatter_in_place(TL_OP_scatter_add, "scatter_add_", x, index, src, d);
}

tl_status tl_scatter(const tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                     tl_tensor **out) {
    int d;
    TL_TRY(check_scatter("scatter", x, dim, index, src, &d));
    return scatter_copy(TL_OP_scatter, x, index, src, d, out);
}

tl_status tl_scatter_(tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src) {
    int d;
    TL_TRY(check_scatter("scatter_", x, dim, index, src, &d));
    return scatter_in_place(TL_OP_scatter, "scatter_", x, index, src, d);
}

tl_status tl_scatter_value(const tl_tensor *x, int dim, const tl_tensor *index, tl_scalar value,
                           tl_tensor **out) {
    tl_tensor *src;
    int d;
    TL_TRY(value_as_src("scatter", x, index, value, &src));
    tl_status status = check_scatter("scatter", x, dim, index, src, &d);
    if (status == TL_OK) status = scatter_copy(TL_OP_scatter, x, index, src, d, out);
    tl_release(src);
    return status;
}

tl_status tl_scatter_value_(tl_tensor *x, int dim, const tl_tensor *index, tl_scalar value) {
    tl_tensor *src;
    int d;
    TL_TRY(value_as_src("scatter_", x, index, value, &src));
    tl_status status = check_scatter("scatter_", x, dim, index, src, &d);
    if (status == TL_OK) status = scatter_in_place(TL_OP_scatter, "scatter_", x, index, src, d);
    tl_release(src);
    return status;
}

/* ---- scatter_reduce ------------------------------------------------------------------------ */
static const char *const reductions[] = {"sum", "prod", "mean", "amax", "amin"};

tl_status tl_scatter_reduction_parse(const char *reduce, tl_scatter_reduction *out) {
    for (int i = 0; reduce && i < 5; i++)
        if (strcmp(reduce, reductions[i]) == 0) {
            *out = (tl_scatter_reduction)i;
            return TL_OK;
        }
    return tl_error(TL_ERR_ARGUMENT,
                    "scatter_reduce: reduce must be one of sum, prod, mean, amax, amin, got '%s'",
                    reduce ? reduce : "(null)");
}

/* the value a fold starts from at a place that does not include x's own (include_self false) */
static tl_scalar identity_of(tl_scatter_reduction reduce, tl_dtype dtype) {
    const bool floating = tl_dtype_is_floating(dtype);
    const int64_t lowest = dtype == TL_I32 ? INT32_MIN : INT64_MIN;
    const int64_t highest = dtype == TL_I32 ? INT32_MAX : INT64_MAX;
    switch (reduce) {
    case TL_SCATTER_REDUCE_PROD:
        return tl_scalar_int(1);
    case TL_SCATTER_REDUCE_AMAX:
        return floating ? tl_scalar_float(-INFINITY) : tl_scalar_int(lowest);
    case TL_SCATTER_REDUCE_AMIN:
        return floating ? tl_scalar_float(INFINITY) : tl_scalar_int(highest);
    default:
        return tl_scalar_int(0);
    }
}

/* floor(sum / count) of integer sums (count >= 1), through float64: exact while |sum| < 2^53 */
static tl_status floor_divide(const tl_tensor *sum, const tl_tensor *count, tl_tensor **out) {
    tl_tensor *a = NULL, *b = NULL, *q = NULL, *t = NULL, *back = NULL, *below = NULL,
              *below_i = NULL, *r = NULL;
    tl_status status = tl_cast((tl_tensor *)sum, TL_F64, &a);
    if (status == TL_OK) status = tl_cast((tl_tensor *)count, TL_F64, &b);
    if (status == TL_OK) status = tl_div(a, b, &q);
    if (status == TL_OK) status = tl_cast(q, TL_I64, &t); /* toward zero */
    if (status == TL_OK) status = tl_cast(t, TL_F64, &back);
    if (status == TL_OK) status = tl_lt(q, back, &below); /* a negative fraction: one less */
    if (status == TL_OK) status = tl_cast(below, TL_I64, &below_i);
    if (status == TL_OK) status = tl_sub(t, below_i, &r);
    if (status == TL_OK) status = tl_cast(r, sum->dtype, out);
    tl_release(a), tl_release(b), tl_release(q), tl_release(t), tl_release(back);
    tl_release(below), tl_release(below_i), tl_release(r);
    return status;
}

/* how many values were folded in at each place of x: its own when include_self, and src's by
   index; at least 1 (a place nothing reached keeps x's value): mean's divisor */
tl_status tl_scatter_reduce_count(const tl_tensor *x, int dim, const tl_tensor *index,
                                  const tl_tensor *src, bool include_self, tl_tensor **count) {
    TL_TRY(tl_check_tensor_arg("scatter_reduce_count", "x", x));
    TL_TRY(tl_check_tensor_arg("scatter_reduce_count", "index", index));
    TL_TRY(tl_check_tensor_arg("scatter_reduce_count", "src", src));
    tl_tensor *start = NULL, *ones = NULL, *summed = NULL;
    const tl_device device = tl_tensor_device(x);
    tl_status status = include_self ? tl_ones(x->shape, x->ndim, x->dtype, device, &start)
                                    : tl_zeros(x->shape, x->ndim, x->dtype, device, &start);
    if (status == TL_OK) status = tl_ones(src->shape, src->ndim, x->dtype, device, &ones);
    if (status == TL_OK) status = tl_scatter_add(start, dim, index, ones, &summed);
    if (status == TL_OK) status = tl_clamp(summed, true, 1, false, 0, count);
    tl_release(start), tl_release(ones), tl_release(summed);
    return status;
}

/* y <- y / count (mean's sums; integers floored, as torch) */
static tl_status divide_by_count(tl_tensor **y, int d, const tl_tensor *index, const tl_tensor *src,
                                 bool include_self) {
    tl_tensor *count = NULL, *mean = NULL;
    tl_status status = tl_scatter_reduce_count(*y, d, index, src, include_self, &count);
    if (status == TL_OK)
        status = tl_dtype_is_floating((*y)->dtype) ? tl_div(*y, count, &mean)
                                                   : floor_divide(*y, count, &mean);
    tl_release(count);
    if (status != TL_OK) return status;
    tl_release(*y);
    *y = mean;
    return TL_OK;
}

tl_status tl_scatter_reduce(const tl_tensor *x, int dim, const tl_tensor *index,
                            const tl_tensor *src, const char *reduce, bool include_self,
                            tl_tensor **out) {
    const char *op = "scatter_reduce";
    tl_scatter_reduction how;
    int d;
    TL_TRY(tl_scatter_reduction_parse(reduce, &how));
    TL_TRY(check_scatter(op, x, dim, index, src, &d));
    if (x->dtype == TL_BOOL)
        return tl_error(TL_ERR_DTYPE,
                        "%s: x must be a number tensor (floating or integer), got bool", op);
    tl_tensor *y, *identity = NULL;
    TL_TRY(tl_clone(x, &y));
    tl_status status = TL_OK;
    if (!include_self && tl_numel(index)) { /* the places src reaches start from the identity */
        status = value_as_src(op, x, index, identity_of(how, x->dtype), &identity);
        if (status == TL_OK) status = run_index(TL_OP_scatter, y, index, identity, d);
        tl_release(identity);
    }
    static const int modes[] = {0, TL_SCATTER_PROD, 0, TL_SCATTER_AMAX, TL_SCATTER_AMIN};
    if (status == TL_OK && modes[how])
        status = run_index_mode(TL_OP_scatter_reduce, y, index, src, d, modes[how]);
    else if (status == TL_OK)
        status = scatter_into(TL_OP_scatter_add, y, index, src, d);
    if (status == TL_OK && how == TL_SCATTER_REDUCE_MEAN)
        status = divide_by_count(&y, d, index, src, include_self);
    if (status != TL_OK) {
        tl_release(y);
        return status;
    }
    *out = y;
    return TL_OK;
}
