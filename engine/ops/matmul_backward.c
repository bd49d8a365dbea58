/* The split matmul backward ops: one batched GEMM each (through tl_matmul_as, traced as
   matmul_backward_input / _other), then the sum over broadcast batch dims. 1-D operands are
   handled as matrices of one row or column, as torch.matmul treats them. */
#include "ops/matmul.h"
#include "tlua/ops.h"

/* Views of grad and the saved operand as matrices: a 1-D input is [1, k] and
   removed dim -2 from grad; a 1-D other is [k, 1] and removed dim -1. */
static tl_status as_matrices(const tl_tensor *grad, const tl_tensor *saved, bool saved_is_other,
                             int input_ndim, int other_ndim, tl_tensor **grad_m,
                             tl_tensor **saved_m) {
    tl_tensor *g = tl_retain((tl_tensor *)grad), *next;
    tl_status status = TL_OK;
    if (input_ndim == 1 && status == TL_OK) {
        status = tl_unsqueeze(g, g->ndim - (other_ndim == 1 ? 0 : 1), &next);
        if (status == TL_OK) tl_release(g), g = next;
    }
    if (other_ndim == 1 && status == TL_OK) {
        status = tl_unsqueeze(g, g->ndim, &next);
        if (status == TL_OK) tl_release(g), g = next;
    }
    tl_tensor *s = NULL;
    if (status == TL_OK) {
        bool one_d = saved_is_other ? other_ndim == 1 : input_ndim == 1;
        if (!one_d)
            s = tl_retain((tl_tensor *)saved);
        else
            status = tl_unsqueeze((tl_tensor *)saved, saved_is_other ? 1 : 0, &s);
    }
    if (status != TL_OK) {
        tl_release(g);
        return status;
    }
    *grad_m = g;
    *saved_m = s;
    return TL_OK;
}

/* Sums full down to the operand's matrix shape, then gives it the operand's shape. */
static tl_status to_operand_shape(tl_tensor *full, const int64_t *shape, int ndim, int64_t rows,
                                  int64_t cols, tl_tensor **out) {
    int64_t matrix_shape[TL_MAX_DIMS];
    int matrix_ndim = ndim;
    if (ndim == 1) {
        matrix_shape[0] = rows, matrix_shape[1] = cols, matrix_ndim = 2;
    } else {
        for (int d = 0; d < ndim; d++) matrix_shape[d] = shape[d];
    }
    tl_tensor *summed;
    TL_TRY(tl_sum_to_shape(full, matrix_shape, matrix_ndim, &summed));
    tl_status status = tl_reshape(summed, shape, ndim, out);
    tl_release(summed);
    return status;
}

tl_status tl_matmul_backward_input(const tl_tensor *grad, const tl_tensor *other,
                                   const int64_t *input_shape, int input_ndim, tl_tensor **out) {
    tl_tensor *g, *b, *b_t = NULL, *full = NULL;
    TL_TRY(as_matrices(grad, other, true, input_ndim, other->ndim, &g, &b));
    tl_status status = tl_transpose(b, -1, -2, &b_t);
    if (status == TL_OK) status = tl_matmul_as(TL_OP_matmul_backward_input, g, b_t, &full);
    if (status == TL_OK)
        status = to_operand_shape(full, input_shape, input_ndim, 1,
                                  input_ndim == 1 ? input_shape[0] : 0, out);
    else
        tl_release(full);
    tl_release(g), tl_release(b), tl_release(b_t);
    return status;
}

tl_status tl_matmul_backward_other(const tl_tensor *grad, const tl_tensor *input,
                                   const int64_t *other_shape, int other_ndim, tl_tensor **out) {
    tl_tensor *g, *a, *a_t = NULL, *full = NULL;
    TL_TRY(as_matrices(grad, input, false, input->ndim, other_ndim, &g, &a));
    tl_status status = tl_transpose(a, -1, -2, &a_t);
    if (status == TL_OK) status = tl_matmul_as(TL_OP_matmul_backward_other, a_t, g, &full);
    if (status == TL_OK)
        status = to_operand_shape(full, other_shape, other_ndim,
                                  other_ndim == 1 ? other_shape[0] : 0, 1, out);
    else
        tl_release(full);
    tl_release(g), tl_release(a), tl_release(a_t);
    return status;
}
