/* Internal: what the C side of the CUDA elementwise kernels (cuda/elementwise.c) hands to their
   device side (the cuda/ .cu files): the operands' data, their merged strided geometry, the stream.
   Plain C for gcc and nvcc alike (nvcc sources cannot include tlua/dtype.h). */
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

/* tl_dtype's values (checked in cuda/elementwise.c) */
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

/* The device sides (extern "C" in the .cu files). dtype is a TL_CUDA_* value; each returns
   TL_OK or the launch's error. */
tl_status tl_cuda_unary_run(tl_op op, int dtype, const tl_cuda_launch *l, const double *scalar,
                            const bool *has_scalar);                        /* unary.cu */
tl_status tl_cuda_binary_run(tl_op op, int dtype, const tl_cuda_launch *l); /* binary.cu */
tl_status tl_cuda_activation_backward_run(tl_op op, int dtype,
                                          const tl_cuda_launch *l); /* activation_backward.cu */
tl_status tl_cuda_where_run(size_t element_size, const tl_cuda_launch *l); /* where.cu */
/* bits: the value already in the output's dtype (element_size bytes, little-endian) */
tl_status tl_cuda_fill_run(size_t element_size, uint64_t bits,
                           const tl_cuda_launch *l);                               /* fill.cu */
tl_status tl_cuda_cast_run(int src_dtype, int dst_dtype, const tl_cuda_launch *l); /* copy.cu */

#ifdef __cplusplus
}
#endif

#endif
