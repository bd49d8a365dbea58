/* CPU block-sparse linear kernels on OpenBLAS: per block row (or column) the dense operand's
   blocks are gathered into one panel and multiplied with the packed weight blocks by one GEMM;
   the weight gradient is one GEMM per block. The GEMMs are small, so OpenMP spreads them over
   the cores (each runs single-threaded inside the parallel loop). bfloat16/float16 go through
   float32 scratch. */
#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"

/* Rows of the dense operand per gathered panel: large enough for GEMM, small enough to stay
   in cache. */
enum { CHUNK_ROWS = 256 };

/* A dense operand or result in the compute type (float, or double for float64). */
typedef struct dense_view {
    void *data;
    bool owned;
} dense_view;

static bool is_f64(const tl_tensor *t) {
    return t->dtype == TL_F64;
}

static size_t compute_size(const tl_tensor *t) {
    return is_f64(t) ? sizeof(double) : sizeof(float);
}

/* t's elements in the compute type: t's own data for float32/float64, else a float32 copy. */
static tl_status widen(const tl_tensor *t, dense_view *v) {
    int64_t n = tl_numel(t);
    v->owned = false;
    v->data = tl_data(t);
    if (t->dtype == TL_F32 || t->dtype == TL_F64) return TL_OK;
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!f) return tl_error(TL_ERR_MEMORY, "block_sparse_linear: out of memory for scratch");
    const uint16_t *src = tl_data(t);
    for (int64_t i = 0; i < n; i++)
        f[i] = t->dtype == TL_BF16 ? tl_bf16_load(src[i]) : tl_f16_load(src[i]);
    v->data = f, v->owned = true;
    return TL_OK;
}

/* A result's storage in the compute type: its own, or float32 scratch for 16-bit dtypes. */
static tl_status result_view(const tl_tensor *t, dense_view *v) {
    int64_t n = tl_numel(t);
    v->owned = false;
    v->data = tl_data(t);
    if (t->dtype == TL_F32 || t->dtype == TL_F64) return TL_OK;
    v->data = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!v->data) return tl_error(TL_ERR_MEMORY, "block_sparse_linear: out of memory for scratch");
    v->owned = true;
    return TL_OK;
}

/* Rounds a float32 scratch result into t (16-bit dtypes); nothing for float32/float64. */
static void narrow_result(tl_tensor *t, const dense_view *v) {
    if (!v->owned) return;
    const float *f = v->data;
    uint16_t *dst = tl_data(t);
    for (int64_t i = 0, n = tl_numel(t); i < n; i++)
        dst[i] = t->dtype == TL_BF16 ? tl_bf16_round(f[i]) : tl_f16_round(f[i]);
}

static void release_view(dense_view *v) {
    if (v->owned) free(v->data);
    v->data = NULL, v->owned = false;
}

/* Row-major C [m, n] (ldc) = A [m, k] op B + beta C: B is [k, n] (ldb), or [n, k] when
   trans_b; trans_a reads A as [k, m]. */
static void gemm_rm(bool f64, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                    int64_t ldc) {
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    if (f64)
        cblas_dgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb,
                    beta, c, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb,
                    (float)beta, c, (int)ldc);
}

static const int32_t *index_data(const tl_tensor *t) {
    return tl_data(t);
}

static tl_status check_blas_range(int64_t rows, int64_t width) {
    if (rows > INT_MAX || width > INT_MAX)
        return tl_error(TL_ERR_ARGUMENT,
                        "block_sparse_linear: %lld rows of %lld features exceed the BLAS integer "
                        "range",
                        (long long)rows, (long long)width);
    return TL_OK;
}

/* One side of the product: for each output block (a block row of W in the forward, a block
   column in the input gradient) the n entries of its list, each naming a block of the dense
   operand (dense_block) and a weight block (weight_block). */
typedef struct block_lists {
    const int32_t *offsets;      /* [outputs + 1] */
    const int32_t *dense_block;  /* the dense operand's block of each entry */
    const int32_t *weight_block; /* the weight block of each entry (NULL: the entry itself) */
    bool transpose_weight;       /* forward: out += dense_block @ W_e^T; backward: @ W_e */
} block_lists;

/* out [rows, outputs * b] = sum over each output's list of dense blocks @ weight blocks. The
   weight blocks of one output are packed side by side once; per chunk of rows the dense blocks
   of the list are gathered into one panel, then one GEMM writes the output's columns. */
/* One thread's gather panel: CHUNK_ROWS rows of the longest list. */
static size_t panel_size(int64_t longest, int64_t b, size_t es) {
    return (size_t)CHUNK_ROWS * (size_t)(longest > 0 ? longest * b : 1) * es;
}

static tl_status block_product(tl_tensor *out, const tl_tensor *dense, const tl_tensor *blocks,
                               const tl_tensor *bias, const block_lists *lists) {
    const int64_t rows = dense->shape[0], width = dense->shape[1], out_width = out->shape[1];
    const int64_t b = blocks->shape[1], outputs = out_width / b;
    const bool f64 = is_f64(dense);
    const size_t es = compute_size(dense);
    TL_TRY(check_blas_range(rows, width > out_width ? width : out_width));
    dense_view x = {0}, w = {0}, y = {0}, bv = {0};
    void *packed = NULL, *panel = NULL;
    int64_t longest = 0, nnz = blocks->shape[0];
    for (int64_t o = 0; o < outputs; o++) {
        int64_t n = lists->offsets[o + 1] - lists->offsets[o];
        longest = n > longest ? n : longest;
    }
    tl_status status = widen(dense, &x);
    if (status == TL_OK) status = widen(blocks, &w);
    if (status == TL_OK && bias) status = widen(bias, &bv);
    if (status == TL_OK) status = result_view(out, &y);
    if (status == TL_OK) {
        packed = malloc((size_t)(nnz > 0 ? nnz : 1) * (size_t)(b * b) * es);
        panel = malloc((size_t)omp_get_max_threads() * panel_size(longest, b, es));
        if (!packed || !panel)
            status = tl_error(TL_ERR_MEMORY, "block_sparse_linear: out of memory for panels");
    }
    if (status != TL_OK) goto done;
    /* Pack each output's weight blocks: for the forward as [b, n * b] (W_e side by side, each
       row of the panel an output feature), for the input gradient as [n * b, b] (W_e stacked). */
    for (int64_t o = 0; o < outputs; o++) {
        int64_t first = lists->offsets[o], n = lists->offsets[o + 1] - first;
        char *dst = (char *)packed + (size_t)(first * b * b) * es;
        for (int64_t k = 0; k < n; k++) {
            int64_t e = lists->weight_block ? lists->weight_block[first + k] : first + k;
            const char *src = (const char *)w.data + (size_t)(e * b * b) * es;
            if (lists->transpose_weight)
                for (int64_t r = 0; r < b; r++)
                    memcpy(dst + (size_t)(r * n * b + k * b) * es, src + (size_t)(r * b) * es,
                           (size_t)b * es);
            else
                memcpy(dst + (size_t)(k * b * b) * es, src, (size_t)(b * b) * es);
        }
    }
    const int64_t chunks = (rows + CHUNK_ROWS - 1) / CHUNK_ROWS, tasks = chunks * outputs;
    const size_t per_thread = panel_size(longest, b, es);
#pragma omp parallel for schedule(dynamic) if (tasks > 1)
    for (int64_t task = 0; task < tasks; task++) {
        const int64_t r0 = task / outputs * CHUNK_ROWS, o = task % outputs;
        char *panel_of_thread = (char *)panel + (size_t)omp_get_thread_num() * per_thread;
        {
            int64_t m = rows - r0 < CHUNK_ROWS ? rows - r0 : CHUNK_ROWS;
            int64_t first = lists->offsets[o], n = lists->offsets[o + 1] - first;
            char *dst = (char *)y.data + (size_t)(r0 * out_width + o * b) * es;
            if (n == 0) {
                for (int64_t i = 0; i < m; i++)
                    memset(dst + (size_t)(i * out_width) * es, 0, (size_t)b * es);
                continue; /* the next task */
            }
            for (int64_t i = 0; i < m; i++)
                for (int64_t k = 0; k < n; k++)
                    memcpy(panel_of_thread + (size_t)(i * n * b + k * b) * es,
                           (const char *)x.data +
                               (size_t)((r0 + i) * width + lists->dense_block[first + k] * b) * es,
                           (size_t)b * es);
            const void *weights = (const char *)packed + (size_t)(first * b * b) * es;
            gemm_rm(f64, false, lists->transpose_weight, m, b, n * b, panel_of_thread, n * b,
                    weights, lists->transpose_weight ? n * b : b, 0.0, dst, out_width);
        }
    }
    if (bias)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < out_width; j++) {
                if (f64)
                    ((double *)y.data)[i * out_width + j] += ((const double *)bv.data)[j];
                else
                    ((float *)y.data)[i * out_width + j] += ((const float *)bv.data)[j];
            }
    narrow_result(out, &y);
done:
    free(packed), free(panel);
    release_view(&x), release_view(&w), release_view(&y), release_view(&bv);
    return status;
}

static tl_status forward(tl_tensor *out, const tl_tensor *dense, const tl_tensor *other,
                         const tl_tensor *bias, const tl_block_layout *layout) {
    block_lists lists = {.offsets = index_data(layout->row_offsets),
                         .dense_block = index_data(layout->col_indices),
                         .weight_block = NULL,
                         .transpose_weight = true};
    return block_product(out, dense, other, bias, &lists);
}

static tl_status backward_input(tl_tensor *out, const tl_tensor *dense, const tl_tensor *other,
                                const tl_tensor *bias, const tl_block_layout *layout) {
    (void)bias;
    block_lists lists = {.offsets = index_data(layout->col_offsets),
                         .dense_block = index_data(layout->row_indices),
                         .weight_block = index_data(layout->col_blocks),
                         .transpose_weight = false};
    return block_product(out, dense, other, NULL, &lists);
}

/* out block e [b, b] = grad[:, row e]^T @ x[:, col e]: one GEMM over all rows per block. */
static tl_status backward_weight(tl_tensor *out, const tl_tensor *dense, const tl_tensor *other,
                                 const tl_tensor *bias, const tl_block_layout *layout) {
    (void)bias;
    const int64_t rows = dense->shape[0], out_width = dense->shape[1], width = other->shape[1];
    const int64_t nnz = out->shape[0], b = out->shape[1];
    const bool f64 = is_f64(dense);
    const size_t es = compute_size(dense);
    TL_TRY(check_blas_range(rows, width > out_width ? width : out_width));
    const int32_t *row = index_data(layout->coo_rows), *col = index_data(layout->coo_cols);
    dense_view g = {0}, x = {0}, dw = {0};
    tl_status status = widen(dense, &g);
    if (status == TL_OK) status = widen(other, &x);
    if (status == TL_OK) status = result_view(out, &dw);
    if (status == TL_OK) {
#pragma omp parallel for schedule(dynamic) if (nnz > 1)
        for (int64_t e = 0; e < nnz; e++) {
            char *dst = (char *)dw.data + (size_t)(e * b * b) * es;
            if (rows == 0) {
                memset(dst, 0, (size_t)(b * b) * es);
                continue;
            }
            gemm_rm(f64, true, false, b, b, rows, (const char *)g.data + (size_t)(row[e] * b) * es,
                    out_width, (const char *)x.data + (size_t)(col[e] * b) * es, width, 0.0, dst,
                    b);
        }
        narrow_result(out, &dw);
    }
    release_view(&g), release_view(&x), release_view(&dw);
    return status;
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(block_sparse_linear, TL_DTYPES_FLOATING, block_sparse, forward),
    TL_KERNEL(block_sparse_linear_backward_input, TL_DTYPES_FLOATING, block_sparse, backward_input),
    TL_KERNEL(block_sparse_linear_backward_weight, TL_DTYPES_FLOATING, block_sparse,
              backward_weight),
};

TL_KERNEL_TABLE(tl_cpu_block_sparse_table, TL_DEVICE_CPU, entries);
