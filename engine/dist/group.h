/* The process group's private parts: its state, and the NCCL backend's entry points. */
#ifndef TLUA_DIST_GROUP_H
#define TLUA_DIST_GROUP_H

#include "tlua/distributed.h"

typedef struct tl_nccl_state tl_nccl_state;

struct tl_process_group {
    tl_store *store; /* borrowed; NULL for a world of one */
    int rank, world_size;
    int cuda_device;
    uint64_t store_sequence;   /* collectives of CPU tensors so far (their keys' prefix) */
    uint64_t barrier_sequence; /* barriers so far */
    tl_nccl_state *nccl;       /* made by the first collective of CUDA tensors */
};

/* A work of the NCCL backend (engine/dist/nccl/); a CPU work is done when made. */
typedef struct tl_nccl_work tl_nccl_work;
struct tl_work {
    tl_nccl_work *nccl; /* NULL for a CPU work */
};

/* The NCCL backend (a build without NCCL answers that it has none). Tensors are contiguous
   CUDA tensors already checked against the group's device, each other (dtype, sizes, overlap)
   and the op's dtype rules. With overlap, *work gets the work (which keeps the tensors). */
tl_status tl_nccl_all_reduce(tl_process_group *group, tl_tensor *t, tl_reduce_op op, bool overlap,
                             tl_nccl_work **work);
/* out gets the reduction of chunk `rank` of in (world_size * numel(out) elements). */
tl_status tl_nccl_reduce_scatter(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                                 tl_reduce_op op, bool overlap, tl_nccl_work **work);
/* out (world_size * numel(in) elements) gets every rank's in, in rank order. */
tl_status tl_nccl_all_gather(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                             bool overlap, tl_nccl_work **work);
tl_status tl_nccl_broadcast(tl_process_group *group, tl_tensor *t, int root);
tl_status tl_nccl_work_wait(tl_nccl_work *work);
tl_status tl_nccl_work_timing(tl_nccl_work *work, double *queued_ms, double *comm_ms);
void tl_nccl_work_free(tl_nccl_work *work);
void tl_nccl_free(tl_nccl_state *state);

#endif
