/* The CUDA runtime as users see it: availability, synchronisation and the caching allocator's
   statistics. Every function exists in every build; without CUDA (or without a GPU) there
   are no devices and the per-device calls fail with TL_ERR_DEVICE. */
#ifndef TLUA_CUDA_H
#define TLUA_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlua/device.h" /* tl_cuda_device_count */
#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True if this build has CUDA support and at least one GPU is usable. */
bool tl_cuda_is_available(void);

/* The device's product name as the driver gives it (e.g. "NVIDIA H100 80GB HBM3"), written
   into buf of size bytes (cut to fit, NUL-terminated). Fails with TL_ERR_DEVICE for a device
   that does not exist, naming "get_device_name". */
tl_status tl_cuda_device_name(int device, char *buf, size_t size);
/* The device's compute capability (9, 0 for a Hopper H100 or H200); fails as
   tl_cuda_device_name does, naming "get_device_capability". */
tl_status tl_cuda_device_capability(int device, int *major, int *minor);

/* Waits for all work queued on the device's stream (device index, e.g. 0 for cuda:0). A
   failure of earlier asynchronous work is reported here, naming "synchronize". */
tl_status tl_cuda_synchronize(int device);

/* How many times the host has waited for a CUDA device on tlua's behalf since the start: a
   synchronize, a copy to the host (item, totable, to("cpu")), a size read back (nonzero,
   masked_select, unique, ...). A step that should keep the host free can compare it before and
   after (0 without CUDA). */
uint64_t tl_cuda_host_waits(void);

/* The caching allocator of one device. Sizes are bytes; "allocated" counts the blocks that
   tensors hold (request rounded up to 512 B, or to 2 MiB above 1 MiB), "reserved" the
   memory taken from the driver: allocated plus the cache of freed blocks. */
typedef struct tl_cuda_allocator_stats {
    uint64_t allocated_bytes;      /* held by tensors now */
    uint64_t reserved_bytes;       /* taken from cudaMalloc now (allocated + cached) */
    uint64_t peak_allocated_bytes; /* highest allocated_bytes since the last reset */
    uint64_t peak_reserved_bytes;  /* highest reserved_bytes since the last reset */
    uint64_t requested_bytes;      /* what the live allocations asked for, before rounding */
    uint64_t active_blocks;        /* blocks held by tensors now */
    uint64_t cached_blocks;        /* freed blocks kept for reuse */
    uint64_t alloc_count;          /* allocations served since the start */
    uint64_t free_count;           /* blocks given back since the start */
    uint64_t cuda_malloc_count;    /* allocations that reached cudaMalloc (cache misses) */
    uint64_t cuda_free_count;      /* blocks returned to the driver (empty_cache, OOM retry) */
    uint64_t oom_count;            /* requests that failed for lack of device memory */
} tl_cuda_allocator_stats;

tl_status tl_cuda_memory_stats(int device, tl_cuda_allocator_stats *out);
/* Peak counters restart from the current values. */
tl_status tl_cuda_reset_peak_memory_stats(int device);
/* Returns every cached (free) block of the device to the driver; memory held by tensors, and
   the memory of live CUDA graphs (below), stays. device -1 empties the caches of every device.
   Refused during a capture. */
tl_status tl_cuda_empty_cache(int device);

/* What the allocator calls when device memory runs out, before it gives the cache back and
   tries once more: a host whose dead tensors wait for a garbage collector frees them there.
   One per thread (the thread that asks for memory runs its own); it must not allocate device
   memory. tl_cuda_clear_reclaim_hook removes the thread's hook if its context is context. */
typedef void (*tl_cuda_reclaim_fn)(void *context);
void tl_cuda_set_reclaim_hook(tl_cuda_reclaim_fn fn, void *context);
void tl_cuda_clear_reclaim_hook(void *context);

/* ---- CUDA graphs ----------------------------------------------------------------------------
   A capture records the work queued on a device's stream (kernels, GEMMs, copies between device
   buffers, collectives) into a graph instead of running it; a replay runs it again in one launch,
   on the same memory. Between begin and end the engine's ops queue as usual but nothing runs.

   Memory: allocations during the capture come from the graph's own pool, kept until the graph is
   destroyed (replays write there); a block freed while a graph that may read it lives (anything
   held when the capture ended) is not reused until no such graph lives.
   What a capture refuses, as an error naming the op (and the capture's end fails with the first
   one, even when the caller went on): a wait of the host for the device (item, a copy to the
   host, a size read back, synchronize), a copy from host memory of tensor values (each replay
   would copy the values of capture time), a copy between GPUs, a replay of another graph.
   Random draws (dropout, rand) are captured relative to the generator: each replay draws the
   generator's next blocks, as the same ops run eagerly would. */
typedef struct tl_cuda_graph tl_cuda_graph;
/* Begins a capture of device's stream (one at a time per device, not nested): *out, to end. */
tl_status tl_cuda_graph_capture_begin(int device, tl_cuda_graph **out);
/* Ends the capture and makes the graph ready to replay; fails (the graph then cannot replay, and
   tl_cuda_graph_destroy frees it) with the capture's first refusal, or when a call broke it. */
tl_status tl_cuda_graph_capture_end(tl_cuda_graph *graph);
/* Queues a replay on the device's stream (no host wait). */
tl_status tl_cuda_graph_replay(tl_cuda_graph *graph);
/* Frees the graph (ending its capture first, discarded, if it is still capturing); its memory
   returns to the device's cache. NULL is ignored. */
void tl_cuda_graph_destroy(tl_cuda_graph *graph);
/* True while device is being captured. */
bool tl_cuda_is_capturing(int device);

#ifdef __cplusplus
}
#endif

#endif
