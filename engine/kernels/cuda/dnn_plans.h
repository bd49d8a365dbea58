/* Internal: what the kernels on cuDNN's graph (backend) API share (conv_dnn.c, attention_dnn.c):
   an attribute setter that stops at the first failure, and a bounded cache of execution plans
   keyed by a problem's bytes. */
#ifndef TLUA_KERNELS_CUDA_DNN_PLANS_H
#define TLUA_KERNELS_CUDA_DNN_PLANS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cuda/dnn.h"

/* Sets one attribute of d unless an earlier step of *status failed. */
void tl_dnn_set(cudnnStatus_t *status, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t count, const void *values);
/* Destroys *d when there is one, and clears it. */
void tl_dnn_destroy(cudnnBackendDescriptor_t *d);

/* The head of a kept plan, the first member of its user's struct: the plan and the descriptors
   it was built from (parts[0 .. parts_used): the plan refers to them), destroyed with it. */
typedef struct tl_dnn_entry {
    struct tl_dnn_entry *next;
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t *parts;
    int parts_used;
} tl_dnn_entry;

enum { TL_DNN_BUCKETS = 1024 };

/* The lock of every plan cache and of the calls that run their plans: held by a user from
   tl_dnn_cache_get to the end of the plan's launch, so that no call drops a plan another one
   runs, and so that two host threads never use a device's cuDNN handle at once (the graph
   kernels share it). */
void tl_dnn_lock(void);
void tl_dnn_unlock(void);

/* Plans by problem: key_size bytes at key_offset of each entry (a key is compared as bytes: zero
   its padding), entries of entry_size bytes, at most `most` kept (past it, every plan goes and
   the cache fills again: ever new shapes keep a bounded host memory). Initialize with
   {.key_offset, .key_size, .entry_size, .most}; use with tl_dnn_lock held. */
typedef struct tl_dnn_cache {
    size_t key_offset, key_size, entry_size;
    int most, kept;
    tl_dnn_entry *buckets[TL_DNN_BUCKETS];
} tl_dnn_cache;

/* Whether a failed status means "cuDNN cannot run this" rather than a fault: NOT_SUPPORTED, or
   BAD_PARAM (cuDNN's answer to a layout or size its engines do not take). */
bool tl_dnn_unsupported(cudnnStatus_t status);

/* The plan of the finalized operation graph that cuDNN's heuristics rank first (mode A, then the
   fallback engines; the first 16 configs of each) among the engine configs accept takes (accept
   NULL: all), that finalize on this device and need at most `limit` bytes of workspace: *plan,
   its engine config *config (both the caller's to destroy: the plan refers to the config) and
   *workspace. Returns the failure of the heuristics themselves (a mode that cannot rank the
   graph, tl_dnn_unsupported, is skipped). *plan stays NULL when no candidate qualifies; *tried
   then holds the last candidate's failure (NOT_SUPPORTED for one over the limit, SUCCESS when
   none was ranked). */
cudnnStatus_t tl_dnn_choose_plan(cudnnHandle_t handle, cudnnBackendDescriptor_t graph,
                                 bool (*accept)(cudnnBackendDescriptor_t config, const void *arg),
                                 const void *arg, int64_t limit, cudnnBackendDescriptor_t *plan,
                                 cudnnBackendDescriptor_t *config, int64_t *workspace,
                                 cudnnStatus_t *tried);

/* The destroyed descriptors of an entry (its plan and parts); the entry itself stays. */
void tl_dnn_forget(tl_dnn_entry *entry);

/* With tl_dnn_lock held: the entry of key, or a new one (zeroed, key copied) that build(entry,
   arg) fills and that is kept when it returns TL_OK (freed otherwise, with its descriptors).
   *entry is NULL on failure. */
tl_status tl_dnn_cache_get(tl_dnn_cache *cache, const void *key,
                           tl_status (*build)(tl_dnn_entry *entry, void *arg), void *arg,
                           const char *op, tl_dnn_entry **entry);

#endif
