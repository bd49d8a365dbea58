/* layer_norm and add_layer_norm as ops: forward with per-row mean and rstd; the input and weight
   backward apart, or in one pass. */
#include <math.h>

#include "ops/checks.h"
#include "ops/nn/nn_common.h"

/* mean/rstd dtype: float64 for float64 input, else float32. */
static tl_dtype stats_dtype(tl_dtype dtype) {
    return dtype == TL_F64 ? TL_F64 : TL_F32;
}

static tl_status check_param(const char *op, const char *name, const tl_tensor *input,
                             const tl_tensor *t) {
    char st[256], si[256];
    int64_t D = input->shape[input->ndim - 1];
    if (t->ndim != 1 || t->shape[0] != D)
        return tl_error(TL_ERR_SHAPE, "%s: %s must be [%lld] (the last dim of input %s), got %s",
                        op, name, (long long)D, tl_shape_str(input, si, sizeof si),
                        tl_shape_str(t, st, sizeof st));
    return nn_check_like(op, "input", input, name, t, true);
}

static tl_status check_input(const char *op, const tl_tensor *input) {
    if (input->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "%s: input must have at least 1 dim, got a 0-dim tensor", op);
    return nn_check_floating(op, "input", input);
}

/* mean and rstd must be what the forward gave for input. */
static tl_status check_stats(const char *op, const tl_tensor *input, const tl_tensor *mean,
                             const tl_tensor *rstd) {
    const tl_tensor *stats[2] = {mean, rstd};
    const char *names[2] = {"mean", "rstd"};
    char ss[256], si[256];
    for (int i = 0; i < 2; i++) {
        const tl_tensor *t = stats[i];
        if (!nn_same_shape(t, input->shape, input->ndim - 1) ||
            t->dtype != stats_dtype(input->dtype))
            return tl_error(TL_ERR_SHAPE,
                            "%s: %s must be %s with input %s's shape without its last dim, got "
                            "%s %s",
                            op, names[i], tl_dtype_name(stats_dtype(input->dtype)),
                            tl_shape_str(input, si, sizeof si), tl_dtype_name(t->dtype),
                            tl_shape_str(t, ss, sizeof ss));
        TL_TRY(nn_check_like(op, "input", input, names[i], t, false));
    }
    return TL_OK;
}

/* Mixed precision (kernels/kernel.h): whether a layer norm computing in `stream` may read or
   write an operand (the residual, the output, their gradients) in `branch`: its own dtype, or a
   16-bit type over a float32 stream. */
static bool branch_dtype_ok(tl_dtype stream, tl_dtype branch) {
    return branch == stream || (stream == TL_F32 && (branch == TL_BF16 || branch == TL_F16));
}

static tl_status check_branch_dtype(const char *op, const char *name, tl_dtype stream,
                                    tl_dtype branch) {
    if (branch_dtype_ok(stream, branch)) return TL_OK;
    return tl_error(TL_ERR_DTYPE, "%s: %s must be %s (the input's dtype)%s, got %s", op, name,
                    tl_dtype_name(stream),
                    stream == TL_F32 ? " or bfloat16 or float16 (mixed precision)" : "",
                    tl_dtype_name(branch));
}

/* grad (of the output, or of add_layer_norm's sum when mixed is false) matches like's shape and
   device, and its dtype is like's or, mixed, one the output may have. */
static tl_status check_grad(const char *op, const tl_tensor *grad, const tl_tensor *like,
                            bool mixed) {
    char sg[256], sl[256];
    if (!nn_same_shape(grad, like->shape, like->ndim))
        return tl_error(TL_ERR_SHAPE, "%s: grad has shape %s but the output has %s", op,
                        tl_shape_str(grad, sg, sizeof sg), tl_shape_str(like, sl, sizeof sl));
    TL_TRY(nn_check_like(op, "input", like, "grad", grad, !mixed));
    return check_branch_dtype(op, "grad", like->dtype, grad->dtype);
}

/* An empty input has nothing to normalize (no loop may scale with its other dims): rows of no
   elements (a last dim of size 0) have a NaN mean and rstd, as 0 / 0. */
static tl_status empty_statistics(tl_tensor *mean, tl_tensor *rstd) {
    TL_TRY(tl_fill_(mean, tl_scalar_float(NAN)));
    return tl_fill_(rstd, tl_scalar_float(NAN));
}

static tl_status check_forward(const char *op, const tl_tensor *input, const tl_tensor *weight,
                               const tl_tensor *bias, double eps) {
    TL_TRY(check_input(op, input));
    if (weight) TL_TRY(check_param(op, "weight", input, weight));
    if (bias) TL_TRY(check_param(op, "bias", input, bias));
    if (!(eps >= 0)) return tl_error(TL_ERR_ARGUMENT, "%s: eps must be >= 0, got %g", op, eps);
    return TL_OK;
}

/* A contiguous t (itself when it is one) read from a copy also when it overlaps avoid. */
static tl_status contiguous_apart(const tl_tensor *t, const tl_tensor *avoid, tl_tensor **out) {
    *out = NULL;
    if (!t) return TL_OK;
    if (avoid && tl_may_overlap(t, avoid)) return tl_clone(t, out);
    return tl_contiguous((tl_tensor *)t, out);
}

/* Gives t to *out, or releases it when out is NULL. */
static void hand_out(tl_tensor *t, tl_tensor **out) {
    if (out)
        *out = t;
    else
        tl_release(t);
}

/* The end of a forward: the statistics mu and rs handed out (as mean, rstd) when status is
   TL_OK, released otherwise. */
static tl_status hand_out_statistics(tl_status status, tl_tensor *mu, tl_tensor *rs,
                                     tl_tensor **mean, tl_tensor **rstd) {
    if (status != TL_OK) {
        tl_release(mu), tl_release(rs);
        return status;
    }
    hand_out(mu, mean);
    hand_out(rs, rstd);
    return TL_OK;
}

/* result (contiguous, x's shape; may be x itself), mean and rstd of the contiguous x; with a
   residual (contiguous, add_layer_norm), of s = x + residual, written to sum. */
static tl_status run_forward(tl_op op, tl_tensor *result, tl_tensor *sum, const tl_tensor *x,
                             const tl_tensor *residual, const tl_tensor *weight,
                             const tl_tensor *bias, double eps, tl_tensor **mean,
                             tl_tensor **rstd) {
    tl_device device = tl_tensor_device(x);
    tl_dtype sd = stats_dtype(x->dtype);
    tl_tensor *w = NULL, *b = NULL, *mu = NULL, *rs = NULL;
    tl_status status = contiguous_apart(weight, result, &w);
    if (status == TL_OK) status = contiguous_apart(bias, result, &b);
    if (status == TL_OK) status = tl_empty(x->shape, x->ndim - 1, sd, device, &mu);
    if (status == TL_OK) status = tl_empty(x->shape, x->ndim - 1, sd, device, &rs);
    if (status == TL_OK) {
        const tl_kernel_entry *k = tl_dispatch(op, device, x->dtype, NN_TENSORS(result, x, w, b));
        status = !k                 ? tl_dispatch_status()
                 : tl_numel(x) == 0 ? empty_statistics(mu, rs)
                                    : k->fn.layer_norm(result, sum, mu, rs, x, residual, w, b, eps);
    }
    tl_release(w), tl_release(b);
    return hand_out_statistics(status, mu, rs, mean, rstd);
}

tl_status tl_layer_norm(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                        double eps, tl_tensor **out, tl_tensor **mean, tl_tensor **rstd) {
    TL_TRY(tl_check_tensor_arg("layer_norm", "input", input));
    return tl_layer_norm_as(input, weight, bias, eps, input->dtype, out, mean, rstd);
}

tl_status tl_layer_norm_as(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                           double eps, tl_dtype dtype, tl_tensor **out, tl_tensor **mean,
                           tl_tensor **rstd) {
    TL_TRY(tl_check_tensor_arg("layer_norm", "input", input));
    TL_TRY(check_forward("layer_norm", input, weight, bias, eps));
    TL_TRY(check_branch_dtype("layer_norm", "the output's dtype", input->dtype, dtype));
    tl_tensor *x = NULL, *result = NULL;
    tl_status status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK) status = tl_empty(x->shape, x->ndim, dtype, tl_tensor_device(x), &result);
    if (status == TL_OK)
        status =
            run_forward(TL_OP_layer_norm, result, NULL, x, NULL, weight, bias, eps, mean, rstd);
    tl_release(x);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

tl_status tl_layer_norm_(tl_tensor *x, const tl_tensor *weight, const tl_tensor *bias, double eps,
                         tl_tensor **mean, tl_tensor **rstd) {
    const char *op = "layer_norm_";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(check_forward(op, x, weight, bias, eps));
    TL_TRY(tl_check_writable(op, "x", x));
    if (tl_is_contiguous(x)) {
        TL_TRY(run_forward(TL_OP_layer_norm, x, NULL, x, NULL, weight, bias, eps, mean, rstd));
        tl_bump_version(x);
        return TL_OK;
    }
    /* a strided x: normalised in a contiguous copy, written back (tl_copy_ bumps x's version) */
    tl_tensor *work;
    TL_TRY(tl_clone(x, &work));
    tl_tensor *mu = NULL, *rs = NULL;
    tl_status status =
        run_forward(TL_OP_layer_norm, work, NULL, work, NULL, weight, bias, eps, &mu, &rs);
    if (status == TL_OK) status = tl_copy_(x, work);
    tl_release(work);
    return hand_out_statistics(status, mu, rs, mean, rstd);
}

/* residual must match input: its shape and device (a floating dtype of its own: the sum is in
   the promoted one). */
static tl_status check_residual(const char *op, const tl_tensor *input, const tl_tensor *residual) {
    char si[256], sr[256];
    if (!nn_same_shape(residual, input->shape, input->ndim))
        return tl_error(TL_ERR_SHAPE, "%s: residual must have input's shape %s, got %s", op,
                        tl_shape_str(input, si, sizeof si), tl_shape_str(residual, sr, sizeof sr));
    TL_TRY(nn_check_floating(op, "residual", residual));
    return nn_check_like(op, "input", input, "residual", residual, false);
}

/* The contiguous operands of s = input + residual: x in the sum's dtype (the two promoted) and
   r in it too, or in a 16-bit type over a float32 sum (as the kernel reads it; the same 16-bit
   type as the output's when that is one). The sum is commutative: the float32 operand is x. */
static tl_status sum_operands(const tl_tensor *input, const tl_tensor *residual, tl_dtype out_dtype,
                              tl_tensor **x, tl_tensor **r) {
    const tl_dtype stream = tl_promote_types(input->dtype, residual->dtype);
    const tl_tensor *wide = input->dtype == stream ? input : residual;
    const tl_tensor *other = wide == input ? residual : input;
    const bool keep =
        other->dtype == stream || (branch_dtype_ok(stream, other->dtype) &&
                                   (out_dtype == stream || out_dtype == other->dtype));
    *x = *r = NULL;
    /* a cast to another dtype is a new contiguous tensor */
    tl_status status = wide->dtype == stream ? tl_contiguous((tl_tensor *)wide, x)
                                             : tl_cast((tl_tensor *)wide, stream, x);
    if (status == TL_OK)
        status =
            keep ? tl_contiguous((tl_tensor *)other, r) : tl_cast((tl_tensor *)other, stream, r);
    if (status != TL_OK) tl_release(*x), tl_release(*r), *x = *r = NULL;
    return status;
}

tl_status tl_add_layer_norm(const tl_tensor *input, const tl_tensor *residual,
                            const tl_tensor *weight, const tl_tensor *bias, double eps,
                            tl_tensor **out, tl_tensor **sum, tl_tensor **mean, tl_tensor **rstd) {
    TL_TRY(tl_check_tensor_arg("add_layer_norm", "input", input));
    TL_TRY(tl_check_tensor_arg("add_layer_norm", "residual", residual));
    return tl_add_layer_norm_as(input, residual, weight, bias, eps,
                                tl_promote_types(input->dtype, residual->dtype), out, sum, mean,
                                rstd);
}

tl_status tl_add_layer_norm_as(const tl_tensor *input, const tl_tensor *residual,
                               const tl_tensor *weight, const tl_tensor *bias, double eps,
                               tl_dtype dtype, tl_tensor **out, tl_tensor **sum, tl_tensor **mean,
                               tl_tensor **rstd) {
    const char *op = "add_layer_norm";
    TL_TRY(tl_check_tensor_arg(op, "input", input));
    TL_TRY(tl_check_tensor_arg(op, "residual", residual));
    TL_TRY(check_input(op, input));
    TL_TRY(check_residual(op, input, residual));
    const tl_dtype stream = tl_promote_types(input->dtype, residual->dtype);
    TL_TRY(check_branch_dtype(op, "the output's dtype", stream, dtype));
    tl_tensor *x = NULL, *r = NULL, *result = NULL, *s = NULL;
    tl_status status = sum_operands(input, residual, dtype, &x, &r);
    if (status == TL_OK) status = check_forward(op, x, weight, bias, eps);
    if (status == TL_OK) status = tl_empty(x->shape, x->ndim, dtype, tl_tensor_device(x), &result);
    if (status == TL_OK) status = tl_empty_like(x, &s);
    if (status == TL_OK)
        status = run_forward(TL_OP_add_layer_norm, result, s, x, r, weight, bias, eps, mean, rstd);
    tl_release(x), tl_release(r);
    if (status != TL_OK) {
        tl_release(result), tl_release(s);
        return status;
    }
    *out = result;
    hand_out(s, sum);
    return TL_OK;
}

/* The checks of a backward that gives the input's gradient (grad_sum may be NULL). */
static tl_status check_input_backward(const char *op, const tl_tensor *grad,
                                      const tl_tensor *grad_sum, const tl_tensor *input,
                                      const tl_tensor *mean, const tl_tensor *rstd,
                                      const tl_tensor *weight) {
    TL_TRY(check_input(op, input));
    TL_TRY(check_grad(op, grad, input, true));
    if (grad_sum) TL_TRY(check_grad(op, grad_sum, input, false));
    TL_TRY(check_stats(op, input, mean, rstd));
    if (weight) TL_TRY(check_param(op, "weight", input, weight));
    return TL_OK;
}

/* grad as the kernel reads it (contiguous): in its dtype, or in float32 when the residual's
   gradient is in the other 16-bit type (the kernel's 16-bit operands share one). */
static tl_status grad_operand(const tl_tensor *grad, tl_dtype stream, tl_dtype residual_dtype,
                              tl_tensor **out) {
    if (grad->dtype != stream && residual_dtype != stream && residual_dtype != grad->dtype)
        return tl_cast((tl_tensor *)grad, stream, out);
    return tl_contiguous((tl_tensor *)grad, out);
}

/* Runs op's kernel (layer_norm_backward_input, or layer_norm_backward: grad_weight and/or
   grad_bias too) on contiguous operands; with grad_residual, the input's gradient again in
   residual_dtype (the same tensor, retained, when that is the input's dtype). The results are
   handed out only when it succeeds. */
static tl_status run_backward(tl_op op, const tl_tensor *grad, const tl_tensor *grad_sum,
                              const tl_tensor *input, const tl_tensor *mean, const tl_tensor *rstd,
                              const tl_tensor *weight, tl_dtype residual_dtype,
                              tl_tensor **grad_input, tl_tensor **grad_residual,
                              tl_tensor **grad_weight, tl_tensor **grad_bias) {
    tl_device device = tl_tensor_device(input);
    int64_t D = input->shape[input->ndim - 1];
    const bool apart = grad_residual && residual_dtype != input->dtype;
    tl_tensor *g = NULL, *gs = NULL, *x = NULL, *mu = NULL, *rs = NULL, *w = NULL;
    tl_tensor *dx = NULL, *dr = NULL, *dw = NULL, *db = NULL;
    tl_status status = grad_operand(grad, input->dtype, apart ? residual_dtype : input->dtype, &g);
    if (status == TL_OK && grad_sum) status = tl_contiguous((tl_tensor *)grad_sum, &gs);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)mean, &mu);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)rstd, &rs);
    if (status == TL_OK && weight) status = tl_contiguous((tl_tensor *)weight, &w);
    if (status == TL_OK) status = tl_empty_like(x, &dx);
    if (status == TL_OK && apart) status = tl_empty(x->shape, x->ndim, residual_dtype, device, &dr);
    if (status == TL_OK && grad_weight) status = tl_empty(&D, 1, input->dtype, device, &dw);
    if (status == TL_OK && grad_bias) status = tl_empty(&D, 1, input->dtype, device, &db);
    if (status == TL_OK) {
        const tl_kernel_entry *k = tl_dispatch(op, device, input->dtype, NN_TENSORS(dx, g, x, w));
        /* D == 0: empty results; rows == 0 with D > 0: zero weight gradients */
        status = !k       ? tl_dispatch_status()
                 : D == 0 ? TL_OK
                 : tl_numel(dx) == 0 && op == TL_OP_layer_norm_backward_input
                     ? TL_OK
                     : k->fn.layer_norm_backward(dx, dr, dw, db, g, gs, x, mu, rs, w);
    }
    tl_release(g), tl_release(gs), tl_release(x), tl_release(mu), tl_release(rs), tl_release(w);
    if (status != TL_OK) {
        tl_release(dx), tl_release(dr), tl_release(dw), tl_release(db);
        return status;
    }
    if (grad_residual) *grad_residual = apart ? dr : tl_retain(dx);
    *grad_input = dx;
    if (grad_weight) *grad_weight = dw;
    if (grad_bias) *grad_bias = db;
    return TL_OK;
}

tl_status tl_layer_norm_backward_input(const tl_tensor *grad, const tl_tensor *grad_sum,
                                       const tl_tensor *input, const tl_tensor *mean,
                                       const tl_tensor *rstd, const tl_tensor *weight,
                                       tl_tensor **grad_input) {
    TL_TRY(check_input_backward("layer_norm_backward_input", grad, grad_sum, input, mean, rstd,
                                weight));
    return run_backward(TL_OP_layer_norm_backward_input, grad, grad_sum, input, mean, rstd, weight,
                        input->dtype, grad_input, NULL, NULL, NULL);
}

tl_status tl_layer_norm_backward(const tl_tensor *grad, const tl_tensor *grad_sum,
                                 const tl_tensor *input, const tl_tensor *mean,
                                 const tl_tensor *rstd, const tl_tensor *weight,
                                 tl_tensor **grad_input, tl_tensor **grad_weight,
                                 tl_tensor **grad_bias) {
    const char *op = "layer_norm_backward";
    if (!grad_weight && !grad_bias)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: the one pass gives the weight's or the bias's gradient with the "
                        "input's (tl_layer_norm_backward_input gives the input's alone)",
                        op);
    TL_TRY(check_input_backward(op, grad, grad_sum, input, mean, rstd, weight));
    return run_backward(TL_OP_layer_norm_backward, grad, grad_sum, input, mean, rstd, weight,
                        input->dtype, grad_input, NULL, grad_weight, grad_bias);
}

tl_status tl_layer_norm_backward_as(const tl_tensor *grad, const tl_tensor *grad_sum,
                                    const tl_tensor *input, const tl_tensor *mean,
                                    const tl_tensor *rstd, const tl_tensor *weight,
                                    tl_dtype residual_dtype, tl_tensor **grad_input,
                                    tl_tensor **grad_residual, tl_tensor **grad_weight,
                                    tl_tensor **grad_bias) {
    const bool one_pass = grad_weight || grad_bias;
    const char *op = one_pass ? "layer_norm_backward" : "layer_norm_backward_input";
    TL_TRY(check_input_backward(op, grad, grad_sum, input, mean, rstd, weight));
    if (grad_residual)
        TL_TRY(check_branch_dtype(op, "residual_dtype", input->dtype, residual_dtype));
    return run_backward(one_pass ? TL_OP_layer_norm_backward : TL_OP_layer_norm_backward_input,
                        grad, grad_sum, input, mean, rstd, weight, residual_dtype, grad_input,
                        grad_residual, grad_weight, grad_bias);
}

tl_status tl_layer_norm_backward_weight(const tl_tensor *grad, const tl_tensor *input,
                                        const tl_tensor *mean, const tl_tensor *rstd,
                                        tl_tensor **grad_weight, tl_tensor **grad_bias) {
    const char *op = "layer_norm_backward_weight";
    if (!grad_weight && !grad_bias) return TL_OK;
    TL_TRY(check_input(op, grad));
    if (grad_weight) {
        if (!input || !mean || !rstd)
            return tl_error(TL_ERR_ARGUMENT, "%s: the weight's gradient needs input, mean and rstd",
                            op);
        TL_TRY(check_input(op, input));
        TL_TRY(check_grad(op, grad, input, true));
        TL_TRY(check_stats(op, input, mean, rstd));
    }
    /* the gradients' dtype: the input's (grad may be in a 16-bit type over a float32 input), or
       grad's for the bias's alone */
    const tl_dtype dtype = grad_weight ? input->dtype : grad->dtype;
    tl_device device = tl_tensor_device(grad);
    int64_t D = grad->shape[grad->ndim - 1];
    tl_tensor *g = NULL, *x = NULL, *mu = NULL, *rs = NULL, *dw = NULL, *db = NULL;
    tl_status status = tl_contiguous((tl_tensor *)grad, &g);
    if (status == TL_OK && grad_weight) status = tl_contiguous((tl_tensor *)input, &x);
    if (status == TL_OK && grad_weight) status = tl_contiguous((tl_tensor *)mean, &mu);
    if (status == TL_OK && grad_weight) status = tl_contiguous((tl_tensor *)rstd, &rs);
    if (status == TL_OK && grad_weight) status = tl_empty(&D, 1, dtype, device, &dw);
    if (status == TL_OK && grad_bias) status = tl_empty(&D, 1, dtype, device, &db);
    if (status == TL_OK) {
        const tl_kernel_entry *k = tl_dispatch(TL_OP_layer_norm_backward_weight, device, dtype,
                                               NN_TENSORS(dw ? dw : db, g, x));
        /* D == 0: empty results; rows == 0 with D > 0: zeros, a loop over D only */
        status = !k       ? tl_dispatch_status()
                 : D == 0 ? TL_OK
                          : k->fn.layer_norm_backward(NULL, NULL, dw, db, g, NULL, x, mu, rs, NULL);
    }
    tl_release(g), tl_release(x), tl_release(mu), tl_release(rs);
    if (status != TL_OK) {
        tl_release(dw), tl_release(db);
        return status;
    }
    if (grad_weight) *grad_weight = dw;
    if (grad_bias) *grad_bias = db;
    return TL_OK;
}
