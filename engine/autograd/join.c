/* Recording cat: each piece's gradient is a view of the result's gradient. */
#include "autograd/formula.h"

/* node->dim: the joined dim; the pieces' sizes along it come from their recorded shapes (an
   empty piece, skipped by cat, takes a zero gradient of its shape). */
static tl_status cat_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    int64_t at = 0;
    for (int i = 0; i < node->num_inputs; i++) {
        int64_t numel = 1;
        for (int k = 0; k < node->input_ndim[i]; k++) numel *= node->input_shape[i][k];
        const int64_t size = numel ? node->input_shape[i][node->dim] : 0;
        tl_status status = TL_OK;
        if (node->needs_input_grad[i]) {
            status = numel ? tl_narrow(g[0], node->dim, at, size, &gi[i])
                           : tl_zeros(node->input_shape[i], node->input_ndim[i],
                                      node->input_dtype[i], node->input_device[i], &gi[i]);
        }
        if (status != TL_OK) return status;
        at += size;
    }
    return TL_OK;
}

tl_status tl_ag_cat(tl_tensor *const *list, int n, int dim, tl_tensor **out) {
    TL_TRY(tl_cat(list, n, dim, out));
    int r = 0;
    while (r < n - 1 && tl_numel(list[r]) == 0) r++;
    tl_node *node;
    TL_TRY(tl_record("cat", cat_backward, n, list, *out, &node)); /* releases *out */
    if (node) TL_TRY(tl_wrap_dim("cat", dim, list[r]->ndim, &node->dim));
    return TL_OK;
}
