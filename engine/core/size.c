/* Overflow-checked size arithmetic: element counts, byte sizes, ranges and window geometry. */
#include <stdio.h>

#include "core/size.h"

bool tl_size_mul(int64_t a, int64_t b, int64_t *out) {
    int64_t product;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &product) || product > TL_MAX_NUMEL)
        return false;
    *out = product;
    return true;
}

bool tl_size_add(int64_t a, int64_t b, int64_t *out) {
    int64_t sum;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &sum) || sum > TL_MAX_NUMEL) return false;
    *out = sum;
    return true;
}

tl_status tl_shape_numel(const char *op, const int64_t *shape, int ndim, int64_t *numel) {
    if (ndim < 0 || ndim > TL_MAX_DIMS)
        return tl_error(TL_ERR_SHAPE, "%s: expected at most %d dims, got %d", op, TL_MAX_DIMS,
                        ndim);
    int64_t count = 1, extent = 1; /* extent: zeros counted as 1, the largest stride */
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return tl_error(TL_ERR_SHAPE, "%s: size of dim %d must be >= 0, got %lld", op, d + 1,
                            (long long)shape[d]);
        if (!tl_size_mul(extent, shape[d] > 0 ? shape[d] : 1, &extent)) {
            char buf[256];
            tl_format_shape(shape, ndim, buf, sizeof buf);
            return tl_error(TL_ERR_SHAPE,
                            "%s: shape %s has too many elements (at most 2^62, zero sizes "
                            "counted as 1)",
                            op, buf);
        }
        count *= shape[d]; /* <= extent: cannot overflow */
    }
    *numel = count;
    return TL_OK;
}

tl_status tl_size_bytes(const char *op, int64_t numel, tl_dtype dtype, size_t *bytes) {
    int64_t n;
    if (numel < 0 || !tl_size_mul(numel, (int64_t)tl_dtype_size(dtype), &n) ||
        (uint64_t)n > (uint64_t)SIZE_MAX)
        return tl_error(TL_ERR_SHAPE, "%s: %lld elements of %s do not fit in memory", op,
                        (long long)numel, tl_dtype_name(dtype));
    *bytes = (size_t)n;
    return TL_OK;
}

bool tl_range_within(int64_t start, int64_t length, int64_t size) {
    return start >= 0 && length >= 0 && start <= size && length <= size - start;
}

tl_status tl_window_out_size(const char *op, const char *what, int64_t in, int64_t kernel,
                             int64_t stride, int64_t padding, int64_t dilation, bool ceil_mode,
                             int64_t *out) {
    const char *bad = kernel < 1     ? "kernel size"
                      : stride < 1   ? "stride"
                      : dilation < 1 ? "dilation"
                                     : NULL;
    if (bad)
        return tl_error(TL_ERR_ARGUMENT, "%s: %s must be >= 1, got %lld (%s)", op, bad,
                        (long long)(kernel < 1   ? kernel
                                    : stride < 1 ? stride
                                                 : dilation),
                        what);
    if (padding < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: padding must be >= 0, got %lld (%s)", op,
                        (long long)padding, what);
    int64_t padded, twice, span;
    /* span = dilation (kernel - 1) + 1: the extent one window covers */
    if (!tl_size_mul(padding, 2, &twice) || !tl_size_add(in, twice, &padded) ||
        !tl_size_mul(dilation, kernel - 1, &span) || !tl_size_add(span, 1, &span))
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: %s: size %lld with padding %lld, kernel %lld and dilation %lld is "
                        "too large",
                        op, what, (long long)in, (long long)padding, (long long)kernel,
                        (long long)dilation);
    if (span > padded)
        return tl_error(TL_ERR_SHAPE,
                        "%s: %s: the window (kernel %lld, dilation %lld) is larger than the "
                        "padded input (size %lld, padding %lld)",
                        op, what, (long long)kernel, (long long)dilation, (long long)in,
                        (long long)padding);
    int64_t room = padded - span;
    int64_t steps = room / stride;
    if (ceil_mode && room % stride != 0) {
        steps++;
        /* the last window must start inside the input or the left padding */
        if ((steps)*stride >= in + padding) steps--;
    }
    *out = steps + 1;
    return TL_OK;
}
