/* The process group: argument checks, then CPU tensors to the store's collectives and CUDA
   tensors to NCCL; the reduce ops' names. */
#include <stdlib.h>
#include <string.h>

#include "dist/group.h"
#include "dist/store_collectives.h"

static const char *const reduce_op_names[] = {"sum", "avg", "product", "min", "max"};

tl_status tl_reduce_op_parse(const char *name, tl_reduce_op *out) {
    for (int i = 0; i < (int)(sizeof reduce_op_names / sizeof reduce_op_names[0]); i++)
        if (name && strcmp(name, reduce_op_names[i]) == 0) {
            *out = (tl_reduce_op)i;
            return TL_OK;
        }
    if (name && strcmp(name, "mean") == 0) {
        *out = TL_REDUCE_AVG;
        return TL_OK;
    }
    return tl_error(TL_ERR_ARGUMENT,
                    "all_reduce: op expected \"sum\", \"avg\", \"product\", \"min\" or \"max\", "
                    "got %s%s%s",
                    name ? "\"" : "", name ? name : "nothing", name ? "\"" : "");
}

const char *tl_reduce_op_name(tl_reduce_op op) {
    return (unsigned)op < sizeof reduce_op_names / sizeof reduce_op_names[0] ? reduce_op_names[op]
                                                                             : "unknown";
}

tl_status tl_process_group_new(tl_store *store, int rank, int world_size, int cuda_device,
                               tl_process_group **out) {
    if (!out) return tl_error(TL_ERR_ARGUMENT, "process_group: out is NULL");
    if (world_size < 1)
        return tl_error(TL_ERR_ARGUMENT, "process_group: world_size must be >= 1, got %d",
                        world_size);
    if (rank < 0 || rank >= world_size)
        return tl_error(TL_ERR_ARGUMENT,
                        "process_group: rank must be in [0, %d) for a world of %d, got %d",
                        world_size, world_size, rank);
    if (world_size > 1 && !store)
        return tl_error(TL_ERR_ARGUMENT,
                        "process_group: a world of %d ranks needs a store to meet in", world_size);
    if (cuda_device < 0)
        return tl_error(TL_ERR_ARGUMENT, "process_group: cuda_device must be >= 0, got %d",
                        cuda_device);
    tl_process_group *group = calloc(1, sizeof *group);
    if (!group) return tl_error(TL_ERR_MEMORY, "process_group: out of memory");
    *group = (tl_process_group){
        .store = store, .rank = rank, .world_size = world_size, .cuda_device = cuda_device};
    *out = group;
    return TL_OK;
}

void tl_process_group_free(tl_process_group *group) {
    if (!group) return;
    tl_nccl_free(group->nccl);
    free(group);
}

int tl_process_group_rank(const tl_process_group *group) {
    return group ? group->rank : 0;
}

int tl_process_group_world_size(const tl_process_group *group) {
    return group ? group->world_size : 1;
}

/* The checks every collective makes on its tensor. */
static tl_status check_tensor(const tl_process_group *group, const tl_tensor *t, const char *op) {
    if (!group) return tl_error(TL_ERR_ARGUMENT, "%s: the process group is NULL", op);
    if (!t) return tl_error(TL_ERR_ARGUMENT, "%s: expected a tensor, got NULL", op);
    if (!tl_is_contiguous(t))
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: expected a contiguous tensor (reduce a contiguous copy and copy it "
                        "back)",
                        op);
    tl_device device = tl_tensor_device(t);
    if (device.type == TL_DEVICE_CUDA && device.index != group->cuda_device)
        return tl_error(TL_ERR_DEVICE,
                        "%s: the tensor is on cuda:%d but this rank's group runs on cuda:%d", op,
                        device.index, group->cuda_device);
    return TL_OK;
}

static tl_status check_reduce(const tl_tensor *t, tl_reduce_op op) {
    if ((unsigned)op > TL_REDUCE_MAX)
        return tl_error(TL_ERR_ARGUMENT, "all_reduce: unknown reduce op %d", (int)op);
    if (t->dtype == TL_BOOL && op != TL_REDUCE_MIN && op != TL_REDUCE_MAX)
        return tl_error(TL_ERR_DTYPE,
                        "all_reduce: op \"%s\" does not take bool tensors (use \"min\" for all, "
                        "\"max\" for any)",
                        tl_reduce_op_name(op));
    if (op == TL_REDUCE_AVG && !tl_dtype_is_floating(t->dtype))
        return tl_error(TL_ERR_DTYPE,
                        "all_reduce: op \"avg\" needs a floating dtype, got %s (use \"sum\")",
                        tl_dtype_name(t->dtype));
    return TL_OK;
}

static bool on_cuda(const tl_tensor *t) {
    return tl_tensor_device(t).type == TL_DEVICE_CUDA;
}

tl_status tl_all_reduce(tl_process_group *group, tl_tensor *t, tl_reduce_op op) {
    TL_TRY(check_tensor(group, t, "all_reduce"));
    TL_TRY(check_reduce(t, op));
    if (tl_numel(t) == 0) return TL_OK;
    if (on_cuda(t))
        TL_TRY(tl_nccl_all_reduce(group, t, op, false, NULL));
    else if (group->world_size > 1)
        TL_TRY(tl_store_all_reduce(group, t, op));
    tl_bump_version(t);
    return TL_OK;
}

tl_status tl_broadcast(tl_process_group *group, tl_tensor *t, int root) {
    TL_TRY(check_tensor(group, t, "broadcast"));
    if (root < 0 || root >= group->world_size)
        return tl_error(TL_ERR_ARGUMENT, "broadcast: root must be a rank in [0, %d), got %d",
                        group->world_size, root);
    if (tl_numel(t) == 0) return TL_OK;
    if (on_cuda(t))
        TL_TRY(tl_nccl_broadcast(group, t, root));
    else if (group->world_size > 1)
        TL_TRY(tl_store_broadcast(group, t, root));
    tl_bump_version(t);
    return TL_OK;
}

tl_status tl_barrier(tl_process_group *group) {
    if (!group) return tl_error(TL_ERR_ARGUMENT, "barrier: the process group is NULL");
    return group->world_size > 1 ? tl_store_barrier(group) : TL_OK;
}

tl_status tl_all_reduce_start(tl_process_group *group, tl_tensor *t, tl_reduce_op op,
                              tl_work **out) {
    if (!out) return tl_error(TL_ERR_ARGUMENT, "all_reduce: out is NULL");
    TL_TRY(check_tensor(group, t, "all_reduce"));
    TL_TRY(check_reduce(t, op));
    tl_work *work = calloc(1, sizeof *work);
    if (!work) return tl_error(TL_ERR_MEMORY, "all_reduce: out of memory");
    tl_status status = TL_OK;
    if (tl_numel(t) == 0)
        status = TL_OK;
    else if (on_cuda(t))
        status = tl_nccl_all_reduce(group, t, op, true, &work->nccl);
    else if (group->world_size > 1)
        status = tl_store_all_reduce(group, t, op);
    if (status != TL_OK) {
        free(work);
        return status;
    }
    tl_bump_version(t);
    *out = work;
    return TL_OK;
}

tl_status tl_work_wait(tl_work *w) {
    if (!w) return tl_error(TL_ERR_ARGUMENT, "work_wait: the work is NULL");
    return w->nccl ? tl_nccl_work_wait(w->nccl) : TL_OK;
}

tl_status tl_work_timing(tl_work *w, double *queued_ms, double *comm_ms) {
    if (!w || !queued_ms || !comm_ms)
        return tl_error(TL_ERR_ARGUMENT, "work_timing: NULL argument");
    *queued_ms = *comm_ms = 0;
    return w->nccl ? tl_nccl_work_timing(w->nccl, queued_ms, comm_ms) : TL_OK;
}

void tl_work_free(tl_work *w) {
    if (!w) return;
    tl_nccl_work_free(w->nccl);
    free(w);
}

#ifndef TLUA_HAVE_NCCL
/* A build without NCCL: CUDA tensors cannot be reduced across ranks. */
bool tl_distributed_nccl_available(void) {
    return false;
}

static tl_status no_nccl(const char *op) {
    return tl_error(TL_ERR_DEVICE,
                    "%s: this build has no NCCL, so CUDA tensors cannot be reduced across ranks "
                    "(build with CUDA and NCCL, or use CPU tensors)",
                    op);
}

tl_status tl_nccl_all_reduce(tl_process_group *group, tl_tensor *t, tl_reduce_op op, bool overlap,
                             tl_nccl_work **work) {
    (void)group, (void)t, (void)op, (void)overlap, (void)work;
    return no_nccl("all_reduce");
}

tl_status tl_nccl_broadcast(tl_process_group *group, tl_tensor *t, int root) {
    (void)group, (void)t, (void)root;
    return no_nccl("broadcast");
}

tl_status tl_nccl_work_wait(tl_nccl_work *work) {
    (void)work;
    return TL_OK;
}

tl_status tl_nccl_work_timing(tl_nccl_work *work, double *queued_ms, double *comm_ms) {
    (void)work, (void)queued_ms, (void)comm_ms;
    return TL_OK;
}

void tl_nccl_work_free(tl_nccl_work *work) {
    (void)work;
}

void tl_nccl_free(tl_nccl_state *state) {
    (void)state;
}
#endif
