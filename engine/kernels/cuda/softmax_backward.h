/* Internal: what the C side of the CUDA softmax backward (cuda/softmax_backward.c) hands to its
   device side (cuda/softmax_backward.cu): a plain-C description of the rows and the stream. */
#ifndef TLUA_CUDA_SOFTMAX_BACKWARD_H
#define TLUA_CUDA_SOFTMAX_BACKWARD_H

#include "kernels/cuda/ops_launch.h" /* tl_cuda_where, tl_cuda_positions */

#ifdef __cplusplus
extern "C" {
#endif

/* The tensors of a softmax backward, their order in pos and step. */
enum { TL_CUDA_SMB_GRAD_INPUT, TL_CUDA_SMB_GRAD, TL_CUDA_SMB_OUTPUT, TL_CUDA_SMB_TENSORS };

/* Rows at pos, len elements each, step[k] apart in tensor k. grad_input = y * (g - sum(g * y))
   (log_mode: g - exp(y) * sum(g)); it may be grad or output itself (same offsets and strides). */
typedef struct tl_cuda_softmax_backward {
    tl_cuda_where at;
    int dtype;
    bool log_mode;
    void *grad_input;
    const void *grad, *output;
    int64_t len, step[TL_CUDA_SMB_TENSORS];
    tl_cuda_positions pos;
} tl_cuda_softmax_backward;
tl_status tl_cuda_softmax_backward_run(const tl_cuda_softmax_backward *s);

#ifdef __cplusplus
}
#endif

#endif
