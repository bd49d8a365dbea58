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

bool tl_dnn_unsupported(cudnnStatus_t status) {
    return CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED ||
           CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_BAD_PARAM;
}

/* the engine configs of a heuristic mode's ranking that are tried */
enum { RANKED = 16 };

/* The first of heur's ranked configs that qualifies (tl_dnn_choose_plan), into *plan, *config
   and *workspace; the other configs destroyed. */
static cudnnStatus_t plan_of_ranking(cudnnHandle_t handle, cudnnBackendDescriptor_t heur,
                                     bool (*accept)(cudnnBackendDescriptor_t, const void *),
                                     const void *arg, int64_t limit, cudnnBackendDescriptor_t *plan,
                                     cudnnBackendDescriptor_t *config, int64_t *workspace,
                                     cudnnStatus_t *tried) {
    cudnnBackendDescriptor_t configs[RANKED] = {0};
    int64_t count = 0;
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    for (int i = 0; !s && i < RANKED; i++)
        s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &configs[i]);
    if (!s)
        s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, RANKED, &count, configs);
    for (int64_t i = 0; !s && i < count && !*plan; i++) {
        if (accept && !accept(configs[i], arg)) continue;
        cudnnBackendDescriptor_t candidate = NULL;
        int64_t size = 0, returned = 0;
        cudnnStatus_t t =
            cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &candidate);
        tl_dnn_set(&t, candidate, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
        tl_dnn_set(&t, candidate, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[i]);
        if (!t) t = cudnnBackendFinalize(candidate);
        if (!t)
            t = cudnnBackendGetAttribute(candidate, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                         CUDNN_TYPE_INT64, 1, &returned, &size);
        if (!t && size <= limit) {
            *plan = candidate, *workspace = size, *config = configs[i];
            configs[i] = NULL;
        } else {
            *tried = t ? t : CUDNN_STATUS_NOT_SUPPORTED; /* over the workspace limit */
            tl_dnn_destroy(&candidate);
        }
    }
    for (int i = 0; i < RANKED; i++) tl_dnn_destroy(&configs[i]);
    return s;
}

cudnnStatus_t tl_dnn_choose_plan(cudnnHandle_t handle, cudnnBackendDescriptor_t graph,
                                 bool (*accept)(cudnnBackendDescriptor_t config, const void *arg),
                                 const void *arg, int64_t limit, cudnnBackendDescriptor_t *plan,
                                 cudnnBackendDescriptor_t *config, int64_t *workspace,
                                 cudnnStatus_t *tried) {
    *plan = *config = NULL;
    *workspace = 0;
    *tried = CUDNN_STATUS_SUCCESS;
    const cudnnBackendHeurMode_t modes[] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    for (size_t m = 0; !s && m < sizeof modes / sizeof modes[0] && !*plan; m++) {
        cudnnBackendDescriptor_t heur = NULL;
        s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
        tl_dnn_set(&s, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                   1, &graph);
        tl_dnn_set(&s, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]);
        if (!s) s = cudnnBackendFinalize(heur);
        if (!s)
            s = plan_of_ranking(handle, heur, accept, arg, limit, plan, config, workspace, tried);
        tl_dnn_destroy(&heur);
        if (tl_dnn_unsupported(s)) { /* this mode ranks nothing: try the next */
            if (!*tried) *tried = s;
            s = CUDNN_STATUS_SUCCESS;
        }
    }
    return s;
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
