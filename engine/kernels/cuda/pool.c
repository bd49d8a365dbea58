/* CUDA max_pool2d and its backward, the C side: the dtypes of cpu/pool.c (cuda/pool.cu). */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

static tl_status pool_kernel(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,
                             const tl_window2d *w) {
    if (tl_numel(out) == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out, "max_pool2d", &at));
    tl_cuda_window cw = tl_cuda_window_of(w);
    return tl_cuda_max_pool_run(&at, (int)in->dtype, tl_data(out), tl_data(indices), tl_data(in),
                                &cw);
}

static tl_status pool_backward_kernel(tl_tensor *grad_in, const tl_tensor *grad_out,
                                      const tl_tensor *indices, const tl_window2d *w) {
    if (tl_numel(grad_in) == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(grad_in, "max_pool2d_backward", &at));
    tl_cuda_window cw = tl_cuda_window_of(w);
    return tl_cuda_max_pool_backward_run(&at, (int)grad_in->dtype, tl_data(grad_in),
                                         tl_data(grad_out), tl_data(indices), &cw);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(max_pool2d, TL_DTYPES_FLOATING, pool, pool_kernel),
    TL_KERNEL(max_pool2d_backward, TL_DTYPES_FLOATING, pool_backward, pool_backward_kernel),
};

TL_KERNEL_TABLE(tl_cuda_pool_table, TL_DEVICE_CUDA, entries);
