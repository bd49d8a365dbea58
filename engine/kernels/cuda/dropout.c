/* CUDA dropout kernel, the C side: the geometry of out and in and the kernel table. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dropout.h"

/* out's dims of size > 1 in row-major order, merged where both tensors allow (so a position's
   linear index over them is its row-major index e), with the strides of out and in. */
static void geometry_make(tl_cuda_geometry *g, const tl_tensor *out, const tl_tensor *in) {
    g->ndim = 0;
    for (int d = 0; d < out->ndim; d++) {
        int64_t size = out->shape[d];
        if (size == 1) continue;
        int k = g->ndim;
        if (k > 0 && g->strides[0][k - 1] == out->strides[d] * size &&
            g->strides[1][k - 1] == in->strides[d] * size) {
            g->shape[k - 1] *= size;
        } else {
            g->shape[k] = size;
            g->ndim++;
        }
        g->strides[0][g->ndim - 1] = out->strides[d];
        g->strides[1][g->ndim - 1] = in->strides[d];
    }
}

static tl_status cuda_dropout(tl_tensor *out, const tl_tensor *in, const tl_op_args *args) {
    double p = args->scalar[0];
    tl_cuda_dropout d = {
        .dtype = (int)out->dtype,
        .out = tl_data(out),
        .in = tl_data(in),
        .n = tl_numel(out),
        .dense = tl_is_contiguous(out) && tl_is_contiguous(in),
        .seed = args->seed,
        .counter = args->counter,
        .threshold = (float)p,
        .keep_div = 1.0 - p,
    };
    if (d.n == 0) return TL_OK;
    if (!d.dense) geometry_make(&d.geometry, out, in);
    TL_TRY(tl_cuda_where_of(out, "dropout", &d.at));
    return tl_cuda_dropout_run(&d);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(dropout, TL_DTYPES_FLOATING, unary, cuda_dropout),
};

TL_KERNEL_TABLE(tl_cuda_dropout_table, TL_DEVICE_CUDA, entries);
