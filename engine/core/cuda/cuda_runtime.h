/* Internal: the engine's CUDA runtime (per-device stream and cuBLAS handle, error
   translation), the caching allocator and cross-device copies. C and CUDA sources share it. */
#ifndef TLUA_CUDA_RUNTIME_INTERNAL_H
#define TLUA_CUDA_RUNTIME_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* no tlua/tensor.h: nvcc (C++) sources include this header, and tlua/dtype.h is C only */
#include "tlua/cuda.h"
#include "tlua/device.h"

/* Devices beyond this index are not used. */
#define TL_CUDA_MAX_DEVICES 64

/* ---- runtime (cuda/context.c) -------------------------------------------------------- */
/* Makes device current on the calling thread and gives its stream, created on first use (a
   non-blocking stream: every kernel, copy and GEMM of the engine on that device goes there, in
   order). op names the caller in errors. */
tl_status tl_cuda_stream(int device, const char *op, cudaStream_t *stream);
/* The same, and the device's cuBLAS handle bound to that stream, its math mode set for the
   current matmul precision (tl_set_matmul_precision). */
tl_status tl_cuda_blas(int device, const char *op, cublasHandle_t *handle, cudaStream_t *stream);
/* The same with the device's cuBLASLt handle (the stream is given to each cublasLtMatmul). */
tl_status tl_cuda_blas_lt(int device, const char *op, cublasLtHandle_t *handle,
                          cudaStream_t *stream);
/* Multiprocessors of the device (valid once tl_cuda_stream succeeded for it). */
int tl_cuda_sm_count(int device);

/* ---- per-device facts of the program's kernels (cuda/context.c) ----------------------- */
/* A kernel's attribute cudaFuncAttributeMaxDynamicSharedMemorySize is a fact of one device: a
   limit raised on one GPU is not raised on another. Raises func's limit to bytes on device
   (made current, as tl_cuda_stream does) unless the device's state remembers a limit of at least
   bytes set for func there; remembers the largest set. func: a __global__ function. op names the
   caller in errors. */
tl_status tl_cuda_func_set_max_shared(int device, const void *func, int bytes, const char *op);
/* A number for one kernel of the program (a __global__ function), the same on every device:
   its slot in each device's table of driver handles (below). -1 when the slots are used up. */
int tl_cuda_kernel_slot(void);
/* The driver's handle of kernel (slot: its tl_cuda_kernel_slot) on device, which must be the
   calling thread's current device (a handle belongs to one device's context):
   cudaGetFuncBySymbol's answer the first time, then the one kept in the device's state. NULL
   where the runtime gives none (or slot is -1): then launch through the runtime. */
cudaFunction_t tl_cuda_kernel_function(int device, int slot, const void *kernel);
/* True when float32 GEMMs may use TF32 (precision "high"; cuda_api.c). */
bool tl_cuda_matmul_allow_tf32(void);

/* A failed CUDA call as an error: "<op>: CUDA error: <description> (<name>, <what>)";
   out of memory gives TL_ERR_MEMORY, anything else TL_ERR_RUNTIME. The error is cleared
   where CUDA allows; an error that leaves the context unusable says so. */
tl_status tl_cuda_fail(cudaError_t err, const char *op, const char *what);
tl_status tl_cublas_fail(cublasStatus_t status, const char *op, const char *what);
/* After a kernel launch: TL_OK, or the launch's error (no synchronisation). */
tl_status tl_cuda_check_launch(const char *op);

#define TL_CUDA_TRY(call, op, what)                                                                \
    do {                                                                                           \
        cudaError_t tl_cuda_err_ = (call);                                                         \
        if (tl_cuda_err_ != cudaSuccess) return tl_cuda_fail(tl_cuda_err_, op, what);              \
    } while (0)

/* ---- caching allocator (cuda/allocator.c) -------------------------------------------- */
/* nbytes of device memory on device (at least 512 B, 256-byte aligned), from the cache or
   cudaMalloc; on out of memory the device's cache is emptied and the request tried once
   more before failing with TL_ERR_MEMORY, naming op. */
tl_status tl_cuda_malloc(int device, size_t nbytes, const char *op, void **out);
/* Gives a block back to the device's cache (for reuse on the device's stream, in order). */
void tl_cuda_free(int device, void *ptr);
/* Page-locked (pinned) host memory of nbytes, from which copies to a device run without the
   host waiting; tl_cuda_host_free gives it back (cudaFreeHost waits for the copies reading it). */
tl_status tl_cuda_host_alloc(size_t nbytes, const char *op, void **out);
void tl_cuda_host_free(void *ptr);
/* During a CUDA graph's capture tl_cuda_host_free keeps the blocks (cudaFreeHost would wait for
   the device); this frees them once no capture runs (graph.c calls it as a capture ends). */
void tl_cuda_host_free_pending(void);

/* ---- memory of a CUDA graph's capture (cuda/allocator.c) ---------------------------------- */
/* A capture's private pool: while it is open on a device, that device's allocations are served
   from it (blocks that capture freed, the device's cache, or cudaMalloc), so the graph's replays
   write only memory that belongs to the graph. */
typedef struct tl_cuda_capture_pool tl_cuda_capture_pool;
/* Opens a pool on device for a capture that begins now (the device must have no open one). */
tl_status tl_cuda_pool_open(int device, const char *op, tl_cuda_capture_pool **out);
/* The capture ended: the device's allocations go back to its cache; the pool's blocks stay the
   graph's until tl_cuda_pool_close. */
void tl_cuda_pool_end_capture(tl_cuda_capture_pool *pool);
/* The graph is gone: its blocks (and the blocks freed since a capture began that it might read)
   return to the device's cache once no live graph may read them. */
void tl_cuda_pool_close(tl_cuda_capture_pool *pool);

/* ---- graph capture (cuda/graph.c) -------------------------------------------------------- */
/* True while a capture records the device's stream; the second: any device's. */
bool tl_cuda_capturing(int device);
bool tl_cuda_any_capturing(void);
/* What cannot be captured: records the first refusal in the device's capture (its end fails with
   it, even if the caller went on) and returns the error "<op>: <what> cannot be captured in a
   CUDA graph (<why>)". */
tl_status tl_cuda_capture_refuse(int device, const char *op, const char *what, const char *why);
/* n bytes from host memory to dst on device, queued on stream after the work before it, src
   reusable at return. Outside a capture, a pageable copy the driver stages at once; inside one,
   a copy from pinned memory the graph keeps (the bytes as they were at capture, on every
   replay): for what an op builds on the host from shapes and pointers (descriptors, pointer
   arrays), never for tensor values. */
tl_status tl_cuda_stage(int device, cudaStream_t stream, void *dst, const void *src, size_t n,
                        const char *op, const char *what);
/* A draw of `blocks` Philox blocks by a kernel on a device being captured: *counter is the draw's
   place counted from the capture's first block, and true is returned (the generator does not
   move: each replay draws fresh blocks, tl_cuda_rng_cell). False when device is not capturing. */
bool tl_cuda_capture_draw(int device, uint64_t blocks, uint64_t *counter);
/* The device's generator correction, 2 words in device memory that every kernel drawing random
   numbers reads: its stream is (seed ^ cell[0], counter + cell[1]). Zeros, except during a
   replay, where they turn the captured (seed, capture-relative counter) into the generator's
   current ones. NULL until the device's stream exists (tl_cuda_stream). */
const uint64_t *tl_cuda_rng_cell(int device);

/* ---- copies (cuda/context.c) ---------------------------------------------------------- */
/* n bytes host <-> device or device <-> device, on the device's stream; returns when dst may
   be read by the host (device -> host: the host waits, and a failed index check is raised) and
   when src may be reused (host -> device: staged by the driver, no wait). Device -> device on
   one device does not wait. */
tl_status tl_cuda_memcpy(tl_device dst_device, void *dst, tl_device src_device, const void *src,
                         size_t n);

/* Sets n bytes of device memory to zero, on the device's stream (in order, no wait). */
tl_status tl_cuda_memset_zero(int device, void *dst, size_t n);

/* ---- index checks queued on the GPU (cuda/fault.c) ------------------------------------ */
/* A device's failure record, in mapped host memory: a check kernel that finds an index out of
   range swaps id from 0 to its own (atomicCAS) and, when it won, writes value and position. */
typedef struct tl_cuda_fault {
    unsigned int id;
    unsigned int unused;
    long long value, position;
} tl_cuda_fault;
struct tl_index_range;
/* Registers a check of an indices tensor of shape [ndim] on device: *record (the device's
   view of the record) and *id for its kernel. range's strings must outlive it (literals). */
tl_status tl_cuda_fault_arm(int device, const struct tl_index_range *range, const int64_t *shape,
                            int ndim, tl_cuda_fault **record, unsigned int *id);
/* After a wait for the device's stream: the error of a check that failed since the last
   call (TL_ERR_INDEX, its message), else TL_OK. Clears it. */
tl_status tl_cuda_raise_faults(int device);

#ifdef __cplusplus
}
#endif

#endif
