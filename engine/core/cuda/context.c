/* The CUDA runtime: device count, each device's state (stream, cuBLAS handle, the kernels'
   raised shared memory limits and driver handles, made on first use), synchronisation, error
   translation and copies between host and devices. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/cuda/cuda_runtime.h"
#include "core/cuda/host_wait.h"
#include "tlua/cuda.h"

/* A kernel whose dynamic shared memory limit was raised on a device, and to what. */
typedef struct shared_limit {
    const void *func;
    int bytes;
} shared_limit;

/* The driver handles of the program's kernels on one device, by slot: FUNCTION_PAGES pages of
   FUNCTION_PAGE cells, each page made when a slot of it is first looked up. A cell is read
   without the lock and written once under it: NULL (not looked up yet), NO_FUNCTION (the runtime
   gave none) or the handle. */
#define FUNCTION_PAGE  256
#define FUNCTION_PAGES 64
typedef _Atomic(cudaFunction_t) function_cell;

typedef struct device_context {
    atomic_bool ready;      /* stream and sm_count set */
    atomic_bool blas_ready; /* blas set */
    atomic_bool lt_ready;   /* lt set */
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    int blas_tf32; /* the math mode last set on blas: 1 TF32, 0 default, -1 none yet */
    int sm_count;
    uint64_t *rng_cell; /* tl_cuda_rng_cell: 2 words of device memory, zeros between replays */
    shared_limit *shared_limits; /* under init_lock: shared_count of shared_capacity */
    int shared_count, shared_capacity;
    _Atomic(function_cell *) function_pages[FUNCTION_PAGES];
} device_context;

static device_context contexts[TL_CUDA_MAX_DEVICES];
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int device_count;

/* No driver, no GPU or a driver too old for this runtime all mean 0 devices. */
static void count_devices(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    device_count = n > TL_CUDA_MAX_DEVICES ? TL_CUDA_MAX_DEVICES : n;
}

int tl_cuda_device_count(void) {
    pthread_once(&count_once, count_devices);
    return device_count;
}

bool tl_cuda_is_available(void) {
    return tl_cuda_device_count() > 0;
}

/* ---- errors ------------------------------------------------------------------------------ */
/* Errors after which the context cannot be used again (the process must restart). */
static bool is_sticky(cudaError_t err) {
    switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
        return true;
    default:
        return false;
    }
}

tl_status tl_cuda_fail(cudaError_t err, const char *op, const char *what) {
    (void)cudaGetLastError(); /* clears the error unless it is sticky */
    tl_status status = err == cudaErrorMemoryAllocation ? TL_ERR_MEMORY : TL_ERR_RUNTIME;
    return tl_error(
        status, "%s: CUDA error: %s (%s, %s)%s", op, cudaGetErrorString(err), cudaGetErrorName(err),
        what, is_sticky(err) ? "; the CUDA context is unusable now, restart the process" : "");
}

static const char *cublas_status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
        return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
        return "CUBLAS_STATUS_UNKNOWN";
    }
}

tl_status tl_cublas_fail(cublasStatus_t s, const char *op, const char *what) {
    (void)cudaGetLastError();
    tl_status status = s == CUBLAS_STATUS_ALLOC_FAILED ? TL_ERR_MEMORY : TL_ERR_RUNTIME;
    return tl_error(status, "%s: cuBLAS error: %s (%s, %s)", op, cublasGetStatusString(s),
                    cublas_status_name(s), what);
}

tl_status tl_cuda_check_launch(const char *op) {
    cudaError_t err = cudaPeekAtLastError();
    return err == cudaSuccess ? TL_OK : tl_cuda_fail(err, op, "kernel launch");
}

/* ---- devices, streams, handles ------------------------------------------------------------ */
static tl_status check_index(int device, const char *op) {
    int count = tl_cuda_device_count();
    if (count == 0)
        return tl_error(TL_ERR_DEVICE,
                        "%s: cuda:%d is not available (this build has no CUDA support or no GPU "
                        "is present)",
                        op, device);
    if (device < 0 || device >= count)
        return tl_error(TL_ERR_DEVICE, "%s: cuda:%d does not exist (%d CUDA device%s)", op, device,
                        count, count == 1 ? "" : "s");
    return TL_OK;
}

/* Set once this thread has made cuda:0 current while it is the only device: nothing can make
   another device current then, so ops skip cudaGetDevice. With several devices the host may
   switch between calls, so every op asks. */
static _Thread_local bool only_device_current;

static tl_status make_current(int device, const char *op) {
    if (only_device_current) return TL_OK;
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess) {
        (void)cudaGetLastError();
        current = -1;
    }
    if (current != device) TL_CUDA_TRY(cudaSetDevice(device), op, "cudaSetDevice");
    only_device_current = tl_cuda_device_count() == 1;
    return TL_OK;
}

static tl_status create_context(int device, const char *op) {
    device_context *c = &contexts[device];
    tl_status status = TL_OK;
    pthread_mutex_lock(&init_lock);
    if (!atomic_load_explicit(&c->ready, memory_order_relaxed)) {
        cudaStream_t stream = NULL;
        int sms = 0;
        void *cell = NULL;
        cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        if (err == cudaSuccess) err = cudaMalloc(&cell, 2 * sizeof(uint64_t));
        if (err == cudaSuccess) err = cudaMemset(cell, 0, 2 * sizeof(uint64_t));
        if (err == cudaSuccess) {
            c->stream = stream;
            c->rng_cell = cell;
            c->sm_count = sms > 0 ? sms : 1;
            c->blas_tf32 = -1;
            atomic_store_explicit(&c->ready, true, memory_order_release);
        } else {
            status = tl_cuda_fail(err, op, "creating the device's stream");
        }
    }
    pthread_mutex_unlock(&init_lock);
    return status;
}

tl_status tl_cuda_stream(int device, const char *op, cudaStream_t *stream) {
    TL_TRY(check_index(device, op));
    TL_TRY(make_current(device, op));
    device_context *c = &contexts[device];
    if (!atomic_load_explicit(&c->ready, memory_order_acquire)) TL_TRY(create_context(device, op));
    *stream = c->stream;
    return TL_OK;
}

tl_status tl_cuda_device_name(int device, char *buf, size_t size) {
    TL_TRY(check_index(device, "get_device_name"));
    struct cudaDeviceProp prop;
    TL_CUDA_TRY(cudaGetDeviceProperties(&prop, device), "get_device_name",
                "cudaGetDeviceProperties");
    if (size > 0) snprintf(buf, size, "%s", prop.name);
    return TL_OK;
}

tl_status tl_cuda_device_capability(int device, int *major, int *minor) {
    TL_TRY(check_index(device, "get_device_capability"));
    TL_CUDA_TRY(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device),
                "get_device_capability", "cudaDeviceGetAttribute");
    TL_CUDA_TRY(cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, device),
                "get_device_capability", "cudaDeviceGetAttribute");
    return TL_OK;
}

const uint64_t *tl_cuda_rng_cell(int device) {
    if (device < 0 || device >= TL_CUDA_MAX_DEVICES) return NULL;
    return contexts[device].rng_cell;
}

int tl_cuda_sm_count(int device) {
    if (device < 0 || device >= TL_CUDA_MAX_DEVICES) return 1;
    return contexts[device].sm_count > 0 ? contexts[device].sm_count : 1;
}

/* ---- per-device facts of the program's kernels ------------------------------------------- */
tl_status tl_cuda_func_set_max_shared(int device, const void *func, int bytes, const char *op) {
    TL_TRY(check_index(device, op));
    device_context *c = &contexts[device];
    tl_status status = TL_OK;
    pthread_mutex_lock(&init_lock);
    int i = 0;
    while (i < c->shared_count && c->shared_limits[i].func != func) i++;
    if (i == c->shared_count || c->shared_limits[i].bytes < bytes) {
        status = make_current(device, op);
        cudaError_t err = cudaSuccess;
        if (status == TL_OK)
            err = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        if (err != cudaSuccess) status = tl_cuda_fail(err, op, "cudaFuncSetAttribute");
        if (status == TL_OK && i == c->shared_count && c->shared_count == c->shared_capacity) {
            /* a limit not remembered (no memory for it) is only set again next time */
            int capacity = c->shared_capacity ? 2 * c->shared_capacity : 16;
            shared_limit *grown = realloc(c->shared_limits, sizeof *grown * (size_t)capacity);
            if (grown) {
                c->shared_limits = grown;
                c->shared_capacity = capacity;
            }
        }
        if (status == TL_OK && i < c->shared_capacity) {
            c->shared_limits[i] = (shared_limit){.func = func, .bytes = bytes};
            if (i == c->shared_count) c->shared_count++;
        }
    }
    pthread_mutex_unlock(&init_lock);
    return status;
}

static atomic_int kernel_slots; /* slots handed out, for every device alike */

int tl_cuda_kernel_slot(void) {
    int slot = atomic_fetch_add(&kernel_slots, 1);
    return slot < FUNCTION_PAGE * FUNCTION_PAGES ? slot : -1;
}

static char no_function_mark;
#define NO_FUNCTION ((cudaFunction_t)(void *)&no_function_mark)

/* The cell of slot on device: looked up under the lock, its page made when missing. */
static cudaFunction_t find_function(device_context *c, int slot, const void *kernel) {
    cudaFunction_t f = NULL;
    pthread_mutex_lock(&init_lock);
    _Atomic(function_cell *) *page_slot = &c->function_pages[slot / FUNCTION_PAGE];
    function_cell *page = atomic_load_explicit(page_slot, memory_order_relaxed);
    if (!page) {
        page = malloc(sizeof *page * FUNCTION_PAGE);
        if (page) {
            for (int i = 0; i < FUNCTION_PAGE; i++) atomic_init(&page[i], NULL);
            atomic_store_explicit(page_slot, page, memory_order_release);
        }
    }
    if (page) {
        function_cell *cell = &page[slot % FUNCTION_PAGE];
        f = atomic_load_explicit(cell, memory_order_relaxed);
        if (!f) {
            if (cudaGetFuncBySymbol(&f, kernel) != cudaSuccess || !f) {
                (void)cudaGetLastError();
                f = NO_FUNCTION;
            }
            atomic_store_explicit(cell, f, memory_order_release);
        }
    }
    pthread_mutex_unlock(&init_lock);
    return f;
}

cudaFunction_t tl_cuda_kernel_function(int device, int slot, const void *kernel) {
    if (slot < 0 || device < 0 || device >= TL_CUDA_MAX_DEVICES) return NULL;
    device_context *c = &contexts[device];
    function_cell *page =
        atomic_load_explicit(&c->function_pages[slot / FUNCTION_PAGE], memory_order_acquire);
    cudaFunction_t f =
        page ? atomic_load_explicit(&page[slot % FUNCTION_PAGE], memory_order_acquire) : NULL;
    if (!f) f = find_function(c, slot, kernel);
    return f == NO_FUNCTION ? NULL : f;
}

static tl_status create_blas(int device, const char *op) {
    device_context *c = &contexts[device];
    tl_status status = TL_OK;
    pthread_mutex_lock(&init_lock);
    if (!atomic_load_explicit(&c->blas_ready, memory_order_relaxed)) {
        cublasHandle_t handle = NULL;
        cublasStatus_t s = cublasCreate(&handle);
        if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(handle, c->stream);
        if (s == CUBLAS_STATUS_SUCCESS) {
            c->blas = handle;
            atomic_store_explicit(&c->blas_ready, true, memory_order_release);
        } else {
            if (handle) cublasDestroy(handle);
            status = tl_cublas_fail(s, op, "creating the device's cuBLAS handle");
        }
    }
    pthread_mutex_unlock(&init_lock);
    return status;
}

tl_status tl_cuda_blas(int device, const char *op, cublasHandle_t *handle, cudaStream_t *stream) {
    TL_TRY(tl_cuda_stream(device, op, stream));
    device_context *c = &contexts[device];
    if (!atomic_load_explicit(&c->blas_ready, memory_order_acquire))
        TL_TRY(create_blas(device, op));
    int tf32 = tl_cuda_matmul_allow_tf32() ? 1 : 0;
    if (c->blas_tf32 != tf32) {
        cublasStatus_t s =
            cublasSetMathMode(c->blas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
        if (s != CUBLAS_STATUS_SUCCESS) return tl_cublas_fail(s, op, "cublasSetMathMode");
        c->blas_tf32 = tf32;
    }
    *handle = c->blas;
    return TL_OK;
}

tl_status tl_cuda_blas_lt(int device, const char *op, cublasLtHandle_t *handle,
                          cudaStream_t *stream) {
    TL_TRY(tl_cuda_stream(device, op, stream));
    device_context *c = &contexts[device];
    tl_status status = TL_OK;
    if (!atomic_load_explicit(&c->lt_ready, memory_order_acquire)) {
        pthread_mutex_lock(&init_lock);
        if (!atomic_load_explicit(&c->lt_ready, memory_order_relaxed)) {
            cublasLtHandle_t lt = NULL;
            cublasStatus_t s = cublasLtCreate(&lt);
            if (s == CUBLAS_STATUS_SUCCESS) {
                c->lt = lt;
                atomic_store_explicit(&c->lt_ready, true, memory_order_release);
            } else {
                status = tl_cublas_fail(s, op, "creating the device's cuBLASLt handle");
            }
        }
        pthread_mutex_unlock(&init_lock);
    }
    *handle = c->lt;
    return status;
}

/* waits of the host for a device since the start (tl_cuda_host_waits) */
static _Atomic uint64_t host_waits;

uint64_t tl_cuda_host_waits(void) {
    return atomic_load(&host_waits);
}

/* The device whose stream is stream, or -1. */
static int device_of_stream(cudaStream_t stream) {
    for (int d = 0; d < TL_CUDA_MAX_DEVICES; d++)
        if (atomic_load_explicit(&contexts[d].ready, memory_order_acquire) &&
            contexts[d].stream == stream)
            return d;
    return -1;
}

tl_status tl_cuda_wait(cudaStream_t stream, const char *op, const char *what) {
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) (void)cudaGetLastError();
    if (capture != cudaStreamCaptureStatusNone)
        return tl_cuda_capture_refuse(device_of_stream(stream), op, what,
                                      "the host would wait for the GPU; read values back after "
                                      "the replay, outside the captured function");
    atomic_fetch_add(&host_waits, 1);
    TL_CUDA_TRY(cudaStreamSynchronize(stream), op, what);
    return TL_OK;
}

tl_status tl_cuda_synchronize(int device) {
    cudaStream_t stream;
    TL_TRY(tl_cuda_stream(device, "synchronize", &stream));
    TL_TRY(tl_cuda_wait(stream, "synchronize", "cudaStreamSynchronize"));
    return tl_cuda_raise_faults(device);
}

/* ---- copies ------------------------------------------------------------------------------ */
tl_status tl_cuda_memset_zero(int device, void *dst, size_t n) {
    if (n == 0) return TL_OK;
    cudaStream_t stream;
    TL_TRY(tl_cuda_stream(device, "empty", &stream));
    TL_CUDA_TRY(cudaMemsetAsync(dst, 0, n, stream), "empty", "zeroing new memory");
    return TL_OK;
}

tl_status tl_cuda_memcpy(tl_device dst_device, void *dst, tl_device src_device, const void *src,
                         size_t n) {
    const char *op = "copy";
    if (n == 0) return TL_OK;
    cudaStream_t stream;
    if (src_device.type == TL_DEVICE_CPU || dst_device.type == TL_DEVICE_CPU) {
        bool to_device = dst_device.type == TL_DEVICE_CUDA;
        int device = to_device ? dst_device.index : src_device.index;
        if (tl_cuda_capturing(device))
            return tl_cuda_capture_refuse(
                device, op, to_device ? "a copy from host memory" : "a copy to host memory",
                to_device ? "each replay would copy the values the host held at capture; copy "
                            "new values into the graph's input tensors before each replay"
                          : "the host would wait for the GPU; read values back after the "
                            "replay, outside the captured function");
        TL_TRY(tl_cuda_stream(device, op, &stream));
        /* after the work queued before it. Host to device from pageable memory: the driver
           stages the buffer before returning, so it may go at once and the host need not wait.
           Device to host: the host waits for the copy, and so raises failed index checks. */
        const char *what = to_device ? "host to device" : "device to host";
        TL_CUDA_TRY(cudaMemcpyAsync(dst, src, n,
                                    to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                    stream),
                    op, what);
        if (to_device) return TL_OK;
        TL_TRY(tl_cuda_wait(stream, op, what));
        return tl_cuda_raise_faults(device);
    }
    if (dst_device.index == src_device.index) {
        TL_TRY(tl_cuda_stream(dst_device.index, op, &stream));
        TL_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream), op,
                    "device to device");
        return TL_OK;
    }
    if (tl_cuda_capturing(src_device.index) || tl_cuda_capturing(dst_device.index))
        return tl_cuda_capture_refuse(
            tl_cuda_capturing(src_device.index) ? src_device.index : dst_device.index, op,
            "a copy between two GPUs", "the host waits for both devices' streams");
    /* between two GPUs: src's pending writes first, and the host waits for the copy, since
       the two streams are not ordered with each other */
    cudaStream_t src_stream;
    TL_TRY(tl_cuda_stream(src_device.index, op, &src_stream));
    TL_TRY(tl_cuda_wait(src_stream, op, "peer copy"));
    TL_TRY(tl_cuda_raise_faults(src_device.index));
    TL_TRY(tl_cuda_stream(dst_device.index, op, &stream));
    TL_CUDA_TRY(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, n, stream), op,
                "peer copy");
    TL_TRY(tl_cuda_wait(stream, op, "peer copy"));
    return tl_cuda_raise_faults(dst_device.index);
}
