/* Internal: what the C side of the CUDA cumsum and nonzero kernels (cuda/scan.c) hands to their
   device side (cuda/scan.cu): plain-C descriptions of the data, the geometry and the stream. */
#ifndef TLUA_CUDA_SCAN_H
#define TLUA_CUDA_SCAN_H

#include "kernels/cuda/ops_launch.h" /* tl_cuda_where, tl_cuda_positions */

#ifdef __cplusplus
extern "C" {
#endif

/* cumsum: rows at pos (tensors: 0 in, 1 out), len elements each, step_in / step_out apart; out
   has in's dtype for floating dtypes, int64 otherwise. */
typedef struct tl_cuda_cumsum {
    tl_cuda_where at;
    int dtype; /* the input's TL_CUDA_* */
    const void *in;
    void *out;
    int64_t len, step_in, step_out;
    tl_cuda_positions pos;
} tl_cuda_cumsum;
tl_status tl_cuda_cumsum_run(const tl_cuda_cumsum *c);

/* nonzero over in (contiguous, n elements of shape[0..ndim)). */
typedef struct tl_cuda_nonzero {
    tl_cuda_where at;
    int dtype; /* the input's TL_CUDA_* */
    const void *in;
    int64_t n;
    int ndim;
    int64_t shape[TL_CUDA_DIMS];
    int64_t *out; /* int64 [rows, ndim], contiguous (the fill) */
    int64_t rows;
} tl_cuda_nonzero;
/* *count = the number of non-zero elements, on the host: the host waits for the device. */
tl_status tl_cuda_nonzero_count(const tl_cuda_nonzero *z, int64_t *count);
/* Writes the coordinates of the non-zero elements into out, in row-major order (no wait). */
tl_status tl_cuda_nonzero_run(const tl_cuda_nonzero *z);

#ifdef __cplusplus
}
#endif

#endif
