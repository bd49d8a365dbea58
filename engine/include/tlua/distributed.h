/* Distributed training: the rendezvous store (a TCP key-value server and its client) and the
   process group (collectives over NCCL for CUDA tensors, over the store for CPU tensors). */
#ifndef TLUA_DISTRIBUTED_H
#define TLUA_DISTRIBUTED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlua/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the store ------------------------------------------------------------------------------
   A key-value server the launcher owns (one per job, on node 0) and that every rank and every
   launcher reaches over TCP: ranks exchange the NCCL unique id through it, count arrivals at a
   barrier, and (CPU tensors) exchange the data of a collective. Keys are strings of at most
   TL_STORE_MAX_KEY bytes; values any bytes. A get waits for its key; every wait has a timeout
   and a closed connection is an error, so a dead peer never hangs a rank.
   Every connection proves the job's secret (a string of TL_STORE_MIN_SECRET to
   TL_STORE_MAX_SECRET bytes that the launcher makes, or the user gives every node, and hands to
   its ranks in TLUA_STORE_SECRET) before its first command; the server closes a connection that
   sends anything else first, or a wrong secret. The traffic is authenticated, not encrypted: a
   network that others can watch shows them the secret and the values. */
#define TL_STORE_MAX_KEY     512
#define TL_STORE_MIN_SECRET  16
#define TL_STORE_MAX_SECRET  256
#define TL_STORE_SECRET_SIZE 65 /* a made secret: 64 hex digits (32 random bytes) and the NUL */

typedef struct tl_store_server tl_store_server;
typedef struct tl_store tl_store;

/* Writes a new random secret (getrandom(2): 32 bytes as 64 lowercase hex digits) into out. */
tl_status tl_store_make_secret(char out[TL_STORE_SECRET_SIZE]);

/* Listens on host:port (an address of this host, such as "127.0.0.1" for this host only, or the
   one other nodes reach it by; "0.0.0.0" is every interface; port 0 picks a free port) and serves
   requests on a thread of its own until stopped, to the clients that prove secret (copied).
   *port_out (may be NULL) gets the port it listens on. */
tl_status tl_store_server_start(const char *host, int port, const char *secret,
                                tl_store_server **out, int *port_out);
/* Stops serving and closes every connection (clients then fail their calls). NULL is a no-op. */
void tl_store_server_stop(tl_store_server *server);

/* Connects to a store, retrying until timeout_s (the server may not listen yet), and proves
   secret (copied: a reconnection proves it again); a refused secret fails at once. */
tl_status tl_store_connect(const char *host, int port, const char *secret, double timeout_s,
                           tl_store **out);
/* NULL is a no-op. */
void tl_store_close(tl_store *store);
/* The timeout of every later wait of this client (seconds, > 0; the default is 300), counted
   from the last byte moved. After a timeout the client reconnects on its next call. */
tl_status tl_store_set_timeout(tl_store *store, double timeout_s);
tl_status tl_store_set(tl_store *store, const char *key, const void *value, size_t size);
/* Waits until key exists, then *value gets a malloc'ed copy (free it) of *size bytes. */
tl_status tl_store_get(tl_store *store, const char *key, void **value, size_t *size);
/* Adds delta to the integer under key (absent keys count as 0) and returns the new value; the
   store keeps it as decimal text (a get reads "42"). */
tl_status tl_store_add(tl_store *store, const char *key, int64_t delta, int64_t *out);
/* *exists is whether key exists now; never waits. */
tl_status tl_store_check(tl_store *store, const char *key, bool *exists);
/* Removes key (absent keys are no error). */
tl_status tl_store_delete(tl_store *store, const char *key);

/* ---- the process group -------------------------------------------------------------------- */
typedef enum tl_reduce_op {
    TL_REDUCE_SUM,
    TL_REDUCE_AVG, /* the sum divided by the world size */
    TL_REDUCE_PRODUCT,
    TL_REDUCE_MIN,
    TL_REDUCE_MAX,
} tl_reduce_op;

/* Parses "sum", "avg" (or "mean"), "product", "min", "max". */
tl_status tl_reduce_op_parse(const char *name, tl_reduce_op *out);
const char *tl_reduce_op_name(tl_reduce_op op);

typedef struct tl_process_group tl_process_group;

/* The group of world_size ranks meeting in store (borrowed: keep it open while the group
   lives); world_size 1 needs no store (NULL). CUDA tensors go through one NCCL communicator,
   made at the first CUDA collective (every rank must make the same calls in the same order,
   as with any collective), on cuda:cuda_device; CPU tensors go through the store, reduced in
   rank order so that every rank gets the same bits. */
tl_status tl_process_group_new(tl_store *store, int rank, int world_size, int cuda_device,
                               tl_process_group **out);
/* Finishes the group's queued work and frees it (NULL is a no-op). */
void tl_process_group_free(tl_process_group *group);
int tl_process_group_rank(const tl_process_group *group);
int tl_process_group_world_size(const tl_process_group *group);
/* "nccl" for CUDA tensors when this build has NCCL, "store" for CPU tensors. */
bool tl_distributed_nccl_available(void);

/* In place, on every rank's t (same shape, dtype and device on every rank; contiguous). On a
   GPU the work is queued on the device's stream, in order with the ops around it; the host
   does not wait. */
tl_status tl_all_reduce(tl_process_group *group, tl_tensor *t, tl_reduce_op op);
/* out gets the reduction over the ranks of in's chunk number `rank`: its elements
   [rank * n, (rank + 1) * n), n = numel(out); in has world_size * n elements (any shapes). Both
   contiguous, of one dtype and device; in place, out may be that chunk of in (a view), and shares
   no other memory with in. The op's dtype rules are tl_all_reduce's. In a world of one out gets
   a copy of in. On a GPU the work is queued as tl_all_reduce's. */
tl_status tl_reduce_scatter(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                            tl_reduce_op op);
/* out (world_size * numel(in) elements) gets every rank's in: rank r's at its elements
   [r * n, (r + 1) * n), n = numel(in). Both contiguous, of one dtype and device; in place, in may
   be out's chunk of this rank (a view), and shares no other memory with out. */
tl_status tl_all_gather(tl_process_group *group, const tl_tensor *in, tl_tensor *out);
/* Every rank's t gets root's values. */
tl_status tl_broadcast(tl_process_group *group, tl_tensor *t, int root);
/* Returns once every rank has called it (the host waits; queued GPU work is not waited for). */
tl_status tl_barrier(tl_process_group *group);

/* A collective that overlaps the compute stream: on a GPU it waits (on the GPU) for the work
   queued on the device's stream so far, then runs on the group's communication stream; the
   compute stream goes on at once. tl_work_wait makes the compute stream wait for it (the host
   does not wait). On the CPU the collective is done when the call returns. */
typedef struct tl_work tl_work;
tl_status tl_all_reduce_start(tl_process_group *group, tl_tensor *t, tl_reduce_op op,
                              tl_work **out);
/* tl_reduce_scatter and tl_all_gather overlapping the compute stream as tl_all_reduce_start
   does; the work keeps in and out until it is waited for or freed. */
tl_status tl_reduce_scatter_start(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                                  tl_reduce_op op, tl_work **out_work);
tl_status tl_all_gather_start(tl_process_group *group, const tl_tensor *in, tl_tensor *out,
                              tl_work **out_work);
/* Later work queued on t's device's stream waits for w. */
tl_status tl_work_wait(tl_work *w);
/* Timings of a finished work, in milliseconds (waits for it on the host): queued_ms from the
   start call (when the compute stream reached it) to the end of the collective, comm_ms the
   collective alone. 0 on the CPU. */
tl_status tl_work_timing(tl_work *w, double *queued_ms, double *comm_ms);
/* Frees w (waits for nothing; the GPU keeps what it needs). NULL is a no-op. */
void tl_work_free(tl_work *w);

#ifdef __cplusplus
}
#endif

#endif
