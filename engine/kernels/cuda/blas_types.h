/* Internal: the CUDA GEMMs' dtypes and transposes as cuBLAS names them, and its int range. */
#ifndef TLUA_CUDA_BLAS_TYPES_H
#define TLUA_CUDA_BLAS_TYPES_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include <cublas_v2.h>

#include "tlua/dtype.h"
#include "tlua/error.h"

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

/* TL_OK when each of the n sizes and leading dims fits cuBLAS's int; else op's error naming the
   first that does not. */
static inline tl_status tl_cuda_blas_ints(const char *op, const int64_t *values, int n) {
    for (int i = 0; i < n; i++)
        if (values[i] > INT_MAX)
            return tl_error(TL_ERR_ARGUMENT,
                            "%s: size or leading dim %lld exceeds cuBLAS's integer range", op,
                            (long long)values[i]);
    return TL_OK;
}

#endif
