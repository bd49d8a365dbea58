/* Shape arithmetic: broadcasting and dim wrapping. */
#include <stdio.h>

#include "tlua/tensor.h"

const char *tl_format_shape(const int64_t *shape, int ndim, char *buf, int size) {
    int used = snprintf(buf, (size_t)size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used +=
            snprintf(buf + used, (size_t)(size - used), d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < size) snprintf(buf + used, (size_t)(size - used), "]");
    return buf;
}

tl_status tl_broadcast_shapes(const char *op, const int64_t *a, int na, const int64_t *b, int nb,
                              int64_t *out, int *nout) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int da = na - n + i, db = nb - n + i;
        int64_t sa = da >= 0 ? a[da] : 1, sb = db >= 0 ? b[db] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            char sa_str[256], sb_str[256];
            tl_format_shape(a, na, sa_str, sizeof sa_str);
            tl_format_shape(b, nb, sb_str, sizeof sb_str);
            return tl_error(TL_ERR_SHAPE,
                            "%s: shapes %s and %s cannot be broadcast (size %lld vs %lld at "
                            "dim %d of the result)",
                            op, sa_str, sb_str, (long long)sa, (long long)sb, i + 1);
        }
        out[i] = sa == 1 ? sb : sa;
    }
    *nout = n;
    return TL_OK;
}

tl_status tl_wrap_dim(const char *op, int dim, int ndim, int *out) {
    int size = ndim > 0 ? ndim : 1; /* a 0-dim tensor accepts dim 0 and -1 */
    if (dim < -size || dim >= size)
        return tl_error(TL_ERR_INDEX,
                        "%s: dim %d is out of range for a tensor with %d dims (expected 1 to %d, "
                        "or -%d to -1 from the end)",
                        op, TL_DIM_FOR_USER(dim), ndim, size, size);
    *out = dim < 0 ? dim + size : dim;
    return TL_OK;
}
