/* Constructors: full, zeros, ones, from_host, arange, linspace, eye, scalar tensors. */
#include <math.h>
#include <stdlib.h>

#include "storage.h"
#include "tlua/ops.h"

tl_status tl_full(const int64_t *shape, int ndim, tl_scalar value, tl_dtype dtype, tl_device device,
                  tl_tensor **out) {
    tl_tensor *t = NULL;
    tl_status status = tl_empty(shape, ndim, dtype, device, &t);
    if (status == TL_OK) status = tl_fill_(t, value);
    if (status != TL_OK) {
        tl_release(t);
        return status;
    }
    *out = t;
    return TL_OK;
}

tl_status tl_zeros(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                   tl_tensor **out) {
    return tl_full(shape, ndim, tl_scalar_int(0), dtype, device, out);
}

tl_status tl_ones(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                  tl_tensor **out) {
    return tl_full(shape, ndim, tl_scalar_int(1), dtype, device, out);
}

tl_status tl_from_host(const void *data, const int64_t *shape, int ndim, tl_dtype dtype,
                       tl_device device, tl_tensor **out) {
    tl_tensor *t;
    tl_status status = tl_empty(shape, ndim, dtype, device, &t);
    if (status != TL_OK) return status;
    status =
        tl_memcpy(device, tl_data(t), TL_CPU, data, (size_t)tl_numel(t) * tl_dtype_size(dtype));
    if (status != TL_OK) {
        tl_release(t);
        return status;
    }
    *out = t;
    return TL_OK;
}

/* Builds a 1-D tensor on the host from values[i] = f(i), then moves it. */
static tl_status host_sequence(const char *op, int64_t n, double start, double step, tl_dtype dtype,
                               tl_device device, tl_tensor **out) {
    tl_tensor *host;
    tl_status status = tl_empty(&n, 1, dtype, TL_CPU, &host);
    if (status != TL_OK) return status;
    char *data = tl_data(host);
    size_t size = tl_dtype_size(dtype);
    for (int64_t i = 0; i < n; i++) {
        double v = start + (double)i * step;
        tl_scalar s =
            tl_dtype_is_floating(dtype) ? tl_scalar_float(v) : tl_scalar_int((int64_t)llround(v));
        tl_dtype_store(dtype, data + i * (int64_t)size, s);
    }
    (void)op;
    if (device.type == TL_DEVICE_CPU) {
        *out = host;
        return TL_OK;
    }
    status = tl_to(host, dtype, device, out);
    tl_release(host);
    return status;
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
    if (count > 1e12) return tl_error(TL_ERR_ARGUMENT, "arange: %g elements is too many", count);
    return host_sequence("arange", (int64_t)count, start, step, dtype, device, out);
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
    tl_status status = tl_zeros(shape, 2, dtype, TL_CPU, &host);
    if (status != TL_OK) return status;
    for (int64_t i = 0; i < n && i < m; i++) {
        int64_t index[2] = {i, i};
        tl_set(host, index, tl_scalar_int(1));
    }
    if (device.type == TL_DEVICE_CPU) {
        *out = host;
        return TL_OK;
    }
    status = tl_to(host, dtype, device, out);
    tl_release(host);
    return status;
}

tl_status tl_scalar_tensor(tl_scalar value, const tl_tensor *like, tl_tensor **out) {
    tl_dtype dtype = like->dtype;
    if (value.kind == TL_SCALAR_FLOAT && !tl_dtype_is_floating(dtype))
        dtype = TL_F32;
    else if (value.kind == TL_SCALAR_INT && dtype == TL_BOOL)
        dtype = TL_I64;
    return tl_full(NULL, 0, value, dtype, like->storage->device, out);
}
