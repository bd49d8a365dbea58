/* Internal: the view half of reshape (view.c, reshape.c) and movedim's permutation. */
#ifndef TLUA_OPS_VIEW_H
#define TLUA_OPS_VIEW_H

#include "tlua/tensor.h"

/* *out = a view of t with shape (one -1 inferred; errors name op), or NULL when t's
   strides cannot express that shape without a copy. */
tl_status tl_view_if_possible(const char *op, tl_tensor *t, const int64_t *shape, int ndim,
                              tl_tensor **out);

/* movedim's permutation (tl_permute's dims: perm[i] = the dim of t placed at i). */
tl_status tl_movedim_order(const tl_tensor *t, const int *from, const int *to, int n, int *perm);

#endif
