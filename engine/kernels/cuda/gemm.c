/* CUDA GEMM kernels on cuBLAS: cublasGemmEx for one product, cublasGemmStridedBatchedEx for a
   batch, on the runtime's handle and stream of the device; f32 (TF32 under precision "high"),
   f64, and bf16/f16 inputs with f32 compute and f32 or same-dtype output; a large product with
   an operand not 16-byte aligned on aligned copies; a product with an epilogue on cuBLASLt. */
#include <limits.h>
#include <stdint.h>

#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/blas_types.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_epilogue.h"

#define OP_NAME "gemm"

static tl_status check_int(const GemmParams *p) {
    const int64_t v[] = {p->m, p->n, p->k, p->lda, p->ldb, p->ldc, p->batch_count};
    return tl_cuda_blas_ints(OP_NAME, v, (int)(sizeof v / sizeof v[0]));
}

/* cuBLAS runs a product whose sizes or operands are not 16-byte aligned (a vocabulary of 50257
   columns) on its align-1 kernels, several times slower than the aligned ones (8x on an H200). A
   product of at least PADDED_MACS multiply-adds runs on aligned copies instead, as inductor pads:
   m, n and k rounded up to 16 bytes of elements, each operand that needs it copied into a zeroed
   buffer of the rounded sizes (the zero rows and columns add nothing to the sums), the product
   into such a buffer, and its m x n block copied out (cudaMemsetAsync / cudaMemcpy2DAsync, on the
   stream). */
#define PADDED_MACS ((int64_t)1 << 26)

static const tl_kernel_variant gemm_paths[] = {
    TL_LOOP_VARIANT("gemm", TL_DTYPES_FLOATING, "direct",
                    "sizes and operands 16-byte aligned, a batch, or fewer than 2^26 "
                    "multiply-adds: cuBLAS on the operands as they are"),
    TL_LOOP_VARIANT("gemm", TL_DTYPES_FLOATING, "padded",
                    "one product of at least 2^26 multiply-adds with a size or an operand not "
                    "16-byte aligned: cuBLAS on zero-padded aligned copies"),
    TL_LOOP_VARIANT("gemm", TL_DTYPES_F32 | TL_DTYPES_BF16 | TL_DTYPES_F16, "epilogue_lt",
                    "an epilogue (bias, GELU with aux, dGELU, bias gradient) on a single product "
                    "with every operand 16-byte aligned: one cublasLtMatmul"),
    TL_LOOP_VARIANT("gemm", TL_DTYPES_FLOATING, "epilogue_after",
                    "an epilogue cuBLASLt does not run (float64, an operand or vector not 16-byte "
                    "aligned, k 0): the product, then the epilogue's kernels"),
};
TL_VARIANT_TABLE(tl_cuda_gemm_variants, TL_DEVICE_CUDA, gemm_paths);

/* A column-major matrix as stored: rows elements a column (the leading extent), cols columns, ld
   apart, size bytes an element. */
typedef struct stored {
    void *ptr;
    int64_t rows, cols, ld;
    size_t size;
} stored;

static int64_t round_up(int64_t v, int64_t to) {
    return (v + to - 1) / to * to;
}

/* elements of 16 bytes' worth */
static int64_t per_16_bytes(size_t size) {
    return size >= 16 ? 1 : (int64_t)(16 / size);
}

static bool is_aligned(const void *ptr, int64_t ld, size_t size) {
    return (uintptr_t)ptr % 16 == 0 && (size_t)ld * size % 16 == 0;
}

/* m as a rows x cols matrix (at least its own sizes) in a new 16-byte aligned buffer *buffer:
   zeroed where m does not reach, m copied in when copy_in. */
static tl_status padded_copy(int device, cudaStream_t stream, const stored *m, int64_t rows,
                             int64_t cols, bool copy_in, stored *out, void **buffer) {
    const int64_t ld = round_up(rows, per_16_bytes(m->size));
    const size_t bytes = (size_t)(ld * cols) * m->size;
    TL_TRY(tl_cuda_malloc(device, bytes, OP_NAME, buffer));
    *out = (stored){*buffer, rows, cols, ld, m->size};
    cudaError_t err = cudaSuccess;
    if (rows > m->rows || cols > m->cols || !copy_in)
        err = cudaMemsetAsync(*buffer, 0, bytes, stream);
    if (err == cudaSuccess && copy_in)
        err = cudaMemcpy2DAsync(*buffer, (size_t)ld * m->size, m->ptr, (size_t)m->ld * m->size,
                                (size_t)m->rows * m->size, (size_t)m->cols,
                                cudaMemcpyDeviceToDevice, stream);
    return err == cudaSuccess ? TL_OK : tl_cuda_fail(err, OP_NAME, "copying an operand aligned");
}

static tl_status gemm(tl_device device, const GemmParams *p, const void *a, const void *b, void *c);

/* The product of p on zero-padded aligned copies (see PADDED_MACS). */
static tl_status gemm_padded(tl_device device, const GemmParams *p, const void *a, const void *b,
                             void *c) {
    cublasHandle_t handle;
    cudaStream_t stream;
    TL_TRY(tl_cuda_blas(device.index, OP_NAME, &handle, &stream));
    const size_t in = tl_dtype_size(p->input_dtype), out = tl_dtype_size(p->output_dtype);
    const int64_t per = per_16_bytes(in);
    const int64_t m = round_up(p->m, per), n = round_up(p->n, per), k = round_up(p->k, per);
    /* A is m x k (stored k x m when transposed), B k x n (n x k), C m x n */
    const stored given[3] = {
        {(void *)a, p->trans_a ? p->k : p->m, p->trans_a ? p->m : p->k, p->lda, in},
        {(void *)b, p->trans_b ? p->n : p->k, p->trans_b ? p->k : p->n, p->ldb, in},
        {c, p->m, p->n, p->ldc, out},
    };
    const int64_t rows[3] = {p->trans_a ? k : m, p->trans_b ? n : k, m};
    const int64_t cols[3] = {p->trans_a ? m : k, p->trans_b ? k : n, n};
    stored use[3] = {given[0], given[1], given[2]};
    void *buffers[3] = {NULL, NULL, NULL};
    tl_status status = TL_OK;
    for (int i = 0; i < 3 && status == TL_OK; i++) {
        const stored *g = &given[i];
        if (rows[i] == g->rows && cols[i] == g->cols && is_aligned(g->ptr, g->ld, g->size))
            continue;
        status = padded_copy(device.index, stream, g, rows[i], cols[i], i < 2 || p->beta != 0.0,
                             &use[i], &buffers[i]);
    }
    if (status == TL_OK) {
        GemmParams q = *p;
        q.m = m, q.n = n, q.k = k;
        q.lda = use[0].ld, q.ldb = use[1].ld, q.ldc = use[2].ld;
        status = gemm(device, &q, use[0].ptr, use[1].ptr, use[2].ptr);
    }
    if (status == TL_OK && buffers[2]) {
        cudaError_t err =
            cudaMemcpy2DAsync(c, (size_t)p->ldc * out, use[2].ptr, (size_t)use[2].ld * out,
                              (size_t)p->m * out, (size_t)p->n, cudaMemcpyDeviceToDevice, stream);
        if (err != cudaSuccess) status = tl_cuda_fail(err, OP_NAME, "copying the product out");
    }
    for (int i = 0; i < 3; i++)
        if (buffers[i]) tl_cuda_free(device.index, buffers[i]);
    return status;
}

/* Whether p is one product of at least PADDED_MACS multiply-adds with a size or an operand not
   16-byte aligned. */
static bool wants_padding(const GemmParams *p, const void *a, const void *b, const void *c) {
    if (p->batch_count > 1 || !a || !b || p->k == 0 || p->m * p->n > INT64_MAX / p->k ||
        p->m * p->n * p->k < PADDED_MACS)
        return false;
    const size_t in = tl_dtype_size(p->input_dtype), out = tl_dtype_size(p->output_dtype);
    const int64_t per = per_16_bytes(in);
    return p->m % per || p->n % per || p->k % per || !is_aligned(a, p->lda, in) ||
           !is_aligned(b, p->ldb, in) || !is_aligned(c, p->ldc, out);
}

static tl_status gemm_kernel(tl_device device, const GemmParams *p, const void *a, const void *b,
                             void *c);

/* A product with an epilogue: fused by cuBLASLt where it runs it, else the product (the paths
   below) and then the epilogue's kernels. */
static tl_status gemm_with_epilogue(tl_device device, const GemmParams *p, const void *a,
                                    const void *b, void *c) {
    if (tl_cuda_gemm_lt_eligible(p, a, b, c)) {
        bool ran = false;
        TL_TRY(tl_cuda_gemm_lt(device, p, a, b, c, &ran));
        if (ran) {
            tl_loop_variant_ran(&gemm_paths[2]);
            return TL_OK;
        }
    }
    tl_loop_variant_ran(&gemm_paths[3]);
    GemmParams plain = *p;
    plain.epilogue = NULL;
    if (p->m > 0 && p->n > 0) TL_TRY(gemm_kernel(device, &plain, a, b, c));
    return tl_cuda_gemm_epilogue(device, p, b, c);
}

/* The kernel of the GEMM ops: the epilogue's path when there is one, the padded path for a large
   unaligned product, cuBLAS directly otherwise. */
static tl_status gemm_kernel(tl_device device, const GemmParams *p, const void *a, const void *b,
                             void *c) {
    if (p->epilogue) return gemm_with_epilogue(device, p, a, b, c);
    if (wants_padding(p, a, b, c)) {
        tl_loop_variant_ran(&gemm_paths[1]);
        return gemm_padded(device, p, a, b, c);
    }
    tl_loop_variant_ran(&gemm_paths[0]);
    return gemm(device, p, a, b, c);
}

/* One kernel for every dtype: tl_gemm has validated sizes, leading dims and the dtype combination
   (f32 -> f32, f64 -> f64, bf16/f16 -> f32 or the same, computed in f32). */
static tl_status gemm(tl_device device, const GemmParams *p, const void *a, const void *b,
                      void *c) {
    TL_TRY(check_int(p));
    cublasHandle_t handle;
    cudaStream_t stream;
    TL_TRY(tl_cuda_blas(device.index, OP_NAME, &handle, &stream));

    cudaDataType_t in_type = tl_cuda_data_type(p->input_dtype),
                   out_type = tl_cuda_data_type(p->output_dtype);
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if (p->input_dtype == TL_F64)
        compute = CUBLAS_COMPUTE_64F;
    else if (p->input_dtype == TL_F32 && tl_cuda_matmul_allow_tf32())
        compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    double alpha64 = p->alpha, beta64 = p->beta;
    float alpha32 = p->alpha, beta32 = p->beta;
    const void *alpha = compute == CUBLAS_COMPUTE_64F ? (const void *)&alpha64 : &alpha32;
    const void *beta = compute == CUBLAS_COMPUTE_64F ? (const void *)&beta64 : &beta32;
    /* k == 0 (C = beta C): A and B are not read and may be NULL */
    if (!a) a = c;
    if (!b) b = c;

    cublasStatus_t s;
    if (p->batch_count <= 1) {
        s = cublasGemmEx(handle, tl_cuda_blas_op(p->trans_a), tl_cuda_blas_op(p->trans_b),
                         (int)p->m, (int)p->n, (int)p->k, alpha, a, in_type, (int)p->lda, b,
                         in_type, (int)p->ldb, beta, c, out_type, (int)p->ldc, compute,
                         CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) return tl_cublas_fail(s, OP_NAME, "cublasGemmEx");
    } else {
        s = cublasGemmStridedBatchedEx(
            handle, tl_cuda_blas_op(p->trans_a), tl_cuda_blas_op(p->trans_b), (int)p->m, (int)p->n,
            (int)p->k, alpha, a, in_type, (int)p->lda, (long long)p->stride_a, b, in_type,
            (int)p->ldb, (long long)p->stride_b, beta, c, out_type, (int)p->ldc,
            (long long)p->stride_c, (int)p->batch_count, compute, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS)
            return tl_cublas_fail(s, OP_NAME, "cublasGemmStridedBatchedEx");
    }
    return tl_cuda_check_launch(OP_NAME);
}

/* Every op of the GEMM family in ops.def gets the entries (GEMM_OP rows of tlua/ops.def). */
static const tl_kernel_entry entries[] = {
#define GEMM_OP(name, differentiable, backward)                                                    \
    TL_KERNEL_NAMED("cuda_gemm", name, TL_DTYPES_FLOATING, gemm, gemm_kernel),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cuda_gemm_table, TL_DEVICE_CUDA, entries);
