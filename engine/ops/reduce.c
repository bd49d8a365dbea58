/* Reductions: sum, mean, max, min, argmax, argmin over one dim or all elements; they
   validate, allocate the outputs and dispatch to the reduce kernels. */
#include "kernels/kernel.h"
#include "core/storage.h"
#include "tlua/ops.h"

typedef enum reduce_kind { REDUCE_SUM, REDUCE_MEAN, REDUCE_EXTREME, REDUCE_ARG } reduce_kind;

static reduce_kind kind_of(tl_op op) {
    switch (op) {
    case TL_OP_sum:
        return REDUCE_SUM;
    case TL_OP_mean:
        return REDUCE_MEAN;
    case TL_OP_argmax:
    case TL_OP_argmin:
        return REDUCE_ARG;
    default:
        return REDUCE_EXTREME;
    }
}

/* A view of t with dim d removed (drop) or with every dim removed (scalar); takes t. */
static tl_status reshape_result(tl_tensor *t, int d, bool drop, bool scalar, tl_tensor **out) {
    if (!t || (!drop && !scalar)) {
        *out = t;
        return TL_OK;
    }
    int64_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim && !scalar; i++) {
        if (i == d) continue;
        shape[n] = t->shape[i];
        strides[n++] = t->strides[i];
    }
    tl_status status = tl_make_view(t, shape, strides, n, t->offset, out);
    tl_release(t);
    return status;
}

/* Reduces dim of a into values (sum, mean, max, min) and/or indices (max, min, argmax,
   argmin), allocated here; NULL where the caller wants none. */
static tl_status reduce_dim(tl_op op, const tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                            tl_tensor **indices) {
    const char *name = tl_op_info_of(op)->name;
    reduce_kind kind = kind_of(op);
    int d;
    TL_TRY(tl_wrap_dim(name, dim, a->ndim, &d));
    tl_dtype out_dtype = a->dtype;
    if (kind == REDUCE_MEAN && !tl_dtype_is_floating(a->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype, got %s", name,
                        tl_dtype_name(a->dtype));
    if (kind == REDUCE_SUM && !tl_dtype_is_floating(a->dtype)) out_dtype = TL_I64;
    if ((kind == REDUCE_EXTREME || kind == REDUCE_ARG) && a->ndim > 0 && a->shape[d] == 0) {
        char buf[256];
        return tl_error(TL_ERR_SHAPE,
                        "%s: cannot reduce dim %d of size 0 (shape %s): an empty dim has no %s",
                        name, TL_DIM_FOR_USER(dim), tl_shape_str(a, buf, sizeof buf),
                        op == TL_OP_max || op == TL_OP_argmax ? "maximum" : "minimum");
    }

    /* a 0-dim input is reduced as [1] and gives a 0-dim result */
    bool scalar = a->ndim == 0;
    tl_tensor *src;
    if (scalar) {
        int64_t one = 1;
        TL_TRY(tl_make_view(a, &one, &one, 1, a->offset, &src));
    } else {
        src = tl_retain((tl_tensor *)a);
    }
    int64_t shape[TL_MAX_DIMS];
    for (int i = 0; i < src->ndim; i++) shape[i] = i == d ? 1 : src->shape[i];
    tl_device device = tl_tensor_device(a);
    tl_tensor *v = NULL, *idx = NULL;
    tl_status status = TL_OK;
    if (kind != REDUCE_ARG) status = tl_empty(shape, src->ndim, out_dtype, device, &v);
    if (status == TL_OK && (kind == REDUCE_ARG || indices))
        status = tl_empty(shape, src->ndim, TL_I64, device, &idx);
    if (status == TL_OK) {
        const tl_tensor *traced[4] = {NULL, NULL, NULL, NULL}; /* outputs, then the input */
        int n = 0;
        if (v) traced[n++] = v;
        if (idx) traced[n++] = idx;
        traced[n] = src;
        const tl_kernel_entry *kernel = tl_dispatch(op, device, a->dtype, traced);
        /* an empty result has nothing to compute, however long the reduced dim */
        status = !kernel                      ? tl_dispatch_status()
                 : tl_numel(v ? v : idx) == 0 ? TL_OK
                                              : kernel->fn.reduce(v, idx, src, d);
    }
    tl_release(src);
    if (status == TL_OK) status = reshape_result(v, d, !keepdim, scalar, &v);
    if (status == TL_OK) status = reshape_result(idx, d, !keepdim, scalar, &idx);
    if (status != TL_OK) {
        tl_release(v);
        tl_release(idx);
        return status;
    }
    if (values)
        *values = v;
    else
        tl_release(v);
    if (indices)
        *indices = idx;
    else
        tl_release(idx);
    return TL_OK;
}

/* Reduces every element of a (in row-major order) to a 0-dim result. */
static tl_status reduce_all(tl_op op, const tl_tensor *a, tl_tensor **values, tl_tensor **indices) {
    const char *name = tl_op_info_of(op)->name;
    reduce_kind kind = kind_of(op);
    if ((kind == REDUCE_EXTREME || kind == REDUCE_ARG) && tl_numel(a) == 0) {
        char buf[256];
        return tl_error(TL_ERR_SHAPE,
                        "%s: cannot reduce an empty tensor (shape %s) without a dim: it has no "
                        "%s",
                        name, tl_shape_str(a, buf, sizeof buf),
                        op == TL_OP_max || op == TL_OP_argmax ? "maximum" : "minimum");
    }
    if (kind == REDUCE_MEAN && !tl_dtype_is_floating(a->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype, got %s", name,
                        tl_dtype_name(a->dtype));
    int64_t flat = -1;
    tl_tensor *flat_a;
    TL_TRY(tl_reshape((tl_tensor *)a, &flat, 1, &flat_a));
    tl_status status = reduce_dim(op, flat_a, 0, false, values, indices);
    tl_release(flat_a);
    return status;
}

tl_status tl_sum_all(const tl_tensor *a, tl_tensor **out) {
    return reduce_all(TL_OP_sum, a, out, NULL);
}
tl_status tl_sum_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out) {
    return reduce_dim(TL_OP_sum, a, dim, keepdim, out, NULL);
}
tl_status tl_mean_all(const tl_tensor *a, tl_tensor **out) {
    return reduce_all(TL_OP_mean, a, out, NULL);
}
tl_status tl_mean_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out) {
    return reduce_dim(TL_OP_mean, a, dim, keepdim, out, NULL);
}
tl_status tl_max_all(const tl_tensor *a, tl_tensor **out) {
    return reduce_all(TL_OP_max, a, out, NULL);
}
tl_status tl_min_all(const tl_tensor *a, tl_tensor **out) {
    return reduce_all(TL_OP_min, a, out, NULL);
}
tl_status tl_max_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                     tl_tensor **indices) {
    return reduce_dim(TL_OP_max, a, dim, keepdim, values, indices);
}
tl_status tl_min_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                     tl_tensor **indices) {
    return reduce_dim(TL_OP_min, a, dim, keepdim, values, indices);
}
tl_status tl_argmax_all(const tl_tensor *a, tl_tensor **out) {
    return reduce_all(TL_OP_argmax, a, NULL, out);
}
tl_status tl_argmin_all(const tl_tensor *a, tl_tensor **out) {
    return reduce_all(TL_OP_argmin, a, NULL, out);
}
tl_status tl_argmax_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out) {
    return reduce_dim(TL_OP_argmax, a, dim, keepdim, NULL, out);
}
tl_status tl_argmin_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out) {
    return reduce_dim(TL_OP_argmin, a, dim, keepdim, NULL, out);
}
