/* The CPU kernel tables, one per kernel file, listed in kernels/registry.c. */
#ifndef TLUA_CPU_KERNELS_H
#define TLUA_CPU_KERNELS_H

#include "kernels/kernel.h"

extern const tl_kernel_table tl_cpu_unary_table;   /* cpu/unary.c */
extern const tl_kernel_table tl_cpu_binary_table;  /* cpu/binary.c: arithmetic, comparisons */
extern const tl_kernel_table tl_cpu_where_table;   /* cpu/where.c */
extern const tl_kernel_table tl_cpu_fill_table;    /* cpu/fill.c */
extern const tl_kernel_table tl_cpu_copy_table;    /* cpu/copy.c: casts between all dtypes */
extern const tl_kernel_table tl_cpu_reduce_table;  /* cpu/reduce.c */
extern const tl_kernel_table tl_cpu_softmax_table; /* cpu/softmax.c */
extern const tl_kernel_table tl_cpu_gemm_table;    /* cpu/gemm.c: OpenBLAS */
extern const tl_kernel_table tl_cpu_random_table;  /* cpu/random.c */
extern const tl_kernel_table tl_cpu_activation_backward_table; /* cpu/activation_backward.c */
/* nn (engine/include/tlua/nn.h) */
extern const tl_kernel_table tl_cpu_conv_table;          /* cpu/conv.c: im2col, col2im */
extern const tl_kernel_table tl_cpu_pool_table;          /* cpu/pool.c: max_pool2d */
extern const tl_kernel_table tl_cpu_embedding_table;     /* cpu/embedding.c */
extern const tl_kernel_table tl_cpu_cross_entropy_table; /* cpu/cross_entropy.c */
extern const tl_kernel_table tl_cpu_layer_norm_table;    /* cpu/layer_norm.c */
extern const tl_kernel_table tl_cpu_optim_table;         /* cpu/optim.c: sgd, adam */

#endif
