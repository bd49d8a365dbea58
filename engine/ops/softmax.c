/* softmax and log_softmax along one dim, out of place and in place: validate, allocate,
   dispatch to the softmax kernels. */
#include "kernels/kernel.h"
#include "core/storage.h"
#include "ops/checks.h"
#include "tlua/ops.h"

static tl_status check_softmax(const char *name, const tl_tensor *a, int dim, int *d) {
    TL_TRY(tl_check_tensor_arg(name, "x", a));
    if (!tl_dtype_is_floating(a->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype, got %s", name,
                        tl_dtype_name(a->dtype));
    return tl_wrap_dim(name, dim, a->ndim, d);
}

/* result = op(a) along dim d (validated); result has a's shape and may be a itself (the kernels
   read a row before writing it). */
static tl_status softmax_into(tl_op op, const tl_tensor *a, int d, tl_tensor *result) {
    /* a 0-dim tensor is seen by the kernel as [1] */
    tl_tensor *src = NULL, *dst = NULL;
    tl_status status = TL_OK;
    if (a->ndim == 0) {
        int64_t one = 1;
        status = tl_make_view(a, &one, &one, 1, a->offset, &src);
        if (status == TL_OK) status = tl_make_view(result, &one, &one, 1, result->offset, &dst);
    } else {
        src = tl_retain((tl_tensor *)a);
        dst = tl_retain(result);
    }
    if (status == TL_OK) {
        const tl_tensor *traced[] = {dst, src, NULL};
        const tl_kernel_entry *kernel = tl_dispatch(op, tl_tensor_device(a), a->dtype, traced);
        /* an empty tensor has nothing to compute: no loop may scale with its other dims */
        status = !kernel              ? tl_dispatch_status()
                 : tl_numel(src) == 0 ? TL_OK
                                      : kernel->fn.softmax(dst, src, d);
    }
    tl_release(src);
    tl_release(dst);
    return status;
}

static tl_status softmax_op(tl_op op, const tl_tensor *a, int dim, tl_tensor **out) {
    int d;
    TL_TRY(check_softmax(tl_op_info_of(op)->name, a, dim, &d));
    tl_tensor *result;
    TL_TRY(tl_empty_like(a, &result));
    tl_status status = softmax_into(op, a, d, result);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

static tl_status softmax_inplace(const char *name, tl_op op, tl_tensor *x, int dim) {
    int d;
    TL_TRY(check_softmax(name, x, dim, &d));
    TL_TRY(tl_check_writable(name, "x", x));
    TL_TRY(softmax_into(op, x, d, x));
    tl_bump_version(x);
    return TL_OK;
}

tl_status tl_softmax(const tl_tensor *a, int dim, tl_tensor **out) {
    return softmax_op(TL_OP_softmax, a, dim, out);
}

tl_status tl_log_softmax(const tl_tensor *a, int dim, tl_tensor **out) {
    return softmax_op(TL_OP_log_softmax, a, dim, out);
}

tl_status tl_softmax_(tl_tensor *x, int dim) {
    return softmax_inplace("softmax_", TL_OP_softmax, x, dim);
}

tl_status tl_log_softmax_(tl_tensor *x, int dim) {
    return softmax_inplace("log_softmax_", TL_OP_log_softmax, x, dim);
}
