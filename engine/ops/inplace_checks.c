/* The checks of in-place ops: a writable x, a result that fits it, operands that overlap it. */
#include <string.h>

#include "ops/checks.h"

tl_status tl_check_writable(const char *op, const char *arg, const tl_tensor *t) {
    TL_TRY(tl_check_tensor_arg(op, arg, t));
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] == 0 && t->shape[d] > 1) {
            char st[256];
            return tl_error(TL_ERR_ARGUMENT,
                            "%s: %s of shape %s has elements that share memory (dim %d is "
                            "expanded); write into a tensor of its own (clone() it first)",
                            op, arg, tl_shape_str(t, st, sizeof st), d + 1);
        }
    return TL_OK;
}

/* PyTorch's can_cast: no floating value into an integer or bool tensor, no integer into bool */
static int kind_of(tl_dtype d) {
    return d == TL_BOOL ? 0 : tl_dtype_is_floating(d) ? 2 : 1;
}

tl_status tl_check_result_fits(const char *op, tl_dtype result, const tl_tensor *x) {
    if (kind_of(result) <= kind_of(x->dtype)) return TL_OK;
    return tl_error(TL_ERR_DTYPE,
                    "%s: the result has dtype %s, which cannot be stored in x of dtype %s "
                    "(use the out-of-place op)",
                    op, tl_dtype_name(result), tl_dtype_name(x->dtype));
}

tl_status tl_check_broadcasts_to(const char *op, const tl_tensor *other, const tl_tensor *x) {
    bool fits = other->ndim <= x->ndim;
    int lead = x->ndim - other->ndim;
    for (int d = 0; d < other->ndim && fits; d++)
        fits = other->shape[d] == 1 || other->shape[d] == x->shape[d + lead];
    if (fits) return TL_OK;
    char so[256], sx[256];
    return tl_error(TL_ERR_SHAPE,
                    "%s: other of shape %s cannot be broadcast to x's shape %s (an in-place "
                    "result keeps x's shape)",
                    op, tl_shape_str(other, so, sizeof so), tl_shape_str(x, sx, sizeof sx));
}

/* The bytes [*lo, *hi) of t's storage that its elements occupy (numel > 0). */
static void byte_extent(const tl_tensor *t, size_t *lo, size_t *hi) {
    int64_t size = (int64_t)tl_dtype_size(t->dtype), first = t->offset, last = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        int64_t span = (t->shape[d] - 1) * t->strides[d];
        if (span < 0)
            first += span;
        else
            last += span;
    }
    *lo = (size_t)(first * size);
    *hi = (size_t)((last + 1) * size);
}

bool tl_same_elements(const tl_tensor *a, const tl_tensor *b) {
    return a->storage == b->storage && a->dtype == b->dtype && a->offset == b->offset &&
           a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0 &&
           memcmp(a->strides, b->strides, (size_t)a->ndim * sizeof a->strides[0]) == 0;
}

bool tl_may_overlap(const tl_tensor *a, const tl_tensor *b) {
    if (a->storage != b->storage || tl_numel(a) == 0 || tl_numel(b) == 0) return false;
    size_t alo, ahi, blo, bhi;
    byte_extent(a, &alo, &ahi);
    byte_extent(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}
