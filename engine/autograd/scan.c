/* Recording the scans: cumsum, cumprod, logcumsumexp, cummax and cummin, their gradients composed
   of forward ops. */
#include "autograd/formula.h"

/* y[i] = x[0] + ... + x[i] along dim, so dx[i] = g[i] + ... + g[n-1]: the sum of g along dim
   less its prefix sums before i, sum(g) - cumsum(g) + g ("="). No saved tensor. */
static tl_status cumsum_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *total = NULL, *prefix = NULL, *rest = NULL;
    tl_status status = tl_sum_dim(g[0], node->dim, true, &total);
    if (status == TL_OK) status = tl_cumsum(g[0], node->dim, &prefix);
    if (status == TL_OK) status = tl_sub(total, prefix, &rest);
    if (status == TL_OK) status = tl_add_(rest, g[0]);
    tl_release(total);
    tl_release(prefix);
    if (status != TL_OK) {
        tl_release(rest);
        return status;
    }
    gi[0] = rest;
    return TL_OK;
}

tl_status tl_ag_cumsum(tl_tensor *x, int dim, tl_tensor **out) {
    TL_TRY(tl_cumsum(x, dim, out));
    int d;
    tl_status status = tl_wrap_dim("cumsum", dim, x->ndim, &d); /* checked by tl_cumsum */
    tl_node *node = NULL;
    if (status == TL_OK)
        status = tl_record("cumsum", cumsum_backward, 1, &x, out, &node); /* clears *out */
    else
        tl_release(*out), *out = NULL;
    if (status == TL_OK && node) node->dim = d;
    return status;
}

/* ---- cumprod, logcumsumexp, cummax, cummin ------------------------------------------------- */

/* t's reverse cumulative sum along dim: out[i] = t[i] + ... + t[n-1] = sum(t) - cumsum(t) + t */
static tl_status reverse_cumsum(tl_tensor *t, int dim, tl_tensor **out) {
    tl_tensor *total = NULL, *prefix = NULL, *rest = NULL;
    tl_status status = tl_sum_dim(t, dim, true, &total);
    if (status == TL_OK) status = tl_cumsum(t, dim, &prefix);
    if (status == TL_OK) status = tl_sub(total, prefix, &rest);
    if (status == TL_OK) status = tl_add(rest, t, out);
    tl_release(total), tl_release(prefix), tl_release(rest);
    return status;
}

/* a 0-dim tensor holding v, in t's dtype on t's device */
static tl_status number_like(const tl_tensor *t, double v, tl_tensor **out) {
    return tl_full(NULL, 0, tl_scalar_float(v), t->dtype, tl_tensor_device(t), out);
}

/* y[j] = x[0] ... x[j], so dx[i] = sum over j >= i of g[j] times the product of x[0..j] but x[i].
   A non-zero x[i]: reverse_cumsum(g y)[i] / x[i] (0 past the line's first zero, where y is). The
   line's first zero: reverse_cumsum(g y1)[i], y1 the cumprod with that zero made 1; later zeros:
   0. No division by a zero, so lines with zeros are exact, as torch's. */
static tl_status cumprod_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *x, *y;
    TL_TRY(tl_node_saved(node, 0, &x));
    TL_TRY(tl_node_saved(node, 1, &y));
    const int d = node->dim;
    tl_tensor *zero = NULL, *one = NULL, *is_zero = NULL, *zero_mask = NULL, *zeros_so_far = NULL,
              *first_so_far = NULL, *first_mask = NULL, *first = NULL, *first_f = NULL, *x1 = NULL,
              *y1 = NULL, *gy1 = NULL, *at_first = NULL, *kept = NULL, *gy = NULL, *rest = NULL,
              *safe_x = NULL, *at_rest = NULL;
    tl_status status = number_like(x, 0, &zero);
    if (status == TL_OK) status = number_like(x, 1, &one);
    if (status == TL_OK) status = tl_eq(x, zero, &is_zero);
    if (status == TL_OK) status = tl_cast(is_zero, x->dtype, &zero_mask);
    if (status == TL_OK) status = tl_cumsum(zero_mask, d, &zeros_so_far);
    if (status == TL_OK) status = tl_eq(zeros_so_far, one, &first_so_far);
    if (status == TL_OK) status = tl_cast(first_so_far, x->dtype, &first_mask);
    if (status == TL_OK) status = tl_mul(first_mask, zero_mask, &first_f);
    if (status == TL_OK) status = tl_ne(first_f, zero, &first);
    if (status == TL_OK) status = tl_where(first, one, x, &x1);
    if (status == TL_OK) status = tl_cumprod(x1, d, &y1);
    if (status == TL_OK) status = tl_mul(g[0], y1, &gy1);
    if (status == TL_OK) status = reverse_cumsum(gy1, d, &at_first);
    if (status == TL_OK) status = tl_mask_or_zero(first, at_first, &kept);
    if (status == TL_OK) status = tl_mul(g[0], y, &gy);
    if (status == TL_OK) status = reverse_cumsum(gy, d, &rest);
    if (status == TL_OK) status = tl_where(is_zero, one, x, &safe_x);
    if (status == TL_OK) status = tl_div(rest, safe_x, &at_rest);
    if (status == TL_OK) status = tl_where(is_zero, kept, at_rest, &gi[0]);
    tl_tensor *temps[] = {zero,       one,     is_zero, zero_mask, zeros_so_far, first_so_far,
                          first_mask, first_f, first,   x1,        y1,           gy1,
                          at_first,   kept,    gy,      rest,      safe_x,       at_rest};
    for (size_t i = 0; i < sizeof temps / sizeof temps[0]; i++) tl_release(temps[i]);
    return status;
}

/* t reversed along dim (a gather with the positions n-1 .. 0) */
static tl_status flip_dim(tl_tensor *t, int dim, tl_tensor **out) {
    const int64_t n = t->ndim > 0 ? t->shape[dim] : 1;
    tl_tensor *positions;
    TL_TRY(tl_arange_int(n - 1, -1, -1, TL_I64, tl_tensor_device(t), &positions));
    tl_status status = tl_index_select(t, dim, positions, out);
    tl_release(positions);
    return status;
}

/* logcumsumexp along dim taken from the end: out[i] = log(exp(t[i]) + ... + exp(t[n-1])) */
static tl_status reverse_logcumsumexp(tl_tensor *t, int dim, tl_tensor **out) {
    tl_tensor *flipped = NULL, *scanned = NULL;
    tl_status status = flip_dim(t, dim, &flipped);
    if (status == TL_OK) status = tl_logcumsumexp(flipped, dim, &scanned);
    if (status == TL_OK) status = flip_dim(scanned, dim, out);
    tl_release(flipped), tl_release(scanned);
    return status;
}

/* y[j] = log sum over k <= j of exp(x[k]), so dx[i] = sum over j >= i of g[j] exp(x[i] - y[j]).
   With g split into its positive part p and negative part n, each sum is taken in the log
   domain, where nothing overflows: exp(x + R(log p - y)) - exp(x + R(log n - y)), R the reverse
   logcumsumexp (log 0 = -inf adds nothing). */
static tl_status logcumsumexp_part(tl_tensor *x, tl_tensor *y, tl_tensor *part, int d,
                                   tl_tensor **out) {
    tl_tensor *logs = NULL, *shifted = NULL, *summed = NULL, *exponent = NULL;
    tl_status status = tl_log(part, &logs);
    if (status == TL_OK) status = tl_sub(logs, y, &shifted);
    if (status == TL_OK) status = reverse_logcumsumexp(shifted, d, &summed);
    if (status == TL_OK) status = tl_add(x, summed, &exponent);
    if (status == TL_OK) status = tl_exp(exponent, out);
    tl_release(logs), tl_release(shifted), tl_release(summed), tl_release(exponent);
    return status;
}

static tl_status logcumsumexp_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *x, *y;
    TL_TRY(tl_node_saved(node, 0, &x));
    TL_TRY(tl_node_saved(node, 1, &y));
    tl_tensor *zero = NULL, *above = NULL, *below = NULL, *negated = NULL, *positive = NULL,
              *negative = NULL, *from_positive = NULL, *from_negative = NULL;
    tl_status status = number_like(g[0], 0, &zero);
    if (status == TL_OK) status = tl_gt(g[0], zero, &above);
    if (status == TL_OK) status = tl_lt(g[0], zero, &below);
    if (status == TL_OK) status = tl_neg(g[0], &negated);
    if (status == TL_OK) status = tl_where(above, g[0], zero, &positive);
    if (status == TL_OK) status = tl_where(below, negated, zero, &negative);
    if (status == TL_OK) status = logcumsumexp_part(x, y, positive, node->dim, &from_positive);
    if (status == TL_OK) status = logcumsumexp_part(x, y, negative, node->dim, &from_negative);
    if (status == TL_OK) status = tl_sub(from_positive, from_negative, &gi[0]);
    tl_release(zero), tl_release(above), tl_release(below), tl_release(negated);
    tl_release(positive), tl_release(negative), tl_release(from_positive);
    tl_release(from_negative);
    return status;
}

/* cummax, cummin: each value came from one element (its index): g goes back there, summed */
static tl_status running_extreme_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *indices, *zeros = NULL;
    TL_TRY(tl_node_saved(node, 0, &indices));
    tl_status status = tl_zeros(node->input_shape[0], node->input_ndim[0], g[0]->dtype,
                                tl_tensor_device(g[0]), &zeros);
    if (status == TL_OK) {
        const int dim = node->input_ndim[0] > 0 ? node->dim : 0;
        status = node->input_ndim[0] > 0 ? tl_scatter_add(zeros, dim, indices, g[0], &gi[0])
                                         : (gi[0] = tl_retain(g[0]), TL_OK);
    }
    tl_release(zeros);
    return status;
}

typedef tl_status (*cumulative_fn)(const tl_tensor *x, int dim, tl_tensor **out);

static tl_status record_cumulative(const char *name, cumulative_fn forward, tl_backward_fn backward,
                                   tl_tensor *x, int dim, tl_tensor **out) {
    TL_TRY(forward(x, dim, out));
    int d = 0;
    tl_node *node = NULL;
    tl_status status = x->ndim > 0 ? tl_wrap_dim(name, dim, x->ndim, &d) : TL_OK;
    if (status == TL_OK)
        status = tl_record(name, backward, 1, &x, out, &node); /* clears *out on failure */
    else
        tl_release(*out), *out = NULL;
    if (status == TL_OK && node) {
        node->dim = d;
        status = tl_record_save(node, 0, "self", x, out);
        if (status == TL_OK) status = tl_record_save(node, 1, "result", *out, out);
    }
    return status;
}

tl_status tl_ag_cumprod(tl_tensor *x, int dim, tl_tensor **out) {
    return record_cumulative("cumprod", tl_cumprod, cumprod_backward, x, dim, out);
}

tl_status tl_ag_logcumsumexp(tl_tensor *x, int dim, tl_tensor **out) {
    return record_cumulative("logcumsumexp", tl_logcumsumexp, logcumsumexp_backward, x, dim, out);
}

typedef tl_status (*extreme_fn)(const tl_tensor *x, int dim, tl_tensor **values,
                                tl_tensor **indices);

static tl_status record_extreme(const char *name, extreme_fn forward, tl_tensor *x, int dim,
                                tl_tensor **values, tl_tensor **indices) {
    TL_TRY(forward(x, dim, values, indices));
    int d = 0;
    tl_node *node = NULL;
    tl_status status = x->ndim > 0 ? tl_wrap_dim(name, dim, x->ndim, &d) : TL_OK;
    if (status == TL_OK)
        status = tl_record(name, running_extreme_backward, 1, &x, values, &node);
    else
        tl_release(*values), *values = NULL;
    if (status == TL_OK && node) {
        node->dim = d;
        status = tl_record_save(node, 0, "indices", *indices, values);
    }
    if (status != TL_OK) tl_release(*indices), *indices = NULL;
    return status;
}

tl_status tl_ag_cummax(tl_tensor *x, int dim, tl_tensor **values, tl_tensor **indices) {
    return record_extreme("cummax", tl_cummax, x, dim, values, indices);
}

tl_status tl_ag_cummin(tl_tensor *x, int dim, tl_tensor **values, tl_tensor **indices) {
    return record_extreme("cummin", tl_cummin, x, dim, values, indices);
}
