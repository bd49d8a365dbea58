/* Joining and splitting: cat copies tensors into slices of one result; split, chunk and unbind
   cut a tensor into views along a dim. */
#include "core/size.h"
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

/* ---- splitting ------------------------------------------------------------------------------ */

static tl_status split_dim(const char *op, const tl_tensor *t, int dim, int *d) {
    TL_TRY(tl_check_tensor_arg(op, "x", t));
    if (t->ndim == 0)
        return tl_error(TL_ERR_SHAPE, "%s: expected a tensor with at least 1 dim, got a 0-dim one",
                        op);
    return tl_wrap_dim(op, dim, t->ndim, d);
}

tl_status tl_split_count(const tl_tensor *t, int dim, int64_t size, int *n) {
    int d;
    TL_TRY(split_dim("split", t, dim, &d));
    const int64_t length = t->shape[d];
    if (size < 0 || (size == 0 && length > 0))
        return tl_error(TL_ERR_ARGUMENT,
                        "split: size %lld cannot cut dim %d of size %lld (expected a size >= 1, "
                        "or 0 for an empty dim)",
                        (long long)size, d + 1, (long long)length);
    /* ceil(length / size) without forming length + size (size may be near INT64_MAX) */
    const int64_t count = length == 0 ? 1 : length / size + (length % size != 0);
    if (count > TL_SPLIT_MAX_PIECES)
        return tl_error(TL_ERR_ARGUMENT,
                        "split: size %lld cuts dim %d of size %lld into %lld pieces, more than "
                        "%d",
                        (long long)size, d + 1, (long long)length, (long long)count,
                        TL_SPLIT_MAX_PIECES);
    *n = (int)count;
    return TL_OK;
}

void tl_split_sizes(const tl_tensor *t, int dim, int64_t size, int n, int64_t *sizes) {
    const int64_t length = t->shape[dim < 0 ? dim + t->ndim : dim];
    for (int i = 0; i < n; i++) {
        const int64_t at = (int64_t)i * size;
        sizes[i] = length - at < size ? length - at : size;
    }
}

tl_status tl_chunk_count(const tl_tensor *t, int dim, int64_t chunks, int *n, int64_t *size) {
    int d;
    TL_TRY(split_dim("chunk", t, dim, &d));
    const int64_t length = t->shape[d];
    if (chunks <= 0)
        return tl_error(TL_ERR_ARGUMENT, "chunk: expected a number of chunks >= 1, got %lld",
                        (long long)chunks);
    /* as torch: pieces of ceil(length / chunks), so fewer than chunks may come (6 into 4 gives
       2, 2, 2); an empty dim gives chunks empty pieces */
    const int64_t count = length == 0 ? chunks : 0;
    *size = length == 0 ? 0 : length / chunks + (length % chunks != 0);
    const int64_t pieces = length == 0 ? count : length / *size + (length % *size != 0);
    if (pieces > TL_SPLIT_MAX_PIECES)
        return tl_error(TL_ERR_ARGUMENT,
                        "chunk: %lld chunks of dim %d (size %lld) make %lld pieces, more than %d",
                        (long long)chunks, d + 1, (long long)length, (long long)pieces,
                        TL_SPLIT_MAX_PIECES);
    *n = (int)pieces;
    return TL_OK;
}

tl_status tl_split(tl_tensor *t, int dim, const int64_t *sizes, int n, tl_tensor **out) {
    const char *op = "split";
    int d;
    TL_TRY(split_dim(op, t, dim, &d));
    if (n <= 0 || n > TL_SPLIT_MAX_PIECES)
        return tl_error(TL_ERR_ARGUMENT, "%s: expected 1 to %d sizes, got %d", op,
                        TL_SPLIT_MAX_PIECES, n);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0 || !tl_size_add(total, sizes[i], &total))
            return tl_error(TL_ERR_ARGUMENT, "%s: size %d is %lld, expected a size >= 0", op, i + 1,
                            (long long)sizes[i]);
    }
    if (total != t->shape[d])
        return tl_error(TL_ERR_SHAPE, "%s: the sizes add up to %lld, expected dim %d's size %lld",
                        op, (long long)total, d + 1, (long long)t->shape[d]);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        out[i] = NULL;
        tl_status status = tl_narrow(t, d, at, sizes[i], &out[i]);
        if (status != TL_OK) {
            for (int k = 0; k < i; k++) tl_release(out[k]), out[k] = NULL;
            return status;
        }
        at += sizes[i];
    }
    return TL_OK;
}

tl_status tl_unbind(tl_tensor *t, int dim, tl_tensor **out) {
    int d;
    TL_TRY(split_dim("unbind", t, dim, &d));
    if (t->shape[d] > TL_SPLIT_MAX_PIECES)
        return tl_error(TL_ERR_ARGUMENT, "unbind: dim %d has %lld slices, more than %d", d + 1,
                        (long long)t->shape[d], TL_SPLIT_MAX_PIECES);
    for (int64_t i = 0; i < t->shape[d]; i++) {
        out[i] = NULL;
        tl_status status = tl_select(t, d, i, &out[i]);
        if (status != TL_OK) {
            for (int64_t k = 0; k < i; k++) tl_release(out[k]), out[k] = NULL;
            return status;
        }
    }
    return TL_OK;
}
