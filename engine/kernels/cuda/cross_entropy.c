/* CUDA cross entropy forward and backward, the C side: the dtypes of cpu/cross_entropy.c
   (cuda/cross_entropy.cu). */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

/* The rows of logits [N, K] with their targets, as forward and backward both read them. */
static tl_cuda_cross_entropy rows_of(const tl_tensor *logits, const tl_tensor *target,
                                     double smoothing) {
    return (tl_cuda_cross_entropy){
        .dtype = (int)logits->dtype,
        .target_dtype = (int)target->dtype,
        .N = logits->shape[0],
        .K = logits->shape[1],
        .smoothing = smoothing,
        .logits = tl_data(logits),
        .target = tl_data(target),
    };
}

static tl_status forward(tl_tensor *loss, tl_tensor *lse, const tl_tensor *logits,
                         const tl_tensor *target, double smoothing) {
    tl_cuda_cross_entropy c = rows_of(logits, target, smoothing);
    c.loss = tl_data(loss);
    c.lse = tl_data(lse);
    TL_TRY(tl_cuda_where_of(loss, "cross_entropy", &c.at));
    return tl_cuda_cross_entropy_run(&c);
}

static tl_status backward(tl_tensor *grad_logits, const tl_tensor *grad_loss,
                          const tl_tensor *logits, const tl_tensor *lse, const tl_tensor *target,
                          double smoothing) {
    tl_cuda_cross_entropy c = rows_of(logits, target, smoothing);
    c.lse = tl_data(lse);
    c.grad_loss = tl_data(grad_loss);
    c.grad = tl_data(grad_logits);
    if (c.N == 0 || c.K == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(grad_logits, "cross_entropy_backward", &c.at));
    return tl_cuda_cross_entropy_backward_run(&c);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(cross_entropy, TL_DTYPES_FLOATING, cross_entropy, forward),
    TL_KERNEL(cross_entropy_backward, TL_DTYPES_FLOATING, cross_entropy_backward, backward),
};

TL_KERNEL_TABLE(tl_cuda_cross_entropy_table, TL_DEVICE_CUDA, entries);
