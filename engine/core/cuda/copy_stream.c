/* Each device's copy stream: 2-D copies that run beside the device's stream, ordered by events. */
#include <pthread.h>
#include <stdatomic.h>

#include "core/cuda/cuda_runtime.h"

typedef struct copy_context {
    atomic_bool ready;
    cudaStream_t stream;
    cudaEvent_t queued;  /* the device's stream up to a copy's start */
    cudaEvent_t done[2]; /* the last copy of each slot */
} copy_context;

static copy_context contexts[TL_CUDA_MAX_DEVICES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static tl_status create(copy_context *c, const char *op) {
    cudaError_t err = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&c->queued, cudaEventDisableTiming);
    for (int i = 0; i < 2 && err == cudaSuccess; i++)
        err = cudaEventCreateWithFlags(&c->done[i], cudaEventDisableTiming);
    if (err != cudaSuccess) return tl_cuda_fail(err, op, "creating the device's copy stream");
    atomic_store_explicit(&c->ready, true, memory_order_release);
    return TL_OK;
}

/* The device's stream (made current) and its copy context. */
static tl_status context_of(int device, const char *op, cudaStream_t *stream, copy_context **c) {
    TL_TRY(tl_cuda_stream(device, op, stream));
    *c = &contexts[device];
    if (atomic_load_explicit(&(*c)->ready, memory_order_acquire)) return TL_OK;
    pthread_mutex_lock(&lock);
    tl_status status =
        atomic_load_explicit(&(*c)->ready, memory_order_relaxed) ? TL_OK : create(*c, op);
    pthread_mutex_unlock(&lock);
    return status;
}

tl_status tl_cuda_copy_2d_after(int device, int slot, void *dst, size_t dpitch, const void *src,
                                size_t spitch, size_t width, size_t height, const char *op) {
    cudaStream_t stream;
    copy_context *c;
    TL_TRY(context_of(device, op, &stream, &c));
    TL_CUDA_TRY(cudaEventRecord(c->queued, stream), op, "cudaEventRecord");
    TL_CUDA_TRY(cudaStreamWaitEvent(c->stream, c->queued, 0), op, "cudaStreamWaitEvent");
    TL_CUDA_TRY(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice,
                                  c->stream),
                op, "cudaMemcpy2DAsync");
    TL_CUDA_TRY(cudaEventRecord(c->done[slot & 1], c->stream), op, "cudaEventRecord");
    return TL_OK;
}

tl_status tl_cuda_copy_wait(int device, int slot, const char *op) {
    cudaStream_t stream;
    copy_context *c;
    TL_TRY(context_of(device, op, &stream, &c));
    TL_CUDA_TRY(cudaStreamWaitEvent(stream, c->done[slot & 1], 0), op, "cudaStreamWaitEvent");
    return TL_OK;
}
