/* block_sparse_linear as ops: the layout and every argument checked before anything is
   allocated, then the forward, input-gradient or weight-gradient kernel. */
#include <stdlib.h>

#include "ops/nn/nn_common.h"

/* The pattern's sizes, from the layout's tensors. */
typedef struct pattern_sizes {
    int64_t block_rows, block_cols, nnz;
} pattern_sizes;

static tl_status check_index(const char *op, const char *name, const tl_tensor *t, int64_t length,
                             tl_device device) {
    char sd[32], st[32];
    if (!t) return tl_error(TL_ERR_ARGUMENT, "%s: layout.%s is missing", op, name);
    if (t->dtype != TL_I32)
        return tl_error(TL_ERR_DTYPE, "%s: layout.%s must be int32, got %s", op, name,
                        tl_dtype_name(t->dtype));
    if (t->ndim != 1 || t->shape[0] != length)
        return tl_error(TL_ERR_SHAPE,
                        "%s: layout.%s must be 1-D with %lld entries, got %lld dims "
                        "and %lld entries",
                        op, name, (long long)length, (long long)t->ndim, (long long)tl_numel(t));
    if (!tl_device_equal(tl_tensor_device(t), device))
        return tl_error(TL_ERR_DEVICE, "%s: layout.%s is on %s but the blocks are on %s", op, name,
                        tl_device_name(tl_tensor_device(t), st), tl_device_name(device, sd));
    if (!tl_is_contiguous(t))
        return tl_error(TL_ERR_ARGUMENT, "%s: layout.%s must be contiguous", op, name);
    return TL_OK;
}

/* The layout's tensors have the sizes of a pattern with nnz blocks on device. */
static tl_status check_layout_shapes(const char *op, const tl_block_layout *layout, int64_t nnz,
                                     tl_device device, pattern_sizes *sizes) {
    if (!layout) return tl_error(TL_ERR_ARGUMENT, "%s: layout is missing", op);
    const tl_tensor *ro = layout->row_offsets, *co = layout->col_offsets;
    if (!ro || !co || ro->ndim != 1 || co->ndim != 1 || ro->shape[0] < 1 || co->shape[0] < 1)
        return tl_error(TL_ERR_SHAPE,
                        "%s: layout.row_offsets and layout.col_offsets must be 1-D tensors of "
                        "block rows + 1 and block columns + 1 entries",
                        op);
    *sizes = (pattern_sizes){ro->shape[0] - 1, co->shape[0] - 1, nnz};
    TL_TRY(check_index(op, "row_offsets", ro, sizes->block_rows + 1, device));
    TL_TRY(check_index(op, "col_indices", layout->col_indices, nnz, device));
    TL_TRY(check_index(op, "col_offsets", co, sizes->block_cols + 1, device));
    TL_TRY(check_index(op, "row_indices", layout->row_indices, nnz, device));
    TL_TRY(check_index(op, "col_blocks", layout->col_blocks, nnz, device));
    TL_TRY(check_index(op, "coo_rows", layout->coo_rows, nnz, device));
    TL_TRY(check_index(op, "coo_cols", layout->coo_cols, nnz, device));
    return TL_OK;
}

/* An index tensor's values on the host (a copy for another device; *copy says whether). */
static tl_status host_indices(const tl_tensor *t, const int32_t **values, int32_t **copy) {
    *copy = NULL;
    if (tl_tensor_device(t).type == TL_DEVICE_CPU) {
        *values = tl_data(t);
        return TL_OK;
    }
    *copy = malloc((size_t)(t->shape[0] > 0 ? t->shape[0] : 1) * sizeof(int32_t));
    if (!*copy) return tl_error(TL_ERR_MEMORY, "block layout: out of memory");
    tl_status status = tl_to_host(t, *copy);
    if (status != TL_OK) {
        free(*copy);
        *copy = NULL;
    }
    *values = *copy;
    return status;
}

enum { ROW_OFFSETS, COL_INDICES, COL_OFFSETS, ROW_INDICES, COL_BLOCKS, COO_ROWS, COO_COLS, N_IDX };

/* Positions in messages count from 1, as Lua users count; the values are the layout's own
   (0-based block numbers). */
static tl_status offsets_error(const char *op, const char *name, int64_t at, int64_t value) {
    return tl_error(TL_ERR_INDEX,
                    "%s: layout.%s[%lld] = %lld breaks its order (offsets start at 0, never "
                    "decrease and end at the number of blocks)",
                    op, name, (long long)at + 1, (long long)value);
}

static tl_status check_offsets(const char *op, const char *name, const int32_t *v, int64_t n,
                               int64_t nnz) {
    if (v[0] != 0) return offsets_error(op, name, 0, v[0]);
    for (int64_t i = 1; i <= n; i++)
        if (v[i] < v[i - 1] || v[i] > nnz) return offsets_error(op, name, i, v[i]);
    if (v[n] != nnz) return offsets_error(op, name, n, v[n]);
    return TL_OK;
}

/* Every index of the layout against the others (see tlua/block_layout.h). */
static tl_status check_contents(const char *op, const int32_t *const *v, const pattern_sizes *s) {
    TL_TRY(check_offsets(op, "row_offsets", v[ROW_OFFSETS], s->block_rows, s->nnz));
    TL_TRY(check_offsets(op, "col_offsets", v[COL_OFFSETS], s->block_cols, s->nnz));
    for (int64_t r = 0; r < s->block_rows; r++)
        for (int64_t e = v[ROW_OFFSETS][r]; e < v[ROW_OFFSETS][r + 1]; e++) {
            int32_t c = v[COL_INDICES][e];
            if (c < 0 || c >= s->block_cols ||
                (e > v[ROW_OFFSETS][r] && c <= v[COL_INDICES][e - 1]))
                return tl_error(TL_ERR_INDEX,
                                "%s: layout.col_indices[%lld] = %d is out of range [0, %lld) or "
                                "not increasing within block row %lld",
                                op, (long long)e + 1, c, (long long)s->block_cols, (long long)r);
            if (v[COO_ROWS][e] != r || v[COO_COLS][e] != c)
                return tl_error(TL_ERR_INDEX,
                                "%s: the coordinate list says block %lld is at (%d, %d) but the "
                                "row-wise index puts it at (%lld, %d)",
                                op, (long long)e + 1, v[COO_ROWS][e], v[COO_COLS][e], (long long)r,
                                c);
        }
    for (int64_t c = 0; c < s->block_cols; c++)
        for (int64_t t = v[COL_OFFSETS][c]; t < v[COL_OFFSETS][c + 1]; t++) {
            int32_t r = v[ROW_INDICES][t], e = v[COL_BLOCKS][t];
            if (r < 0 || r >= s->block_rows ||
                (t > v[COL_OFFSETS][c] && r <= v[ROW_INDICES][t - 1]))
                return tl_error(TL_ERR_INDEX,
                                "%s: layout.row_indices[%lld] = %d is out of range [0, %lld) or "
                                "not increasing within block column %lld",
                                op, (long long)t + 1, r, (long long)s->block_rows, (long long)c);
            if (e < 0 || e >= s->nnz || v[COO_ROWS][e] != r || v[COO_COLS][e] != c)
                return tl_error(TL_ERR_INDEX,
                                "%s: layout.col_blocks[%lld] = %d is not the block at (%d, %lld)",
                                op, (long long)t + 1, e, r, (long long)c);
        }
    return TL_OK;
}

/* Checks the contents of the layout's indices (copying them to the host from another device). */
static tl_status validate_contents(const char *op, const tl_block_layout *layout,
                                   const pattern_sizes *sizes) {
    const tl_tensor *t[N_IDX] = {layout->row_offsets, layout->col_indices, layout->col_offsets,
                                 layout->row_indices, layout->col_blocks,  layout->coo_rows,
                                 layout->coo_cols};
    const int32_t *values[N_IDX] = {0};
    int32_t *copies[N_IDX] = {0};
    tl_status status = TL_OK;
    for (int i = 0; i < N_IDX && status == TL_OK; i++)
        status = host_indices(t[i], &values[i], &copies[i]);
    if (status == TL_OK) status = check_contents(op, values, sizes);
    for (int i = 0; i < N_IDX; i++) free(copies[i]);
    return status;
}

tl_status tl_block_layout_validate(const tl_block_layout *layout, int64_t nnz) {
    const char *op = "block_layout_validate";
    if (!layout || !layout->row_offsets)
        return tl_error(TL_ERR_ARGUMENT, "%s: layout is missing", op);
    pattern_sizes sizes;
    TL_TRY(check_layout_shapes(op, layout, nnz, tl_tensor_device(layout->row_offsets), &sizes));
    return validate_contents(op, layout, &sizes);
}

/* Shapes, dtypes and devices of blocks [nnz, b, b] and its layout; on the CPU the layout's
   contents too (on a GPU that is a copy per call: tl_block_layout_validate does it once, and
   the kernels there never read outside the tensors whatever the indices say). */
static tl_status check_blocks(const char *op, const tl_tensor *blocks,
                              const tl_block_layout *layout, pattern_sizes *sizes, int64_t *b) {
    char sb[256];
    if (blocks->ndim != 3 || blocks->shape[1] != blocks->shape[2] || blocks->shape[1] < 1)
        return tl_error(TL_ERR_SHAPE, "%s: blocks must be [nnz, b, b] with b >= 1, got %s", op,
                        tl_shape_str(blocks, sb, sizeof sb));
    TL_TRY(nn_check_floating(op, "blocks", blocks));
    tl_device device = tl_tensor_device(blocks);
    TL_TRY(check_layout_shapes(op, layout, blocks->shape[0], device, sizes));
    *b = blocks->shape[1];
    int64_t unused;
    if (!tl_size_mul(sizes->block_rows, *b, &unused) ||
        !tl_size_mul(sizes->block_cols, *b, &unused))
        return tl_error(TL_ERR_SHAPE, "%s: the weight's size overflows", op);
    if (device.type == TL_DEVICE_CPU) TL_TRY(validate_contents(op, layout, sizes));
    return TL_OK;
}

/* t [..., features] with features as expected, on blocks' device and dtype. */
static tl_status check_dense(const char *op, const char *name, const tl_tensor *t,
                             const tl_tensor *blocks, int64_t features, const char *what) {
    char st[256];
    TL_TRY(nn_check_like(op, "blocks", blocks, name, t, true));
    if (t->ndim < 1 || t->shape[t->ndim - 1] != features)
        return tl_error(TL_ERR_SHAPE, "%s: %s must be [..., %lld] (%s), got %s", op, name,
                        (long long)features, what, tl_shape_str(t, st, sizeof st));
    return TL_OK;
}

/* t as a contiguous [rows, features] matrix (a reference to release). */
static tl_status as_matrix(const tl_tensor *t, tl_tensor **out) {
    tl_tensor *c;
    TL_TRY(tl_contiguous((tl_tensor *)t, &c));
    int64_t shape[2] = {-1, t->shape[t->ndim - 1]};
    if (t->shape[t->ndim - 1] == 0 || tl_numel(t) == 0) {
        int64_t rows = 1;
        for (int d = 0; d < t->ndim - 1; d++) rows *= t->shape[d];
        shape[0] = rows;
    }
    tl_status status = tl_view(c, shape, 2, out);
    tl_release(c);
    return status;
}

/* Runs op's kernel: out has the shape of like with its last dim set to features. */
static tl_status run(tl_op op, const tl_tensor *like, int64_t features, const tl_tensor *dense,
                     const tl_tensor *other, const tl_tensor *bias, const tl_block_layout *layout,
                     tl_tensor **out) {
    int64_t shape[TL_MAX_DIMS];
    memcpy(shape, like->shape, sizeof shape[0] * (size_t)like->ndim);
    shape[like->ndim - 1] = features;
    tl_device device = tl_tensor_device(like);
    tl_tensor *d = NULL, *o = NULL, *result = NULL, *result2d = NULL;
    tl_status status = as_matrix(dense, &d);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)other, &o); /* the blocks */
    if (status == TL_OK) status = tl_empty(shape, like->ndim, like->dtype, device, &result);
    if (status == TL_OK) status = as_matrix(result, &result2d);
    if (status == TL_OK && tl_numel(result) > 0) {
        const tl_kernel_entry *k = tl_dispatch(op, device, like->dtype, NN_TENSORS(result2d, d, o));
        status = k ? k->fn.block_sparse(result2d, d, o, bias, layout) : tl_dispatch_status();
    }
    tl_release(d), tl_release(o), tl_release(result2d);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

tl_status tl_block_sparse_linear(const tl_tensor *x, const tl_tensor *blocks,
                                 const tl_block_layout *layout, const tl_tensor *bias,
                                 tl_tensor **out) {
    const char *op = "block_sparse_linear";
    char sb[256];
    pattern_sizes s;
    int64_t b = 0;
    TL_TRY(check_blocks(op, blocks, layout, &s, &b));
    TL_TRY(check_dense(op, "input", x, blocks, s.block_cols * b,
                       "in_features = block columns x block size"));
    if (bias) {
        TL_TRY(nn_check_like(op, "blocks", blocks, "bias", bias, true));
        if (bias->ndim != 1 || bias->shape[0] != s.block_rows * b)
            return tl_error(TL_ERR_SHAPE, "%s: bias must be [%lld] (out_features), got %s", op,
                            (long long)(s.block_rows * b), tl_shape_str(bias, sb, sizeof sb));
    }
    tl_tensor *bias_c = NULL;
    if (bias) TL_TRY(tl_contiguous((tl_tensor *)bias, &bias_c));
    tl_status status =
        run(TL_OP_block_sparse_linear, x, s.block_rows * b, x, blocks, bias_c, layout, out);
    tl_release(bias_c);
    return status;
}

tl_status tl_block_sparse_linear_backward_input(const tl_tensor *grad, const tl_tensor *blocks,
                                                const tl_block_layout *layout,
                                                tl_tensor **grad_input) {
    const char *op = "block_sparse_linear_backward_input";
    pattern_sizes s;
    int64_t b = 0;
    TL_TRY(check_blocks(op, blocks, layout, &s, &b));
    TL_TRY(check_dense(op, "grad", grad, blocks, s.block_rows * b,
                       "out_features = block rows x block size"));
    return run(TL_OP_block_sparse_linear_backward_input, grad, s.block_cols * b, grad, blocks, NULL,
               layout, grad_input);
}

tl_status tl_block_sparse_linear_backward_weight(const tl_tensor *grad, const tl_tensor *x,
                                                 const tl_block_layout *layout, int64_t block,
                                                 tl_tensor **grad_blocks) {
    const char *op = "block_sparse_linear_backward_weight";
    char sg[256], sx[256];
    if (block < 1)
        return tl_error(TL_ERR_ARGUMENT, "%s: block must be >= 1, got %lld", op, (long long)block);
    TL_TRY(nn_check_floating(op, "grad", grad));
    TL_TRY(nn_check_like(op, "grad", grad, "input", x, true));
    const tl_tensor *coo = layout ? layout->coo_rows : NULL;
    int64_t nnz = coo && coo->ndim == 1 ? coo->shape[0] : 0;
    pattern_sizes s;
    TL_TRY(check_layout_shapes(op, layout, nnz, tl_tensor_device(grad), &s));
    if (tl_tensor_device(grad).type == TL_DEVICE_CPU) TL_TRY(validate_contents(op, layout, &s));
    TL_TRY(check_dense(op, "grad", grad, grad, s.block_rows * block,
                       "out_features = block rows x block size"));
    TL_TRY(check_dense(op, "input", x, grad, s.block_cols * block,
                       "in_features = block columns x block size"));
    if (grad->ndim != x->ndim ||
        memcmp(grad->shape, x->shape, sizeof grad->shape[0] * (size_t)(grad->ndim - 1)) != 0)
        return tl_error(TL_ERR_SHAPE, "%s: grad %s and input %s must have the same leading dims",
                        op, tl_shape_str(grad, sg, sizeof sg), tl_shape_str(x, sx, sizeof sx));
    int64_t shape[3] = {nnz, block, block};
    tl_device device = tl_tensor_device(grad);
    tl_tensor *g = NULL, *xm = NULL, *result = NULL;
    tl_status status = as_matrix(grad, &g);
    if (status == TL_OK) status = as_matrix(x, &xm);
    bool products = status == TL_OK && nnz > 0 && g->shape[0] > 0;
    /* no rows: every block's gradient is an empty sum */
    if (status == TL_OK)
        status = products ? tl_empty(shape, 3, grad->dtype, device, &result)
                          : tl_zeros(shape, 3, grad->dtype, device, &result);
    if (status == TL_OK && products) {
        const tl_kernel_entry *k = tl_dispatch(TL_OP_block_sparse_linear_backward_weight, device,
                                               grad->dtype, NN_TENSORS(result, g, xm));
        status = k ? k->fn.block_sparse(result, g, xm, NULL, layout) : tl_dispatch_status();
    }
    tl_release(g), tl_release(xm);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *grad_blocks = result;
    return TL_OK;
}
