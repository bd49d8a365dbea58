/* Internal: matmul with the op its GEMMs are traced under, for the split backward ops. */
#ifndef TLUA_OPS_MATMUL_H
#define TLUA_OPS_MATMUL_H

#include <stdbool.h>

#include "kernels/op.h"
#include "tlua/tensor.h"

/* out = a @ b with torch.matmul's rules; the GEMMs are traced under op. */
tl_status tl_matmul_as(tl_op op, const tl_tensor *a, const tl_tensor *b, tl_tensor **out);

/* out = a @ b for a [m, k], b [k, n] (2-D, validated by the caller) into out [m, n], contiguous
   and apart from a and b; an operand GEMM cannot read in place is read from a contiguous copy. */
tl_status tl_matmul_into_as(tl_op op, const tl_tensor *a, const tl_tensor *b, tl_tensor *out);

#endif
