/* CUDA im2col and col2im of conv2d, the C side: the dtypes of cpu/conv.c (cuda/conv.cu). */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

tl_cuda_window tl_cuda_window_of(const tl_window2d *w) {
    return (tl_cuda_window){
        .batch = w->batch,
        .channels = w->channels,
        .height = w->height,
        .width = w->width,
        .kernel_h = w->kernel_h,
        .kernel_w = w->kernel_w,
        .stride_h = w->stride_h,
        .stride_w = w->stride_w,
        .pad_h = w->pad_h,
        .pad_w = w->pad_w,
        .out_h = w->out_h,
        .out_w = w->out_w,
        .col_row_stride = w->col_row_stride,
        .col_batch_stride = w->col_batch_stride,
    };
}

static tl_status run(const char *op, bool to_columns, tl_tensor *dst, const tl_tensor *src,
                     const tl_window2d *w) {
    if (tl_numel(dst) == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(dst, op, &at));
    tl_cuda_window cw = tl_cuda_window_of(w);
    return tl_cuda_im2col_run(&at, to_columns, (int)src->dtype, tl_data(dst), tl_data(src), &cw);
}

static tl_status im2col_kernel(tl_tensor *dst, const tl_tensor *src, const tl_window2d *w) {
    return run("im2col", true, dst, src, w);
}

static tl_status col2im_kernel(tl_tensor *dst, const tl_tensor *src, const tl_window2d *w) {
    return run("col2im", false, dst, src, w);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(im2col, TL_DTYPES_FLOATING, im2col, im2col_kernel),
    TL_KERNEL(col2im, TL_DTYPES_FLOATING, im2col, col2im_kernel),
};

TL_KERNEL_TABLE(tl_cuda_conv_table, TL_DEVICE_CUDA, entries);
