/* Internal: where a CUDA kernel runs (tl_cuda_where: device, stream, multiprocessors) and the
   positions of a dim-wise op (reductions, softmax, scans), with the helpers that make them from
   tensors. C and CUDA C++ alike: the .cu kernel files use them through describe.cuh, the C kernel
   files (attention.c, block_sparse.c) directly. */
#ifndef TLUA_CUDA_OPS_LAUNCH_H
#define TLUA_CUDA_OPS_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/cuda/launch.h" /* TL_CUDA_* dtypes, TL_CUDA_DIMS */
#include "tlua/error.h"

/* Where a kernel runs: the device, its stream and multiprocessor count, the op (for errors). */
typedef struct tl_cuda_where {
    const char *op;
    int device;
    cudaStream_t stream;
    int sm_count;
} tl_cuda_where;

/* Positions (a reduction's outputs, a softmax's rows): `count` of them, position j at
   coordinates of j (row-major over shape[0..ndim)) and element offset sum of coordinate d *
   strides[k][d] in tensor k. Dims are ordered so tensor 0's strides decrease, merged where
   every tensor allows. */
typedef struct tl_cuda_positions {
    int ndim;
    int64_t count;
    int64_t shape[TL_CUDA_DIMS];
    int64_t strides[3][TL_CUDA_DIMS];
} tl_cuda_positions;

#ifdef __cplusplus
}
#endif

/* ---- from tensors ------------------------------------------------------------------------ */
#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/cuda_kernels.h"

/* The stream of t's device, its multiprocessor count and the op's name. */
static inline tl_status tl_cuda_where_of(const tl_tensor *t, const char *op, tl_cuda_where *at) {
    at->op = op;
    at->device = tl_tensor_device(t).index;
    TL_TRY(tl_cuda_stream(at->device, op, &at->stream));
    at->sm_count = tl_cuda_sm_count(at->device);
    return TL_OK;
}

/* The positions over the dims of shape other than `skip` (-1: none) and of size > 1, with
   the strides of `count` tensors (a NULL strides array: zeros). */
static inline void tl_cuda_positions_make(tl_cuda_positions *p, int ndim, const int64_t *shape,
                                          int skip, int count, const int64_t *const *strides) {
    int dims[TL_CUDA_DIMS], n = 0;
    for (int d = 0; d < ndim; d++)
        if (d != skip && shape[d] > 1) dims[n++] = d;
    /* stable insertion sort: tensor 0's |stride| decreasing */
    for (int i = 1; i < n; i++) {
        int d = dims[i], j = i;
        int64_t s = strides[0][d] < 0 ? -strides[0][d] : strides[0][d];
        while (j > 0) {
            int64_t t = strides[0][dims[j - 1]];
            if ((t < 0 ? -t : t) >= s) break;
            dims[j] = dims[j - 1];
            j--;
        }
        dims[j] = d;
    }
    p->ndim = 0;
    p->count = 1;
    for (int i = 0; i < n; i++) {
        int d = dims[i], k = p->ndim;
        bool merge = k > 0;
        for (int t = 0; t < count && merge; t++) {
            int64_t st = strides[t] ? strides[t][d] : 0;
            merge = p->strides[t][k - 1] == st * shape[d];
        }
        if (merge) {
            p->shape[k - 1] *= shape[d];
            for (int t = 0; t < count; t++) p->strides[t][k - 1] = strides[t] ? strides[t][d] : 0;
        } else {
            p->shape[k] = shape[d];
            for (int t = 0; t < 3; t++)
                p->strides[t][k] = t < count && strides[t] ? strides[t][d] : 0;
            p->ndim++;
        }
        p->count *= shape[d];
    }
    for (int d = 0; d < ndim; d++)
        if (d != skip && shape[d] == 0) p->count = 0;
}

#endif
