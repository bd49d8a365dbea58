/* Collectives of CPU tensors through the store: every rank posts its bytes under a key of the
   collective, reads the others' and reduces them in rank order (the same bits on every rank);
   the last reader removes the keys. A reduce-scatter posts each chunk of its input under a key
   of the rank that reduces it, who alone reads and removes it. Slow (all data goes through one
   server): for CPU training on few ranks and for tests, not for speed. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/store_collectives.h"
#include "tlua/ops.h"

static size_t tensor_bytes(const tl_tensor *t) {
    return (size_t)tl_numel(t) * tl_dtype_size(t->dtype);
}

/* TL_OK when rank's value has the size of this rank's tensor (what names it: "tensor",
   "out", "in"). */
static tl_status check_sent(size_t size, size_t expected, const char *op, int rank,
                            const char *what) {
    if (size != expected)
        return tl_error(TL_ERR_SHAPE,
                        "%s: rank %d sent %zu bytes but this rank's %s holds %zu (every rank "
                        "must pass the same shape and dtype)",
                        op, rank, size, what, expected);
    return TL_OK;
}

/* A CPU tensor shaped as t holding the bytes of value (size checked against t). */
static tl_status tensor_from_bytes(const tl_tensor *t, const void *value, size_t size,
                                   const char *op, int rank, const char *what, tl_tensor **out) {
    TL_TRY(check_sent(size, tensor_bytes(t), op, rank, what));
    return tl_from_host(value, t->shape, t->ndim, t->dtype, TL_CPU, out);
}

/* acc = acc (op) other, elementwise, in acc's dtype. */
static tl_status combine(tl_tensor *acc, const tl_tensor *other, tl_reduce_op op) {
    switch (op) {
    case TL_REDUCE_SUM:
    case TL_REDUCE_AVG:
        return tl_add_(acc, other);
    case TL_REDUCE_PRODUCT:
        return tl_mul_(acc, other);
    case TL_REDUCE_MIN:
    case TL_REDUCE_MAX: {
        tl_tensor *better = NULL, *picked = NULL;
        tl_status status =
            op == TL_REDUCE_MIN ? tl_lt(other, acc, &better) : tl_gt(other, acc, &better);
        if (status == TL_OK) status = tl_where(better, other, acc, &picked);
        if (status == TL_OK) status = tl_copy_(acc, picked);
        tl_release(better);
        tl_release(picked);
        return status;
    }
    }
    return tl_error(TL_ERR_ARGUMENT, "all_reduce: unknown reduce op %d", (int)op);
}

/* Counts this rank as done reading the keys prefix/first .. prefix/(first + keys - 1); the last
   of `readers` removes them. */
static tl_status finish_reading(tl_store *store, const char *prefix, int readers, int first,
                                int keys) {
    char key[TL_STORE_MAX_KEY];
    snprintf(key, sizeof key, "%s/read", prefix);
    int64_t count = 0;
    TL_TRY(tl_store_add(store, key, 1, &count));
    if (count < readers) return TL_OK;
    TL_TRY(tl_store_delete(store, key));
    for (int r = first; r < first + keys; r++) {
        snprintf(key, sizeof key, "%s/%d", prefix, r);
        TL_TRY(tl_store_delete(store, key));
    }
    return TL_OK;
}

/* How a reduction finds the ranks' contributions: rank r's under prefix/r (every rank reads
   it), or with per_reader under prefix/r/<this rank> (this rank alone reads it, and removes it
   once read). */
typedef struct contributions {
    const char *op, *what; /* the collective and this rank's tensor, for messages */
    const char *prefix;
    bool per_reader;
} contributions;

/* Reduces every rank's contribution in rank order into a new tensor shaped as like; this rank's
   is the bytes at own. */
static tl_status reduce_in_rank_order(tl_process_group *group, const tl_tensor *like,
                                      const void *own, const contributions *from, tl_reduce_op op,
                                      tl_tensor **out) {
    tl_tensor *acc = NULL;
    tl_status status = TL_OK;
    for (int r = 0; r < group->world_size && status == TL_OK; r++) {
        tl_tensor *part = NULL;
        if (r == group->rank) {
            status = tl_from_host(own, like->shape, like->ndim, like->dtype, TL_CPU, &part);
        } else {
            char key[TL_STORE_MAX_KEY];
            if (from->per_reader)
                snprintf(key, sizeof key, "%s/%d/%d", from->prefix, r, group->rank);
            else
                snprintf(key, sizeof key, "%s/%d", from->prefix, r);
            void *value = NULL;
            size_t size = 0;
            status = tl_store_get(group->store, key, &value, &size);
            if (status == TL_OK)
                status = tensor_from_bytes(like, value, size, from->op, r, from->what, &part);
            free(value);
            if (status == TL_OK && from->per_reader) status = tl_store_delete(group->store, key);
        }
        if (status != TL_OK) {
            tl_release(part);
            break;
        }
        if (!acc) {
            acc = part;
            continue;
        }
        status = combine(acc, part, op);
        tl_release(part);
    }
    if (status == TL_OK && op == TL_REDUCE_AVG) {
        tl_tensor *n = NULL;
        status = tl_scalar_tensor((tl_scalar){.kind = TL_SCALAR_INT, .value.i = group->world_size},
                                  acc, &n);
        if (status == TL_OK) status = tl_div_(acc, n);
        tl_release(n);
    }
    if (status != TL_OK) {
        tl_release(acc);
        return status;
    }
    *out = acc;
    return TL_OK;
}

tl_status tl_store_all_reduce(tl_process_group *group, tl_tensor *t, tl_reduce_op op) {
    char prefix[96], key[TL_STORE_MAX_KEY];
    snprintf(prefix, sizeof prefix, "pg/cpu/%" PRIu64, ++group->store_sequence);
    snprintf(key, sizeof key, "%s/%d", prefix, group->rank);
    TL_TRY(tl_store_set(group->store, key, tl_data(t), tensor_bytes(t)));
    tl_tensor *result = NULL;
    contributions from = {.op = "all_reduce", .what = "tensor", .prefix = prefix};
    TL_TRY(reduce_in_rank_order(group, t, tl_data(t), &from, op, &result));
    /* every rank reads the others' keys: the last to finish removes them */
    tl_status status =
        finish_reading(group->store, prefix, group->world_size, 0, group->world_size);
    if (status == TL_OK) status = tl_copy_(t, result);
    tl_release(result);
    return status;
}

tl_status tl_store_reduce_scatter(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                                  tl_reduce_op op) {
    char prefix[96], key[TL_STORE_MAX_KEY];
    snprintf(prefix, sizeof prefix, "pg/cpu/%" PRIu64, ++group->store_sequence);
    size_t chunk = tensor_bytes(out);
    const char *data = tl_data(in);
    /* chunk d goes to rank d alone (this rank's own chunk stays here: out may be it) */
    for (int d = 0; d < group->world_size; d++) {
        if (d == group->rank) continue;
        snprintf(key, sizeof key, "%s/%d/%d", prefix, group->rank, d);
        TL_TRY(tl_store_set(group->store, key, data + (size_t)d * chunk, chunk));
    }
    tl_tensor *result = NULL;
    contributions from = {
        .op = "reduce_scatter", .what = "out", .prefix = prefix, .per_reader = true};
    TL_TRY(
        reduce_in_rank_order(group, out, data + (size_t)group->rank * chunk, &from, op, &result));
    tl_status status = tl_copy_(out, result);
    tl_release(result);
    return status;
}

tl_status tl_store_all_gather(tl_process_group *group, const tl_tensor *in, tl_tensor *out) {
    char prefix[96], key[TL_STORE_MAX_KEY];
    snprintf(prefix, sizeof prefix, "pg/cpu/%" PRIu64, ++group->store_sequence);
    snprintf(key, sizeof key, "%s/%d", prefix, group->rank);
    size_t chunk = tensor_bytes(in);
    TL_TRY(tl_store_set(group->store, key, tl_data(in), chunk));
    /* every value is read and checked before out is written: a bad rank leaves out as it was */
    void **values = calloc((size_t)group->world_size, sizeof *values);
    if (!values) return tl_error(TL_ERR_MEMORY, "all_gather: out of memory");
    tl_status status = TL_OK;
    for (int r = 0; r < group->world_size && status == TL_OK; r++) {
        if (r == group->rank) continue;
        snprintf(key, sizeof key, "%s/%d", prefix, r);
        size_t size = 0;
        status = tl_store_get(group->store, key, &values[r], &size);
        if (status == TL_OK) status = check_sent(size, chunk, "all_gather", r, "in");
    }
    /* every rank reads the others' keys: the last to finish removes them */
    if (status == TL_OK)
        status = finish_reading(group->store, prefix, group->world_size, 0, group->world_size);
    if (status == TL_OK) {
        char *dst = tl_data(out);
        for (int r = 0; r < group->world_size; r++) {
            char *to = dst + (size_t)r * chunk;
            if (r != group->rank)
                memcpy(to, values[r], chunk);
            else if (to != (const char *)tl_data(in)) /* in place: already there */
                memmove(to, tl_data(in), chunk);
        }
    }
    for (int r = 0; r < group->world_size; r++) free(values[r]);
    free(values);
    return status;
}

tl_status tl_store_broadcast(tl_process_group *group, tl_tensor *t, int root) {
    char prefix[96], key[TL_STORE_MAX_KEY];
    snprintf(prefix, sizeof prefix, "pg/cpu/%" PRIu64, ++group->store_sequence);
    snprintf(key, sizeof key, "%s/%d", prefix, root);
    if (group->rank == root) return tl_store_set(group->store, key, tl_data(t), tensor_bytes(t));
    void *value = NULL;
    size_t size = 0;
    TL_TRY(tl_store_get(group->store, key, &value, &size));
    tl_tensor *got = NULL;
    tl_status status = tensor_from_bytes(t, value, size, "broadcast", root, "tensor", &got);
    free(value);
    if (status == TL_OK) status = tl_copy_(t, got);
    tl_release(got);
    if (status != TL_OK) return status;
    return finish_reading(group->store, prefix, group->world_size - 1, root, 1);
}

tl_status tl_store_barrier(tl_process_group *group) {
    char arrived[TL_STORE_MAX_KEY], go[TL_STORE_MAX_KEY], left[TL_STORE_MAX_KEY];
    uint64_t n = ++group->barrier_sequence;
    snprintf(arrived, sizeof arrived, "pg/barrier/%" PRIu64 "/arrived", n);
    snprintf(go, sizeof go, "pg/barrier/%" PRIu64 "/go", n);
    snprintf(left, sizeof left, "pg/barrier/%" PRIu64 "/left", n);
    int64_t count = 0;
    TL_TRY(tl_store_add(group->store, arrived, 1, &count));
    if (count == group->world_size) TL_TRY(tl_store_set(group->store, go, "1", 1));
    void *value = NULL;
    size_t size = 0;
    TL_TRY(tl_store_get(group->store, go, &value, &size));
    free(value);
    TL_TRY(tl_store_add(group->store, left, 1, &count));
    if (count < group->world_size) return TL_OK;
    TL_TRY(tl_store_delete(group->store, arrived));
    TL_TRY(tl_store_delete(group->store, go));
    return tl_store_delete(group->store, left);
}
