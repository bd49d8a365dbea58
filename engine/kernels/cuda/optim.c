/* CUDA fused in-place optimizer steps (SGD, Adam/AdamW), the C side: the dtypes of
   cpu/optim.c and its hyper-parameters computed on the host in double exactly as it computes
   them (cuda/optim.cu rounds them to the compute type). */
#include <math.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

static tl_status sgd_kernel(tl_tensor *param, const tl_tensor *grad, tl_tensor *buffer,
                            tl_tensor *unused, const tl_optim_args *a) {
    (void)unused;
    tl_cuda_optim o = {
        .dtype = (int)param->dtype,
        .n = tl_numel(param),
        .param = tl_data(param),
        .grad = tl_data(grad),
        .state0 = buffer && a->momentum != 0 ? tl_data(buffer) : NULL,
        .weight_decay = a->weight_decay,
        .momentum = a->momentum,
        .keep = 1 - a->dampening,
        .neg_lr = -a->lr,
        .decay = a->weight_decay != 0,
        .nesterov = a->nesterov,
        .first_step = a->first_step,
    };
    if (o.n == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(param, "sgd_step", &o.at));
    return tl_cuda_sgd_run(&o);
}

static tl_status adam_kernel(tl_tensor *param, const tl_tensor *grad, tl_tensor *exp_avg,
                             tl_tensor *exp_avg_sq, const tl_optim_args *a) {
    const double correction1 = 1 - pow(a->beta1, (double)a->step);
    const double correction2 = 1 - pow(a->beta2, (double)a->step);
    tl_cuda_optim o = {
        .dtype = (int)param->dtype,
        .n = tl_numel(param),
        .param = tl_data(param),
        .grad = tl_data(grad),
        .state0 = tl_data(exp_avg),
        .state1 = tl_data(exp_avg_sq),
        .weight_decay = a->weight_decay,
        .neg_step_size = -(a->lr / correction1),
        .correction2_sqrt = sqrt(correction2),
        .beta1 = a->beta1,
        .beta2 = a->beta2,
        .one_minus_beta1 = 1 - a->beta1,
        .one_minus_beta2 = 1 - a->beta2,
        .eps = a->eps,
        .shrink = 1 - a->lr * a->weight_decay,
        .decoupled = a->decoupled,
        .l2 = !a->decoupled && a->weight_decay != 0,
    };
    if (o.n == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(param, "adam_step", &o.at));
    return tl_cuda_adam_run(&o);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(sgd_step, TL_DTYPES_FLOATING, optim, sgd_kernel),
    TL_KERNEL(adam_step, TL_DTYPES_FLOATING, optim, adam_kernel),
};

TL_KERNEL_TABLE(tl_cuda_optim_table, TL_DEVICE_CUDA, entries);
