/* Internal: scaled dot-product attention forward and backward on cuDNN's fused flash-attention
   engines (attention_dnn.c), for a caller that falls back to its own kernel when declined. */
#ifndef TLUA_KERNELS_CUDA_ATTENTION_DNN_H
#define TLUA_KERNELS_CUDA_ATTENTION_DNN_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "tlua/dtype.h"
#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The [B, H, rows, D] operands, in the order of tl_cuda_attention's (attention_common.cuh): q,
   out, grad_out and grad_q have T rows, k, v, grad_k and grad_v S rows. */
enum {
    TL_ATTENTION_DNN_Q,
    TL_ATTENTION_DNN_K,
    TL_ATTENTION_DNN_V,
    TL_ATTENTION_DNN_OUT,
    TL_ATTENTION_DNN_GRAD_OUT,
    TL_ATTENTION_DNN_GRAD_Q,
    TL_ATTENTION_DNN_GRAD_K,
    TL_ATTENTION_DNN_GRAD_V,
    TL_ATTENTION_DNN_OPERANDS
};

/* One attention call (kernels/kernel.h's contract, without dropout): p = softmax(scale q k^T,
   masked when causal: query i sees keys j <= i), out = p v, lse = the natural-log logsumexp of
   the masked scaled scores per query.
   device: the CUDA device; stream: NULL or that device's engine stream (tl_cuda_stream: cuDNN's
   handle is bound to it), another stream is declined. dtype: TL_BF16 or TL_F16 (others are
   declined). data[i]: operand i (NULL where the call does not use it); stride[i]: its strides of
   dims b, h and row, in elements (the last dim's stride is 1). lse: float32 [B, H, T]
   contiguous. dropout: must be 0 (cuDNN's dropout mask is not tlua's Philox mask).
   deterministic (backward): grad_q summed in a fixed order, so that equal inputs give equal bits;
   otherwise cuDNN adds the key blocks' parts of grad_q with float32 atomics (the last bits vary
   from run to run; on an H200 at B 16, H 12, T = S = 1024 that is 10% faster at D = 64, 3%
   slower at D = 128). A grad_q accumulator of over 1 GiB (B H T D float32) takes this path too.
   Declined (cuDNN's engines or this graph do not take them): another dtype, dropout > 0, D not a
   multiple of 8 or over 128, an empty problem, T = S = 1, a pointer (lse too) not 16-byte
   aligned, a stride not a multiple of 8 elements or not positive on a dim of size > 1, a missing
   operand, another stream, and whatever cuDNN's heuristics find no engine for within 1 GiB of
   workspace (remembered per problem: it is not tried again). */
typedef struct tl_attention_dnn_call {
    int device;
    cudaStream_t stream;
    tl_dtype dtype;
    int64_t B, H, T, S, D;
    void *data[TL_ATTENTION_DNN_OPERANDS];
    int64_t stride[TL_ATTENTION_DNN_OPERANDS][3];
    float *lse;
    double scale, dropout;
    bool causal, deterministic;
} tl_attention_dnn_call;

/* The forward: reads q, k, v, writes out and lse ("="). *declined is set when cuDNN cannot run
   this problem (the status is then TL_OK and nothing was written: run tlua's kernel instead);
   an error is a real failure (cuDNN failed to run the plan, out of memory), naming the op.
   The plan of a problem is built on its first call and kept, so a later call (a CUDA graph's
   capture included) only binds pointers, takes a workspace from the caching allocator and runs. */
tl_status tl_attention_forward_dnn(const tl_attention_dnn_call *call, bool *declined);

/* The backward: reads q, k, v, out, grad_out and lse (the forward's), writes grad_q, grad_k and
   grad_v ("="; all three are needed, a NULL one is declined). Declines and errors as above. */
tl_status tl_attention_backward_dnn(const tl_attention_dnn_call *call, bool *declined);

/* Why the last call of this thread declined ("" when it did not): for traces and specs. */
const char *tl_attention_dnn_declined_why(void);

#ifdef __cplusplus
}
#endif

#endif
