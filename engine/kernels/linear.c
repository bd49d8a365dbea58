/* Linear forward, its three split backward kernels and the outer product, each
   one GemmParams handed to tl_gemm. Row-major X[r, c] is column-major X^T with
   ld = X's row stride, so every product below is written for the transposes. */
#include "kernels/linear.h"
#include "kernels/gemm.h"

/* Leading dimension of a row-major matrix with unit column stride. */
static int64_t row_stride(const tl_tensor *t) {
    int64_t ld = t->shape[0] > 1 ? t->strides[0] : t->shape[1];
    return ld > 0 ? ld : 1;
}

static tl_status check_matrix(const char *op, const char *name, const tl_tensor *t, int ndim) {
    if (t->ndim != ndim)
        return tl_error(TL_ERR_SHAPE, "%s: %s must have %d dims, got %d", op, name, ndim, t->ndim);
    if (t->ndim == 2 && ((t->shape[1] > 1 && t->strides[1] != 1) ||
                         (t->shape[0] > 1 && t->strides[0] < t->shape[1])))
        return tl_error(TL_ERR_ARGUMENT, "%s: %s must be row-major with unit column stride", op,
                        name);
    if (t->ndim == 1 && t->shape[0] > 1 && t->strides[0] != 1)
        return tl_error(TL_ERR_ARGUMENT, "%s: %s must be contiguous", op, name);
    return TL_OK;
}

/* Checks the three operands of op (a and b read, c written; ndims as given), then runs
   c = op(a) op(b) as described by p, whose shape fields (trans, m, n, k, lda, ldb) are set by
   the caller; ldc is c's row stride, the dtypes are a's and c's. */
typedef struct operand {
    const char *name;
    const tl_tensor *t;
    int ndim;
} operand;

static tl_status run(tl_op op, operand a, operand b, operand c, GemmParams p) {
    const char *name = tl_op_info_of(op)->name;
    TL_TRY(check_matrix(name, a.name, a.t, a.ndim));
    TL_TRY(check_matrix(name, b.name, b.t, b.ndim));
    TL_TRY(check_matrix(name, c.name, c.t, c.ndim));
    const tl_tensor *out = c.t;
    p.alpha = 1.0f;
    p.input_dtype = a.t->dtype;
    p.output_dtype = out->dtype;
    p.compute_dtype = tl_gemm_compute_dtype(a.t->dtype);
    if (!p.ldc) p.ldc = row_stride(out);
    return tl_gemm(op, tl_tensor_device(out), &p, tl_data(a.t), tl_data(b.t), tl_data(out));
}

static int64_t at_least_one(int64_t v) {
    return v > 0 ? v : 1;
}

/* An epilogue's vector or aux matrix: of the output's dtype and device, the given shape (ndim
   1: [length]; 2: [rows, cols]) and layout. */
static tl_status check_epilogue_operand(const char *op, const char *name, const tl_tensor *t,
                                        const tl_tensor *out, int ndim, int64_t rows,
                                        int64_t cols) {
    TL_TRY(check_matrix(op, name, t, ndim));
    if (t->dtype != out->dtype || !tl_device_equal(tl_tensor_device(t), tl_tensor_device(out)))
        return tl_error(TL_ERR_DTYPE, "%s: %s must have the output's dtype and device (%s)", op,
                        name, tl_dtype_name(out->dtype));
    if (t->shape[0] != (ndim == 1 ? cols : rows) || (ndim == 2 && t->shape[1] != cols))
        return tl_error(TL_ERR_SHAPE, "%s: %s must have %lld x %lld elements", op, name,
                        (long long)(ndim == 1 ? 1 : rows), (long long)cols);
    return TL_OK;
}

/* out^T[O, N] = (weight^T)^T input^T: A = weight^T (column-major I x O), transposed; the bias
   (O values) by the GEMM's epilogue. */
static GemmParams forward_params(const tl_tensor *input, const tl_tensor *weight) {
    return (GemmParams){.trans_a = true,
                        .m = weight->shape[0],
                        .n = input->shape[0],
                        .k = input->shape[1],
                        .lda = row_stride(weight),
                        .ldb = row_stride(input)};
}

tl_status tl_gemm_linear_forward(const tl_tensor *input, const tl_tensor *weight,
                                 const tl_tensor *bias, tl_tensor *out) {
    const char *op = tl_op_info_of(TL_OP_linear_forward)->name;
    GemmParams p = forward_params(input, weight);
    GemmEpilogue epilogue = {.kind = TL_GEMM_EPILOGUE_BIAS};
    if (bias) {
        TL_TRY(check_epilogue_operand(op, "bias", bias, out, 1, 1, weight->shape[0]));
        epilogue.bias = tl_data(bias);
        p.epilogue = &epilogue;
    }
    return run(TL_OP_linear_forward, (operand){"weight", weight, 2}, (operand){"input", input, 2},
               (operand){"out", out, 2}, p);
}

tl_status tl_gemm_linear_add_forward(const tl_tensor *input, const tl_tensor *weight,
                                     tl_tensor *out) {
    GemmParams p = forward_params(input, weight);
    p.beta = 1.0f;
    return run(TL_OP_linear_forward, (operand){"weight", weight, 2}, (operand){"input", input, 2},
               (operand){"out", out, 2}, p);
}

/* The same GEMM with the gelu_aux epilogue: pre^T = the biased product, out^T = gelu(pre^T) */
tl_status tl_gemm_linear_gelu_forward(const tl_tensor *input, const tl_tensor *weight,
                                      const tl_tensor *bias, tl_tensor *out, tl_tensor *pre) {
    const char *op = tl_op_info_of(TL_OP_linear_gelu_forward)->name;
    GemmParams p = forward_params(input, weight);
    TL_TRY(check_epilogue_operand(op, "pre", pre, out, 2, out->shape[0], out->shape[1]));
    if (bias) TL_TRY(check_epilogue_operand(op, "bias", bias, out, 1, 1, weight->shape[0]));
    GemmEpilogue epilogue = {.kind = TL_GEMM_EPILOGUE_GELU_AUX,
                             .bias = bias ? tl_data(bias) : NULL,
                             .aux = tl_data(pre),
                             .ld_aux = row_stride(pre)};
    p.epilogue = &epilogue;
    return run(TL_OP_linear_gelu_forward, (operand){"weight", weight, 2},
               (operand){"input", input, 2}, (operand){"out", out, 2}, p);
}

/* grad_input^T[I, N] = weight^T[I, O] grad_out^T[O, N] */
static GemmParams backward_input_params(const tl_tensor *grad_out, const tl_tensor *weight) {
    return (GemmParams){.m = weight->shape[1],
                        .n = grad_out->shape[0],
                        .k = weight->shape[0],
                        .lda = row_stride(weight),
                        .ldb = row_stride(grad_out)};
}

tl_status tl_gemm_linear_backward_input(const tl_tensor *grad_out, const tl_tensor *weight,
                                        tl_tensor *grad_input) {
    return run(TL_OP_linear_backward_input, (operand){"weight", weight, 2},
               (operand){"grad_out", grad_out, 2}, (operand){"grad_input", grad_input, 2},
               backward_input_params(grad_out, weight));
}

/* The same GEMM with the dgelu epilogue: grad_input^T = (weight^T grad_out^T) * gelu'(pre^T) */
tl_status tl_gemm_linear_backward_input_dgelu(const tl_tensor *grad_out, const tl_tensor *weight,
                                              const tl_tensor *pre, tl_tensor *grad_input) {
    const char *op = tl_op_info_of(TL_OP_linear_backward_input_dgelu)->name;
    TL_TRY(check_epilogue_operand(op, "pre", pre, grad_input, 2, grad_input->shape[0],
                                  grad_input->shape[1]));
    GemmParams p = backward_input_params(grad_out, weight);
    GemmEpilogue epilogue = {
        .kind = TL_GEMM_EPILOGUE_DGELU, .aux = (void *)tl_data(pre), .ld_aux = row_stride(pre)};
    p.epilogue = &epilogue;
    return run(TL_OP_linear_backward_input_dgelu, (operand){"weight", weight, 2},
               (operand){"grad_out", grad_out, 2}, (operand){"grad_input", grad_input, 2}, p);
}

/* grad_weight^T[I, O] = input^T[I, N] grad_out[N, O]; grad_bias[O] = the sums of grad_out's rows
   by the bgradb epilogue (op(B) = grad_out) */
tl_status tl_gemm_linear_backward_weight(const tl_tensor *grad_out, const tl_tensor *input,
                                         bool accumulate, tl_tensor *grad_weight,
                                         tl_tensor *grad_bias) {
    const char *op = tl_op_info_of(TL_OP_linear_backward_weight)->name;
    GemmParams p = {.trans_b = true,
                    .m = input->shape[1],
                    .n = grad_out->shape[1],
                    .k = input->shape[0],
                    .beta = accumulate ? 1.0f : 0.0f,
                    .lda = row_stride(input),
                    .ldb = row_stride(grad_out)};
    GemmEpilogue epilogue = {.kind = TL_GEMM_EPILOGUE_BGRADB};
    if (grad_bias) {
        TL_TRY(check_epilogue_operand(op, "grad_bias", grad_bias, grad_weight, 1, 1,
                                      grad_out->shape[1]));
        epilogue.bias_grad = tl_data(grad_bias);
        p.epilogue = &epilogue;
    }
    return run(TL_OP_linear_backward_weight, (operand){"input", input, 2},
               (operand){"grad_out", grad_out, 2}, (operand){"grad_weight", grad_weight, 2}, p);
}

/* grad_bias[O, 1] = grad_out^T[O, N] ones[N, 1] */
tl_status tl_gemm_linear_backward_bias(const tl_tensor *grad_out, const tl_tensor *ones,
                                       bool accumulate, tl_tensor *grad_bias) {
    return run(TL_OP_linear_backward_bias, (operand){"grad_out", grad_out, 2},
               (operand){"ones", ones, 1}, (operand){"grad_bias", grad_bias, 1},
               (GemmParams){.m = grad_out->shape[1],
                            .n = 1,
                            .k = grad_out->shape[0],
                            .beta = accumulate ? 1.0f : 0.0f,
                            .lda = row_stride(grad_out),
                            .ldb = at_least_one(grad_out->shape[0]),
                            .ldc = at_least_one(grad_out->shape[1])});
}

/* out^T[M, N] = b[M, 1] a^T[1, N] */
tl_status tl_gemm_outer_forward(const tl_tensor *a, const tl_tensor *b, tl_tensor *out) {
    return run(TL_OP_outer_forward, (operand){"b", b, 1}, (operand){"a", a, 1},
               (operand){"out", out, 2},
               (GemmParams){.trans_b = true,
                            .m = b->shape[0],
                            .n = a->shape[0],
                            .k = 1,
                            .lda = at_least_one(b->shape[0]),
                            .ldb = at_least_one(a->shape[0])});
}
