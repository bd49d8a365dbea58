/* Views that share storage: view, transpose, permute, narrow, select, squeeze,
   unsqueeze, expand. Reshape and flatten, which may copy, are in reshape.c. */
#include <string.h>

#include "core/size.h"
#include "core/storage.h"
#include "ops/view.h"
#include "tlua/ops.h"

static tl_status infer_shape(const char *op, const tl_tensor *t, const int64_t *shape, int ndim,
                             int64_t *out) {
    if (ndim < 0 || ndim > TL_MAX_DIMS)
        return tl_error(TL_ERR_SHAPE, "%s: expected at most %d dims, got %d", op, TL_MAX_DIMS,
                        ndim);
    int infer = -1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == -1) {
            if (infer >= 0)
                return tl_error(TL_ERR_SHAPE, "%s: only one dim can be -1 (dims %d and %d are)", op,
                                infer + 1, d + 1);
            infer = d;
            out[d] = 1; /* for the count of the known dims below */
        } else {
            out[d] = shape[d];
        }
    }
    int64_t known;
    TL_TRY(tl_shape_numel(op, out, ndim, &known)); /* sizes >= 0, no overflow */
    int64_t numel = tl_numel(t);
    char buf[256];
    if (infer >= 0) {
        if (known == 0 || numel % known != 0)
            return tl_error(TL_ERR_SHAPE,
                            "%s: cannot infer dim %d: %lld elements of shape %s do "
                            "not divide into the other dims' %lld",
                            op, infer + 1, (long long)numel, tl_shape_str(t, buf, sizeof buf),
                            (long long)known);
        out[infer] = numel / known;
    } else if (known != numel) {
        return tl_error(TL_ERR_SHAPE, "%s: shape %s has %lld elements, the requested shape %lld",
                        op, tl_shape_str(t, buf, sizeof buf), (long long)numel, (long long)known);
    }
    return TL_OK;
}

/* Strides for viewing t as shape without a copy, or false if none exist. */
static bool view_strides(const tl_tensor *t, const int64_t *shape, int ndim, int64_t *strides) {
    if (t->ndim == 0 || tl_numel(t) == 0) {
        tl_contiguous_strides(shape, ndim, strides);
        return true;
    }
    /* Walk t's dims from the last, grouping runs that are contiguous with one
       another; each run must be split exactly into consecutive new dims. */
    int view_d = ndim - 1;
    int64_t chunk_stride = t->strides[t->ndim - 1];
    int64_t tensor_numel = 1, view_numel = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        tensor_numel *= t->shape[d];
        bool run_ends =
            d == 0 || (t->shape[d - 1] != 1 && t->strides[d - 1] != tensor_numel * chunk_stride);
        if (!run_ends) continue;
        while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
            strides[view_d] = view_numel * chunk_stride;
            view_numel *= shape[view_d];
            view_d--;
        }
        if (view_numel != tensor_numel) return false;
        if (d > 0) {
            chunk_stride = t->strides[d - 1];
            tensor_numel = 1;
            view_numel = 1;
        }
    }
    return view_d == -1;
}

tl_status tl_view(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out) {
    int64_t new_shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    tl_status status = infer_shape("view", t, shape, ndim, new_shape);
    if (status != TL_OK) return status;
    if (!view_strides(t, new_shape, ndim, strides)) {
        char buf[256];
        return tl_error(TL_ERR_SHAPE,
                        "view: the strides of a tensor of shape %s cannot express the requested "
                        "shape without a copy (use reshape, or contiguous() first)",
                        tl_shape_str(t, buf, sizeof buf));
    }
    return tl_make_view(t, new_shape, strides, ndim, t->offset, out);
}

tl_status tl_view_if_possible(const char *op, tl_tensor *t, const int64_t *shape, int ndim,
                              tl_tensor **out) {
    int64_t new_shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    TL_TRY(infer_shape(op, t, shape, ndim, new_shape));
    *out = NULL;
    if (!view_strides(t, new_shape, ndim, strides)) return TL_OK;
    return tl_make_view(t, new_shape, strides, ndim, t->offset, out);
}

tl_status tl_transpose(tl_tensor *t, int dim0, int dim1, tl_tensor **out) {
    int d0, d1;
    tl_status status = tl_wrap_dim("transpose", dim0, t->ndim, &d0);
    if (status == TL_OK) status = tl_wrap_dim("transpose", dim1, t->ndim, &d1);
    if (status != TL_OK) return status;
    int64_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    if (t->ndim > 0) {
        shape[d0] = t->shape[d1], shape[d1] = t->shape[d0];
        strides[d0] = t->strides[d1], strides[d1] = t->strides[d0];
    }
    return tl_make_view(t, shape, strides, t->ndim, t->offset, out);
}

tl_status tl_permute(tl_tensor *t, const int *dims, int ndim, tl_tensor **out) {
    if (ndim != t->ndim)
        return tl_error(TL_ERR_SHAPE, "permute: expected %d dims for a tensor with %d dims, got %d",
                        t->ndim, t->ndim, ndim);
    int64_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    bool seen[TL_MAX_DIMS] = {false};
    for (int i = 0; i < ndim; i++) {
        int d;
        tl_status status = tl_wrap_dim("permute", dims[i], t->ndim, &d);
        if (status != TL_OK) return status;
        if (seen[d]) return tl_error(TL_ERR_ARGUMENT, "permute: dim %d appears twice", d + 1);
        seen[d] = true;
        shape[i] = t->shape[d];
        strides[i] = t->strides[d];
    }
    return tl_make_view(t, shape, strides, ndim, t->offset, out);
}

static tl_status need_dims(const char *op, const tl_tensor *t) {
    if (t->ndim == 0)
        return tl_error(TL_ERR_SHAPE, "%s: expected a tensor with at least 1 dim, got a 0-dim one",
                        op);
    return TL_OK;
}

tl_status tl_narrow(tl_tensor *t, int dim, int64_t start, int64_t length, tl_tensor **out) {
    int d;
    tl_status status = need_dims("narrow", t);
    if (status == TL_OK) status = tl_wrap_dim("narrow", dim, t->ndim, &d);
    if (status != TL_OK) return status;
    int64_t size = t->shape[d];
    if (!tl_range_within(start, length, size))
        return tl_error(TL_ERR_INDEX,
                        "narrow: start %lld and length %lld do not lie within dim %d of size "
                        "%lld (expected 1 <= start and start + length - 1 <= %lld)",
                        (long long)(start < INT64_MAX ? start + 1 : start), (long long)length,
                        d + 1, (long long)size, (long long)size);
    int64_t shape[TL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = length;
    return tl_make_view(t, shape, t->strides, t->ndim, t->offset + start * t->strides[d], out);
}

/* A view of t without dim d, starting at offset (select's index, or squeeze's 0). */
static tl_status view_without_dim(tl_tensor *t, int d, int64_t offset, tl_tensor **out) {
    int64_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (i == d) continue;
        shape[n] = t->shape[i];
        strides[n++] = t->strides[i];
    }
    return tl_make_view(t, shape, strides, n, offset, out);
}

tl_status tl_select(tl_tensor *t, int dim, int64_t index, tl_tensor **out) {
    int d;
    tl_status status = need_dims("select", t);
    if (status == TL_OK) status = tl_wrap_dim("select", dim, t->ndim, &d);
    if (status != TL_OK) return status;
    int64_t size = t->shape[d];
    if (index < -size || index >= size)
        return tl_error(TL_ERR_INDEX,
                        "select: index %lld is out of range for dim %d of size %lld (expected 1 "
                        "to %lld, or -%lld to -1)",
                        (long long)(index >= 0 ? index + 1 : index), d + 1, (long long)size,
                        (long long)size, (long long)size);
    if (index < 0) index += size;
    return view_without_dim(t, d, t->offset + index * t->strides[d], out);
}

tl_status tl_squeeze(tl_tensor *t, int dim, tl_tensor **out) {
    int d;
    tl_status status = tl_wrap_dim("squeeze", dim, t->ndim, &d);
    if (status != TL_OK) return status;
    if (t->ndim == 0 || t->shape[d] != 1)
        return tl_make_view(t, t->shape, t->strides, t->ndim, t->offset, out);
    return view_without_dim(t, d, t->offset, out);
}

tl_status tl_squeeze_all(tl_tensor *t, tl_tensor **out) {
    int64_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1) continue;
        shape[n] = t->shape[i];
        strides[n++] = t->strides[i];
    }
    return tl_make_view(t, shape, strides, n, t->offset, out);
}

tl_status tl_unsqueeze(tl_tensor *t, int dim, tl_tensor **out) {
    if (t->ndim >= TL_MAX_DIMS)
        return tl_error(TL_ERR_SHAPE, "unsqueeze: a tensor cannot have more than %d dims",
                        TL_MAX_DIMS);
    int d;
    /* the new dim may go anywhere from 1 to ndim + 1 */
    tl_status status = tl_wrap_dim("unsqueeze", dim, t->ndim + 1, &d);
    if (status != TL_OK) return status;
    int64_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) {
        if (i == d) {
            shape[i] = 1;
            strides[i] = d < t->ndim ? t->strides[d] * t->shape[d] : 1;
        } else {
            shape[i] = t->shape[j];
            strides[i] = t->strides[j++];
        }
    }
    return tl_make_view(t, shape, strides, t->ndim + 1, t->offset, out);
}

tl_status tl_expand(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out) {
    char buf[256];
    if (ndim < t->ndim || ndim > TL_MAX_DIMS)
        return tl_error(TL_ERR_SHAPE,
                        "expand: cannot expand a tensor of shape %s to %d dims (expected %d to %d)",
                        tl_shape_str(t, buf, sizeof buf), ndim, t->ndim, TL_MAX_DIMS);
    int64_t new_shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int src = i - lead;
        int64_t want = shape[i];
        if (src < 0) {
            if (want < 0)
                return tl_error(TL_ERR_SHAPE, "expand: size -1 is not allowed for new dim %d",
                                i + 1);
            new_shape[i] = want;
            strides[i] = 0;
        } else if (want == -1 || want == t->shape[src]) {
            new_shape[i] = t->shape[src];
            strides[i] = t->strides[src];
        } else if (t->shape[src] == 1 && want >= 0) {
            new_shape[i] = want;
            strides[i] = 0;
        } else {
            return tl_error(TL_ERR_SHAPE,
                            "expand: dim %d of shape %s has size %lld, which cannot be expanded "
                            "to %lld (only size-1 dims can)",
                            src + 1, tl_shape_str(t, buf, sizeof buf), (long long)t->shape[src],
                            (long long)want);
        }
    }
    int64_t numel;
    TL_TRY(tl_shape_numel("expand", new_shape, ndim, &numel)); /* sizes >= 0, no overflow */
    return tl_make_view(t, new_shape, strides, ndim, t->offset, out);
}

bool tl_is_dense_layout(const int64_t *shape, const int64_t *strides, int ndim) {
    int order[TL_MAX_DIMS + 1], n = 0;
    for (int k = 0; k < ndim; k++) {
        if (shape[k] == 1) continue;
        int at = n++;
        while (at > 0 && strides[order[at - 1]] > strides[k]) order[at] = order[at - 1], at--;
        order[at] = k;
    }
    int64_t expected = 1;
    for (int i = 0; i < n; i++) {
        if (strides[order[i]] != expected) return false;
        expected *= shape[order[i]];
    }
    return true;
}

/* The step between like[i] and like[i + 1] when the n tensors are siblings (see view.h), else 0. */
static int64_t sibling_step(const tl_tensor *const *like, int n) {
    const tl_tensor *f = like[0];
    if (n < 2 || f->ndim + 1 > TL_MAX_DIMS || tl_numel(f) == 0) return 0;
    const int64_t step = like[1]->offset - f->offset;
    if (step <= 0) return 0;
    for (int i = 1; i < n; i++) {
        const tl_tensor *t = like[i];
        if (t->storage != f->storage || t->dtype != f->dtype || t->ndim != f->ndim ||
            t->offset != f->offset + i * step ||
            memcmp(t->shape, f->shape, sizeof t->shape[0] * (size_t)t->ndim) != 0 ||
            memcmp(t->strides, f->strides, sizeof t->strides[0] * (size_t)t->ndim) != 0)
            return 0;
    }
    int64_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    shape[0] = n, strides[0] = step;
    for (int k = 0; k < f->ndim; k++) shape[k + 1] = f->shape[k], strides[k + 1] = f->strides[k];
    return tl_is_dense_layout(shape, strides, f->ndim + 1) ? step : 0;
}

tl_status tl_empty_siblings(const tl_tensor *const *like, int n, tl_tensor **out) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    const tl_tensor *f = like[0];
    const int64_t step = sibling_step(like, n);
    tl_status status = TL_OK;
    if (!step) {
        for (int i = 0; i < n && status == TL_OK; i++)
            status = tl_empty(like[i]->shape, like[i]->ndim, like[i]->dtype,
                              tl_tensor_device(like[i]), &out[i]);
    } else {
        /* one block of n * numel elements; the first sibling starts where the block does, as
           its smallest offset is element 0 of a dense layout with positive strides */
        const int64_t flat = (int64_t)n * tl_numel(f);
        tl_tensor *block;
        status = tl_empty(&flat, 1, f->dtype, tl_tensor_device(f), &block);
        for (int i = 0; i < n && status == TL_OK; i++)
            status = tl_make_view(block, f->shape, f->strides, f->ndim, i * step, &out[i]);
        tl_release(block); /* the views hold the storage */
    }
    if (status != TL_OK)
        for (int i = 0; i < n; i++) tl_release(out[i]), out[i] = NULL;
    return status;
}

tl_status tl_diagonal(tl_tensor *t, int64_t offset, int dim1, int dim2, tl_tensor **out) {
    const char *op = "diagonal";
    if (t->ndim < 2)
        return tl_error(TL_ERR_SHAPE, "%s: expected a tensor of at least 2 dims, got %d", op,
                        t->ndim);
    int d1, d2;
    TL_TRY(tl_wrap_dim(op, dim1, t->ndim, &d1));
    TL_TRY(tl_wrap_dim(op, dim2, t->ndim, &d2));
    if (d1 == d2) return tl_error(TL_ERR_ARGUMENT, "%s: dim1 and dim2 are both dim %d", op, d1 + 1);
    /* element i of the diagonal is (i, i + offset) of (d1, d2) for offset >= 0, (i - offset, i)
       below: its length is what fits in both dims */
    const int64_t n1 = t->shape[d1], n2 = t->shape[d2];
    int64_t length = 0, start = t->offset;
    if (offset >= 0 && offset < n2) {
        length = n1 < n2 - offset ? n1 : n2 - offset;
        start += offset * t->strides[d2];
    } else if (offset < 0 && -offset < n1) {
        length = n1 + offset < n2 ? n1 + offset : n2;
        start += -offset * t->strides[d1];
    }
    if (length == 0) start = t->offset;
    int64_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    int n = 0;
    for (int k = 0; k < t->ndim; k++) {
        if (k == d1 || k == d2) continue;
        shape[n] = t->shape[k];
        strides[n++] = t->strides[k];
    }
    shape[n] = length;
    strides[n++] = t->strides[d1] + t->strides[d2];
    return tl_make_view(t, shape, strides, n, start, out);
}

tl_status tl_unfold(tl_tensor *t, int dim, int64_t size, int64_t step, tl_tensor **out) {
    const char *op = "unfold";
    TL_TRY(need_dims(op, t));
    if (t->ndim >= TL_MAX_DIMS)
        return tl_error(TL_ERR_SHAPE, "%s: a tensor cannot have more than %d dims", op,
                        TL_MAX_DIMS);
    int d;
    TL_TRY(tl_wrap_dim(op, dim, t->ndim, &d));
    if (size < 0 || size > t->shape[d])
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: size %lld does not fit dim %d of size %lld (expected 0 to %lld)", op,
                        (long long)size, d + 1, (long long)t->shape[d], (long long)t->shape[d]);
    if (step <= 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: step must be > 0, got %lld", op, (long long)step);
    int64_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    shape[d] = (t->shape[d] - size) / step + 1;
    strides[d] = t->strides[d] * (shape[d] > 1 ? step : 1);
    shape[t->ndim] = size;
    strides[t->ndim] = t->strides[d];
    return tl_make_view(t, shape, strides, t->ndim + 1, t->offset, out);
}

tl_status tl_movedim_order(const tl_tensor *t, const int *from, const int *to, int n, int *perm) {
    const char *op = "movedim";
    if (n < 0 || n > t->ndim)
        return tl_error(TL_ERR_ARGUMENT, "%s: expected at most %d dims to move, got %d", op,
                        t->ndim, n);
    /* perm[position] = the source dim placed there: the moved dims at their targets, the others
       in their order in the places left */
    bool taken_source[TL_MAX_DIMS] = {false}, taken_place[TL_MAX_DIMS] = {false};
    for (int i = 0; i < t->ndim; i++) perm[i] = -1;
    for (int i = 0; i < n; i++) {
        int s, p;
        TL_TRY(tl_wrap_dim(op, from[i], t->ndim, &s));
        TL_TRY(tl_wrap_dim(op, to[i], t->ndim, &p));
        if (taken_source[s])
            return tl_error(TL_ERR_ARGUMENT, "%s: source dim %d appears twice", op, s + 1);
        if (taken_place[p])
            return tl_error(TL_ERR_ARGUMENT, "%s: destination dim %d appears twice", op, p + 1);
        taken_source[s] = taken_place[p] = true;
        perm[p] = s;
    }
    for (int p = 0, s = 0; p < t->ndim; p++) {
        if (perm[p] >= 0) continue;
        while (taken_source[s]) s++;
        perm[p] = s++;
    }
    return TL_OK;
}

tl_status tl_movedim(tl_tensor *t, const int *from, const int *to, int n, tl_tensor **out) {
    int perm[TL_MAX_DIMS];
    TL_TRY(tl_movedim_order(t, from, to, n, perm));
    return tl_permute(t, perm, t->ndim, out);
}
