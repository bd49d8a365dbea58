/* The shared pieces of the kernels on cuDNN's graph API: their one lock, the attribute setter and
   the bounded cache of execution plans (a hash table of problems' bytes, FNV-1a). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/dnn_plans.h"

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;

void tl_dnn_lock(void) {
    pthread_mutex_lock(&graph_lock);
}

void tl_dnn_unlock(void) {
    pthread_mutex_unlock(&graph_lock);
}

void tl_dnn_set(cudnnStatus_t *status, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t count, const void *values) {
    if (*status == CUDNN_STATUS_SUCCESS)
        *status = cudnnBackendSetAttribute(d, name, type, count, values);
}

void tl_dnn_destroy(cudnnBackendDescriptor_t *d) {
    if (*d) cudnnBackendDestroyDescriptor(*d);
    *d = NULL;
}

void tl_dnn_forget(tl_dnn_entry *entry) {
    tl_dnn_destroy(&entry->plan);
    for (int i = 0; i < entry->parts_used; i++) tl_dnn_destroy(&entry->parts[i]);
    entry->parts_used = 0;
}

static const unsigned char *key_of(const tl_dnn_cache *cache, const tl_dnn_entry *entry) {
    return (const unsigned char *)entry + cache->key_offset;
}

static size_t bucket_of(const tl_dnn_cache *cache, const void *key) {
    const unsigned char *bytes = key;
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < cache->key_size; i++) h = (h ^ bytes[i]) * 1099511628211u;
    return (size_t)(h % TL_DNN_BUCKETS);
}

/* Drops every kept plan (lock held). */
static void forget_all(tl_dnn_cache *cache) {
    for (size_t b = 0; b < TL_DNN_BUCKETS; b++) {
        while (cache->buckets[b]) {
            tl_dnn_entry *e = cache->buckets[b];
            cache->buckets[b] = e->next;
            tl_dnn_forget(e);
            free(e);
        }
    }
    cache->kept = 0;
}

tl_status tl_dnn_cache_get(tl_dnn_cache *cache, const void *key,
                           tl_status (*build)(tl_dnn_entry *entry, void *arg), void *arg,
                           const char *op, tl_dnn_entry **entry) {
    const size_t bucket = bucket_of(cache, key);
    tl_dnn_entry *e = cache->buckets[bucket];
    while (e && memcmp(key_of(cache, e), key, cache->key_size) != 0) e = e->next;
    *entry = e;
    if (e) return TL_OK;
    if (cache->kept >= cache->most) forget_all(cache);
    e = calloc(1, cache->entry_size);
    if (!e) return tl_error(TL_ERR_MEMORY, "%s: out of host memory for a plan", op);
    memcpy((unsigned char *)e + cache->key_offset, key, cache->key_size);
    const tl_status status = build(e, arg);
    if (status != TL_OK) {
        tl_dnn_forget(e);
        free(e);
        return status;
    }
    e->next = cache->buckets[bucket];
    cache->buckets[bucket] = e;
    cache->kept++;
    *entry = e;
    return TL_OK;
}
