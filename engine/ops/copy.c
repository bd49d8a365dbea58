/* In-place fill and copy, conversions between dtypes and devices, and copies: tl_fill_,
   tl_copy_, tl_cast, tl_to, tl_contiguous, tl_clone. Every one validates before it writes. */
#include <string.h>

#include "kernels/kernel.h"
#include "ops/checks.h"
#include "core/storage.h"
#include "tlua/ops.h"

static tl_status check_dtype(const char *op, tl_dtype dtype) {
    if ((unsigned)dtype >= TL_DTYPE_COUNT)
        return tl_error(TL_ERR_DTYPE, "%s: invalid dtype %d", op, (int)dtype);
    return TL_OK;
}

/* Runs the cast kernel (keyed by src's dtype): dst = src, same shapes. */
static tl_status run_cast(tl_tensor *dst, const tl_tensor *src, const tl_tensor *traced_src) {
    const tl_kernel_entry *k = tl_dispatch(TL_OP_cast, tl_tensor_device(dst), src->dtype,
                                           (const tl_tensor *const[]){dst, traced_src, NULL});
    return k ? k->fn.copy(dst, src) : tl_dispatch_status();
}

tl_status tl_fill_(tl_tensor *t, tl_scalar value) {
    TL_TRY(tl_check_writable("fill_", "x", t));
    TL_TRY(tl_scalar_check_fits("fill_", t->dtype, value));
    const tl_kernel_entry *k =
        tl_dispatch(TL_OP_fill, tl_tensor_device(t), t->dtype, (const tl_tensor *const[]){t, NULL});
    if (!k) return tl_dispatch_status();
    TL_TRY(k->fn.fill(t, value));
    tl_bump_version(t);
    return TL_OK;
}

tl_status tl_copy_(tl_tensor *dst, const tl_tensor *src) {
    TL_TRY(tl_check_tensor_arg("copy_", "dst", dst));
    TL_TRY(tl_check_tensor_arg("copy_", "src", src));
    tl_device dd = tl_tensor_device(dst), ds = tl_tensor_device(src);
    if (!tl_device_equal(dd, ds)) {
        char nd[16], ns[16];
        return tl_error(TL_ERR_DEVICE,
                        "copy_: expected dst and src on the same device, got %s and %s (move src "
                        "with to() first)",
                        tl_device_name(dd, nd), tl_device_name(ds, ns));
    }
    /* src must broadcast to dst's shape exactly */
    char sd[256], ss[256];
    bool fits = src->ndim <= dst->ndim;
    int lead = dst->ndim - src->ndim;
    for (int d = 0; d < src->ndim && fits; d++)
        fits = src->shape[d] == 1 || src->shape[d] == dst->shape[d + lead];
    if (!fits)
        return tl_error(TL_ERR_SHAPE,
                        "copy_: src of shape %s cannot be broadcast to dst's shape %s",
                        tl_shape_str(src, ss, sizeof ss), tl_shape_str(dst, sd, sizeof sd));
    TL_TRY(tl_check_writable("copy_", "dst", dst));
    if (tl_numel(dst) == 0) return TL_OK;

    /* src that overlaps dst is read from a copy; dst itself needs no copy */
    if (tl_same_elements(dst, src)) {
        tl_bump_version(dst);
        return TL_OK;
    }
    tl_tensor *temp = NULL;
    const tl_tensor *from = src;
    if (tl_may_overlap(dst, src)) {
        TL_TRY(tl_clone(src, &temp));
        from = temp;
    }
    /* from with dst's shape, 0 strides where broadcast: a view on the stack that
       borrows from's storage for the kernel call only */
    tl_tensor view = *from;
    view.ndim = dst->ndim;
    view.autograd = NULL;
    for (int d = 0; d < dst->ndim; d++) {
        int s = d - lead;
        view.shape[d] = dst->shape[d];
        view.strides[d] = s >= 0 && from->shape[s] == dst->shape[d] ? from->strides[s] : 0;
    }
    tl_status status = run_cast(dst, &view, from);
    tl_release(temp);
    if (status != TL_OK) return status;
    tl_bump_version(dst);
    return TL_OK;
}

tl_status tl_cast(tl_tensor *t, tl_dtype dtype, tl_tensor **out) {
    TL_TRY(tl_check_tensor_arg("cast", "t", t));
    TL_TRY(check_dtype("cast", dtype));
    if (t->dtype == dtype) {
        *out = tl_retain(t);
        return TL_OK;
    }
    tl_tensor *result;
    TL_TRY(tl_empty(t->shape, t->ndim, dtype, tl_tensor_device(t), &result));
    tl_status status = run_cast(result, t, t);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

tl_status tl_to(tl_tensor *t, tl_dtype dtype, tl_device device, tl_tensor **out) {
    TL_TRY(tl_check_tensor_arg("to", "t", t));
    TL_TRY(check_dtype("to", dtype));
    tl_device from = tl_tensor_device(t);
    if (tl_device_equal(from, device)) return tl_cast(t, dtype, out);
    /* across devices: the bytes of a contiguous copy, then the cast on the target */
    TL_TRY(tl_device_check(device));
    tl_tensor *dense = NULL, *moved = NULL;
    tl_status status = tl_contiguous(t, &dense);
    if (status == TL_OK) status = tl_empty(t->shape, t->ndim, t->dtype, device, &moved);
    if (status == TL_OK)
        status = tl_memcpy(device, tl_data(moved), from, tl_data(dense),
                           (size_t)tl_numel(t) * tl_dtype_size(t->dtype));
    tl_release(dense);
    if (status == TL_OK) status = tl_cast(moved, dtype, out);
    tl_release(moved);
    return status;
}

tl_status tl_contiguous(tl_tensor *t, tl_tensor **out) {
    if (tl_is_contiguous(t)) {
        *out = tl_retain(t);
        return TL_OK;
    }
    return tl_clone(t, out);
}

tl_status tl_clone(const tl_tensor *t, tl_tensor **out) {
    tl_tensor *copy;
    TL_TRY(tl_empty_like(t, &copy));
    tl_status status = tl_copy_(copy, t);
    if (status != TL_OK) {
        tl_release(copy);
        return status;
    }
    copy->index_base = t->index_base;
    *out = copy;
    return TL_OK;
}

tl_status tl_pin_memory(const tl_tensor *t, tl_tensor **out) {
    if (t->storage->device.type != TL_DEVICE_CPU)
        return tl_error(TL_ERR_DEVICE,
                        "pin_memory: the tensor is on a GPU; only CPU tensors can be pinned");
    if (tl_is_pinned(t)) {
        *out = tl_retain((tl_tensor *)t);
        return TL_OK;
    }
    tl_tensor *p;
    TL_TRY(tl_empty_pinned(t->shape, t->ndim, t->dtype, &p));
    tl_status status = tl_copy_(p, t);
    if (status != TL_OK) {
        tl_release(p);
        return status;
    }
    *out = p;
    return TL_OK;
}
