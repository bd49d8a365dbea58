/* CUDA softmax and log_softmax along one dim, the C side: the dtypes of cpu/softmax.c, the
   geometry for cuda/softmax.cu. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

static tl_status run(const char *op, bool log_mode, tl_tensor *out, const tl_tensor *in, int dim) {
    tl_cuda_softmax s = {
        .dtype = (int)in->dtype,
        .log_mode = log_mode,
        .in = tl_data(in),
        .out = tl_data(out),
        .len = in->shape[dim],
        .step_in = in->strides[dim],
        .step_out = out->strides[dim],
    };
    const int64_t *strides[2] = {in->strides, out->strides};
    tl_cuda_positions_make(&s.pos, in->ndim, in->shape, dim, 2, strides);
    if (s.pos.count == 0 || s.len == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(in, op, &s.at));
    return tl_cuda_softmax_run(&s);
}

static tl_status softmax_kernel(tl_tensor *out, const tl_tensor *in, int dim) {
    return run("softmax", false, out, in, dim);
}

static tl_status log_softmax_kernel(tl_tensor *out, const tl_tensor *in, int dim) {
    return run("log_softmax", true, out, in, dim);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(softmax, TL_DTYPES_FLOATING, softmax, softmax_kernel),
    TL_KERNEL(log_softmax, TL_DTYPES_FLOATING, softmax, log_softmax_kernel),
};

TL_KERNEL_TABLE(tl_cuda_softmax_table, TL_DEVICE_CUDA, entries);
