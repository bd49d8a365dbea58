/* tl_matmul_: x[..., n] <- x @ w for a square w, by row tiles through a bounded workspace: the
   matmul_inplace kernel, or functional ops for an x whose rows GEMM cannot read in place. */
#include "core/storage.h"
#include "kernels/gemm.h"
#include "kernels/kernel.h"
#include "ops/checks.h"
#include "ops/matmul.h"
#include "tlua/ops.h"

/* The workspace on the CPU, in bytes (twice this on CUDA): tiles of thousands of rows keep GEMM
   near full speed, and the copy back costs the same at any tile size. */
static const size_t buffer_bytes = (size_t)8 << 20;

static tl_status check_args(const char *op, const tl_tensor *x, const tl_tensor *w) {
    TL_TRY(tl_check_tensor_arg(op, "x", x));
    TL_TRY(tl_check_tensor_arg(op, "w", w));
    char sx[256], sw[256];
    if (w->ndim != 2 || w->shape[0] != w->shape[1])
        return tl_error(TL_ERR_SHAPE,
                        "%s: w must be a square matrix [n, n] (the result keeps x's shape), got %s",
                        op, tl_shape_str(w, sw, sizeof sw));
    if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[0])
        return tl_error(TL_ERR_SHAPE, "%s: x must be [..., %lld] to be multiplied by w %s, got %s",
                        op, (long long)w->shape[0], tl_shape_str(w, sw, sizeof sw),
                        tl_shape_str(x, sx, sizeof sx));
    tl_device dx = tl_tensor_device(x), dw = tl_tensor_device(w);
    if (!tl_device_equal(dx, dw)) {
        char nx[16], nw[16];
        return tl_error(TL_ERR_DEVICE, "%s: expected x and w on one device, got %s and %s", op,
                        tl_device_name(dx, nx), tl_device_name(dw, nw));
    }
    if (x->dtype != w->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: expected x and w of one dtype, got %s and %s", op,
                        tl_dtype_name(x->dtype), tl_dtype_name(w->dtype));
    if (!tl_dtype_is_floating(x->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype, got %s", op,
                        tl_dtype_name(x->dtype));
    return tl_check_writable(op, "x", x);
}

/* x's leading dims as `outer` matrices [rows, n]: dims fold..ndim-2 merge into one row dim of
   stride row_stride; dims before fold are walked one index at a time. */
typedef struct row_layout {
    int fold;
    int64_t outer, rows, row_stride;
} row_layout;

static row_layout layout_of(const tl_tensor *x) {
    int last = x->ndim - 1;
    row_layout l = {.fold = last, .outer = 1, .rows = 1, .row_stride = x->shape[last]};
    int inner = -1; /* the innermost dim of size > 1 folded so far */
    for (int d = last - 1; d >= 0; d--) {
        if (x->shape[d] != 1 && inner >= 0 && x->strides[d] != x->strides[inner] * x->shape[inner])
            break;
        if (x->shape[d] != 1) {
            if (inner < 0) l.row_stride = x->strides[d];
            inner = d;
        }
        l.rows *= x->shape[d];
        l.fold = d;
    }
    for (int d = 0; d < l.fold; d++) l.outer *= x->shape[d];
    return l;
}

/* The element offset of matrix number `index` of the layout. */
static int64_t matrix_offset(const tl_tensor *x, const row_layout *l, int64_t index) {
    int64_t offset = x->offset;
    for (int d = l->fold - 1; d >= 0; d--) {
        offset += (index % x->shape[d]) * x->strides[d];
        index /= x->shape[d];
    }
    return offset;
}

/* Rows [first, first + count) of one matrix: out = tile @ w into the workspace, then copied
   back over the tile (GEMM cannot write into what it reads). */
static tl_status run_tile(tl_tensor *x, const row_layout *l, int64_t offset, int64_t first,
                          int64_t count, const tl_tensor *w, tl_tensor *workspace) {
    int64_t n = w->shape[0];
    int64_t shape[2] = {count, n}, strides[2] = {l->row_stride, x->strides[x->ndim - 1]};
    int64_t dense[2] = {n, 1};
    tl_tensor *tile = NULL, *result = NULL;
    tl_status status = tl_make_view(x, shape, strides, 2, offset + first * l->row_stride, &tile);
    if (status == TL_OK) status = tl_make_view(workspace, shape, dense, 2, 0, &result);
    if (status == TL_OK) status = tl_matmul_into_as(TL_OP_matmul, tile, w, result);
    if (status == TL_OK) status = tl_copy_(tile, result);
    tl_release(tile), tl_release(result);
    return status;
}

/* Every matrix of x through the matmul_inplace kernel, tiles of tile_rows rows. */
static tl_status run_kernel(tl_tensor *x, const row_layout *l, const tl_tensor *w,
                            int64_t tile_rows) {
    int64_t n = w->shape[0];
    const tl_kernel_entry *k = tl_dispatch(TL_OP_matmul_inplace, tl_tensor_device(x), x->dtype,
                                           (const tl_tensor *const[]){x, w, NULL});
    if (!k) return tl_dispatch_status();
    tl_tensor *workspace;
    int64_t ws_shape[2] = {tile_rows, n};
    TL_TRY(tl_empty(ws_shape, 2, x->dtype, tl_tensor_device(x), &workspace));
    tl_status status = TL_OK;
    int64_t shape[2] = {l->rows, n}, strides[2] = {l->row_stride, x->strides[x->ndim - 1]};
    for (int64_t m = 0; m < l->outer && status == TL_OK; m++) {
        tl_tensor *matrix = NULL;
        status = tl_make_view(x, shape, strides, 2, matrix_offset(x, l, m), &matrix);
        if (status == TL_OK) status = k->fn.matmul_inplace(matrix, w, workspace);
        tl_release(matrix);
    }
    tl_release(workspace);
    return status;
}

/* The same by functional ops, for an x whose rows GEMM cannot read in place (each tile is read
   from a copy): tile_rows rows at a time. */
static tl_status run_tiles(tl_tensor *x, const row_layout *l, const tl_tensor *w,
                           int64_t tile_rows) {
    int64_t ws_shape[2] = {tile_rows, w->shape[0]};
    tl_tensor *workspace;
    TL_TRY(tl_empty(ws_shape, 2, x->dtype, tl_tensor_device(x), &workspace));
    tl_status status = TL_OK;
    for (int64_t m = 0; m < l->outer && status == TL_OK; m++) {
        int64_t offset = matrix_offset(x, l, m);
        for (int64_t first = 0; first < l->rows && status == TL_OK; first += tile_rows) {
            int64_t count = l->rows - first < tile_rows ? l->rows - first : tile_rows;
            status = run_tile(x, l, offset, first, count, w, workspace);
        }
    }
    tl_release(workspace);
    return status;
}

tl_status tl_matmul_(tl_tensor *x, const tl_tensor *w) {
    const char *op = "matmul_";
    TL_TRY(check_args(op, x, w));
    int64_t n = w->shape[0];
    if (tl_numel(x) == 0) {
        tl_bump_version(x);
        return TL_OK;
    }
    row_layout l = layout_of(x);
    bool col_major;
    int64_t ld;
    bool in_place =
        tl_gemm_layout(l.rows, n, l.row_stride, x->strides[x->ndim - 1], &col_major, &ld);
    /* one workspace buffer (16 MiB on CUDA, where larger tile GEMMs run closer to full speed,
       8 MiB on the CPU); an x GEMM cannot read needs a buffer and a copy of each tile: halves */
    bool cuda = tl_tensor_device(x).type == TL_DEVICE_CUDA;
    size_t budget = (cuda ? 2 * buffer_bytes : buffer_bytes) / (in_place ? 1 : 2);
    int64_t tile_rows = (int64_t)(budget / ((size_t)n * tl_dtype_size(x->dtype)));
    if (tile_rows < 1) tile_rows = 1;
    if (tile_rows > l.rows) tile_rows = l.rows;

    /* w is read from a copy when the tiles written back would change it, or GEMM could not
       read it in place (it would be copied for every tile) */
    tl_tensor *w_copy = NULL;
    if (tl_may_overlap(x, w) ||
        !tl_gemm_layout(n, n, w->strides[0], w->strides[1], &col_major, &ld))
        TL_TRY(tl_clone(w, &w_copy));
    const tl_tensor *weight = w_copy ? w_copy : w;
    tl_status status =
        in_place ? run_kernel(x, &l, weight, tile_rows) : run_tiles(x, &l, weight, tile_rows);
    tl_release(w_copy);
    if (status == TL_OK) tl_bump_version(x);
    return status;
}
