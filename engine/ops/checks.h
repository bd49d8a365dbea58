/* Internal: the argument checks every functional op starts with. */
#ifndef TLUA_OPS_CHECKS_H
#define TLUA_OPS_CHECKS_H

#include <stdbool.h>

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

/* ---- in-place ops (inplace_checks.c) ---- */
/* t (the argument named arg) can take a result in place: a valid tensor without elements that
   share memory (an expanded dim). */
tl_status tl_check_writable(const char *op, const char *arg, const tl_tensor *t);
/* A result of dtype `result` can be stored in x's dtype (PyTorch's can_cast: no floating value
   into an integer or bool x, no integer into a bool x). */
tl_status tl_check_result_fits(const char *op, tl_dtype result, const tl_tensor *x);
/* other broadcasts to x's shape exactly (an in-place result never grows x). */
tl_status tl_check_broadcasts_to(const char *op, const tl_tensor *other, const tl_tensor *x);
/* a and b are the same elements: one storage, dtype, offset, shape and strides. */
bool tl_same_elements(const tl_tensor *a, const tl_tensor *b);
/* a's and b's elements may share memory (their byte ranges in one storage intersect). */
bool tl_may_overlap(const tl_tensor *a, const tl_tensor *b);

#endif
