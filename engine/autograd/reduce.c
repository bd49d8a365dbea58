/* Recording reductions (gradients by composition) and softmax (its fused backward kernels). */
#include <math.h>

#include "autograd/autocast.h"
#include "autograd/formula.h"

/* ---- value reductions (REDUCE_OP rows) ----------------------------------------------------
   A row's node: ints[d] = 1 for each reduced dim of the input, keepdim, scalar[0] the op's number;
   it saves the input (slot 0) and the result (slot 1) as its gradient's FOLD_SAVES_* say. */
enum { FOLD_SAVES_NOTHING = 0, FOLD_SAVES_INPUT = 1, FOLD_SAVES_RESULT = 2 };

/* g (the result's shape) as a view of the input's rank with size 1 at the reduced dims: as it
   is with keepdim, else unsqueezed at each reduced dim in increasing order */
static tl_status fold_unreduce(tl_node *node, tl_tensor *g, tl_tensor **out) {
    tl_tensor *kept = tl_retain(g);
    for (int d = 0; d < node->input_ndim[0] && !node->keepdim; d++) {
        if (!node->ints[d]) continue;
        tl_tensor *wider = NULL;
        tl_status status = tl_unsqueeze(kept, d, &wider);
        tl_release(kept);
        if (status != TL_OK) return status;
        kept = wider;
    }
    *out = kept;
    return TL_OK;
}

/* g broadcast back over the input's shape (a view) */
static tl_status fold_expand(tl_node *node, tl_tensor *g, tl_tensor **out) {
    tl_tensor *kept;
    TL_TRY(fold_unreduce(node, g, &kept));
    tl_status status = tl_expand(kept, node->input_shape[0], node->input_ndim[0], out);
    tl_release(kept);
    return status;
}

/* the number of elements reduced into each result */
static int64_t fold_count(const tl_node *node) {
    int64_t count = 1;
    for (int d = 0; d < node->input_ndim[0]; d++)
        if (node->ints[d]) count *= node->input_shape[0][d];
    return count;
}

/* The gradient of row `name` (backward COMPOSED): fold_<name>_backward with what it saves. */
#define REDUCE_GRADIENT(name, saves)                                                               \
    enum { fold_##name##_saves = (saves) };                                                        \
    static tl_status fold_##name##_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi)

REDUCE_GRADIENT(sum, FOLD_SAVES_NOTHING) {
    return fold_expand(node, g[0], &gi[0]);
}

REDUCE_GRADIENT(mean, FOLD_SAVES_NOTHING) {
    tl_tensor *scaled;
    TL_TRY(tl_mul_number(g[0], 1.0 / (double)fold_count(node), &scaled));
    tl_status status = fold_expand(node, scaled, &gi[0]);
    tl_release(scaled);
    return status;
}

/* amax, amin: g split evenly among the elements equal to the result (ties), as torch */
static tl_status split_among_ties(tl_node *node, tl_tensor *g, tl_tensor **gi) {
    tl_tensor *x, *y;
    TL_TRY(tl_node_saved(node, 0, &x));
    TL_TRY(tl_node_saved(node, 1, &y));
    int dims[TL_MAX_DIMS], ndims = 0;
    for (int d = 0; d < node->input_ndim[0]; d++)
        if (node->ints[d]) dims[ndims++] = d;
    tl_tensor *y_back = NULL, *ties = NULL, *mask = NULL, *count = NULL, *g_back = NULL,
              *share = NULL;
    tl_status status = fold_expand(node, y, &y_back);
    if (status == TL_OK) status = tl_eq(x, y_back, &ties);
    if (status == TL_OK) status = tl_cast(ties, x->dtype, &mask);
    if (status == TL_OK) status = tl_sum_dims(mask, dims, ndims, true, 0, &count);
    if (status == TL_OK) status = fold_expand(node, g, &g_back);
    if (status == TL_OK) status = tl_mul(g_back, mask, &share);
    if (status == TL_OK) status = tl_div(share, count, gi);
    tl_release(y_back), tl_release(ties), tl_release(mask), tl_release(count);
    tl_release(g_back), tl_release(share);
    return status;
}

REDUCE_GRADIENT(amax, FOLD_SAVES_INPUT | FOLD_SAVES_RESULT) {
    return split_among_ties(node, g[0], &gi[0]);
}

REDUCE_GRADIENT(amin, FOLD_SAVES_INPUT | FOLD_SAVES_RESULT) {
    return split_among_ties(node, g[0], &gi[0]);
}

/* logsumexp: g exp(x - y), the softmax of x over the reduced dims */
REDUCE_GRADIENT(logsumexp, FOLD_SAVES_INPUT | FOLD_SAVES_RESULT) {
    tl_tensor *x, *y;
    TL_TRY(tl_node_saved(node, 0, &x));
    TL_TRY(tl_node_saved(node, 1, &y));
    tl_tensor *y_back = NULL, *shifted = NULL, *soft = NULL, *g_back = NULL;
    tl_status status = fold_expand(node, y, &y_back);
    if (status == TL_OK) status = tl_sub(x, y_back, &shifted);
    if (status == TL_OK) status = tl_exp(shifted, &soft);
    if (status == TL_OK) status = fold_expand(node, g[0], &g_back);
    if (status == TL_OK) status = tl_mul(g_back, soft, &gi[0]);
    tl_release(y_back), tl_release(shifted), tl_release(soft), tl_release(g_back);
    return status;
}

/* (x - mean over the reduced dims) / max(0, n - correction): var's gradient is 2 g times it,
   std's g times it over std */
static tl_status deviation_share(tl_node *node, tl_tensor *x, double factor, tl_tensor **out) {
    int dims[TL_MAX_DIMS], ndims = 0;
    for (int d = 0; d < node->input_ndim[0]; d++)
        if (node->ints[d]) dims[ndims++] = d;
    const double divisor = fmax(0.0, (double)fold_count(node) - node->scalar[0]);
    tl_tensor *mean = NULL, *deviation = NULL;
    tl_status status = tl_mean_dims(x, dims, ndims, true, 0, &mean);
    if (status == TL_OK) status = tl_sub(x, mean, &deviation);
    if (status == TL_OK) status = tl_mul_number(deviation, factor / divisor, out);
    tl_release(mean), tl_release(deviation);
    return status;
}

REDUCE_GRADIENT(var, FOLD_SAVES_INPUT) {
    tl_tensor *x, *share = NULL, *g_back = NULL;
    TL_TRY(tl_node_saved(node, 0, &x));
    tl_status status = deviation_share(node, x, 2.0, &share);
    if (status == TL_OK) status = fold_expand(node, g[0], &g_back);
    if (status == TL_OK) status = tl_mul(g_back, share, &gi[0]);
    tl_release(share), tl_release(g_back);
    return status;
}

REDUCE_GRADIENT(std, FOLD_SAVES_INPUT | FOLD_SAVES_RESULT) {
    tl_tensor *x, *y, *share = NULL, *g_back = NULL, *y_back = NULL, *scaled = NULL;
    TL_TRY(tl_node_saved(node, 0, &x));
    TL_TRY(tl_node_saved(node, 1, &y));
    tl_status status = deviation_share(node, x, 1.0, &share);
    if (status == TL_OK) status = fold_expand(node, g[0], &g_back);
    if (status == TL_OK) status = fold_expand(node, y, &y_back);
    if (status == TL_OK) status = tl_mul(g_back, share, &scaled);
    if (status == TL_OK) status = tl_div(scaled, y_back, &gi[0]);
    tl_release(share), tl_release(g_back), tl_release(y_back), tl_release(scaled);
    return status;
}

/* the reduced dims of node's input, 0-based, in dims; returns their count */
static int fold_dims(const tl_node *node, int *dims) {
    int n = 0;
    for (int d = 0; d < node->input_ndim[0]; d++)
        if (node->ints[d]) dims[n++] = d;
    return n;
}

/* a 0-dim tensor holding v, in t's dtype on t's device */
static tl_status number_like(const tl_tensor *t, double v, tl_tensor **out) {
    return tl_full(NULL, 0, tl_scalar_float(v), t->dtype, tl_tensor_device(t), out);
}

/* prod: g times the product of the other elements of the line. With z zeros in the line, from
   pn, the product of its non-zero elements: a non-zero x gets pn / x when z = 0 (else 0), a zero
   x gets pn when z = 1 (else 0), as torch. */
REDUCE_GRADIENT(prod, FOLD_SAVES_INPUT) {
    tl_tensor *x;
    TL_TRY(tl_node_saved(node, 0, &x));
    int dims[TL_MAX_DIMS];
    const int ndims = fold_dims(node, dims);
    tl_tensor *zero = NULL, *one = NULL, *is_zero = NULL, *zero_mask = NULL, *nonzero_x = NULL,
              *pn = NULL, *zeros_in_line = NULL, *lone_zero = NULL, *no_zero = NULL,
              *for_zero = NULL, *kept = NULL, *for_rest = NULL, *share = NULL, *g_back = NULL;
    tl_status status = number_like(x, 0, &zero);
    if (status == TL_OK) status = number_like(x, 1, &one);
    if (status == TL_OK) status = tl_eq(x, zero, &is_zero);
    if (status == TL_OK) status = tl_where(is_zero, one, x, &nonzero_x);
    if (status == TL_OK) status = tl_prod_dims(nonzero_x, dims, ndims, true, 0, &pn);
    if (status == TL_OK) status = tl_cast(is_zero, x->dtype, &zero_mask);
    if (status == TL_OK) status = tl_sum_dims(zero_mask, dims, ndims, true, 0, &zeros_in_line);
    if (status == TL_OK) status = tl_eq(zeros_in_line, one, &lone_zero);
    if (status == TL_OK) status = tl_eq(zeros_in_line, zero, &no_zero);
    if (status == TL_OK) status = tl_mask_or_zero(lone_zero, pn, &for_zero);
    if (status == TL_OK) status = tl_mask_or_zero(no_zero, pn, &kept);
    if (status == TL_OK) status = tl_div(kept, nonzero_x, &for_rest);
    if (status == TL_OK) status = tl_where(is_zero, for_zero, for_rest, &share);
    if (status == TL_OK) status = fold_expand(node, g[0], &g_back);
    if (status == TL_OK) status = tl_mul(g_back, share, &gi[0]);
    tl_release(zero), tl_release(one), tl_release(is_zero), tl_release(zero_mask);
    tl_release(nonzero_x), tl_release(pn), tl_release(zeros_in_line), tl_release(lone_zero);
    tl_release(no_zero), tl_release(for_zero), tl_release(kept), tl_release(for_rest);
    tl_release(share), tl_release(g_back);
    return status;
}

/* sign(x) as x's dtype: (x > 0) - (x < 0) */
static tl_status sign_of(const tl_tensor *x, tl_tensor **out) {
    tl_tensor *zero = NULL, *pos = NULL, *neg = NULL, *pos_f = NULL, *neg_f = NULL;
    tl_status status = number_like(x, 0, &zero);
    if (status == TL_OK) status = tl_gt(x, zero, &pos);
    if (status == TL_OK) status = tl_lt(x, zero, &neg);
    if (status == TL_OK) status = tl_cast(pos, x->dtype, &pos_f);
    if (status == TL_OK) status = tl_cast(neg, x->dtype, &neg_f);
    if (status == TL_OK) status = tl_sub(pos_f, neg_f, out);
    tl_release(zero), tl_release(pos), tl_release(neg), tl_release(pos_f), tl_release(neg_f);
    return status;
}

/* norm of order p, d norm / dx:
     p = inf, -inf: sign(x) split evenly among the elements whose |x| is the norm (ties);
     p = 0: 0;  p = 2: x / y;  else: x |x|^(p - 2) / y^(p - 1);
   0 where x is 0 (as torch; the formula's 0 * inf there is not taken). */
static tl_status norm_share(tl_node *node, tl_tensor *x, tl_tensor *y_back, double p,
                            tl_tensor **out) {
    tl_tensor *zero = NULL, *is_zero = NULL, *ax = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL,
              *share = NULL;
    tl_status status = number_like(x, 0, &zero);
    if (status == TL_OK) status = tl_eq(x, zero, &is_zero);
    if (status == TL_OK) status = tl_abs(x, &ax);
    if (status == TL_OK && isinf(p)) {
        int dims[TL_MAX_DIMS];
        const int ndims = fold_dims(node, dims);
        tl_tensor *ties = NULL, *mask = NULL, *count = NULL;
        status = tl_eq(ax, y_back, &ties);
        if (status == TL_OK) status = tl_cast(ties, x->dtype, &mask);
        if (status == TL_OK) status = tl_sum_dims(mask, dims, ndims, true, 0, &count);
        if (status == TL_OK) status = sign_of(x, &t1);
        if (status == TL_OK) status = tl_mul(t1, mask, &t2);
        if (status == TL_OK) status = tl_div(t2, count, &share);
        tl_release(ties), tl_release(mask), tl_release(count);
    } else if (status == TL_OK && p == 2) {
        status = tl_div(x, y_back, &share);
    } else if (status == TL_OK) {
        status = tl_pow_scalar(ax, p - 2, &t1);
        if (status == TL_OK) status = tl_mul(x, t1, &t2);
        if (status == TL_OK) status = tl_pow_scalar(y_back, p - 1, &t3);
        if (status == TL_OK) status = tl_div(t2, t3, &share);
    }
    if (status == TL_OK) status = tl_where(is_zero, zero, share, out);
    tl_release(zero), tl_release(is_zero), tl_release(ax), tl_release(t1), tl_release(t2);
    tl_release(t3), tl_release(share);
    return status;
}

REDUCE_GRADIENT(norm, FOLD_SAVES_INPUT | FOLD_SAVES_RESULT) {
    tl_tensor *x, *y;
    TL_TRY(tl_node_saved(node, 0, &x));
    TL_TRY(tl_node_saved(node, 1, &y));
    const double p = node->scalar[0];
    if (p == 0)
        return tl_zeros(node->input_shape[0], node->input_ndim[0], x->dtype, tl_tensor_device(x),
                        &gi[0]);
    tl_tensor *y_back = NULL, *share = NULL, *g_back = NULL;
    tl_status status = fold_expand(node, y, &y_back);
    if (status == TL_OK) status = norm_share(node, x, y_back, p, &share);
    if (status == TL_OK) status = fold_expand(node, g[0], &g_back);
    if (status == TL_OK) status = tl_mul(g_back, share, &gi[0]);
    tl_release(y_back), tl_release(share), tl_release(g_back);
    return status;
}

/* the recording of a fold that made *out (on failure *out is released and set to NULL) */
static tl_status record_fold(const char *name, tl_backward_fn backward, int saves, tl_tensor *a,
                             tl_tensor **out, const int *dims, int ndims, bool keepdim,
                             double number) {
    tl_node *node;
    TL_TRY(tl_record(name, backward, 1, &a, out, &node));
    if (!node) return TL_OK;
    for (int d = 0; d < a->ndim; d++) node->ints[d] = ndims == 0;
    for (int i = 0; i < ndims; i++) {
        int d;
        tl_status status = tl_wrap_dim(name, dims[i], a->ndim, &d);
        if (status != TL_OK) {
            tl_release(*out);
            *out = NULL;
            return status;
        }
        if (a->ndim > 0) node->ints[d] = 1;
    }
    node->keepdim = keepdim;
    node->scalar[0] = number;
    node->has_scalar[0] = true;
    if (saves & FOLD_SAVES_INPUT) TL_TRY(tl_record_save(node, 0, "self", a, out));
    if (saves & FOLD_SAVES_RESULT) TL_TRY(tl_record_save(node, 1, "result", *out, out));
    return TL_OK;
}

/* tl_ag_<name>_dims, _all and _dim of every row: recording for a differentiable row (backward
   COMPOSED), the forward alone for the others (backward NONE) */
#define FOLD_RECORD_COMPOSED(name)                                                                 \
    TL_TRY(tl_##name##_dims(a, dims, ndims, keepdim, number, out));                                \
    return record_fold(#name, fold_##name##_backward, fold_##name##_saves, a, out, dims, ndims,    \
                       keepdim, number);
#define FOLD_RECORD_NONE(name) return tl_##name##_dims(a, dims, ndims, keepdim, number, out);
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    tl_status tl_ag_##name##_dims(tl_tensor *a, const int *dims, int ndims, bool keepdim,          \
                                  double number, tl_tensor **out){FOLD_RECORD_##backward(          \
        name)} tl_status tl_ag_##name##_all(tl_tensor *a, tl_tensor **out) {                       \
        return tl_ag_##name##_dims(a, NULL, 0, false, param, out);                                 \
    }                                                                                              \
    tl_status tl_ag_##name##_dim(tl_tensor *a, int dim, bool keepdim, tl_tensor **out) {           \
        return tl_ag_##name##_dims(a, &dim, 1, keepdim, param, out);                               \
    }
#include "tlua/ops.def"

/* ---- max, min ---------------------------------------------------------------------------- */
/* dim = -1 marks an all-elements reduction; the node marks its reduced dims in ints, as a value
   reduction's does (fold_expand serves both) */
static tl_status record_reduce(const char *name, tl_backward_fn backward, tl_tensor *a,
                               tl_tensor **out, int dim, bool keepdim, tl_node **node_out) {
    tl_node *node;
    if (node_out) *node_out = NULL;
    TL_TRY(tl_record(name, backward, 1, &a, out, &node));
    if (node) {
        node->dim = -1;
        tl_status status = dim >= 0 ? tl_wrap_dim(name, dim, a->ndim, &node->dim) : TL_OK;
        if (status != TL_OK) {
            tl_release(*out);
            *out = NULL;
            return status;
        }
        for (int d = 0; d < a->ndim; d++) node->ints[d] = dim < 0 || d == node->dim;
        node->keepdim = keepdim;
    }
    if (node_out) *node_out = node;
    return TL_OK;
}

/* max()/min() over all elements: the gradient is shared evenly by every element equal to the
   result (as PyTorch, and as amax/amin); slots: self, result */
static tl_status extreme_all_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return split_among_ties(node, g[0], &gi[0]);
}

static tl_status extreme_all(const char *name, tl_status forward_status, tl_tensor *a,
                             tl_tensor **out) {
    TL_TRY(forward_status);
    tl_node *node;
    TL_TRY(record_reduce(name, extreme_all_backward, a, out, -1, false, &node));
    if (node) {
        TL_TRY(tl_record_save(node, 0, "self", a, out));
        TL_TRY(tl_record_save(node, 1, "result", *out, out));
    }
    return TL_OK;
}

tl_status tl_ag_max_all(tl_tensor *a, tl_tensor **out) {
    return extreme_all("max", tl_max_all(a, out), a, out);
}
tl_status tl_ag_min_all(tl_tensor *a, tl_tensor **out) {
    return extreme_all("min", tl_min_all(a, out), a, out);
}

/* max(dim)/min(dim): the gradient goes to the index each value came from;
   slot 0: the indices (int64, keepdim shape or not) */
static tl_status extreme_dim_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *indices;
    TL_TRY(tl_node_saved(node, 0, &indices));
    int dim = node->dim, ndim = node->input_ndim[0];
    int64_t size = ndim > 0 ? node->input_shape[0][dim] : 1;
    /* positions along dim, shaped [1, .., size, .., 1], compared with the
       indices broadcast along dim, select where the gradient goes */
    int64_t position_shape[TL_MAX_DIMS];
    for (int d = 0; d < ndim; d++) position_shape[d] = d == dim ? size : 1;
    tl_tensor *positions = NULL, *shaped = NULL, *index_k = NULL, *grad_k = NULL, *mask = NULL,
              *grad_b = NULL;
    tl_status status = tl_arange(0, (double)size, 1, TL_I64, tl_tensor_device(g[0]), &positions);
    if (status == TL_OK) status = tl_view(positions, position_shape, ndim, &shaped);
    if (status == TL_OK) status = fold_expand(node, indices, &index_k);
    if (status == TL_OK) status = fold_expand(node, g[0], &grad_k);
    if (status == TL_OK) status = tl_eq(shaped, index_k, &mask);
    if (status == TL_OK) status = tl_mask_or_zero(mask, grad_k, &gi[0]);
    tl_release(positions), tl_release(shaped), tl_release(index_k), tl_release(grad_k);
    tl_release(mask), tl_release(grad_b);
    return status;
}

static tl_status extreme_dim(const char *name, tl_status forward_status, tl_tensor *a, int dim,
                             bool keepdim, tl_tensor **values, tl_tensor **indices) {
    TL_TRY(forward_status);
    int d;
    tl_status status = tl_wrap_dim(name, dim, a->ndim, &d);
    tl_node *node = NULL;
    if (status == TL_OK)
        status = record_reduce(name, extreme_dim_backward, a, values, d, keepdim, &node);
    else
        tl_release(*values), *values = NULL;
    if (status == TL_OK && node) status = tl_record_save(node, 0, "indices", *indices, values);
    if (status != TL_OK) tl_release(*indices), *indices = NULL; /* values: released above */
    return status;
}

tl_status tl_ag_max_dim(tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                        tl_tensor **indices) {
    return extreme_dim("max", tl_max_dim(a, dim, keepdim, values, indices), a, dim, keepdim, values,
                       indices);
}
tl_status tl_ag_min_dim(tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                        tl_tensor **indices) {
    return extreme_dim("min", tl_min_dim(a, dim, keepdim, values, indices), a, dim, keepdim, values,
                       indices);
}

/* softmax: dx = y * (g - sum(g * y, dim)), one fused kernel; slot 0: result y */
static tl_status softmax_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *y;
    TL_TRY(tl_node_saved(node, 0, &y));
    return tl_softmax_backward(g[0], y, node->dim, &gi[0]);
}

/* log_softmax: dx = g - exp(y) * sum(g, dim), one fused kernel; slot 0: result y */
static tl_status log_softmax_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *y;
    TL_TRY(tl_node_saved(node, 0, &y));
    return tl_log_softmax_backward(g[0], y, node->dim, &gi[0]);
}

static tl_status softmax_like(const char *name, tl_backward_fn backward, tl_status forward_status,
                              tl_tensor *a, int dim, tl_tensor **out) {
    TL_TRY(forward_status);
    tl_node *node;
    TL_TRY(tl_record(name, backward, 1, &a, out, &node));
    if (!node) return TL_OK;
    tl_status status = tl_wrap_dim(name, dim, a->ndim, &node->dim);
    if (status != TL_OK) {
        tl_release(*out);
        *out = NULL;
        return status;
    }
    if (a->ndim == 0) node->dim = 0;
    return tl_record_save(node, 0, "result", *out, out);
}

static tl_status record_softmax(tl_tensor *a, int dim, tl_tensor **out) {
    return softmax_like("softmax", softmax_backward, tl_softmax(a, dim, out), a, dim, out);
}

tl_status tl_ag_softmax(tl_tensor *a, int dim, tl_tensor **out) {
    tl_tensor *operands[1] = {a};
    bool casted[1];
    TL_TRY(tl_autocast_operands(TL_OP_softmax, operands, 1, casted));
    return tl_autocast_release(operands, 1, casted, record_softmax(operands[0], dim, out));
}

static tl_status record_log_softmax(tl_tensor *a, int dim, tl_tensor **out) {
    return softmax_like("log_softmax", log_softmax_backward, tl_log_softmax(a, dim, out), a, dim,
                        out);
}

tl_status tl_ag_log_softmax(tl_tensor *a, int dim, tl_tensor **out) {
    tl_tensor *operands[1] = {a};
    bool casted[1];
    TL_TRY(tl_autocast_operands(TL_OP_log_softmax, operands, 1, casted));
    return tl_autocast_release(operands, 1, casted, record_log_softmax(operands[0], dim, out));
}
