/* Internal: the plain descriptions of CUDA elementwise launches (unary.cu, binary.cu, where.cu,
   ...): tl_dtype as TL_CUDA_* values, the operands' data, their merged strided geometry, the
   stream. Plain C: the C kernel files of engine/kernels/cuda (through ops_launch.h) read it too. */
#ifndef TLUA_CUDA_LAUNCH_H
#define TLUA_CUDA_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/op.h"
#include "tlua/error.h"

#define TL_CUDA_DIMS     16 /* TL_MAX_DIMS */
#define TL_CUDA_OPERANDS 4  /* the output and up to 3 inputs */

/* tl_dtype's values (checked in cuda/describe.cuh) */
enum {
    TL_CUDA_F32,
    TL_CUDA_F64,
    TL_CUDA_BF16,
    TL_CUDA_F16,
    TL_CUDA_I32,
    TL_CUDA_I64,
    TL_CUDA_BOOL,
    TL_CUDA_DTYPE_COUNT
};

/* Operand i's element at linear (row-major) index j is at data[i] + sum over d of
   (j's coordinate d) * strides[i][d], in elements. Size-1 dims are dropped and adjacent dims
   merged where every operand allows, so ndim is often 1 or 2. */
typedef struct tl_cuda_geometry {
    int ndim;
    int64_t shape[TL_CUDA_DIMS];
    int64_t strides[TL_CUDA_OPERANDS][TL_CUDA_DIMS];
} tl_cuda_geometry;

typedef struct tl_cuda_launch {
    const char *op; /* names the op in errors */
    int device;
    cudaStream_t stream;
    int sm_count;
    int count; /* operands: the output (0) and the inputs (1..) */
    void *data[TL_CUDA_OPERANDS];
    int64_t numel;
    /* dense: the output is contiguous and each input contiguous or one element (bit i of
       scalar_mask for operand i): flat kernels. Otherwise the geometry is used. */
    bool dense;
    uint32_t scalar_mask;
    tl_cuda_geometry geometry;
} tl_cuda_launch;

#ifdef __cplusplus
}
#endif

#endif
