/* The CUDA caching allocator: cudaMalloc'd blocks kept in size-bucketed free lists for reuse
   on the device's stream, with statistics (allocated, reserved, peaks, counts), and the memory of
   CUDA graphs (a capture's private pool, the quarantine of blocks a live graph may read). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/cuda/cuda_runtime.h"

#define SMALL_ROUND   ((size_t)512)     /* requests up to SMALL_LIMIT round to this */
#define SMALL_LIMIT   ((size_t)1 << 20) /* 1 MiB */
#define LARGE_ROUND   ((size_t)2 << 20) /* larger ones round to 2 MiB */
#define SMALL_BUCKETS (SMALL_LIMIT / SMALL_ROUND)
#define HASH_BUCKETS  4096
#define MIB           (1024.0 * 1024.0)

/* One cudaMalloc'd block: in the active hash (held by a tensor), on a free list or in
   quarantine. */
typedef struct block {
    void *ptr;
    size_t size;      /* what cudaMalloc gave (rounded) */
    size_t requested; /* what the tensor asked for */
    uint64_t serial;  /* when it was last handed out (the device's count of allocations) */
    tl_cuda_capture_pool *owner; /* the capture it was handed out in, while that graph lives */
    struct block *next;
} block;

typedef struct free_lists {
    block *small[SMALL_BUCKETS]; /* exact size (i + 1) * 512 */
    block *large;                /* sorted by size, smallest first */
} free_lists;

/* A graph's memory. A graph's kernels read and write the blocks its capture was handed (they
   stay its own until it is destroyed) and any block held when it was captured. So a block
   freed while a graph that may read it lives (handed out before that graph's capture ended) is
   not reused but kept in quarantine until no such graph lives; blocks freed during a capture
   that the same capture was handed are reused by it, in stream order as eager work is. */
struct tl_cuda_capture_pool {
    int device;
    free_lists free; /* blocks the capture freed, for its own later allocations */
    bool capturing;
    uint64_t begin_serial, end_serial; /* the device's serial at the capture's begin and end */
    struct tl_cuda_capture_pool *next; /* the device's live graphs */
};

typedef struct pool {
    free_lists free;
    block *active[HASH_BUCKETS];
    block *quarantine;             /* freed blocks a live graph may read */
    tl_cuda_capture_pool *live;    /* pools of the live graphs */
    tl_cuda_capture_pool *capture; /* the one capturing now, or NULL */
    uint64_t serial;               /* allocations handed out */
    tl_cuda_allocator_stats stats;
} pool;

/* One lock for every device: allocations are short and the engine drives the GPUs from one
   thread in practice. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* the thread's reclaim hook (tlua/cuda.h), and whether it is running now */
static _Thread_local tl_cuda_reclaim_fn reclaim_hook;
static _Thread_local void *reclaim_context;
static _Thread_local bool reclaiming;

void tl_cuda_set_reclaim_hook(tl_cuda_reclaim_fn fn, void *context) {
    reclaim_hook = fn;
    reclaim_context = context;
}

void tl_cuda_clear_reclaim_hook(void *context) {
    if (reclaim_context == context) reclaim_hook = NULL, reclaim_context = NULL;
}
static pool pools[TL_CUDA_MAX_DEVICES];

static size_t round_size(size_t n) {
    if (n == 0) n = 1;
    if (n <= SMALL_LIMIT) return (n + SMALL_ROUND - 1) / SMALL_ROUND * SMALL_ROUND;
    return (n + LARGE_ROUND - 1) / LARGE_ROUND * LARGE_ROUND;
}

static size_t hash_ptr(const void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p >> 9; /* blocks are at least 512 B apart */
    return (size_t)((x * 0x9e3779b97f4a7c15ull) >> 52) % HASH_BUCKETS;
}

static void update_peaks(tl_cuda_allocator_stats *s) {
    if (s->allocated_bytes > s->peak_allocated_bytes) s->peak_allocated_bytes = s->allocated_bytes;
    if (s->reserved_bytes > s->peak_reserved_bytes) s->peak_reserved_bytes = s->reserved_bytes;
}

/* A cached block for a request of `size` (rounded): an exact small bucket, or the smallest
   large block that wastes at most a quarter of itself. Unlinked from its list. */
static block *take_cached(free_lists *f, size_t size) {
    if (size <= SMALL_LIMIT) {
        block **head = &f->small[size / SMALL_ROUND - 1];
        block *b = *head;
        if (b) *head = b->next;
        return b;
    }
    for (block **link = &f->large; *link; link = &(*link)->next) {
        block *b = *link;
        if (b->size < size) continue;
        if (b->size - size > b->size / 4) return NULL; /* the rest are larger still */
        *link = b->next;
        return b;
    }
    return NULL;
}

/* (the block's place only: the count of cached blocks is the caller's) */
static void put_free(free_lists *f, block *b) {
    if (b->size <= SMALL_LIMIT) {
        block **head = &f->small[b->size / SMALL_ROUND - 1];
        b->next = *head;
        *head = b;
    } else {
        block **link = &f->large;
        while (*link && (*link)->size < b->size) link = &(*link)->next;
        b->next = *link;
        *link = b;
    }
}

static void free_list(pool *p, block **head) {
    while (*head) {
        block *b = *head;
        *head = b->next;
        (void)cudaFree(b->ptr); /* waits for the device; a failure leaves nothing to do */
        p->stats.reserved_bytes -= b->size;
        p->stats.cached_blocks--;
        p->stats.cuda_free_count++;
        free(b);
    }
}

/* Returns every cached block of the device to the driver (lock held, device current). */
static void release_cached(pool *p) {
    for (size_t i = 0; i < SMALL_BUCKETS; i++) free_list(p, &p->free.small[i]);
    free_list(p, &p->free.large);
    (void)cudaGetLastError();
}

static void activate(pool *p, block *b, size_t requested) {
    b->requested = requested;
    b->serial = ++p->serial;
    b->owner = p->capture;
    size_t h = hash_ptr(b->ptr);
    b->next = p->active[h];
    p->active[h] = b;
    p->stats.allocated_bytes += b->size;
    p->stats.requested_bytes += requested;
    p->stats.active_blocks++;
    p->stats.alloc_count++;
    update_peaks(&p->stats);
}

/* The newest allocation a live graph may read: every block handed out before the end of the
   latest capture of a live graph (all of them while a capture runs); 0 with no live graph. */
static uint64_t live_limit(const pool *p) {
    uint64_t limit = 0;
    for (const tl_cuda_capture_pool *c = p->live; c; c = c->next) {
        uint64_t end = c->capturing ? UINT64_MAX : c->end_serial;
        if (end > limit) limit = end;
    }
    return limit;
}

/* cudaMalloc; during a capture with the thread's capture mode relaxed for the call (an
   allocation is not recorded, and the mode refuses it only as potentially unsafe) */
static cudaError_t new_memory(void **ptr, size_t size, bool capturing) {
    if (!capturing) return cudaMalloc(ptr, size);
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t err = cudaMalloc(ptr, size);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    return err;
}

tl_status tl_cuda_malloc(int device, size_t nbytes, const char *op, void **out) {
    cudaStream_t stream; /* also makes the device current */
    TL_TRY(tl_cuda_stream(device, op, &stream));
    size_t size = round_size(nbytes);
    pool *p = &pools[device];
    pthread_mutex_lock(&lock);
    tl_cuda_capture_pool *capture = p->capture;
    block *b = capture ? take_cached(&capture->free, size) : NULL;
    if (!b) b = take_cached(&p->free, size);
    if (b) {
        p->stats.cached_blocks--;
        activate(p, b, nbytes);
        pthread_mutex_unlock(&lock);
        *out = b->ptr;
        return TL_OK;
    }
    b = malloc(sizeof *b);
    if (!b) {
        pthread_mutex_unlock(&lock);
        return tl_error(TL_ERR_MEMORY, "%s: out of host memory for an allocator record", op);
    }
    void *ptr = NULL;
    cudaError_t err = new_memory(&ptr, size, capture != NULL);
    /* (during a capture no cudaFree, which would wait for the device: out of memory at once) */
    if (err == cudaErrorMemoryAllocation && !capture) {
        /* the cache may hold enough in blocks of other sizes: give it back, try once more */
        (void)cudaGetLastError();
        release_cached(p);
        err = cudaMalloc(&ptr, size);
    }
    if (err == cudaErrorMemoryAllocation && !capture && reclaim_hook && !reclaiming) {
        /* the host may hold dead tensors: let it free them (unlocked: freeing takes the lock),
           then give the cache back and try a last time */
        (void)cudaGetLastError();
        pthread_mutex_unlock(&lock);
        reclaiming = true;
        reclaim_hook(reclaim_context);
        reclaiming = false;
        (void)tl_cuda_stream(device, op, &stream); /* the device current again */
        pthread_mutex_lock(&lock);
        release_cached(p);
        err = cudaMalloc(&ptr, size);
    }
    if (err != cudaSuccess) {
        free(b);
        if (err != cudaErrorMemoryAllocation) {
            pthread_mutex_unlock(&lock);
            return tl_cuda_fail(err, op, "cudaMalloc");
        }
        (void)cudaGetLastError();
        p->stats.oom_count++;
        size_t free_bytes = 0, total_bytes = 0;
        if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
        uint64_t reserved = p->stats.reserved_bytes, allocated = p->stats.allocated_bytes;
        pthread_mutex_unlock(&lock);
        return tl_error(TL_ERR_MEMORY,
                        "%s: CUDA out of memory allocating %zu bytes on cuda:%d (free %.1f MiB of "
                        "%.1f MiB, reserved %.1f MiB, allocated %.1f MiB%s)",
                        op, nbytes, device, (double)free_bytes / MIB, (double)total_bytes / MIB,
                        (double)reserved / MIB, (double)allocated / MIB,
                        capture ? "; during a CUDA graph capture, whose memory the device's "
                                  "cache cannot give back"
                                : "");
    }
    b->ptr = ptr;
    b->size = size;
    p->stats.reserved_bytes += size;
    p->stats.cuda_malloc_count++;
    activate(p, b, nbytes);
    pthread_mutex_unlock(&lock);
    *out = ptr;
    return TL_OK;
}

void tl_cuda_free(int device, void *ptr) {
    if (!ptr || device < 0 || device >= TL_CUDA_MAX_DEVICES) return;
    pool *p = &pools[device];
    pthread_mutex_lock(&lock);
    for (block **link = &p->active[hash_ptr(ptr)]; *link; link = &(*link)->next) {
        block *b = *link;
        if (b->ptr != ptr) continue;
        *link = b->next;
        p->stats.allocated_bytes -= b->size;
        p->stats.requested_bytes -= b->requested;
        p->stats.active_blocks--;
        p->stats.free_count++;
        /* work queued on the device's stream may still use the block; the next user is queued
           behind it on the same stream, so it can be handed out at once, unless a graph may
           read it at a replay */
        p->stats.cached_blocks++;
        tl_cuda_capture_pool *capture = p->capture;
        if (capture && b->owner == capture && b->serial > capture->begin_serial) {
            put_free(&capture->free, b);
        } else if (b->serial <= live_limit(p)) {
            b->next = p->quarantine;
            p->quarantine = b;
        } else {
            b->owner = NULL;
            put_free(&p->free, b);
        }
        break;
    }
    pthread_mutex_unlock(&lock);
}

/* ---- graph pools (cuda_runtime.h) ----------------------------------------------------- */
tl_status tl_cuda_pool_open(int device, const char *op, tl_cuda_capture_pool **out) {
    tl_cuda_capture_pool *c = calloc(1, sizeof *c);
    if (!c) return tl_error(TL_ERR_MEMORY, "%s: out of host memory", op);
    pool *p = &pools[device];
    pthread_mutex_lock(&lock);
    if (p->capture) {
        pthread_mutex_unlock(&lock);
        free(c);
        return tl_error(TL_ERR_RUNTIME, "%s: cuda:%d is already being captured", op, device);
    }
    c->device = device;
    c->capturing = true;
    c->begin_serial = p->serial;
    c->next = p->live;
    p->live = c;
    p->capture = c;
    pthread_mutex_unlock(&lock);
    *out = c;
    return TL_OK;
}

void tl_cuda_pool_end_capture(tl_cuda_capture_pool *c) {
    pool *p = &pools[c->device];
    pthread_mutex_lock(&lock);
    c->capturing = false;
    c->end_serial = p->serial;
    if (p->capture == c) p->capture = NULL;
    pthread_mutex_unlock(&lock);
}

static void give_to_device(pool *p, free_lists *f) {
    for (size_t i = 0; i < SMALL_BUCKETS; i++)
        while (f->small[i]) {
            block *b = f->small[i];
            f->small[i] = b->next;
            b->owner = NULL;
            put_free(&p->free, b);
        }
    while (f->large) {
        block *b = f->large;
        f->large = b->next;
        b->owner = NULL;
        put_free(&p->free, b);
    }
}

void tl_cuda_pool_close(tl_cuda_capture_pool *c) {
    pool *p = &pools[c->device];
    pthread_mutex_lock(&lock);
    if (p->capture == c) p->capture = NULL;
    for (tl_cuda_capture_pool **link = &p->live; *link; link = &(*link)->next)
        if (*link == c) {
            *link = c->next;
            break;
        }
    give_to_device(p, &c->free);
    for (size_t h = 0; h < HASH_BUCKETS; h++)
        for (block *b = p->active[h]; b; b = b->next)
            if (b->owner == c) b->owner = NULL;
    const uint64_t limit = live_limit(p);
    for (block **link = &p->quarantine; *link;) {
        block *b = *link;
        if (b->owner == c) b->owner = NULL;
        if (b->serial <= limit) {
            link = &b->next;
            continue;
        }
        *link = b->next;
        b->owner = NULL;
        put_free(&p->free, b);
    }
    pthread_mutex_unlock(&lock);
    free(c);
}

/* ---- public: tlua/cuda.h --------------------------------------------------------------- */
static tl_status check_device(int device, const char *op) {
    cudaStream_t stream;
    return tl_cuda_stream(device, op, &stream);
}

tl_status tl_cuda_memory_stats(int device, tl_cuda_allocator_stats *out) {
    if (!out) return tl_error(TL_ERR_ARGUMENT, "memory_stats: got no stats to fill");
    TL_TRY(check_device(device, "memory_stats"));
    pthread_mutex_lock(&lock);
    *out = pools[device].stats;
    pthread_mutex_unlock(&lock);
    return TL_OK;
}

tl_status tl_cuda_reset_peak_memory_stats(int device) {
    TL_TRY(check_device(device, "reset_peak_memory_stats"));
    pthread_mutex_lock(&lock);
    tl_cuda_allocator_stats *s = &pools[device].stats;
    s->peak_allocated_bytes = s->allocated_bytes;
    s->peak_reserved_bytes = s->reserved_bytes;
    pthread_mutex_unlock(&lock);
    return TL_OK;
}

tl_status tl_cuda_empty_cache(int device) {
    int first = device, last = device;
    if (device == -1) {
        first = 0;
        last = tl_cuda_device_count() - 1;
    }
    for (int d = first; d <= last; d++) {
        TL_TRY(check_device(d, "empty_cache"));
        if (tl_cuda_capturing(d))
            return tl_cuda_capture_refuse(d, "empty_cache", "emptying the cache",
                                          "cudaFree waits for the device");
        pthread_mutex_lock(&lock);
        release_cached(&pools[d]);
        pthread_mutex_unlock(&lock);
    }
    return TL_OK;
}

tl_status tl_cuda_host_alloc(size_t nbytes, const char *op, void **out) {
    void *ptr = NULL;
    /* during a capture with the thread's capture mode relaxed for the call: an allocation is
       not recorded */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    const bool capturing = tl_cuda_any_capturing();
    if (capturing) (void)cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t err = cudaHostAlloc(&ptr, nbytes ? nbytes : 1, cudaHostAllocDefault);
    if (capturing) (void)cudaThreadExchangeStreamCaptureMode(&mode);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return tl_error(err == cudaErrorMemoryAllocation ? TL_ERR_MEMORY : TL_ERR_DEVICE,
                        "%s: cannot allocate %zu bytes of pinned host memory (%s)", op, nbytes,
                        cudaGetErrorString(err));
    }
    *out = ptr;
    return TL_OK;
}

/* pinned blocks freed during a capture (cudaFreeHost waits for the device, which a capture
   forbids), freed when it ends (tl_cuda_host_free_pending) */
static void **host_pending;
static size_t host_pending_count, host_pending_capacity;

void tl_cuda_host_free(void *ptr) {
    if (!ptr) return;
    if (tl_cuda_any_capturing()) {
        pthread_mutex_lock(&lock);
        if (host_pending_count == host_pending_capacity) {
            size_t capacity = host_pending_capacity ? 2 * host_pending_capacity : 16;
            void **grown = realloc(host_pending, capacity * sizeof *grown);
            if (grown) host_pending = grown, host_pending_capacity = capacity;
        }
        const bool kept = host_pending_count < host_pending_capacity;
        if (kept) host_pending[host_pending_count++] = ptr;
        pthread_mutex_unlock(&lock);
        if (kept) return; /* (no memory for the list: freed now, whatever the capture says) */
    }
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

void tl_cuda_host_free_pending(void) {
    if (tl_cuda_any_capturing()) return;
    pthread_mutex_lock(&lock);
    void **list = host_pending;
    size_t n = host_pending_count;
    host_pending = NULL;
    host_pending_count = host_pending_capacity = 0;
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; i < n; i++)
        if (cudaFreeHost(list[i]) != cudaSuccess) (void)cudaGetLastError();
    free(list);
}
