/* max_pool2d and adaptive_max_pool2d as ops: validate the window, dispatch the forward and the
   scatter backward they share. */
#include <stdint.h>

#include "kernels/pool_window.h"
#include "ops/nn/nn_common.h"

/* input [N, C, H, W] (floating, H and W >= 1) */
static tl_status check_images(const char *op, const tl_tensor *input) {
    char si[256];
    if (input->ndim != 4)
        return tl_error(TL_ERR_SHAPE, "%s: input must be [N, C, H, W], got shape %s", op,
                        tl_shape_str(input, si, sizeof si));
    TL_TRY(nn_check_floating(op, "input", input));
    if (input->shape[2] < 1 || input->shape[3] < 1)
        return tl_error(TL_ERR_SHAPE, "%s: input height and width must be >= 1, got shape %s", op,
                        tl_shape_str(input, si, sizeof si));
    return TL_OK;
}

tl_status nn_pool_window(const char *op, const int64_t *image, const tl_pool2d_options *o,
                         tl_window2d *w) {
    int64_t out_h, out_w;
    TL_TRY(tl_window_out_size(op, "height", image[2], o->kernel_h, o->stride_h, o->pad_h,
                              o->dilation_h, o->ceil_mode, &out_h));
    TL_TRY(tl_window_out_size(op, "width", image[3], o->kernel_w, o->stride_w, o->pad_w,
                              o->dilation_w, o->ceil_mode, &out_w));
    /* a window made only of padding would have no maximum (nor a mean) */
    if (o->pad_h > o->kernel_h / 2 || o->pad_w > o->kernel_w / 2)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: padding must be between 0 and half the kernel size, got "
                        "padding %lld x %lld for kernel %lld x %lld",
                        op, (long long)o->pad_h, (long long)o->pad_w, (long long)o->kernel_h,
                        (long long)o->kernel_w);
    *w = nn_window(image, o->kernel_h, o->kernel_w, o->stride_h, o->stride_w, o->pad_h, o->pad_w,
                   out_h, out_w);
    w->dilation_h = o->dilation_h, w->dilation_w = o->dilation_w;
    return TL_OK;
}

/* Every window of a dilated kernel has a tap inside the input (taps may straddle it). */
static tl_status check_taps(const char *op, const char *what, int64_t in, int64_t out,
                            int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
    for (int64_t o = 0; o < out; o++) {
        int64_t start, end, step;
        tl_max_taps(o, in, out, kernel, stride, pad, dilation, false, &start, &end, &step);
        if (start >= end)
            return tl_error(TL_ERR_ARGUMENT,
                            "%s: %s: the window of output %lld (kernel %lld, dilation %lld, "
                            "padding %lld) reads only padding",
                            op, what, (long long)o, (long long)kernel, (long long)dilation,
                            (long long)pad);
    }
    return TL_OK;
}

/* values and argmax indices [N, C, w->out_h, w->out_w] by the op's kernel (op_id) */
static tl_status run_max_pool(tl_op op_id, const tl_tensor *input, const tl_window2d *w,
                              tl_tensor **out, tl_tensor **indices) {
    tl_device device = tl_tensor_device(input);
    int64_t shape[4] = {w->batch, w->channels, w->out_h, w->out_w};
    tl_tensor *x = NULL, *values = NULL, *where = NULL;
    tl_status status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK) status = tl_empty(shape, 4, input->dtype, device, &values);
    if (status == TL_OK) status = tl_empty(shape, 4, TL_I64, device, &where);
    if (status == TL_OK && tl_numel(values) > 0) {
        const tl_kernel_entry *k = tl_dispatch(op_id, device, input->dtype, NN_TENSORS(values, x));
        status = k ? k->fn.pool(values, where, x, w) : tl_dispatch_status();
    }
    tl_release(x);
    if (status != TL_OK) {
        tl_release(values), tl_release(where);
        return status;
    }
    *out = values;
    *indices = where;
    return TL_OK;
}

tl_status tl_max_pool2d_with(const tl_tensor *input, const tl_pool2d_options *o, tl_tensor **out,
                             tl_tensor **indices) {
    const char *op = "max_pool2d";
    tl_window2d w;
    TL_TRY(check_images(op, input));
    TL_TRY(nn_pool_window(op, input->shape, o, &w));
    TL_TRY(
        check_taps(op, "height", w.height, w.out_h, w.kernel_h, w.stride_h, w.pad_h, w.dilation_h));
    TL_TRY(
        check_taps(op, "width", w.width, w.out_w, w.kernel_w, w.stride_w, w.pad_w, w.dilation_w));
    return run_max_pool(TL_OP_max_pool2d, input, &w, out, indices);
}

tl_status tl_max_pool2d(const tl_tensor *input, int64_t kernel_h, int64_t kernel_w,
                        int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                        tl_tensor **out, tl_tensor **indices) {
    const tl_pool2d_options o = {.kernel_h = kernel_h,
                                 .kernel_w = kernel_w,
                                 .stride_h = stride_h,
                                 .stride_w = stride_w,
                                 .pad_h = pad_h,
                                 .pad_w = pad_w,
                                 .dilation_h = 1,
                                 .dilation_w = 1};
    return tl_max_pool2d_with(input, &o, out, indices);
}

tl_status nn_adaptive_window(const char *op, const int64_t *image, int64_t out_h, int64_t out_w,
                             tl_window2d *w) {
    if (out_h < 0 || out_w < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: output_size must be >= 0, got %lld x %lld", op,
                        (long long)out_h, (long long)out_w);
    /* the windows' bounds compute (o + 1) * H */
    int64_t product;
    if (out_h == INT64_MAX || out_w == INT64_MAX || !tl_size_mul(out_h + 1, image[2], &product) ||
        !tl_size_mul(out_w + 1, image[3], &product))
        return tl_error(TL_ERR_ARGUMENT, "%s: output_size %lld x %lld is too large", op,
                        (long long)out_h, (long long)out_w);
    *w = nn_window(image, 1, 1, 1, 1, 0, 0, out_h, out_w);
    return TL_OK;
}

tl_status tl_adaptive_max_pool2d(const tl_tensor *input, int64_t out_h, int64_t out_w,
                                 tl_tensor **out, tl_tensor **indices) {
    const char *op = "adaptive_max_pool2d";
    tl_window2d w;
    TL_TRY(check_images(op, input));
    TL_TRY(nn_adaptive_window(op, input->shape, out_h, out_w, &w));
    return run_max_pool(TL_OP_adaptive_max_pool2d, input, &w, out, indices);
}

tl_status tl_max_pool2d_backward(const tl_tensor *grad, const tl_tensor *indices,
                                 const int64_t input_shape[4], tl_tensor **grad_input) {
    return nn_max_pool2d_backward(grad, indices, input_shape, true, grad_input);
}

tl_status nn_max_pool2d_backward(const tl_tensor *grad, const tl_tensor *indices,
                                 const int64_t input_shape[4], bool check_indices,
                                 tl_tensor **grad_input) {
    const char *op = "max_pool2d_backward";
    char sg[256], si[256], se[256];
    if (grad->ndim != 4 || !nn_same_shape(indices, grad->shape, 4))
        return tl_error(
            TL_ERR_SHAPE, "%s: grad and indices must both be [N, C, OH, OW], got shapes %s and %s",
            op, tl_shape_str(grad, sg, sizeof sg), tl_shape_str(indices, si, sizeof si));
    if (input_shape[0] != grad->shape[0] || input_shape[1] != grad->shape[1] ||
        input_shape[2] < 0 || input_shape[3] < 0)
        return tl_error(TL_ERR_SHAPE, "%s: input shape %s does not fit grad shape %s", op,
                        nn_shape_str(input_shape, 4, se, sizeof se),
                        tl_shape_str(grad, sg, sizeof sg));
    TL_TRY(nn_check_floating(op, "grad", grad));
    if (indices->dtype != TL_I64)
        return tl_error(TL_ERR_DTYPE, "%s: indices must be int64, got %s", op,
                        tl_dtype_name(indices->dtype));
    TL_TRY(nn_check_like(op, "grad", grad, "indices", indices, false));
    const int64_t plane = input_shape[2] * input_shape[3];
    if (check_indices) {
        const tl_index_range range = {
            .op = op, .what = "indices", .range_of = "the input plane", .first = 0, .count = plane};
        TL_TRY(tl_check_index_range(indices, &range));
    }
    tl_window2d w = {
        .batch = input_shape[0],
        .channels = input_shape[1],
        .height = input_shape[2],
        .width = input_shape[3],
        .out_h = grad->shape[2],
        .out_w = grad->shape[3],
    };
    tl_device device = tl_tensor_device(grad);
    tl_tensor *g = NULL, *idx = NULL, *result = NULL;
    tl_status status = tl_contiguous((tl_tensor *)grad, &g);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)indices, &idx);
    if (status == TL_OK) status = tl_empty(input_shape, 4, grad->dtype, device, &result);
    if (status == TL_OK && tl_numel(g) == 0)
        status = tl_fill_(result, tl_scalar_int(0));
    else if (status == TL_OK) {
        const tl_kernel_entry *k =
            tl_dispatch(TL_OP_max_pool2d_backward, device, grad->dtype, NN_TENSORS(result, g, idx));
        status = k ? k->fn.pool_backward(result, g, idx, &w) : tl_dispatch_status();
    }
    tl_release(g), tl_release(idx);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *grad_input = result;
    return TL_OK;
}

tl_status nn_run_image_kernel(tl_op op, const tl_tensor *src, const int64_t dst_shape[4],
                              nn_image_call call, const void *desc, tl_tensor **out) {
    tl_device device = tl_tensor_device(src);
    tl_tensor *x = NULL, *result = NULL;
    tl_status status = tl_contiguous((tl_tensor *)src, &x);
    if (status == TL_OK) status = tl_empty(dst_shape, 4, src->dtype, device, &result);
    if (status == TL_OK && tl_numel(result) > 0) {
        if (tl_numel(x) == 0) {
            status = tl_fill_(result, tl_scalar_int(0));
        } else {
            const tl_kernel_entry *k = tl_dispatch(op, device, src->dtype, NN_TENSORS(result, x));
            status = k ? call(k, result, x, desc) : tl_dispatch_status();
        }
    }
    tl_release(x);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}
