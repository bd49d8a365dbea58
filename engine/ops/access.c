/* Reading and writing single elements, and copying a tensor out to host memory. */
#include <stdlib.h>
#include <string.h>

#include "core/storage.h"
#include "tlua/ops.h"

static tl_status element_offset(const char *op, const tl_tensor *t, const int64_t *index,
                                int64_t *offset) {
    int64_t off = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        int64_t i = index[d], size = t->shape[d];
        if (i < -size || i >= size)
            return tl_error(TL_ERR_INDEX, "%s: index %lld is out of range for dim %d of size %lld",
                            op, (long long)(i >= 0 ? i + 1 : i), d + 1, (long long)size);
        if (i < 0) i += size;
        off += i * t->strides[d];
    }
    *offset = off;
    return TL_OK;
}

tl_status tl_get(const tl_tensor *t, const int64_t *index, tl_scalar *out) {
    int64_t off = 0;
    tl_status status = element_offset("get", t, index, &off);
    if (status != TL_OK) return status;
    size_t size = tl_dtype_size(t->dtype);
    unsigned char element[8];
    status = tl_memcpy(TL_CPU, element, t->storage->device,
                       (char *)t->storage->data + off * (int64_t)size, size);
    if (status != TL_OK) return status;
    *out = tl_dtype_load(t->dtype, element);
    return TL_OK;
}

tl_status tl_set(tl_tensor *t, const int64_t *index, tl_scalar value) {
    int64_t off = 0;
    tl_status status = element_offset("set", t, index, &off);
    if (status == TL_OK) status = tl_scalar_check_fits("set", t->dtype, value);
    if (status != TL_OK) return status;
    size_t size = tl_dtype_size(t->dtype);
    unsigned char element[8];
    tl_dtype_store(t->dtype, element, value);
    status = tl_memcpy(t->storage->device, (char *)t->storage->data + off * (int64_t)size, TL_CPU,
                       element, size);
    if (status == TL_OK) tl_bump_version(t);
    return status;
}

tl_status tl_item(const tl_tensor *t, tl_scalar *out) {
    int64_t numel = tl_numel(t);
    if (numel != 1) {
        char buf[256];
        return tl_error(TL_ERR_SHAPE,
                        "item: expected a tensor with exactly one element, got shape %s (%lld "
                        "elements)",
                        tl_shape_str(t, buf, sizeof buf), (long long)numel);
    }
    int64_t zeros[TL_MAX_DIMS] = {0};
    return tl_get(t, zeros, out);
}

tl_status tl_to_host(const tl_tensor *t, void *dst) {
    tl_tensor *dense;
    tl_status status = tl_contiguous((tl_tensor *)t, &dense);
    if (status != TL_OK) return status;
    status = tl_memcpy(TL_CPU, dst, dense->storage->device, tl_data(dense),
                       (size_t)tl_numel(dense) * tl_dtype_size(dense->dtype));
    tl_release(dense);
    return status;
}
