/* Sorting and selection: sort, argsort, topk, kthvalue, median and unique (the kernels work on
 * contiguous rows along the last dim: the op moves dim there and back), searchsorted and
 * bincount; validate, allocate, dispatch. */
#include <math.h>

#include "kernels/kernel.h"
#include "ops/checks.h"
#include "tlua/nn.h"
#include "tlua/ops.h"

/* x's elements as contiguous rows along dim d: x itself (retained) when d is its last dim and x
   is contiguous, else a copy with d swapped with the last dim */
static tl_status rows_along(const tl_tensor *x, int d, tl_tensor **rows) {
    if (x->ndim == 0 || d == x->ndim - 1) return tl_contiguous((tl_tensor *)x, rows);
    tl_tensor *swapped;
    TL_TRY(tl_transpose((tl_tensor *)x, d, x->ndim - 1, &swapped));
    const tl_status status = tl_contiguous(swapped, rows);
    tl_release(swapped);
    return status;
}

/* rows_along's inverse for a result r of rows (its last dim back at d, contiguous); takes r */
static tl_status back_along(tl_tensor *r, int d, tl_tensor **out) {
    *out = NULL;
    if (r->ndim == 0 || d == r->ndim - 1) {
        *out = r;
        return TL_OK;
    }
    tl_tensor *swapped;
    tl_status status = tl_transpose(r, d, r->ndim - 1, &swapped);
    tl_release(r);
    if (status != TL_OK) return status;
    status = tl_contiguous(swapped, out);
    tl_release(swapped);
    return status;
}

/* runs op's kernel of dtype on {out0, out1} (out1 may be NULL) from {a, b} (b may be NULL) */
static tl_status run_kernel(tl_op op, tl_dtype dtype, tl_tensor *out0, tl_tensor *out1,
                            const tl_tensor *a, const tl_tensor *b, tl_op_args args) {
    const tl_tensor *traced[5] = {out0};
    int n = 1;
    if (out1) traced[n++] = out1;
    traced[n++] = a;
    if (b) traced[n++] = b;
    const tl_kernel_entry *kernel = tl_dispatch(op, tl_tensor_device(a), dtype, traced);
    if (!kernel) return tl_dispatch_status();
    return kernel->fn.tensors((tl_tensor *const[]){out0, out1}, (const tl_tensor *const[]){a, b},
                              &args);
}

/* the size of x along d (a 0-dim tensor: 1) */
static int64_t size_along(const tl_tensor *x, int d) {
    return x->ndim ? x->shape[d] : 1;
}

/* values and indices of rows along d with `length` elements per row (op sort or topk) */
static tl_status select_rows(tl_op op, const tl_tensor *x, int d, int64_t length, tl_op_args args,
                             tl_tensor **values, tl_tensor **indices) {
    tl_tensor *rows, *v = NULL, *i = NULL;
    TL_TRY(rows_along(x, d, &rows));
    int64_t shape[TL_MAX_DIMS];
    for (int k = 0; k < rows->ndim; k++) shape[k] = rows->shape[k];
    if (rows->ndim) shape[rows->ndim - 1] = length;
    const tl_device device = tl_tensor_device(x);
    tl_status status = tl_empty(shape, rows->ndim, x->dtype, device, &v);
    if (status == TL_OK) status = tl_empty(shape, rows->ndim, TL_I64, device, &i);
    if (status == TL_OK && tl_numel(v) > 0)
        status = run_kernel(op, x->dtype, v, i, rows, NULL, args);
    tl_release(rows);
    if (status != TL_OK) {
        tl_release(v), tl_release(i);
        return status;
    }
    status = back_along(v, d, values);
    if (status != TL_OK) {
        tl_release(i);
        return status;
    }
    status = back_along(i, d, indices);
    if (status != TL_OK) tl_release(*values);
    return status;
}

tl_status tl_sort_from(const tl_tensor *x, int dim, bool descending, int64_t base,
                       tl_tensor **values, tl_tensor **indices) {
    TL_TRY(tl_check_tensor_arg("sort", "x", x));
    int d;
    TL_TRY(tl_wrap_dim("sort", dim, x->ndim, &d));
    if (base < -(1LL << 52) || base > (1LL << 52)) /* exact in the kernel's double argument */
        return tl_error(TL_ERR_ARGUMENT, "sort: base must be within 2^52, got %lld",
                        (long long)base);
    const tl_op_args args = {.scalar = {descending ? 1 : 0, (double)base},
                             .dim = x->ndim ? x->ndim - 1 : 0};
    TL_TRY(select_rows(TL_OP_sort, x, d, size_along(x, d), args, values, indices));
    (*indices)->index_base = base;
    return TL_OK;
}

tl_status tl_sort(const tl_tensor *x, int dim, bool descending, tl_tensor **values,
                  tl_tensor **indices) {
    return tl_sort_from(x, dim, descending, 0, values, indices);
}

tl_status tl_argsort_from(const tl_tensor *x, int dim, bool descending, int64_t base,
                          tl_tensor **indices) {
    tl_tensor *values;
    TL_TRY(tl_sort_from(x, dim, descending, base, &values, indices));
    tl_release(values);
    return TL_OK;
}

tl_status tl_argsort(const tl_tensor *x, int dim, bool descending, tl_tensor **indices) {
    return tl_argsort_from(x, dim, descending, 0, indices);
}

tl_status tl_topk(const tl_tensor *x, int64_t k, int dim, bool largest, tl_tensor **values,
                  tl_tensor **indices) {
    TL_TRY(tl_check_tensor_arg("topk", "x", x));
    int d;
    TL_TRY(tl_wrap_dim("topk", dim, x->ndim, &d));
    const int64_t n = size_along(x, d);
    if (k < 0 || k > n)
        return tl_error(TL_ERR_INDEX,
                        "topk: k = %lld is out of range for dim %d of size %lld (expected 0 <= k "
                        "<= %lld)",
                        (long long)k, d + 1, (long long)n, (long long)n);
    if (x->ndim == 0 && k == 0) { /* no element: as torch, a 1-d result of none */
        const int64_t none = 0;
        TL_TRY(tl_empty(&none, 1, x->dtype, tl_tensor_device(x), values));
        const tl_status status = tl_empty(&none, 1, TL_I64, tl_tensor_device(x), indices);
        if (status != TL_OK) tl_release(*values);
        return status;
    }
    const tl_op_args args = {.scalar = {(double)k, largest ? 1 : 0},
                             .dim = x->ndim ? x->ndim - 1 : 0};
    return select_rows(TL_OP_topk, x, d, k, args, values, indices);
}

/* values and indices at sorted position pos (0-based) along d of x sorted ascending, or, with
   nan_first (median), at the first NaN of a row that has one; keepdim or d removed */
static tl_status sorted_at(const tl_tensor *x, int d, int64_t pos, bool nan_first, bool keepdim,
                           tl_tensor **values, tl_tensor **indices) {
    tl_tensor *sv = NULL, *si = NULL, *v = NULL, *i = NULL;
    *values = NULL;
    tl_tensor *nan = NULL, *nans = NULL, *first = NULL, *has = NULL, *posn = NULL, *at = NULL;
    tl_status status = tl_sort(x, d, false, &sv, &si);
    const bool narrow = !nan_first || !tl_dtype_is_floating(x->dtype) || x->ndim == 0;
    if (status == TL_OK && x->ndim == 0) { /* one element */
        v = tl_retain(sv);
        i = tl_retain(si);
    } else if (status == TL_OK && narrow) { /* the same position in every row */
        status = tl_narrow(sv, d, pos, 1, &v);
        if (status == TL_OK) status = tl_narrow(si, d, pos, 1, &i);
    } else if (status == TL_OK) {
        /* a row with c NaNs sorts them last: its first NaN is at n - c */
        const int64_t n = x->shape[d];
        status = tl_ne(x, x, &nan);
        if (status == TL_OK) status = tl_count_nonzero_dims(nan, &d, 1, true, 0, &nans);
        if (status == TL_OK) status = tl_scalar_tensor(tl_scalar_int(n), nans, &posn);
        if (status == TL_OK) status = tl_sub(posn, nans, &first);
        tl_release(posn), posn = NULL;
        if (status == TL_OK) status = tl_scalar_tensor(tl_scalar_int(0), nans, &at);
        if (status == TL_OK) status = tl_gt(nans, at, &has);
        tl_release(at), at = NULL;
        if (status == TL_OK) status = tl_scalar_tensor(tl_scalar_int(pos), nans, &posn);
        if (status == TL_OK) status = tl_where(has, first, posn, &at);
        if (status == TL_OK) status = tl_gather(sv, d, at, &v);
        if (status == TL_OK) status = tl_gather(si, d, at, &i);
    }
    tl_release(sv), tl_release(si), tl_release(nan), tl_release(nans), tl_release(first);
    tl_release(has), tl_release(posn), tl_release(at);
    if (status == TL_OK && !keepdim && x->ndim > 0) {
        tl_tensor *sq;
        status = tl_squeeze(v, d, &sq);
        if (status == TL_OK) tl_release(v), v = sq;
        if (status == TL_OK) status = tl_squeeze(i, d, &sq);
        if (status == TL_OK) tl_release(i), i = sq;
    }
    /* results of their own, not views into the sorted copies */
    if (status == TL_OK) status = tl_clone(v, values);
    if (status == TL_OK) status = tl_clone(i, indices);
    if (status != TL_OK && *values) tl_release(*values);
    tl_release(v), tl_release(i);
    return status;
}

tl_status tl_kthvalue(const tl_tensor *x, int64_t k, int dim, bool keepdim, tl_tensor **values,
                      tl_tensor **indices) {
    TL_TRY(tl_check_tensor_arg("kthvalue", "x", x));
    int d;
    TL_TRY(tl_wrap_dim("kthvalue", dim, x->ndim, &d));
    const int64_t n = size_along(x, d);
    if (k < 1 || k > n)
        return tl_error(TL_ERR_INDEX,
                        "kthvalue: k = %lld is out of range for dim %d of size %lld (expected 1 "
                        "<= k <= %lld)",
                        (long long)k, d + 1, (long long)n, (long long)n);
    return sorted_at(x, d, k - 1, false, keepdim, values, indices);
}

tl_status tl_median_dim(const tl_tensor *x, int dim, bool keepdim, tl_tensor **values,
                        tl_tensor **indices) {
    TL_TRY(tl_check_tensor_arg("median", "x", x));
    int d;
    TL_TRY(tl_wrap_dim("median", dim, x->ndim, &d));
    const int64_t n = size_along(x, d);
    if (n == 0)
        return tl_error(TL_ERR_SHAPE, "median: dim %d has no element (expected a size >= 1)",
                        d + 1);
    return sorted_at(x, d, (n - 1) / 2, true, keepdim, values, indices);
}

tl_status tl_median_all(const tl_tensor *x, tl_tensor **out) {
    TL_TRY(tl_check_tensor_arg("median", "x", x));
    if (tl_numel(x) == 0) { /* as torch: NaN, for a floating x */
        if (!tl_dtype_is_floating(x->dtype))
            return tl_error(TL_ERR_SHAPE, "median: x of %s has no element",
                            tl_dtype_name(x->dtype));
        return tl_full(NULL, 0, tl_scalar_float(NAN), x->dtype, tl_tensor_device(x), out);
    }
    tl_tensor *flat, *indices;
    TL_TRY(tl_reshape((tl_tensor *)x, (const int64_t[]){tl_numel(x)}, 1, &flat));
    const tl_status status = tl_median_dim(flat, 0, false, out, &indices);
    tl_release(flat);
    if (status == TL_OK) tl_release(indices);
    return status;
}

/* ---- unique: x's distinct values, sorted (each NaN its own), from one sort ---------------- */
tl_status tl_unique(const tl_tensor *x, bool want_inverse, bool want_counts, tl_tensor **values,
                    tl_tensor **inverse, tl_tensor **counts) {
    TL_TRY(tl_check_tensor_arg("unique", "x", x));
    const int64_t n = tl_numel(x);
    const tl_device device = tl_tensor_device(x);
    tl_tensor *flat = NULL, *sv = NULL, *si = NULL, *later = NULL, *earlier = NULL, *change = NULL;
    tl_tensor *head = NULL, *starts_mask = NULL, *coords = NULL, *starts = NULL, *v = NULL;
    tl_tensor *inv = NULL, *cnt = NULL, *tmp = NULL, *tmp2 = NULL, *one = NULL;
    tl_status status = tl_reshape((tl_tensor *)x, (const int64_t[]){n}, 1, &flat);
    if (status == TL_OK && n == 0) {
        status = tl_clone(flat, &v);
        if (status == TL_OK && want_inverse)
            status = tl_empty(x->shape, x->ndim, TL_I64, device, &inv);
        if (status == TL_OK && want_counts) status = tl_empty(&n, 1, TL_I64, device, &cnt);
        goto done;
    }
    if (status == TL_OK) status = tl_sort(flat, 0, false, &sv, &si);
    /* a group starts where a sorted value differs from the one before it (NaN != NaN) */
    if (status == TL_OK) status = tl_narrow(sv, 0, 1, n - 1, &later);
    if (status == TL_OK) status = tl_narrow(sv, 0, 0, n - 1, &earlier);
    if (status == TL_OK) status = tl_ne(later, earlier, &change);
    if (status == TL_OK)
        status = tl_full((const int64_t[]){1}, 1, tl_scalar_bool(true), TL_BOOL, device, &head);
    if (status == TL_OK) status = tl_cat((tl_tensor *[]){head, change}, 2, 0, &starts_mask);
    if (status == TL_OK) status = tl_nonzero(starts_mask, &coords); /* waits for the count */
    if (status == TL_OK)
        status = tl_reshape(coords, (const int64_t[]){coords->shape[0]}, 1, &starts);
    if (status == TL_OK) status = tl_gather(sv, 0, starts, &v);
    if (status == TL_OK &&
        want_counts) { /* the next group's start (n for the last) minus one's own */
        const int64_t u = starts->shape[0];
        status = tl_narrow(starts, 0, 1, u - 1, &tmp);
        if (status == TL_OK)
            status = tl_full((const int64_t[]){1}, 1, tl_scalar_int(n), TL_I64, device, &tmp2);
        if (status == TL_OK) status = tl_cat((tl_tensor *[]){tmp, tmp2}, 2, 0, &one);
        if (status == TL_OK) status = tl_sub(one, starts, &cnt);
        tl_release(tmp), tl_release(tmp2), tl_release(one);
        tmp = tmp2 = one = NULL;
    }
    if (status == TL_OK && want_inverse) { /* group number of each sorted position, put back */
        tl_tensor *groups = NULL, *zeros = NULL, *placed = NULL;
        status = tl_cumsum(starts_mask, 0, &tmp);
        if (status == TL_OK) status = tl_scalar_tensor(tl_scalar_int(1), tmp, &one);
        if (status == TL_OK) status = tl_sub(tmp, one, &groups);
        if (status == TL_OK) status = tl_zeros(&n, 1, TL_I64, device, &zeros);
        if (status == TL_OK) status = tl_scatter_add(zeros, 0, si, groups, &placed);
        if (status == TL_OK) status = tl_reshape(placed, x->shape, x->ndim, &inv);
        tl_release(groups), tl_release(zeros), tl_release(placed);
    }
done:
    tl_release(flat), tl_release(sv), tl_release(si), tl_release(later), tl_release(earlier);
    tl_release(change), tl_release(head), tl_release(starts_mask), tl_release(coords);
    tl_release(starts), tl_release(tmp), tl_release(one);
    if (status != TL_OK) {
        tl_release(v), tl_release(inv), tl_release(cnt);
        return status;
    }
    *values = v;
    if (inverse)
        *inverse = inv;
    else
        tl_release(inv);
    if (counts)
        *counts = cnt;
    else
        tl_release(cnt);
    return TL_OK;
}

/* ---- searchsorted ----------------------------------------------------------------------- */
tl_status tl_searchsorted(const tl_tensor *sorted, const tl_tensor *values, bool right,
                          tl_tensor **out) {
    const char *op = "searchsorted";
    TL_TRY(tl_check_tensor_arg(op, "sorted", sorted));
    TL_TRY(tl_check_tensor_arg(op, "values", values));
    if (sorted->ndim == 0)
        return tl_error(TL_ERR_SHAPE, "%s: sorted must have at least one dim, got a 0-dim tensor",
                        op);
    if (sorted->dtype == TL_BOOL)
        return tl_error(TL_ERR_DTYPE, "%s: sorted must be a numeric tensor, got bool", op);
    if (values->dtype != sorted->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: values must have sorted's dtype %s, got %s", op,
                        tl_dtype_name(sorted->dtype), tl_dtype_name(values->dtype));
    if (!tl_device_equal(tl_tensor_device(sorted), tl_tensor_device(values))) {
        char ds[16], dv[16];
        return tl_error(TL_ERR_DEVICE, "%s: values are on %s but sorted is on %s", op,
                        tl_device_name(tl_tensor_device(values), dv),
                        tl_device_name(tl_tensor_device(sorted), ds));
    }
    if (sorted->ndim > 1) { /* batched: one row of sorted per row of values */
        bool fits = values->ndim == sorted->ndim;
        for (int d = 0; fits && d < sorted->ndim - 1; d++)
            fits = values->shape[d] == sorted->shape[d];
        if (!fits) {
            char ss[256], sv[256];
            return tl_error(TL_ERR_SHAPE,
                            "%s: values (shape %s) must have the leading dims of sorted (shape %s)",
                            op, tl_shape_str(values, sv, sizeof sv),
                            tl_shape_str(sorted, ss, sizeof ss));
        }
    }
    tl_tensor *s = NULL, *v = NULL, *o = NULL;
    tl_status status = tl_contiguous((tl_tensor *)sorted, &s);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)values, &v);
    if (status == TL_OK)
        status = tl_empty(values->shape, values->ndim, TL_I64, tl_tensor_device(values), &o);
    if (status == TL_OK && tl_numel(o) > 0)
        status = run_kernel(TL_OP_searchsorted, sorted->dtype, o, NULL, s, v,
                            (tl_op_args){.scalar = {right ? 1 : 0}});
    tl_release(s), tl_release(v);
    if (status != TL_OK) {
        tl_release(o);
        return status;
    }
    *out = o;
    return TL_OK;
}

/* ---- bincount ------------------------------------------------------------------------------ */
tl_status tl_bincount(const tl_tensor *bins, const tl_tensor *weights, int64_t minlength,
                      tl_tensor **out) {
    const char *op = "bincount";
    TL_TRY(tl_check_tensor_arg(op, "bins", bins));
    if (bins->dtype != TL_I64 && bins->dtype != TL_I32)
        return tl_error(TL_ERR_DTYPE, "%s: bins must be an int64 or int32 tensor, got %s", op,
                        tl_dtype_name(bins->dtype));
    if (bins->ndim != 1)
        return tl_error(TL_ERR_SHAPE, "%s: bins must be a 1-d tensor, got %d dims", op, bins->ndim);
    if (minlength < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: minlength must be >= 0, got %lld", op,
                        (long long)minlength);
    if (weights) {
        TL_TRY(tl_check_tensor_arg(op, "weights", weights));
        if (!tl_dtype_is_floating(weights->dtype))
            return tl_error(TL_ERR_DTYPE, "%s: weights must be a floating tensor, got %s", op,
                            tl_dtype_name(weights->dtype));
        if (weights->ndim != 1 || weights->shape[0] != bins->shape[0]) {
            char sw[256], sb[256];
            return tl_error(TL_ERR_SHAPE, "%s: weights (shape %s) must have bins' shape %s", op,
                            tl_shape_str(weights, sw, sizeof sw),
                            tl_shape_str(bins, sb, sizeof sb));
        }
        if (!tl_device_equal(tl_tensor_device(weights), tl_tensor_device(bins))) {
            char dw[16], db[16];
            return tl_error(TL_ERR_DEVICE, "%s: weights are on %s but bins are on %s", op,
                            tl_device_name(tl_tensor_device(weights), dw),
                            tl_device_name(tl_tensor_device(bins), db));
        }
    }
    /* the length: past the largest value (read back: the host waits, as torch's does) */
    int64_t length = minlength;
    if (tl_numel(bins) > 0) {
        tl_tensor *lo = NULL, *hi = NULL;
        tl_scalar smallest, largest;
        tl_status status = tl_min_all(bins, &lo);
        if (status == TL_OK) status = tl_max_all(bins, &hi);
        if (status == TL_OK) status = tl_item(lo, &smallest);
        if (status == TL_OK) status = tl_item(hi, &largest);
        tl_release(lo), tl_release(hi);
        TL_TRY(status);
        if (tl_scalar_to_int(smallest) < 0)
            return tl_error(TL_ERR_INDEX, "%s: bins must hold values >= 0, got %lld", op,
                            (long long)tl_scalar_to_int(smallest));
        if (tl_scalar_to_int(largest) == INT64_MAX)
            return tl_error(TL_ERR_INDEX, "%s: bins hold %lld, too large for a bin count", op,
                            (long long)INT64_MAX);
        if (tl_scalar_to_int(largest) + 1 > length) length = tl_scalar_to_int(largest) + 1;
    }
    const tl_dtype dtype = !weights ? TL_I64 : weights->dtype == TL_F64 ? TL_F64 : TL_F32;
    tl_tensor *b = NULL, *w = NULL, *o = NULL;
    tl_status status = tl_contiguous((tl_tensor *)bins, &b);
    if (status == TL_OK && weights) status = tl_contiguous((tl_tensor *)weights, &w);
    if (status == TL_OK) status = tl_empty(&length, 1, dtype, tl_tensor_device(bins), &o);
    if (status == TL_OK && length > 0)
        status = run_kernel(TL_OP_bincount, bins->dtype, o, NULL, b, w, (tl_op_args){0});
    tl_release(b), tl_release(w);
    if (status != TL_OK) {
        tl_release(o);
        return status;
    }
    *out = o;
    return TL_OK;
}
