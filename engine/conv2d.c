/* conv2d by im2col + GEMM: validation, chunking of the batch (bounded column buffer), the
   im2col/col2im kernels and the GemmParams of the forward and of each split backward. */
#include "nn_common.h"

/* Elements of the column buffer of one chunk of samples: the whole batch at once unless a
   chunk would exceed this (16 MiB of float32), then as many samples as fit (at least one). */
#define COLUMN_BUDGET ((int64_t)1 << 22)

static int64_t max1(int64_t v) {
    return v > 1 ? v : 1;
}

/* Checks the geometry; fills w for the whole batch (col strides are set per chunk). */
static tl_status check_geometry(const char *op, const int64_t *in, const int64_t *wt,
                                int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                tl_window2d *w) {
    char si[256], sw[256];
    for (int d = 0; d < 4; d++)
        if (in[d] < 0 || wt[d] < 0)
            return tl_error(TL_ERR_SHAPE,
                            "%s: shapes must not be negative, got input %s, weight %s", op,
                            nn_shape_str(in, 4, si, sizeof si), nn_shape_str(wt, 4, sw, sizeof sw));
    if (wt[2] < 1 || wt[3] < 1)
        return tl_error(TL_ERR_SHAPE, "%s: kernel must be at least 1x1, got weight shape %s", op,
                        nn_shape_str(wt, 4, sw, sizeof sw));
    if (stride_h < 1 || stride_w < 1)
        return tl_error(TL_ERR_ARGUMENT, "%s: stride must be >= 1, got %lld x %lld", op,
                        (long long)stride_h, (long long)stride_w);
    if (pad_h < 0 || pad_w < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: padding must be >= 0, got %lld x %lld", op,
                        (long long)pad_h, (long long)pad_w);
    if (in[2] + 2 * pad_h < wt[2] || in[3] + 2 * pad_w < wt[3])
        return tl_error(TL_ERR_SHAPE,
                        "%s: kernel %lldx%lld is larger than the padded input %lldx%lld (input "
                        "%lldx%lld, padding %lld x %lld)",
                        op, (long long)wt[2], (long long)wt[3], (long long)(in[2] + 2 * pad_h),
                        (long long)(in[3] + 2 * pad_w), (long long)in[2], (long long)in[3],
                        (long long)pad_h, (long long)pad_w);
    *w = (tl_window2d){
        .batch = in[0],
        .channels = in[1],
        .height = in[2],
        .width = in[3],
        .kernel_h = wt[2],
        .kernel_w = wt[3],
        .stride_h = stride_h,
        .stride_w = stride_w,
        .pad_h = pad_h,
        .pad_w = pad_w,
        .out_h = (in[2] + 2 * pad_h - wt[2]) / stride_h + 1,
        .out_w = (in[3] + 2 * pad_w - wt[3]) / stride_w + 1,
    };
    return TL_OK;
}

static tl_status check_conv(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                            int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                            tl_window2d *w) {
    const char *op = "conv2d";
    char si[256], sw[256], sb[256];
    if (input->ndim != 4)
        return tl_error(TL_ERR_SHAPE, "conv2d: input must be [N, C, H, W], got shape %s",
                        tl_shape_str(input, si, sizeof si));
    if (weight->ndim != 4)
        return tl_error(TL_ERR_SHAPE,
                        "conv2d: weight must be [out_channels, in_channels, kernel_h, kernel_w], "
                        "got shape %s",
                        tl_shape_str(weight, sw, sizeof sw));
    if (input->shape[1] != weight->shape[1])
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
    return check_geometry(op, input->shape, weight->shape, stride_h, stride_w, pad_h, pad_w, w);
}

/* Samples per chunk for columns of c_kk rows and positions per sample. */
static int64_t chunk_size(int64_t batch, int64_t c_kk, int64_t positions) {
    int64_t per_sample = max1(c_kk * positions);
    int64_t chunk = COLUMN_BUDGET / per_sample;
    if (chunk < 1) chunk = 1;
    return chunk < batch ? chunk : batch;
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
        .batch_count = 1, /* a single GEMM unless set */
        .input_dtype = input_dtype,
        .output_dtype = output_dtype,
        .compute_dtype = input_dtype == TL_F64 ? TL_F64 : TL_F32,
    };
}

static char *element(const tl_tensor *t, int64_t index) {
    return (char *)tl_data(t) + index * (int64_t)tl_dtype_size(t->dtype);
}

/* Runs im2col or col2im (op) between the columns and samples [b0, b0 + count) of images. */
static tl_status run_im2col(tl_op op, tl_tensor *images, int64_t b0, int64_t count,
                            tl_tensor *columns, tl_window2d w) {
    tl_tensor *part;
    TL_TRY(tl_narrow(images, 0, b0, count, &part));
    w.batch = count;
    bool to_columns = op == TL_OP_im2col;
    const tl_tensor *out = to_columns ? columns : part, *in = to_columns ? part : columns;
    const tl_kernel_entry *k =
        tl_dispatch(op, tl_tensor_device(images), images->dtype, NN_TENSORS(out, in));
    tl_status status =
        k ? k->fn.im2col(to_columns ? columns : part, to_columns ? part : columns, &w)
          : TL_ERR_DTYPE;
    tl_release(part);
    return status;
}

/* out[n]^T [P, O] = columns_n^T [P, CKK] @ weight^T [CKK, O] for the samples of the chunk
   (columns [CKK, count * P]), after out[n] = bias on every position when there is one. */
static tl_status forward_chunk(tl_tensor *result, int64_t b0, int64_t count,
                               const tl_tensor *columns, const tl_tensor *weight,
                               const tl_tensor *bias, const tl_tensor *ones, int64_t c_kk,
                               int64_t positions) {
    const int64_t O = weight->shape[0], P = positions;
    tl_device device = tl_tensor_device(result);
    void *c = element(result, b0 * O * P);
    if (bias) {
        /* out_n^T [P, O] = ones [P, 1] @ bias^T [1, O] */
        GemmParams p = gemm_params(result->dtype, result->dtype);
        p.m = P, p.n = O, p.k = 1;
        p.lda = max1(P), p.ldb = 1, p.ldc = max1(P);
        p.batch_count = count, p.stride_a = 0, p.stride_b = 0, p.stride_c = O * P;
        TL_TRY(tl_gemm(TL_OP_conv2d_forward, device, &p, tl_data(ones), tl_data(bias), c));
    }
    GemmParams p = gemm_params(result->dtype, result->dtype);
    p.m = P, p.n = O, p.k = c_kk;
    p.beta = bias ? 1.0f : 0.0f;
    p.lda = max1(count * P), p.ldb = max1(c_kk), p.ldc = max1(P);
    p.batch_count = count, p.stride_a = P, p.stride_b = 0, p.stride_c = O * P;
    return tl_gemm(TL_OP_conv2d_forward, device, &p, tl_data(columns), tl_data(weight), c);
}

tl_status tl_conv2d(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                    tl_tensor **out) {
    tl_window2d w;
    TL_TRY(check_conv(input, weight, bias, stride_h, stride_w, pad_h, pad_w, &w));
    const int64_t N = w.batch, O = weight->shape[0], P = w.out_h * w.out_w;
    const int64_t c_kk = w.channels * w.kernel_h * w.kernel_w;
    const int64_t chunk = chunk_size(N, c_kk, P);
    tl_device device = tl_tensor_device(input);
    tl_tensor *x = NULL, *wt = NULL, *b = NULL, *result = NULL, *buffer = NULL, *ones = NULL;
    int64_t shape[4] = {N, O, w.out_h, w.out_w};
    tl_status status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)weight, &wt);
    if (status == TL_OK && bias) status = tl_contiguous((tl_tensor *)bias, &b);
    if (status == TL_OK) status = tl_empty(shape, 4, input->dtype, device, &result);
    if (status == TL_OK && N * O * P > 0) {
        int64_t size = c_kk * chunk * P;
        status = tl_empty(&size, 1, input->dtype, device, &buffer);
        if (status == TL_OK && b) status = tl_ones(&P, 1, input->dtype, device, &ones);
        for (int64_t b0 = 0; status == TL_OK && b0 < N; b0 += chunk) {
            int64_t count = N - b0 < chunk ? N - b0 : chunk;
            tl_tensor *columns = NULL;
            w.col_row_stride = count * P, w.col_batch_stride = P;
            status = buffer_view(buffer, c_kk, count * P, &columns);
            if (status == TL_OK) status = run_im2col(TL_OP_im2col, x, b0, count, columns, w);
            if (status == TL_OK)
                status = forward_chunk(result, b0, count, columns, wt, b, ones, c_kk, P);
            tl_release(columns);
        }
    }
    tl_release(x), tl_release(wt), tl_release(b), tl_release(buffer), tl_release(ones);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

/* ---- backward --------------------------------------------------------------------------- */

/* grad must be [N, O, OH, OW] for the given input and weight shapes; a dense copy in dtype. */
static tl_status check_grad(const char *op, const tl_tensor *grad, const int64_t *input_shape,
                            const int64_t *weight_shape, const tl_window2d *w, tl_tensor **dense) {
    char sg[256], se[256];
    int64_t expected[4] = {input_shape[0], weight_shape[0], w->out_h, w->out_w};
    if (!nn_same_shape(grad, expected, 4))
        return tl_error(TL_ERR_SHAPE, "%s: grad must have shape %s, got %s", op,
                        nn_shape_str(expected, 4, se, sizeof se),
                        tl_shape_str(grad, sg, sizeof sg));
    TL_TRY(nn_check_floating(op, "grad", grad));
    return tl_contiguous((tl_tensor *)grad, dense);
}

tl_status tl_conv2d_backward_input(const tl_tensor *grad, const tl_tensor *weight,
                                   const int64_t input_shape[4], int64_t stride_h, int64_t stride_w,
                                   int64_t pad_h, int64_t pad_w, tl_tensor **grad_input) {
    const char *op = "conv2d_backward_input";
    tl_window2d w;
    if (weight->ndim != 4 || input_shape[1] != weight->shape[1])
        return tl_error(TL_ERR_SHAPE, "%s: weight must be [out_channels, %lld, kh, kw]", op,
                        (long long)input_shape[1]);
    TL_TRY(check_geometry(op, input_shape, weight->shape, stride_h, stride_w, pad_h, pad_w, &w));
    TL_TRY(nn_check_like(op, "grad", grad, "weight", weight, true));
    const int64_t N = w.batch, O = weight->shape[0], P = w.out_h * w.out_w;
    const int64_t c_kk = w.channels * w.kernel_h * w.kernel_w;
    const int64_t chunk = chunk_size(N, c_kk, P);
    tl_device device = tl_tensor_device(grad);
    tl_tensor *g = NULL, *wt = NULL, *result = NULL, *buffer = NULL;
    TL_TRY(check_grad(op, grad, input_shape, weight->shape, &w, &g));
    tl_status status = tl_contiguous((tl_tensor *)weight, &wt);
    if (status == TL_OK) status = tl_empty(input_shape, 4, grad->dtype, device, &result);
    if (status == TL_OK && tl_numel(result) > 0 && (O == 0 || P == 0)) {
        tl_release(result); /* nothing reaches the input */
        result = NULL;
        status = tl_zeros(input_shape, 4, grad->dtype, device, &result);
    } else if (status == TL_OK && tl_numel(result) > 0) {
        int64_t size = c_kk * chunk * P;
        status = tl_empty(&size, 1, grad->dtype, device, &buffer);
        for (int64_t b0 = 0; status == TL_OK && b0 < N; b0 += chunk) {
            int64_t count = N - b0 < chunk ? N - b0 : chunk;
            /* columns_n^T [P, CKK] = grad_n^T [P, O] @ weight [O, CKK], columns as
               [count, CKK, P] */
            GemmParams p = gemm_params(grad->dtype, grad->dtype);
            p.trans_b = true;
            p.m = P, p.n = c_kk, p.k = O;
            p.lda = max1(P), p.ldb = max1(c_kk), p.ldc = max1(P);
            p.batch_count = count, p.stride_a = O * P, p.stride_b = 0, p.stride_c = c_kk * P;
            status = tl_gemm(TL_OP_conv2d_backward_input, device, &p, element(g, b0 * O * P),
                             tl_data(wt), tl_data(buffer));
            tl_tensor *columns = NULL;
            if (status == TL_OK) status = buffer_view(buffer, count * c_kk, P, &columns);
            w.col_row_stride = P, w.col_batch_stride = c_kk * P;
            if (status == TL_OK) status = run_im2col(TL_OP_col2im, result, b0, count, columns, w);
            tl_release(columns);
        }
    }
    tl_release(g), tl_release(wt), tl_release(buffer);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *grad_input = result;
    return TL_OK;
}

tl_status tl_conv2d_backward_weight(const tl_tensor *grad, const tl_tensor *input,
                                    const int64_t weight_shape[4], int64_t stride_h,
                                    int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                    tl_tensor **grad_weight) {
    const char *op = "conv2d_backward_weight";
    tl_window2d w;
    if (input->ndim != 4 || input->shape[1] != weight_shape[1])
        return tl_error(TL_ERR_SHAPE, "%s: input must be [N, %lld, H, W]", op,
                        (long long)weight_shape[1]);
    TL_TRY(check_geometry(op, input->shape, weight_shape, stride_h, stride_w, pad_h, pad_w, &w));
    TL_TRY(nn_check_like(op, "grad", grad, "input", input, true));
    const int64_t N = w.batch, O = weight_shape[0], P = w.out_h * w.out_w;
    const int64_t c_kk = w.channels * w.kernel_h * w.kernel_w;
    const int64_t chunk = chunk_size(N, c_kk, P);
    tl_device device = tl_tensor_device(grad);
    tl_dtype dtype = grad->dtype;
    /* 16-bit gradients sum over the chunks in float32, rounded once at the end */
    tl_dtype acc_dtype = dtype == TL_BF16 || dtype == TL_F16 ? TL_F32 : dtype;
    tl_tensor *g = NULL, *x = NULL, *acc = NULL, *buffer = NULL, *transposed = NULL;
    tl_tensor *result = NULL;
    TL_TRY(check_grad(op, grad, input->shape, weight_shape, &w, &g));
    int64_t acc_shape[2] = {O, c_kk};
    tl_status status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK && (N == 0 || P == 0)) {
        status = tl_zeros(weight_shape, 4, dtype, device, &result);
    } else if (status == TL_OK) {
        int64_t size = c_kk * chunk * P, t_size = O * chunk * P;
        status = tl_empty(acc_shape, 2, acc_dtype, device, &acc);
        if (status == TL_OK) status = tl_empty(&size, 1, dtype, device, &buffer);
        if (status == TL_OK) status = tl_empty(&t_size, 1, dtype, device, &transposed);
        int64_t g3_shape[3] = {N, O, P};
        tl_tensor *g3 = NULL;
        if (status == TL_OK) status = tl_view(g, g3_shape, 3, &g3);
        for (int64_t b0 = 0; status == TL_OK && b0 < N; b0 += chunk) {
            int64_t count = N - b0 < chunk ? N - b0 : chunk;
            tl_tensor *columns = NULL, *part = NULL, *swapped = NULL, *flat = NULL, *dst = NULL;
            w.col_row_stride = count * P, w.col_batch_stride = P;
            status = buffer_view(buffer, c_kk, count * P, &columns);
            if (status == TL_OK) status = run_im2col(TL_OP_im2col, x, b0, count, columns, w);
            /* grad of the chunk as [O, count * P]: the samples side by side */
            if (status == TL_OK) status = tl_narrow(g3, 0, b0, count, &part);
            if (status == TL_OK) status = tl_transpose(part, 0, 1, &swapped);
            if (status == TL_OK) status = tl_narrow(transposed, 0, 0, O * count * P, &flat);
            int64_t dst_shape[3] = {O, count, P};
            if (status == TL_OK) status = tl_view(flat, dst_shape, 3, &dst);
            if (status == TL_OK) status = tl_copy_(dst, swapped);
            /* grad_weight^T [CKK, O] (+)= columns [CKK, count * P] @ grad_chunk^T [count * P, O] */
            GemmParams p = gemm_params(dtype, acc_dtype);
            p.trans_a = true;
            p.m = c_kk, p.n = O, p.k = count * P;
            p.beta = b0 > 0 ? 1.0f : 0.0f;
            p.lda = max1(count * P), p.ldb = max1(count * P), p.ldc = max1(c_kk);
            if (status == TL_OK)
                status = tl_gemm(TL_OP_conv2d_backward_weight, device, &p, tl_data(columns),
                                 tl_data(dst), tl_data(acc));
            tl_release(columns), tl_release(part), tl_release(swapped), tl_release(flat);
            tl_release(dst);
        }
        tl_release(g3);
        tl_tensor *cast = NULL;
        if (status == TL_OK) status = tl_cast(acc, dtype, &cast);
        if (status == TL_OK) status = tl_reshape(cast, weight_shape, 4, &result);
        tl_release(cast);
    }
    tl_release(g), tl_release(x), tl_release(acc), tl_release(buffer), tl_release(transposed);
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
