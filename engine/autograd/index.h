/* Internal: what the index family's recording files share (autograd/index.c, scatter_reduce.c). */
#ifndef TLUA_AUTOGRAD_INDEX_H
#define TLUA_AUTOGRAD_INDEX_H

#include "autograd/graph.h"

/* read (index's shape; its reference is taken) as the gradient of a scatter's src (node input
   1): zero-padded to src's shape where src reached past index's extent ("="). */
tl_status tl_scatter_src_grad(tl_node *node, tl_tensor *read, tl_tensor **out);

#endif
