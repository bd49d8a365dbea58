/* Internal: how the CUDA GEMM kernels name tlua's dtypes and transposes to cuBLAS. */
#ifndef TLUA_CUDA_BLAS_TYPES_H
#define TLUA_CUDA_BLAS_TYPES_H

#include <stdbool.h>

#include <cublas_v2.h>

#include "tlua/dtype.h"

/* The cuBLAS data type of a GEMM dtype (f32 for anything else: tl_gemm validated it). */
static inline cudaDataType_t tl_cuda_data_type(tl_dtype dtype) {
    switch (dtype) {
    case TL_F64:
        return CUDA_R_64F;
    case TL_BF16:
        return CUDA_R_16BF;
    case TL_F16:
        return CUDA_R_16F;
    default:
        return CUDA_R_32F;
    }
}

static inline cublasOperation_t tl_cuda_blas_op(bool trans) {
    return trans ? CUBLAS_OP_T : CUBLAS_OP_N;
}

#endif
