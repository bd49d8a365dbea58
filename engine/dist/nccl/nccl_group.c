/* The NCCL backend of the process group: one communicator per group (its unique id passed
   through the store), collectives on the device's stream, and overlapped ones (all-reduce,
   reduce-scatter, all-gather) on a communication stream ordered against the compute stream by
   events. */
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "core/cuda/cuda_runtime.h"
#include "dist/group.h"

struct tl_nccl_state {
    ncclComm_t comm;
    cudaStream_t comm_stream; /* the overlapped collectives */
    bool broken;              /* a collective failed: the communicator was aborted */
};

struct tl_nccl_work {
    int device;
    tl_tensor *tensors[2];  /* kept until the compute stream waits for the work (in, out) */
    cudaEvent_t ready;      /* on the compute stream: the tensors' producers are done */
    cudaEvent_t comm_start; /* on the communication stream, before the collective */
    cudaEvent_t done;       /* on the communication stream, after it */
    bool waited;
};

bool tl_distributed_nccl_available(void) {
    return true;
}

static tl_status nccl_fail(ncclResult_t result, ncclComm_t comm, const char *op, const char *what) {
    const char *detail = comm ? ncclGetLastError(comm) : NULL;
    return tl_error(TL_ERR_RUNTIME, "%s: NCCL error: %s (%s)%s%s", op, ncclGetErrorString(result),
                    what, detail && detail[0] ? ": " : "", detail ? detail : "");
}

/* The unique id of the group's communicator: made by rank 0, read by the others. */
static tl_status exchange_unique_id(tl_process_group *group, ncclUniqueId *id) {
    if (group->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess) return nccl_fail(r, NULL, "init", "ncclGetUniqueId");
        if (group->store) TL_TRY(tl_store_set(group->store, "pg/nccl/id", id, sizeof *id));
        return TL_OK;
    }
    void *value = NULL;
    size_t size = 0;
    TL_TRY(tl_store_get(group->store, "pg/nccl/id", &value, &size));
    if (size != sizeof *id) {
        free(value);
        return tl_error(TL_ERR_RUNTIME,
                        "init: the NCCL id in the store has %zu bytes, expected %zu (a rank of "
                        "another tlua version?)",
                        size, sizeof *id);
    }
    memcpy(id, value, sizeof *id);
    free(value);
    return TL_OK;
}

static tl_status ensure_comm(tl_process_group *group, const char *op, cudaStream_t *compute) {
    TL_TRY(tl_cuda_stream(group->cuda_device, op, compute));
    if (group->nccl) {
        if (group->nccl->broken)
            return tl_error(TL_ERR_RUNTIME,
                            "%s: an earlier collective of this group failed; the NCCL "
                            "communicator was aborted (restart the job)",
                            op);
        return TL_OK;
    }
    ncclUniqueId id;
    TL_TRY(exchange_unique_id(group, &id));
    tl_nccl_state *state = calloc(1, sizeof *state);
    if (!state) return tl_error(TL_ERR_MEMORY, "%s: out of memory", op);
    ncclResult_t r = ncclCommInitRank(&state->comm, group->world_size, id, group->rank);
    if (r != ncclSuccess) {
        free(state);
        return nccl_fail(r, NULL, op, "ncclCommInitRank");
    }
    int low = 0, high = 0;
    cudaError_t err = cudaDeviceGetStreamPriorityRange(&low, &high);
    if (err == cudaSuccess)
        err = cudaStreamCreateWithPriority(&state->comm_stream, cudaStreamNonBlocking, high);
    if (err != cudaSuccess) {
        ncclCommDestroy(state->comm);
        free(state);
        return tl_cuda_fail(err, op, "creating the communication stream");
    }
    group->nccl = state;
    return TL_OK;
}

static tl_status nccl_dtype(tl_dtype dtype, const char *op, ncclDataType_t *out) {
    switch (dtype) {
    case TL_F32:
        *out = ncclFloat32;
        return TL_OK;
    case TL_F64:
        *out = ncclFloat64;
        return TL_OK;
    case TL_BF16:
        *out = ncclBfloat16;
        return TL_OK;
    case TL_F16:
        *out = ncclFloat16;
        return TL_OK;
    case TL_I32:
        *out = ncclInt32;
        return TL_OK;
    case TL_I64:
        *out = ncclInt64;
        return TL_OK;
    case TL_BOOL:
        *out = ncclUint8;
        return TL_OK;
    default:
        return tl_error(TL_ERR_DTYPE, "%s: NCCL does not take dtype %s", op, tl_dtype_name(dtype));
    }
}

static ncclRedOp_t nccl_op(tl_reduce_op op) {
    switch (op) {
    case TL_REDUCE_AVG:
        return ncclAvg;
    case TL_REDUCE_PRODUCT:
        return ncclProd;
    case TL_REDUCE_MIN:
        return ncclMin;
    case TL_REDUCE_MAX:
        return ncclMax;
    default:
        return ncclSum;
    }
}

/* A failed collective leaves the communicator unusable: abort it so no rank waits on it. */
static tl_status collective_failed(tl_process_group *group, ncclResult_t r, const char *op,
                                   const char *what) {
    tl_status status = nccl_fail(r, group->nccl->comm, op, what);
    ncclCommAbort(group->nccl->comm);
    group->nccl->comm = NULL;
    group->nccl->broken = true;
    return status;
}

static void work_destroy(tl_nccl_work *work) {
    if (work->ready) cudaEventDestroy(work->ready);
    if (work->comm_start) cudaEventDestroy(work->comm_start);
    if (work->done) cudaEventDestroy(work->done);
    tl_release(work->tensors[0]);
    tl_release(work->tensors[1]);
    free(work);
}

/* A work keeping in and out (out may be NULL, or in itself: one reference each). */
static tl_status work_new(int device, const char *op, const tl_tensor *in, tl_tensor *out,
                          tl_nccl_work **result) {
    tl_nccl_work *work = calloc(1, sizeof *work);
    if (!work) return tl_error(TL_ERR_MEMORY, "%s: out of memory", op);
    work->device = device;
    cudaError_t err = cudaEventCreate(&work->ready);
    if (err == cudaSuccess) err = cudaEventCreate(&work->comm_start);
    if (err == cudaSuccess) err = cudaEventCreate(&work->done);
    if (err != cudaSuccess) {
        work_destroy(work);
        return tl_cuda_fail(err, op, "creating events");
    }
    work->tensors[0] = tl_retain((tl_tensor *)in);
    if (out && out != in) work->tensors[1] = tl_retain(out);
    *result = work;
    return TL_OK;
}

typedef enum { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER } collective_kind;

/* One collective call: count is NCCL's (the output's elements for a reduce-scatter, the
   input's for an all-gather). */
typedef struct collective {
    collective_kind kind;
    const char *op, *call; /* "all_reduce", "ncclAllReduce" */
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dtype;
    ncclRedOp_t reduce;
} collective;

static ncclResult_t issue(const collective *c, ncclComm_t comm, cudaStream_t stream) {
    switch (c->kind) {
    case REDUCE_SCATTER:
        return ncclReduceScatter(c->send, c->recv, c->count, c->dtype, c->reduce, comm, stream);
    case ALL_GATHER:
        return ncclAllGather(c->send, c->recv, c->count, c->dtype, comm, stream);
    default:
        return ncclAllReduce(c->send, c->recv, c->count, c->dtype, c->reduce, comm, stream);
    }
}

/* Runs c on the compute stream, or (overlap) on the communication stream after the work queued
   on the compute stream so far, with *result a work that keeps in and out. */
static tl_status run(tl_process_group *group, const collective *c, const tl_tensor *in,
                     tl_tensor *out, bool overlap, tl_nccl_work **result) {
    cudaStream_t compute;
    TL_TRY(ensure_comm(group, c->op, &compute));
    if (!overlap) {
        ncclResult_t r = issue(c, group->nccl->comm, compute);
        return r == ncclSuccess ? TL_OK : collective_failed(group, r, c->op, c->call);
    }
    tl_nccl_work *work = NULL;
    TL_TRY(work_new(group->cuda_device, c->op, in, out, &work));
    cudaStream_t comm = group->nccl->comm_stream;
    cudaError_t err = cudaEventRecord(work->ready, compute);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(comm, work->ready, 0);
    if (err == cudaSuccess) err = cudaEventRecord(work->comm_start, comm);
    if (err != cudaSuccess) {
        work_destroy(work);
        return tl_cuda_fail(err, c->op, "ordering the communication stream");
    }
    ncclResult_t r = issue(c, group->nccl->comm, comm);
    if (r != ncclSuccess) {
        work_destroy(work);
        return collective_failed(group, r, c->op, c->call);
    }
    err = cudaEventRecord(work->done, comm);
    if (err != cudaSuccess) {
        work_destroy(work);
        return tl_cuda_fail(err, c->op, "recording the end of the collective");
    }
    *result = work;
    return TL_OK;
}

tl_status tl_nccl_all_reduce(tl_process_group *group, tl_tensor *t, tl_reduce_op op, bool overlap,
                             tl_nccl_work **out) {
    collective c = {.kind = ALL_REDUCE,
                    .op = "all_reduce",
                    .call = "ncclAllReduce",
                    .send = tl_data(t),
                    .recv = tl_data(t),
                    .count = (size_t)tl_numel(t),
                    .reduce = nccl_op(op)};
    TL_TRY(nccl_dtype(t->dtype, c.op, &c.dtype));
    return run(group, &c, t, NULL, overlap, out);
}

tl_status tl_nccl_reduce_scatter(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                                 tl_reduce_op op, bool overlap, tl_nccl_work **work) {
    collective c = {.kind = REDUCE_SCATTER,
                    .op = "reduce_scatter",
                    .call = "ncclReduceScatter",
                    .send = tl_data(in),
                    .recv = tl_data(out),
                    .count = (size_t)tl_numel(out),
                    .reduce = nccl_op(op)};
    TL_TRY(nccl_dtype(in->dtype, c.op, &c.dtype));
    return run(group, &c, in, out, overlap, work);
}

tl_status tl_nccl_all_gather(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                             bool overlap, tl_nccl_work **work) {
    collective c = {.kind = ALL_GATHER,
                    .op = "all_gather",
                    .call = "ncclAllGather",
                    .send = tl_data(in),
                    .recv = tl_data(out),
                    .count = (size_t)tl_numel(in)};
    TL_TRY(nccl_dtype(in->dtype, c.op, &c.dtype));
    return run(group, &c, in, out, overlap, work);
}

tl_status tl_nccl_broadcast(tl_process_group *group, tl_tensor *t, int root) {
    ncclDataType_t dtype = ncclFloat32;
    TL_TRY(nccl_dtype(t->dtype, "broadcast", &dtype));
    cudaStream_t compute;
    TL_TRY(ensure_comm(group, "broadcast", &compute));
    void *data = tl_data(t);
    ncclResult_t r =
        ncclBroadcast(data, data, (size_t)tl_numel(t), dtype, root, group->nccl->comm, compute);
    return r == ncclSuccess ? TL_OK : collective_failed(group, r, "broadcast", "ncclBroadcast");
}

tl_status tl_nccl_work_wait(tl_nccl_work *work) {
    cudaStream_t compute;
    TL_TRY(tl_cuda_stream(work->device, "work_wait", &compute));
    TL_CUDA_TRY(cudaStreamWaitEvent(compute, work->done, 0), "work_wait", "cudaStreamWaitEvent");
    work->waited = true;
    return TL_OK;
}

tl_status tl_nccl_work_timing(tl_nccl_work *work, double *queued_ms, double *comm_ms) {
    TL_CUDA_TRY(cudaEventSynchronize(work->done), "work_timing", "waiting for the collective");
    float queued = 0, comm = 0;
    TL_CUDA_TRY(cudaEventElapsedTime(&queued, work->ready, work->done), "work_timing",
                "cudaEventElapsedTime");
    TL_CUDA_TRY(cudaEventElapsedTime(&comm, work->comm_start, work->done), "work_timing",
                "cudaEventElapsedTime");
    *queued_ms = queued;
    *comm_ms = comm;
    return TL_OK;
}

void tl_nccl_work_free(tl_nccl_work *work) {
    if (!work) return;
    /* nobody waited: later work on the compute stream (which may reuse the tensors' memory
       once they are released) must still come after the collective */
    if (!work->waited) (void)tl_nccl_work_wait(work);
    work_destroy(work);
}

void tl_nccl_free(tl_nccl_state *state) {
    if (!state) return;
    if (state->comm_stream) {
        cudaStreamSynchronize(state->comm_stream);
        cudaStreamDestroy(state->comm_stream);
    }
    if (state->comm) ncclCommDestroy(state->comm);
    free(state);
}
