/* cumsum (an inclusive prefix sum along one dim) and nonzero (the coordinates of the non-zero
   elements): validate, allocate the output and dispatch to the scan kernels. */
#include "core/storage.h"
#include "kernels/kernel.h"
#include "ops/checks.h"
#include "tlua/ops.h"

/* t seen as [1] when it is 0-dim (the kernels scan a dim), else t itself; a new reference. */
static tl_status as_dims(const tl_tensor *t, tl_tensor **out) {
    if (t->ndim > 0) {
        *out = tl_retain((tl_tensor *)t);
        return TL_OK;
    }
    int64_t one = 1;
    return tl_make_view(t, &one, &one, 1, t->offset, out);
}

tl_status tl_cumsum(const tl_tensor *x, int dim, tl_tensor **out) {
    const char *op = "cumsum";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    int d;
    TL_TRY(tl_wrap_dim(op, dim, x->ndim, &d));
    /* floating inputs keep their dtype; integers and bool sum to int64 (as sum and torch) */
    tl_dtype out_dtype = tl_dtype_is_floating(x->dtype) ? x->dtype : TL_I64;
    tl_device device = tl_tensor_device(x);
    tl_tensor *y = NULL, *src = NULL, *dst = NULL;
    tl_status status = tl_empty(x->shape, x->ndim, out_dtype, device, &y);
    if (status == TL_OK) status = as_dims(x, &src);
    if (status == TL_OK) status = as_dims(y, &dst);
    if (status == TL_OK) {
        const tl_tensor *traced[3] = {y, x, NULL};
        const tl_kernel_entry *kernel = tl_dispatch(TL_OP_cumsum, device, x->dtype, traced);
        /* an empty tensor has nothing to sum */
        status = !kernel            ? tl_dispatch_status()
                 : tl_numel(y) == 0 ? TL_OK
                                    : kernel->fn.scan(dst, src, x->ndim > 0 ? d : 0);
    }
    tl_release(src);
    tl_release(dst);
    if (status != TL_OK) {
        tl_release(y);
        return status;
    }
    *out = y;
    return TL_OK;
}

/* The kernel counts the non-zero elements first (on CUDA the count comes back to the host: one
   wait for the device), then the result [count, ndim] is allocated and the kernel writes the
   coordinates. The trace lists the input only: the result's size is known after the count. */
tl_status tl_nonzero(const tl_tensor *x, tl_tensor **out) {
    const char *op = "nonzero";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    tl_device device = tl_tensor_device(x);
    tl_tensor *dense = NULL, *y = NULL;
    TL_TRY(tl_contiguous((tl_tensor *)x, &dense)); /* the kernels read x in row-major order */
    const tl_tensor *traced[2] = {dense, NULL};
    const tl_kernel_entry *kernel = tl_dispatch(TL_OP_nonzero, device, x->dtype, traced);
    /* an empty x has nothing to count (nor any element to point at: its offset may be any) */
    int64_t count = 0;
    tl_status status = !kernel                ? tl_dispatch_status()
                       : tl_numel(dense) == 0 ? TL_OK
                                              : kernel->fn.nonzero(NULL, dense, &count);
    if (status == TL_OK) {
        int64_t shape[2] = {count, x->ndim};
        status = tl_empty(shape, 2, TL_I64, device, &y);
    }
    if (status == TL_OK && tl_numel(y) > 0) status = kernel->fn.nonzero(y, dense, &count);
    tl_release(dense);
    if (status != TL_OK) {
        tl_release(y);
        return status;
    }
    *out = y;
    return TL_OK;
}
