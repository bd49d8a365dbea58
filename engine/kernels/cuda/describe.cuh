/* Internal: how a CUDA kernel file (engine/kernels/cuda/x.cu) turns the tensors its table's
   functions get into the plain descriptions its launches take: dtypes, data pointers, where the
   kernel runs (tl_cuda_where_of of ops_launch.h), the positions of a dim-wise op, the merged
   geometry of elementwise operands. One set of helpers for every kernel file. */
#ifndef TLUA_CUDA_DESCRIBE_CUH
#define TLUA_CUDA_DESCRIBE_CUH

#include <initializer_list>

#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops_launch.h"

static_assert(TL_CUDA_F32 == (int)TL_F32 && TL_CUDA_F64 == (int)TL_F64 &&
                  TL_CUDA_BF16 == (int)TL_BF16 && TL_CUDA_F16 == (int)TL_F16 &&
                  TL_CUDA_I32 == (int)TL_I32 && TL_CUDA_I64 == (int)TL_I64 &&
                  TL_CUDA_BOOL == (int)TL_BOOL && TL_CUDA_DTYPE_COUNT == (int)TL_DTYPE_COUNT,
              "launch.h mirrors tl_dtype");
static_assert(TL_CUDA_DIMS == TL_MAX_DIMS, "launch.h mirrors TL_MAX_DIMS");

/* t's dtype as the TL_CUDA_* value the device code dispatches on. */
static inline int tl_cuda_dtype_of(const tl_tensor *t) {
    return (int)t->dtype;
}

/* t's first element as a T (void by default), or NULL where the tensor is absent. */
template <typename T = void> static inline T *tl_cuda_data(const tl_tensor *t) {
    return t ? static_cast<T *>(tl_data(t)) : nullptr;
}

/* The positions of a dim-wise op over the dims of shape_of other than skip (-1: none), with the
   strides of up to three tensors, in order (a NULL tensor: zero strides); tl_cuda_positions_make
   of ops_launch.h orders and merges the dims. */
static inline void tl_cuda_positions_of(tl_cuda_positions *p, const tl_tensor *shape_of, int skip,
                                        std::initializer_list<const tl_tensor *> tensors) {
    const int64_t *strides[3] = {nullptr, nullptr, nullptr};
    int count = 0;
    for (const tl_tensor *t : tensors)
        if (count < 3) strides[count++] = t ? t->strides : nullptr;
    tl_cuda_positions_make(p, shape_of->ndim, shape_of->shape, skip, count, strides);
}

/* The geometry of count operands of t[0]'s shape (each with t[0]'s ndim): size-1 dims dropped,
   adjacent dims merged where every operand's strides allow, so that a position's row-major
   index over g is its row-major index in t[0]. */
static inline void tl_cuda_geometry_of(tl_cuda_geometry *g, int count, const tl_tensor *const *t) {
    const tl_tensor *out = t[0];
    g->ndim = 0;
    for (int d = 0; d < out->ndim; d++) {
        int64_t size = out->shape[d];
        if (size == 1) continue;
        int n = g->ndim;
        bool merge = n > 0;
        for (int i = 0; i < count && merge; i++)
            merge = g->strides[i][n - 1] == t[i]->strides[d] * size;
        if (merge) {
            g->shape[n - 1] *= size;
        } else {
            g->shape[n] = size;
            g->ndim++;
        }
        for (int i = 0; i < count; i++) g->strides[i][g->ndim - 1] = t[i]->strides[d];
    }
}

/* The launch of count operands of out's shape (t[0] the output): the device's stream, the
   geometry above, and the dense case (one dim, each operand of stride 1 or 0) marked for the
   flat kernels. */
static inline tl_status tl_cuda_launch_of(tl_op op, int count, const tl_tensor *const *t,
                                          tl_cuda_launch *l) {
    const tl_tensor *out = t[0];
    /* every scalar field set before the first return, so no path leaves one unset */
    l->op = tl_op_info_of(op)->name;
    l->device = -1;
    l->stream = nullptr;
    l->sm_count = 1;
    l->count = count;
    l->numel = 0;
    l->dense = false;
    l->scalar_mask = 0;
    l->geometry.ndim = 0;
    for (int i = 1; i < count; i++)
        if (t[i]->ndim != out->ndim)
            return tl_error(TL_ERR_SHAPE,
                            "%s: CUDA kernel got an input of %d dims for an output of %d", l->op,
                            t[i]->ndim, out->ndim);
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out, l->op, &at));
    l->device = at.device;
    l->stream = at.stream;
    l->sm_count = at.sm_count;
    l->numel = tl_numel(out);
    for (int i = 0; i < count; i++) l->data[i] = tl_data(t[i]);

    const tl_cuda_geometry *g = &l->geometry;
    tl_cuda_geometry_of(&l->geometry, count, t);
    l->dense = g->ndim <= 1;
    if (g->ndim == 1) {
        l->dense = g->strides[0][0] == 1;
        for (int i = 1; i < count; i++) {
            if (g->strides[i][0] == 0)
                l->scalar_mask |= 1u << i;
            else if (g->strides[i][0] != 1)
                l->dense = false;
        }
    }
    return TL_OK;
}

#endif
