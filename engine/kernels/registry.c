/* Every kernel table of the build: add a kernel file's table here. */
#include "kernels/registry.h"
#include "kernels/cpu/cpu_kernels.h"
#ifdef TLUA_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

const tl_kernel_table *const tl_kernel_tables[] = {
    &tl_cpu_unary_table,
    &tl_cpu_binary_table,
    &tl_cpu_where_table,
    &tl_cpu_fill_table,
    &tl_cpu_copy_table,
    &tl_cpu_reduce_table,
    &tl_cpu_softmax_table,
    &tl_cpu_gemm_table,
    &tl_cpu_random_table,
    &tl_cpu_activation_backward_table,
    &tl_cpu_conv_table,
    &tl_cpu_pool_table,
    &tl_cpu_embedding_table,
    &tl_cpu_cross_entropy_table,
    &tl_cpu_layer_norm_table,
    &tl_cpu_optim_table,
#ifdef TLUA_HAVE_CUDA
    &tl_cuda_unary_table,
    &tl_cuda_binary_table,
    &tl_cuda_where_table,
    &tl_cuda_fill_table,
    &tl_cuda_copy_table,
    &tl_cuda_gemm_table,
    &tl_cuda_activation_backward_table,
    &tl_cuda_reduce_table,
    &tl_cuda_softmax_table,
    &tl_cuda_random_table,
    &tl_cuda_conv_table,
    &tl_cuda_pool_table,
    &tl_cuda_embedding_table,
    &tl_cuda_cross_entropy_table,
    &tl_cuda_layer_norm_table,
    &tl_cuda_optim_table,
#endif
};
const int tl_kernel_table_count = (int)(sizeof tl_kernel_tables / sizeof tl_kernel_tables[0]);
