/* Linear and outer-product kernels: pure compute through tl_gemm, no autograd.
   Operands are row-major 2-D tensors with unit column stride; outputs are
   preallocated; every kernel has "=" semantics (overwrites its output). */
#ifndef TLUA_LINEAR_H
#define TLUA_LINEAR_H

#include "tlua/tensor.h"

/* out[N, O] = input[N, I] @ weight[O, I]^T (+ bias[O] on every row) */
tl_status tl_linear_forward(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                            tl_tensor *out);
/* grad_input[N, I] = grad_out[N, O] @ weight[O, I] */
tl_status tl_linear_backward_input(const tl_tensor *grad_out, const tl_tensor *weight,
                                   tl_tensor *grad_input);
/* grad_weight[O, I] = grad_out[N, O]^T @ input[N, I] */
tl_status tl_linear_backward_weight(const tl_tensor *grad_out, const tl_tensor *input,
                                    tl_tensor *grad_weight);
/* grad_bias[O] = the sum of grad_out[N, O]'s rows (a GEMM with a vector of ones) */
tl_status tl_linear_backward_bias(const tl_tensor *grad_out, tl_tensor *grad_bias);
/* out[N, M] = a[N] b[M]^T */
tl_status tl_outer_forward(const tl_tensor *a, const tl_tensor *b, tl_tensor *out);

#endif
