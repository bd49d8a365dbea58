/* CUDA reduction kernels along one dim (sum, mean, max, min, argmax, argmin), the C side: the
   dtypes of cpu/reduce.c, the geometry for cuda/reduce.cu. */
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/ops_launch.h"

_Static_assert(TL_CUDA_F32 == (int)TL_F32 && TL_CUDA_F64 == (int)TL_F64 &&
                   TL_CUDA_BF16 == (int)TL_BF16 && TL_CUDA_F16 == (int)TL_F16 &&
                   TL_CUDA_I32 == (int)TL_I32 && TL_CUDA_I64 == (int)TL_I64 &&
                   TL_CUDA_BOOL == (int)TL_BOOL,
               "TL_CUDA_* follow tl_dtype");

static tl_status run(const char *op, int kind, tl_dtype out_dtype, tl_tensor *out,
                     tl_tensor *indices, const tl_tensor *in, int dim) {
    if (out && out->dtype != out_dtype)
        return tl_error(TL_ERR_DTYPE, "%s: kernel expected a %s output, got %s", op,
                        tl_dtype_name(out_dtype), tl_dtype_name(out->dtype));
    bool extreme = kind == TL_CUDA_REDUCE_MAX || kind == TL_CUDA_REDUCE_MIN;
    if (extreme && in->ndim > 0 && in->shape[dim] == 0)
        return tl_error(TL_ERR_SHAPE, "%s: cannot reduce a dim of size 0", op);
    tl_cuda_reduce r = {
        .kind = kind,
        .dtype = (int)in->dtype,
        .in = tl_data(in),
        .out = out ? tl_data(out) : NULL,
        .idx = indices ? tl_data(indices) : NULL,
        .len = in->ndim ? in->shape[dim] : 1,
        .step = in->ndim ? in->strides[dim] : 0,
    };
    const int64_t *strides[3] = {in->strides, out ? out->strides : NULL,
                                 indices ? indices->strides : NULL};
    tl_cuda_positions_make(&r.pos, in->ndim, in->shape, in->ndim ? dim : -1, 3, strides);
    if (r.pos.count == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(in, op, &r.at));
    return tl_cuda_reduce_run(&r);
}

/* One kernel per op for every dtype (cuda/reduce.cu dispatches on it): sums of integers and
   bool are int64, the rest keep the input's dtype. */
static tl_status sum_kernel(tl_tensor *out, tl_tensor *indices, const tl_tensor *in, int dim) {
    tl_dtype out_dtype = tl_dtype_is_floating(in->dtype) ? in->dtype : TL_I64;
    return run("sum", TL_CUDA_REDUCE_SUM, out_dtype, out, indices, in, dim);
}
static tl_status mean_kernel(tl_tensor *out, tl_tensor *indices, const tl_tensor *in, int dim) {
    return run("mean", TL_CUDA_REDUCE_MEAN, in->dtype, out, indices, in, dim);
}
static tl_status max_kernel(tl_tensor *out, tl_tensor *indices, const tl_tensor *in, int dim) {
    return run("max", TL_CUDA_REDUCE_MAX, in->dtype, out, indices, in, dim);
}
static tl_status min_kernel(tl_tensor *out, tl_tensor *indices, const tl_tensor *in, int dim) {
    return run("min", TL_CUDA_REDUCE_MIN, in->dtype, out, indices, in, dim);
}

/* argmax/argmin: the max/min kernels, which set only the indices when out is NULL */
static const tl_kernel_entry entries[] = {
    TL_KERNEL(sum, TL_DTYPES_ALL, reduce, sum_kernel),
    TL_KERNEL(mean, TL_DTYPES_FLOATING, reduce, mean_kernel),
    TL_KERNEL(max, TL_DTYPES_ALL, reduce, max_kernel),
    TL_KERNEL(min, TL_DTYPES_ALL, reduce, min_kernel),
    TL_KERNEL(argmax, TL_DTYPES_ALL, reduce, max_kernel),
    TL_KERNEL(argmin, TL_DTYPES_ALL, reduce, min_kernel),
};

TL_KERNEL_TABLE(tl_cuda_reduce_table, TL_DEVICE_CUDA, entries);
