/* Optimizer steps as ops: validate everything before writing, run the fused in-place kernel. */
#include "ops/nn/nn_common.h"

/* t (a param or a state tensor, written in place) matches param and is contiguous. */
static tl_status check_state(const char *op, const char *name, const tl_tensor *param,
                             const tl_tensor *t) {
    char sp[256], st[256];
    if (!nn_same_shape(t, param->shape, param->ndim))
        return tl_error(TL_ERR_SHAPE, "%s: %s has shape %s but param has %s", op, name,
                        tl_shape_str(t, st, sizeof st), tl_shape_str(param, sp, sizeof sp));
    TL_TRY(nn_check_like(op, "param", param, name, t, true));
    if (!tl_is_contiguous(t))
        return tl_error(TL_ERR_ARGUMENT, "%s: %s must be contiguous (it is updated in place)", op,
                        name);
    return TL_OK;
}

static tl_status check_tensors(const char *op, const tl_tensor *param, const tl_tensor *grad) {
    TL_TRY(nn_check_floating(op, "param", param));
    if (!tl_is_contiguous(param))
        return tl_error(TL_ERR_ARGUMENT, "%s: param must be contiguous (it is updated in place)",
                        op);
    char sp[256], sg[256];
    if (!nn_same_shape(grad, param->shape, param->ndim))
        return tl_error(TL_ERR_SHAPE, "%s: grad has shape %s but param has %s", op,
                        tl_shape_str(grad, sg, sizeof sg), tl_shape_str(param, sp, sizeof sp));
    return nn_check_like(op, "param", param, "grad", grad, true);
}

tl_status nn_check_at_least_zero(const char *op, const char *name, double v) {
    if (!(v >= 0)) return tl_error(TL_ERR_ARGUMENT, "%s: %s must be >= 0, got %g", op, name, v);
    return TL_OK;
}

tl_status nn_check_adam_hyper(const char *op, int64_t step, double lr, double beta1, double beta2,
                              double eps, double weight_decay) {
    if (step < 1)
        return tl_error(TL_ERR_ARGUMENT, "%s: step counts from 1, got %lld", op, (long long)step);
    TL_TRY(nn_check_at_least_zero(op, "lr", lr));
    TL_TRY(nn_check_at_least_zero(op, "eps", eps));
    TL_TRY(nn_check_at_least_zero(op, "weight_decay", weight_decay));
    if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
        return tl_error(TL_ERR_ARGUMENT, "%s: betas must be in [0, 1), got %g and %g", op, beta1,
                        beta2);
    return TL_OK;
}

/* Runs the kernel of op with a dense grad. */
static tl_status run_step(tl_op op, tl_tensor *param, const tl_tensor *grad, tl_tensor *state0,
                          tl_tensor *state1, const tl_optim_args *args) {
    tl_tensor *g;
    TL_TRY(tl_contiguous((tl_tensor *)grad, &g));
    const tl_kernel_entry *k =
        tl_dispatch(op, tl_tensor_device(param), param->dtype, NN_TENSORS(param, g));
    tl_status status = k ? k->fn.optim(param, g, state0, state1, args) : tl_dispatch_status();
    tl_release(g);
    if (status != TL_OK) return status;
    tl_bump_version(param);
    if (state0) tl_bump_version(state0);
    if (state1) tl_bump_version(state1);
    return TL_OK;
}

tl_status tl_sgd_step_check(const tl_tensor *param, const tl_tensor *grad,
                            const tl_tensor *momentum_buffer, double lr, double momentum,
                            double dampening, double weight_decay, bool nesterov) {
    const char *op = "sgd_step";
    TL_TRY(check_tensors(op, param, grad));
    TL_TRY(nn_check_at_least_zero(op, "lr", lr));
    TL_TRY(nn_check_at_least_zero(op, "momentum", momentum));
    TL_TRY(nn_check_at_least_zero(op, "weight_decay", weight_decay));
    if (!(dampening == dampening))
        return tl_error(TL_ERR_ARGUMENT, "%s: dampening must be a number, got nan", op);
    if (nesterov && (momentum <= 0 || dampening != 0))
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: nesterov needs momentum > 0 and dampening == 0, got momentum %g and "
                        "dampening %g",
                        op, momentum, dampening);
    if (momentum != 0 && momentum_buffer)
        TL_TRY(check_state(op, "momentum_buffer", param, momentum_buffer));
    return TL_OK;
}

tl_status tl_sgd_step(tl_tensor *param, const tl_tensor *grad, tl_tensor *momentum_buffer,
                      double lr, double momentum, double dampening, double weight_decay,
                      bool nesterov, bool first_step) {
    if (momentum != 0 && !momentum_buffer)
        return tl_error(TL_ERR_ARGUMENT, "sgd_step: momentum %g needs a momentum_buffer, got none",
                        momentum);
    TL_TRY(tl_sgd_step_check(param, grad, momentum_buffer, lr, momentum, dampening, weight_decay,
                             nesterov));
    const tl_optim_args args = {.lr = lr,
                                .momentum = momentum,
                                .dampening = dampening,
                                .weight_decay = weight_decay,
                                .nesterov = nesterov,
                                .first_step = first_step};
    return run_step(TL_OP_sgd_step, param, grad, momentum != 0 ? momentum_buffer : NULL, NULL,
                    &args);
}

tl_status tl_adam_step_check(const tl_tensor *param, const tl_tensor *grad,
                             const tl_tensor *exp_avg, const tl_tensor *exp_avg_sq, int64_t step,
                             double lr, double beta1, double beta2, double eps, double weight_decay,
                             bool decoupled) {
    const char *op = decoupled ? "adamw_step" : "adam_step";
    TL_TRY(check_tensors(op, param, grad));
    if (!exp_avg != !exp_avg_sq)
        return tl_error(TL_ERR_ARGUMENT, "%s: exp_avg and exp_avg_sq go together, got one", op);
    if (exp_avg) {
        TL_TRY(check_state(op, "exp_avg", param, exp_avg));
        TL_TRY(check_state(op, "exp_avg_sq", param, exp_avg_sq));
    }
    TL_TRY(nn_check_adam_hyper(op, step, lr, beta1, beta2, eps, weight_decay));
    return TL_OK;
}

tl_status tl_adam_step(tl_tensor *param, const tl_tensor *grad, tl_tensor *exp_avg,
                       tl_tensor *exp_avg_sq, int64_t step, double lr, double beta1, double beta2,
                       double eps, double weight_decay, bool decoupled) {
    if (!exp_avg || !exp_avg_sq)
        return tl_error(TL_ERR_ARGUMENT, "%s: exp_avg and exp_avg_sq are required",
                        decoupled ? "adamw_step" : "adam_step");
    TL_TRY(tl_adam_step_check(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps,
                              weight_decay, decoupled));
    const tl_optim_args args = nn_adam_args(step, lr, beta1, beta2, eps, weight_decay, decoupled);
    return run_step(TL_OP_adam_step, param, grad, exp_avg, exp_avg_sq, &args);
}
