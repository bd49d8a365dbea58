/* Matmul kernels through tl_gemm: forward with an op tag, and the two split backward kernels. */
#ifndef TLUA_MATMUL_H
#define TLUA_MATMUL_H

#include "kernels/op.h"
#include "tlua/tensor.h"

/* out = a @ b with torch.matmul's rules; the GEMMs are traced under op. */
tl_status tl_matmul_as(tl_op op, const tl_tensor *a, const tl_tensor *b, tl_tensor **out);

/* For out = input @ other (matmul rules, broadcast batch dims, 1-D operands):
   d(loss)/d(input) = grad @ other^T summed to input's shape, and
   d(loss)/d(other) = input^T @ grad summed to other's shape. "=" semantics. */
tl_status tl_matmul_backward_input(const tl_tensor *grad, const tl_tensor *other,
                                   const int64_t *input_shape, int input_ndim, tl_tensor **out);
tl_status tl_matmul_backward_other(const tl_tensor *grad, const tl_tensor *input,
                                   const int64_t *other_shape, int other_ndim, tl_tensor **out);

#endif
