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

#define DEFINE_KERNEL(name, kind, sfx, out_dtype)                                                  \
    static tl_status name##_##sfx(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,         \
                                  int dim) {                                                       \
        return run(#name, kind, out_dtype, out, indices, in, dim);                                 \
    }
#define DEFINE_EXTREMES(sfx, dtype)                                                                \
    DEFINE_KERNEL(max, TL_CUDA_REDUCE_MAX, sfx, dtype)                                             \
    DEFINE_KERNEL(min, TL_CUDA_REDUCE_MIN, sfx, dtype)

DEFINE_KERNEL(sum, TL_CUDA_REDUCE_SUM, f32, TL_F32)
DEFINE_KERNEL(sum, TL_CUDA_REDUCE_SUM, f64, TL_F64)
DEFINE_KERNEL(sum, TL_CUDA_REDUCE_SUM, bf16, TL_BF16)
DEFINE_KERNEL(sum, TL_CUDA_REDUCE_SUM, f16, TL_F16)
DEFINE_KERNEL(sum, TL_CUDA_REDUCE_SUM, i32, TL_I64)
DEFINE_KERNEL(sum, TL_CUDA_REDUCE_SUM, i64, TL_I64)
DEFINE_KERNEL(sum, TL_CUDA_REDUCE_SUM, b8, TL_I64)
DEFINE_KERNEL(mean, TL_CUDA_REDUCE_MEAN, f32, TL_F32)
DEFINE_KERNEL(mean, TL_CUDA_REDUCE_MEAN, f64, TL_F64)
DEFINE_KERNEL(mean, TL_CUDA_REDUCE_MEAN, bf16, TL_BF16)
DEFINE_KERNEL(mean, TL_CUDA_REDUCE_MEAN, f16, TL_F16)
DEFINE_EXTREMES(f32, TL_F32)
DEFINE_EXTREMES(f64, TL_F64)
DEFINE_EXTREMES(bf16, TL_BF16)
DEFINE_EXTREMES(f16, TL_F16)
DEFINE_EXTREMES(i32, TL_I32)
DEFINE_EXTREMES(i64, TL_I64)
DEFINE_EXTREMES(b8, TL_BOOL)

/* label: the dtype as the kernel name spells it (bool is a macro, so not a token here) */
// clang-format off
#define ENTRY(op, fn, dtype, sfx, label) \
    {TL_OP_##op, dtype, "cuda_" #op "_" label, {.reduce = fn##_##sfx}}
// clang-format on
#define FLOAT_ENTRIES(dtype, sfx, label)                                                           \
    ENTRY(sum, sum, dtype, sfx, label), ENTRY(mean, mean, dtype, sfx, label)
#define EXTREME_ENTRIES(dtype, sfx, label)                                                         \
    ENTRY(max, max, dtype, sfx, label), ENTRY(min, min, dtype, sfx, label),                        \
        ENTRY(argmax, max, dtype, sfx, label), ENTRY(argmin, min, dtype, sfx, label)

static const tl_kernel_entry entries[] = {
    FLOAT_ENTRIES(TL_F32, f32, "f32"),    FLOAT_ENTRIES(TL_F64, f64, "f64"),
    FLOAT_ENTRIES(TL_BF16, bf16, "bf16"), FLOAT_ENTRIES(TL_F16, f16, "f16"),
    ENTRY(sum, sum, TL_I32, i32, "i32"),  ENTRY(sum, sum, TL_I64, i64, "i64"),
    ENTRY(sum, sum, TL_BOOL, b8, "bool"), EXTREME_ENTRIES(TL_F32, f32, "f32"),
    EXTREME_ENTRIES(TL_F64, f64, "f64"),  EXTREME_ENTRIES(TL_BF16, bf16, "bf16"),
    EXTREME_ENTRIES(TL_F16, f16, "f16"),  EXTREME_ENTRIES(TL_I32, i32, "i32"),
    EXTREME_ENTRIES(TL_I64, i64, "i64"),  EXTREME_ENTRIES(TL_BOOL, b8, "bool"),
};

TL_KERNEL_TABLE(tl_cuda_reduce_table, TL_DEVICE_CUDA, entries);
