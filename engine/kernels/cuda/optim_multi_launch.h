/* Internal: what cuda/optim_multi.c hands to the device side (cuda/optim_multi.cu): one
   descriptor per non-empty parameter, on the device, and the step's scalars. */
#ifndef TLUA_CUDA_OPTIM_MULTI_LAUNCH_H
#define TLUA_CUDA_OPTIM_MULTI_LAUNCH_H

#include "kernels/cuda/ops_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements of one chunk: a CTA's unit of work (a multiple of the vector width, 4). */
#define TL_CUDA_ADAM_CHUNK 32768

/* One parameter: contiguous tensors of numel elements; param and grad of dtype (TL_CUDA_F32,
   _F64, _BF16, _F16), the moments float64 for float64, else float32; master NULL or float32.
   Its chunks are first_chunk .. first_chunk + ceil(numel / TL_CUDA_ADAM_CHUNK) - 1 of the
   launch. vec: every pointer is aligned for accesses of 4 elements. */
typedef struct tl_cuda_adam_param {
    void *param;
    const void *grad;
    void *exp_avg, *exp_avg_sq;
    float *master;
    int64_t numel, first_chunk;
    int32_t dtype, vec;
} tl_cuda_adam_param;

/* The step's scalars in double, as cpu/optim_multi.c computes them; the device rounds them to
   the compute type. */
typedef struct tl_cuda_adam_scalars {
    double neg_step_size, correction2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, wd,
        shrink;
    bool decoupled, l2;
} tl_cuda_adam_scalars;

/* count descriptors (on the device, ordered by first_chunk), chunks in all: one launch. */
tl_status tl_cuda_adam_multi_run(const tl_cuda_where *at, const tl_cuda_adam_param *params,
                                 int64_t count, int64_t chunks, const tl_cuda_adam_scalars *s);

#ifdef __cplusplus
}
#endif

#endif
