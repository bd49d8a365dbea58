/* cat: tensors joined along a dim, each copied into its slice of the result. */
#include "core/storage.h"
#include "ops/checks.h"
#include "tlua/ops.h"

/* The first tensor with elements (torch skips empty ones), or the first when all are empty. */
static int reference_of(tl_tensor *const *list, int n) {
    for (int i = 0; i < n; i++)
        if (tl_numel(list[i]) > 0) return i;
    return 0;
}

/* Checks list[i] against the reference r: same rank, sizes but along d, dtype and device (an
   empty tensor is skipped: nothing to check). */
static tl_status check_piece(tl_tensor *const *list, int i, int r, int d) {
    const char *op = "cat";
    const tl_tensor *t = list[i], *ref = list[r];
    char st[256], sr[256];
    if (tl_numel(t) == 0 && i != r) return TL_OK; /* skipped, whatever its shape and dtype */
    if (t->dtype != ref->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: tensor %d has dtype %s, expected %s (tensor %d's)", op,
                        i + 1, tl_dtype_name(t->dtype), tl_dtype_name(ref->dtype), r + 1);
    if (!tl_device_equal(tl_tensor_device(t), tl_tensor_device(ref))) {
        char dt[16], dr[16];
        return tl_error(TL_ERR_DEVICE, "%s: tensor %d is on %s, expected %s (tensor %d's)", op,
                        i + 1, tl_device_name(tl_tensor_device(t), dt),
                        tl_device_name(tl_tensor_device(ref), dr), r + 1);
    }
    bool fits = t->ndim == ref->ndim;
    for (int k = 0; fits && k < t->ndim; k++) fits = k == d || t->shape[k] == ref->shape[k];
    if (!fits)
        return tl_error(TL_ERR_SHAPE,
                        "%s: tensor %d has shape %s, expected tensor %d's shape %s but along dim "
                        "%d",
                        op, i + 1, tl_shape_str(t, st, sizeof st), r + 1,
                        tl_shape_str(ref, sr, sizeof sr), d + 1);
    return TL_OK;
}

tl_status tl_cat(tl_tensor *const *list, int n, int dim, tl_tensor **out) {
    const char *op = "cat";
    if (!list || n <= 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: expected a non-empty list of tensors, got %d", op, n);
    for (int i = 0; i < n; i++) TL_TRY(tl_check_tensor_arg(op, "a tensor of the list", list[i]));
    const int r = reference_of(list, n);
    const tl_tensor *ref = list[r];
    if (ref->ndim == 0)
        return tl_error(TL_ERR_SHAPE, "%s: cannot join 0-dim tensors (tensor %d): use stack", op,
                        r + 1);
    int d;
    TL_TRY(tl_wrap_dim(op, dim, ref->ndim, &d));
    int64_t shape[TL_MAX_DIMS], total = 0;
    for (int i = 0; i < n; i++) {
        TL_TRY(check_piece(list, i, r, d));
        if (tl_numel(list[i]) > 0) total += list[i]->shape[d];
    }
    for (int k = 0; k < ref->ndim; k++) shape[k] = k == d ? total : ref->shape[k];
    tl_tensor *y;
    TL_TRY(tl_empty(shape, ref->ndim, ref->dtype, tl_tensor_device(ref), &y));
    tl_status status = TL_OK;
    int64_t at = 0;
    for (int i = 0; i < n && status == TL_OK; i++) {
        if (tl_numel(list[i]) == 0) continue;
        tl_tensor *slice = NULL;
        status = tl_narrow(y, d, at, list[i]->shape[d], &slice);
        if (status == TL_OK) status = tl_copy_(slice, list[i]);
        tl_release(slice);
        at += list[i]->shape[d];
    }
    if (status != TL_OK) {
        tl_release(y);
        return status;
    }
    *out = y;
    return TL_OK;
}
