/* Tensors: reference-counted storage, shape, strides, offset; creation and views. */
#ifndef TLUA_TENSOR_H
#define TLUA_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "tlua/device.h"
#include "tlua/dtype.h"
#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_MAX_DIMS 16

/* A block of device memory shared by a tensor and its views. `version` counts
   in-place writes to it; autograd compares it with the version it saved. */
typedef struct tl_storage {
    void *data;
    void *block; /* on the CPU: the allocation data lies in (freed in its place) */
    size_t nbytes;
    tl_device device;
    int refcount;
    uint64_t version;
    struct tl_memory_budget *budget; /* charged with nbytes (tlua/runtime.h), or NULL */
    bool pinned; /* CPU memory page-locked for fast, asynchronous copies to a GPU */
} tl_storage;

struct tl_autograd_meta;
/* Frees a tensor's autograd data; set by the autograd layer with the data. */
typedef void (*tl_autograd_meta_destroy)(struct tl_autograd_meta *meta);

/* A strided view of a storage. Fields are read-only for users: change them
   only through the functions below. Strides and offset count elements. */
typedef struct tl_tensor {
    int refcount;
    tl_dtype dtype;
    int ndim;
    int64_t shape[TL_MAX_DIMS];
    int64_t strides[TL_MAX_DIMS];
    int64_t offset;
    tl_storage *storage;
    /* An index tensor's first position: its values count from here (0 in C; 1 for the Lua
       binding's views of its arguments, tl_index_view). Views and copies keep it. */
    int64_t index_base;
    struct tl_autograd_meta *autograd; /* NULL unless autograd uses this tensor */
    tl_autograd_meta_destroy autograd_destroy;
} tl_tensor;

/* ---- lifetime ---------------------------------------------------------- */
tl_tensor *tl_retain(tl_tensor *t);
/* Drops one reference; frees the tensor (and its storage when last). NULL is fine. */
void tl_release(tl_tensor *t);

/* ---- creation (dims are 0-based in C) ----------------------------------- */
tl_status tl_empty(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                   tl_tensor **out);
tl_status tl_full(const int64_t *shape, int ndim, tl_scalar value, tl_dtype dtype, tl_device device,
                  tl_tensor **out);
tl_status tl_zeros(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                   tl_tensor **out);
tl_status tl_ones(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                  tl_tensor **out);
/* An empty tensor with the shape, dtype and device of `like` (contiguous). */
tl_status tl_empty_like(const tl_tensor *like, tl_tensor **out);
/* A copy of CPU tensor t in pinned (page-locked) host memory, from which a copy to a GPU runs
   while the host goes on (t:to("cuda") after it does not wait); an error in a build or machine
   without CUDA. t itself when it is pinned already (a new reference). */
tl_status tl_pin_memory(const tl_tensor *t, tl_tensor **out);
/* Whether t's storage is pinned host memory. */
bool tl_is_pinned(const tl_tensor *t);
/* Copies `numel` elements of `dtype` from host memory into a new tensor. */
tl_status tl_from_host(const void *data, const int64_t *shape, int ndim, tl_dtype dtype,
                       tl_device device, tl_tensor **out);
/* start, start+step, ... while < end (> end for a negative step). */
tl_status tl_arange(double start, double end, double step, tl_dtype dtype, tl_device device,
                    tl_tensor **out);
tl_status tl_linspace(double start, double end, int64_t steps, tl_dtype dtype, tl_device device,
                      tl_tensor **out);
tl_status tl_eye(int64_t n, int64_t m, tl_dtype dtype, tl_device device, tl_tensor **out);
/* A 0-dim tensor holding `value`, with the dtype a binary op with `like`
   should see (a Lua 2 next to a float32 tensor is float32, 2.5 next to an
   int32 tensor is float32, ...), on like's device. */
tl_status tl_scalar_tensor(tl_scalar value, const tl_tensor *like, tl_tensor **out);

/* ---- queries ------------------------------------------------------------ */
int64_t tl_numel(const tl_tensor *t);
bool tl_is_contiguous(const tl_tensor *t);
tl_device tl_tensor_device(const tl_tensor *t);
/* Address of element 0 of the view. */
void *tl_data(const tl_tensor *t);
/* Writes "[2, 3]" into buf (size bytes) and returns buf. */
const char *tl_shape_str(const tl_tensor *t, char *buf, int size);
/* The same for a shape given as sizes: "[2, 3]". */
const char *tl_format_shape(const int64_t *shape, int ndim, char *buf, int size);
/* Contiguous row-major strides for shape. */
void tl_contiguous_strides(const int64_t *shape, int ndim, int64_t *strides);
/* Bumps the storage version (after an in-place write). */
void tl_bump_version(tl_tensor *t);

/* ---- element access (the tensor may live on any device) ----------------- */
tl_status tl_item(const tl_tensor *t, tl_scalar *out); /* exactly one element */
tl_status tl_get(const tl_tensor *t, const int64_t *index, tl_scalar *out);
tl_status tl_set(tl_tensor *t, const int64_t *index, tl_scalar value);
/* Copies the elements, in row-major order, as `t->dtype`, into host memory. */
tl_status tl_to_host(const tl_tensor *t, void *dst);

/* ---- views: share storage with the input -------------------------------- */
/* shape may hold one -1, inferred. Fails if the strides cannot express it. */
tl_status tl_view(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out);
/* Like view, but copies when the strides require it. */
tl_status tl_reshape(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out);
tl_status tl_transpose(tl_tensor *t, int dim0, int dim1, tl_tensor **out);
tl_status tl_permute(tl_tensor *t, const int *dims, int ndim, tl_tensor **out);
tl_status tl_narrow(tl_tensor *t, int dim, int64_t start, int64_t length, tl_tensor **out);
tl_status tl_select(tl_tensor *t, int dim, int64_t index, tl_tensor **out);
/* Removes dim if its size is 1 (a no-op view otherwise). */
tl_status tl_squeeze(tl_tensor *t, int dim, tl_tensor **out);
/* Removes every dim of size 1. */
tl_status tl_squeeze_all(tl_tensor *t, tl_tensor **out);
tl_status tl_unsqueeze(tl_tensor *t, int dim, tl_tensor **out);
/* Broadcasts size-1 dims (and new leading dims) to shape; -1 keeps a size. */
tl_status tl_expand(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out);
tl_status tl_flatten(tl_tensor *t, int start_dim, int end_dim, tl_tensor **out);
/* The diagonal of dims dim1 and dim2 (offset > 0: above it, in dim2's direction; < 0: below),
   those dims removed and the diagonal appended as the last dim, as torch.diagonal. */
tl_status tl_diagonal(tl_tensor *t, int64_t offset, int dim1, int dim2, tl_tensor **out);
/* The windows of size elements, step apart, along dim (torch's Tensor.unfold): dim's size n
   becomes the window count (n - size) / step + 1 and a last dim of size is appended; window w
   holds elements w * step .. w * step + size - 1. 0 <= size <= n, step > 0. */
tl_status tl_unfold(tl_tensor *t, int dim, int64_t size, int64_t step, tl_tensor **out);
/* dims from[i] moved to positions to[i] (n pairs), the others keeping their order (a
   permute), as torch.movedim. */
tl_status tl_movedim(tl_tensor *t, const int *from, const int *to, int n, tl_tensor **out);
/* A view of the int64 or int32 tensor t whose values count positions from base (its
   index_base): the index ops read value v as position v - base and check base <= v <
   base + size. The Lua binding passes its 1-based index arguments this way, unshifted. */
tl_status tl_index_view(tl_tensor *t, int64_t base, tl_tensor **out);
/* The tensor itself (retained) if contiguous, else a contiguous copy. */
tl_status tl_contiguous(tl_tensor *t, tl_tensor **out);
/* A contiguous copy with its own storage. */
tl_status tl_clone(const tl_tensor *t, tl_tensor **out);

/* ---- shapes ------------------------------------------------------------- */
/* NumPy broadcasting of two shapes; names op in the error. */
tl_status tl_broadcast_shapes(const char *op, const int64_t *a, int na, const int64_t *b, int nb,
                              int64_t *out, int *nout);
/* Error messages speak to Lua users: dims count from 1 (negative ones from
   the end, as given). This turns a 0-based C dim into that form. */
#define TL_DIM_FOR_USER(dim) ((dim) >= 0 ? (dim) + 1 : (dim))
/* Normalises a 0-based dim that may be negative (-1 = last) against ndim. */
tl_status tl_wrap_dim(const char *op, int dim, int ndim, int *out);

#ifdef __cplusplus
}
#endif

#endif
