/* CUDA conv2d on cuDNN's graph (backend) API: the forward product and the two gradients, each an
   execution plan built once per problem and kept, so that a call binds its pointers and runs. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/dnn_plans.h"
#include "core/storage.h"
#include "kernels/cuda/cuda_kernels.h"

#define OP_NAME "conv2d"
/* the most workspace a plan may ask for */
#define WORKSPACE_LIMIT ((int64_t)1 << 30)
/* the most plans kept (past it, every plan goes and the cache fills again: a workload of ever
   new shapes keeps a bounded host memory) */
#define MOST_KEPT 4096

typedef enum { FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT } direction;
/* the tensors' ids in a plan: x (the input or its gradient), w, y (the output or its gradient) */
enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

/* A problem: the direction, the device, the dtype, the input, weight and output shapes, the
   geometry, the math mode and the alignment of the pointers the plan may assume. */
typedef struct problem {
    int direction, device, dtype, tf32, alignment;
    int64_t input[4], weight[4], output[4];
    tl_conv2d_options options;
} problem;

/* A kept plan: the descriptors it was built from live while it does (the plan refers to them). */
enum { PARTS = 7 };
typedef struct cached {
    tl_dnn_entry head;
    problem key;
    cudnnBackendDescriptor_t parts[PARTS];
    int64_t workspace;
} cached;

static tl_dnn_cache cache = {.key_offset = offsetof(cached, key),
                             .key_size = sizeof(problem),
                             .entry_size = sizeof(cached),
                             .most = MOST_KEPT};

/* An NCHW tensor of shape, contiguous, with its id and the alignment its pointer keeps. */
static cudnnStatus_t make_tensor(int64_t uid, cudnnDataType_t type, const int64_t shape[4],
                                 int64_t alignment, cudnnBackendDescriptor_t *out) {
    int64_t strides[4] = {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1};
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, out);
    tl_dnn_set(&s, *out, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    tl_dnn_set(&s, *out, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, shape);
    tl_dnn_set(&s, *out, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    tl_dnn_set(&s, *out, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    tl_dnn_set(&s, *out, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (!s) s = cudnnBackendFinalize(*out);
    return s;
}

/* The convolution's geometry: cross-correlation (no flip), in the compute type. */
static cudnnStatus_t make_convolution(const problem *p, cudnnDataType_t compute,
                                      cudnnBackendDescriptor_t *out) {
    const tl_conv2d_options *o = &p->options;
    int64_t dims = 2;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, out);
    tl_dnn_set(&s, *out, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    tl_dnn_set(&s, *out, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    tl_dnn_set(&s, *out, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    tl_dnn_set(&s, *out, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, o->dilation);
    tl_dnn_set(&s, *out, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, o->stride);
    tl_dnn_set(&s, *out, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, o->padding);
    tl_dnn_set(&s, *out, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, o->padding);
    if (!s) s = cudnnBackendFinalize(*out);
    return s;
}

/* The one operation of the problem's direction over x, w, y and the geometry: y = conv(x, w),
   dx = conv's input gradient of dy, or dw = its weight gradient; alpha 1, beta 0 (overwrite). */
static cudnnStatus_t make_operation(const problem *p, cudnnBackendDescriptor_t x,
                                    cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y,
                                    cudnnBackendDescriptor_t conv, cudnnBackendDescriptor_t *out) {
    static const cudnnBackendDescriptorType_t kinds[] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    /* attribute names per direction: x, w, y, the geometry, alpha, beta */
    static const cudnnBackendAttributeName_t names[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    const cudnnBackendAttributeName_t *n = names[p->direction];
    cudnnStatus_t s = cudnnBackendCreateDescriptor(kinds[p->direction], out);
    tl_dnn_set(&s, *out, n[0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    tl_dnn_set(&s, *out, n[1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
    tl_dnn_set(&s, *out, n[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    tl_dnn_set(&s, *out, n[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
    if (p->dtype == TL_F64) {
        double one = 1.0, zero = 0.0;
        tl_dnn_set(&s, *out, n[4], CUDNN_TYPE_DOUBLE, 1, &one);
        tl_dnn_set(&s, *out, n[5], CUDNN_TYPE_DOUBLE, 1, &zero);
    } else {
        float one = 1.0f, zero = 0.0f;
        tl_dnn_set(&s, *out, n[4], CUDNN_TYPE_FLOAT, 1, &one);
        tl_dnn_set(&s, *out, n[5], CUDNN_TYPE_FLOAT, 1, &zero);
    }
    if (!s) s = cudnnBackendFinalize(*out);
    return s;
}

/* Whether an engine config keeps the problem's precision: float32 products in float32 unless
   TF32 is allowed (tl_set_matmul_precision("high")), and for every dtype no reduction in a type
   narrower than float32. */
static bool keeps_precision(cudnnBackendDescriptor_t config, const void *problem_of) {
    const problem *p = problem_of;
    cudnnBackendDescriptor_t engine = NULL;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine)) return false;
    int64_t count = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    bool ok = cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &engine) == 0 &&
              cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                       CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                       &count, notes) == 0;
    for (int64_t i = 0; ok && i < count; i++) {
        if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) ok = false;
        if (p->dtype == TL_F32 && !p->tf32 &&
            (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE ||
             notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
            ok = false;
    }
    cudnnBackendDestroyDescriptor(engine);
    return ok;
}

/* Builds the problem's plan into c: its tensors, geometry, operation and graph, then the plans
   of cuDNN's heuristics (mode A, then the fallback engines) until one is taken. */
static tl_status build(cudnnHandle_t handle, const problem *p, cached *c) {
    c->head.parts = c->parts;
    c->head.parts_used = PARTS;
    cudnnDataType_t data, compute;
    tl_cudnn_types((tl_dtype)p->dtype, &data, &compute);
    cudnnBackendDescriptor_t *x = &c->parts[0], *w = &c->parts[1], *y = &c->parts[2],
                             *conv = &c->parts[3], *op = &c->parts[4], *graph = &c->parts[5],
                             *config = &c->parts[6];
    cudnnStatus_t s = make_tensor(UID_X, data, p->input, p->alignment, x);
    if (!s) s = make_tensor(UID_W, data, p->weight, p->alignment, w);
    if (!s) s = make_tensor(UID_Y, data, p->output, p->alignment, y);
    if (!s) s = make_convolution(p, compute, conv);
    if (!s) s = make_operation(p, *x, *w, *y, *conv, op);
    if (!s) s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, graph);
    tl_dnn_set(&s, *graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, op);
    tl_dnn_set(&s, *graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    if (!s) s = cudnnBackendFinalize(*graph);
    if (s) {
        tl_dnn_forget(&c->head);
        return tl_cudnn_fail(s, OP_NAME, "describing the problem");
    }
    cudnnStatus_t tried;
    s = tl_dnn_choose_plan(handle, *graph, keeps_precision, p, WORKSPACE_LIMIT, &c->head.plan,
                           config, &c->workspace, &tried);
    if (!c->head.plan) {
        tl_dnn_forget(&c->head);
        return s ? tl_cudnn_fail(s, OP_NAME, "choosing an engine")
                 : tl_error(TL_ERR_RUNTIME,
                            "%s: cuDNN has no engine for this convolution that keeps its "
                            "precision within a workspace of %lld bytes (%s)",
                            OP_NAME, (long long)WORKSPACE_LIMIT,
                            tried ? cudnnGetErrorString(tried) : "none ranked");
    }
    return TL_OK;
}

/* build as the cache calls it */
typedef struct build_args {
    cudnnHandle_t handle;
    const problem *p;
} build_args;

static tl_status build_entry(tl_dnn_entry *entry, void *arg) {
    const build_args *a = arg;
    return build(a->handle, a->p, (cached *)entry);
}

/* The largest power of two up to 16 that divides every pointer: what the plan may assume. */
static int alignment_of(const void *a, const void *b, const void *c) {
    uintptr_t bits = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | 16;
    return (int)(bits & (~bits + 1));
}

static bool fits_int(const int64_t *shape) {
    for (int d = 0; d < 4; d++)
        if (shape[d] > INT32_MAX) return false;
    return true;
}

/* Runs the plan with the pointers and the workspace bound (a variant pack made per call). */
static tl_status execute(cudnnHandle_t handle, const cached *c, void *x, void *w, void *y,
                         void *workspace) {
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *pointers[3] = {x, w, y};
    cudnnBackendDescriptor_t pack = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    tl_dnn_set(&s, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    tl_dnn_set(&s, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
    tl_dnn_set(&s, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    if (!s) s = cudnnBackendFinalize(pack);
    if (!s) s = cudnnBackendExecute(handle, c->head.plan, pack);
    tl_dnn_destroy(&pack);
    return s ? tl_cudnn_fail(s, OP_NAME, "running") : TL_OK;
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
    p.alignment = alignment_of(tl_data(input), tl_data(weight), tl_data(output));
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
    tl_dnn_lock();
    build_args args = {handle, &p};
    tl_dnn_entry *entry = NULL;
    tl_status status = tl_dnn_cache_get(&cache, &p, build_entry, &args, OP_NAME, &entry);
    const cached *c = (const cached *)entry;
    void *workspace = NULL;
    if (status == TL_OK && c->workspace)
        status = tl_cuda_malloc(p.device, (size_t)c->workspace, OP_NAME, &workspace);
    if (status == TL_OK)
        status = execute(handle, c, tl_data(input), tl_data(weight), tl_data(output), workspace);
    tl_dnn_unlock();
    if (workspace) tl_cuda_free(p.device, workspace);
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
