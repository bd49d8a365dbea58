/* Internal: what cuda/block_sparse.c hands to the device side (cuda/block_sparse.cu). */
#ifndef TLUA_CUDA_BLOCK_SPARSE_LAUNCH_H
#define TLUA_CUDA_BLOCK_SPARSE_LAUNCH_H

#include "kernels/cuda/ops_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { TL_CUDA_BSL_FORWARD, TL_CUDA_BSL_BACKWARD_INPUT, TL_CUDA_BSL_BACKWARD_WEIGHT };

/* One block-sparse product over blocks of size block (see kernels/kernel.h):
   forward          out [rows, R b] = dense [rows, C b] @ W^T + bias: per block row r (outputs
                    = R) the entries offsets[r] .., dense block dense_index[e] (< C), weight
                    block e;
   backward_input   out [rows, C b] = dense [rows, R b] @ W: per block column c (outputs = C)
                    the entries offsets[c] .., dense block dense_index[t] (< R), weight block
                    weight_index[t] (< nnz);
   backward_weight  out [nnz, b, b]: per block e (outputs = nnz), dense (the gradient
                    [rows, R b]) block dense_index[e] (< R) against other (x [rows, C b])
                    block weight_index[e] (< C), over all rows.
   Every index is checked against its limit on the device: one out of range is skipped. */
typedef struct tl_cuda_block_sparse {
    tl_cuda_where at;
    int mode, dtype; /* TL_CUDA_BSL_*, TL_CUDA_* */
    void *out;
    const void *dense, *other, *bias;
    const int32_t *offsets, *dense_index, *weight_index;
    int64_t rows, block, outputs, nnz, dense_limit, weight_limit;
    int64_t dense_width, other_width, out_width; /* row lengths in elements */
} tl_cuda_block_sparse;

/* forward and backward_input */
tl_status tl_cuda_block_sparse_run(const tl_cuda_block_sparse *p);
/* backward_weight's cuBLAS operands: pointers[0 .. nnz) x's block columns, [nnz, 2 nnz) dy's,
   [2 nnz, 3 nnz) the output blocks; then the blocks whose indices are out of range zeroed. */
tl_status tl_cuda_block_sparse_pointers(const tl_cuda_block_sparse *p, void **pointers);
tl_status tl_cuda_block_sparse_zero_invalid(const tl_cuda_block_sparse *p);

#ifdef __cplusplus
}
#endif

#endif
