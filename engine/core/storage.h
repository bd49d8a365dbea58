/* Internal: storage allocation, views over a storage, and byte copies across devices. */
#ifndef TLUA_STORAGE_H
#define TLUA_STORAGE_H

#include <stddef.h>

#include "tlua/tensor.h"

/* 64-byte aligned (CPU) device memory of nbytes, refcount 1. */
tl_status tl_storage_new(tl_device device, size_t nbytes, tl_storage **out);
/* An uninitialised contiguous CPU tensor in pinned host memory (tl_storage_new_pinned). */
tl_status tl_empty_pinned(const int64_t *shape, int ndim, tl_dtype dtype, tl_tensor **out);
/* nbytes of pinned host memory (CPU device), refcount 1; an error without CUDA. */
tl_status tl_storage_new_pinned(size_t nbytes, tl_storage **out);
void tl_storage_retain(tl_storage *s);
void tl_storage_release(tl_storage *s);

/* A new tensor over base's storage with the given geometry (shares storage). */
tl_status tl_make_view(const tl_tensor *base, const int64_t *shape, const int64_t *strides,
                       int ndim, int64_t offset, tl_tensor **out);

/* Sets n bytes at dst (memory of device) to zero. */
tl_status tl_memset_zero(tl_device device, void *dst, size_t n);

/* Copies n bytes between any two devices (host <-> device, device <-> device). */
tl_status tl_memcpy(tl_device dst_device, void *dst, tl_device src_device, const void *src,
                    size_t n);
/* Copies n bytes of host memory that an op computed from its arguments alone (a constructor's
   values, an index list made from shapes) to dst on dst_device. As tl_memcpy, except during a
   CUDA graph's capture, where the bytes are kept for the graph (tl_cuda_stage): each replay
   writes the same values, as the op run again would. Never for tensor data, which may change
   between replays (tl_memcpy refuses that during a capture). */
tl_status tl_memcpy_constant(tl_device dst_device, void *dst, const void *src, size_t n);

#endif
