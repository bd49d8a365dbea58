/* CUDA cross entropy forward and backward, the C side: the dtypes of cpu/cross_entropy.c
   (cuda/cross_entropy.cu). */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

static tl_status forward(tl_tensor *loss, tl_tensor *lse, const tl_tensor *logits,
                         const tl_tensor *target, double smoothing) {
    tl_cuda_cross_entropy c = {
        .dtype = (int)logits->dtype,
        .target_dtype = (int)target->dtype,
        .N = logits->shape[0],
        .K = logits->shape[1],
        .smoothing = smoothing,
        .logits = tl_data(logits),
        .target = tl_data(target),
        .loss = tl_data(loss),
        .lse = tl_data(lse),
    };
    TL_TRY(tl_cuda_where_of(loss, "cross_entropy", &c.at));
    return tl_cuda_cross_entropy_run(&c);
}

static tl_status backward(tl_tensor *grad_logits, const tl_tensor *grad_loss,
                          const tl_tensor *logits, const tl_tensor *lse, const tl_tensor *target,
                          double smoothing) {
    tl_cuda_cross_entropy c = {
        .dtype = (int)logits->dtype,
        .target_dtype = (int)target->dtype,
        .N = logits->shape[0],
        .K = logits->shape[1],
        .smoothing = smoothing,
        .logits = tl_data(logits),
        .target = tl_data(target),
        .lse = tl_data(lse),
        .grad_loss = tl_data(grad_loss),
        .grad = tl_data(grad_logits),
    };
    if (c.N == 0 || c.K == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(grad_logits, "cross_entropy_backward", &c.at));
    return tl_cuda_cross_entropy_backward_run(&c);
}

#define ENTRY(op, dtype, suffix, member, fn)                                                       \
    {                                                                                              \
        TL_OP_##op, dtype, "cuda_" #op "_" #suffix, {                                              \
            .member = fn                                                                           \
        }                                                                                          \
    }

static const tl_kernel_entry entries[] = {
    ENTRY(cross_entropy, TL_F32, f32, cross_entropy, forward),
    ENTRY(cross_entropy, TL_F64, f64, cross_entropy, forward),
    ENTRY(cross_entropy, TL_BF16, bf16, cross_entropy, forward),
    ENTRY(cross_entropy, TL_F16, f16, cross_entropy, forward),
    ENTRY(cross_entropy_backward, TL_F32, f32, cross_entropy_backward, backward),
    ENTRY(cross_entropy_backward, TL_F64, f64, cross_entropy_backward, backward),
    ENTRY(cross_entropy_backward, TL_BF16, bf16, cross_entropy_backward, backward),
    ENTRY(cross_entropy_backward, TL_F16, f16, cross_entropy_backward, backward),
};

TL_KERNEL_TABLE(tl_cuda_cross_entropy_table, TL_DEVICE_CUDA, entries);
