/* linear_cross_entropy as an op: the classifier's loss and its gradients in chunks of rows, with
   no [N, V] logits (the chunk loop over the GEMM and row kernels). */
#include "kernels/linear.h"
#include "ops/nn/nn_common.h"
#include "tlua/ops.h"

#define OP_NAME "linear_cross_entropy"

/* The chunk's logits are kept near this many bytes when the caller gives no chunk size. */
#define CHUNK_BYTES ((int64_t)1 << 28)

/* The row length of the logits buffer: the classes rounded up to 64 on CUDA, so that every GEMM
   of the op has aligned sizes and leading dims (cuBLAS runs an odd vocabulary, 50257, on its
   align-1 kernels, several times slower); the columns past the classes are zero rows of the
   padded weight and zero in the gradient. The CPU's BLAS needs no padding. */
static int64_t padded_classes(tl_device device, int64_t classes) {
    const int64_t to = device.type == TL_DEVICE_CUDA ? 64 : 1;
    return (classes + to - 1) / to * to;
}

/* The dtype of the row losses, the scale and the loss: float64 for float64, else float32. */
static tl_dtype loss_dtype(tl_dtype dtype) {
    return dtype == TL_F64 ? TL_F64 : TL_F32;
}

static tl_status check_inputs(const tl_tensor *input, const tl_tensor *weight,
                              const tl_tensor *bias, const tl_tensor *target,
                              const tl_linear_cross_entropy_options *o) {
    char si[256], sw[256], st[256];
    if (!input || !weight || !target)
        return tl_error(TL_ERR_ARGUMENT, "%s: %s is missing", OP_NAME,
                        !input    ? "input"
                        : !weight ? "weight"
                                  : "target");
    TL_TRY(nn_check_floating(OP_NAME, "input", input));
    if (input->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "%s: input must be [..., C], got a 0-dim tensor", OP_NAME);
    const int64_t features = input->shape[input->ndim - 1];
    if (weight->ndim != 2 || weight->shape[1] != features || weight->shape[0] < 1)
        return tl_error(TL_ERR_SHAPE,
                        "%s: weight must be [V, %lld] (V >= 1 classes, input's %lld features), "
                        "got %s (input %s)",
                        OP_NAME, (long long)features, (long long)features,
                        tl_shape_str(weight, sw, sizeof sw), tl_shape_str(input, si, sizeof si));
    TL_TRY(nn_check_like(OP_NAME, "input", input, "weight", weight, true));
    if (bias) {
        if (bias->ndim != 1 || bias->shape[0] != weight->shape[0])
            return tl_error(TL_ERR_SHAPE, "%s: bias must be [%lld] (weight's rows), got %s",
                            OP_NAME, (long long)weight->shape[0],
                            tl_shape_str(bias, sw, sizeof sw));
        TL_TRY(nn_check_like(OP_NAME, "input", input, "bias", bias, true));
    }
    TL_TRY(nn_check_integer(OP_NAME, "target", target));
    TL_TRY(nn_check_like(OP_NAME, "input", input, "target", target, false));
    if (!nn_same_shape(target, input->shape, input->ndim - 1))
        return tl_error(TL_ERR_SHAPE,
                        "%s: target must have input's shape without its last dim (input %s), got "
                        "%s",
                        OP_NAME, tl_shape_str(input, si, sizeof si),
                        tl_shape_str(target, st, sizeof st));
    if (!(o->label_smoothing >= 0 && o->label_smoothing <= 1))
        return tl_error(TL_ERR_ARGUMENT, "%s: label_smoothing must be in [0, 1], got %g", OP_NAME,
                        o->label_smoothing);
    if (o->reduction != TL_REDUCTION_MEAN && o->reduction != TL_REDUCTION_SUM)
        return tl_error(TL_ERR_ARGUMENT, "%s: reduction must be mean or sum, got %d", OP_NAME,
                        (int)o->reduction);
    if (o->chunk_rows < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: chunk must be >= 0 rows (0: automatic), got %lld",
                        OP_NAME, (long long)o->chunk_rows);
    return TL_OK;
}

/* Every target in [base, base + V), ignore_index (when has_ignore) taken as base for the
   check. */
static tl_status check_targets(const tl_tensor *target, int64_t classes,
                               const tl_linear_cross_entropy_options *o) {
    const tl_index_range range = {.op = OP_NAME,
                                  .what = "target",
                                  .range_of = "the classes (weight's rows)",
                                  .note = o->target_base == 1 ? "classes count from 1" : NULL,
                                  .first = o->target_base,
                                  .count = classes};
    if (!o->has_ignore) return tl_check_index_range(target, &range);
    tl_tensor *ignore = NULL, *zero = NULL, *ignored = NULL, *checked = NULL;
    tl_status status = tl_scalar_tensor(tl_scalar_int(o->ignore_index), target, &ignore);
    if (status == TL_OK) status = tl_scalar_tensor(tl_scalar_int(o->target_base), target, &zero);
    if (status == TL_OK) status = tl_eq(target, ignore, &ignored);
    if (status == TL_OK) status = tl_where(ignored, zero, target, &checked);
    if (status == TL_OK) status = tl_check_index_range(checked, &range);
    tl_tensor *all[] = {ignore, zero, ignored, checked};
    nn_release_all(all, 4);
    return status;
}

/* scale (0-dim, dtype): 1 / the rows kept for "mean" (every row, or those whose target is not
   ignore_index: counted on the device), 1 for "sum". */
static tl_status loss_scale(const tl_tensor *target, tl_dtype dtype,
                            const tl_linear_cross_entropy_options *o, tl_tensor **scale) {
    const tl_device device = tl_tensor_device(target);
    const int64_t rows = tl_numel(target);
    if (o->reduction == TL_REDUCTION_SUM)
        return tl_full(NULL, 0, tl_scalar_float(1.0), dtype, device, scale);
    if (!o->has_ignore)
        return tl_full(NULL, 0, tl_scalar_float(1.0 / (double)rows), dtype, device, scale);
    tl_tensor *ignore = NULL, *kept = NULL, *count = NULL, *as_float = NULL;
    tl_status status = tl_scalar_tensor(tl_scalar_int(o->ignore_index), target, &ignore);
    if (status == TL_OK) status = tl_ne(target, ignore, &kept);
    if (status == TL_OK) status = tl_sum_all(kept, &count);
    if (status == TL_OK) status = tl_cast(count, dtype, &as_float);
    if (status == TL_OK) status = tl_reciprocal(as_float, scale);
    tl_tensor *all[] = {ignore, kept, count, as_float};
    nn_release_all(all, 4);
    return status;
}

/* t [rows, cols] as a new zeroed [padded_rows, cols] tensor with t in its first rows (t itself,
   contiguous, when padded_rows == rows); a 1-dim t likewise. */
static tl_status pad_rows(const tl_tensor *t, int64_t padded_rows, tl_tensor **out) {
    if (padded_rows == t->shape[0]) return tl_contiguous((tl_tensor *)t, out);
    int64_t shape[2] = {padded_rows, t->ndim == 2 ? t->shape[1] : 1};
    TL_TRY(tl_zeros(shape, t->ndim, t->dtype, tl_tensor_device(t), out));
    tl_tensor *head = NULL;
    tl_status status = tl_narrow(*out, 0, 0, t->shape[0], &head);
    if (status == TL_OK) status = tl_copy_(head, t);
    tl_release(head);
    if (status != TL_OK) tl_release(*out), *out = NULL;
    return status;
}

/* The state of one run over the chunks: dense operands, the buffers, the outputs. */
typedef struct classifier {
    tl_tensor *x, *t, *w, *b;         /* [N, C], [N], [L, C], [L] or NULL (padded to L rows) */
    tl_tensor *logits, *ones, *scale; /* [chunk, L]; [chunk] (for the bias gradient); 0-dim */
    tl_tensor *row_loss;              /* [N] */
    tl_tensor *dx, *dw, *db;          /* [N, C] input's dtype; [L, C], [L] accumulating */
    tl_cross_entropy_rows_args args;
} classifier;

static void classifier_release(classifier *c) {
    tl_tensor *all[] = {c->x,     c->t,        c->w,  c->b,  c->logits, c->ones,
                        c->scale, c->row_loss, c->dx, c->dw, c->db};
    nn_release_all(all, (int64_t)(sizeof all / sizeof all[0]));
}

/* Rows [first, first + rows) of the batch: their logits (x W^T and the bias, one GEMM),
   their row losses and, when gradients are wanted, the logits' gradient in place and from it
   the chunk's rows of dx and its share of dw and db. */
static tl_status run_chunk(classifier *c, int64_t first, int64_t rows) {
    tl_tensor *x = NULL, *t = NULL, *logits = NULL, *loss = NULL, *dx = NULL, *ones = NULL;
    tl_status status = tl_narrow(c->x, 0, first, rows, &x);
    if (status == TL_OK) status = tl_narrow(c->t, 0, first, rows, &t);
    if (status == TL_OK) status = tl_narrow(c->logits, 0, 0, rows, &logits);
    if (status == TL_OK) status = tl_narrow(c->row_loss, 0, first, rows, &loss);
    if (status == TL_OK) status = tl_gemm_linear_forward(x, c->w, c->b, logits);
    if (status == TL_OK) {
        const tl_kernel_entry *k = tl_dispatch(TL_OP_linear_cross_entropy, tl_tensor_device(x),
                                               x->dtype, NN_TENSORS(loss, logits, t));
        status = k ? k->fn.cross_entropy_rows(loss, logits, t, c->scale, &c->args)
                   : tl_dispatch_status();
    }
    if (status == TL_OK && c->dx) {
        status = tl_narrow(c->dx, 0, first, rows, &dx);
        if (status == TL_OK) status = tl_gemm_linear_backward_input(logits, c->w, dx);
    }
    if (status == TL_OK && c->dw)
        status = tl_gemm_linear_backward_weight(logits, x, first > 0, c->dw, NULL);
    if (status == TL_OK && c->db) {
        status = tl_narrow(c->ones, 0, 0, rows, &ones);
        if (status == TL_OK) status = tl_gemm_linear_backward_bias(logits, ones, first > 0, c->db);
    }
    tl_tensor *all[] = {x, t, logits, loss, dx, ones};
    nn_release_all(all, 6);
    return status;
}

/* The chunk size: the caller's, or as many rows as keep the logits near CHUNK_BYTES (a multiple
   of 64 rows when more than 64), at most every row. */
static int64_t chunk_rows(int64_t asked, int64_t rows, int64_t row_bytes) {
    int64_t chunk = asked > 0 ? asked : CHUNK_BYTES / (row_bytes > 0 ? row_bytes : 1);
    if (asked == 0 && chunk > 64) chunk = chunk / 64 * 64;
    if (chunk < 1) chunk = 1;
    return chunk < rows ? chunk : (rows > 0 ? rows : 1);
}

/* out = acc's first rows (the classes) as dtype. */
static tl_status unpad_as(tl_tensor *acc, int64_t classes, tl_dtype dtype, tl_tensor **out) {
    tl_tensor *head = NULL, *cast = NULL;
    tl_status status = tl_narrow(acc, 0, 0, classes, &head);
    if (status == TL_OK) status = tl_cast(head, dtype, &cast);
    if (status == TL_OK) status = tl_contiguous(cast, out);
    tl_release(head), tl_release(cast);
    return status;
}

static tl_status allocate(classifier *c, const tl_tensor *input, const tl_tensor *weight,
                          const tl_linear_cross_entropy_grads *grads, int64_t chunk) {
    const tl_device device = tl_tensor_device(input);
    const int64_t N = c->x->shape[0], C = c->x->shape[1], L = c->w->shape[0];
    const tl_dtype acc = input->dtype == TL_F64 ? TL_F64 : TL_F32;
    int64_t logits_shape[2] = {chunk, L}, dx_shape[2] = {N, C}, dw_shape[2] = {L, C};
    tl_status status = tl_empty(logits_shape, 2, input->dtype, device, &c->logits);
    if (status == TL_OK) status = tl_empty(&N, 1, loss_dtype(input->dtype), device, &c->row_loss);
    if (status == TL_OK && grads && grads->want_input)
        status = tl_empty(dx_shape, 2, input->dtype, device, &c->dx);
    if (status == TL_OK && grads && grads->want_weight)
        status = tl_empty(dw_shape, 2, weight->dtype == TL_F64 ? TL_F64 : acc, device, &c->dw);
    if (status == TL_OK && grads && grads->want_bias && c->b) {
        status = tl_empty(&L, 1, acc, device, &c->db);
        if (status == TL_OK) status = tl_ones(&chunk, 1, input->dtype, device, &c->ones);
    }
    return status;
}

tl_status tl_linear_cross_entropy(const tl_tensor *input, const tl_tensor *weight,
                                  const tl_tensor *bias, const tl_tensor *target,
                                  const tl_linear_cross_entropy_options *options, tl_tensor **loss,
                                  tl_linear_cross_entropy_grads *grads) {
    const tl_linear_cross_entropy_options defaults = {.reduction = TL_REDUCTION_MEAN};
    const tl_linear_cross_entropy_options *o = options ? options : &defaults;
    *loss = NULL;
    if (grads) grads->input = grads->weight = grads->bias = NULL;
    TL_TRY(check_inputs(input, weight, bias, target, o));
    const tl_device device = tl_tensor_device(input);
    const int64_t V = weight->shape[0], C = weight->shape[1], L = padded_classes(device, V);
    const int64_t N = tl_numel(target);
    TL_TRY(check_targets(target, V, o));
    const bool want = grads && (grads->want_input || grads->want_weight || grads->want_bias);
    classifier c = {.args = {.classes = V,
                             .first_class = o->target_base,
                             .label_smoothing = o->label_smoothing,
                             .has_ignore = o->has_ignore,
                             .ignore_index = o->ignore_index,
                             .write_grad = want}};
    int64_t x_shape[2] = {N, C}, t_shape[1] = {N};
    tl_tensor *x_dense = NULL, *t_dense = NULL, *sum = NULL;
    tl_status status = tl_contiguous((tl_tensor *)input, &x_dense);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)target, &t_dense);
    if (status == TL_OK) status = tl_view(x_dense, x_shape, 2, &c.x);
    if (status == TL_OK) status = tl_view(t_dense, t_shape, 1, &c.t);
    if (status == TL_OK) status = pad_rows(weight, L, &c.w);
    if (status == TL_OK && bias) status = pad_rows(bias, L, &c.b);
    if (status == TL_OK) status = loss_scale(c.t, loss_dtype(input->dtype), o, &c.scale);
    const int64_t chunk = chunk_rows(o->chunk_rows, N, L * (int64_t)tl_dtype_size(input->dtype));
    if (status == TL_OK) status = allocate(&c, input, weight, grads, chunk);
    for (int64_t first = 0; status == TL_OK && first < N; first += chunk)
        status = run_chunk(&c, first, N - first < chunk ? N - first : chunk);
    if (status == TL_OK) status = tl_sum_all(c.row_loss, &sum);
    if (status == TL_OK) status = tl_mul(sum, c.scale, loss);
    if (status == TL_OK && want) {
        if (c.dx) status = tl_view(c.dx, input->shape, input->ndim, &grads->input);
        const bool wide = grads->params_float32;
        if (status == TL_OK && c.dw)
            status = unpad_as(c.dw, V, wide ? c.dw->dtype : weight->dtype, &grads->weight);
        if (status == TL_OK && c.db)
            status = unpad_as(c.db, V, wide ? c.db->dtype : bias->dtype, &grads->bias);
        if (status == TL_OK && N == 0) { /* no chunk ran: the sums over no rows are 0 */
            if (grads->weight) status = tl_fill_(grads->weight, tl_scalar_float(0));
            if (status == TL_OK && grads->bias) status = tl_fill_(grads->bias, tl_scalar_float(0));
        }
    }
    tl_tensor *all[] = {x_dense, t_dense, sum};
    nn_release_all(all, 3);
    classifier_release(&c);
    if (status != TL_OK) {
        tl_release(*loss), *loss = NULL;
        if (grads) {
            tl_release(grads->input), tl_release(grads->weight), tl_release(grads->bias);
            grads->input = grads->weight = grads->bias = NULL;
        }
    }
    return status;
}
