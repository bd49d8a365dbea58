/* conv2d by im2col + GEMM over chunks of the batch: validation and the split backward. */
#include "ops/nn/nn_common.h"
#include "tlua/runtime.h"

/* Scratch elements (columns and the output or gradient with the samples side by side) of one
   chunk of samples: the whole batch at once unless that exceeds this (32 MiB of float32). Each
   chunk is one GEMM per product, so the GEMMs stay large. */
#define SCRATCH_BUDGET ((int64_t)1 << 23)

static int64_t max1(int64_t v) {
    return v > 1 ? v : 1;
}

/* opts, or the defaults when NULL */
static tl_conv2d_options options_or_defaults(const tl_conv2d_options *opts) {
    return opts ? *opts : tl_conv2d_defaults();
}

/* Checks the geometry of images in [N, C, H, W] under weight wt [O, C / groups, kh, kw]; fills
   w for the whole batch (col strides are set per chunk). */
static tl_status check_geometry(const char *op, const int64_t *in, const int64_t *wt,
                                const tl_conv2d_options *o, tl_window2d *w) {
    char si[256], sw[256];
    for (int d = 0; d < 4; d++)
        if (in[d] < 0 || wt[d] < 0)
            return tl_error(TL_ERR_SHAPE,
                            "%s: shapes must not be negative, got input %s, weight %s", op,
                            nn_shape_str(in, 4, si, sizeof si), nn_shape_str(wt, 4, sw, sizeof sw));
    if (wt[2] < 1 || wt[3] < 1)
        return tl_error(TL_ERR_SHAPE, "%s: kernel must be at least 1x1, got weight shape %s", op,
                        nn_shape_str(wt, 4, sw, sizeof sw));
    if (o->groups < 1)
        return tl_error(TL_ERR_ARGUMENT, "%s: groups must be >= 1, got %lld", op,
                        (long long)o->groups);
    int64_t channels;
    if (!tl_size_mul(wt[1], o->groups, &channels) || channels != in[1] || wt[0] % o->groups != 0)
        return tl_error(TL_ERR_SHAPE,
                        "%s: with %lld groups, weight %s needs an input of %lld channels and "
                        "out_channels divisible by the groups; got input %s",
                        op, (long long)o->groups, nn_shape_str(wt, 4, sw, sizeof sw),
                        (long long)(channels == in[1] ? channels : wt[1] * o->groups),
                        nn_shape_str(in, 4, si, sizeof si));
    int64_t out_h, out_w;
    TL_TRY(tl_window_out_size(op, "height", in[2], wt[2], o->stride[0], o->padding[0],
                              o->dilation[0], false, &out_h));
    TL_TRY(tl_window_out_size(op, "width", in[3], wt[3], o->stride[1], o->padding[1],
                              o->dilation[1], false, &out_w));
    /* the output, and the scratch per sample (columns [C kh kw, out_h out_w] plus the output
       and a row of ones), must have sizes that can be counted */
    int64_t out_shape[4] = {in[0], wt[0], out_h, out_w}, numel, plane, rows, scratch;
    if (tl_shape_numel(op, out_shape, 4, &numel) != TL_OK || !tl_size_mul(out_h, out_w, &plane) ||
        !tl_size_mul(in[1], wt[2], &rows) || !tl_size_mul(rows, wt[3], &rows) ||
        !tl_size_add(rows, wt[0], &rows) || !tl_size_add(rows, 1, &rows) ||
        !tl_size_mul(rows, plane, &scratch))
        return tl_error(TL_ERR_SHAPE,
                        "%s: input %s and weight %s with padding %lld x %lld give an output of "
                        "%lld x %lld per channel, too large to compute",
                        op, nn_shape_str(in, 4, si, sizeof si), nn_shape_str(wt, 4, sw, sizeof sw),
                        (long long)o->padding[0], (long long)o->padding[1], (long long)out_h,
                        (long long)out_w);
    *w = nn_window(in, wt[2], wt[3], o->stride[0], o->stride[1], o->padding[0], o->padding[1],
                   out_h, out_w);
    w->dilation_h = o->dilation[0], w->dilation_w = o->dilation[1];
    return TL_OK;
}

static tl_status check_conv(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                            const tl_conv2d_options *o, tl_window2d *w) {
    const char *op = "conv2d";
    char si[256], sw[256], sb[256];
    if (input->ndim != 4)
        return tl_error(TL_ERR_SHAPE, "conv2d: input must be [N, C, H, W], got shape %s",
                        tl_shape_str(input, si, sizeof si));
    if (weight->ndim != 4)
        return tl_error(TL_ERR_SHAPE,
                        "conv2d: weight must be [out_channels, in_channels / groups, kernel_h, "
                        "kernel_w], got shape %s",
                        tl_shape_str(weight, sw, sizeof sw));
    if (o->groups == 1 && input->shape[1] != weight->shape[1])
        return tl_error(TL_ERR_SHAPE,
                        "conv2d: input has %lld channels but weight expects %lld (input shape %s, "
                        "weight shape %s)",
                        (long long)input->shape[1], (long long)weight->shape[1],
                        tl_shape_str(input, si, sizeof si), tl_shape_str(weight, sw, sizeof sw));
    if (bias && (bias->ndim != 1 || bias->shape[0] != weight->shape[0]))
        return tl_error(TL_ERR_SHAPE, "conv2d: bias must have shape [%lld], got %s",
                        (long long)weight->shape[0], tl_shape_str(bias, sb, sizeof sb));
    TL_TRY(nn_check_floating(op, "input", input));
    TL_TRY(nn_check_like(op, "input", input, "weight", weight, true));
    if (bias) TL_TRY(nn_check_like(op, "input", input, "bias", bias, true));
    return check_geometry(op, input->shape, weight->shape, o, w);
}

/* Samples per chunk when each sample needs per_sample elements of scratch: the whole batch
   when it fits the budget, else chunks of about equal size. */
static int64_t chunk_size(int64_t batch, int64_t per_sample) {
    int64_t most = SCRATCH_BUDGET / max1(per_sample);
    if (most < 1) most = 1;
    if (most >= batch) return batch > 0 ? batch : 1;
    int64_t chunks = (batch + most - 1) / most;
    return (batch + chunks - 1) / chunks;
}

/* A [rows, cols] view of the first rows * cols elements of the 1-D buffer. */
static tl_status buffer_view(tl_tensor *buffer, int64_t rows, int64_t cols, tl_tensor **out) {
    tl_tensor *flat;
    TL_TRY(tl_narrow(buffer, 0, 0, rows * cols, &flat));
    int64_t shape[2] = {rows, cols};
    tl_status status = tl_view(flat, shape, 2, out);
    tl_release(flat);
    return status;
}

static GemmParams gemm_params(tl_dtype input_dtype, tl_dtype output_dtype) {
    return (GemmParams){
        .alpha = 1.0f,
        .batch_count = 1,
        .input_dtype = input_dtype,
        .output_dtype = output_dtype,
        .compute_dtype = tl_gemm_compute_dtype(input_dtype),
    };
}

/* p as one GEMM per group, the groups' operands stride_a, stride_b, stride_c elements apart
   (group g's channels are a contiguous run of rows in the columns, the weight and the output) */
static GemmParams per_group(GemmParams p, int64_t groups, int64_t stride_a, int64_t stride_b,
                            int64_t stride_c) {
    p.batch_count = groups;
    p.stride_a = stride_a, p.stride_b = stride_b, p.stride_c = stride_c;
    return p;
}

/* Runs im2col or col2im (op) between columns [CKK, count * P] and samples [b0, b0 + count) of
   images. */
static tl_status run_im2col(tl_op op, tl_tensor *images, int64_t b0, int64_t count,
                            tl_tensor *columns, tl_window2d w) {
    tl_tensor *part;
    TL_TRY(tl_narrow(images, 0, b0, count, &part));
    w.batch = count;
    w.col_row_stride = count * w.out_h * w.out_w;
    w.col_batch_stride = w.out_h * w.out_w;
    bool to_columns = op == TL_OP_im2col;
    tl_tensor *dst = to_columns ? columns : part;
    const tl_tensor *src = to_columns ? part : columns;
    const tl_kernel_entry *k =
        tl_dispatch(op, tl_tensor_device(images), images->dtype, NN_TENSORS(dst, src));
    tl_status status = k ? k->fn.im2col(dst, src, &w) : tl_dispatch_status();
    tl_release(part);
    return status;
}

/* Samples [b0, b0 + count) of t [N, O, P] as one [O, count * P] matrix: t itself for one
   sample, else a copy into the buffer (the samples side by side, as the columns). */
static tl_status samples_side_by_side(tl_tensor *t, int64_t b0, int64_t count, tl_tensor *buffer,
                                      tl_tensor **out) {
    const int64_t O = t->shape[1], P = t->shape[2];
    tl_tensor *part = NULL, *swapped = NULL, *dst = NULL, *flat = NULL;
    tl_status status = tl_narrow(t, 0, b0, count, &part);
    int64_t shape[3] = {O, count, P}, matrix[2] = {O, count * P};
    if (status == TL_OK && count == 1) {
        status = tl_view(part, matrix, 2, out);
    } else if (status == TL_OK) {
        status = tl_transpose(part, 0, 1, &swapped);
        if (status == TL_OK) status = tl_narrow(buffer, 0, 0, O * count * P, &flat);
        if (status == TL_OK) status = tl_view(flat, shape, 3, &dst);
        if (status == TL_OK) status = tl_copy_(dst, swapped);
        if (status == TL_OK) status = tl_view(flat, matrix, 2, out);
    }
    tl_release(part), tl_release(swapped), tl_release(dst), tl_release(flat);
    return status;
}

/* The reverse: y [O, count * P] into samples [b0, b0 + count) of t [N, O, P]. */
static tl_status unpack_samples(const tl_tensor *y, tl_tensor *t, int64_t b0, int64_t count) {
    const int64_t O = t->shape[1], P = t->shape[2];
    tl_tensor *part = NULL, *src = NULL, *swapped = NULL;
    int64_t shape[3] = {O, count, P};
    tl_status status = tl_narrow(t, 0, b0, count, &part);
    if (status == TL_OK) status = tl_view((tl_tensor *)y, shape, 3, &src);
    if (status == TL_OK) status = tl_transpose(src, 0, 1, &swapped);
    if (status == TL_OK) status = tl_copy_(part, swapped);
    tl_release(part), tl_release(src), tl_release(swapped);
    return status;
}

/* out[b0 : b0 + count] = weight [O, CKK] @ columns [CKK, count * P] (+ bias on every
   position), computed as y [O, count * P] (out itself for one sample), then unpacked. */
static tl_status forward_chunk(tl_tensor *out3, int64_t b0, int64_t count, const tl_tensor *columns,
                               const tl_tensor *weight, const tl_tensor *bias,
                               const tl_tensor *ones, tl_tensor *y_buffer, int64_t groups) {
    const int64_t O = out3->shape[1], P = out3->shape[2], c_kk = columns->shape[0];
    const int64_t rows = count * P, group_o = O / groups, group_kk = c_kk / groups;
    tl_device device = tl_tensor_device(out3);
    tl_tensor *y = NULL;
    tl_status status = count == 1 ? samples_side_by_side(out3, b0, 1, NULL, &y)
                                  : buffer_view(y_buffer, O, rows, &y);
    if (status == TL_OK && bias) {
        /* y^T [rows, O] = ones [rows, 1] @ bias^T [1, O] */
        GemmParams p = gemm_params(out3->dtype, out3->dtype);
        p.m = rows, p.n = O, p.k = 1;
        p.lda = max1(rows), p.ldb = 1, p.ldc = max1(rows);
        status =
            tl_gemm(TL_OP_conv2d_forward, device, &p, tl_data(ones), tl_data(bias), tl_data(y));
    }
    if (status == TL_OK) {
        /* per group g: y_g^T [rows, O/g] (+)= columns_g^T [rows, CKK/g] @ weight_g^T [CKK/g, O/g]
         */
        GemmParams p = gemm_params(out3->dtype, out3->dtype);
        p.m = rows, p.n = group_o, p.k = group_kk;
        p.beta = bias ? 1.0f : 0.0f;
        p.lda = max1(rows), p.ldb = max1(group_kk), p.ldc = max1(rows);
        p = per_group(p, groups, group_kk * rows, group_o * group_kk, group_o * rows);
        status = tl_gemm(TL_OP_conv2d_forward, device, &p, tl_data(columns), tl_data(weight),
                         tl_data(y));
    }
    if (status == TL_OK && count > 1) status = unpack_samples(y, out3, b0, count);
    tl_release(y);
    return status;
}

/* ---- by a direct kernel: cuDNN (a CUDA device, tl_cudnn_enabled), or depthwise loops -------- */
/* Whether op (one of the conv2d_dnn rows) runs t's device and dtype. */
static bool use_dnn(tl_op op, const tl_tensor *t) {
    return tl_tensor_device(t).type == TL_DEVICE_CUDA && tl_cudnn_enabled() &&
           tl_has_kernel(op, TL_DEVICE_CUDA, t->dtype);
}

/* Whether a depthwise problem (groups = the C input channels, the weight [C M, 1, kh, kw]) runs
   op (one of the conv2d_depthwise rows) on t's device and dtype, where cuDNN does not. */
static bool use_depthwise(tl_op op, const tl_tensor *t, int64_t channels,
                          const tl_conv2d_options *o) {
    return o->groups == channels && channels > 0 &&
           tl_has_kernel(op, tl_tensor_device(t).type, t->dtype);
}

/* *out (a new tensor of shape) = the conv kernel of op (cuDNN's or the depthwise loops) over a and
   b, made dense; adds bias per channel when given. */
static tl_status run_dnn(tl_op op, const int64_t shape[4], const tl_tensor *a, const tl_tensor *b,
                         const tl_tensor *bias, const tl_conv2d_options *o, tl_tensor **out) {
    tl_device device = tl_tensor_device(a);
    tl_tensor *da = NULL, *db = NULL, *result = NULL, *bias4 = NULL;
    tl_status status = tl_contiguous((tl_tensor *)a, &da);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)b, &db);
    if (status == TL_OK) status = tl_empty(shape, 4, a->dtype, device, &result);
    if (status == TL_OK) {
        const tl_kernel_entry *k = tl_dispatch(op, device, a->dtype, NN_TENSORS(result, da, db));
        status = k ? k->fn.conv(result, da, db, o) : tl_dispatch_status();
    }
    if (status == TL_OK && bias) {
        int64_t bias_shape[4] = {1, shape[1], 1, 1};
        status = tl_view((tl_tensor *)bias, bias_shape, 4, &bias4);
        if (status == TL_OK) status = tl_add_(result, bias4);
    }
    tl_release(da), tl_release(db), tl_release(bias4);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

tl_status tl_conv2d(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                    const tl_conv2d_options *opts, tl_tensor **out) {
    const tl_conv2d_options o = options_or_defaults(opts);
    tl_window2d w;
    TL_TRY(check_conv(input, weight, bias, &o, &w));
    const int64_t out_shape[4] = {w.batch, weight->shape[0], w.out_h, w.out_w};
    if (use_dnn(TL_OP_conv2d_dnn, input))
        return run_dnn(TL_OP_conv2d_dnn, out_shape, input, weight, bias, &o, out);
    if (use_depthwise(TL_OP_conv2d_depthwise, input, input->shape[1], &o))
        return run_dnn(TL_OP_conv2d_depthwise, out_shape, input, weight, bias, &o, out);
    const int64_t N = w.batch, O = weight->shape[0], P = w.out_h * w.out_w;
    const int64_t c_kk = w.channels * w.kernel_h * w.kernel_w;
    const int64_t chunk = chunk_size(N, (c_kk + O + 1) * P);
    tl_device device = tl_tensor_device(input);
    tl_dtype dtype = input->dtype;
    tl_tensor *x = NULL, *wt = NULL, *b = NULL, *result = NULL, *out3 = NULL;
    tl_tensor *col_buffer = NULL, *y_buffer = NULL, *ones = NULL;
    int64_t shape[4] = {N, O, w.out_h, w.out_w}, shape3[3] = {N, O, P};
    tl_status status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)weight, &wt);
    if (status == TL_OK && bias) status = tl_contiguous((tl_tensor *)bias, &b);
    if (status == TL_OK) status = tl_empty(shape, 4, dtype, device, &result);
    if (status == TL_OK) status = tl_view(result, shape3, 3, &out3);
    if (status == TL_OK && N * O * P > 0) {
        int64_t col_size = c_kk * chunk * P, y_size = chunk > 1 ? O * chunk * P : 0;
        int64_t ones_size = chunk * P;
        status = tl_empty(&col_size, 1, dtype, device, &col_buffer);
        if (status == TL_OK) status = tl_empty(&y_size, 1, dtype, device, &y_buffer);
        if (status == TL_OK && b) status = tl_ones(&ones_size, 1, dtype, device, &ones);
        for (int64_t b0 = 0; status == TL_OK && b0 < N; b0 += chunk) {
            int64_t count = N - b0 < chunk ? N - b0 : chunk;
            tl_tensor *columns = NULL;
            status = buffer_view(col_buffer, c_kk, count * P, &columns);
            if (status == TL_OK) status = run_im2col(TL_OP_im2col, x, b0, count, columns, w);
            if (status == TL_OK)
                status = forward_chunk(out3, b0, count, columns, wt, b, ones, y_buffer, o.groups);
            tl_release(columns);
        }
    }
    tl_release(x), tl_release(wt), tl_release(b), tl_release(out3);
    tl_release(col_buffer), tl_release(y_buffer), tl_release(ones);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

/* ---- backward --------------------------------------------------------------------------- */

/* grad must be [N, O, OH, OW] for the given input and weight shapes; *dense: it as a dense
   [N, O, OH * OW]. */
static tl_status check_grad(const char *op, const tl_tensor *grad, const int64_t *input_shape,
                            const int64_t *weight_shape, const tl_window2d *w, tl_tensor **dense) {
    char sg[256], se[256];
    int64_t expected[4] = {input_shape[0], weight_shape[0], w->out_h, w->out_w};
    if (!nn_same_shape(grad, expected, 4))
        return tl_error(TL_ERR_SHAPE, "%s: grad must have shape %s, got %s", op,
                        nn_shape_str(expected, 4, se, sizeof se),
                        tl_shape_str(grad, sg, sizeof sg));
    TL_TRY(nn_check_floating(op, "grad", grad));
    tl_tensor *g;
    TL_TRY(tl_contiguous((tl_tensor *)grad, &g));
    int64_t shape3[3] = {expected[0], expected[1], w->out_h * w->out_w};
    tl_status status = tl_view(g, shape3, 3, dense);
    tl_release(g);
    return status;
}

tl_status tl_conv2d_backward_input(const tl_tensor *grad, const tl_tensor *weight,
                                   const int64_t input_shape[4], const tl_conv2d_options *opts,
                                   tl_tensor **grad_input) {
    const char *op = "conv2d_backward_input";
    const tl_conv2d_options o = options_or_defaults(opts);
    tl_window2d w;
    if (weight->ndim != 4)
        return tl_error(TL_ERR_SHAPE, "%s: weight must be [out_channels, %lld / groups, kh, kw]",
                        op, (long long)input_shape[1]);
    TL_TRY(check_geometry(op, input_shape, weight->shape, &o, &w));
    TL_TRY(nn_check_like(op, "grad", grad, "weight", weight, true));
    const tl_op direct =
        use_dnn(TL_OP_conv2d_dnn_backward_input, grad) ? TL_OP_conv2d_dnn_backward_input
        : use_depthwise(TL_OP_conv2d_depthwise_backward_input, grad, input_shape[1], &o)
            ? TL_OP_conv2d_depthwise_backward_input
            : TL_OP_COUNT;
    if (direct != TL_OP_COUNT) {
        tl_tensor *g;
        TL_TRY(check_grad(op, grad, input_shape, weight->shape, &w, &g));
        tl_release(g);
        return run_dnn(direct, input_shape, grad, weight, NULL, &o, grad_input);
    }
    const int64_t N = w.batch, O = weight->shape[0], P = w.out_h * w.out_w;
    const int64_t c_kk = w.channels * w.kernel_h * w.kernel_w;
    const int64_t chunk = chunk_size(N, (c_kk + O) * P);
    tl_device device = tl_tensor_device(grad);
    tl_dtype dtype = grad->dtype;
    tl_tensor *g = NULL, *wt = NULL, *result = NULL, *col_buffer = NULL, *t_buffer = NULL;
    TL_TRY(check_grad(op, grad, input_shape, weight->shape, &w, &g));
    tl_status status = tl_contiguous((tl_tensor *)weight, &wt);
    if (status == TL_OK && tl_numel(grad) == 0)
        status = tl_zeros(input_shape, 4, dtype, device, &result); /* nothing reaches it */
    else if (status == TL_OK)
        status = tl_empty(input_shape, 4, dtype, device, &result);
    if (status == TL_OK && tl_numel(grad) > 0 && tl_numel(result) > 0) {
        int64_t col_size = c_kk * chunk * P, t_size = chunk > 1 ? O * chunk * P : 0;
        status = tl_empty(&col_size, 1, dtype, device, &col_buffer);
        if (status == TL_OK) status = tl_empty(&t_size, 1, dtype, device, &t_buffer);
        for (int64_t b0 = 0; status == TL_OK && b0 < N; b0 += chunk) {
            int64_t count = N - b0 < chunk ? N - b0 : chunk, rows = count * P;
            tl_tensor *gt = NULL, *columns = NULL;
            status = samples_side_by_side(g, b0, count, t_buffer, &gt);
            if (status == TL_OK) status = buffer_view(col_buffer, c_kk, rows, &columns);
            if (status == TL_OK) {
                /* per group: columns_g^T [rows, CKK/g] = grad_g^T [rows, O/g] @ weight_g */
                const int64_t group_o = O / o.groups, group_kk = c_kk / o.groups;
                GemmParams p = gemm_params(dtype, dtype);
                p.trans_b = true;
                p.m = rows, p.n = group_kk, p.k = group_o;
                p.lda = max1(rows), p.ldb = max1(group_kk), p.ldc = max1(rows);
                p = per_group(p, o.groups, group_o * rows, group_o * group_kk, group_kk * rows);
                status = tl_gemm(TL_OP_conv2d_backward_input, device, &p, tl_data(gt), tl_data(wt),
                                 tl_data(columns));
            }
            if (status == TL_OK) status = run_im2col(TL_OP_col2im, result, b0, count, columns, w);
            tl_release(gt), tl_release(columns);
        }
    }
    tl_release(g), tl_release(wt), tl_release(col_buffer), tl_release(t_buffer);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *grad_input = result;
    return TL_OK;
}

tl_status tl_conv2d_backward_weight(const tl_tensor *grad, const tl_tensor *input,
                                    const int64_t weight_shape[4], const tl_conv2d_options *opts,
                                    tl_tensor **grad_weight) {
    const char *op = "conv2d_backward_weight";
    const tl_conv2d_options o = options_or_defaults(opts);
    tl_window2d w;
    if (input->ndim != 4)
        return tl_error(TL_ERR_SHAPE, "%s: input must be [N, %lld groups, H, W]", op,
                        (long long)weight_shape[1]);
    TL_TRY(check_geometry(op, input->shape, weight_shape, &o, &w));
    TL_TRY(nn_check_like(op, "grad", grad, "input", input, true));
    const tl_op direct =
        use_dnn(TL_OP_conv2d_dnn_backward_weight, grad) ? TL_OP_conv2d_dnn_backward_weight
        : use_depthwise(TL_OP_conv2d_depthwise_backward_weight, grad, input->shape[1], &o)
            ? TL_OP_conv2d_depthwise_backward_weight
            : TL_OP_COUNT;
    if (direct != TL_OP_COUNT) {
        tl_tensor *g;
        TL_TRY(check_grad(op, grad, input->shape, weight_shape, &w, &g));
        tl_release(g);
        return run_dnn(direct, weight_shape, grad, input, NULL, &o, grad_weight);
    }
    const int64_t N = w.batch, O = weight_shape[0], P = w.out_h * w.out_w;
    const int64_t c_kk = w.channels * w.kernel_h * w.kernel_w;
    const int64_t chunk = chunk_size(N, (c_kk + O) * P);
    tl_device device = tl_tensor_device(grad);
    tl_dtype dtype = grad->dtype;
    /* 16-bit gradients sum over the chunks in float32, rounded once at the end */
    tl_dtype acc_dtype = dtype == TL_BF16 || dtype == TL_F16 ? TL_F32 : dtype;
    tl_tensor *g = NULL, *x = NULL, *acc = NULL, *col_buffer = NULL, *t_buffer = NULL;
    tl_tensor *result = NULL;
    TL_TRY(check_grad(op, grad, input->shape, weight_shape, &w, &g));
    int64_t acc_shape[2] = {O, c_kk / o.groups};
    tl_status status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK && (N == 0 || P == 0)) {
        status = tl_zeros(weight_shape, 4, dtype, device, &result);
    } else if (status == TL_OK) {
        int64_t col_size = c_kk * chunk * P, t_size = chunk > 1 ? O * chunk * P : 0;
        status = tl_empty(acc_shape, 2, acc_dtype, device, &acc);
        if (status == TL_OK) status = tl_empty(&col_size, 1, dtype, device, &col_buffer);
        if (status == TL_OK) status = tl_empty(&t_size, 1, dtype, device, &t_buffer);
        for (int64_t b0 = 0; status == TL_OK && b0 < N; b0 += chunk) {
            int64_t count = N - b0 < chunk ? N - b0 : chunk, rows = count * P;
            tl_tensor *columns = NULL, *gt = NULL;
            status = buffer_view(col_buffer, c_kk, rows, &columns);
            if (status == TL_OK) status = run_im2col(TL_OP_im2col, x, b0, count, columns, w);
            if (status == TL_OK) status = samples_side_by_side(g, b0, count, t_buffer, &gt);
            if (status == TL_OK) {
                /* per group: grad_weight_g^T [CKK/g, O/g] (+)= columns_g [CKK/g, rows]
                   @ grad_g^T [rows, O/g] */
                const int64_t group_o = O / o.groups, group_kk = c_kk / o.groups;
                GemmParams p = gemm_params(dtype, acc_dtype);
                p.trans_a = true;
                p.m = group_kk, p.n = group_o, p.k = rows;
                p.beta = b0 > 0 ? 1.0f : 0.0f;
                p.lda = max1(rows), p.ldb = max1(rows), p.ldc = max1(group_kk);
                p = per_group(p, o.groups, group_kk * rows, group_o * rows, group_o * group_kk);
                status = tl_gemm(TL_OP_conv2d_backward_weight, device, &p, tl_data(columns),
                                 tl_data(gt), tl_data(acc));
            }
            tl_release(columns), tl_release(gt);
        }
        tl_tensor *cast = NULL;
        if (status == TL_OK) status = tl_cast(acc, dtype, &cast);
        if (status == TL_OK) status = tl_reshape(cast, weight_shape, 4, &result);
        tl_release(cast);
    }
    tl_release(g), tl_release(x), tl_release(acc), tl_release(col_buffer), tl_release(t_buffer);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *grad_weight = result;
    return TL_OK;
}

tl_status tl_conv2d_backward_bias(const tl_tensor *grad, tl_tensor **grad_bias) {
    const char *op = "conv2d_backward_bias";
    char sg[256];
    if (grad->ndim != 4)
        return tl_error(TL_ERR_SHAPE, "%s: grad must be [N, O, OH, OW], got shape %s", op,
                        tl_shape_str(grad, sg, sizeof sg));
    TL_TRY(nn_check_floating(op, "grad", grad));
    const int64_t N = grad->shape[0], O = grad->shape[1], P = grad->shape[2] * grad->shape[3];
    tl_device device = tl_tensor_device(grad);
    tl_dtype dtype = grad->dtype;
    tl_dtype acc_dtype = dtype == TL_BF16 || dtype == TL_F16 ? TL_F32 : dtype;
    tl_tensor *g = NULL, *ones_p = NULL, *ones_n = NULL, *per_plane = NULL, *sum = NULL;
    tl_tensor *result = NULL;
    int64_t planes = N * O;
    tl_status status = tl_contiguous((tl_tensor *)grad, &g);
    if (status == TL_OK) status = tl_ones(&P, 1, dtype, device, &ones_p);
    if (status == TL_OK) status = tl_ones(&N, 1, acc_dtype, device, &ones_n);
    if (status == TL_OK) status = tl_empty(&planes, 1, acc_dtype, device, &per_plane);
    if (status == TL_OK) status = tl_empty(&O, 1, acc_dtype, device, &sum);
    if (status == TL_OK) {
        /* per_plane [N * O, 1] = grad^T [N * O, P] @ ones [P, 1] */
        GemmParams p = gemm_params(dtype, acc_dtype);
        p.trans_a = true;
        p.m = planes, p.n = 1, p.k = P;
        p.lda = max1(P), p.ldb = max1(P), p.ldc = max1(planes);
        status = tl_gemm(TL_OP_conv2d_backward_bias, device, &p, tl_data(g), tl_data(ones_p),
                         tl_data(per_plane));
    }
    if (status == TL_OK) {
        /* sum [O, 1] = per_plane as [O, N] @ ones [N, 1] */
        GemmParams p = gemm_params(acc_dtype, acc_dtype);
        p.m = O, p.n = 1, p.k = N;
        p.lda = max1(O), p.ldb = max1(N), p.ldc = max1(O);
        status = tl_gemm(TL_OP_conv2d_backward_bias, device, &p, tl_data(per_plane),
                         tl_data(ones_n), tl_data(sum));
    }
    if (status == TL_OK) status = tl_cast(sum, dtype, &result);
    tl_release(g), tl_release(ones_p), tl_release(ones_n), tl_release(per_plane);
    tl_release(sum);
    if (status != TL_OK) return status;
    *grad_bias = result;
    return TL_OK;
}
