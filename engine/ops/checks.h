/* Internal: the argument checks every functional op starts with. */
#ifndef TLUA_OPS_CHECKS_H
#define TLUA_OPS_CHECKS_H

#include "tlua/tensor.h"

/* t is a tensor (not NULL) of a valid dtype; messages name op and arg. */
static inline tl_status tl_check_tensor_arg(const char *op, const char *arg, const tl_tensor *t) {
    if (!t)
        return tl_error(TL_ERR_ARGUMENT, "%s: argument '%s' is NULL (expected a tensor)", op, arg);
    if ((unsigned)t->dtype >= TL_DTYPE_COUNT)
        return tl_error(TL_ERR_DTYPE, "%s: argument '%s' has an invalid dtype %d", op, arg,
                        (int)t->dtype);
    return TL_OK;
}

#endif
