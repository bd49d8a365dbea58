/* avg_pool2d and adaptive_avg_pool2d as ops: validate the window, dispatch the forward and the
   backward (both of family AVG_POOL). */
#include "ops/nn/nn_common.h"

static tl_status check_images(const char *op, const char *name, const int64_t *shape, int ndim,
                              bool zero_ok) {
    char si[256];
    if (ndim != 4)
        return tl_error(TL_ERR_SHAPE, "%s: %s must be [N, C, H, W], got shape %s", op, name,
                        nn_shape_str(shape, ndim, si, sizeof si));
    if (shape[0] < 0 || shape[1] < 0 || shape[2] < (zero_ok ? 0 : 1) ||
        shape[3] < (zero_ok ? 0 : 1))
        return tl_error(TL_ERR_SHAPE, "%s: %s height and width must be >= 1, got shape %s", op,
                        name, nn_shape_str(shape, ndim, si, sizeof si));
    return TL_OK;
}

static tl_status avg_window(const char *op, const int64_t *image, const tl_pool2d_options *o,
                            tl_avg_window2d *a) {
    if (o->dilation_h != 1 || o->dilation_w != 1)
        return tl_error(TL_ERR_ARGUMENT, "%s: dilation must be 1, got %lld x %lld", op,
                        (long long)o->dilation_h, (long long)o->dilation_w);
    if (o->divisor < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: divisor_override must be >= 1 (0: none), got %lld",
                        op, (long long)o->divisor);
    *a = (tl_avg_window2d){.count_include_pad = o->count_include_pad, .divisor = o->divisor};
    return nn_pool_window(op, image, o, &a->window);
}

/* the family's kernel call, for nn_run_image_kernel */
static tl_status call_avg_pool(const tl_kernel_entry *k, tl_tensor *dst, const tl_tensor *src,
                               const void *desc) {
    return k->fn.avg_pool(dst, src, (const tl_avg_window2d *)desc);
}

/* dst [dst_shape] from src by the kernel of op_id; an empty src leaves zeros. */
static tl_status run_avg(tl_op op_id, const tl_tensor *src, const int64_t dst_shape[4],
                         const tl_avg_window2d *a, tl_tensor **out) {
    return nn_run_image_kernel(op_id, src, dst_shape, call_avg_pool, a, out);
}

/* grad [N, C, OH, OW] of the window a over input_shape (floating, on input's terms) */
static tl_status check_grad(const char *op, const tl_tensor *grad, const int64_t input_shape[4],
                            const tl_avg_window2d *a) {
    char sg[256], se[256];
    TL_TRY(nn_check_floating(op, "grad", grad));
    const int64_t expected[4] = {input_shape[0], input_shape[1], a->window.out_h, a->window.out_w};
    if (!nn_same_shape(grad, expected, 4))
        return tl_error(TL_ERR_SHAPE, "%s: grad must have shape %s for input shape %s, got %s", op,
                        nn_shape_str(expected, 4, se, sizeof se),
                        nn_shape_str(input_shape, 4, sg, sizeof sg),
                        tl_shape_str(grad, sg, sizeof sg));
    return TL_OK;
}

tl_status tl_avg_pool2d(const tl_tensor *input, const tl_pool2d_options *opts, tl_tensor **out) {
    const char *op = "avg_pool2d";
    TL_TRY(check_images(op, "input", input->shape, input->ndim, false));
    TL_TRY(nn_check_floating(op, "input", input));
    tl_avg_window2d a;
    TL_TRY(avg_window(op, input->shape, opts, &a));
    const int64_t shape[4] = {a.window.batch, a.window.channels, a.window.out_h, a.window.out_w};
    return run_avg(TL_OP_avg_pool2d, input, shape, &a, out);
}

tl_status tl_avg_pool2d_backward(const tl_tensor *grad, const int64_t input_shape[4],
                                 const tl_pool2d_options *opts, tl_tensor **grad_input) {
    const char *op = "avg_pool2d_backward";
    TL_TRY(check_images(op, "input", input_shape, 4, false));
    tl_avg_window2d a;
    TL_TRY(avg_window(op, input_shape, opts, &a));
    TL_TRY(check_grad(op, grad, input_shape, &a));
    return run_avg(TL_OP_avg_pool2d_backward, grad, input_shape, &a, grad_input);
}

tl_status tl_adaptive_avg_pool2d(const tl_tensor *input, int64_t out_h, int64_t out_w,
                                 tl_tensor **out) {
    const char *op = "adaptive_avg_pool2d";
    TL_TRY(check_images(op, "input", input->shape, input->ndim, false));
    TL_TRY(nn_check_floating(op, "input", input));
    tl_avg_window2d a = {.adaptive = true};
    TL_TRY(nn_adaptive_window(op, input->shape, out_h, out_w, &a.window));
    const int64_t shape[4] = {a.window.batch, a.window.channels, out_h, out_w};
    return run_avg(TL_OP_adaptive_avg_pool2d, input, shape, &a, out);
}

tl_status tl_adaptive_avg_pool2d_backward(const tl_tensor *grad, const int64_t input_shape[4],
                                          tl_tensor **grad_input) {
    const char *op = "adaptive_avg_pool2d_backward";
    TL_TRY(check_images(op, "input", input_shape, 4, false));
    if (grad->ndim != 4) {
        char sg[256];
        return tl_error(TL_ERR_SHAPE, "%s: grad must be [N, C, OH, OW], got shape %s", op,
                        tl_shape_str(grad, sg, sizeof sg));
    }
    tl_avg_window2d a = {.adaptive = true};
    TL_TRY(nn_adaptive_window(op, input_shape, grad->shape[2], grad->shape[3], &a.window));
    TL_TRY(check_grad(op, grad, input_shape, &a));
    return run_avg(TL_OP_adaptive_avg_pool2d_backward, grad, input_shape, &a, grad_input);
}
