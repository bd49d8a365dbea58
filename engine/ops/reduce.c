/* Reductions: the value reductions of the REDUCE_OP rows (sum, mean, ...) over one dim, several
   or all, and max, min, argmax, argmin over one dim or all elements; they validate, allocate the
   outputs and dispatch to the reduce and fold kernels. */
#include "kernels/kernel.h"
#include "core/storage.h"
#include "tlua/ops.h"

typedef enum reduce_kind { REDUCE_FOLD, REDUCE_EXTREME, REDUCE_ARG } reduce_kind;

/* A REDUCE_OP row's dtypes (ALL or FLOATING), output rule and default number. */
typedef enum { FOLD_ALL = 1, FOLD_FLOATING } fold_dtypes;
typedef enum { OUTPUT_SAME, OUTPUT_WIDE, OUTPUT_BOOL, OUTPUT_LONG } fold_output;
typedef enum { EMPTY_ZERO_OK, EMPTY_ERROR } fold_empty;
typedef struct fold_rule {
    fold_dtypes dtypes; /* 0: not a value reduction */
    fold_output output;
    fold_empty empty;
    double param;
} fold_rule;
static const fold_rule fold_rules[TL_OP_COUNT] = {
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    [TL_OP_##name] = {FOLD_##dtypes, OUTPUT_##output, EMPTY_##empty, param},
#include "tlua/ops.def"
};

static tl_dtype fold_output_dtype(const fold_rule *rule, tl_dtype in) {
    switch (rule->output) {
    case OUTPUT_WIDE:
        return tl_dtype_is_floating(in) ? in : TL_I64;
    case OUTPUT_BOOL:
        return TL_BOOL;
    case OUTPUT_LONG:
        return TL_I64;
    default:
        return in;
    }
}

/* max, min, argmax, argmin and the value reductions without a result for no element */
static bool needs_elements(tl_op op) {
    return fold_rules[op].dtypes ? fold_rules[op].empty == EMPTY_ERROR : true;
}

/* what an empty dim has not, for the error */
static const char *missing_result(tl_op op) {
    if (op == TL_OP_max || op == TL_OP_argmax) return "maximum";
    if (op == TL_OP_min || op == TL_OP_argmin) return "minimum";
    return tl_op_info_of(op)->name;
}

static reduce_kind kind_of(tl_op op) {
    if (fold_rules[op].dtypes) return REDUCE_FOLD;
    switch (op) {
    case TL_OP_argmax:
    case TL_OP_argmin:
        return REDUCE_ARG;
    default:
        return REDUCE_EXTREME;
    }
}

/* A view of t with dim d removed (drop) or with every dim removed (scalar); takes t. */
static tl_status reshape_result(tl_tensor *t, int d, bool drop, bool scalar, tl_tensor **out) {
    if (!t || (!drop && !scalar)) {
        *out = t;
        return TL_OK;
    }
    int64_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < t->ndim && !scalar; i++) {
        if (i == d) continue;
        shape[n] = t->shape[i];
        strides[n++] = t->strides[i];
    }
    tl_tensor *view = NULL;
    tl_status status = tl_make_view(t, shape, strides, n, t->offset, &view);
    tl_release(t);
    *out = view; /* NULL on failure: t (which may be *out) is released */
    return status;
}

/* Reduces dim of a into values (sum, mean, max, min) and/or indices (max, min, argmax,
   argmin), allocated here; NULL where the caller wants none. */
static tl_status reduce_dim(tl_op op, const tl_tensor *a, int dim, bool keepdim, double param,
                            tl_tensor **values, tl_tensor **indices) {
    const char *name = tl_op_info_of(op)->name;
    reduce_kind kind = kind_of(op);
    int d;
    TL_TRY(tl_wrap_dim(name, dim, a->ndim, &d));
    tl_dtype out_dtype = a->dtype;
    if (kind == REDUCE_FOLD) {
        if (fold_rules[op].dtypes == FOLD_FLOATING && !tl_dtype_is_floating(a->dtype))
            return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype, got %s", name,
                            tl_dtype_name(a->dtype));
        out_dtype = fold_output_dtype(&fold_rules[op], a->dtype);
    }
    if (needs_elements(op) && a->ndim > 0 && a->shape[d] == 0) {
        char buf[256];
        return tl_error(
            TL_ERR_SHAPE, "%s: cannot reduce dim %d of size 0 (shape %s): an empty dim has no %s",
            name, TL_DIM_FOR_USER(dim), tl_shape_str(a, buf, sizeof buf), missing_result(op));
    }

    /* a 0-dim input is reduced as [1] and gives a 0-dim result */
    bool scalar = a->ndim == 0;
    tl_tensor *src;
    if (scalar) {
        int64_t one = 1;
        TL_TRY(tl_make_view(a, &one, &one, 1, a->offset, &src));
    } else {
        src = tl_retain((tl_tensor *)a);
    }
    int64_t shape[TL_MAX_DIMS];
    for (int i = 0; i < src->ndim; i++) shape[i] = i == d ? 1 : src->shape[i];
    tl_device device = tl_tensor_device(a);
    tl_tensor *v = NULL, *idx = NULL;
    tl_status status = TL_OK;
    if (kind != REDUCE_ARG) status = tl_empty(shape, src->ndim, out_dtype, device, &v);
    if (status == TL_OK && (kind == REDUCE_ARG || indices))
        status = tl_empty(shape, src->ndim, TL_I64, device, &idx);
    if (status == TL_OK) {
        const tl_tensor *traced[4] = {NULL, NULL, NULL, NULL}; /* outputs, then the input */
        int n = 0;
        if (v) traced[n++] = v;
        if (idx) traced[n++] = idx;
        traced[n] = src;
        const tl_kernel_entry *kernel = tl_dispatch(op, device, a->dtype, traced);
        /* an empty result has nothing to compute, however long the reduced dim */
        const tl_op_args args = {.scalar = {param}, .has_scalar = {true}};
        status = !kernel                      ? tl_dispatch_status()
                 : tl_numel(v ? v : idx) == 0 ? TL_OK
                 : kind == REDUCE_FOLD        ? kernel->fn.fold(v, src, d, &args)
                                              : kernel->fn.reduce(v, idx, src, d);
    }
    tl_release(src);
    if (status == TL_OK) status = reshape_result(v, d, !keepdim, scalar, &v);
    if (status == TL_OK) status = reshape_result(idx, d, !keepdim, scalar, &idx);
    if (status != TL_OK) {
        tl_release(v);
        tl_release(idx);
        return status;
    }
    if (values)
        *values = v;
    else
        tl_release(v);
    if (indices)
        *indices = idx;
    else
        tl_release(idx);
    return TL_OK;
}

/* Reduces every element of a (in row-major order) to a 0-dim result. */
static tl_status reduce_all(tl_op op, const tl_tensor *a, double param, tl_tensor **values,
                            tl_tensor **indices) {
    const char *name = tl_op_info_of(op)->name;
    if (needs_elements(op) && tl_numel(a) == 0) {
        char buf[256];
        return tl_error(TL_ERR_SHAPE,
                        "%s: cannot reduce an empty tensor (shape %s) without a dim: it has no "
                        "%s",
                        name, tl_shape_str(a, buf, sizeof buf), missing_result(op));
    }
    int64_t flat = -1;
    tl_tensor *flat_a;
    TL_TRY(tl_reshape((tl_tensor *)a, &flat, 1, &flat_a));
    tl_status status = reduce_dim(op, flat_a, 0, false, param, values, indices);
    tl_release(flat_a);
    return status;
}

/* ---- value reductions (REDUCE_OP rows) --------------------------------------------------- */
/* op over the ndims dims listed (0-based, negative from the end; none: every element), with the
   op's number param. */
static tl_status reduce_dims(tl_op op, const tl_tensor *a, const int *dims, int ndims, bool keepdim,
                             double param, tl_tensor **out) {
    const char *name = tl_op_info_of(op)->name;
    if (ndims < 0 || ndims > TL_MAX_DIMS)
        return tl_error(TL_ERR_ARGUMENT, "%s: expected 0 to %d dims, got %d", name, TL_MAX_DIMS,
                        ndims);
    bool reduced[TL_MAX_DIMS] = {false};
    int count = 0, first = 0;
    for (int i = 0; i < ndims; i++) {
        int d;
        TL_TRY(tl_wrap_dim(name, dims[i], a->ndim, &d));
        if (reduced[d])
            return tl_error(TL_ERR_ARGUMENT, "%s: dim %d is given twice", name, TL_DIM_FOR_USER(d));
        reduced[d] = true;
        if (count++ == 0) first = dims[i];
        if (needs_elements(op) && a->ndim > 0 && a->shape[d] == 0) {
            char buf[256];
            return tl_error(TL_ERR_SHAPE,
                            "%s: cannot reduce dim %d of size 0 (shape %s): an empty dim has no %s",
                            name, TL_DIM_FOR_USER(d), tl_shape_str(a, buf, sizeof buf),
                            missing_result(op));
        }
    }
    if (count == 1) return reduce_dim(op, a, first, keepdim, param, out, NULL);
    int64_t shape[TL_MAX_DIMS];
    if (count == 0 || count == a->ndim) { /* every element */
        tl_tensor *all;
        TL_TRY(reduce_all(op, a, param, &all, NULL));
        if (!keepdim || a->ndim == 0) {
            *out = all;
            return TL_OK;
        }
        for (int d = 0; d < a->ndim; d++) shape[d] = 1;
        tl_status status = tl_reshape(all, shape, a->ndim, out);
        tl_release(all);
        return status;
    }
    /* several dims: the kept dims first, the reduced ones last and flattened into one */
    int order[TL_MAX_DIMS], kept = 0;
    int64_t length = 1;
    for (int d = 0; d < a->ndim; d++)
        if (!reduced[d]) shape[kept] = a->shape[d], order[kept++] = d;
    for (int d = 0, n = kept; d < a->ndim; d++)
        if (reduced[d]) order[n++] = d, length *= a->shape[d];
    shape[kept] = length;
    tl_tensor *permuted = NULL, *lines = NULL, *result = NULL;
    tl_status status = tl_permute((tl_tensor *)a, order, a->ndim, &permuted);
    if (status == TL_OK) status = tl_reshape(permuted, shape, kept + 1, &lines);
    if (status == TL_OK) status = reduce_dim(op, lines, kept, false, param, &result, NULL);
    if (status == TL_OK && keepdim) {
        for (int d = 0; d < a->ndim; d++) shape[d] = reduced[d] ? 1 : a->shape[d];
        tl_tensor *kept_shape = NULL;
        status = tl_reshape(result, shape, a->ndim, &kept_shape);
        tl_release(result);
        result = kept_shape;
    }
    tl_release(permuted), tl_release(lines);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

/* tl_<name>_dims, and tl_<name>_all and tl_<name>_dim with the default number, of every row */
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    tl_status tl_##name##_dims(const tl_tensor *a, const int *dims, int ndims, bool keepdim,       \
                               double number, tl_tensor **out) {                                   \
        return reduce_dims(TL_OP_##name, a, dims, ndims, keepdim, number, out);                    \
    }                                                                                              \
    tl_status tl_##name##_all(const tl_tensor *a, tl_tensor **out) {                               \
        return reduce_dims(TL_OP_##name, a, NULL, 0, false, param, out);                           \
    }                                                                                              \
    tl_status tl_##name##_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out) {        \
        return reduce_dims(TL_OP_##name, a, &dim, 1, keepdim, param, out);                         \
    }
#include "tlua/ops.def"

tl_status tl_max_all(const tl_tensor *a, tl_tensor **out) {
    return reduce_all(TL_OP_max, a, 0, out, NULL);
}
tl_status tl_min_all(const tl_tensor *a, tl_tensor **out) {
    return reduce_all(TL_OP_min, a, 0, out, NULL);
}
tl_status tl_max_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                     tl_tensor **indices) {
    return reduce_dim(TL_OP_max, a, dim, keepdim, 0, values, indices);
}
tl_status tl_min_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                     tl_tensor **indices) {
    return reduce_dim(TL_OP_min, a, dim, keepdim, 0, values, indices);
}
tl_status tl_argmax_all(const tl_tensor *a, tl_tensor **out) {
    return reduce_all(TL_OP_argmax, a, 0, NULL, out);
}
tl_status tl_argmin_all(const tl_tensor *a, tl_tensor **out) {
    return reduce_all(TL_OP_argmin, a, 0, NULL, out);
}
tl_status tl_argmax_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out) {
    return reduce_dim(TL_OP_argmax, a, dim, keepdim, 0, NULL, out);
}
tl_status tl_argmin_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out) {
    return reduce_dim(TL_OP_argmin, a, dim, keepdim, 0, NULL, out);
}
