/* CUDA conv2d on cuDNN: the forward product and the two gradients, on the device's handle and
   stream, with the algorithm cuDNN's heuristics rank first among those whose workspace fits,
   remembered per problem. */
#include <pthread.h>
#include <string.h>

#include "core/cuda/dnn.h"
#include "core/storage.h"
#include "kernels/cuda/cuda_kernels.h"

#define OP_NAME "conv2d"
/* the most workspace an algorithm may ask for */
#define WORKSPACE_LIMIT ((size_t)1 << 30)
/* problems whose algorithm is remembered (a direct-mapped cache) */
#define CACHE_SLOTS 256

typedef enum { FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT } direction;

/* A problem: the direction, the device, the dtype, the input, weight and output shapes, the
   geometry and the math mode; and what was chosen for it. */
typedef struct problem {
    int direction, device, dtype, tf32;
    int64_t input[4], weight[4], output[4];
    tl_conv2d_options options;
} problem;

typedef struct cached {
    bool used;
    problem key;
    int algorithm;
    size_t workspace;
} cached;

static cached cache[CACHE_SLOTS];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t slot_of(const problem *p) {
    const unsigned char *bytes = (const unsigned char *)p;
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < sizeof *p; i++) h = (h ^ bytes[i]) * 1099511628211u;
    return (size_t)(h % CACHE_SLOTS);
}

static bool cache_find(const problem *p, int *algorithm, size_t *workspace) {
    bool found = false;
    pthread_mutex_lock(&cache_lock);
    const cached *c = &cache[slot_of(p)];
    if (c->used && memcmp(&c->key, p, sizeof *p) == 0) {
        *algorithm = c->algorithm, *workspace = c->workspace;
        found = true;
    }
    pthread_mutex_unlock(&cache_lock);
    return found;
}

static void cache_keep(const problem *p, int algorithm, size_t workspace) {
    pthread_mutex_lock(&cache_lock);
    cache[slot_of(p)] =
        (cached){.used = true, .key = *p, .algorithm = algorithm, .workspace = workspace};
    pthread_mutex_unlock(&cache_lock);
}

/* The descriptors of one problem, made and destroyed together. */
typedef struct descriptors {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
} descriptors;

static void destroy_descriptors(descriptors *d) {
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
}

/* cuDNN's data type and the type its products accumulate in */
static void dnn_types(tl_dtype dtype, cudnnDataType_t *data, cudnnDataType_t *compute) {
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

static bool fits_int(const int64_t *shape) {
    for (int d = 0; d < 4; d++)
        if (shape[d] > INT32_MAX) return false;
    return true;
}

/* NCHW descriptors of the problem; float32 products in full precision unless TF32 is allowed
   (tl_set_matmul_precision("high")), 16-bit ones on tensor cores. */
static tl_status make_descriptors(const problem *p, descriptors *d) {
    cudnnDataType_t data, compute;
    dnn_types((tl_dtype)p->dtype, &data, &compute);
    const tl_conv2d_options *o = &p->options;
    cudnnMathType_t math = p->dtype == TL_F32 && !p->tf32 ? CUDNN_FMA_MATH
                           : p->dtype == TL_F64           ? CUDNN_DEFAULT_MATH
                                                          : CUDNN_TENSOR_OP_MATH;
    cudnnStatus_t s = cudnnCreateTensorDescriptor(&d->x);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&d->y);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateFilterDescriptor(&d->w);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateConvolutionDescriptor(&d->conv);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, data, (int)p->input[0],
                                       (int)p->input[1], (int)p->input[2], (int)p->input[3]);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, data, (int)p->output[0],
                                       (int)p->output[1], (int)p->output[2], (int)p->output[3]);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetFilter4dDescriptor(d->w, data, CUDNN_TENSOR_NCHW, (int)p->weight[0],
                                       (int)p->weight[1], (int)p->weight[2], (int)p->weight[3]);
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnSetConvolution2dDescriptor(
            d->conv, (int)o->padding[0], (int)o->padding[1], (int)o->stride[0], (int)o->stride[1],
            (int)o->dilation[0], (int)o->dilation[1], CUDNN_CROSS_CORRELATION, compute);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionGroupCount(d->conv, (int)o->groups);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetConvolutionMathType(d->conv, math);
    return s == CUDNN_STATUS_SUCCESS ? TL_OK : tl_cudnn_fail(s, OP_NAME, "describing the problem");
}

/* The first algorithm of cuDNN's ranking that succeeds and whose workspace fits. */
static tl_status choose(cudnnHandle_t handle, const problem *p, const descriptors *d,
                        int *algorithm, size_t *workspace) {
    if (cache_find(p, algorithm, workspace)) return TL_OK;
    enum { ASKED = 8 };
    int returned = 0;
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    cudnnStatus_t statuses[ASKED];
    int algorithms[ASKED];
    size_t memory[ASKED];
    if (p->direction == FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t perf[ASKED];
        s = cudnnGetConvolutionForwardAlgorithm_v7(handle, d->x, d->w, d->conv, d->y, ASKED,
                                                   &returned, perf);
        for (int i = 0; i < returned; i++)
            statuses[i] = perf[i].status, algorithms[i] = perf[i].algo, memory[i] = perf[i].memory;
    } else if (p->direction == BACKWARD_INPUT) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[ASKED];
        s = cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d->w, d->y, d->conv, d->x, ASKED,
                                                        &returned, perf);
        for (int i = 0; i < returned; i++)
            statuses[i] = perf[i].status, algorithms[i] = perf[i].algo, memory[i] = perf[i].memory;
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[ASKED];
        s = cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d->x, d->y, d->conv, d->w, ASKED,
                                                          &returned, perf);
        for (int i = 0; i < returned; i++)
            statuses[i] = perf[i].status, algorithms[i] = perf[i].algo, memory[i] = perf[i].memory;
    }
    if (s != CUDNN_STATUS_SUCCESS) return tl_cudnn_fail(s, OP_NAME, "choosing an algorithm");
    for (int i = 0; i < returned; i++) {
        if (statuses[i] != CUDNN_STATUS_SUCCESS || memory[i] > WORKSPACE_LIMIT) continue;
        *algorithm = algorithms[i], *workspace = memory[i];
        cache_keep(p, *algorithm, *workspace);
        return TL_OK;
    }
    return tl_error(TL_ERR_RUNTIME,
                    "%s: cuDNN has no algorithm for this convolution within a workspace of "
                    "%zu bytes",
                    OP_NAME, WORKSPACE_LIMIT);
}

/* Runs the problem of direction: out = conv(a, b) or one of its gradients (kernel.h). */
static tl_status run(int dir, tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                     const tl_conv2d_options *options) {
    if (tl_numel(out) == 0) return TL_OK;
    const tl_tensor *input = dir == FORWARD ? a : dir == BACKWARD_INPUT ? out : b;
    const tl_tensor *weight = dir == FORWARD ? b : dir == BACKWARD_INPUT ? b : out;
    const tl_tensor *output = dir == FORWARD ? out : a;
    problem p;
    memset(&p, 0, sizeof p); /* the cache compares bytes: padding too */
    p.direction = dir;
    p.device = tl_tensor_device(out).index;
    p.dtype = out->dtype;
    p.tf32 = out->dtype == TL_F32 && tl_cuda_matmul_allow_tf32();
    memcpy(p.input, input->shape, sizeof p.input);
    memcpy(p.weight, weight->shape, sizeof p.weight);
    memcpy(p.output, output->shape, sizeof p.output);
    p.options = *options;
    if (!fits_int(p.input) || !fits_int(p.weight) || !fits_int(p.output))
        return tl_error(TL_ERR_SHAPE, "%s: a dim of more than 2^31 - 1 elements", OP_NAME);
    if (tl_numel(input) == 0 || tl_numel(output) == 0) /* nothing to sum: zeros */
        return tl_memset_zero(tl_tensor_device(out), tl_data(out),
                              (size_t)tl_numel(out) * tl_dtype_size(out->dtype));
    cudnnHandle_t handle;
    cudaStream_t stream;
    TL_TRY(tl_cuda_dnn(p.device, OP_NAME, &handle, &stream));
    descriptors d = {0};
    tl_status status = make_descriptors(&p, &d);
    int algorithm = 0;
    size_t workspace_size = 0;
    void *workspace = NULL;
    if (status == TL_OK) status = choose(handle, &p, &d, &algorithm, &workspace_size);
    if (status == TL_OK && workspace_size)
        status = tl_cuda_malloc(p.device, workspace_size, OP_NAME, &workspace);
    if (status == TL_OK) {
        const double one64 = 1.0, zero64 = 0.0;
        const float one32 = 1.0f, zero32 = 0.0f;
        const void *one = out->dtype == TL_F64 ? (const void *)&one64 : (const void *)&one32;
        const void *zero = out->dtype == TL_F64 ? (const void *)&zero64 : (const void *)&zero32;
        cudnnStatus_t s;
        if (dir == FORWARD)
            s = cudnnConvolutionForward(handle, one, d.x, tl_data(a), d.w, tl_data(b), d.conv,
                                        (cudnnConvolutionFwdAlgo_t)algorithm, workspace,
                                        workspace_size, zero, d.y, tl_data(out));
        else if (dir == BACKWARD_INPUT)
            s = cudnnConvolutionBackwardData(handle, one, d.w, tl_data(b), d.y, tl_data(a), d.conv,
                                             (cudnnConvolutionBwdDataAlgo_t)algorithm, workspace,
                                             workspace_size, zero, d.x, tl_data(out));
        else
            s = cudnnConvolutionBackwardFilter(handle, one, d.x, tl_data(b), d.y, tl_data(a),
                                               d.conv, (cudnnConvolutionBwdFilterAlgo_t)algorithm,
                                               workspace, workspace_size, zero, d.w, tl_data(out));
        if (s != CUDNN_STATUS_SUCCESS) status = tl_cudnn_fail(s, OP_NAME, "running");
    }
    if (workspace) tl_cuda_free(p.device, workspace);
    destroy_descriptors(&d);
    return status;
}

static tl_status conv_forward(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                              const tl_conv2d_options *options) {
    return run(FORWARD, out, a, b, options);
}

static tl_status conv_backward_input(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                                     const tl_conv2d_options *options) {
    return run(BACKWARD_INPUT, out, a, b, options);
}

static tl_status conv_backward_weight(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                                      const tl_conv2d_options *options) {
    return run(BACKWARD_WEIGHT, out, a, b, options);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(conv2d_dnn, TL_DTYPES_FLOATING, conv, conv_forward),
    TL_KERNEL(conv2d_dnn_backward_input, TL_DTYPES_FLOATING, conv, conv_backward_input),
    TL_KERNEL(conv2d_dnn_backward_weight, TL_DTYPES_FLOATING, conv, conv_backward_weight),
};

TL_KERNEL_TABLE(tl_cuda_conv_dnn_table, TL_DEVICE_CUDA, entries);
