/* Grouped matrix products, one launch per call: lists of matrices (grouped_matmul, through
   tl_gemm_grouped) and row segments of one matrix times a stack of matrices (grouped_mm, through
   tl_gemm_segmented), with their split backward ops. Every argument is checked before anything is
   allocated. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels/gemm.h"
#include "tlua/cuda.h"
#include "tlua/device.h"
#include "tlua/nn.h"
#include "tlua/ops.h"

/* A product x [m, k] @ y [k, n] -> out [m, n] (a view into a fresh contiguous result). */
typedef struct product {
    tl_tensor *x, *y, *out; /* owned */
} product;

typedef struct products {
    product *list;
    int64_t count;
} products;

static void products_free(products *ps) {
    for (int64_t i = 0; i < ps->count; i++) {
        tl_release(ps->list[i].x);
        tl_release(ps->list[i].y);
        tl_release(ps->list[i].out);
    }
    free(ps->list);
    ps->list = NULL;
    ps->count = 0;
}

static tl_status products_new(const char *name, int64_t count, products *ps) {
    ps->count = 0;
    ps->list = calloc((size_t)(count > 0 ? count : 1), sizeof *ps->list);
    if (!ps->list) return tl_error(TL_ERR_MEMORY, "%s: out of memory", name);
    ps->count = count;
    return TL_OK;
}

/* How GEMM reads a 2-D tensor in place; a contiguous copy replaces it where it cannot. */
static tl_status readable(tl_tensor **t, bool *col_major, int64_t *ld) {
    tl_tensor *m = *t;
    if (tl_gemm_layout(m->shape[0], m->shape[1], m->strides[0], m->strides[1], col_major, ld))
        return TL_OK;
    tl_tensor *copy;
    TL_TRY(tl_contiguous(m, &copy));
    tl_release(m);
    *t = copy;
    tl_gemm_layout(copy->shape[0], copy->shape[1], copy->strides[0], copy->strides[1], col_major,
                   ld);
    return TL_OK;
}

/* Runs every product as one grouped GEMM: row-major out = x y is the column-major
   out^T = y^T x^T, so GEMM's A is y and its B is x. */
static tl_status run(tl_op op, tl_device device, tl_dtype dtype, products *ps) {
    GemmGroup *groups = calloc((size_t)(ps->count > 0 ? ps->count : 1), sizeof *groups);
    if (!groups) return tl_error(TL_ERR_MEMORY, "%s: out of memory", tl_op_info_of(op)->name);
    tl_status status = TL_OK;
    for (int64_t i = 0; i < ps->count && status == TL_OK; i++) {
        product *p = &ps->list[i];
        bool x_col = false, y_col = false, out_col = false;
        int64_t ldx = 1, ldy = 1, ldo = 1;
        status = readable(&p->x, &x_col, &ldx);
        if (status == TL_OK) status = readable(&p->y, &y_col, &ldy);
        if (status != TL_OK) break;
        /* out: rows of a fresh contiguous result, always row-major */
        if (!tl_gemm_layout(p->out->shape[0], p->out->shape[1], p->out->strides[0],
                            p->out->strides[1], &out_col, &ldo) ||
            out_col) {
            status = tl_error(TL_ERR_RUNTIME, "%s: internal error, an output is not row-major",
                              tl_op_info_of(op)->name);
            break;
        }
        groups[i] = (GemmGroup){.trans_a = y_col,
                                .trans_b = x_col,
                                .m = p->y->shape[1],
                                .n = p->x->shape[0],
                                .k = p->x->shape[1],
                                .lda = ldy,
                                .ldb = ldx,
                                .ldc = ldo,
                                .a = tl_data(p->y),
                                .b = tl_data(p->x),
                                .c = tl_data(p->out)};
    }
    if (status == TL_OK) {
        const GemmGroupedParams params = tl_gemm_grouped_params(ps->count, groups, dtype);
        status = tl_gemm_grouped(op, device, &params);
    }
    free(groups);
    return status;
}

static tl_status check_operand(const char *name, const char *arg, int64_t index, const tl_tensor *t,
                               int ndim, const tl_tensor *first) {
    char where[64];
    if (index > 0)
        snprintf(where, sizeof where, "%s[%lld]", arg, (long long)index);
    else
        snprintf(where, sizeof where, "%s", arg);
    if (!t) return tl_error(TL_ERR_ARGUMENT, "%s: %s is missing", name, where);
    if (t->ndim != ndim) {
        char s[256];
        return tl_error(TL_ERR_SHAPE, "%s: %s must be %d-D, got shape %s", name, where, ndim,
                        tl_shape_str(t, s, sizeof s));
    }
    if (!tl_dtype_is_floating(t->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: %s must have a floating dtype, got %s", name, where,
                        tl_dtype_name(t->dtype));
    if (first && t->dtype != first->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: %s is %s, expected %s like the first operand", name,
                        where, tl_dtype_name(t->dtype), tl_dtype_name(first->dtype));
    if (first && !tl_device_equal(tl_tensor_device(t), tl_tensor_device(first))) {
        char a[16], b[16];
        return tl_error(TL_ERR_DEVICE, "%s: %s is on %s, expected %s like the first operand", name,
                        where, tl_device_name(tl_tensor_device(t), a),
                        tl_device_name(tl_tensor_device(first), b));
    }
    return TL_OK;
}

/* ---- lists of matrices ------------------------------------------------------------------ */
/* Checks x[i] [m, k] @ y[i] [k, n] for every i (xt/yt: the operand is read transposed). */
static tl_status check_pairs(const char *name, int count, tl_tensor *const *x, const char *xn,
                             bool xt, tl_tensor *const *y, const char *yn, bool yt) {
    if (count < 0) return tl_error(TL_ERR_ARGUMENT, "%s: count must be >= 0, got %d", name, count);
    if (count > 0 && (!x || !y)) return tl_error(TL_ERR_ARGUMENT, "%s: missing a list", name);
    for (int i = 0; i < count; i++) {
        TL_TRY(check_operand(name, xn, i + 1, x[i], 2, x[0]));
        TL_TRY(check_operand(name, yn, i + 1, y[i], 2, x[0]));
        int64_t kx = x[i]->shape[xt ? 0 : 1], ky = y[i]->shape[yt ? 1 : 0];
        if (kx != ky) {
            char sx[256], sy[256];
            return tl_error(TL_ERR_SHAPE,
                            "%s: size mismatch in group %d: %s[%d] %s%s @ %s[%d] %s%s (%lld vs "
                            "%lld)",
                            name, i + 1, xn, i + 1, tl_shape_str(x[i], sx, sizeof sx),
                            xt ? "^T" : "", yn, i + 1, tl_shape_str(y[i], sy, sizeof sy),
                            yt ? "^T" : "", (long long)kx, (long long)ky);
        }
    }
    return TL_OK;
}

static tl_status transposed(tl_tensor *t, bool flip, tl_tensor **out) {
    if (!flip) {
        *out = tl_retain(t);
        return TL_OK;
    }
    return tl_transpose(t, 0, 1, out);
}

/* out[i] = op(x[i]) @ op(y[i]), op a transpose where xt / yt. */
static tl_status pairs(tl_op op, int count, tl_tensor *const *x, const char *xn, bool xt,
                       tl_tensor *const *y, const char *yn, bool yt, tl_tensor **out) {
    const char *name = tl_op_info_of(op)->name;
    TL_TRY(check_pairs(name, count, x, xn, xt, y, yn, yt));
    if (count == 0) return TL_OK;
    products ps;
    TL_TRY(products_new(name, count, &ps));
    tl_status status = TL_OK;
    for (int i = 0; i < count && status == TL_OK; i++) {
        product *p = &ps.list[i];
        status = transposed(x[i], xt, &p->x);
        if (status == TL_OK) status = transposed(y[i], yt, &p->y);
        if (status == TL_OK) {
            int64_t shape[2] = {p->x->shape[0], p->y->shape[1]};
            status = p->x->shape[1] == 0
                         ? tl_zeros(shape, 2, x[0]->dtype, tl_tensor_device(x[0]), &p->out)
                         : tl_empty(shape, 2, x[0]->dtype, tl_tensor_device(x[0]), &p->out);
        }
    }
    if (status == TL_OK) status = run(op, tl_tensor_device(x[0]), x[0]->dtype, &ps);
    for (int i = 0; i < count; i++) out[i] = status == TL_OK ? tl_retain(ps.list[i].out) : NULL;
    products_free(&ps);
    return status;
}

tl_status tl_grouped_matmul(int count, tl_tensor *const *a, tl_tensor *const *b, tl_tensor **out) {
    return pairs(TL_OP_grouped_matmul, count, a, "As", false, b, "Bs", false, out);
}

tl_status tl_grouped_matmul_backward_input(int count, tl_tensor *const *grad,
                                           tl_tensor *const *other, tl_tensor **out) {
    return pairs(TL_OP_grouped_matmul_backward_input, count, grad, "grads", false, other, "Bs",
                 true, out);
}

tl_status tl_grouped_matmul_backward_other(int count, tl_tensor *const *grad,
                                           tl_tensor *const *input, tl_tensor **out) {
    return pairs(TL_OP_grouped_matmul_backward_other, count, input, "As", true, grad, "grads",
                 false, out);
}

/* ---- row segments times a stack ------------------------------------------------------------ */
/* offsets as an argument: 1-D, int32 or int64, one end per group */
static tl_status check_offsets(const char *name, const tl_tensor *offsets, int64_t groups) {
    if (!offsets) return tl_error(TL_ERR_ARGUMENT, "%s: offsets is missing", name);
    if (offsets->dtype != TL_I32 && offsets->dtype != TL_I64)
        return tl_error(TL_ERR_DTYPE, "%s: offsets must be int32 or int64, got %s", name,
                        tl_dtype_name(offsets->dtype));
    if (offsets->ndim != 1 || offsets->shape[0] != groups) {
        char s[256];
        return tl_error(TL_ERR_SHAPE,
                        "%s: offsets must be 1-D with one end per group (%lld), got shape %s", name,
                        (long long)groups, tl_shape_str(offsets, s, sizeof s));
    }
    return TL_OK;
}

/* The cumulative ends as host integers: checked as above, nondecreasing, within [0, rows]. */
static tl_status read_offsets(const char *name, const tl_tensor *offsets, int64_t groups,
                              int64_t rows, int64_t **out) {
    TL_TRY(check_offsets(name, offsets, groups));
    int64_t *ends = malloc(sizeof *ends * (size_t)(groups > 0 ? groups : 1));
    int32_t *narrow =
        offsets->dtype == TL_I32 ? malloc(sizeof *narrow * (size_t)(groups + 1)) : NULL;
    if (!ends || (offsets->dtype == TL_I32 && !narrow)) {
        free(ends), free(narrow);
        return tl_error(TL_ERR_MEMORY, "%s: out of memory", name);
    }
    tl_status status = tl_to_host(offsets, narrow ? (void *)narrow : (void *)ends);
    for (int64_t g = 0; narrow && status == TL_OK && g < groups; g++) ends[g] = narrow[g];
    free(narrow);
    for (int64_t g = 0; status == TL_OK && g < groups; g++) {
        int64_t start = g > 0 ? ends[g - 1] : 0;
        if (ends[g] < start)
            status = tl_error(TL_ERR_ARGUMENT,
                              "%s: offsets must not decrease, got %lld after %lld (offsets[%lld])",
                              name, (long long)ends[g], (long long)start, (long long)g + 1);
        else if (ends[g] > rows)
            status = tl_error(TL_ERR_ARGUMENT,
                              "%s: offsets[%lld] is %lld, past the %lld rows of the input", name,
                              (long long)g + 1, (long long)ends[g], (long long)rows);
    }
    if (status != TL_OK) {
        free(ends);
        return status;
    }
    *out = ends;
    return TL_OK;
}

typedef enum segment_kind {
    SEGMENT_FORWARD, /* out [T, N] rows of g = a_g [m, K] @ b[g] [K, N] */
    SEGMENT_INPUT,   /* out [T, K] rows of g = grad_g [m, N] @ b[g]^T */
    SEGMENT_WEIGHT,  /* out [G, K, N], out[g] = a_g^T [K, m] @ grad_g [m, N] */
} segment_kind;

/* t as a row-major matrix (or stack of them: the last two dims) GEMM reads in place: unit column
   stride, rows at least a row apart; a contiguous copy where it is not. *out is owned. */
static tl_status row_major(const tl_tensor *t, tl_tensor **out) {
    const int r = t->ndim - 2, c = t->ndim - 1;
    const bool unit = t->shape[c] <= 1 || t->strides[c] == 1;
    const bool rows = t->shape[r] <= 1 || t->strides[r] >= (t->shape[c] > 1 ? t->shape[c] : 1);
    const bool stack = t->ndim == 2 || t->shape[0] <= 1 ||
                       t->strides[0] >= (t->shape[r] > 1 ? t->shape[r] : 1) * t->strides[r];
    if (unit && rows && stack) {
        *out = tl_retain((tl_tensor *)t);
        return TL_OK;
    }
    return tl_contiguous((tl_tensor *)t, out);
}

/* elements between the rows of a row-major matrix t (row_major's) */
static int64_t row_stride(const tl_tensor *t) {
    const int r = t->ndim - 2;
    return t->shape[r] <= 1 ? (t->shape[r + 1] > 1 ? t->shape[r + 1] : 1) : t->strides[r];
}

/* FORWARD: first = a [T, K], second = b [G, K, N]; INPUT: first = grad [T, N], second = b;
   WEIGHT: first = a [T, K], second = grad [T, N]. Shares dtype and device (checked by the
   caller). One segmented GEMM: rows past the last end, and empty groups' weight gradients, are
   zeros. Offsets on the operands' GPU are read there (no host wait where the kernel can); others
   are read and checked on the host. */
static tl_status segments(tl_op op, segment_kind kind, const tl_tensor *first_in,
                          const tl_tensor *second_in, const tl_tensor *offsets, int64_t groups,
                          const int64_t *out_shape, int out_ndim, tl_tensor **out) {
    const char *name = tl_op_info_of(op)->name;
    const tl_device device = tl_tensor_device(first_in);
    const int64_t rows = first_in->shape[0];
    const bool on_device = offsets && device.type == TL_DEVICE_CUDA &&
                           tl_device_equal(tl_tensor_device(offsets), device);
    int64_t *host_ends = NULL;
    tl_tensor *device_ends = NULL;
    if (on_device) { /* the values are checked by the kernel that reads them (below) */
        TL_TRY(check_offsets(name, offsets, groups));
        TL_TRY(tl_contiguous((tl_tensor *)offsets, &device_ends));
    } else {
        TL_TRY(read_offsets(name, offsets, groups, rows, &host_ends));
    }
    tl_tensor *first = NULL, *second = NULL, *result = NULL;
    tl_status status = row_major(first_in, &first);
    if (status == TL_OK) status = row_major(second_in, &second);
    if (status == TL_OK) status = tl_empty(out_shape, out_ndim, first_in->dtype, device, &result);
    /* offsets on the GPU are checked where the kernel reads them (an index check's error: raised
       by the next synchronization, at once under tl_set_sync_checks) */
    const tl_index_range ends_range = {.op = name,
                                       .what = "offsets",
                                       .range_of = "the rows of the input",
                                       .note = NULL,
                                       .first = 0,
                                       .count = rows + 1};
    const tl_index_range steps_range = {.op = name,
                                        .what = "the steps between offsets",
                                        .range_of = "a group's rows",
                                        .note = "offsets must not decrease",
                                        .first = 0,
                                        .count = rows + 1};
    if (status == TL_OK) {
        GemmSegments s = {.groups = groups,
                          .ends_range = on_device ? &ends_range : NULL,
                          .steps_range = on_device ? &steps_range : NULL,
                          .ends = on_device ? tl_data(device_ends) : (const void *)host_ends,
                          .ends_dtype = on_device ? device_ends->dtype : TL_I64,
                          .ends_on_host = !on_device,
                          .a = tl_data(first),
                          .b = tl_data(second),
                          .c = tl_data(result),
                          .lda = row_stride(first),
                          .ldb = row_stride(second),
                          .ldc = row_stride(result),
                          .dtype = first->dtype};
        if (kind == SEGMENT_WEIGHT) {
            /* out[g] [K, N] = a[rows of g]^T grad[rows of g] */
            s.kind = TL_GEMM_SEGMENT_REDUCTION;
            s.m = first->shape[1], s.n = second->shape[1], s.k = rows;
            s.stride_c = result->strides[0];
        } else {
            /* out rows of g = first rows of g @ b[g] (FORWARD, b[g] [K, N]) or b[g]^T (INPUT, b[g]
               [K, N] read as [n, k]) */
            s.kind = TL_GEMM_SEGMENT_ROWS;
            s.m = rows, s.k = first->shape[1], s.n = result->shape[1];
            s.stride_b = second->shape[0] > 1 ? second->strides[0] : 0;
            s.b_transposed = kind == SEGMENT_INPUT;
        }
        status = tl_gemm_segmented(op, device, &s);
        if (status == TL_OK && on_device && tl_sync_checks())
            status = tl_cuda_synchronize(device.index);
    }
    tl_release(first), tl_release(second), tl_release(device_ends);
    free(host_ends);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

static tl_status check_size(const char *name, const char *what, const tl_tensor *t, int dim,
                            int64_t expected, const char *why) {
    if (t->shape[dim] == expected) return TL_OK;
    char s[256];
    return tl_error(TL_ERR_SHAPE, "%s: %s has %lld at dim %d (shape %s), expected %lld (%s)", name,
                    what, (long long)t->shape[dim], dim + 1, tl_shape_str(t, s, sizeof s),
                    (long long)expected, why);
}

/* first [T, *] times the stack b [G, K, N] by row segments: FORWARD first = A [T, K], each
   segment times b[g]; INPUT first = grad [T, N], each segment times b[g]^T. */
static tl_status rows_times_stack(tl_op op, segment_kind kind, const char *first_name,
                                  const tl_tensor *first, const tl_tensor *b,
                                  const tl_tensor *offsets, tl_tensor **out) {
    const char *name = tl_op_info_of(op)->name;
    const bool transposed = kind == SEGMENT_INPUT;
    TL_TRY(check_operand(name, first_name, 0, first, 2, NULL));
    TL_TRY(check_operand(name, "B", 0, b, 3, first));
    TL_TRY(transposed ? check_size(name, first_name, first, 1, b->shape[2], "the columns of B")
                      : check_size(name, "B", b, 1, first->shape[1], "the columns of A"));
    const int64_t shape[2] = {first->shape[0], b->shape[transposed ? 1 : 2]};
    return segments(op, kind, first, b, offsets, b->shape[0], shape, 2, out);
}

tl_status tl_grouped_mm(const tl_tensor *a, const tl_tensor *b, const tl_tensor *offsets,
                        tl_tensor **out) {
    return rows_times_stack(TL_OP_grouped_mm, SEGMENT_FORWARD, "A", a, b, offsets, out);
}

tl_status tl_grouped_mm_backward_input(const tl_tensor *grad, const tl_tensor *b,
                                       const tl_tensor *offsets, tl_tensor **out) {
    return rows_times_stack(TL_OP_grouped_mm_backward_input, SEGMENT_INPUT, "grad", grad, b,
                            offsets, out);
}

tl_status tl_grouped_mm_backward_weight(const tl_tensor *grad, const tl_tensor *a,
                                        const tl_tensor *offsets, tl_tensor **out) {
    const char *name = "grouped_mm_backward_weight";
    TL_TRY(check_operand(name, "grad", 0, grad, 2, NULL));
    TL_TRY(check_operand(name, "A", 0, a, 2, grad));
    TL_TRY(check_size(name, "A", a, 0, grad->shape[0], "the rows of grad"));
    if (!offsets || offsets->ndim != 1)
        return tl_error(TL_ERR_SHAPE, "%s: offsets must be 1-D", name);
    const int64_t groups = offsets->shape[0], shape[3] = {groups, a->shape[1], grad->shape[1]};
    return segments(TL_OP_grouped_mm_backward_weight, SEGMENT_WEIGHT, a, grad, offsets, groups,
                    shape, 3, out);
}
