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

#endif
