/* softmax and log_softmax along one dim: validate, allocate, dispatch to the softmax kernels. */
#include "kernels/kernel.h"
#include "core/storage.h"
#include "tlua/ops.h"

static tl_status softmax_op(tl_op op, const tl_tensor *a, int dim, tl_tensor **out) {
    const char *name = tl_op_info_of(op)->name;
    if (!tl_dtype_is_floating(a->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype, got %s", name,
                        tl_dtype_name(a->dtype));
    int d;
    TL_TRY(tl_wrap_dim(name, dim, a->ndim, &d));
    tl_tensor *result;
    TL_TRY(tl_empty_like(a, &result));
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
        status = !kernel              ? TL_ERR_DTYPE
                 : tl_numel(src) == 0 ? TL_OK
                                      : kernel->fn.softmax(dst, src, d);
    }
    tl_release(src);
    tl_release(dst);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

tl_status tl_softmax(const tl_tensor *a, int dim, tl_tensor **out) {
    return softmax_op(TL_OP_softmax, a, dim, out);
}

tl_status tl_log_softmax(const tl_tensor *a, int dim, tl_tensor **out) {
    return softmax_op(TL_OP_log_softmax, a, dim, out);
}
