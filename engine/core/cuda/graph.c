/* CUDA graphs: a capture of the work queued on a device's stream into a graph, its replays, and
   what a capture refuses (a host wait, a copy of host values) or keeps (staged descriptors in
   pinned memory, the random draws made relative to the generator). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/cuda_runtime.h"
#include "core/generator.h"
#include "tlua/cuda.h"

/* Pinned host memory a capture staged descriptors in: read by the graph's copies at each replay,
   so kept until the graph is destroyed. */
typedef struct pinned_chunk {
    struct pinned_chunk *next;
    size_t used, size;
    unsigned char *data;
} pinned_chunk;

#define PINNED_CHUNK ((size_t)64 << 10)

struct tl_cuda_graph {
    int device;
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    tl_cuda_capture_pool *pool;
    bool capturing;
    /* the first thing the capture refused: its status and message */
    tl_status refusal;
    char refusal_message[512];
    pinned_chunk *pinned;
    /* Philox blocks the captured kernels draw (from the capture's first), under rng_seed */
    uint64_t rng_blocks, rng_seed;
    struct tl_cuda_graph *deferred_next; /* in the list of graphs whose freeing waits */
};

/* The capture in progress on each device (one thread drives a capture; reads from others see a
   stale value only between a begin and an end they do not take part in). */
static tl_cuda_graph *_Atomic capture_of[TL_CUDA_MAX_DEVICES];

static tl_cuda_graph *current(int device) {
    if (device < 0 || device >= TL_CUDA_MAX_DEVICES) return NULL;
    return atomic_load_explicit(&capture_of[device], memory_order_acquire);
}

bool tl_cuda_capturing(int device) {
    return current(device) != NULL;
}

bool tl_cuda_is_capturing(int device) {
    return tl_cuda_capturing(device);
}

tl_status tl_cuda_capture_refuse(int device, const char *op, const char *what, const char *why) {
    tl_status status =
        tl_error(TL_ERR_RUNTIME, "%s: %s cannot be captured in a CUDA graph (%s)", op, what, why);
    tl_cuda_graph *g = current(device);
    if (g && g->refusal == TL_OK) {
        g->refusal = status;
        snprintf(g->refusal_message, sizeof g->refusal_message, "%s", tl_last_error());
    }
    return status;
}

/* n bytes of the capture's pinned memory (16-byte aligned), a new chunk when the last is full */
static tl_status pinned_bytes(tl_cuda_graph *g, size_t n, const char *op, void **out) {
    n = (n + 15) & ~(size_t)15;
    pinned_chunk *c = g->pinned;
    if (!c || c->size - c->used < n) {
        size_t size = n > PINNED_CHUNK ? n : PINNED_CHUNK;
        c = calloc(1, sizeof *c);
        if (!c) return tl_error(TL_ERR_MEMORY, "%s: out of host memory", op);
        void *data = NULL;
        tl_status status = tl_cuda_host_alloc(size, op, &data);
        if (status != TL_OK) {
            free(c);
            return status;
        }
        c->data = data;
        c->size = size;
        c->next = g->pinned;
        g->pinned = c;
    }
    *out = c->data + c->used;
    c->used += n;
    return TL_OK;
}

tl_status tl_cuda_stage(int device, cudaStream_t stream, void *dst, const void *src, size_t n,
                        const char *op, const char *what) {
    if (n == 0) return TL_OK;
    tl_cuda_graph *g = current(device);
    const void *from = src;
    if (g) {
        void *kept = NULL;
        TL_TRY(pinned_bytes(g, n, op, &kept));
        memcpy(kept, src, n);
        from = kept;
    }
    TL_CUDA_TRY(cudaMemcpyAsync(dst, from, n, cudaMemcpyHostToDevice, stream), op, what);
    return TL_OK;
}

bool tl_cuda_capture_draw(int device, uint64_t blocks, uint64_t *counter) {
    tl_cuda_graph *g = current(device);
    if (!g) return false;
    if (g->rng_blocks == 0) g->rng_seed = tl_generator_seed();
    *counter = g->rng_blocks;
    g->rng_blocks += blocks;
    return true;
}

/* Graphs destroyed while a capture runs (a collector may free one then): freed once no capture
   runs, since freeing a graph's pinned memory waits for the device, which a capture forbids. */
static tl_cuda_graph *deferred;

bool tl_cuda_any_capturing(void) {
    for (int d = 0; d < TL_CUDA_MAX_DEVICES; d++)
        if (current(d)) return true;
    return false;
}

/* ---- the public API (tlua/cuda.h) --------------------------------------------------------- */
static void free_pinned(tl_cuda_graph *g) {
    while (g->pinned) {
        pinned_chunk *c = g->pinned;
        g->pinned = c->next;
        tl_cuda_host_free(c->data); /* waits for the copies reading it */
        free(c);
    }
}

tl_status tl_cuda_graph_capture_begin(int device, tl_cuda_graph **out) {
    const char *op = "graph";
    *out = NULL;
    cudaStream_t stream;
    TL_TRY(tl_cuda_stream(device, op, &stream));
    if (current(device))
        return tl_error(TL_ERR_RUNTIME,
                        "%s: cuda:%d is already being captured (one capture at a "
                        "time per device; captures do not nest)",
                        op, device);
    tl_cuda_graph *g = calloc(1, sizeof *g);
    if (!g) return tl_error(TL_ERR_MEMORY, "%s: out of host memory", op);
    g->device = device;
    g->stream = stream;
    tl_status status = tl_cuda_pool_open(device, op, &g->pool);
    if (status != TL_OK) {
        free(g);
        return status;
    }
    /* thread-local mode: this thread may not make calls that would break the capture (a
       synchronization, a legacy-stream copy); the engine turns the ones it knows into errors
       before they reach CUDA */
    cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (err != cudaSuccess) {
        tl_cuda_pool_end_capture(g->pool);
        tl_cuda_pool_close(g->pool);
        free(g);
        return tl_cuda_fail(err, op, "cudaStreamBeginCapture");
    }
    g->capturing = true;
    atomic_store_explicit(&capture_of[device], g, memory_order_release);
    *out = g;
    return TL_OK;
}

static void free_deferred(void);

/* Ends the capture of g (the stream leaves capture mode whatever happened): its graph, or
   NULL where the capture was invalidated. */
static cudaGraph_t stop_capture(tl_cuda_graph *g, cudaError_t *err) {
    cudaGraph_t graph = NULL;
    *err = cudaStreamEndCapture(g->stream, &graph);
    if (*err != cudaSuccess) (void)cudaGetLastError();
    atomic_store_explicit(&capture_of[g->device], NULL, memory_order_release);
    tl_cuda_pool_end_capture(g->pool);
    g->capturing = false;
    free_deferred();
    tl_cuda_host_free_pending();
    return graph;
}

tl_status tl_cuda_graph_capture_end(tl_cuda_graph *g) {
    const char *op = "graph";
    if (!g || !g->capturing)
        return tl_error(TL_ERR_ARGUMENT, "%s: the graph is not being captured", op);
    cudaError_t err;
    cudaGraph_t graph = stop_capture(g, &err);
    if (g->refusal != TL_OK) {
        if (graph) (void)cudaGraphDestroy(graph);
        return tl_error(g->refusal, "%s", g->refusal_message);
    }
    if (err != cudaSuccess || !graph)
        return tl_cuda_fail(err != cudaSuccess ? err : cudaErrorStreamCaptureInvalidated, op,
                            "cudaStreamEndCapture: the capture was broken by a call it cannot "
                            "hold (on this or another thread)");
    err = cudaGraphInstantiate(&g->exec, graph, 0);
    if (err != cudaSuccess) {
        g->exec = NULL;
        (void)cudaGraphDestroy(graph);
        return tl_cuda_fail(err, op, "cudaGraphInstantiate");
    }
    g->graph = graph;
    return TL_OK;
}

tl_status tl_cuda_graph_replay(tl_cuda_graph *g) {
    const char *op = "graph";
    if (!g || !g->exec)
        return tl_error(TL_ERR_ARGUMENT, "%s: replay of a graph that was not captured", op);
    if (current(g->device))
        return tl_cuda_capture_refuse(g->device, op, "a replay of another graph",
                                      "replay it outside the capture");
    cudaStream_t stream;
    TL_TRY(tl_cuda_stream(g->device, op, &stream));
    const uint64_t *cell = tl_cuda_rng_cell(g->device);
    uint64_t correction[2] = {0, 0};
    if (g->rng_blocks > 0) {
        /* the captured kernels drew (rng_seed, capture-relative counter): the cell turns that into
           the generator's seed and its next blocks, which the generator hands out now */
        uint64_t seed, counter;
        tl_generator_take(g->rng_blocks, &seed, &counter);
        correction[0] = g->rng_seed ^ seed;
        correction[1] = counter;
        TL_TRY(tl_cuda_stage(g->device, stream, (void *)cell, correction, sizeof correction, op,
                             "the random generator's correction"));
    }
    TL_CUDA_TRY(cudaGraphLaunch(g->exec, stream), op, "cudaGraphLaunch");
    if (g->rng_blocks > 0) {
        static const uint64_t zeros[2] = {0, 0};
        TL_TRY(tl_cuda_stage(g->device, stream, (void *)cell, zeros, sizeof zeros, op,
                             "the random generator's correction"));
    }
    return TL_OK;
}

static void free_graph(tl_cuda_graph *g);

void tl_cuda_graph_destroy(tl_cuda_graph *g) {
    if (!g) return;
    if (!g->capturing && tl_cuda_any_capturing()) {
        g->deferred_next = deferred;
        deferred = g;
        return;
    }
    free_graph(g);
}

static void free_deferred(void) {
    while (deferred && !tl_cuda_any_capturing()) {
        tl_cuda_graph *g = deferred;
        deferred = g->deferred_next;
        free_graph(g);
    }
}

static void free_graph(tl_cuda_graph *g) {
    if (g->capturing) {
        cudaError_t err;
        cudaGraph_t graph = stop_capture(g, &err);
        if (graph) (void)cudaGraphDestroy(graph);
    }
    if (g->exec) (void)cudaGraphExecDestroy(g->exec);
    if (g->graph) (void)cudaGraphDestroy(g->graph);
    free_pinned(g);
    if (g->pool) tl_cuda_pool_close(g->pool);
    (void)cudaGetLastError();
    free(g);
}
