/* Internal: what cuda/attention.c hands to the device side (cuda/attention.cu). */
#ifndef TLUA_CUDA_ATTENTION_LAUNCH_H
#define TLUA_CUDA_ATTENTION_LAUNCH_H

#include "kernels/cuda/ops_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The [B, H, rows, D] operands (kernels/kernel.h's attention): q, out, grad_out and grad_q have
   T rows, k, v, grad_k and grad_v S rows. */
enum {
    TL_CUDA_ATT_Q,
    TL_CUDA_ATT_K,
    TL_CUDA_ATT_V,
    TL_CUDA_ATT_OUT,
    TL_CUDA_ATT_GRAD_OUT,
    TL_CUDA_ATT_GRAD_Q,
    TL_CUDA_ATT_GRAD_K,
    TL_CUDA_ATT_GRAD_V,
    TL_CUDA_ATT_OPERANDS
};

/* One attention forward (q, k, v -> out, lse) or backward (grad_out, q, k, v, out, lse ->
   grad_q, grad_k, grad_v, any NULL when not wanted; delta scratch). data[i] NULL for an operand
   the call does not have; stride[i] = its strides of dims b, h and row in elements (the last
   dim's is 1). lse and delta are contiguous [B, H, T], float32 (float64 for float64). Dropout
   keeps element e = ((b H + h) T + i) S + j when tl_philox_uniform_f32(seed, counter, e) >=
   dropout, scaled by 1 / (1 - dropout). */
typedef struct tl_cuda_attention {
    tl_cuda_where at;
    int dtype; /* TL_CUDA_* */
    int64_t B, H, T, S, D;
    void *data[TL_CUDA_ATT_OPERANDS];
    int64_t stride[TL_CUDA_ATT_OPERANDS][3];
    void *lse, *delta;
    double scale, dropout;
    bool causal;
    uint64_t seed, counter;
} tl_cuda_attention;

tl_status tl_cuda_attention_run(const tl_cuda_attention *a);
tl_status tl_cuda_attention_backward_run(const tl_cuda_attention *a);

#ifdef __cplusplus
}
#endif

#endif
