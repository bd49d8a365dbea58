/* The CUDA kernel tables, one per kernel file, listed in kernels/registry.c. */
#ifndef TLUA_CUDA_KERNELS_H
#define TLUA_CUDA_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/kernel.h"

extern const tl_kernel_table tl_cuda_unary_table;  /* cuda/elementwise.c + unary.cu */
extern const tl_kernel_table tl_cuda_binary_table; /* cuda/elementwise.c + binary.cu */
extern const tl_kernel_table tl_cuda_where_table;  /* cuda/elementwise.c + where.cu */
extern const tl_kernel_table tl_cuda_fill_table;   /* cuda/elementwise.c + fill.cu */
extern const tl_kernel_table tl_cuda_copy_table;   /* cuda/elementwise.c + copy.cu: casts */
extern const tl_kernel_table tl_cuda_gemm_table;   /* cuda/gemm.c: cuBLAS */
/* cuda/elementwise.c + activation_backward.cu */
extern const tl_kernel_table tl_cuda_activation_backward_table;
extern const tl_kernel_table tl_cuda_reduce_table;  /* cuda/reduce.c + .cu */
extern const tl_kernel_table tl_cuda_softmax_table; /* cuda/softmax.c + .cu */
extern const tl_kernel_table tl_cuda_random_table;  /* cuda/random.c + .cu: Philox as the CPU */
/* nn (engine/include/tlua/nn.h) */
extern const tl_kernel_table tl_cuda_conv_table;          /* cuda/conv.c + .cu: im2col, col2im */
extern const tl_kernel_table tl_cuda_pool_table;          /* cuda/pool.c + .cu: max_pool2d */
extern const tl_kernel_table tl_cuda_embedding_table;     /* cuda/embedding.c + .cu */
extern const tl_kernel_table tl_cuda_cross_entropy_table; /* cuda/cross_entropy.c + .cu */
extern const tl_kernel_table tl_cuda_layer_norm_table;    /* cuda/layer_norm.c + .cu */
extern const tl_kernel_table tl_cuda_optim_table;         /* cuda/optim.c + .cu: sgd, adam */

#ifdef __cplusplus
}
#endif

#endif
