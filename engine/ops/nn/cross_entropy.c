/* cross_entropy as ops: targets checked, fused forward keeping log-sum-exp, its backward. */
#include <math.h>

#include "ops/nn/nn_common.h"

/* The dtype of the per-row log-sum-exp: float64 for float64 logits, else float32. */
static tl_dtype lse_dtype(tl_dtype dtype) {
    return dtype == TL_F64 ? TL_F64 : TL_F32;
}

static tl_status check_inputs(const char *op, const tl_tensor *logits, const tl_tensor *target,
                              double label_smoothing) {
    char sl[256], st[256];
    if (logits->ndim != 2 || logits->shape[1] < 1)
        return tl_error(TL_ERR_SHAPE,
                        "%s: logits must be [N, C] with at least one class, got shape %s", op,
                        tl_shape_str(logits, sl, sizeof sl));
    TL_TRY(nn_check_floating(op, "logits", logits));
    TL_TRY(nn_check_integer(op, "target", target));
    TL_TRY(nn_check_like(op, "logits", logits, "target", target, false));
    if (target->ndim != 1 || target->shape[0] != logits->shape[0])
        return tl_error(TL_ERR_SHAPE,
                        "%s: target must be [%lld] (one class index per row of logits %s), got "
                        "shape %s",
                        op, (long long)logits->shape[0], tl_shape_str(logits, sl, sizeof sl),
                        tl_shape_str(target, st, sizeof st));
    if (!(label_smoothing >= 0 && label_smoothing <= 1))
        return tl_error(TL_ERR_ARGUMENT, "%s: label_smoothing must be in [0, 1], got %g", op,
                        label_smoothing);
    const tl_index_range range = {.op = op,
                                  .what = "target",
                                  .range_of = "the classes",
                                  .first = 0,
                                  .count = logits->shape[1]};
    return tl_check_index_range(target, &range);
}

tl_status tl_cross_entropy(const tl_tensor *logits, const tl_tensor *target, double label_smoothing,
                           tl_tensor **loss, tl_tensor **log_sum_exp) {
    TL_TRY(check_inputs("cross_entropy", logits, target, label_smoothing));
    tl_device device = tl_tensor_device(logits);
    tl_tensor *x = NULL, *t = NULL, *result = NULL, *lse = NULL;
    tl_status status = tl_contiguous((tl_tensor *)logits, &x);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)target, &t);
    if (status == TL_OK) status = tl_empty(NULL, 0, logits->dtype, device, &result);
    if (status == TL_OK)
        status = tl_empty(logits->shape, 1, lse_dtype(logits->dtype), device, &lse);
    if (status == TL_OK) {
        const tl_kernel_entry *k =
            tl_dispatch(TL_OP_cross_entropy, device, logits->dtype, NN_TENSORS(result, x, t));
        status = k ? k->fn.cross_entropy(result, lse, x, t, label_smoothing) : tl_dispatch_status();
    }
    tl_release(x), tl_release(t);
    if (status != TL_OK) {
        tl_release(result), tl_release(lse);
        return status;
    }
    *loss = result;
    if (log_sum_exp)
        *log_sum_exp = lse;
    else
        tl_release(lse);
    return TL_OK;
}

tl_status tl_cross_entropy_backward(const tl_tensor *grad, const tl_tensor *logits,
                                    const tl_tensor *target, const tl_tensor *log_sum_exp,
                                    double label_smoothing, tl_tensor **grad_logits) {
    const char *op = "cross_entropy_backward";
    char sg[256];
    TL_TRY(check_inputs(op, logits, target, label_smoothing));
    if (tl_numel(grad) != 1)
        return tl_error(TL_ERR_SHAPE, "%s: grad must have one element (the loss's), got shape %s",
                        op, tl_shape_str(grad, sg, sizeof sg));
    TL_TRY(nn_check_floating(op, "grad", grad));
    TL_TRY(nn_check_like(op, "logits", logits, "grad", grad, false));
    tl_dtype acc = lse_dtype(logits->dtype);
    if (!nn_same_shape(log_sum_exp, logits->shape, 1) || log_sum_exp->dtype != acc)
        return tl_error(TL_ERR_SHAPE, "%s: log_sum_exp must be %s [%lld], got %s %s", op,
                        tl_dtype_name(acc), (long long)logits->shape[0],
                        tl_dtype_name(log_sum_exp->dtype),
                        tl_shape_str(log_sum_exp, sg, sizeof sg));
    TL_TRY(nn_check_like(op, "logits", logits, "log_sum_exp", log_sum_exp, false));
    tl_device device = tl_tensor_device(logits);
    tl_tensor *g = NULL, *g_dense = NULL, *x = NULL, *t = NULL, *lse = NULL, *result = NULL;
    tl_status status = tl_cast((tl_tensor *)grad, logits->dtype, &g);
    if (status == TL_OK) status = tl_contiguous(g, &g_dense);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)logits, &x);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)target, &t);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)log_sum_exp, &lse);
    if (status == TL_OK) status = tl_empty(logits->shape, 2, logits->dtype, device, &result);
    if (status == TL_OK) {
        const tl_kernel_entry *k = tl_dispatch(TL_OP_cross_entropy_backward, device, logits->dtype,
                                               NN_TENSORS(result, x, t, g_dense));
        status = k ? k->fn.cross_entropy_backward(result, g_dense, x, lse, t, label_smoothing)
                   : tl_dispatch_status();
    }
    tl_release(g), tl_release(g_dense), tl_release(x), tl_release(t), tl_release(lse);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *grad_logits = result;
    return TL_OK;
}
