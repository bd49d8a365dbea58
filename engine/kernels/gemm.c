/* tl_gemm: validates a GemmParams and hands it to the device's GEMM kernel, traced under the
   calling op. */
#include <string.h>

#include "kernels/gemm.h"
#include "kernels/kernel.h"

static int64_t at_least_one(int64_t v) {
    return v > 1 ? v : 1;
}

static bool supported_dtypes(const GemmParams *p) {
    switch (p->input_dtype) {
    case TL_F32:
        return p->output_dtype == TL_F32 && p->compute_dtype == TL_F32;
    case TL_F64:
        return p->output_dtype == TL_F64 && p->compute_dtype == TL_F64;
    case TL_BF16:
    case TL_F16:
        return (p->output_dtype == TL_F32 || p->output_dtype == p->input_dtype) &&
               p->compute_dtype == TL_F32;
    default:
        return false;
    }
}

static tl_status validate(const char *op, const GemmParams *p, const void *a, const void *b,
                          const void *c) {
    if (p->m < 0 || p->n < 0 || p->k < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: gemm sizes must be >= 0, got m %lld, n %lld, k %lld",
                        op, (long long)p->m, (long long)p->n, (long long)p->k);
    /* column-major storage: A is m x k (k x m when transposed), B is k x n (n x k), C is m x n */
    int64_t rows_a = p->trans_a ? p->k : p->m, rows_b = p->trans_b ? p->n : p->k;
    if (p->lda < at_least_one(rows_a) || p->ldb < at_least_one(rows_b) ||
        p->ldc < at_least_one(p->m))
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: gemm leading dims too small, expected lda >= %lld, ldb >= %lld, "
                        "ldc >= %lld, got %lld, %lld, %lld",
                        op, (long long)at_least_one(rows_a), (long long)at_least_one(rows_b),
                        (long long)at_least_one(p->m), (long long)p->lda, (long long)p->ldb,
                        (long long)p->ldc);
    if (p->batch_count < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: gemm batch count must be >= 0, got %lld", op,
                        (long long)p->batch_count);
    if (p->batch_count > 1) {
        if (p->stride_a < 0 || p->stride_b < 0 || p->stride_c < 0)
            return tl_error(TL_ERR_ARGUMENT,
                            "%s: gemm batch strides must be >= 0, got %lld, %lld, %lld", op,
                            (long long)p->stride_a, (long long)p->stride_b, (long long)p->stride_c);
        /* outputs of different batches must not overlap */
        if (p->m > 0 && p->n > 0 && p->stride_c < p->ldc * (p->n - 1) + p->m)
            return tl_error(TL_ERR_ARGUMENT,
                            "%s: gemm output batches overlap, expected stride_c >= %lld, got %lld",
                            op, (long long)(p->ldc * (p->n - 1) + p->m), (long long)p->stride_c);
    }
    if (!supported_dtypes(p))
        return tl_error(TL_ERR_DTYPE,
                        "%s: gemm does not support %s inputs with %s output and %s compute "
                        "(expected float32 -> float32, float64 -> float64, or bfloat16/float16 "
                        "-> float32 or the same, computed in float32)",
                        op, tl_dtype_name(p->input_dtype), tl_dtype_name(p->output_dtype),
                        tl_dtype_name(p->compute_dtype));
    bool empty = p->m == 0 || p->n == 0;
    if (!empty && (!c || (p->k > 0 && (!a || !b))))
        return tl_error(TL_ERR_ARGUMENT, "%s: gemm got a NULL operand", op);
    return TL_OK;
}

tl_status tl_gemm(tl_op op, tl_device device, const GemmParams *params, const void *a,
                  const void *b, void *c) {
    const char *name = tl_op_info_of(op)->name;
    if (!params) return tl_error(TL_ERR_ARGUMENT, "%s: gemm got no params", name);
    TL_TRY(validate(name, params, a, b, c));

    /* The trace shows the problem as row-major matrices, as callers that write
       C^T = B^T A^T see it: out [n, m] = b' [n, k] @ a' [k, m], with the batch
       count in front when batched. For matmul these are the user's shapes. */
    const GemmParams *p = params;
    bool batched = p->batch_count > 1;
    int ndims[3];
    int64_t shapes[3][TL_MAX_DIMS];
    memset(shapes, 0, sizeof shapes);
    const int64_t dims[3][2] = {{p->n, p->m}, {p->n, p->k}, {p->k, p->m}};
    for (int i = 0; i < 3; i++) {
        int d = 0;
        if (batched) shapes[i][d++] = p->batch_count;
        shapes[i][d++] = dims[i][0];
        shapes[i][d++] = dims[i][1];
        ndims[i] = d;
    }
    const tl_kernel_entry *kernel = tl_dispatch_shapes(op, device, p->input_dtype, 3, ndims,
                                                       (const int64_t(*)[TL_MAX_DIMS])shapes);
    if (!kernel) return TL_ERR_DTYPE;
    if (p->m == 0 || p->n == 0) return TL_OK;
    return kernel->fn.gemm(device, p, a, b, c);
}
