/* CUDA cumsum and nonzero kernels, the C side: the dtypes of cpu/scan.c, the geometry for
   cuda/scan.cu. */
#include <string.h>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/scan.h"

/* One kernel for every dtype (cuda/scan.cu dispatches on it): floating sums keep the input's
   dtype, integer and bool sums are int64. */
static tl_status cumsum_kernel(tl_tensor *out, const tl_tensor *in, int dim) {
    const tl_dtype out_dtype = tl_dtype_is_floating(in->dtype) ? in->dtype : TL_I64;
    if (out->dtype != out_dtype)
        return tl_error(TL_ERR_DTYPE, "cumsum: kernel expected a %s output, got %s",
                        tl_dtype_name(out_dtype), tl_dtype_name(out->dtype));
    tl_cuda_cumsum c = {
        .dtype = (int)in->dtype,
        .in = tl_data(in),
        .out = tl_data(out),
        .len = in->shape[dim],
        .step_in = in->strides[dim],
        .step_out = out->strides[dim],
    };
    const int64_t *strides[2] = {in->strides, out->strides};
    tl_cuda_positions_make(&c.pos, in->ndim, in->shape, dim, 2, strides);
    if (c.pos.count == 0 || c.len == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(in, "cumsum", &c.at));
    return tl_cuda_cumsum_run(&c);
}

static tl_status nonzero_kernel(tl_tensor *out, const tl_tensor *in, int64_t *count) {
    tl_cuda_nonzero z = {
        .dtype = (int)in->dtype,
        .n = tl_numel(in),
        .ndim = in->ndim,
    };
    z.in = z.n > 0 ? tl_data(in) : NULL; /* an empty tensor's offset may be any */
    memcpy(z.shape, in->shape, sizeof(int64_t) * (size_t)in->ndim);
    if (!out) {
        *count = 0;
        if (z.n == 0) return TL_OK;
        TL_TRY(tl_cuda_where_of(in, "nonzero", &z.at));
        return tl_cuda_nonzero_count(&z, count);
    }
    if (out->dtype != TL_I64 || out->ndim != 2 || out->shape[1] != in->ndim ||
        !tl_is_contiguous(out))
        return tl_error(TL_ERR_SHAPE, "nonzero: kernel expected a contiguous int64 output [n, %d]",
                        in->ndim);
    z.out = tl_data(out);
    z.rows = out->shape[0];
    if (z.n == 0 || z.rows == 0 || z.ndim == 0) return TL_OK; /* nothing to write */
    TL_TRY(tl_cuda_where_of(in, "nonzero", &z.at));
    return tl_cuda_nonzero_run(&z);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(cumsum, TL_DTYPES_ALL, scan, cumsum_kernel),
    TL_KERNEL(nonzero, TL_DTYPES_ALL, nonzero, nonzero_kernel),
};

TL_KERNEL_TABLE(tl_cuda_scan_table, TL_DEVICE_CUDA, entries);
