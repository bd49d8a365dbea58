/* Internal: matmul with the op its GEMMs are traced under, for the split backward ops. */
#ifndef TLUA_OPS_MATMUL_H
#define TLUA_OPS_MATMUL_H

#include "kernels/op.h"
#include "tlua/tensor.h"

/* out = a @ b with torch.matmul's rules; the GEMMs are traced under op. */
tl_status tl_matmul_as(tl_op op, const tl_tensor *a, const tl_tensor *b, tl_tensor **out);

#endif
