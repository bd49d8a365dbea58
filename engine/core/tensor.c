/* Tensor lifetime, allocation and the simple queries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "core/storage.h"

tl_tensor *tl_retain(tl_tensor *t) {
    if (t) t->refcount++;
    return t;
}

void tl_release(tl_tensor *t) {
    if (!t || --t->refcount > 0) return;
    if (t->autograd) t->autograd_destroy(t->autograd);
    tl_storage_release(t->storage);
    free(t);
}

void tl_contiguous_strides(const int64_t *shape, int ndim, int64_t *strides) {
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = stride;
        stride *= shape[d] > 0 ? shape[d] : 1;
    }
}

tl_status tl_empty(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                   tl_tensor **out) {
    int64_t numel = 0;
    size_t nbytes = 0;
    if ((unsigned)dtype >= TL_DTYPE_COUNT)
        return tl_error(TL_ERR_DTYPE, "empty: invalid dtype %d", (int)dtype);
    TL_TRY(tl_shape_numel("empty", shape, ndim, &numel));
    TL_TRY(tl_size_bytes("empty", numel, dtype, &nbytes));
    tl_tensor *t = calloc(1, sizeof *t);
    if (!t) return tl_error(TL_ERR_MEMORY, "empty: out of memory allocating a tensor");
    tl_status status = tl_storage_new(device, nbytes, &t->storage);
    /* bool storage holds only 0 and 1: a new bool tensor starts as false */
    if (status == TL_OK && dtype == TL_BOOL && nbytes)
        status = tl_memset_zero(device, t->storage->data, nbytes);
    if (status != TL_OK) {
        tl_storage_release(t->storage);
        free(t);
        return status;
    }
    t->refcount = 1;
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    tl_contiguous_strides(shape, ndim, t->strides);
    *out = t;
    return TL_OK;
}

bool tl_is_pinned(const tl_tensor *t) {
    return t->storage && t->storage->pinned;
}

tl_status tl_empty_pinned(const int64_t *shape, int ndim, tl_dtype dtype, tl_tensor **out) {
    int64_t numel = 0;
    size_t nbytes = 0;
    TL_TRY(tl_shape_numel("pin_memory", shape, ndim, &numel));
    TL_TRY(tl_size_bytes("pin_memory", numel, dtype, &nbytes));
    tl_tensor *p = calloc(1, sizeof *p);
    if (!p) return tl_error(TL_ERR_MEMORY, "pin_memory: out of memory allocating a tensor");
    tl_status status = tl_storage_new_pinned(nbytes, &p->storage);
    if (status != TL_OK) {
        free(p);
        return status;
    }
    p->refcount = 1;
    p->dtype = dtype;
    p->ndim = ndim;
    if (ndim) memcpy(p->shape, shape, (size_t)ndim * sizeof *shape);
    tl_contiguous_strides(p->shape, ndim, p->strides);
    *out = p;
    return TL_OK;
}

tl_status tl_empty_like(const tl_tensor *like, tl_tensor **out) {
    return tl_empty(like->shape, like->ndim, like->dtype, like->storage->device, out);
}

tl_status tl_make_view(const tl_tensor *base, const int64_t *shape, const int64_t *strides,
                       int ndim, int64_t offset, tl_tensor **out) {
    tl_tensor *t = calloc(1, sizeof *t);
    if (!t) return tl_error(TL_ERR_MEMORY, "view: out of memory allocating a tensor");
    t->refcount = 1;
    t->dtype = base->dtype;
    t->ndim = ndim;
    if (ndim) {
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
        memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    }
    t->offset = offset;
    t->index_base = base->index_base;
    t->storage = base->storage;
    tl_storage_retain(t->storage);
    *out = t;
    return TL_OK;
}

int64_t tl_numel(const tl_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

bool tl_is_contiguous(const tl_tensor *t) {
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (t->shape[d] == 0) return true;
        if (t->strides[d] != expected) return false;
        expected *= t->shape[d];
    }
    return true;
}

tl_device tl_tensor_device(const tl_tensor *t) {
    return t->storage->device;
}

void *tl_data(const tl_tensor *t) {
    return (char *)t->storage->data + t->offset * (int64_t)tl_dtype_size(t->dtype);
}

const char *tl_shape_str(const tl_tensor *t, char *buf, int size) {
    return tl_format_shape(t->shape, t->ndim, buf, size);
}

void tl_bump_version(tl_tensor *t) {
    t->storage->version++;
}
