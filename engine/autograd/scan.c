/* Recording cumsum: its gradient is composed of forward ops (sum, cumsum, sub, add). */
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
        status = tl_record("cumsum", cumsum_backward, 1, &x, *out, &node); /* releases *out */
    else
        tl_release(*out);
    if (status == TL_OK && node) node->dim = d;
    return status;
}
