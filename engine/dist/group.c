/* The process group: argument checks, then CPU tensors to the store's collectives and CUDA
   tensors to NCCL; the reduce ops' names. */
#include <inttypes.h>
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

/* The reduction's dtype rules, for the collective `name`. */
static tl_status check_reduce(const tl_tensor *t, tl_reduce_op op, const char *name) {
    if ((unsigned)op > TL_REDUCE_MAX)
        return tl_error(TL_ERR_ARGUMENT, "%s: unknown reduce op %d", name, (int)op);
    if (t->dtype == TL_BOOL && op != TL_REDUCE_MIN && op != TL_REDUCE_MAX)
        return tl_error(TL_ERR_DTYPE,
                        "%s: op \"%s\" does not take bool tensors (use \"min\" for all, "
                        "\"max\" for any)",
                        name, tl_reduce_op_name(op));
    if (op == TL_REDUCE_AVG && !tl_dtype_is_floating(t->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: op \"avg\" needs a floating dtype, got %s (use \"sum\")",
                        name, tl_dtype_name(t->dtype));
    return TL_OK;
}

/* One tensor of a collective that reads in and writes out: present, contiguous, on the group's
   GPU when on a GPU. what: "in" or "out". */
static tl_status check_operand(const tl_process_group *group, const tl_tensor *t, const char *op,
                               const char *what) {
    if (!t) return tl_error(TL_ERR_ARGUMENT, "%s: expected a tensor as %s, got NULL", op, what);
    if (!tl_is_contiguous(t))
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: expected a contiguous %s (pass a contiguous tensor and copy it where "
                        "it belongs)",
                        op, what);
    tl_device device = tl_tensor_device(t);
    if (device.type == TL_DEVICE_CUDA && device.index != group->cuda_device)
        return tl_error(TL_ERR_DEVICE, "%s: %s is on cuda:%d but this rank's group runs on cuda:%d",
                        op, what, device.index, group->cuda_device);
    return TL_OK;
}

/* The checks of reduce_scatter (whole = in, chunk = out) and all_gather (whole = out, chunk =
   in): the whole holds world_size chunks of the chunk's size, one dtype and device, and the two
   share no memory unless the chunk is exactly the whole's chunk of this rank (in place). */
static tl_status check_chunked(const tl_process_group *group, const tl_tensor *in,
                               const tl_tensor *out, const char *op, bool in_is_whole) {
    if (!group) return tl_error(TL_ERR_ARGUMENT, "%s: the process group is NULL", op);
    TL_TRY(check_operand(group, in, op, "in"));
    TL_TRY(check_operand(group, out, op, "out"));
    if (in->dtype != out->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: out has dtype %s, expected in's dtype %s", op,
                        tl_dtype_name(out->dtype), tl_dtype_name(in->dtype));
    tl_device din = tl_tensor_device(in), dout = tl_tensor_device(out);
    if (!tl_device_equal(din, dout)) {
        char a[32], b[32];
        return tl_error(TL_ERR_DEVICE, "%s: out is on %s, expected in's device %s", op,
                        tl_device_name(dout, b), tl_device_name(din, a));
    }
    const tl_tensor *whole = in_is_whole ? in : out, *chunk = in_is_whole ? out : in;
    const char *whole_name = in_is_whole ? "in" : "out", *chunk_name = in_is_whole ? "out" : "in";
    int64_t n = tl_numel(chunk), total = tl_numel(whole), world = group->world_size;
    if (n > INT64_MAX / world)
        return tl_error(TL_ERR_SHAPE,
                        "%s: %s has %" PRId64 " elements, expected the world size %" PRId64
                        " times %s's %" PRId64 " (more than int64 counts)",
                        op, whole_name, total, world, chunk_name, n);
    if (n * world != total)
        return tl_error(TL_ERR_SHAPE,
                        "%s: %s has %" PRId64 " elements, expected %" PRId64
                        " (the world size %" PRId64 " times %s's %" PRId64 ")",
                        op, whole_name, total, n * world, world, chunk_name, n);
    if (n == 0) return TL_OK;
    size_t size = tl_dtype_size(in->dtype);
    uintptr_t w0 = (uintptr_t)tl_data(whole), c0 = (uintptr_t)tl_data(chunk);
    uintptr_t w1 = w0 + (size_t)total * size, c1 = c0 + (size_t)n * size;
    bool overlap = c0 < w1 && w0 < c1;
    if (overlap && c0 != w0 + (size_t)group->rank * (size_t)n * size)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: %s overlaps %s but is not %s's chunk of this rank (rank %d: its "
                        "elements %" PRId64 " to %" PRId64 ", counted from 0); in place, %s must "
                        "be exactly that chunk",
                        op, chunk_name, whole_name, whole_name, group->rank,
                        (int64_t)group->rank * n, (int64_t)group->rank * n + n - 1, chunk_name);
    return TL_OK;
}

/* A world of one on the CPU: out gets in's elements (nothing to do in place). */
static void copy_alone(const tl_tensor *in, tl_tensor *out) {
    if (tl_data(in) != tl_data(out))
        memmove(tl_data(out), tl_data(in), (size_t)tl_numel(in) * tl_dtype_size(in->dtype));
}

static bool on_cuda(const tl_tensor *t) {
    return tl_tensor_device(t).type == TL_DEVICE_CUDA;
}

tl_status tl_all_reduce(tl_process_group *group, tl_tensor *t, tl_reduce_op op) {
    TL_TRY(check_tensor(group, t, "all_reduce"));
    TL_TRY(check_reduce(t, op, "all_reduce"));
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
    TL_TRY(check_reduce(t, op, "all_reduce"));
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

/* reduce_scatter and all_gather, with or without a work (work: where it goes, or NULL). */
static tl_status reduce_scatter(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                                tl_reduce_op op, tl_nccl_work **work) {
    if (tl_numel(out) == 0) return TL_OK;
    if (on_cuda(out))
        TL_TRY(tl_nccl_reduce_scatter(group, in, out, op, work != NULL, work));
    else if (group->world_size > 1)
        TL_TRY(tl_store_reduce_scatter(group, in, out, op));
    else
        copy_alone(in, out); /* avg divides by 1 */
    tl_bump_version(out);
    return TL_OK;
}

static tl_status all_gather(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                            tl_nccl_work **work) {
    if (tl_numel(in) == 0) return TL_OK;
    if (on_cuda(out))
        TL_TRY(tl_nccl_all_gather(group, in, out, work != NULL, work));
    else if (group->world_size > 1)
        TL_TRY(tl_store_all_gather(group, in, out));
    else
        copy_alone(in, out);
    tl_bump_version(out);
    return TL_OK;
}

tl_status tl_reduce_scatter(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                            tl_reduce_op op) {
    TL_TRY(check_chunked(group, in, out, "reduce_scatter", true));
    TL_TRY(check_reduce(in, op, "reduce_scatter"));
    return reduce_scatter(group, in, out, op, NULL);
}

tl_status tl_all_gather(tl_process_group *group, const tl_tensor *in, tl_tensor *out) {
    TL_TRY(check_chunked(group, in, out, "all_gather", false));
    return all_gather(group, in, out, NULL);
}

tl_status tl_reduce_scatter_start(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                                  tl_reduce_op op, tl_work **out_work) {
    if (!out_work) return tl_error(TL_ERR_ARGUMENT, "reduce_scatter: out_work is NULL");
    TL_TRY(check_chunked(group, in, out, "reduce_scatter", true));
    TL_TRY(check_reduce(in, op, "reduce_scatter"));
    tl_work *work = calloc(1, sizeof *work);
    if (!work) return tl_error(TL_ERR_MEMORY, "reduce_scatter: out of memory");
    tl_status status = reduce_scatter(group, in, out, op, &work->nccl);
    if (status != TL_OK) {
        free(work);
        return status;
    }
    *out_work = work;
    return TL_OK;
}

tl_status tl_all_gather_start(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                              tl_work **out_work) {
    if (!out_work) return tl_error(TL_ERR_ARGUMENT, "all_gather: out_work is NULL");
    TL_TRY(check_chunked(group, in, out, "all_gather", false));
    tl_work *work = calloc(1, sizeof *work);
    if (!work) return tl_error(TL_ERR_MEMORY, "all_gather: out of memory");
    tl_status status = all_gather(group, in, out, &work->nccl);
    if (status != TL_OK) {
        free(work);
        return status;
    }
    *out_work = work;
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

tl_status tl_nccl_reduce_scatter(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                                 tl_reduce_op op, bool overlap, tl_nccl_work **work) {
    (void)group, (void)in, (void)out, (void)op, (void)overlap, (void)work;
    return no_nccl("reduce_scatter");
}

tl_status tl_nccl_all_gather(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                             bool overlap, tl_nccl_work **work) {
    (void)group, (void)in, (void)out, (void)overlap, (void)work;
    return no_nccl("all_gather");
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
