/* Index checks queued on a GPU: failures land in a mapped host record per device, raised by the
 * next synchronization. */
#include <pthread.h>
#include <string.h>

#include "core/cuda/cuda_runtime.h"
#include "core/cuda/fault_guard.h"
#include "tlua/tensor.h"

/* The checks queued lately on one device, by id modulo their count: what a failure names. */
#define PENDING_CHECKS 256

typedef struct pending_check {
    uint32_t id;
    tl_index_range range;
    int ndim;
    int64_t shape[TL_MAX_DIMS];
} pending_check;

typedef struct device_faults {
    tl_cuda_fault *host;   /* mapped: the device writes it, the host reads it after a wait */
    tl_cuda_fault *device; /* the same record as the device sees it */
    unsigned int *failed;  /* device memory: the record's id as copied in stream order, for the
                              write kernels (a read of mapped host memory per block costs each
                              block a trip over the bus, one after another) */
    uint32_t next_id;
    pending_check pending[PENDING_CHECKS];
} device_faults;

static device_faults faults[TL_CUDA_MAX_DEVICES];
static pthread_mutex_t faults_lock = PTHREAD_MUTEX_INITIALIZER;

static tl_status ensure_record(int device, const char *op) {
    device_faults *f = &faults[device];
    if (f->host) return TL_OK;
    cudaStream_t stream;
    TL_TRY(tl_cuda_stream(device, op, &stream)); /* makes the device current */
    void *host = NULL, *mapped = NULL;
    /* (during a capture, with the thread's capture mode relaxed: an allocation is not recorded) */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    const cudaError_t alloc_err = cudaHostAlloc(&host, sizeof(tl_cuda_fault), cudaHostAllocMapped);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    TL_CUDA_TRY(alloc_err, op, "the index-check record");
    cudaError_t err = cudaHostGetDevicePointer(&mapped, host, 0);
    if (err != cudaSuccess) {
        (void)cudaFreeHost(host);
        return tl_cuda_fail(err, op, "mapping the index-check record");
    }
    memset(host, 0, sizeof(tl_cuda_fault));
    f->host = host;
    f->device = mapped;
    return TL_OK;
}

tl_status tl_cuda_fault_arm(int device, const tl_index_range *range, const int64_t *shape, int ndim,
                            tl_cuda_fault **record, unsigned int *id) {
    pthread_mutex_lock(&faults_lock);
    tl_status status = ensure_record(device, range->op);
    if (status == TL_OK) {
        device_faults *f = &faults[device];
        if (++f->next_id == 0) f->next_id = 1; /* 0 means "no failure" */
        pending_check *p = &f->pending[f->next_id % PENDING_CHECKS];
        p->id = f->next_id;
        p->range = *range;
        p->ndim = ndim;
        memcpy(p->shape, shape, sizeof shape[0] * (size_t)ndim);
        *record = f->device;
        *id = f->next_id;
    }
    pthread_mutex_unlock(&faults_lock);
    return status;
}

tl_status tl_cuda_fault_flag(int device, const char *op, const volatile unsigned int **flag) {
    pthread_mutex_lock(&faults_lock);
    device_faults *f = &faults[device];
    cudaStream_t stream = NULL;
    tl_status status = ensure_record(device, op);
    if (status == TL_OK) status = tl_cuda_stream(device, op, &stream);
    if (status == TL_OK && !f->failed) {
        /* (relaxed during a capture, as in ensure_record) */
        enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        const cudaError_t err = cudaMalloc((void **)&f->failed, sizeof *f->failed);
        (void)cudaThreadExchangeStreamCaptureMode(&mode);
        if (err != cudaSuccess) {
            f->failed = NULL;
            status = tl_cuda_fail(err, op, "the index checks' failure flag");
        }
    }
    /* the id as the checks queued so far leave it: a 4-byte copy in stream order */
    if (status == TL_OK) {
        const cudaError_t err = cudaMemcpyAsync(f->failed, &f->host->id, sizeof f->host->id,
                                                cudaMemcpyHostToDevice, stream);
        if (err != cudaSuccess) status = tl_cuda_fail(err, op, "copying the index checks' flag");
    }
    if (status == TL_OK) *flag = f->failed;
    pthread_mutex_unlock(&faults_lock);
    return status;
}

tl_status tl_cuda_raise_faults(int device) {
    if (device < 0 || device >= TL_CUDA_MAX_DEVICES) return TL_OK;
    pthread_mutex_lock(&faults_lock);
    device_faults *f = &faults[device];
    tl_status status = TL_OK;
    volatile tl_cuda_fault *seen = f->host;
    if (seen && seen->id != 0) {
        const uint32_t id = seen->id;
        const int64_t value = seen->value, position = seen->position;
        seen->id = 0; /* raised once; later checks may fail again */
        const pending_check *p = &f->pending[id % PENDING_CHECKS];
        if (p->id == id)
            status = tl_index_range_error(&p->range, p->shape, p->ndim, value, position);
        else
            status = tl_error(TL_ERR_INDEX,
                              "an index check on cuda:%d found %lld at position %lld out of range "
                              "(more than %d checks ago, so its op is no longer known)",
                              device, (long long)value, (long long)position, PENDING_CHECKS);
    }
    pthread_mutex_unlock(&faults_lock);
    return status;
}
