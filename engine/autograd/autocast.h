/* Internal: autocast's operand casts, which the recording ops of the matmul family (to the
   autocast dtype) and of the precision-sensitive family (to float32) call first. */
#ifndef TLUA_AUTOCAST_H
#define TLUA_AUTOCAST_H

#include "tlua/autograd.h"

typedef enum tl_autocast_policy {
    TL_AUTOCAST_LOWER, /* float32 (and the other half type) -> the autocast dtype: GEMMs, attention
                        */
    TL_AUTOCAST_FLOAT, /* bfloat16/float16 -> float32: norms, softmax, losses */
} tl_autocast_policy;

/* Under autocast, replaces each eligible operand (floating, not float64, not already the
   policy's dtype; NULL entries stay NULL) by its recorded cast, a new reference, and sets
   owned[i]; otherwise leaves operands as they are (owned all false). float64 is never cast,
   as in PyTorch. */
tl_status tl_autocast_operands(tl_autocast_policy policy, int n, tl_tensor **operands, bool *owned);
/* Releases the casts tl_autocast_operands made. */
void tl_autocast_release(int n, tl_tensor **operands, const bool *owned);

#endif
