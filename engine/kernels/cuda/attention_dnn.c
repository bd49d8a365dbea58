/* CUDA scaled dot-product attention on cuDNN's fused flash-attention engines through its graph
   (backend) API: the forward and backward graphs, an execution plan built once per problem and
   kept, and the calls that bind their pointers and run; a problem cuDNN cannot run is declined. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/dnn_plans.h"
#include "kernels/cuda/attention_dnn.h"

/* the most workspace a plan may ask for (the backward's own scratch comes on top) */
#define WORKSPACE_LIMIT ((int64_t)1 << 30)
/* the most plans kept (past it, every plan goes) */
#define MOST_KEPT 512

typedef enum { FORWARD, BACKWARD } direction;

enum {
    Q = TL_ATTENTION_DNN_Q,
    K = TL_ATTENTION_DNN_K,
    V = TL_ATTENTION_DNN_V,
    OUT = TL_ATTENTION_DNN_OUT,
    GRAD_OUT = TL_ATTENTION_DNN_GRAD_OUT,
    GRAD_Q = TL_ATTENTION_DNN_GRAD_Q,
    GRAD_K = TL_ATTENTION_DNN_GRAD_K,
    GRAD_V = TL_ATTENTION_DNN_GRAD_V,
    OPERANDS = TL_ATTENTION_DNN_OPERANDS
};

/* The tensors' ids in a plan: operand i is i + 1; then lse, the by-value scalars, the backward's
   scratch (rowsum(grad_out * out) and grad_q accumulated in float32), and the virtual ones. */
enum {
    UID_LSE = OPERANDS + 1,
    UID_SCALE,
    UID_NEG_INF,
    UID_ONE,
    UID_ROW_SUM,
    UID_DQ_ACCUM,
    UID_VIRTUAL = 100
};
/* the by-value scalars' slots in a plan */
enum { SCALAR_SCALE, SCALAR_NEG_INF, SCALAR_ONE, SCALARS };

/* A problem: direction, device, dtype, mask, determinism (backward), sizes, the operands' strides
   (0 for an operand the direction does not use) and the scale as float32 (the graph multiplies in
   float32). */
typedef struct problem {
    int direction, device, dtype, causal, deterministic;
    int64_t B, H, T, S, D;
    int64_t stride[OPERANDS][3];
    float scale;
} problem;

/* The descriptors a plan was built from, kept while it lives (the plan refers to them). */
enum { MOST_PARTS = 224, MOST_OPS = 40 };
typedef struct cached {
    tl_dnn_entry head; /* the plan, and parts[0 .. head.parts_used) */
    problem key;
    cudnnBackendDescriptor_t parts[MOST_PARTS];
    int64_t workspace; /* cuDNN's, in bytes */
    int64_t scratch;   /* the backward's row sums and grad_q accumulator, in bytes */
    float scalars[SCALARS];
    char declined[160]; /* "" for a plan, else why cuDNN cannot run the problem */
} cached;

static tl_dnn_cache cache = {.key_offset = offsetof(cached, key),
                             .key_size = sizeof(problem),
                             .entry_size = sizeof(cached),
                             .most = MOST_KEPT};
static _Thread_local char why[160];

const char *tl_attention_dnn_declined_why(void) {
    return why;
}

/* ---- the graph builder ----------------------------------------------------------------------
   Every descriptor goes into the plan's parts; the first failing step keeps its status and makes
   every later step a no-op returning NULL, so a graph is written as straight-line code. */
typedef struct builder {
    cached *c;
    cudnnStatus_t status;
    int64_t next_uid;
    cudnnDataType_t io; /* the operands' type: bf16 or f16 */
    cudnnBackendDescriptor_t ops[MOST_OPS];
    int n_ops;
} builder;

/* A 4-d tensor's dims and strides (elements). */
typedef struct layout {
    int64_t dim[4], stride[4];
} layout;

enum { REAL, VIRTUAL, BY_VALUE };

static cudnnBackendDescriptor_t part(builder *g, cudnnBackendDescriptorType_t type) {
    if (g->status) return NULL;
    if (g->c->head.parts_used == MOST_PARTS) {
        g->status = CUDNN_STATUS_INTERNAL_ERROR; /* a graph larger than this file plans for */
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    g->status = cudnnBackendCreateDescriptor(type, &d);
    if (!g->status) g->c->parts[g->c->head.parts_used++] = d;
    return g->status ? NULL : d;
}

static void finalize(builder *g, cudnnBackendDescriptor_t d) {
    if (!g->status) g->status = cudnnBackendFinalize(d);
}

/* A tensor of type and layout with its id: real (a pointer of the variant pack, 16-byte
   aligned), virtual (inside the fused kernel only) or by value (a host scalar). */
static cudnnBackendDescriptor_t tensor(builder *g, int64_t uid, cudnnDataType_t type,
                                       const layout *l, int kind) {
    cudnnBackendDescriptor_t t = part(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t alignment = 16;
    bool yes = true;
    tl_dnn_set(&g->status, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    tl_dnn_set(&g->status, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, l->dim);
    tl_dnn_set(&g->status, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, l->stride);
    tl_dnn_set(&g->status, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    tl_dnn_set(&g->status, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (kind == VIRTUAL)
        tl_dnn_set(&g->status, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    if (kind == BY_VALUE)
        tl_dnn_set(&g->status, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    finalize(g, t);
    return g->status ? NULL : t;
}

static cudnnBackendDescriptor_t virt(builder *g, cudnnDataType_t type, const layout *l) {
    return tensor(g, g->next_uid++, type, l, VIRTUAL);
}

/* Finalizes op and appends it to the graph's operations. */
static void add_op(builder *g, cudnnBackendDescriptor_t op) {
    finalize(g, op);
    if (g->status) return;
    if (g->n_ops == MOST_OPS) {
        g->status = CUDNN_STATUS_INTERNAL_ERROR;
        return;
    }
    g->ops[g->n_ops++] = op;
}

/* y = mode(x, b, t) elementwise (b and t NULL where the mode takes fewer inputs; a [1, 1, 1, 1]
   or [B, H, T, 1] input broadcasts), computed in `compute`; axis >= 0 for GEN_INDEX. */
static cudnnBackendDescriptor_t pointwise(builder *g, cudnnPointwiseMode_t mode,
                                          cudnnDataType_t compute, int64_t axis,
                                          cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                          cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t desc = part(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    tl_dnn_set(&g->status, desc, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    tl_dnn_set(&g->status, desc, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    if (axis >= 0)
        tl_dnn_set(&g->status, desc, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(g, desc);
    cudnnBackendDescriptor_t op = part(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    float one = 1.0f;
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               1, &x);
    if (b)
        tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t)
        tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               1, &y);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    add_op(g, op);
    return g->status ? NULL : y;
}

/* The float32 pointwise op of one or two inputs. */
static cudnnBackendDescriptor_t pw(builder *g, cudnnPointwiseMode_t mode,
                                   cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                   cudnnBackendDescriptor_t y) {
    return pointwise(g, mode, CUDNN_DATA_FLOAT, -1, x, b, NULL, y);
}

/* y = the max or sum of x over the dims where y has size 1 (the keys), in float32. */
static cudnnBackendDescriptor_t reduction(builder *g, cudnnReduceTensorOp_t how,
                                          cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t desc = part(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    tl_dnn_set(&g->status, desc, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    tl_dnn_set(&g->status, desc, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
               1, &how);
    finalize(g, desc);
    cudnnBackendDescriptor_t op = part(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               1, &desc);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               1, &x);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               1, &y);
    add_op(g, op);
    return g->status ? NULL : y;
}

/* c = a b per (b, h): a [.., m, k], b [.., k, n], c [.., m, n], accumulated in float32. */
static cudnnBackendDescriptor_t matmul(builder *g, cudnnBackendDescriptor_t a,
                                       cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t desc = part(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    tl_dnn_set(&g->status, desc, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    finalize(g, desc);
    cudnnBackendDescriptor_t op = part(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &a);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &b);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &c);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &desc);
    add_op(g, op);
    return g->status ? NULL : c;
}

/* y = x seen through y's dims and strides (a transpose: no data moves). */
static cudnnBackendDescriptor_t reshape(builder *g, cudnnBackendDescriptor_t x,
                                        cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = part(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &x);
    tl_dnn_set(&g->status, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &y);
    add_op(g, op);
    return g->status ? NULL : y;
}

/* ---- the attention graphs --------------------------------------------------------------- */

/* [B, H, rows, cols] packed in that order. */
static layout dense(const problem *p, int64_t rows, int64_t cols) {
    layout l = {{p->B, p->H, rows, cols}, {p->H * rows * cols, rows * cols, cols, 1}};
    return l;
}

/* Operand `which` [B, H, rows, D] with its strides. */
static layout operand(const problem *p, int which) {
    bool query = which == Q || which == OUT || which == GRAD_OUT || which == GRAD_Q;
    const int64_t *s = p->stride[which];
    layout l = {{p->B, p->H, query ? p->T : p->S, p->D}, {s[0], s[1], s[2], 1}};
    return l;
}

/* The same elements seen with the last two dims swapped (k^T, v^T). */
static layout transposed(layout l) {
    int64_t d = l.dim[2], s = l.stride[2];
    l.dim[2] = l.dim[3], l.stride[2] = l.stride[3];
    l.dim[3] = d, l.stride[3] = s;
    return l;
}

static cudnnBackendDescriptor_t real(builder *g, const problem *p, int which, bool transpose) {
    layout l = operand(p, which);
    if (transpose) l = transposed(l);
    return tensor(g, which + 1, g->io, &l, REAL);
}

/* s where the query may see the key, -inf elsewhere: GEN_INDEX gives each score its row i and
   column j, and the select keeps s where i >= j (PyTorch's top-left causal mask). */
static cudnnBackendDescriptor_t causal_mask(builder *g, const layout *scores,
                                            cudnnBackendDescriptor_t s,
                                            cudnnBackendDescriptor_t neg_inf) {
    cudnnBackendDescriptor_t i = pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, s,
                                           NULL, NULL, virt(g, CUDNN_DATA_INT32, scores));
    cudnnBackendDescriptor_t j = pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, s,
                                           NULL, NULL, virt(g, CUDNN_DATA_INT32, scores));
    cudnnBackendDescriptor_t seen = pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, i,
                                              j, NULL, virt(g, CUDNN_DATA_BOOLEAN, scores));
    return pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, s, neg_inf, seen,
                     virt(g, CUDNN_DATA_FLOAT, scores));
}

/* The forward, as cuDNN's SDPA engines recognise it: s = scale (q k^T), masked; m = rowmax(s),
   e = exp(s - m), l = rowsum(e); lse = m + log(l) (the "Stats" output); p = e / l rounded to the
   operands' type; out = p v. */
static void forward_graph(builder *g, const problem *p) {
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    layout scores = dense(p, p->T, p->S), rows = dense(p, p->T, 1),
           scalar = {{1, 1, 1, 1}, {1, 1, 1, 1}};
    cudnnBackendDescriptor_t q = real(g, p, Q, false), kt = real(g, p, K, true),
                             v = real(g, p, V, false), out = real(g, p, OUT, false),
                             lse = tensor(g, UID_LSE, F, &rows, REAL),
                             scale = tensor(g, UID_SCALE, F, &scalar, BY_VALUE);
    cudnnBackendDescriptor_t s = matmul(g, q, kt, virt(g, F, &scores));
    s = pw(g, CUDNN_POINTWISE_MUL, s, scale, virt(g, F, &scores));
    if (p->causal) s = causal_mask(g, &scores, s, tensor(g, UID_NEG_INF, F, &scalar, BY_VALUE));
    cudnnBackendDescriptor_t m = reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, virt(g, F, &rows));
    cudnnBackendDescriptor_t e = pw(g, CUDNN_POINTWISE_SUB, s, m, virt(g, F, &scores));
    e = pw(g, CUDNN_POINTWISE_EXP, e, NULL, virt(g, F, &scores));
    cudnnBackendDescriptor_t l = reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, virt(g, F, &rows));
    pw(g, CUDNN_POINTWISE_ADD, m, pw(g, CUDNN_POINTWISE_LOG, l, NULL, virt(g, F, &rows)), lse);
    cudnnBackendDescriptor_t probs = pw(g, CUDNN_POINTWISE_DIV, e, l, virt(g, g->io, &scores));
    matmul(g, probs, v, out);
}

/* The backward from the saved lse: p = exp(scale (q k^T) - lse), masked (so the forward's
   softmax is rebuilt without its row passes); grad_v = p^T grad_out; dp = grad_out v^T;
   ds = p (dp - delta) scale with delta = rowsum(grad_out * out) (the softmax gradient:
   sum_j p_ij dp_ij = grad_out_i . out_i); grad_k = ds^T q; grad_q = ds k, accumulated in float32
   scratch then rounded (cuDNN adds each key block's part atomically), or when deterministic
   written by the product itself (cuDNN then takes its engine that sums them in order). delta
   and the accumulator are real tensors in the workspace. */
static void backward_graph(builder *g, const problem *p) {
    const cudnnDataType_t F = CUDNN_DATA_FLOAT;
    layout scores = dense(p, p->T, p->S), rows = dense(p, p->T, 1),
           scalar = {{1, 1, 1, 1}, {1, 1, 1, 1}};
    /* the transposed scores: [B, H, S, T] over the same elements */
    layout scores_t = {{p->B, p->H, p->S, p->T}, {p->H * p->T * p->S, p->T * p->S, 1, p->S}};
    layout products = dense(p, p->T, p->D);
    products.stride[2] = p->H * p->D; /* grad_out * out: virtual, laid out as cuDNN's frontend */
    layout accum = dense(p, p->T, p->D);
    layout k_layout = operand(p, K);
    cudnnBackendDescriptor_t q = real(g, p, Q, false), kt = real(g, p, K, true),
                             vt = real(g, p, V, true), out = real(g, p, OUT, false),
                             dout = real(g, p, GRAD_OUT, false), dq = real(g, p, GRAD_Q, false),
                             dk = real(g, p, GRAD_K, false), dv = real(g, p, GRAD_V, false),
                             lse = tensor(g, UID_LSE, F, &rows, REAL),
                             scale = tensor(g, UID_SCALE, F, &scalar, BY_VALUE),
                             one = tensor(g, UID_ONE, F, &scalar, BY_VALUE),
                             delta = tensor(g, UID_ROW_SUM, F, &rows, REAL);
    /* delta = rowsum(grad_out * out) */
    cudnnBackendDescriptor_t t = pw(g, CUDNN_POINTWISE_MUL, dout, out, virt(g, F, &products));
    t = reduction(g, CUDNN_REDUCE_TENSOR_ADD, t, virt(g, F, &rows));
    pw(g, CUDNN_POINTWISE_MUL, t, one, delta);
    /* p = exp(scale s - lse), masked */
    cudnnBackendDescriptor_t s = matmul(g, q, kt, virt(g, F, &scores));
    s = pw(g, CUDNN_POINTWISE_MUL, s, scale, virt(g, F, &scores));
    s = pw(g, CUDNN_POINTWISE_SUB, s, lse, virt(g, F, &scores));
    if (p->causal) s = causal_mask(g, &scores, s, tensor(g, UID_NEG_INF, F, &scalar, BY_VALUE));
    cudnnBackendDescriptor_t probs = pw(g, CUDNN_POINTWISE_EXP, s, NULL, virt(g, F, &scores));
    /* grad_v = p^T grad_out */
    matmul(g, reshape(g, probs, virt(g, g->io, &scores_t)), dout, dv);
    /* ds = p (grad_out v^T - delta) scale */
    cudnnBackendDescriptor_t ds = matmul(g, dout, vt, virt(g, F, &scores));
    ds = pw(g, CUDNN_POINTWISE_SUB, ds, delta, virt(g, F, &scores));
    ds = pw(g, CUDNN_POINTWISE_MUL, ds, probs, virt(g, F, &scores));
    ds = pw(g, CUDNN_POINTWISE_MUL, ds, scale, virt(g, F, &scores));
    /* grad_k = ds^T q */
    matmul(g, reshape(g, ds, virt(g, g->io, &scores_t)), q, dk);
    /* grad_q = ds k: through the float32 accumulator, or directly when deterministic */
    cudnnBackendDescriptor_t k = reshape(g, kt, virt(g, g->io, &k_layout));
    if (p->deterministic) {
        matmul(g, ds, k, dq);
    } else {
        cudnnBackendDescriptor_t dq_accum = tensor(g, UID_DQ_ACCUM, F, &accum, REAL);
        pw(g, CUDNN_POINTWISE_IDENTITY, matmul(g, ds, k, dq_accum), NULL, dq);
    }
}

/* Builds the problem's graph and plan into c; a problem cuDNN cannot run gets c->declined. */
static tl_status build(cudnnHandle_t handle, const problem *p, cached *c, const char *op) {
    c->head.parts = c->parts;
    builder g = {.c = c, .next_uid = UID_VIRTUAL};
    g.io = p->dtype == TL_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    c->scalars[SCALAR_SCALE] = p->scale;
    c->scalars[SCALAR_NEG_INF] = -INFINITY;
    c->scalars[SCALAR_ONE] = 1.0f;
    if (p->direction == FORWARD)
        forward_graph(&g, p);
    else
        backward_graph(&g, p);
    cudnnBackendDescriptor_t graph = part(&g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    tl_dnn_set(&g.status, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               g.n_ops, g.ops);
    tl_dnn_set(&g.status, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    finalize(&g, graph);
    cudnnStatus_t s = g.status, tried = CUDNN_STATUS_SUCCESS;
    /* the plan refers to its engine config: kept among the parts */
    if (!s && c->head.parts_used == MOST_PARTS) s = CUDNN_STATUS_INTERNAL_ERROR;
    if (!s)
        s = tl_dnn_choose_plan(handle, graph, NULL, NULL, WORKSPACE_LIMIT, &c->head.plan,
                               &c->parts[c->head.parts_used], &c->workspace, &tried);
    if (c->head.plan) {
        c->head.parts_used++;
        if (p->direction == BACKWARD) /* delta [B, H, T] and the accumulator [B, H, T, D] */
            c->scratch = p->B * p->H * p->T * (p->deterministic ? 1 : 1 + p->D) * 4;
        return TL_OK;
    }
    tl_dnn_forget(&c->head);
    if (s && !tl_dnn_unsupported(s)) return tl_cudnn_fail(s, op, "building its plan");
    if (g.status)
        snprintf(c->declined, sizeof c->declined, "cuDNN does not take the attention graph: %s",
                 cudnnGetErrorString(g.status));
    else
        snprintf(c->declined, sizeof c->declined,
                 "cuDNN has no engine for this attention within %lld bytes of workspace (%s)",
                 (long long)WORKSPACE_LIMIT, tried ? cudnnGetErrorString(tried) : "none ranked");
    return TL_OK;
}

/* build as the cache calls it */
typedef struct build_args {
    cudnnHandle_t handle;
    const problem *p;
    const char *op;
} build_args;

static tl_status build_entry(tl_dnn_entry *entry, void *arg) {
    const build_args *a = arg;
    return build(a->handle, a->p, (cached *)entry, a->op);
}

/* Runs the plan with the call's pointers, the by-value scalars and the workspace bound (a variant
   pack made per call: host memory only). */
static tl_status execute(cudnnHandle_t handle, cached *c, const tl_attention_dnn_call *call,
                         char *workspace, const char *op) {
    int64_t uids[OPERANDS + 8];
    void *pointers[OPERANDS + 8];
    int n = 0;
    int last = c->key.direction == FORWARD ? OUT : GRAD_V;
    for (int i = Q; i <= last; i++) uids[n] = i + 1, pointers[n++] = call->data[i];
    uids[n] = UID_LSE, pointers[n++] = call->lse;
    uids[n] = UID_SCALE, pointers[n++] = &c->scalars[SCALAR_SCALE];
    if (c->key.causal) uids[n] = UID_NEG_INF, pointers[n++] = &c->scalars[SCALAR_NEG_INF];
    if (c->key.direction == BACKWARD) {
        /* the scratch after cuDNN's workspace, each part 256-byte aligned */
        int64_t at = (c->workspace + 255) / 256 * 256;
        int64_t rows = c->key.B * c->key.H * c->key.T * (int64_t)sizeof(float);
        uids[n] = UID_ONE, pointers[n++] = &c->scalars[SCALAR_ONE];
        uids[n] = UID_ROW_SUM, pointers[n++] = workspace + at;
        if (!c->key.deterministic)
            uids[n] = UID_DQ_ACCUM, pointers[n++] = workspace + at + (rows + 255) / 256 * 256;
    }
    void *cudnn_workspace = c->workspace ? workspace : NULL;
    cudnnBackendDescriptor_t pack = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    tl_dnn_set(&s, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    tl_dnn_set(&s, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers);
    tl_dnn_set(&s, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
               &cudnn_workspace);
    if (!s) s = cudnnBackendFinalize(pack);
    if (!s) s = cudnnBackendExecute(handle, c->head.plan, pack);
    tl_dnn_destroy(&pack);
    return s ? tl_cudnn_fail(s, op, "running its fused attention") : TL_OK;
}

/* Declines with a reason (a string literal or a formatted one) and TL_OK. */
static tl_status decline(bool *declined, const char *reason) {
    snprintf(why, sizeof why, "%s", reason);
    *declined = true;
    return TL_OK;
}

static bool aligned(const void *pointer) {
    return ((uintptr_t)pointer & 15) == 0;
}

/* The size of dim d (b, h or row) of operand i. */
static int64_t extent(const tl_attention_dnn_call *call, int i, int d) {
    bool query = i == Q || i == OUT || i == GRAD_OUT || i == GRAD_Q;
    return d == 0 ? call->B : d == 1 ? call->H : query ? call->T : call->S;
}

/* Operand i's strides for the plan: a dim of size 1 never moves, so its stride is set to the
   operand's whole span (it reads as the outermost dim, and equal problems share a plan). */
static void plan_strides(const tl_attention_dnn_call *call, int i, int64_t out[3]) {
    int64_t span = call->D;
    for (int d = 0; d < 3; d++) {
        int64_t reach = call->stride[i][d] * extent(call, i, d);
        if (extent(call, i, d) > 1 && reach > span) span = reach;
    }
    for (int d = 0; d < 3; d++) out[d] = extent(call, i, d) > 1 ? call->stride[i][d] : span;
}

/* Why cuDNN's engines cannot take the call as it stands (NULL when they may): the limits of
   their support surface and of this graph. */
static const char *outside(const tl_attention_dnn_call *call, int last) {
    if (call->dtype != TL_BF16 && call->dtype != TL_F16) return "dtype is not bfloat16 or float16";
    if (!(call->dropout <= 0)) return "dropout (cuDNN's mask is not tlua's Philox mask)";
    if (call->D % 8 != 0 || call->D > 128) return "head dim is not a multiple of 8 up to 128";
    if (call->B < 1 || call->H < 1 || call->T < 1 || call->S < 1 || call->D < 8)
        return "an empty problem";
    if (call->T == 1 && call->S == 1) return "one query and one key";
    if (call->B > INT32_MAX || call->H > INT32_MAX || call->T > INT32_MAX || call->S > INT32_MAX)
        return "a dim of more than 2^31 - 1";
    if (!call->lse || !aligned(call->lse)) return "lse is missing or not 16-byte aligned";
    for (int i = Q; i <= last; i++) {
        if (!call->data[i]) return "an operand is missing";
        if (!aligned(call->data[i])) return "an operand is not 16-byte aligned";
        for (int d = 0; d < 3; d++) {
            if (call->stride[i][d] % 8 != 0) return "a stride is not a multiple of 8 elements";
            if (call->stride[i][d] <= 0 && extent(call, i, d) > 1)
                return "a zero or negative stride (a broadcast operand)";
        }
    }
    return NULL;
}

/* Runs the call's direction on its kept plan (built on its first call), or declines. */
static tl_status run(direction dir, const tl_attention_dnn_call *call, bool *declined,
                     const char *op) {
    *declined = false;
    why[0] = '\0';
    int last = dir == FORWARD ? OUT : GRAD_V;
    const char *reason = outside(call, last);
    if (reason) return decline(declined, reason);
    problem p;
    memset(&p, 0, sizeof p); /* the cache compares bytes: padding too */
    p.direction = dir, p.device = call->device, p.dtype = call->dtype, p.causal = call->causal;
    p.B = call->B, p.H = call->H, p.T = call->T, p.S = call->S, p.D = call->D;
    /* grad_q's float32 accumulator past the workspace limit: the graph without it */
    p.deterministic =
        dir == BACKWARD && (call->deterministic || p.B * p.H * p.T * p.D * 4 > WORKSPACE_LIMIT);
    for (int i = Q; i <= last; i++) plan_strides(call, i, p.stride[i]);
    p.scale = (float)call->scale;
    cudnnHandle_t handle;
    cudaStream_t stream;
    TL_TRY(tl_cuda_dnn(p.device, op, &handle, &stream));
    if (call->stream && call->stream != stream)
        return decline(declined, "a stream other than the device's (cuDNN's handle is bound)");
    tl_dnn_lock();
    build_args args = {handle, &p, op};
    tl_dnn_entry *entry = NULL;
    /* a declined problem is kept too: it is not tried again */
    tl_status status = tl_dnn_cache_get(&cache, &p, build_entry, &args, op, &entry);
    cached *c = (cached *)entry;
    void *workspace = NULL;
    if (status == TL_OK && c->declined[0]) {
        status = decline(declined, c->declined);
    } else if (status == TL_OK) {
        int64_t bytes = (c->workspace + 255) / 256 * 256;
        if (c->scratch) bytes += c->scratch + 256;
        if (bytes) status = tl_cuda_malloc(p.device, (size_t)bytes, op, &workspace);
        if (status == TL_OK) status = execute(handle, c, call, workspace, op);
    }
    tl_dnn_unlock();
    if (workspace) tl_cuda_free(p.device, workspace);
    return status;
}

tl_status tl_attention_forward_dnn(const tl_attention_dnn_call *call, bool *declined) {
    return run(FORWARD, call, declined, "attention");
}

tl_status tl_attention_backward_dnn(const tl_attention_dnn_call *call, bool *declined) {
    return run(BACKWARD, call, declined, "attention_backward");
}
