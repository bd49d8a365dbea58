/* CUDA block-sparse linear kernels, the C side: the layout's indices per direction, the
   weight gradient as one cuBLAS batched GEMM over the pattern's blocks, and the table (device
   code in cuda/block_sparse.cu). */
#include <limits.h>

#include "kernels/cuda/blas_types.h"
#include "kernels/cuda/block_sparse_launch.h"
#include "kernels/cuda/cuda_kernels.h"

static const int32_t *indices(const tl_tensor *t) {
    return tl_data(t);
}

/* Block e = x[:, c]^T-shaped product of all rows: cuBLAS's batched GEMM (column-major: C_e
   [b, b] = A_e [b, rows] B_e^T, A_e x's block column c, B_e dy's block column r, ld the row
   lengths), the pointer arrays made on the device from the coordinate list. Measured on an
   H100 against a tensor-core kernel of our own walking the rows: cuBLAS was 1.7x faster for
   blocks of 64 and as fast for 32. */
static tl_status weight_gradient(const tl_cuda_block_sparse *p, tl_dtype dtype) {
    if (p->rows > INT_MAX || p->dense_width > INT_MAX || p->other_width > INT_MAX ||
        p->nnz > INT_MAX)
        return tl_error(TL_ERR_ARGUMENT, "%s: %lld rows or %lld blocks exceed cuBLAS's int range",
                        p->at.op, (long long)p->rows, (long long)p->nnz);
    cublasHandle_t handle;
    cudaStream_t stream;
    TL_TRY(tl_cuda_blas(p->at.device, p->at.op, &handle, &stream));
    void **pointers = NULL;
    TL_TRY(tl_cuda_malloc(p->at.device, 3 * (size_t)p->nnz * sizeof(void *), p->at.op,
                          (void **)&pointers));
    tl_status status = tl_cuda_block_sparse_pointers(p, pointers);
    if (status == TL_OK) {
        cudaDataType_t type = tl_cuda_data_type(dtype);
        cublasComputeType_t compute = dtype == TL_F64 ? CUBLAS_COMPUTE_64F
                                      : dtype == TL_F32 && tl_cuda_matmul_allow_tf32()
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
        const double one64 = 1, zero64 = 0;
        const float one32 = 1, zero32 = 0;
        const bool wide = compute == CUBLAS_COMPUTE_64F;
        const int b = (int)p->block;
        cublasStatus_t st = cublasGemmBatchedEx(
            handle, CUBLAS_OP_N, CUBLAS_OP_T, b, b, (int)p->rows,
            wide ? (const void *)&one64 : &one32, (const void *const *)pointers, type,
            (int)p->other_width, (const void *const *)(pointers + p->nnz), type,
            (int)p->dense_width, wide ? (const void *)&zero64 : &zero32, pointers + 2 * p->nnz,
            type, b, (int)p->nnz, compute, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS)
            status = tl_cublas_fail(st, p->at.op, "cublasGemmBatchedEx");
    }
    if (status == TL_OK) status = tl_cuda_block_sparse_zero_invalid(p);
    tl_cuda_free(p->at.device, pointers); /* given back behind the call, in stream order */
    return status;
}

static tl_status run(int mode, const char *op, tl_tensor *out, const tl_tensor *dense,
                     const tl_tensor *other, const tl_tensor *bias, const tl_block_layout *layout) {
    tl_cuda_block_sparse p = {0};
    TL_TRY(tl_cuda_where_of(out, op, &p.at));
    const int64_t R = layout->row_offsets->shape[0] - 1, C = layout->col_offsets->shape[0] - 1;
    p.mode = mode;
    p.dtype = (int)dense->dtype;
    p.out = tl_data(out);
    p.dense = tl_data(dense);
    p.other = tl_data(other);
    p.bias = bias ? tl_data(bias) : NULL;
    p.rows = dense->shape[0];
    p.dense_width = dense->shape[1];
    p.nnz = layout->coo_rows->shape[0];
    if (mode == TL_CUDA_BSL_BACKWARD_WEIGHT) {
        p.block = out->shape[1];
        p.outputs = p.nnz;
        p.dense_index = indices(layout->coo_rows), p.dense_limit = R;
        p.weight_index = indices(layout->coo_cols), p.weight_limit = C;
        p.other_width = other->shape[1];
        p.out_width = p.block;
    } else {
        const bool forward = mode == TL_CUDA_BSL_FORWARD;
        p.block = other->shape[1];
        p.outputs = forward ? R : C;
        p.offsets = indices(forward ? layout->row_offsets : layout->col_offsets);
        p.dense_index = indices(forward ? layout->col_indices : layout->row_indices);
        p.dense_limit = forward ? C : R;
        p.weight_index = forward ? NULL : indices(layout->col_blocks);
        p.weight_limit = p.nnz;
        p.other_width = p.block;
        p.out_width = out->shape[1];
    }
    if (mode == TL_CUDA_BSL_BACKWARD_WEIGHT) return weight_gradient(&p, dense->dtype);
    return tl_cuda_block_sparse_run(&p);
}

static tl_status forward(tl_tensor *out, const tl_tensor *dense, const tl_tensor *other,
                         const tl_tensor *bias, const tl_block_layout *layout) {
    return run(TL_CUDA_BSL_FORWARD, "block_sparse_linear", out, dense, other, bias, layout);
}

static tl_status backward_input(tl_tensor *out, const tl_tensor *dense, const tl_tensor *other,
                                const tl_tensor *bias, const tl_block_layout *layout) {
    return run(TL_CUDA_BSL_BACKWARD_INPUT, "block_sparse_linear_backward_input", out, dense, other,
               bias, layout);
}

static tl_status backward_weight(tl_tensor *out, const tl_tensor *dense, const tl_tensor *other,
                                 const tl_tensor *bias, const tl_block_layout *layout) {
    return run(TL_CUDA_BSL_BACKWARD_WEIGHT, "block_sparse_linear_backward_weight", out, dense,
               other, bias, layout);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(block_sparse_linear, TL_DTYPES_FLOATING, block_sparse, forward),
    TL_KERNEL(block_sparse_linear_backward_input, TL_DTYPES_FLOATING, block_sparse, backward_input),
    TL_KERNEL(block_sparse_linear_backward_weight, TL_DTYPES_FLOATING, block_sparse,
              backward_weight),
};

TL_KERNEL_TABLE(tl_cuda_block_sparse_table, TL_DEVICE_CUDA, entries);
