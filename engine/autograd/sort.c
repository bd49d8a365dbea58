/* Recording sort, topk, kthvalue and median: values picked from x at the positions the indices
 * name, so their gradient is g put back at those positions, a scatter_add into zeros. */
#include "autograd/formula.h"

/* x's gradient: zeros like x with g added at the saved indices along node->dim (g and the
   indices unsqueezed there when the op removed that dim: node->keepdim false). Saved: indices. */
static tl_status selection_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *index, *zeros = NULL, *grad = NULL;
    TL_TRY(tl_node_saved(node, 0, &index));
    tl_status status = node->keepdim || node->input_ndim[0] == 0
                           ? (grad = tl_retain(g[0]), TL_OK)
                           : tl_unsqueeze(g[0], node->dim, &grad);
    if (status == TL_OK)
        status = tl_zeros(node->input_shape[0], node->input_ndim[0], node->input_dtype[0],
                          node->input_device[0], &zeros);
    if (status == TL_OK) status = tl_scatter_add(zeros, node->dim, index, grad, &gi[0]);
    tl_release(zeros), tl_release(grad);
    return status;
}

/* After a forward (status) that gave values and indices of x along dim: records values' node
   (saving the indices with x's rank) or, on failure, releases nothing it was not given. */
static tl_status record_selection(const char *name, tl_status status, tl_tensor *x, int dim,
                                  bool keepdim, tl_tensor **values, tl_tensor **indices) {
    TL_TRY(status);
    int d;
    status = tl_wrap_dim(name, dim, x->ndim, &d);
    tl_node *node = NULL;
    if (status == TL_OK)
        status = tl_record(name, selection_backward, 1, &x, values, &node); /* clears *values */
    else
        tl_release(*values), *values = NULL;
    if (status != TL_OK || !node) {
        if (status != TL_OK) tl_release(*indices), *indices = NULL;
        return status;
    }
    node->dim = d;
    node->keepdim = keepdim;
    tl_tensor *saved = NULL;
    status = keepdim || x->ndim == 0 ? (saved = tl_retain(*indices), TL_OK)
                                     : tl_unsqueeze(*indices, d, &saved);
    if (status == TL_OK) status = tl_record_save(node, 0, "indices", saved, values);
    tl_release(saved);
    if (status != TL_OK) tl_release(*indices), *indices = NULL; /* values: cleared by the save */
    return status;
}

tl_status tl_ag_sort_from(tl_tensor *x, int dim, bool descending, int64_t base, tl_tensor **values,
                          tl_tensor **indices) {
    return record_selection("sort", tl_sort_from(x, dim, descending, base, values, indices), x, dim,
                            true, values, indices);
}

tl_status tl_ag_sort(tl_tensor *x, int dim, bool descending, tl_tensor **values,
                     tl_tensor **indices) {
    return tl_ag_sort_from(x, dim, descending, 0, values, indices);
}

tl_status tl_ag_topk(tl_tensor *x, int64_t k, int dim, bool largest, tl_tensor **values,
                     tl_tensor **indices) {
    return record_selection("topk", tl_topk(x, k, dim, largest, values, indices), x, dim, true,
                            values, indices);
}

tl_status tl_ag_kthvalue(tl_tensor *x, int64_t k, int dim, bool keepdim, tl_tensor **values,
                         tl_tensor **indices) {
    return record_selection("kthvalue", tl_kthvalue(x, k, dim, keepdim, values, indices), x, dim,
                            keepdim, values, indices);
}

tl_status tl_ag_median_dim(tl_tensor *x, int dim, bool keepdim, tl_tensor **values,
                           tl_tensor **indices) {
    return record_selection("median", tl_median_dim(x, dim, keepdim, values, indices), x, dim,
                            keepdim, values, indices);
}

/* the median of every element: of x flattened (recorded, a view), along its one dim */
tl_status tl_ag_median_all(tl_tensor *x, tl_tensor **out) {
    if (!x) return tl_median_all(x, out);
    if (tl_numel(x) == 0) return tl_median_all(x, out);
    tl_tensor *flat, *indices;
    TL_TRY(tl_ag_reshape(x, (const int64_t[]){tl_numel(x)}, 1, &flat));
    const tl_status status = tl_ag_median_dim(flat, 0, false, out, &indices);
    tl_release(flat);
    if (status == TL_OK) tl_release(indices);
    return status;
}
