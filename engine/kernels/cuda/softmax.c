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

// clang-format off
#define ENTRY(op, dtype, sfx) {TL_OP_##op, dtype, "cuda_" #op "_" #sfx, {.softmax = op##_kernel}}
// clang-format on

static const tl_kernel_entry entries[] = {
    ENTRY(softmax, TL_F32, f32),   ENTRY(log_softmax, TL_F32, f32),
    ENTRY(softmax, TL_F64, f64),   ENTRY(log_softmax, TL_F64, f64),
    ENTRY(softmax, TL_BF16, bf16), ENTRY(log_softmax, TL_BF16, bf16),
    ENTRY(softmax, TL_F16, f16),   ENTRY(log_softmax, TL_F16, f16),
};

TL_KERNEL_TABLE(tl_cuda_softmax_table, TL_DEVICE_CUDA, entries);
