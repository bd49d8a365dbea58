/* CUDA GEMM kernels on cuBLAS: cublasGemmEx for one product, cublasGemmStridedBatchedEx for a
   batch, on the runtime's handle and stream of the device; f32 (TF32 under precision "high"),
   f64, and bf16/f16 inputs with f32 compute and f32 or same-dtype output. */
#include <limits.h>

#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/blas_types.h"
#include "kernels/cuda/cuda_kernels.h"

#define OP_NAME "gemm"

static tl_status check_int(const GemmParams *p) {
    const int64_t v[] = {p->m, p->n, p->k, p->lda, p->ldb, p->ldc, p->batch_count};
    return tl_cuda_blas_ints(OP_NAME, v, (int)(sizeof v / sizeof v[0]));
}

/* One kernel for every dtype: tl_gemm has validated sizes, leading dims and the dtype combination
   (f32 -> f32, f64 -> f64, bf16/f16 -> f32 or the same, computed in f32). */
static tl_status gemm(tl_device device, const GemmParams *p, const void *a, const void *b,
                      void *c) {
    TL_TRY(check_int(p));
    cublasHandle_t handle;
    cudaStream_t stream;
    TL_TRY(tl_cuda_blas(device.index, OP_NAME, &handle, &stream));

    cudaDataType_t in_type = tl_cuda_data_type(p->input_dtype),
                   out_type = tl_cuda_data_type(p->output_dtype);
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if (p->input_dtype == TL_F64)
        compute = CUBLAS_COMPUTE_64F;
    else if (p->input_dtype == TL_F32 && tl_cuda_matmul_allow_tf32())
        compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    double alpha64 = p->alpha, beta64 = p->beta;
    float alpha32 = p->alpha, beta32 = p->beta;
    const void *alpha = compute == CUBLAS_COMPUTE_64F ? (const void *)&alpha64 : &alpha32;
    const void *beta = compute == CUBLAS_COMPUTE_64F ? (const void *)&beta64 : &beta32;
    /* k == 0 (C = beta C): A and B are not read and may be NULL */
    if (!a) a = c;
    if (!b) b = c;

    cublasStatus_t s;
    if (p->batch_count <= 1) {
        s = cublasGemmEx(handle, tl_cuda_blas_op(p->trans_a), tl_cuda_blas_op(p->trans_b),
                         (int)p->m, (int)p->n, (int)p->k, alpha, a, in_type, (int)p->lda, b,
                         in_type, (int)p->ldb, beta, c, out_type, (int)p->ldc, compute,
                         CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) return tl_cublas_fail(s, OP_NAME, "cublasGemmEx");
    } else {
        s = cublasGemmStridedBatchedEx(
            handle, tl_cuda_blas_op(p->trans_a), tl_cuda_blas_op(p->trans_b), (int)p->m, (int)p->n,
            (int)p->k, alpha, a, in_type, (int)p->lda, (long long)p->stride_a, b, in_type,
            (int)p->ldb, (long long)p->stride_b, beta, c, out_type, (int)p->ldc,
            (long long)p->stride_c, (int)p->batch_count, compute, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS)
            return tl_cublas_fail(s, OP_NAME, "cublasGemmStridedBatchedEx");
    }
    return tl_cuda_check_launch(OP_NAME);
}

/* Every op of the GEMM family in ops.def gets the entries (GEMM_OP rows of tlua/ops.def). */
static const tl_kernel_entry entries[] = {
#define GEMM_OP(name, differentiable, backward)                                                    \
    TL_KERNEL_NAMED("cuda_gemm", name, TL_DTYPES_FLOATING, gemm, gemm),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cuda_gemm_table, TL_DEVICE_CUDA, entries);
