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

static GemmParams params_for(const tl_tensor *in, const tl_tensor *out) {
    return (GemmParams){
        .alpha = 1.0f,
        .input_dtype = in->dtype,
        .output_dtype = out->dtype,
        .compute_dtype = in->dtype == TL_F64 ? TL_F64 : TL_F32,
    };
}

tl_status tl_gemm_linear_forward(const tl_tensor *input, const tl_tensor *weight, bool accumulate,
                                 tl_tensor *out) {
    const char *op = "linear_forward";
    TL_TRY(check_matrix(op, "input", input, 2));
    TL_TRY(check_matrix(op, "weight", weight, 2));
    TL_TRY(check_matrix(op, "out", out, 2));
    /* out^T[O, N] = weight^T^T ... : C = op(A) B with A = weight^T (col-major I x O) */
    GemmParams p = params_for(input, out);
    p.trans_a = true;
    p.m = weight->shape[0];
    p.n = input->shape[0];
    p.k = input->shape[1];
    p.beta = accumulate ? 1.0f : 0.0f;
    p.lda = row_stride(weight);
    p.ldb = row_stride(input);
    p.ldc = row_stride(out);
    return tl_gemm(TL_OP_linear_forward, tl_tensor_device(out), &p, tl_data(weight), tl_data(input),
                   tl_data(out));
}

tl_status tl_gemm_linear_backward_input(const tl_tensor *grad_out, const tl_tensor *weight,
                                        tl_tensor *grad_input) {
    const char *op = "linear_backward_input";
    TL_TRY(check_matrix(op, "grad_out", grad_out, 2));
    TL_TRY(check_matrix(op, "weight", weight, 2));
    TL_TRY(check_matrix(op, "grad_input", grad_input, 2));
    /* grad_input^T[I, N] = weight^T[I, O] grad_out^T[O, N] */
    GemmParams p = params_for(grad_out, grad_input);
    p.m = weight->shape[1];
    p.n = grad_out->shape[0];
    p.k = weight->shape[0];
    p.lda = row_stride(weight);
    p.ldb = row_stride(grad_out);
    p.ldc = row_stride(grad_input);
    return tl_gemm(TL_OP_linear_backward_input, tl_tensor_device(grad_input), &p, tl_data(weight),
                   tl_data(grad_out), tl_data(grad_input));
}

tl_status tl_gemm_linear_backward_weight(const tl_tensor *grad_out, const tl_tensor *input,
                                         tl_tensor *grad_weight) {
    const char *op = "linear_backward_weight";
    TL_TRY(check_matrix(op, "grad_out", grad_out, 2));
    TL_TRY(check_matrix(op, "input", input, 2));
    TL_TRY(check_matrix(op, "grad_weight", grad_weight, 2));
    /* grad_weight^T[I, O] = input^T[I, N] grad_out[N, O] */
    GemmParams p = params_for(grad_out, grad_weight);
    p.trans_b = true;
    p.m = input->shape[1];
    p.n = grad_out->shape[1];
    p.k = input->shape[0];
    p.lda = row_stride(input);
    p.ldb = row_stride(grad_out);
    p.ldc = row_stride(grad_weight);
    return tl_gemm(TL_OP_linear_backward_weight, tl_tensor_device(grad_weight), &p, tl_data(input),
                   tl_data(grad_out), tl_data(grad_weight));
}

tl_status tl_gemm_linear_backward_bias(const tl_tensor *grad_out, const tl_tensor *ones,
                                       tl_tensor *grad_bias) {
    const char *op = "linear_backward_bias";
    TL_TRY(check_matrix(op, "grad_out", grad_out, 2));
    TL_TRY(check_matrix(op, "ones", ones, 1));
    TL_TRY(check_matrix(op, "grad_bias", grad_bias, 1));
    /* grad_bias[O, 1] = grad_out^T[O, N] ones[N, 1] */
    GemmParams p = params_for(grad_out, grad_bias);
    p.m = grad_out->shape[1];
    p.n = 1;
    p.k = grad_out->shape[0];
    p.lda = row_stride(grad_out);
    p.ldb = grad_out->shape[0] > 0 ? grad_out->shape[0] : 1;
    p.ldc = p.m > 0 ? p.m : 1;
    return tl_gemm(TL_OP_linear_backward_bias, tl_tensor_device(grad_bias), &p, tl_data(grad_out),
                   tl_data(ones), tl_data(grad_bias));
}

tl_status tl_gemm_outer_forward(const tl_tensor *a, const tl_tensor *b, tl_tensor *out) {
    const char *op = "outer_forward";
    TL_TRY(check_matrix(op, "a", a, 1));
    TL_TRY(check_matrix(op, "b", b, 1));
    TL_TRY(check_matrix(op, "out", out, 2));
    /* out^T[M, N] = b[M, 1] a^T[1, N] */
    GemmParams p = params_for(a, out);
    p.trans_b = true;
    p.m = b->shape[0];
    p.n = a->shape[0];
    p.k = 1;
    p.lda = p.m > 0 ? p.m : 1;
    p.ldb = p.n > 0 ? p.n : 1;
    p.ldc = row_stride(out);
    return tl_gemm(TL_OP_outer_forward, tl_tensor_device(out), &p, tl_data(b), tl_data(a),
                   tl_data(out));
}
