/* batch_norm as ops: per-channel statistics and running update in the forward, the per-channel
   sums and the input gradient of the backward. */
#include <math.h>

#include "ops/checks.h"
#include "ops/nn/nn_common.h"

/* mean/invstd (and the per-channel operands the kernels read): float64 for float64, else
   float32 */
static tl_dtype stats_dtype(tl_dtype dtype) {
    return dtype == TL_F64 ? TL_F64 : TL_F32;
}

/* input (or the tensor named name): [N, C, ...] of a floating dtype */
static tl_status check_named(const char *op, const char *name, const tl_tensor *input) {
    char si[256];
    TL_TRY(tl_check_tensor_arg(op, name, input));
    if (input->ndim < 2)
        return tl_error(TL_ERR_SHAPE, "%s: %s must have at least 2 dims [N, C, ...], got %s", op,
                        name, tl_shape_str(input, si, sizeof si));
    return nn_check_floating(op, name, input);
}

static tl_status check_input(const char *op, const tl_tensor *input) {
    return check_named(op, "input", input);
}

/* A per-channel tensor t (named name): [C] of a floating dtype on input's device. */
static tl_status check_channel(const char *op, const char *name, const tl_tensor *input,
                               const tl_tensor *t) {
    char st[256], si[256];
    TL_TRY(tl_check_tensor_arg(op, name, t));
    if (t->ndim != 1 || t->shape[0] != input->shape[1])
        return tl_error(TL_ERR_SHAPE, "%s: %s must be [%lld] (the channels of input %s), got %s",
                        op, name, (long long)input->shape[1], tl_shape_str(input, si, sizeof si),
                        tl_shape_str(t, st, sizeof st));
    TL_TRY(nn_check_floating(op, name, t));
    return nn_check_like(op, "input", input, name, t, false);
}

/* A saved statistic or sum t: [C] of the statistics dtype. */
static tl_status check_stat(const char *op, const char *name, const tl_tensor *input,
                            const tl_tensor *t) {
    TL_TRY(check_channel(op, name, input, t));
    if (t->dtype != stats_dtype(input->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: %s must be %s (the statistics of a %s input), got %s",
                        op, name, tl_dtype_name(stats_dtype(input->dtype)),
                        tl_dtype_name(input->dtype), tl_dtype_name(t->dtype));
    return TL_OK;
}

static tl_status check_grad(const char *op, const tl_tensor *grad, const tl_tensor *input) {
    char sg[256], si[256];
    TL_TRY(tl_check_tensor_arg(op, "grad", grad));
    if (!nn_same_shape(grad, input->shape, input->ndim))
        return tl_error(TL_ERR_SHAPE, "%s: grad has shape %s but the input has %s", op,
                        tl_shape_str(grad, sg, sizeof sg), tl_shape_str(input, si, sizeof si));
    return nn_check_like(op, "input", input, "grad", grad, true);
}

/* The elements of one channel: N times the trailing sizes (overflow-checked by the tensor's own
   numel, which fits). */
static int64_t per_channel(const tl_tensor *input) {
    return input->shape[1] > 0 ? tl_numel(input) / input->shape[1] : 0;
}

static tl_status check_forward(const char *op, const tl_tensor *input, const tl_tensor *weight,
                               const tl_tensor *bias, const tl_tensor *running_mean,
                               const tl_tensor *running_var, bool training, double momentum,
                               double eps) {
    char si[256];
    TL_TRY(check_input(op, input));
    if (weight) TL_TRY(check_channel(op, "weight", input, weight));
    if (bias) TL_TRY(check_channel(op, "bias", input, bias));
    if (!running_mean != !running_var)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: running_mean and running_var must be both tensors or both absent", op);
    if (running_mean) {
        TL_TRY(check_channel(op, "running_mean", input, running_mean));
        TL_TRY(check_channel(op, "running_var", input, running_var));
        if (training) {
            TL_TRY(tl_check_writable(op, "running_mean", running_mean));
            TL_TRY(tl_check_writable(op, "running_var", running_var));
            if (tl_may_overlap(running_mean, running_var))
                return tl_error(TL_ERR_ARGUMENT, "%s: running_mean and running_var overlap", op);
        }
    } else if (!training) {
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: running_mean and running_var are required when not training", op);
    }
    if (!(eps >= 0)) return tl_error(TL_ERR_ARGUMENT, "%s: eps must be >= 0, got %g", op, eps);
    if (training && !(momentum >= 0 && momentum <= 1))
        return tl_error(TL_ERR_ARGUMENT, "%s: momentum must be in [0, 1], got %g", op, momentum);
    if (training && per_channel(input) == 1)
        return tl_error(TL_ERR_SHAPE,
                        "%s: expected more than 1 value per channel when training, got input "
                        "of shape %s",
                        op, tl_shape_str(input, si, sizeof si));
    return TL_OK;
}

/* t (a per-channel operand, may be NULL) as a contiguous tensor of dtype (itself when it is
   one). */
static tl_status channel_operand(const tl_tensor *t, tl_dtype dtype, tl_tensor **out) {
    *out = NULL;
    if (!t) return TL_OK;
    tl_tensor *cast;
    TL_TRY(tl_cast((tl_tensor *)t, dtype, &cast));
    tl_status status = tl_contiguous(cast, out);
    tl_release(cast);
    return status;
}

/* The running statistic r in the form the kernel updates: r itself when contiguous of dtype
   and apart from out, else a copy (*copied set: written back after the kernel). */
static tl_status running_operand(tl_tensor *r, tl_dtype dtype, const tl_tensor *avoid,
                                 tl_tensor **out, bool *copied) {
    *out = NULL, *copied = false;
    if (!r) return TL_OK;
    if (r->dtype == dtype && tl_is_contiguous(r) && !tl_may_overlap(r, avoid)) {
        *out = tl_retain(r);
        return TL_OK;
    }
    *copied = true;
    TL_TRY(tl_empty(r->shape, 1, dtype, tl_tensor_device(r), out));
    tl_status status = tl_copy_(*out, r);
    if (status != TL_OK) tl_release(*out), *out = NULL;
    return status;
}

/* Gives t to *out, or releases it when out is NULL. */
static void hand_out(tl_tensor *t, tl_tensor **out) {
    if (out)
        *out = t;
    else
        tl_release(t);
}

/* A training input of no element: nothing to normalize; the batch's statistics are NaN (0 / 0)
   and the running ones stay as they are. */
static tl_status empty_statistics(tl_tensor *mu, tl_tensor *is) {
    TL_TRY(tl_fill_(mu, tl_scalar_float(NAN)));
    return tl_fill_(is, tl_scalar_float(NAN));
}

tl_status tl_batch_norm(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                        tl_tensor *running_mean, tl_tensor *running_var, bool training,
                        double momentum, double eps, tl_tensor **out, tl_tensor **save_mean,
                        tl_tensor **save_invstd) {
    const char *op = "batch_norm";
    TL_TRY(
        check_forward(op, input, weight, bias, running_mean, running_var, training, momentum, eps));
    const tl_device device = tl_tensor_device(input);
    const tl_dtype sd = stats_dtype(input->dtype);
    const int64_t C = input->shape[1];
    tl_tensor *x = NULL, *result = NULL, *w = NULL, *b = NULL, *rm = NULL, *rv = NULL;
    tl_tensor *mu = NULL, *is = NULL;
    bool rm_copied = false, rv_copied = false;
    tl_status status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK) status = tl_empty_like(x, &result);
    if (status == TL_OK) status = channel_operand(weight, sd, &w);
    if (status == TL_OK) status = channel_operand(bias, sd, &b);
    if (status == TL_OK) status = running_operand(running_mean, sd, x, &rm, &rm_copied);
    if (status == TL_OK) status = running_operand(running_var, sd, x, &rv, &rv_copied);
    if (status == TL_OK) status = tl_empty(&C, 1, sd, device, &mu);
    if (status == TL_OK) status = tl_empty(&C, 1, sd, device, &is);
    if (status == TL_OK) {
        const tl_kernel_entry *k =
            tl_dispatch(TL_OP_batch_norm, device, x->dtype, NN_TENSORS(result, x, w, b));
        const tl_batch_norm_args args = {momentum, eps, training};
        /* C == 0: nothing at all; M == 0 when training: NaN statistics, no kernel (not
           training, the kernel gives the running statistics' mean and invstd) */
        status = !k       ? tl_dispatch_status()
                 : C == 0 ? TL_OK
                 : training && tl_numel(x) == 0
                     ? empty_statistics(mu, is)
                     : k->fn.batch_norm(result, mu, is, rm, rv, x, w, b, &args);
    }
    if (status == TL_OK && training && rm && tl_numel(x) > 0) {
        if (rm_copied) status = tl_copy_(running_mean, rm);
        if (status == TL_OK && rv_copied) status = tl_copy_(running_var, rv);
        if (status == TL_OK && !rm_copied) tl_bump_version(running_mean);
        if (status == TL_OK && !rv_copied) tl_bump_version(running_var);
    }
    tl_release(x), tl_release(w), tl_release(b), tl_release(rm), tl_release(rv);
    if (status != TL_OK) {
        tl_release(result), tl_release(mu), tl_release(is);
        return status;
    }
    *out = result;
    hand_out(mu, save_mean);
    hand_out(is, save_invstd);
    return TL_OK;
}

tl_status tl_batch_norm_backward_reduce(const tl_tensor *grad, const tl_tensor *input,
                                        const tl_tensor *mean, const tl_tensor *invstd,
                                        tl_tensor **sum_dy, tl_tensor **sum_dy_xhat) {
    const char *op = "batch_norm_backward_reduce";
    if (!sum_dy && !sum_dy_xhat) return TL_OK;
    TL_TRY(check_named(op, "grad", grad));
    if (sum_dy_xhat) {
        if (!input || !mean || !invstd)
            return tl_error(TL_ERR_ARGUMENT, "%s: sum_dy_xhat needs input, mean and invstd", op);
        TL_TRY(check_input(op, input));
        TL_TRY(check_grad(op, grad, input));
        TL_TRY(check_stat(op, "mean", input, mean));
        TL_TRY(check_stat(op, "invstd", input, invstd));
    }
    const tl_device device = tl_tensor_device(grad);
    const tl_dtype sd = stats_dtype(grad->dtype);
    const int64_t C = grad->shape[1];
    tl_tensor *g = NULL, *x = NULL, *mu = NULL, *is = NULL, *a = NULL, *b = NULL;
    tl_status status = tl_contiguous((tl_tensor *)grad, &g);
    if (status == TL_OK && sum_dy_xhat) status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK && sum_dy_xhat) status = tl_contiguous((tl_tensor *)mean, &mu);
    if (status == TL_OK && sum_dy_xhat) status = tl_contiguous((tl_tensor *)invstd, &is);
    if (status == TL_OK && sum_dy) status = tl_empty(&C, 1, sd, device, &a);
    if (status == TL_OK && sum_dy_xhat) status = tl_empty(&C, 1, sd, device, &b);
    if (status == TL_OK) {
        const tl_kernel_entry *k = tl_dispatch(TL_OP_batch_norm_backward_reduce, device,
                                               grad->dtype, NN_TENSORS(a ? a : b, g, x));
        /* C == 0: empty results; M == 0 with C > 0: zeros, a loop over C only */
        status = !k       ? tl_dispatch_status()
                 : C == 0 ? TL_OK
                          : k->fn.batch_norm_backward(a, b, g, x, mu, is, NULL, NULL, NULL);
    }
    tl_release(g), tl_release(x), tl_release(mu), tl_release(is);
    if (status != TL_OK) {
        tl_release(a), tl_release(b);
        return status;
    }
    if (sum_dy) *sum_dy = a;
    if (sum_dy_xhat) *sum_dy_xhat = b;
    return TL_OK;
}

tl_status tl_batch_norm_backward_input(const tl_tensor *grad, const tl_tensor *input,
                                       const tl_tensor *mean, const tl_tensor *invstd,
                                       const tl_tensor *weight, const tl_tensor *sum_dy,
                                       const tl_tensor *sum_dy_xhat, tl_tensor **grad_input) {
    const char *op = "batch_norm_backward_input";
    TL_TRY(check_input(op, input));
    TL_TRY(check_grad(op, grad, input));
    TL_TRY(check_stat(op, "mean", input, mean));
    TL_TRY(check_stat(op, "invstd", input, invstd));
    if (weight) TL_TRY(check_channel(op, "weight", input, weight));
    if (!sum_dy != !sum_dy_xhat)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: sum_dy and sum_dy_xhat must be both tensors or both absent", op);
    if (sum_dy) {
        TL_TRY(check_stat(op, "sum_dy", input, sum_dy));
        TL_TRY(check_stat(op, "sum_dy_xhat", input, sum_dy_xhat));
    }
    const tl_dtype sd = stats_dtype(input->dtype);
    tl_tensor *g = NULL, *x = NULL, *mu = NULL, *is = NULL, *w = NULL, *a = NULL, *b = NULL;
    tl_tensor *result = NULL;
    tl_status status = tl_contiguous((tl_tensor *)grad, &g);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)mean, &mu);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)invstd, &is);
    if (status == TL_OK) status = channel_operand(weight, sd, &w);
    if (status == TL_OK) status = channel_operand(sum_dy, sd, &a);
    if (status == TL_OK) status = channel_operand(sum_dy_xhat, sd, &b);
    if (status == TL_OK) status = tl_empty_like(x, &result);
    if (status == TL_OK) {
        const tl_kernel_entry *k =
            tl_dispatch(TL_OP_batch_norm_backward_input, tl_tensor_device(input), input->dtype,
                        NN_TENSORS(result, g, x, w));
        status = !k ? tl_dispatch_status()
                 : tl_numel(result) == 0
                     ? TL_OK
                     : k->fn.batch_norm_backward(result, NULL, g, x, mu, is, w, a, b);
    }
    tl_release(g), tl_release(x), tl_release(mu), tl_release(is), tl_release(w);
    tl_release(a), tl_release(b);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *grad_input = result;
    return TL_OK;
}
