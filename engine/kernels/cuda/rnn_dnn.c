/* CUDA multi-layer LSTM / GRU / RNN on cuDNN (family RNN_DNN, kernels/kernel.h's
   tl_rnn_dnn_kernel): the weight space's layout, the forward and the two backward passes
   (data, then weights), on the device's handle and stream; descriptors made per call. */
#include <stdlib.h>
#include <string.h>

#include "core/cuda/dnn.h"
#include "core/storage.h"
#include "kernels/cuda/cuda_kernels.h"

#define OP_NAME "rnn_dnn"

/* The descriptors of one problem, made and destroyed together. */
typedef struct descriptors {
    cudnnDropoutDescriptor_t dropout;
    cudnnRNNDescriptor_t rnn;
    cudnnRNNDataDescriptor_t x, y;
    cudnnTensorDescriptor_t h, c;
} descriptors;

static void destroy_descriptors(descriptors *d) {
    if (d->x) cudnnDestroyRNNDataDescriptor(d->x);
    if (d->y) cudnnDestroyRNNDataDescriptor(d->y);
    if (d->h) cudnnDestroyTensorDescriptor(d->h);
    if (d->c) cudnnDestroyTensorDescriptor(d->c);
    if (d->rnn) cudnnDestroyRNNDescriptor(d->rnn);
    if (d->dropout) cudnnDestroyDropoutDescriptor(d->dropout);
}

static int gates_of(int mode) {
    return mode == 0 ? 4 : mode == 1 ? 3 : 1;
}

static int dirs_of(const tl_rnn_dnn_config *c) {
    return c->bidirectional ? 2 : 1;
}

/* cuDNN's data type, the precision it computes in and the math mode: float32 products in full
   precision unless TF32 is allowed (tl_set_matmul_precision("high")), float16 on tensor cores */
static void dnn_types(tl_dtype dtype, cudnnDataType_t *data, cudnnDataType_t *prec,
                      cudnnMathType_t *math) {
    tl_cudnn_types(dtype, data, prec);
    *math = dtype == TL_F64                       ? CUDNN_DEFAULT_MATH
            : dtype == TL_F16 || dtype == TL_BF16 ? CUDNN_TENSOR_OP_MATH
            : tl_cuda_matmul_allow_tf32()         ? CUDNN_DEFAULT_MATH
                                                  : CUDNN_FMA_MATH;
}

static bool fits_int(const tl_rnn_dnn_config *c) {
    const int64_t sizes[6] = {c->input_size, c->hidden_size, c->layers * 2,
                              c->steps,      c->batch,       c->hidden_size * 2};
    for (int i = 0; i < 6; i++)
        if (sizes[i] > INT32_MAX) return false;
    return true;
}

/* The RNN descriptor and, for a sequence (steps > 0), the x, y, h and c descriptors. */
static tl_status make_descriptors(cudnnHandle_t handle, const tl_rnn_dnn_config *c, tl_dtype dtype,
                                  descriptors *d) {
    if (!fits_int(c)) return tl_error(TL_ERR_SHAPE, "%s: a size of 2^31 or more", OP_NAME);
    cudnnDataType_t data, prec;
    cudnnMathType_t math;
    dnn_types(dtype, &data, &prec, &math);
    static const cudnnRNNMode_t cells[4] = {CUDNN_LSTM, CUDNN_GRU, CUDNN_RNN_TANH, CUDNN_RNN_RELU};
    const int dirs = dirs_of(c), H = (int)c->hidden_size, N = (int)c->batch;
    cudnnStatus_t s = cudnnCreateDropoutDescriptor(&d->dropout);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetDropoutDescriptor(d->dropout, handle, 0.0f, NULL, 0, 0);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateRNNDescriptor(&d->rnn);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetRNNDescriptor_v8(
            d->rnn, CUDNN_RNN_ALGO_STANDARD, cells[c->mode & 3], CUDNN_RNN_DOUBLE_BIAS,
            dirs == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, data, prec,
            math, (int32_t)c->input_size, H, H, (int32_t)c->layers, d->dropout,
            CUDNN_RNN_PADDED_IO_DISABLED);
    if (s != CUDNN_STATUS_SUCCESS) return tl_cudnn_fail(s, OP_NAME, "describing the RNN");
    if (c->steps <= 0 || c->batch <= 0) return TL_OK;
    int *lengths = malloc(sizeof(int) * (size_t)N);
    if (!lengths) return tl_error(TL_ERR_MEMORY, "%s: out of memory", OP_NAME);
    for (int i = 0; i < N; i++) lengths[i] = (int)c->steps;
    s = cudnnCreateRNNDataDescriptor(&d->x);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetRNNDataDescriptor(d->x, data, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                      (int)c->steps, N, (int)c->input_size, lengths, NULL);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateRNNDataDescriptor(&d->y);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetRNNDataDescriptor(d->y, data, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                      (int)c->steps, N, dirs * H, lengths, NULL);
    free(lengths);
    const int dims[3] = {(int)c->layers * dirs, N, H}, strides[3] = {N * H, H, 1};
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&d->h);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetTensorNdDescriptor(d->h, data, 3, dims, strides);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&d->c);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetTensorNdDescriptor(d->c, data, 3, dims, strides);
    return s == CUDNN_STATUS_SUCCESS ? TL_OK : tl_cudnn_fail(s, OP_NAME, "describing the sequence");
}

static const void *data_of(const tl_tensor *t) {
    return t ? tl_data(t) : NULL;
}

/* The handle and descriptors of a call on ref's device, and the weight space's and the training
   temp spaces' sizes in bytes. */
typedef struct call {
    int device;
    cudnnHandle_t handle;
    descriptors d;
    size_t weight_bytes, work_bytes, reserve_bytes;
    void *work;
} call;

static tl_status begin(call *k, const tl_tensor *ref, const tl_rnn_dnn_config *c, bool training) {
    memset(k, 0, sizeof *k);
    k->device = tl_tensor_device(ref).index;
    cudaStream_t stream;
    TL_TRY(tl_cuda_dnn(k->device, OP_NAME, &k->handle, &stream));
    TL_TRY(make_descriptors(k->handle, c, ref->dtype, &k->d));
    cudnnStatus_t s = cudnnGetRNNWeightSpaceSize(k->handle, k->d.rnn, &k->weight_bytes);
    if (s == CUDNN_STATUS_SUCCESS && k->d.x)
        s = cudnnGetRNNTempSpaceSizes(k->handle, k->d.rnn,
                                      training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
                                      k->d.x, &k->work_bytes, &k->reserve_bytes);
    if (s != CUDNN_STATUS_SUCCESS) return tl_cudnn_fail(s, OP_NAME, "sizing its spaces");
    return TL_OK;
}

static tl_status workspace(call *k) {
    if (!k->work_bytes) return TL_OK;
    return tl_cuda_malloc(k->device, k->work_bytes, OP_NAME, &k->work);
}

static tl_status end(call *k, tl_status status) {
    if (k->work) tl_cuda_free(k->device, k->work);
    destroy_descriptors(&k->d);
    return status;
}

/* The tensor's bytes (the weight space and the reserve are checked against cuDNN's sizes). */
static size_t bytes_of(const tl_tensor *t) {
    return (size_t)tl_numel(t) * tl_dtype_size(t->dtype);
}

/* out[0] int64 [2]: the weight space's elements, the reserve's bytes; out[1] (NULL: the sizes
   alone) int64 [layers * dirs, 2 * gates, 2]: offsets (elements; -1 for none) of each matrix and
   bias. in[0]:
   any tensor of the dtype on the device. */
static tl_status rnn_layout(tl_tensor *const *out, const tl_tensor *const *in,
                            const tl_rnn_dnn_config *c) {
    call k;
    tl_status status = begin(&k, in[0], c, true);
    const size_t esize = tl_dtype_size(in[0]->dtype);
    int64_t *sizes = tl_data(out[0]), *offsets = out[1] ? tl_data(out[1]) : NULL;
    void *base = NULL;
    cudnnTensorDescriptor_t m = NULL, b = NULL;
    if (status == TL_OK)
        sizes[0] = (int64_t)(k.weight_bytes / esize), sizes[1] = (int64_t)k.reserve_bytes;
    if (status != TL_OK || !out[1]) return end(&k, status); /* the sizes alone */
    status = tl_cuda_malloc(k.device, k.weight_bytes ? k.weight_bytes : 1, OP_NAME, &base);
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (status == TL_OK) s = cudnnCreateTensorDescriptor(&m);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&b);
    const int pseudo = (int)c->layers * dirs_of(c), lin = 2 * gates_of(c->mode);
    for (int p = 0; status == TL_OK && s == CUDNN_STATUS_SUCCESS && p < pseudo; p++)
        for (int l = 0; s == CUDNN_STATUS_SUCCESS && l < lin; l++) {
            void *maddr = NULL, *baddr = NULL;
            s = cudnnGetRNNWeightParams(k.handle, k.d.rnn, p, k.weight_bytes, base, l, m, &maddr, b,
                                        &baddr);
            int64_t *o = offsets + ((int64_t)p * lin + l) * 2;
            o[0] = maddr ? (int64_t)(((char *)maddr - (char *)base) / esize) : -1;
            o[1] = baddr ? (int64_t)(((char *)baddr - (char *)base) / esize) : -1;
        }
    if (status == TL_OK && s != CUDNN_STATUS_SUCCESS)
        status = tl_cudnn_fail(s, OP_NAME, "locating the weights");
    if (m) cudnnDestroyTensorDescriptor(m);
    if (b) cudnnDestroyTensorDescriptor(b);
    if (base) tl_cuda_free(k.device, base);
    return end(&k, status);
}

/* out: y, hy, cy (LSTM), reserve (training); in: x, hx, cx (LSTM), weight, seq_lengths */
static tl_status rnn_forward(tl_tensor *const *out, const tl_tensor *const *in,
                             const tl_rnn_dnn_config *c) {
    call k;
    tl_status status = begin(&k, in[0], c, c->training);
    if (status == TL_OK && bytes_of(in[3]) < k.weight_bytes)
        status = tl_error(TL_ERR_SHAPE, "%s: the weight space has %zu bytes, cuDNN wants %zu",
                          OP_NAME, bytes_of(in[3]), k.weight_bytes);
    if (status == TL_OK && c->training && (!out[3] || bytes_of(out[3]) < k.reserve_bytes))
        status = tl_error(TL_ERR_SHAPE, "%s: the reserve space is smaller than cuDNN wants (%zu)",
                          OP_NAME, k.reserve_bytes);
    if (status == TL_OK) status = workspace(&k);
    if (status == TL_OK) {
        cudnnStatus_t s = cudnnRNNForward(
            k.handle, k.d.rnn, c->training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
            (const int32_t *)tl_data(in[4]), k.d.x, tl_data(in[0]), k.d.y, tl_data(out[0]), k.d.h,
            tl_data(in[1]), tl_data(out[1]), k.d.c, data_of(in[2]), out[2] ? tl_data(out[2]) : NULL,
            k.weight_bytes, tl_data(in[3]), k.work_bytes, k.work, c->training ? k.reserve_bytes : 0,
            c->training ? tl_data(out[3]) : NULL);
        if (s != CUDNN_STATUS_SUCCESS) status = tl_cudnn_fail(s, OP_NAME, "running forward");
    }
    return end(&k, status);
}

/* out: dx, dhx, dcx (LSTM); in: y, dy, dhy, dcy (either may be NULL: zero), hx, cx, weight,
   reserve, seq_lengths */
static tl_status rnn_backward_data(tl_tensor *const *out, const tl_tensor *const *in,
                                   const tl_rnn_dnn_config *c) {
    call k;
    tl_status status = begin(&k, in[0], c, true);
    if (status == TL_OK && bytes_of(in[7]) < k.reserve_bytes)
        status = tl_error(TL_ERR_SHAPE, "%s: the reserve space is smaller than cuDNN wants (%zu)",
                          OP_NAME, k.reserve_bytes);
    if (status == TL_OK) status = workspace(&k);
    if (status == TL_OK) {
        cudnnStatus_t s = cudnnRNNBackwardData_v8(
            k.handle, k.d.rnn, (const int32_t *)tl_data(in[8]), k.d.y, tl_data(in[0]),
            tl_data(in[1]), k.d.x, tl_data(out[0]), k.d.h, tl_data(in[4]), data_of(in[2]),
            tl_data(out[1]), k.d.c, data_of(in[5]), data_of(in[3]), out[2] ? tl_data(out[2]) : NULL,
            k.weight_bytes, tl_data(in[6]), k.work_bytes, k.work, k.reserve_bytes, tl_data(in[7]));
        if (s != CUDNN_STATUS_SUCCESS) status = tl_cudnn_fail(s, OP_NAME, "running backward");
    }
    return end(&k, status);
}

/* out: dweight ("="); in: x, hx, y, weight, reserve, seq_lengths */
static tl_status rnn_backward_weight(tl_tensor *const *out, const tl_tensor *const *in,
                                     const tl_rnn_dnn_config *c) {
    call k;
    tl_status status = begin(&k, in[0], c, true);
    if (status == TL_OK)
        status = tl_memset_zero(tl_tensor_device(out[0]), tl_data(out[0]), bytes_of(out[0]));
    if (status == TL_OK) status = workspace(&k);
    if (status == TL_OK) {
        cudnnStatus_t s = cudnnRNNBackwardWeights_v8(
            k.handle, k.d.rnn, CUDNN_WGRAD_MODE_ADD, (const int32_t *)tl_data(in[5]), k.d.x,
            tl_data(in[0]), k.d.h, tl_data(in[1]), k.d.y, tl_data(in[2]), k.weight_bytes,
            tl_data(out[0]), k.work_bytes, k.work, k.reserve_bytes, tl_data(in[4]));
        if (s != CUDNN_STATUS_SUCCESS)
            status = tl_cudnn_fail(s, OP_NAME, "running the weights' backward");
    }
    return end(&k, status);
}

#define RNN_DNN_DTYPES (TL_DTYPES_F32 | TL_DTYPES_F64 | TL_DTYPES_F16)

static const tl_kernel_entry entries[] = {
    TL_KERNEL(rnn_dnn_layout, RNN_DNN_DTYPES, rnn_dnn, rnn_layout),
    TL_KERNEL(rnn_dnn, RNN_DNN_DTYPES, rnn_dnn, rnn_forward),
    TL_KERNEL(rnn_dnn_backward_data, RNN_DNN_DTYPES, rnn_dnn, rnn_backward_data),
    TL_KERNEL(rnn_dnn_backward_weight, RNN_DNN_DTYPES, rnn_dnn, rnn_backward_weight),
};

TL_KERNEL_TABLE(tl_cuda_rnn_dnn_table, TL_DEVICE_CUDA, entries);
