/* The shape ops that view when strides allow and copy otherwise: reshape and flatten. */
#include "ops/view.h"
#include "tlua/ops.h"

tl_status tl_reshape(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out) {
    TL_TRY(tl_view_if_possible("reshape", t, shape, ndim, out));
    if (*out) return TL_OK;
    tl_tensor *copy;
    TL_TRY(tl_clone(t, &copy));
    tl_status status = tl_view(copy, shape, ndim, out);
    tl_release(copy);
    return status;
}

tl_status tl_flatten(tl_tensor *t, int start_dim, int end_dim, tl_tensor **out) {
    int s, e;
    tl_status status = tl_wrap_dim("flatten", start_dim, t->ndim, &s);
    if (status == TL_OK) status = tl_wrap_dim("flatten", end_dim, t->ndim, &e);
    if (status != TL_OK) return status;
    if (t->ndim == 0) {
        int64_t one = 1;
        return tl_reshape(t, &one, 1, out);
    }
    if (s > e)
        return tl_error(TL_ERR_ARGUMENT, "flatten: start dim %d comes after end dim %d", s + 1,
                        e + 1);
    int64_t shape[TL_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < s; i++) shape[n++] = t->shape[i];
    int64_t merged = 1;
    for (int i = s; i <= e; i++) merged *= t->shape[i];
    shape[n++] = merged;
    for (int i = e + 1; i < t->ndim; i++) shape[n++] = t->shape[i];
    return tl_reshape(t, shape, n, out);
}
