/* The cumulative ops along one dim (cumprod, logcumsumexp, cummax, cummin): validate, allocate the
   outputs and dispatch to the CUMULATIVE kernels. */
#include "core/storage.h"
#include "kernels/kernel.h"
#include "ops/checks.h"
#include "tlua/ops.h"

/* t seen as [1] when it is 0-dim (the kernels walk a dim), else t itself; a new reference */
static tl_status as_line(const tl_tensor *t, tl_tensor **out) {
    if (t->ndim > 0) {
        *out = tl_retain((tl_tensor *)t);
        return TL_OK;
    }
    int64_t one = 1;
    return tl_make_view(t, &one, &one, 1, t->offset, out);
}

/* values (of out_dtype) and, when indices is not NULL, int64 indices, along dim of x (cummax and
   cummin's kernels always write indices: made here, and dropped when the caller wants none) */
static tl_status cumulative(tl_op op, const char *name, const tl_tensor *x, int dim,
                            tl_dtype out_dtype, tl_tensor **values, tl_tensor **indices) {
    TL_TRY(tl_check_tensor_arg(name, "x", x));
    int d;
    TL_TRY(tl_wrap_dim(name, dim, x->ndim, &d));
    const tl_device device = tl_tensor_device(x);
    tl_tensor *y = NULL, *idx = NULL, *lines[3] = {NULL, NULL, NULL};
    tl_status status = tl_empty(x->shape, x->ndim, out_dtype, device, &y);
    const bool indexed = op == TL_OP_cummax || op == TL_OP_cummin;
    if (status == TL_OK && (indices || indexed))
        status = tl_empty(x->shape, x->ndim, TL_I64, device, &idx);
    if (status == TL_OK) status = as_line(y, &lines[0]);
    if (status == TL_OK && idx) status = as_line(idx, &lines[1]);
    if (status == TL_OK) status = as_line(x, &lines[2]);
    if (status == TL_OK) {
        const tl_tensor *traced[4] = {y, x, idx, NULL};
        if (!idx) traced[2] = NULL;
        const tl_kernel_entry *kernel = tl_dispatch(op, device, x->dtype, traced);
        tl_tensor *outs[2] = {lines[0], lines[1]};
        const tl_tensor *ins[1] = {lines[2]};
        const tl_op_args args = {.dim = x->ndim > 0 ? d : 0};
        status = !kernel            ? tl_dispatch_status()
                 : tl_numel(y) == 0 ? TL_OK /* nothing to walk */
                                    : kernel->fn.tensors(outs, ins, &args);
    }
    for (int i = 0; i < 3; i++) tl_release(lines[i]);
    if (status != TL_OK) {
        tl_release(y), tl_release(idx);
        return status;
    }
    *values = y;
    if (indices)
        *indices = idx;
    else
        tl_release(idx);
    return TL_OK;
}

tl_status tl_cumprod(const tl_tensor *x, int dim, tl_tensor **out) {
    /* floating inputs keep their dtype; integers and bool multiply in int64 (as torch) */
    const tl_dtype d = x && !tl_dtype_is_floating(x->dtype) ? TL_I64 : x ? x->dtype : TL_F32;
    return cumulative(TL_OP_cumprod, "cumprod", x, dim, d, out, NULL);
}

tl_status tl_logcumsumexp(const tl_tensor *x, int dim, tl_tensor **out) {
    if (x && !tl_dtype_is_floating(x->dtype))
        return tl_error(TL_ERR_DTYPE, "logcumsumexp: expected a floating dtype, got %s",
                        tl_dtype_name(x->dtype));
    return cumulative(TL_OP_logcumsumexp, "logcumsumexp", x, dim, x ? x->dtype : TL_F32, out, NULL);
}

tl_status tl_cummax(const tl_tensor *x, int dim, tl_tensor **values, tl_tensor **indices) {
    return cumulative(TL_OP_cummax, "cummax", x, dim, x ? x->dtype : TL_F32, values, indices);
}

tl_status tl_cummin(const tl_tensor *x, int dim, tl_tensor **values, tl_tensor **indices) {
    return cumulative(TL_OP_cummin, "cummin", x, dim, x ? x->dtype : TL_F32, values, indices);
}
