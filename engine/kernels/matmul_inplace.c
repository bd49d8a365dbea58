/* The tile loop of the matmul_inplace kernels: each tile's GEMM into a workspace buffer, in x's
   layout, then the device's copy back over the tile. */
#include "kernels/gemm.h"
#include "kernels/matmul_inplace.h"

tl_status tl_matmul_inplace_tiles(tl_tensor *x, const tl_tensor *w, tl_tensor *workspace,
                                  const tl_tile_copier *copier) {
    const int64_t rows = x->shape[0], n = x->shape[1];
    const int64_t buffers = workspace->shape[0], tile_rows = workspace->shape[1];
    bool x_col_major, w_col_major;
    int64_t ldx, ldw;
    if (!tl_gemm_layout(rows, n, x->strides[0], x->strides[1], &x_col_major, &ldx) ||
        !tl_gemm_layout(n, n, w->strides[0], w->strides[1], &w_col_major, &ldw))
        return tl_error(TL_ERR_ARGUMENT, "matmul_inplace: x or w has no GEMM layout");
    const size_t size = tl_dtype_size(x->dtype);
    char *x_data = tl_data(x), *ws_data = tl_data(workspace);
    const void *w_data = tl_data(w);
    tl_device device = tl_tensor_device(x);
    tl_dtype compute = x->dtype == TL_F64 ? TL_F64 : TL_F32;
    int64_t tile = 0;
    for (int64_t first = 0; first < rows; first += tile_rows, tile++) {
        const int64_t count = rows - first < tile_rows ? rows - first : tile_rows;
        const int slot = (int)(tile % buffers);
        char *buffer = ws_data + (size_t)(slot * tile_rows * n) * size;
        char *x_tile = x_data + (size_t)(first * (x_col_major ? 1 : ldx)) * size;
        if (tile >= buffers) TL_TRY(copier->wait(copier->device, slot));
        GemmParams p = {.alpha = 1.0f,
                        .beta = 0.0f,
                        .k = n,
                        .input_dtype = x->dtype,
                        .output_dtype = x->dtype,
                        .compute_dtype = compute};
        const void *a, *b;
        if (x_col_major) {
            /* column-major out [count, n] = x_tile [count, n] @ w, ldc = count */
            p.m = count, p.n = n, p.trans_a = false, p.lda = ldx, p.trans_b = !w_col_major;
            p.ldb = ldw, p.ldc = count, a = x_tile, b = w_data;
        } else {
            /* row-major out: the column-major out^T [n, count] = w^T x_tile^T, ldc = n */
            p.m = n, p.n = count, p.trans_a = w_col_major, p.lda = ldw, p.trans_b = false;
            p.ldb = ldx, p.ldc = n, a = w_data, b = x_tile;
        }
        TL_TRY(tl_gemm(TL_OP_matmul, device, &p, a, b, buffer));
        /* rows of the tile (row-major) or its columns' runs (column-major) */
        size_t width = (size_t)(x_col_major ? count : n) * size;
        size_t height = (size_t)(x_col_major ? n : count);
        TL_TRY(copier->copy(copier->device, slot, x_tile, (size_t)ldx * size, buffer, width, width,
                            height));
    }
    /* everything queued after this sees the copies done */
    return tile > 0 ? copier->wait(copier->device, (int)((tile - 1) % buffers)) : TL_OK;
}
