/* Internal: layouts shared by views and the ops that allocate for them: the view half of reshape
   (view.c, reshape.c), movedim's permutation, dense layouts, buffers laid out as their siblings. */
#ifndef TLUA_OPS_VIEW_H
#define TLUA_OPS_VIEW_H

#include <stdbool.h>

#include "tlua/tensor.h"

/* *out = a view of t with shape (one -1 inferred; errors name op), or NULL when t's
   strides cannot express that shape without a copy. */
tl_status tl_view_if_possible(const char *op, tl_tensor *t, const int64_t *shape, int ndim,
                              tl_tensor **out);

/* Whether a tensor of shape and strides has all its elements distinct and covering a block of
   memory without holes (its dims sorted by stride, each stride is the product of the smaller
   dims' sizes; size-1 dims are ignored): a contiguous tensor or a permutation of one. */
bool tl_is_dense_layout(const int64_t *shape, const int64_t *strides, int ndim);

/* n new tensors shaped like like[0..n-1]: when like[0..n-1] are equally spaced views of one storage
   with like[0]'s shape, strides and dtype that together make one dense block (q, k and v cut
   from one projection), n views of one new storage in that same arrangement, so that whatever
   consumes them side by side (split's backward) finds them joined; else n contiguous tensors
   of their shapes and dtypes. */
tl_status tl_empty_siblings(const tl_tensor *const *like, int n, tl_tensor **out);

/* movedim's permutation (tl_permute's dims: perm[i] = the dim of t placed at i). */
tl_status tl_movedim_order(const tl_tensor *t, const int *from, const int *to, int n, int *perm);

#endif
