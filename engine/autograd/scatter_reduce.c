/* Recording scatter_reduce and its gradients, composed of forward ops (torch's formulas): sum and
 * mean pass g through, prod divides the product by each factor (zeros handled apart), amax and
 * amin split g evenly among the values equal to the result. */
#include "autograd/formula.h"
#include "autograd/index.h"

/* saved slots */
enum { SAVED_INDEX, SAVED_SELF, SAVED_SRC, SAVED_RESULT };

/* where(t == 0, 1, t) */
static tl_status zeros_to_one(const tl_tensor *t, tl_tensor **out) {
    tl_tensor *zero = NULL, *one = NULL, *is_zero = NULL;
    tl_status status = tl_full(NULL, 0, tl_scalar_int(0), t->dtype, tl_tensor_device(t), &zero);
    if (status == TL_OK)
        status = tl_full(NULL, 0, tl_scalar_int(1), t->dtype, tl_tensor_device(t), &one);
    if (status == TL_OK) status = tl_eq(t, zero, &is_zero);
    if (status == TL_OK) status = tl_where(is_zero, one, t, out);
    tl_release(zero), tl_release(one), tl_release(is_zero);
    return status;
}

/* src's part that index reaches (index's shape: src may be larger), a view */
static tl_status reached(const tl_tensor *src, const tl_tensor *index, tl_tensor **out) {
    tl_tensor *part = tl_retain((tl_tensor *)src);
    for (int d = 0; d < index->ndim; d++) {
        tl_tensor *narrower = NULL;
        tl_status status = tl_narrow(part, d, 0, index->shape[d], &narrower);
        tl_release(part);
        if (status != TL_OK) return status;
        part = narrower;
    }
    *out = part;
    return TL_OK;
}

typedef struct grads {
    tl_tensor *self, *src; /* gradient of x (x's shape), of src's reached part (index's shape) */
} grads;

/* prod: x's gradient g * prod(others) = g * result / x, with x's zeros made 1 first (the product
   of the others); src's likewise, where a place's only zero gets g * the product of the others
   and a place with two zeros or more gives every factor 0 */
static tl_status prod_grads(tl_node *node, const tl_tensor *g, const tl_tensor *index,
                            const tl_tensor *self, const tl_tensor *src, const tl_tensor *result,
                            grads *out) {
    const int dim = node->dim;
    const bool include_self = node->ints[1];
    tl_tensor *t[12] = {NULL};
    tl_tensor *masked_self = NULL, *masked_result = NULL, *zero = NULL, *src_zero = NULL,
              *zeros_as = NULL, *zeros = NULL, *count = NULL, *one = NULL, *single = NULL,
              *masked_src = NULL, *masked_src_result = NULL, *safe_src = NULL;
    tl_status status = TL_OK;
    if (node->needs_input_grad[0]) {
        status = zeros_to_one(self, &masked_self);
        if (status == TL_OK)
            status = tl_scatter_reduce(masked_self, dim, index, src, "prod", include_self,
                                       &masked_result);
        if (status == TL_OK) status = tl_mul(g, masked_result, &t[0]);
        if (status == TL_OK) status = tl_div(t[0], masked_self, &out->self);
    }
    if (status == TL_OK && node->needs_input_grad[1]) {
        const tl_device dev = tl_tensor_device(g);
        status = tl_full(NULL, 0, tl_scalar_int(0), src->dtype, dev, &zero);
        if (status == TL_OK) status = tl_eq(src, zero, &src_zero);
        if (status == TL_OK) status = tl_cast(src_zero, src->dtype, &zeros_as);
        if (status == TL_OK) status = tl_zeros(self->shape, self->ndim, self->dtype, dev, &zeros);
        if (status == TL_OK) status = tl_scatter_add(zeros, dim, index, zeros_as, &t[1]);
        if (status == TL_OK) status = tl_gather(t[1], dim, index, &count); /* zeros at the place */
        if (status == TL_OK) status = tl_full(NULL, 0, tl_scalar_int(1), src->dtype, dev, &one);
        if (status == TL_OK) status = tl_eq(count, one, &t[2]);
        if (status == TL_OK) status = tl_where(src_zero, t[2], src_zero, &single);
        if (status == TL_OK) status = tl_where(single, one, src, &masked_src);
        if (status == TL_OK)
            status = tl_scatter_reduce(self, dim, index, masked_src, "prod", include_self,
                                       &masked_src_result);
        if (status == TL_OK) status = tl_mul(g, masked_src_result, &t[3]);
        if (status == TL_OK) status = tl_gather(t[3], dim, index, &t[4]);
        if (status == TL_OK) status = tl_mul(g, result, &t[5]);
        if (status == TL_OK) status = tl_gather(t[5], dim, index, &t[6]);
        if (status == TL_OK) status = tl_where(src_zero, one, src, &safe_src);
        if (status == TL_OK) status = tl_div(t[6], safe_src, &t[7]);
        if (status == TL_OK) status = tl_where(single, t[4], t[7], &out->src);
    }
    for (int i = 0; i < 12; i++) tl_release(t[i]);
    tl_release(masked_self), tl_release(masked_result), tl_release(zero), tl_release(src_zero);
    tl_release(zeros_as), tl_release(zeros), tl_release(count), tl_release(one);
    tl_release(single), tl_release(masked_src), tl_release(masked_src_result);
    tl_release(safe_src);
    return status;
}

/* amax, amin: g split evenly among the values equal to the result at each place (x's own only
   when include_self; torch 1.13 counts it even then, which we do not) */
static tl_status extreme_grads(tl_node *node, const tl_tensor *g, const tl_tensor *index,
                               const tl_tensor *self, const tl_tensor *src, const tl_tensor *result,
                               grads *out) {
    const int dim = node->dim;
    tl_tensor *value = NULL, *self_eq = NULL, *self_is = NULL, *src_eq = NULL, *src_is = NULL,
              *count = NULL, *shared = NULL, *shared_at = NULL, *own = NULL;
    tl_status status = tl_gather(result, dim, index, &value);
    if (status == TL_OK) status = tl_eq(self, result, &self_eq);
    if (status == TL_OK) status = tl_cast(self_eq, g->dtype, &own);
    if (status == TL_OK && !node->ints[1]) /* x's own values did not take part */
        status = tl_scatter_value(own, dim, index, tl_scalar_int(0), &self_is);
    else if (status == TL_OK)
        self_is = tl_retain(own);
    if (status == TL_OK) status = tl_eq(src, value, &src_eq);
    if (status == TL_OK) status = tl_cast(src_eq, g->dtype, &src_is);
    if (status == TL_OK) status = tl_scatter_add(self_is, dim, index, src_is, &count);
    if (status == TL_OK) status = tl_div(g, count, &shared); /* 0 / 0 where nobody ties: unused */
    if (status == TL_OK && node->needs_input_grad[0]) status = tl_mul(self_is, shared, &out->self);
    if (status == TL_OK && node->needs_input_grad[1]) {
        status = tl_gather(shared, dim, index, &shared_at);
        if (status == TL_OK) status = tl_mul(src_is, shared_at, &out->src);
    }
    tl_release(value), tl_release(self_eq), tl_release(self_is), tl_release(src_eq);
    tl_release(src_is), tl_release(count), tl_release(shared), tl_release(shared_at);
    tl_release(own);
    return status;
}

/* sum: g itself and g read back; mean: the same divided by the count at each place */
static tl_status mean_grads(tl_node *node, const tl_tensor *g, const tl_tensor *index,
                            const tl_tensor *src, bool mean, grads *out) {
    tl_tensor *count = NULL, *scaled = NULL;
    tl_status status = TL_OK;
    if (mean) {
        status = tl_scatter_reduce_count(g, node->dim, index, src, node->ints[1], &count);
        if (status == TL_OK) status = tl_div(g, count, &scaled);
    } else {
        scaled = tl_retain((tl_tensor *)g);
    }
    if (status == TL_OK && node->needs_input_grad[0]) out->self = tl_retain(scaled);
    if (status == TL_OK && node->needs_input_grad[1])
        status = tl_gather(scaled, node->dim, index, &out->src);
    tl_release(count), tl_release(scaled);
    return status;
}

/* Saved: index; x, src and the result for prod, amax and amin. */
static tl_status scatter_reduce_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const tl_scatter_reduction how = (tl_scatter_reduction)node->ints[0];
    tl_tensor *index, *self = NULL, *src = NULL, *result = NULL, *part = NULL;
    TL_TRY(tl_node_saved(node, SAVED_INDEX, &index));
    const bool sum_like = how == TL_SCATTER_REDUCE_SUM || how == TL_SCATTER_REDUCE_MEAN;
    if (!sum_like) {
        TL_TRY(tl_node_saved(node, SAVED_SELF, &self));
        TL_TRY(tl_node_saved(node, SAVED_RESULT, &result));
    }
    if (!sum_like || how == TL_SCATTER_REDUCE_MEAN) TL_TRY(tl_node_saved(node, SAVED_SRC, &src));
    grads out = {NULL, NULL};
    tl_status status = src ? reached(src, index, &part) : TL_OK;
    if (status == TL_OK && sum_like)
        status = mean_grads(node, g[0], index, part, how == TL_SCATTER_REDUCE_MEAN, &out);
    else if (status == TL_OK && how == TL_SCATTER_REDUCE_PROD)
        status = prod_grads(node, g[0], index, self, part, result, &out);
    else if (status == TL_OK)
        status = extreme_grads(node, g[0], index, self, part, result, &out);
    /* the places src reached lost x's value when include_self is false */
    if (status == TL_OK && out.self && !node->ints[1]) {
        tl_tensor *zeroed = NULL;
        status = tl_scatter_value(out.self, node->dim, index, tl_scalar_int(0), &zeroed);
        tl_release(out.self);
        out.self = zeroed;
    }
    if (status == TL_OK && out.src) {
        status = tl_scatter_src_grad(node, out.src, &gi[1]);
        out.src = NULL; /* taken */
    }
    if (status == TL_OK) gi[0] = out.self, out.self = NULL;
    tl_release(part), tl_release(out.self), tl_release(out.src);
    return status;
}

tl_status tl_ag_scatter_reduce(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src,
                               const char *reduce, bool include_self, tl_tensor **out) {
    TL_TRY(tl_scatter_reduce(x, dim, index, src, reduce, include_self, out));
    tl_node *node;
    TL_TRY(tl_record("scatter_reduce", scatter_reduce_backward, 2, (tl_tensor *[]){x, src}, out,
                     &node)); /* releases *out */
    if (!node) return TL_OK;
    tl_scatter_reduction how;
    TL_TRY(tl_scatter_reduction_parse(reduce, &how));
    TL_TRY(tl_wrap_dim("scatter_reduce", dim, x->ndim, &node->dim));
    node->ints[0] = how;
    node->ints[1] = include_self;
    TL_TRY(tl_record_save(node, SAVED_INDEX, "index", index, out));
    if (how == TL_SCATTER_REDUCE_SUM) return TL_OK;
    TL_TRY(tl_record_save(node, SAVED_SRC, "src", src, out));
    if (how == TL_SCATTER_REDUCE_MEAN) return TL_OK;
    TL_TRY(tl_record_save(node, SAVED_SELF, "self", x, out));
    return tl_record_save(node, SAVED_RESULT, "result", *out, out);
}
