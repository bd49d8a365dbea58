/* conv_transpose2d as conv2d's input gradient: validation, the output size and the bias. */
#include "ops/nn/nn_common.h"

/* One spatial dim of the output: (in - 1) stride - 2 padding + dilation (kernel - 1) +
   output_padding + 1, with 0 <= output_padding < max(stride, dilation) (torch's rule). conv2d's
   size rule maps it back to in + floor(output_padding / stride): in itself when output_padding <
   stride, else the input is widened by zeros (nn_conv_transpose_input). */
static tl_status transposed_size(const char *what, int64_t in, int64_t kernel, int64_t stride,
                                 int64_t padding, int64_t dilation, int64_t output_padding,
                                 int64_t *out) {
    const char *op = "conv_transpose2d";
    if (stride < 1 || dilation < 1 || padding < 0)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: stride and dilation must be >= 1 and padding >= 0, got stride %lld, "
                        "dilation %lld, padding %lld (%s)",
                        op, (long long)stride, (long long)dilation, (long long)padding, what);
    const int64_t most = stride > dilation ? stride : dilation;
    if (output_padding < 0 || output_padding >= most)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: output_padding must be >= 0 and smaller than max(stride, dilation) = "
                        "%lld, got %lld (%s)",
                        op, (long long)most, (long long)output_padding, what);
    int64_t size, span;
    if (!tl_size_mul(in - 1 > 0 ? in - 1 : 0, stride, &size) ||
        !tl_size_mul(dilation, kernel - 1, &span) || !tl_size_add(size, span, &size) ||
        !tl_size_add(size, output_padding + 1, &size))
        return tl_error(TL_ERR_ARGUMENT, "%s: the output %s is too large", op, what);
    size -= 2 * padding;
    if (in < 1 || size < 1)
        return tl_error(TL_ERR_SHAPE,
                        "%s: input %s %lld with kernel %lld, stride %lld, padding %lld and "
                        "dilation %lld gives an output %s of %lld (must be >= 1)",
                        op, what, (long long)in, (long long)kernel, (long long)stride,
                        (long long)padding, (long long)dilation, what, (long long)size);
    *out = size;
    return TL_OK;
}

static tl_status check_transposed(const tl_tensor *input, const tl_tensor *weight,
                                  const tl_tensor *bias, const tl_conv2d_options *o,
                                  const int64_t output_padding[2], int64_t out_shape[4]) {
    const char *op = "conv_transpose2d";
    char si[256], sw[256], sb[256];
    if (input->ndim != 4)
        return tl_error(TL_ERR_SHAPE, "%s: input must be [N, C, H, W], got shape %s", op,
                        tl_shape_str(input, si, sizeof si));
    if (weight->ndim != 4 || weight->shape[2] < 1 || weight->shape[3] < 1)
        return tl_error(TL_ERR_SHAPE,
                        "%s: weight must be [in_channels, out_channels / groups, kernel_h, "
                        "kernel_w] with a kernel of at least 1x1, got shape %s",
                        op, tl_shape_str(weight, sw, sizeof sw));
    if (o->groups < 1 || input->shape[1] != weight->shape[0] || weight->shape[0] % o->groups != 0)
        return tl_error(TL_ERR_SHAPE,
                        "%s: input has %lld channels; weight %s needs %lld, divisible by the "
                        "%lld groups",
                        op, (long long)input->shape[1], tl_shape_str(weight, sw, sizeof sw),
                        (long long)weight->shape[0], (long long)o->groups);
    int64_t out_channels;
    if (!tl_size_mul(weight->shape[1], o->groups, &out_channels))
        return tl_error(TL_ERR_SHAPE, "%s: too many output channels", op);
    if (bias && (bias->ndim != 1 || bias->shape[0] != out_channels))
        return tl_error(TL_ERR_SHAPE, "%s: bias must have shape [%lld], got %s", op,
                        (long long)out_channels, tl_shape_str(bias, sb, sizeof sb));
    TL_TRY(nn_check_floating(op, "input", input));
    TL_TRY(nn_check_like(op, "input", input, "weight", weight, true));
    if (bias) TL_TRY(nn_check_like(op, "input", input, "bias", bias, true));
    out_shape[0] = input->shape[0], out_shape[1] = out_channels;
    TL_TRY(transposed_size("height", input->shape[2], weight->shape[2], o->stride[0], o->padding[0],
                           o->dilation[0], output_padding[0], &out_shape[2]));
    return transposed_size("width", input->shape[3], weight->shape[3], o->stride[1], o->padding[1],
                           o->dilation[1], output_padding[1], &out_shape[3]);
}

/* Output element o (of a dim, 0-based) sums input i times tap j where o + padding = i stride +
   j dilation. conv2d_backward_input computes exactly that for an output whose conv2d size is the
   input's; an output_padding >= stride makes the output's conv2d size in + floor(output_padding /
   stride), so the input gets that many zero rows (columns) at its end: they add nothing, and the
   output rows that no real input reaches keep 0 (then the bias). */
tl_status nn_conv_transpose_input(tl_tensor *input, const int64_t kernel_hw[2],
                                  const int64_t out_hw[2], const tl_conv2d_options *o,
                                  tl_tensor **out) {
    int64_t pads[4] = {0, 0, 0, 0}; /* torch's order: width before, after, height before, after */
    bool widen = false;
    for (int d = 0; d < 2; d++) {
        /* conv2d's size rule: (out + 2 padding - dilation (kernel - 1) - 1) / stride + 1 */
        const int64_t span =
            out_hw[d] + 2 * o->padding[d] - o->dilation[d] * (kernel_hw[d] - 1) - 1;
        const int64_t extra = span / o->stride[d] + 1 - input->shape[2 + d];
        pads[2 * (1 - d) + 1] = extra;
        widen = widen || extra != 0;
    }
    if (!widen) {
        tl_retain(input);
        *out = input;
        return TL_OK;
    }
    return tl_pad(input, pads, 4, TL_PAD_CONSTANT, tl_scalar_int(0), out);
}

tl_status tl_conv_transpose2d(const tl_tensor *input, const tl_tensor *weight,
                              const tl_tensor *bias, const tl_conv2d_options *opts,
                              const int64_t output_padding[2], tl_tensor **out) {
    const tl_conv2d_options o = opts ? *opts : tl_conv2d_defaults();
    const int64_t no_padding[2] = {0, 0};
    if (!output_padding) output_padding = no_padding;
    int64_t shape[4];
    TL_TRY(check_transposed(input, weight, bias, &o, output_padding, shape));
    tl_tensor *widened = NULL, *result = NULL, *b4 = NULL;
    tl_status status =
        nn_conv_transpose_input((tl_tensor *)input, weight->shape + 2, shape + 2, &o, &widened);
    if (status == TL_OK) status = tl_conv2d_backward_input(widened, weight, shape, &o, &result);
    tl_release(widened);
    if (status == TL_OK && bias) {
        int64_t bias_shape[4] = {1, shape[1], 1, 1};
        status = tl_view((tl_tensor *)bias, bias_shape, 4, &b4);
        if (status == TL_OK) status = tl_add_(result, b4);
    }
    tl_release(b4);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}
