/* Internal: the view half of reshape, shared by view.c and reshape.c. */
#ifndef TLUA_OPS_VIEW_H
#define TLUA_OPS_VIEW_H

#include "tlua/tensor.h"

/* *out = a view of t with shape (one -1 inferred; errors name op), or NULL when t's
   strides cannot express that shape without a copy. */
tl_status tl_view_if_possible(const char *op, tl_tensor *t, const int64_t *shape, int ndim,
                              tl_tensor **out);

#endif
