/* embedding as ops: indices range-checked before any write, gather forward, scatter backward. */
#include "ops/nn/nn_common.h"

static tl_status check_indices(const char *op, const tl_tensor *indices, int64_t rows,
                               const char *rows_of) {
    TL_TRY(nn_check_integer(op, "indices", indices));
    if (indices->ndim >= TL_MAX_DIMS)
        return tl_error(TL_ERR_SHAPE, "%s: indices may have at most %d dims, got %d", op,
                        TL_MAX_DIMS - 1, indices->ndim);
    const tl_index_range range = {
        .op = op, .what = "indices", .range_of = rows_of, .first = 0, .count = rows};
    return tl_check_index_range(indices, &range);
}

tl_status tl_embedding(const tl_tensor *indices, const tl_tensor *weight, tl_tensor **out) {
    const char *op = "embedding";
    char sw[256];
    if (weight->ndim != 2)
        return tl_error(TL_ERR_SHAPE,
                        "embedding: weight must be [num_embeddings, embedding_dim], got shape %s",
                        tl_shape_str(weight, sw, sizeof sw));
    TL_TRY(nn_check_floating(op, "weight", weight));
    TL_TRY(nn_check_like(op, "weight", weight, "indices", indices, false));
    TL_TRY(check_indices(op, indices, weight->shape[0], "the rows of weight"));
    int64_t shape[TL_MAX_DIMS];
    memcpy(shape, indices->shape, sizeof shape[0] * (size_t)indices->ndim);
    shape[indices->ndim] = weight->shape[1];
    tl_device device = tl_tensor_device(weight);
    tl_tensor *idx = NULL, *w = NULL, *result = NULL;
    tl_status status = tl_contiguous((tl_tensor *)indices, &idx);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)weight, &w);
    if (status == TL_OK)
        status = tl_empty(shape, indices->ndim + 1, weight->dtype, device, &result);
    if (status == TL_OK) {
        const tl_kernel_entry *k =
            tl_dispatch(TL_OP_embedding, device, weight->dtype, NN_TENSORS(result, w, idx));
        status = !k                      ? tl_dispatch_status()
                 : tl_numel(result) == 0 ? TL_OK /* nothing to gather */
                                         : k->fn.embedding(result, w, idx);
    }
    tl_release(idx), tl_release(w);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

tl_status tl_embedding_backward(const tl_tensor *grad, const tl_tensor *indices,
                                int64_t num_weights, tl_tensor **grad_weight) {
    const char *op = "embedding_backward";
    char sg[256], si[256];
    TL_TRY(nn_check_floating(op, "grad", grad));
    TL_TRY(nn_check_like(op, "grad", grad, "indices", indices, false));
    if (num_weights < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: num_weights must be >= 0, got %lld", op,
                        (long long)num_weights);
    if (grad->ndim != indices->ndim + 1 ||
        memcmp(grad->shape, indices->shape, sizeof grad->shape[0] * (size_t)indices->ndim) != 0)
        return tl_error(TL_ERR_SHAPE,
                        "%s: grad must have the shape of indices plus the embedding dim, got grad "
                        "%s for indices %s",
                        op, tl_shape_str(grad, sg, sizeof sg),
                        tl_shape_str(indices, si, sizeof si));
    TL_TRY(check_indices(op, indices, num_weights, "the rows of the weight"));
    int64_t shape[2] = {num_weights, grad->shape[grad->ndim - 1]};
    tl_device device = tl_tensor_device(grad);
    tl_tensor *idx = NULL, *g = NULL, *result = NULL;
    tl_status status = tl_contiguous((tl_tensor *)indices, &idx);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)grad, &g);
    if (status == TL_OK) status = tl_empty(shape, 2, grad->dtype, device, &result);
    if (status == TL_OK) {
        const tl_kernel_entry *k =
            tl_dispatch(TL_OP_embedding_backward, device, grad->dtype, NN_TENSORS(result, g, idx));
        /* an empty result (e.g. [2^40, 0]) has nothing to write: no loop over its rows */
        status = !k                      ? tl_dispatch_status()
                 : tl_numel(result) == 0 ? TL_OK
                                         : k->fn.embedding(result, g, idx);
    }
    tl_release(idx), tl_release(g);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *grad_weight = result;
    return TL_OK;
}
