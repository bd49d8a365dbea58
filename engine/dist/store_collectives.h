/* Collectives of CPU tensors through the store (every rank gets the same bits). */
#ifndef TLUA_DIST_STORE_COLLECTIVES_H
#define TLUA_DIST_STORE_COLLECTIVES_H

#include "dist/group.h"

/* t: a contiguous CPU tensor; the group has a store. */
tl_status tl_store_all_reduce(tl_process_group *group, tl_tensor *t, tl_reduce_op op);
/* in, out: contiguous CPU tensors of one dtype, checked against each other (in place: out is
   in's chunk of this rank, or in is out's). */
tl_status tl_store_reduce_scatter(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                                  tl_reduce_op op);
tl_status tl_store_all_gather(tl_process_group *group, const tl_tensor *in, tl_tensor *out);
tl_status tl_store_broadcast(tl_process_group *group, tl_tensor *t, int root);
tl_status tl_store_barrier(tl_process_group *group);

#endif
