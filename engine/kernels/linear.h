/* Linear and outer-product kernels: pure compute through tl_gemm, no autograd.
   Operands are row-major 2-D tensors with unit column stride (vectors contiguous);
   outputs are preallocated by the ops layer (engine/ops/linear.c). */
#ifndef TLUA_KERNELS_LINEAR_H
#define TLUA_KERNELS_LINEAR_H

#include <stdbool.h>

#include "tlua/tensor.h"

/* out[N, O] = input[N, I] @ weight[O, I]^T (+ bias[O] on every row when bias is not NULL, by the
   GEMM's epilogue; bias has out's dtype) */
tl_status tl_gemm_linear_forward(const tl_tensor *input, const tl_tensor *weight,
                                 const tl_tensor *bias, tl_tensor *out);
/* out[N, O] += input[N, I] @ weight[O, I]^T */
tl_status tl_gemm_linear_add_forward(const tl_tensor *input, const tl_tensor *weight,
                                     tl_tensor *out);
/* pre[N, O] = input @ weight^T (+ bias), out[N, O] = gelu_tanh(pre), in one GEMM (its gelu_aux
   epilogue); pre and bias have out's dtype */
tl_status tl_gemm_linear_gelu_forward(const tl_tensor *input, const tl_tensor *weight,
                                      const tl_tensor *bias, tl_tensor *out, tl_tensor *pre);
/* grad_input[N, I] = grad_out[N, O] @ weight[O, I] */
tl_status tl_gemm_linear_backward_input(const tl_tensor *grad_out, const tl_tensor *weight,
                                        tl_tensor *grad_input);
/* grad_input[N, I] = (grad_out @ weight) * gelu_tanh'(pre[N, I]), in one GEMM (its dgelu
   epilogue); pre has grad_input's dtype */
tl_status tl_gemm_linear_backward_input_dgelu(const tl_tensor *grad_out, const tl_tensor *weight,
                                              const tl_tensor *pre, tl_tensor *grad_input);
/* grad_weight[O, I] = grad_out[N, O]^T @ input[N, I], added to grad_weight when accumulate;
   with grad_bias (not with accumulate), also grad_bias[O] = the sum of grad_out's rows, by the
   same GEMM (its bgradb epilogue; grad_bias has grad_weight's dtype) */
tl_status tl_gemm_linear_backward_weight(const tl_tensor *grad_out, const tl_tensor *input,
                                         bool accumulate, tl_tensor *grad_weight,
                                         tl_tensor *grad_bias);
/* grad_bias[O] = grad_out[N, O]^T @ ones[N] (the sum of grad_out's rows), added to grad_bias
   when accumulate */
tl_status tl_gemm_linear_backward_bias(const tl_tensor *grad_out, const tl_tensor *ones,
                                       bool accumulate, tl_tensor *grad_bias);
/* out[N, M] = a[N] b[M]^T */
tl_status tl_gemm_outer_forward(const tl_tensor *a, const tl_tensor *b, tl_tensor *out);

#endif
