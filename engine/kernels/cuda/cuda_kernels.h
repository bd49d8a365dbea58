/* The CUDA kernel tables, one per kernel file, listed in kernels/registry.c. */
#ifndef TLUA_CUDA_KERNELS_H
#define TLUA_CUDA_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/kernel.h"

extern const tl_kernel_table tl_cuda_unary_table;  /* cuda/unary.cu */
extern const tl_kernel_table tl_cuda_binary_table; /* cuda/binary.cu: arithmetic, comparisons */
extern const tl_kernel_table tl_cuda_where_table;  /* cuda/where.cu */
extern const tl_kernel_table tl_cuda_fill_table;   /* cuda/fill.cu */
extern const tl_kernel_table tl_cuda_copy_table;   /* cuda/copy.cu: casts between all dtypes */
extern const tl_kernel_table tl_cuda_gemm_table;   /* cuda/gemm.cu: cuBLAS */
extern const tl_kernel_table tl_cuda_activation_backward_table; /* cuda/activation_backward.cu */

#ifdef __cplusplus
}
#endif

#endif
