/* Constructors: full, zeros, ones, from_host, arange (in double or exact in int64), linspace, eye,
   scalar tensors. */
#include <math.h>
#include <stdlib.h>

#include "core/size.h"
#include "core/storage.h"
#include "tlua/ops.h"

tl_status tl_full(const int64_t *shape, int ndim, tl_scalar value, tl_dtype dtype, tl_device device,
                  tl_tensor **out) {
    tl_tensor *t = NULL;
    tl_status status = tl_empty(shape, ndim, dtype, device, &t);
    if (status == TL_OK) status = tl_fill_(t, value);
    if (status != TL_OK) {
        tl_release(t);
        return tl_error_as(status, "full");
    }
    *out = t;
    return TL_OK;
}

tl_status tl_zeros(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                   tl_tensor **out) {
    return tl_error_as(tl_full(shape, ndim, tl_scalar_int(0), dtype, device, out), "zeros");
}

tl_status tl_ones(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                  tl_tensor **out) {
    return tl_error_as(tl_full(shape, ndim, tl_scalar_int(1), dtype, device, out), "ones");
}

tl_status tl_from_host(const void *data, const int64_t *shape, int ndim, tl_dtype dtype,
                       tl_device device, tl_tensor **out) {
    tl_tensor *t;
    tl_status status = tl_empty(shape, ndim, dtype, device, &t);
    if (status != TL_OK) return status;
    status =
        tl_memcpy_constant(device, tl_data(t), data, (size_t)tl_numel(t) * tl_dtype_size(dtype));
    if (status != TL_OK) {
        tl_release(t);
        return status;
    }
    *out = t;
    return TL_OK;
}

/* Checks that the values first .. last (a monotonic sequence of doubles) round to integers of
   dtype (int32 or int64), so that llround and the store are defined for every one. */
static tl_status check_integer_values(const char *op, double first, double last, tl_dtype dtype) {
    double lo = dtype == TL_I32 ? -2147483648.5 : -0x1p63;
    double hi = dtype == TL_I32 ? 2147483647.5 : 0x1p63;
    bool fits = first >= lo && first < hi && last >= lo && last < hi;
    if (!fits)
        return tl_error(TL_ERR_ARGUMENT, "%s: values from %g to %g do not fit %s", op, first, last,
                        tl_dtype_name(dtype));
    return TL_OK;
}

/* The values of host (a contiguous CPU tensor the op built from its arguments) on device, as a
   new tensor; host released (tl_memcpy_constant: a graph's capture keeps them). */
static tl_status on_device(tl_tensor *host, tl_device device, tl_tensor **out) {
    if (device.type == TL_DEVICE_CPU) {
        *out = host;
        return TL_OK;
    }
    tl_status status =
        tl_from_host(tl_data(host), host->shape, host->ndim, host->dtype, device, out);
    tl_release(host);
    return status;
}

/* Builds a 1-D tensor on the host from values[i] = start + i * step (in double), then moves
   it. Integer dtypes get the values rounded to nearest. */
static tl_status host_sequence(const char *op, int64_t n, double start, double step, tl_dtype dtype,
                               tl_device device, tl_tensor **out) {
    bool floating = tl_dtype_is_floating(dtype);
    if (!floating && n > 0)
        TL_TRY(check_integer_values(op, start, start + (double)(n - 1) * step, dtype));
    tl_tensor *host;
    TL_TRY(tl_error_as(tl_empty(&n, 1, dtype, TL_CPU, &host), op));
    char *data = tl_data(host);
    size_t size = tl_dtype_size(dtype);
    for (int64_t i = 0; i < n; i++) {
        double v = start + (double)i * step;
        tl_scalar s = floating ? tl_scalar_float(v) : tl_scalar_int((int64_t)llround(v));
        tl_dtype_store(dtype, data + i * (int64_t)size, s);
    }
    return tl_error_as(on_device(host, device, out), op);
}

tl_status tl_arange(double start, double end, double step, tl_dtype dtype, tl_device device,
                    tl_tensor **out) {
    if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
        return tl_error(TL_ERR_ARGUMENT,
                        "arange: expected finite start, end and a non-zero step, got %g, %g, %g",
                        start, end, step);
    if ((step > 0 && end < start) || (step < 0 && end > start))
        return tl_error(TL_ERR_ARGUMENT, "arange: step %g goes away from end %g (start %g)", step,
                        end, start);
    if (dtype == TL_BOOL) return tl_error(TL_ERR_DTYPE, "arange: dtype bool is not supported");
    double count = ceil((end - start) / step);
    if (!(count <= (double)TL_MAX_NUMEL))
        return tl_error(TL_ERR_ARGUMENT,
                        "arange: the range from %g to %g by %g has %g elements, more than the "
                        "limit of %lld",
                        start, end, step, count, (long long)TL_MAX_NUMEL);
    return host_sequence("arange", (int64_t)count, start, step, dtype, device, out);
}

/* u modulo 2^64 as int64 (two's complement), with no implementation-defined conversion */
static int64_t wrap_to_i64(uint64_t u) {
    return u <= INT64_MAX ? (int64_t)u : -(int64_t)(UINT64_MAX - u) - 1;
}

/* ceil((end - start) / step) for any int64 operands, in uint64 (the distance of two int64
   values and the magnitude of any step fit there). */
static tl_status int_range_count(int64_t start, int64_t end, int64_t step, int64_t *count) {
    if (step == 0) return tl_error(TL_ERR_ARGUMENT, "arange: expected a non-zero step, got 0");
    if ((step > 0 && end < start) || (step < 0 && end > start))
        return tl_error(TL_ERR_ARGUMENT, "arange: step %lld goes away from end %lld (start %lld)",
                        (long long)step, (long long)end, (long long)start);
    uint64_t distance =
        step > 0 ? (uint64_t)end - (uint64_t)start : (uint64_t)start - (uint64_t)end;
    uint64_t stride = step > 0 ? (uint64_t)step : 0u - (uint64_t)step;
    uint64_t n = distance / stride + (distance % stride != 0);
    if (n > (uint64_t)TL_MAX_NUMEL)
        return tl_error(TL_ERR_ARGUMENT,
                        "arange: the range from %lld to %lld by %lld has %llu elements, more than "
                        "the limit of %lld",
                        (long long)start, (long long)end, (long long)step, (unsigned long long)n,
                        (long long)TL_MAX_NUMEL);
    *count = (int64_t)n;
    return TL_OK;
}

tl_status tl_arange_int(int64_t start, int64_t end, int64_t step, tl_dtype dtype, tl_device device,
                        tl_tensor **out) {
    if ((unsigned)dtype >= TL_DTYPE_COUNT)
        return tl_error(TL_ERR_DTYPE, "arange: invalid dtype %d", (int)dtype);
    if (dtype == TL_BOOL) return tl_error(TL_ERR_DTYPE, "arange: dtype bool is not supported");
    int64_t n;
    TL_TRY(int_range_count(start, end, step, &n));
    /* every value lies between start and end, so start + i * step modulo 2^64 is exact */
    uint64_t first = (uint64_t)start, stride = (uint64_t)step;
    if (dtype == TL_I32 && n > 0) {
        int64_t last = wrap_to_i64(first + (uint64_t)(n - 1) * stride);
        int64_t lo = start < last ? start : last, hi = start < last ? last : start;
        if (lo < INT32_MIN || hi > INT32_MAX)
            return tl_error(TL_ERR_ARGUMENT,
                            "arange: values from %lld to %lld do not fit int32 (expected %d to %d)",
                            (long long)start, (long long)last, INT32_MIN, INT32_MAX);
    }
    tl_tensor *host;
    TL_TRY(tl_error_as(tl_empty(&n, 1, TL_I64, TL_CPU, &host), "arange"));
    int64_t *values = tl_data(host);
    for (int64_t i = 0; i < n; i++) values[i] = wrap_to_i64(first + (uint64_t)i * stride);
    if (dtype == TL_I64 && device.type == TL_DEVICE_CPU) {
        *out = host;
        return TL_OK;
    }
    /* other dtypes: the exact int64 values cast once (rounded to nearest for floats) */
    tl_tensor *cast = host;
    if (dtype != TL_I64) {
        tl_status status = tl_to(host, dtype, TL_CPU, &cast);
        tl_release(host);
        if (status != TL_OK) return tl_error_as(status, "arange");
    }
    return tl_error_as(on_device(cast, device, out), "arange");
}

tl_status tl_linspace(double start, double end, int64_t steps, tl_dtype dtype, tl_device device,
                      tl_tensor **out) {
    if (steps < 0)
        return tl_error(TL_ERR_ARGUMENT, "linspace: steps must be >= 0, got %lld",
                        (long long)steps);
    if (dtype == TL_BOOL) return tl_error(TL_ERR_DTYPE, "linspace: dtype bool is not supported");
    double step = steps > 1 ? (end - start) / (double)(steps - 1) : 0;
    return host_sequence("linspace", steps, start, step, dtype, device, out);
}

tl_status tl_eye(int64_t n, int64_t m, tl_dtype dtype, tl_device device, tl_tensor **out) {
    if (n < 0 || m < 0)
        return tl_error(TL_ERR_ARGUMENT, "eye: sizes must be >= 0, got %lld x %lld", (long long)n,
                        (long long)m);
    int64_t shape[2] = {n, m};
    tl_tensor *host;
    TL_TRY(tl_error_as(tl_zeros(shape, 2, dtype, TL_CPU, &host), "eye"));
    for (int64_t i = 0; i < n && i < m; i++) {
        int64_t index[2] = {i, i};
        tl_set(host, index, tl_scalar_int(1));
    }
    return tl_error_as(on_device(host, device, out), "eye");
}

tl_status tl_scalar_tensor(tl_scalar value, const tl_tensor *like, tl_tensor **out) {
    tl_dtype dtype = like->dtype;
    if (value.kind == TL_SCALAR_FLOAT && !tl_dtype_is_floating(dtype))
        dtype = TL_F32;
    else if (value.kind == TL_SCALAR_INT && dtype == TL_BOOL)
        dtype = TL_I64;
    return tl_full(NULL, 0, value, dtype, like->storage->device, out);
}
