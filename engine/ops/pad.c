/* pad: constant padding as a fill and one copy of the overlap (negative pads cut), and the
   reflect, replicate and circular modes as each padded dim's edges (narrowed, flipped or
   expanded views of x) joined to it by cat. */
#include "core/size.h"
#include "ops/checks.h"
#include "ops/compose.h"
#include "tlua/ops.h"

static const char *mode_name(tl_pad_mode mode) {
    switch (mode) {
    case TL_PAD_CONSTANT:
        return "constant";
    case TL_PAD_REFLECT:
        return "reflect";
    case TL_PAD_REPLICATE:
        return "replicate";
    case TL_PAD_CIRCULAR:
        return "circular";
    }
    return "unknown";
}

/* The pads' count against x and each padded dim's size after padding (shape). */
static tl_status check_pads(const tl_tensor *x, const int64_t *pads, int npads, tl_pad_mode mode,
                            int64_t *shape) {
    const char *op = "pad";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    if ((unsigned)mode > TL_PAD_CIRCULAR)
        return tl_error(TL_ERR_ARGUMENT, "pad: unknown mode %d", (int)mode);
    if (npads < 0 || npads % 2 != 0 || npads / 2 > x->ndim)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: expected an even number of pads, two per padded dim, at most %d "
                        "for a tensor of %d dims, got %d",
                        op, 2 * x->ndim, x->ndim, npads);
    for (int k = 0; k < x->ndim; k++) shape[k] = x->shape[k];
    for (int i = 0; i < npads / 2; i++) {
        const int d = x->ndim - 1 - i;
        const int64_t n = x->shape[d], before = pads[2 * i], after = pads[2 * i + 1];
        if (mode != TL_PAD_CONSTANT) {
            const bool fits = mode == TL_PAD_REFLECT    ? before < n && after < n
                              : mode == TL_PAD_CIRCULAR ? before <= n && after <= n
                                                        : n > 0 || (before == 0 && after == 0);
            if (before < 0 || after < 0)
                return tl_error(TL_ERR_ARGUMENT,
                                "%s: %s mode takes pads >= 0, got %lld and %lld for dim %d", op,
                                mode_name(mode), (long long)before, (long long)after, d + 1);
            if (!fits)
                return tl_error(TL_ERR_ARGUMENT,
                                "%s: pads %lld and %lld do not fit dim %d of size %lld in %s "
                                "mode (expected %s)",
                                op, (long long)before, (long long)after, d + 1, (long long)n,
                                mode_name(mode),
                                mode == TL_PAD_REFLECT    ? "each < the size"
                                : mode == TL_PAD_CIRCULAR ? "each <= the size"
                                                          : "a dim with elements");
        }
        /* n + before + after, every term within +-2^62 */
        const int64_t limit = TL_MAX_NUMEL;
        if (before < -limit || before > limit || after < -limit || after > limit ||
            n + before > limit || n + before + after > limit || n + before + after < 0)
            return tl_error(TL_ERR_SHAPE,
                            "%s: dim %d of size %lld padded by %lld and %lld has no valid size", op,
                            d + 1, (long long)n, (long long)before, (long long)after);
        shape[d] = n + before + after;
    }
    int64_t numel;
    return tl_shape_numel(op, shape, x->ndim, &numel);
}

/* x padded with value: the result filled, then x's elements that remain copied to theirs (a
   result position j of a padded dim holds x's j - before) */
static tl_status pad_constant(tl_tensor *x, const int64_t *pads, int npads, tl_scalar value,
                              const int64_t *shape, tl_tensor **out) {
    tl_tensor *y = NULL, *target = NULL, *source = NULL;
    TL_TRY(tl_full(shape, x->ndim, value, x->dtype, tl_tensor_device(x), &y));
    tl_status status = TL_OK;
    target = tl_retain(y);
    source = tl_retain(x);
    bool empty = false;
    for (int i = 0; i < npads / 2 && status == TL_OK && !empty; i++) {
        const int d = x->ndim - 1 - i;
        const int64_t before = pads[2 * i], size = shape[d];
        const int64_t first = before > 0 ? before : 0;
        const int64_t end = x->shape[d] + before < size ? x->shape[d] + before : size;
        const int64_t length = end - first;
        if (length <= 0) {
            empty = true;
            break;
        }
        tl_tensor *t = NULL, *s = NULL;
        status = tl_narrow(target, d, first, length, &t);
        if (status == TL_OK) status = tl_narrow(source, d, first - before, length, &s);
        tl_release(target), tl_release(source);
        target = t, source = s;
    }
    if (status == TL_OK && !empty && tl_numel(source) > 0) status = tl_copy_(target, source);
    tl_release(target), tl_release(source);
    if (status != TL_OK) {
        tl_release(y);
        return status;
    }
    *out = y;
    return TL_OK;
}

/* One dim's edges: reflect mirrors the elements next to the edge (the edge itself not
   repeated), replicate repeats the edge element, circular takes the other end's elements. */
static tl_status edge(const tl_composer *c, tl_tensor *x, int d, int64_t count, bool front,
                      tl_pad_mode mode, tl_tensor **out) {
    const int64_t n = x->shape[d];
    tl_tensor *part = NULL;
    tl_status status;
    if (mode == TL_PAD_REFLECT) {
        TL_TRY(c->narrow(x, d, front ? 1 : n - 1 - count, count, &part));
        status = c->flip(part, &d, 1, out);
    } else if (mode == TL_PAD_REPLICATE) {
        int64_t shape[TL_MAX_DIMS];
        for (int k = 0; k < x->ndim; k++) shape[k] = k == d ? count : x->shape[k];
        TL_TRY(c->narrow(x, d, front ? 0 : n - 1, 1, &part));
        status = c->expand(part, shape, x->ndim, out);
    } else {
        return c->narrow(x, d, front ? n - count : 0, count, out);
    }
    tl_release(part);
    return status;
}

tl_status tl_pad_edges_with(const tl_composer *c, tl_tensor *x, const int64_t *pads, int npads,
                            tl_pad_mode mode, tl_tensor **out) {
    int64_t shape[TL_MAX_DIMS];
    TL_TRY(check_pads(x, pads, npads, mode, shape));
    if (mode == TL_PAD_CONSTANT)
        return tl_error(TL_ERR_ARGUMENT, "pad: constant mode has no edges to join");
    tl_tensor *cur = tl_retain(x);
    tl_status status = TL_OK;
    for (int i = 0; i < npads / 2 && status == TL_OK; i++) {
        const int d = x->ndim - 1 - i;
        const int64_t before = pads[2 * i], after = pads[2 * i + 1];
        if (before == 0 && after == 0) continue;
        tl_tensor *pieces[3] = {NULL, cur, NULL}, *joined = NULL;
        if (before > 0) status = edge(c, cur, d, before, true, mode, &pieces[0]);
        if (status == TL_OK && after > 0) status = edge(c, cur, d, after, false, mode, &pieces[2]);
        tl_tensor *list[3];
        int n = 0;
        for (int k = 0; k < 3; k++)
            if (pieces[k]) list[n++] = pieces[k];
        if (status == TL_OK) status = c->cat(list, n, d, &joined);
        tl_release(pieces[0]), tl_release(pieces[2]);
        if (status == TL_OK) {
            tl_release(cur);
            cur = joined;
        }
    }
    if (status == TL_OK && cur == x) {
        tl_tensor *copy = NULL;
        status = c->clone(cur, &copy);
        tl_release(cur);
        cur = status == TL_OK ? copy : NULL;
    }
    if (status != TL_OK) {
        tl_release(cur);
        return status;
    }
    *out = cur;
    return TL_OK;
}

tl_status tl_pad(tl_tensor *x, const int64_t *pads, int npads, tl_pad_mode mode, tl_scalar value,
                 tl_tensor **out) {
    int64_t shape[TL_MAX_DIMS];
    TL_TRY(check_pads(x, pads, npads, mode, shape));
    if (mode == TL_PAD_CONSTANT) return pad_constant(x, pads, npads, value, shape, out);
    return tl_pad_edges_with(&tl_plain_composer, x, pads, npads, mode, out);
}
