/* The tile loop of the matmul_inplace kernels: each tile's GEMM into a workspace buffer, in x's
   layout, then the device's copy kernel back over the tile. (A copy back on a second CUDA stream
   by cudaMemcpy2DAsync, overlapping the next tile's GEMM, was slower on an H100: 3.74 ms against
   3.15 ms for the benchmark chain; the copy engines move about 0.5 TB/s.) */
#include "kernels/gemm.h"
#include "kernels/matmul_inplace.h"

/* The view of count rows of a matrix from element offset `offset` (strides rs, cs), on the
   stack: it borrows t's storage for one kernel call. */
static tl_tensor tile_view(const tl_tensor *t, int64_t offset, int64_t count, int64_t n, int64_t rs,
                           int64_t cs) {
    tl_tensor view = *t;
    view.ndim = 2;
    view.shape[0] = count, view.shape[1] = n;
    view.strides[0] = rs, view.strides[1] = cs;
    view.offset = offset;
    view.autograd = NULL;
    return view;
}

tl_status tl_matmul_inplace_tiles(tl_tensor *x, const tl_tensor *w, tl_tensor *workspace) {
    const int64_t rows = x->shape[0], n = x->shape[1];
    const int64_t tile_rows = workspace->shape[0];
    bool x_col_major, w_col_major;
    int64_t ldx, ldw;
    if (!tl_gemm_layout(rows, n, x->strides[0], x->strides[1], &x_col_major, &ldx) ||
        !tl_gemm_layout(n, n, w->strides[0], w->strides[1], &w_col_major, &ldw))
        return tl_error(TL_ERR_ARGUMENT, "matmul_inplace: x or w has no GEMM layout");
    const size_t size = tl_dtype_size(x->dtype);
    char *x_data = tl_data(x), *ws_data = tl_data(workspace);
    const void *w_data = tl_data(w);
    tl_device device = tl_tensor_device(x);
    const tl_kernel_entry *copy =
        tl_dispatch(TL_OP_cast, device, x->dtype, (const tl_tensor *const[]){x, workspace, NULL});
    if (!copy) return tl_dispatch_status();
    for (int64_t first = 0; first < rows; first += tile_rows) {
        const int64_t count = rows - first < tile_rows ? rows - first : tile_rows;
        const int64_t x_offset = first * x->strides[0];
        char *x_tile = x_data + (size_t)x_offset * size;
        GemmParams p = {.alpha = 1.0f,
                        .beta = 0.0f,
                        .k = n,
                        .input_dtype = x->dtype,
                        .output_dtype = x->dtype,
                        .compute_dtype = tl_gemm_compute_dtype(x->dtype)};
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
        TL_TRY(tl_gemm(TL_OP_matmul, device, &p, a, b, ws_data));
        /* back over the tile, the buffer in x's layout */
        tl_tensor dst = tile_view(x, x->offset + x_offset, count, n, x->strides[0], x->strides[1]);
        tl_tensor src = tile_view(workspace, workspace->offset, count, n, x_col_major ? 1 : n,
                                  x_col_major ? count : 1);
        TL_TRY(copy->fn.copy(&dst, &src));
    }
    return TL_OK;
}
