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

/* out^T[O, N] = (weight^T)^T input^T: A = weight^T (column-major I x O), transposed */
tl_status tl_gemm_linear_forward(const tl_tensor *input, const tl_tensor *weight, bool accumulate,
                                 tl_tensor *out) {
    return run(TL_OP_linear_forward, (operand){"weight", weight, 2}, (operand){"input", input, 2},
               (operand){"out", out, 2},
               (GemmParams){.trans_a = true,
                            .m = weight->shape[0],
                            .n = input->shape[0],
                            .k = input->shape[1],
                            .beta = accumulate ? 1.0f : 0.0f,
                            .lda = row_stride(weight),
                            .ldb = row_stride(input)});
}

/* grad_input^T[I, N] = weight^T[I, O] grad_out^T[O, N] */
tl_status tl_gemm_linear_backward_input(const tl_tensor *grad_out, const tl_tensor *weight,
                                        tl_tensor *grad_input) {
    return run(TL_OP_linear_backward_input, (operand){"weight", weight, 2},
               (operand){"grad_out", grad_out, 2}, (operand){"grad_input", grad_input, 2},
               (GemmParams){.m = weight->shape[1],
                            .n = grad_out->shape[0],
                            .k = weight->shape[0],
                            .lda = row_stride(weight),
                            .ldb = row_stride(grad_out)});
}

/* grad_weight^T[I, O] = input^T[I, N] grad_out[N, O] */
tl_status tl_gemm_linear_backward_weight(const tl_tensor *grad_out, const tl_tensor *input,
                                         bool accumulate, tl_tensor *grad_weight) {
    return run(TL_OP_linear_backward_weight, (operand){"input", input, 2},
               (operand){"grad_out", grad_out, 2}, (operand){"grad_weight", grad_weight, 2},
               (GemmParams){.trans_b = true,
                            .m = input->shape[1],
                            .n = grad_out->shape[1],
                            .k = input->shape[0],
                            .beta = accumulate ? 1.0f : 0.0f,
                            .lda = row_stride(input),
                            .ldb = row_stride(grad_out)});
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
