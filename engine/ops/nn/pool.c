/* max_pool2d as ops: validate the window, dispatch the forward and the scatter backward. */
#include "ops/nn/nn_common.h"

static tl_status check_window(const tl_tensor *input, int64_t kernel_h, int64_t kernel_w,
                              int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                              tl_window2d *w) {
    const char *op = "max_pool2d";
    char si[256];
    if (input->ndim != 4)
        return tl_error(TL_ERR_SHAPE, "max_pool2d: input must be [N, C, H, W], got shape %s",
                        tl_shape_str(input, si, sizeof si));
    TL_TRY(nn_check_floating(op, "input", input));
    const int64_t H = input->shape[2], W = input->shape[3];
    if (H < 1 || W < 1)
        return tl_error(TL_ERR_SHAPE,
                        "max_pool2d: input height and width must be >= 1, got shape %s",
                        tl_shape_str(input, si, sizeof si));
    int64_t out_h, out_w;
    TL_TRY(tl_window_out_size(op, "height", H, kernel_h, stride_h, pad_h, 1, false, &out_h));
    TL_TRY(tl_window_out_size(op, "width", W, kernel_w, stride_w, pad_w, 1, false, &out_w));
    /* a window made only of padding would have no maximum */
    if (pad_h > kernel_h / 2 || pad_w > kernel_w / 2)
        return tl_error(TL_ERR_ARGUMENT,
                        "max_pool2d: padding must be between 0 and half the kernel size, got "
                        "padding %lld x %lld for kernel %lld x %lld",
                        (long long)pad_h, (long long)pad_w, (long long)kernel_h,
                        (long long)kernel_w);
    *w =
        nn_window(input->shape, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, out_h, out_w);
    return TL_OK;
}

tl_status tl_max_pool2d(const tl_tensor *input, int64_t kernel_h, int64_t kernel_w,
                        int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                        tl_tensor **out, tl_tensor **indices) {
    tl_window2d w;
    TL_TRY(check_window(input, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, &w));
    tl_device device = tl_tensor_device(input);
    int64_t shape[4] = {w.batch, w.channels, w.out_h, w.out_w};
    tl_tensor *x = NULL, *values = NULL, *where = NULL;
    tl_status status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK) status = tl_empty(shape, 4, input->dtype, device, &values);
    if (status == TL_OK) status = tl_empty(shape, 4, TL_I64, device, &where);
    if (status == TL_OK) {
        const tl_kernel_entry *k =
            tl_dispatch(TL_OP_max_pool2d, device, input->dtype, NN_TENSORS(values, x));
        status = k ? k->fn.pool(values, where, x, &w) : tl_dispatch_status();
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
    if (status == TL_OK) {
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
