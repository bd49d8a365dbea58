/* The parts of the CUDA API that every build has: the matmul precision and cuDNN settings, and in a
   build without CUDA the functions of tlua/cuda.h, answering that there is no device. */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "tlua/cuda.h"
#include "tlua/runtime.h"

static atomic_bool allow_tf32; /* false: "highest" */

tl_status tl_set_matmul_precision(const char *precision) {
    if (precision && strcmp(precision, "highest") == 0)
        atomic_store(&allow_tf32, false);
    else if (precision && strcmp(precision, "high") == 0)
        atomic_store(&allow_tf32, true);
    else
        return tl_error(
            TL_ERR_ARGUMENT, "set_matmul_precision: expected \"highest\" or \"high\", got %s%s%s",
            precision ? "\"" : "", precision ? precision : "nothing", precision ? "\"" : "");
    return TL_OK;
}

const char *tl_get_matmul_precision(void) {
    return atomic_load(&allow_tf32) ? "high" : "highest";
}

/* internal (cuda/cuda_runtime.h), declared here to keep CUDA headers out of this file */
bool tl_cuda_matmul_allow_tf32(void);
bool tl_cuda_matmul_allow_tf32(void) {
    return atomic_load(&allow_tf32);
}

static atomic_bool cudnn_disabled; /* false: conv2d runs on cuDNN where a build has it */

void tl_set_cudnn_enabled(bool enabled) {
    atomic_store(&cudnn_disabled, !enabled);
}

bool tl_cudnn_enabled(void) {
    return !atomic_load(&cudnn_disabled);
}

static atomic_bool hopper_gemm_disabled; /* false: the Hopper GEMM core runs where it can */

void tl_set_hopper_gemm_enabled(bool enabled) {
    atomic_store(&hopper_gemm_disabled, !enabled);
}

bool tl_hopper_gemm_enabled(void) {
    return !atomic_load(&hopper_gemm_disabled);
}

#ifndef TLUA_HAVE_CUDA
static tl_status no_cuda(const char *op, int device) {
    return tl_error(TL_ERR_DEVICE,
                    "%s: cuda:%d is not available (this build has no CUDA support or no GPU is "
                    "present)",
                    op, device);
}

int tl_cuda_device_count(void) {
    return 0;
}
bool tl_cuda_is_available(void) {
    return false;
}
tl_status tl_cuda_synchronize(int device) {
    return no_cuda("synchronize", device);
}
uint64_t tl_cuda_host_waits(void) {
    return 0;
}
tl_status tl_cuda_device_name(int device, char *buf, size_t size) {
    if (size > 0) buf[0] = '\0';
    return no_cuda("get_device_name", device);
}
tl_status tl_cuda_device_capability(int device, int *major, int *minor) {
    *major = *minor = 0;
    return no_cuda("get_device_capability", device);
}
tl_status tl_cuda_memory_stats(int device, tl_cuda_allocator_stats *out) {
    (void)out;
    return no_cuda("memory_stats", device);
}
tl_status tl_cuda_reset_peak_memory_stats(int device) {
    return no_cuda("reset_peak_memory_stats", device);
}
tl_status tl_cuda_empty_cache(int device) {
    return device == -1 ? TL_OK : no_cuda("empty_cache", device);
}
void tl_cuda_set_reclaim_hook(tl_cuda_reclaim_fn fn, void *context) {
    (void)fn, (void)context;
}
void tl_cuda_clear_reclaim_hook(void *context) {
    (void)context;
}
tl_status tl_cuda_graph_capture_begin(int device, tl_cuda_graph **out) {
    *out = NULL;
    return no_cuda("graph", device);
}
tl_status tl_cuda_graph_capture_end(tl_cuda_graph *graph) {
    (void)graph;
    return tl_error(TL_ERR_ARGUMENT, "graph: the graph is not being captured");
}
tl_status tl_cuda_graph_replay(tl_cuda_graph *graph) {
    (void)graph;
    return tl_error(TL_ERR_ARGUMENT, "graph: replay of a graph that was not captured");
}
void tl_cuda_graph_destroy(tl_cuda_graph *graph) {
    (void)graph;
}
bool tl_cuda_is_capturing(int device) {
    (void)device;
    return false;
}
#endif
