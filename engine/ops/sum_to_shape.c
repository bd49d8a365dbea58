/* tl_sum_to_shape: undoes broadcasting by summing over the broadcast dims. */
#include "tlua/ops.h"

tl_status tl_sum_to_shape(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out) {
    tl_tensor *current = t;
    tl_status status = TL_OK;
    while (status == TL_OK && current->ndim > ndim) { /* leading dims the target lacks */
        tl_tensor *next;
        status = tl_sum_dim(current, 0, false, &next);
        if (status == TL_OK) tl_release(current), current = next;
    }
    for (int d = 0; status == TL_OK && d < ndim; d++) {
        if (shape[d] != 1 || current->shape[d] == 1) continue;
        tl_tensor *next;
        status = tl_sum_dim(current, d, true, &next);
        if (status == TL_OK) tl_release(current), current = next;
    }
    if (status != TL_OK) {
        tl_release(current);
        return status;
    }
    *out = current;
    return TL_OK;
}
