/* Internal: autocast's operand casts, which every recording op calls first; what each op does is
   its family's AUTOCAST row of ops.def. */
#ifndef TLUA_AUTOCAST_H
#define TLUA_AUTOCAST_H

#include "kernels/op.h"
#include "tlua/autograd.h"

/* Under autocast, replaces each operand that op's rule casts (floating, not float64, not
   already the target dtype; NULL entries stay NULL) by its recorded cast, a new reference, and
   sets casted[i]; otherwise, and for an op whose family has no AUTOCAST row, leaves the operands
   as they are (casted all false). */
tl_status tl_autocast_operands(tl_op op, tl_tensor **operands, int n, bool *casted);
/* The same casts for an op's parameters, not recorded: an op that keeps its parameters
   themselves as the node's inputs (linear, linear_cross_entropy) has its backward write their
   gradients in their own dtype (float32 master weights from bf16 GEMMs), with no cast kernel
   between. Released by tl_autocast_release likewise. */
tl_status tl_autocast_parameters(tl_op op, tl_tensor **params, int n, bool *casted);
/* Releases the casts tl_autocast_operands made and returns status (the recording's), so that a
   recording op ends with `return tl_autocast_release(operands, n, casted, record_x(...));`. */
tl_status tl_autocast_release(tl_tensor **operands, int n, const bool *casted, tl_status status);

#endif
