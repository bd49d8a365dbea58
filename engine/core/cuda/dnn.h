/* Internal: the engine's cuDNN handle per device (on the device's stream) and its errors. */
#ifndef TLUA_CUDA_DNN_H
#define TLUA_CUDA_DNN_H

#include <cudnn.h>

#include "core/cuda/cuda_runtime.h"
#include "tlua/dtype.h"

/* The cuDNN handle of device, bound to its stream (made on first use), and that stream. */
tl_status tl_cuda_dnn(int device, const char *op, cudnnHandle_t *handle, cudaStream_t *stream);
/* cuDNN's data type of dtype and the type its products accumulate in (float32 for the 16-bit
   types, double for float64). */
void tl_cudnn_types(tl_dtype dtype, cudnnDataType_t *data, cudnnDataType_t *compute);
/* An error for a failed cuDNN call: "op: cuDNN failed what: <cuDNN's message>". */
tl_status tl_cudnn_fail(cudnnStatus_t status, const char *op, const char *what);

#endif
