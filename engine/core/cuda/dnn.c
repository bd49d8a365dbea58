/* The engine's cuDNN handle per device, bound to the device's stream, made on first use. */
#include <pthread.h>
#include <stdatomic.h>

#include "core/cuda/dnn.h"

static cudnnHandle_t handles[TL_CUDA_MAX_DEVICES];
static atomic_bool ready[TL_CUDA_MAX_DEVICES];
static pthread_mutex_t handle_lock = PTHREAD_MUTEX_INITIALIZER;

void tl_cudnn_types(tl_dtype dtype, cudnnDataType_t *data, cudnnDataType_t *compute) {
    switch (dtype) {
    case TL_F64:
        *data = CUDNN_DATA_DOUBLE, *compute = CUDNN_DATA_DOUBLE;
        return;
    case TL_F16:
        *data = CUDNN_DATA_HALF, *compute = CUDNN_DATA_FLOAT;
        return;
    case TL_BF16:
        *data = CUDNN_DATA_BFLOAT16, *compute = CUDNN_DATA_FLOAT;
        return;
    default:
        *data = CUDNN_DATA_FLOAT, *compute = CUDNN_DATA_FLOAT;
    }
}

tl_status tl_cudnn_fail(cudnnStatus_t status, const char *op, const char *what) {
    return tl_error(TL_ERR_RUNTIME, "%s: cuDNN failed %s: %s", op, what,
                    cudnnGetErrorString(status));
}

tl_status tl_cuda_dnn(int device, const char *op, cudnnHandle_t *handle, cudaStream_t *stream) {
    TL_TRY(tl_cuda_stream(device, op, stream));
    if (!atomic_load_explicit(&ready[device], memory_order_acquire)) {
        tl_status status = TL_OK;
        pthread_mutex_lock(&handle_lock);
        if (!atomic_load_explicit(&ready[device], memory_order_relaxed)) {
            cudnnHandle_t h = NULL;
            cudnnStatus_t s = cudnnCreate(&h);
            if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetStream(h, *stream);
            if (s == CUDNN_STATUS_SUCCESS) {
                handles[device] = h;
                atomic_store_explicit(&ready[device], true, memory_order_release);
            } else {
                if (h) cudnnDestroy(h);
                status = tl_cudnn_fail(s, op, "creating the device's handle");
            }
        }
        pthread_mutex_unlock(&handle_lock);
        TL_TRY(status);
    }
    *handle = handles[device];
    return TL_OK;
}
