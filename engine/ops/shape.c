/* Shape ops made of other ops' kernels: tril and triu (a mask from two ranges, then where), flip
   and roll (index_select by positions computed once per dim), tile and repeat_interleave (expand
   and reshape, or index_select by counts), diag_embed and diag, one_hot. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/size.h"
#include "ops/checks.h"
#include "ops/compose.h"
#include "tlua/nn.h"
#include "tlua/ops.h"

/* ---- the plain composer: the functional ops themselves ------------------------------------ */
static tl_status plain_clone(tl_tensor *t, tl_tensor **out) {
    return tl_clone(t, out);
}
static tl_status plain_index_select(tl_tensor *x, int dim, tl_tensor *index, tl_tensor **out) {
    return tl_index_select(x, dim, index, out);
}
static tl_status plain_where(tl_tensor *cond, tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    return tl_where(cond, a, b, out);
}
const tl_composer tl_plain_composer = {
    .narrow = tl_narrow,
    .reshape = tl_reshape,
    .expand = tl_expand,
    .clone = plain_clone,
    .cat = tl_cat,
    .flip = tl_flip,
    .index_select = plain_index_select,
    .where = plain_where,
    .diagonal = tl_diagonal,
    .diag_embed = tl_diag_embed,
};

/* After a step that made *next from *cur (status): *cur released and replaced by *next. Chains
   steps over one tensor: step(op(cur, ..., &next), &cur, &next). */
static tl_status step(tl_status status, tl_tensor **cur, tl_tensor **next) {
    if (status != TL_OK) return status;
    tl_release(*cur);
    *cur = *next;
    *next = NULL;
    return TL_OK;
}

/* A 1-d int64 tensor of n positions on device, position(i, arg) for i in 0 .. n-1 (an index
   for index_select: n is one dim's size, not an element count). */
typedef int64_t (*position_fn)(int64_t i, const int64_t *arg);
static tl_status positions(int64_t n, position_fn position, const int64_t *arg, tl_device device,
                           tl_tensor **out) {
    /* a dim of a view (an expand) may be far larger than any buffer of positions */
    if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(int64_t))
        return tl_error(TL_ERR_MEMORY, "out of memory for %lld positions", (long long)n);
    int64_t *values = malloc(sizeof *values * (size_t)(n > 0 ? n : 1));
    if (!values) return tl_error(TL_ERR_MEMORY, "out of memory for %lld positions", (long long)n);
    for (int64_t i = 0; i < n; i++) values[i] = position(i, arg);
    tl_status status = tl_from_host(values, &n, 1, TL_I64, device, out);
    free(values);
    return status;
}

/* ---- tril, triu ---------------------------------------------------------------------------- */
/* bool [rows, cols]: column - row <= k (lower) or >= k (upper), from two ranges */
static tl_status triangle_mask(int64_t rows, int64_t cols, int64_t k, bool upper, tl_device device,
                               tl_tensor **mask) {
    tl_tensor *row = NULL, *col = NULL, *column = NULL, *diff = NULL, *bound = NULL;
    const int64_t as_column[2] = {rows, 1};
    tl_status status = tl_arange_int(0, rows, 1, TL_I64, device, &row);
    if (status == TL_OK) status = tl_arange_int(0, cols, 1, TL_I64, device, &col);
    if (status == TL_OK) status = tl_reshape(row, as_column, 2, &column);
    if (status == TL_OK) status = tl_sub(col, column, &diff);
    const int64_t scalar_shape = 1; /* unread: a 0-dim tensor */
    if (status == TL_OK)
        status = tl_full(&scalar_shape, 0, tl_scalar_int(k), TL_I64, device, &bound);
    if (status == TL_OK) status = upper ? tl_ge(diff, bound, mask) : tl_le(diff, bound, mask);
    tl_release(row), tl_release(col), tl_release(column), tl_release(diff), tl_release(bound);
    return status;
}

tl_status tl_triangle_with(const tl_composer *c, tl_tensor *x, int64_t k, bool upper,
                           tl_tensor **out) {
    const char *op = upper ? "triu" : "tril";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    if (x->ndim < 2)
        return tl_error(TL_ERR_SHAPE, "%s: expected a tensor of at least 2 dims, got %d", op,
                        x->ndim);
    tl_tensor *mask = NULL, *zero = NULL;
    const tl_device device = tl_tensor_device(x);
    tl_status status =
        triangle_mask(x->shape[x->ndim - 2], x->shape[x->ndim - 1], k, upper, device, &mask);
    const int64_t scalar_shape = 1; /* unread: a 0-dim tensor */
    if (status == TL_OK) status = tl_zeros(&scalar_shape, 0, x->dtype, device, &zero);
    if (status == TL_OK) status = c->where(mask, x, zero, out);
    tl_release(mask), tl_release(zero);
    return status;
}

tl_status tl_tril(const tl_tensor *x, int64_t k, tl_tensor **out) {
    return tl_triangle_with(&tl_plain_composer, (tl_tensor *)x, k, false, out);
}
tl_status tl_triu(const tl_tensor *x, int64_t k, tl_tensor **out) {
    return tl_triangle_with(&tl_plain_composer, (tl_tensor *)x, k, true, out);
}

/* ---- flip, roll: index_select by a permutation per dim ----------------------------------- */
tl_status tl_flip_dims(const tl_tensor *x, const int *dims, int ndims, int *wrapped) {
    TL_TRY(tl_check_tensor_arg("flip", "x", x));
    if (ndims < 0 || ndims > TL_MAX_DIMS)
        return tl_error(TL_ERR_ARGUMENT, "flip: expected at most %d dims, got %d", TL_MAX_DIMS,
                        ndims);
    for (int i = 0; i < ndims; i++) {
        TL_TRY(tl_wrap_dim("flip", dims[i], x->ndim, &wrapped[i]));
        for (int j = 0; j < i; j++)
            if (wrapped[j] == wrapped[i])
                return tl_error(TL_ERR_ARGUMENT, "flip: dim %d appears twice in dims",
                                wrapped[i] + 1);
    }
    return TL_OK;
}

static int64_t reversed(int64_t i, const int64_t *size) {
    return size[0] - 1 - i;
}
/* arg = {size, shift}: out[i] = x[(i - shift) mod size], shift in [0, size) */
static int64_t shifted(int64_t i, const int64_t *arg) {
    return i >= arg[1] ? i - arg[1] : i - arg[1] + arg[0];
}

/* x with dim d's slices taken at index(i) for each dim where moves[d] (a copy when none) */
static tl_status select_along(tl_tensor *x, const int64_t *arg_of, const bool *moves,
                              position_fn position, int stride, tl_tensor **out) {
    tl_tensor *cur = tl_retain(x);
    tl_status status = TL_OK;
    bool copied = false;
    for (int d = 0; d < x->ndim && status == TL_OK; d++) {
        if (!moves[d]) continue;
        tl_tensor *index = NULL, *next = NULL;
        status = positions(x->shape[d], position, arg_of + d * stride, tl_tensor_device(x), &index);
        if (status == TL_OK) status = tl_index_select(cur, d, index, &next);
        tl_release(index);
        status = step(status, &cur, &next);
        copied = true;
    }
    if (status == TL_OK && !copied) {
        tl_tensor *copy = NULL;
        status = step(tl_clone(cur, &copy), &cur, &copy);
    }
    if (status != TL_OK) {
        tl_release(cur);
        return status;
    }
    *out = cur;
    return TL_OK;
}

tl_status tl_flip(tl_tensor *x, const int *dims, int ndims, tl_tensor **out) {
    int wrapped[TL_MAX_DIMS];
    TL_TRY(tl_flip_dims(x, dims, ndims, wrapped));
    bool moves[TL_MAX_DIMS] = {false};
    int64_t sizes[TL_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) sizes[d] = x->shape[d];
    for (int i = 0; i < ndims; i++) moves[wrapped[i]] = x->ndim > 0 && x->shape[wrapped[i]] > 1;
    return select_along(x, sizes, moves, reversed, 1, out);
}

tl_status tl_roll_shifts(const tl_tensor *x, const int64_t *shifts, const int *dims, int n,
                         int64_t *shift) {
    const char *op = "roll";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    if (n == 0) {
        const int64_t numel = tl_numel(x);
        shift[0] = numel > 0 ? ((shifts[0] % numel) + numel) % numel : 0;
        return TL_OK;
    }
    if (n < 0 || n > TL_MAX_DIMS)
        return tl_error(TL_ERR_ARGUMENT, "%s: expected at most %d shifts, got %d", op, TL_MAX_DIMS,
                        n);
    for (int d = 0; d < x->ndim; d++) shift[d] = 0;
    for (int i = 0; i < n; i++) {
        int d;
        TL_TRY(tl_wrap_dim(op, dims[i], x->ndim, &d));
        if (x->ndim == 0) continue;
        const int64_t size = x->shape[d];
        if (size == 0) continue;
        shift[d] = (shift[d] + ((shifts[i] % size) + size) % size) % size;
    }
    return TL_OK;
}

tl_status tl_roll_normalized(tl_tensor *x, const int64_t *shift, bool flat, tl_tensor **out) {
    if (flat) {
        const int64_t numel = tl_numel(x);
        tl_tensor *line = NULL, *rolled = NULL;
        TL_TRY(tl_reshape(x, &numel, 1, &line));
        tl_status status = tl_roll_normalized(line, shift, false, &rolled);
        if (status == TL_OK) status = tl_view(rolled, x->shape, x->ndim, out);
        tl_release(line), tl_release(rolled);
        return status;
    }
    bool moves[TL_MAX_DIMS] = {false};
    int64_t args[2 * TL_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        moves[d] = shift[d] != 0;
        args[2 * d] = x->shape[d];
        args[2 * d + 1] = shift[d];
    }
    return select_along(x, args, moves, shifted, 2, out);
}

tl_status tl_roll(tl_tensor *x, const int64_t *shifts, const int *dims, int n, tl_tensor **out) {
    int64_t shift[TL_MAX_DIMS];
    TL_TRY(tl_roll_shifts(x, shifts, dims, n, shift));
    return tl_roll_normalized(x, shift, n == 0, out);
}

/* ---- tile, repeat_interleave: expand and reshape ------------------------------------------ */
/* A copy of *t when it still shares x's storage (a reshape that could view), else *t. */
static tl_status own_copy(const tl_composer *c, const tl_tensor *x, tl_tensor **t) {
    if ((*t)->storage != x->storage) return TL_OK;
    tl_tensor *copy = NULL;
    return step(c->clone(*t, &copy), t, &copy);
}

/* x (already of rank n) tiled by reps in one copy: [.., 1, s, ..] expanded to [.., r, s, ..]
   for each dim with r != 1, then reshaped to [.., r s, ..] (needs n + that count <= max dims) */
static tl_status tile_once(const tl_composer *c, tl_tensor *x, const int64_t *reps,
                           tl_tensor **out) {
    int64_t inserted[TL_MAX_DIMS], expanded[TL_MAX_DIMS], result[TL_MAX_DIMS];
    int m = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (reps[d] != 1) {
            inserted[m] = 1;
            expanded[m++] = reps[d];
        }
        inserted[m] = x->shape[d];
        expanded[m++] = x->shape[d];
        result[d] = x->shape[d] * reps[d]; /* checked by tl_tile_with */
    }
    tl_tensor *cur = NULL, *next = NULL;
    tl_status status = c->reshape(x, inserted, m, &cur);
    if (status == TL_OK) status = step(c->expand(cur, expanded, m, &next), &cur, &next);
    if (status == TL_OK) status = step(c->reshape(cur, result, x->ndim, &next), &cur, &next);
    if (status == TL_OK) status = own_copy(c, x, &cur);
    if (status != TL_OK) {
        tl_release(cur);
        return status;
    }
    *out = cur;
    return TL_OK;
}

tl_status tl_tile_with(const tl_composer *c, tl_tensor *x, const int64_t *reps, int n,
                       tl_tensor **out) {
    const char *op = "tile";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    if (n < 0 || n > TL_MAX_DIMS)
        return tl_error(TL_ERR_ARGUMENT, "%s: expected at most %d reps, got %d", op, TL_MAX_DIMS,
                        n);
    const int nd = n > x->ndim ? n : x->ndim;
    int64_t shape[TL_MAX_DIMS], r[TL_MAX_DIMS], result[TL_MAX_DIMS];
    int moved = 0;
    for (int d = 0; d < nd; d++) {
        const int xi = d - (nd - x->ndim), ri = d - (nd - n);
        shape[d] = xi >= 0 ? x->shape[xi] : 1;
        r[d] = ri >= 0 ? reps[ri] : 1;
        if (r[d] < 0)
            return tl_error(TL_ERR_ARGUMENT, "%s: reps[%d] is %lld, expected >= 0", op, ri + 1,
                            (long long)r[d]);
        if (!tl_size_mul(shape[d], r[d], &result[d]))
            return tl_error(TL_ERR_SHAPE,
                            "%s: dim %d of size %lld repeated %lld times is too "
                            "large",
                            op, d + 1, (long long)shape[d], (long long)r[d]);
        moved += r[d] != 1;
    }
    int64_t numel;
    TL_TRY(tl_shape_numel(op, result, nd, &numel));
    tl_tensor *cur = NULL, *next = NULL;
    tl_status status = c->reshape(x, shape, nd, &cur); /* leading ones: a view */
    if (status == TL_OK && nd + moved <= TL_MAX_DIMS) {
        status = step(tile_once(c, cur, r, &next), &cur, &next);
    } else {
        /* one dim at a time when inserting a dim before each would pass the rank limit */
        for (int d = 0; d < nd && status == TL_OK; d++) {
            if (r[d] == 1) continue;
            int64_t one[TL_MAX_DIMS];
            for (int k = 0; k < nd; k++) one[k] = k == d ? r[d] : 1;
            status = step(tile_once(c, cur, one, &next), &cur, &next);
        }
    }
    if (status == TL_OK) status = own_copy(c, x, &cur);
    if (status != TL_OK) {
        tl_release(cur);
        return status;
    }
    *out = cur;
    return TL_OK;
}

tl_status tl_tile(tl_tensor *x, const int64_t *reps, int n, tl_tensor **out) {
    return tl_tile_with(&tl_plain_composer, x, reps, n, out);
}

/* x, or its elements as one dim (flatten), and the dim repeat_interleave works along */
static tl_status interleave_source(const tl_composer *c, tl_tensor *x, int dim, bool flatten,
                                   tl_tensor **source, int *d) {
    const char *op = "repeat_interleave";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    if (flatten) {
        const int64_t numel = tl_numel(x);
        *d = 0;
        return c->reshape(x, &numel, 1, source);
    }
    if (x->ndim == 0)
        return tl_error(TL_ERR_SHAPE,
                        "%s: a 0-dim tensor has no dim %d (give no dim to repeat "
                        "its element)",
                        op, TL_DIM_FOR_USER(dim));
    TL_TRY(tl_wrap_dim(op, dim, x->ndim, d));
    *source = tl_retain(x);
    return TL_OK;
}

/* arg = {repeats}: the slice output position i copies */
static int64_t interleaved(int64_t i, const int64_t *repeats) {
    return i / repeats[0];
}

tl_status tl_repeat_interleave_with(const tl_composer *c, tl_tensor *x, int64_t repeats, int dim,
                                    bool flatten, tl_tensor **out) {
    const char *op = "repeat_interleave";
    if (repeats < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: repeats must be >= 0, got %lld", op,
                        (long long)repeats);
    tl_tensor *cur = NULL, *next = NULL;
    int d;
    TL_TRY(interleave_source(c, x, dim, flatten, &cur, &d));
    const int n = cur->ndim;
    int64_t inserted[TL_MAX_DIMS], expanded[TL_MAX_DIMS], result[TL_MAX_DIMS];
    for (int k = 0, m = 0; k < n; k++) {
        inserted[m] = expanded[m] = result[k] = cur->shape[k];
        m++;
        if (k == d) {
            inserted[m] = 1;
            expanded[m++] = repeats;
        }
    }
    tl_status status = TL_OK;
    if (!tl_size_mul(cur->shape[d], repeats, &result[d]))
        status = tl_error(TL_ERR_SHAPE, "%s: %lld slices repeated %lld times are too many", op,
                          (long long)cur->shape[d], (long long)repeats);
    int64_t numel;
    if (status == TL_OK) status = tl_shape_numel(op, result, n, &numel);
    if (status == TL_OK && n < TL_MAX_DIMS) {
        status = step(c->reshape(cur, inserted, n + 1, &next), &cur, &next);
        if (status == TL_OK) status = step(c->expand(cur, expanded, n + 1, &next), &cur, &next);
        if (status == TL_OK) status = step(c->reshape(cur, result, n, &next), &cur, &next);
    } else if (status == TL_OK) { /* no room for one more dim: gather the slices */
        tl_tensor *index = NULL;
        status = positions(result[d], interleaved, &repeats, tl_tensor_device(x), &index);
        if (status == TL_OK) status = step(c->index_select(cur, d, index, &next), &cur, &next);
        tl_release(index);
    }
    if (status == TL_OK) status = own_copy(c, x, &cur);
    if (status != TL_OK) {
        tl_release(cur);
        return status;
    }
    *out = cur;
    return TL_OK;
}

tl_status tl_repeat_interleave(tl_tensor *x, int64_t repeats, int dim, bool flatten,
                               tl_tensor **out) {
    return tl_repeat_interleave_with(&tl_plain_composer, x, repeats, dim, flatten, out);
}

/* The slice each output position copies, for counts c (int64 [n], >= 0, total elements):
   ends = cumsum(c); one mark added at each end (marks has total + 1 places, ends <= total); the
   running count of marks at position i is how many slices end at or before i: i's slice. */
static tl_status slice_of_position(const tl_tensor *counts, int64_t total, tl_tensor **index) {
    const tl_device device = tl_tensor_device(counts);
    const int64_t places = total + 1;
    tl_tensor *ends = NULL, *zeros = NULL, *ones = NULL, *marks = NULL, *running = NULL;
    tl_status status = tl_cumsum(counts, 0, &ends);
    if (status == TL_OK) status = tl_zeros(&places, 1, TL_I64, device, &zeros);
    if (status == TL_OK) status = tl_ones(counts->shape, 1, TL_I64, device, &ones);
    if (status == TL_OK) status = tl_scatter_add(zeros, 0, ends, ones, &marks);
    if (status == TL_OK) status = tl_cumsum(marks, 0, &running);
    if (status == TL_OK) status = tl_narrow(running, 0, 0, total, index);
    tl_release(ends), tl_release(zeros), tl_release(ones), tl_release(marks), tl_release(running);
    return status;
}

/* repeats as int64 counts [size] (one element broadcast), checked >= 0; *total their sum (both
   read back: the result's size depends on them) */
static tl_status counts_of(const tl_tensor *repeats, const tl_tensor *x, int64_t size,
                           tl_tensor **counts, int64_t *total) {
    const char *op = "repeat_interleave";
    TL_TRY(tl_check_tensor_arg(op, "repeats", repeats));
    if (repeats->dtype != TL_I64 && repeats->dtype != TL_I32)
        return tl_error(TL_ERR_DTYPE, "%s: repeats must be an int64 or int32 tensor, got %s", op,
                        tl_dtype_name(repeats->dtype));
    if (!tl_device_equal(tl_tensor_device(repeats), tl_tensor_device(x))) {
        char dr[16], dx[16];
        return tl_error(TL_ERR_DEVICE, "%s: repeats is on %s but x is on %s", op,
                        tl_device_name(tl_tensor_device(repeats), dr),
                        tl_device_name(tl_tensor_device(x), dx));
    }
    const int64_t n = tl_numel(repeats);
    if (repeats->ndim > 1 || (n != size && n != 1))
        return tl_error(TL_ERR_SHAPE,
                        "%s: repeats must be 1-d with one count per slice (%lld) or one count, "
                        "got %lld counts in %d dims",
                        op, (long long)size, (long long)n, repeats->ndim);
    tl_tensor *wide = NULL, *line = NULL, *low = NULL, *sum = NULL;
    tl_status status = tl_cast((tl_tensor *)repeats, TL_I64, &wide);
    if (status == TL_OK) status = tl_reshape(wide, &n, 1, &line);
    if (status == TL_OK) status = tl_expand(line, &size, 1, counts);
    tl_scalar least = tl_scalar_int(0), all = tl_scalar_int(0);
    if (status == TL_OK && size > 0) status = tl_amin_all(*counts, &low);
    if (status == TL_OK && low) status = tl_item(low, &least);
    if (status == TL_OK && least.value.i < 0)
        status = tl_error(TL_ERR_ARGUMENT, "%s: repeats must be >= 0, got %lld", op,
                          (long long)least.value.i);
    if (status == TL_OK) status = tl_sum_all(*counts, &sum);
    if (status == TL_OK) status = tl_item(sum, &all);
    tl_release(wide), tl_release(line), tl_release(low), tl_release(sum);
    if (status != TL_OK) {
        tl_release(*counts);
        *counts = NULL;
        return status;
    }
    *total = all.value.i;
    return TL_OK;
}

tl_status tl_repeat_interleave_counts_with(const tl_composer *c, tl_tensor *x,
                                           const tl_tensor *repeats, int dim, bool flatten,
                                           tl_tensor **out) {
    tl_tensor *cur = NULL, *counts = NULL, *index = NULL, *next = NULL;
    int d;
    int64_t total = 0;
    TL_TRY(interleave_source(c, x, dim, flatten, &cur, &d));
    tl_status status = counts_of(repeats, x, cur->shape[d], &counts, &total);
    if (status == TL_OK) status = slice_of_position(counts, total, &index);
    if (status == TL_OK) status = step(c->index_select(cur, d, index, &next), &cur, &next);
    tl_release(counts), tl_release(index);
    if (status != TL_OK) {
        tl_release(cur);
        return status;
    }
    *out = cur;
    return TL_OK;
}

tl_status tl_repeat_interleave_counts(tl_tensor *x, const tl_tensor *repeats, int dim, bool flatten,
                                      tl_tensor **out) {
    return tl_repeat_interleave_counts_with(&tl_plain_composer, x, repeats, dim, flatten, out);
}

/* ---- diag_embed, diag, one_hot ------------------------------------------------------------- */
tl_status tl_diag_embed(tl_tensor *x, int64_t offset, int dim1, int dim2, tl_tensor **out) {
    const char *op = "diag_embed";
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    if (x->ndim == 0 || x->ndim >= TL_MAX_DIMS)
        return tl_error(TL_ERR_SHAPE, "%s: expected a tensor of 1 to %d dims, got %d", op,
                        TL_MAX_DIMS - 1, x->ndim);
    const int rank = x->ndim + 1;
    int d1, d2;
    TL_TRY(tl_wrap_dim(op, dim1, rank, &d1));
    TL_TRY(tl_wrap_dim(op, dim2, rank, &d2));
    if (d1 == d2) return tl_error(TL_ERR_ARGUMENT, "%s: dim1 and dim2 are both dim %d", op, d1 + 1);
    const int64_t n = x->shape[x->ndim - 1];
    int64_t m, shape[TL_MAX_DIMS];
    if (offset < -TL_MAX_NUMEL || offset > TL_MAX_NUMEL ||
        !tl_size_add(n, offset < 0 ? -offset : offset, &m))
        return tl_error(TL_ERR_ARGUMENT, "%s: offset %lld is too large", op, (long long)offset);
    for (int k = 0, j = 0; k < rank; k++) shape[k] = k == d1 || k == d2 ? m : x->shape[j++];
    int64_t numel;
    TL_TRY(tl_shape_numel(op, shape, rank, &numel));
    tl_tensor *y = NULL, *diagonal = NULL;
    tl_status status = tl_zeros(shape, rank, x->dtype, tl_tensor_device(x), &y);
    if (status == TL_OK) status = tl_diagonal(y, offset, d1, d2, &diagonal);
    if (status == TL_OK) status = tl_copy_(diagonal, x);
    tl_release(diagonal);
    if (status != TL_OK) {
        tl_release(y);
        return status;
    }
    *out = y;
    return TL_OK;
}

tl_status tl_diag_with(const tl_composer *c, tl_tensor *x, int64_t k, tl_tensor **out) {
    TL_TRY(tl_check_tensor_arg("diag", "x", x));
    if (x->ndim == 1) return c->diag_embed(x, k, 0, 1, out);
    if (x->ndim != 2)
        return tl_error(TL_ERR_SHAPE, "diag: expected a 1-d or 2-d tensor, got %d dims", x->ndim);
    tl_tensor *diagonal = NULL;
    TL_TRY(c->diagonal(x, k, 0, 1, &diagonal));
    tl_status status = c->clone(diagonal, out);
    tl_release(diagonal);
    return status;
}

tl_status tl_diag(tl_tensor *x, int64_t k, tl_tensor **out) {
    return tl_diag_with(&tl_plain_composer, x, k, out);
}

tl_status tl_one_hot(const tl_tensor *index, int64_t classes, tl_tensor **out) {
    const char *op = "one_hot";
    TL_TRY(tl_check_tensor_arg(op, "index", index));
    if (index->dtype != TL_I64 && index->dtype != TL_I32)
        return tl_error(TL_ERR_DTYPE, "%s: index must be an int64 or int32 tensor, got %s", op,
                        tl_dtype_name(index->dtype));
    if (index->ndim >= TL_MAX_DIMS)
        return tl_error(TL_ERR_SHAPE, "%s: index has %d dims, at most %d allowed", op, index->ndim,
                        TL_MAX_DIMS - 1);
    if (classes < 0) {
        if (tl_numel(index) == 0)
            return tl_error(TL_ERR_ARGUMENT,
                            "%s: cannot infer the number of classes from an empty index", op);
        tl_tensor *top = NULL;
        tl_scalar largest;
        TL_TRY(tl_amax_all(index, &top));
        tl_status status = tl_item(top, &largest);
        tl_release(top);
        TL_TRY(status);
        classes = largest.value.i < 0 ? 0 : largest.value.i + 1;
    }
    const tl_index_range range = {.op = op,
                                  .what = "index",
                                  .range_of = "the number of classes",
                                  .first = 0,
                                  .count = classes};
    TL_TRY(tl_check_index_range(index, &range));
    int64_t shape[TL_MAX_DIMS], numel;
    memcpy(shape, index->shape, sizeof shape);
    shape[index->ndim] = classes;
    TL_TRY(tl_shape_numel(op, shape, index->ndim + 1, &numel));
    shape[index->ndim] = 1;
    tl_tensor *column = NULL, *classes_range = NULL, *hit = NULL;
    tl_status status = tl_reshape((tl_tensor *)index, shape, index->ndim + 1, &column);
    if (status == TL_OK)
        status =
            tl_arange_int(0, classes, 1, index->dtype, tl_tensor_device(index), &classes_range);
    if (status == TL_OK) status = tl_eq(column, classes_range, &hit);
    if (status == TL_OK) status = tl_cast(hit, TL_I64, out);
    tl_release(column), tl_release(classes_range), tl_release(hit);
    return status;
}
