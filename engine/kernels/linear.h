/* Linear and outer-product kernels: pure compute through tl_gemm, no autograd.
   Operands are row-major 2-D tensors with unit column stride (vectors contiguous);
   outputs are preallocated by the ops layer (engine/ops/linear.c). */
#ifndef TLUA_KERNELS_LINEAR_H
#define TLUA_KERNELS_LINEAR_H

#include <stdbool.h>

#include "tlua/tensor.h"

/* out[N, O] = input[N, I] @ weight[O, I]^T, added to out when accumulate (out then holds
   the bias on every row), written over it otherwise */
tl_status tl_gemm_linear_forward(const tl_tensor *input, const tl_tensor *weight, bool accumulate,
                                 tl_tensor *out);
/* grad_input[N, I] = grad_out[N, O] @ weight[O, I] */
tl_status tl_gemm_linear_backward_input(const tl_tensor *grad_out, const tl_tensor *weight,
                                        tl_tensor *grad_input);
/* grad_weight[O, I] = grad_out[N, O]^T @ input[N, I], added to grad_weight when accumulate */
tl_status tl_gemm_linear_backward_weight(const tl_tensor *grad_out, const tl_tensor *input,
                                         bool accumulate, tl_tensor *grad_weight);
/* grad_bias[O] = grad_out[N, O]^T @ ones[N] (the sum of grad_out's rows), added to grad_bias
   when accumulate */
tl_status tl_gemm_linear_backward_bias(const tl_tensor *grad_out, const tl_tensor *ones,
                                       bool accumulate, tl_tensor *grad_bias);
/* out[N, M] = a[N] b[M]^T */
tl_status tl_gemm_outer_forward(const tl_tensor *a, const tl_tensor *b, tl_tensor *out);

#endif
