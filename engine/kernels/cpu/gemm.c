/* CPU GEMM kernels on OpenBLAS: sgemm/dgemm per batch (per problem for a grouped GEMM);
   bfloat16/float16 through float32 scratch (converted in, sgemm, then float32 out or rounded
   back). */
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_epilogue.h"

#define CONVERT_PARALLEL_THRESHOLD 65536

static tl_status check_blas_int(const GemmParams *p) {
    const int64_t v[] = {p->m, p->n, p->k, p->lda, p->ldb, p->ldc};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i] > INT_MAX)
            return tl_error(TL_ERR_ARGUMENT,
                            "gemm: size or leading dim %lld exceeds the BLAS integer range",
                            (long long)v[i]);
    return TL_OK;
}

static enum CBLAS_TRANSPOSE blas_trans(bool t) {
    return t ? CblasTrans : CblasNoTrans;
}

/* Each batch's operand offset; stride 0 broadcasts one matrix to every batch. */
static int64_t batches(const GemmParams *p) {
    return p->batch_count > 1 ? p->batch_count : 1;
}

/* C = beta * C when k == 0 (nothing to multiply); beta == 0 writes zeros. */
#define DEFINE_SCALE(suffix, T)                                                                    \
    static void scale_##suffix(const GemmParams *p, T *c) {                                        \
        for (int64_t j = 0; j < p->n; j++) {                                                       \
            T *col = c + j * p->ldc;                                                               \
            if (p->beta == 0.0f)                                                                   \
                memset(col, 0, (size_t)p->m * sizeof(T));                                          \
            else                                                                                   \
                for (int64_t i = 0; i < p->m; i++) col[i] = (T)(p->beta * col[i]);                 \
        }                                                                                          \
    }
DEFINE_SCALE(f32, float)
DEFINE_SCALE(f64, double)

static tl_status gemm_f32(tl_device device, const GemmParams *p, const void *a, const void *b,
                          void *c) {
    (void)device; /* the CPU */
    TL_TRY(check_blas_int(p));
    const float *pa = a, *pb = b;
    float *pc = c;
    for (int64_t i = 0; i < batches(p); i++) {
        float *ci = pc + i * p->stride_c;
        if (p->k == 0) {
            scale_f32(p, ci);
            continue;
        }
        cblas_sgemm(CblasColMajor, blas_trans(p->trans_a), blas_trans(p->trans_b), (int)p->m,
                    (int)p->n, (int)p->k, p->alpha, pa + i * p->stride_a, (int)p->lda,
                    pb + i * p->stride_b, (int)p->ldb, p->beta, ci, (int)p->ldc);
    }
    if (p->epilogue) {
        tl_cpu_gemm_epilogue_f32(p, pc, p->ldc);
        tl_cpu_gemm_bias_grad(p, b);
    }
    return TL_OK;
}

static tl_status gemm_f64(tl_device device, const GemmParams *p, const void *a, const void *b,
                          void *c) {
    (void)device; /* the CPU */
    TL_TRY(check_blas_int(p));
    const double *pa = a, *pb = b;
    double *pc = c;
    for (int64_t i = 0; i < batches(p); i++) {
        double *ci = pc + i * p->stride_c;
        if (p->k == 0) {
            scale_f64(p, ci);
            continue;
        }
        cblas_dgemm(CblasColMajor, blas_trans(p->trans_a), blas_trans(p->trans_b), (int)p->m,
                    (int)p->n, (int)p->k, (double)p->alpha, pa + i * p->stride_a, (int)p->lda,
                    pb + i * p->stride_b, (int)p->ldb, (double)p->beta, ci, (int)p->ldc);
    }
    if (p->epilogue) {
        tl_cpu_gemm_epilogue_f64(p, pc);
        tl_cpu_gemm_bias_grad(p, b);
    }
    return TL_OK;
}

/* ---- 16-bit inputs: convert each operand's rows x cols column-major block
   (leading dim ld) to dense float32 (leading dim rows), and back ---------- */
typedef float (*to_f32_fn)(uint16_t);
typedef uint16_t (*from_f32_fn)(float);

static void widen(const uint16_t *src, int64_t rows, int64_t cols, int64_t ld, float *dst,
                  to_f32_fn to_f32) {
#pragma omp parallel for if (rows * cols > CONVERT_PARALLEL_THRESHOLD)
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++) dst[j * rows + i] = to_f32(src[j * ld + i]);
}

static void narrow(const float *src, int64_t rows, int64_t cols, uint16_t *dst, int64_t ld,
                   from_f32_fn from_f32) {
#pragma omp parallel for if (rows * cols > CONVERT_PARALLEL_THRESHOLD)
    for (int64_t j = 0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++) dst[j * ld + i] = from_f32(src[j * rows + i]);
}

static tl_status gemm_16(const GemmParams *p, const void *a, const void *b, void *c,
                         to_f32_fn to_f32, from_f32_fn from_f32) {
    TL_TRY(check_blas_int(p));
    int64_t rows_a = p->trans_a ? p->k : p->m, cols_a = p->trans_a ? p->m : p->k;
    int64_t rows_b = p->trans_b ? p->n : p->k, cols_b = p->trans_b ? p->k : p->n;
    bool f32_out = p->output_dtype == TL_F32;
    size_t size_a = (size_t)(rows_a * cols_a), size_b = (size_t)(rows_b * cols_b);
    size_t size_c = f32_out ? 0 : (size_t)(p->m * p->n);
    float *scratch = malloc((size_a + size_b + size_c + 1) * sizeof *scratch);
    if (!scratch)
        return tl_error(TL_ERR_MEMORY, "gemm: out of memory for the %s -> float32 scratch",
                        tl_dtype_name(p->input_dtype));
    float *fa = scratch, *fb = scratch + size_a, *fc = scratch + size_a + size_b;
    const uint16_t *pa = a, *pb = b;
    GemmParams q = *p; /* the float32 problem on the scratch */
    q.lda = rows_a > 1 ? rows_a : 1;
    q.ldb = rows_b > 1 ? rows_b : 1;
    for (int64_t i = 0; i < batches(p); i++) {
        /* a broadcast operand (stride 0) is converted once */
        if (p->k > 0 && (i == 0 || p->stride_a != 0))
            widen(pa + i * p->stride_a, rows_a, cols_a, p->lda, fa, to_f32);
        if (p->k > 0 && (i == 0 || p->stride_b != 0))
            widen(pb + i * p->stride_b, rows_b, cols_b, p->ldb, fb, to_f32);
        float *out;
        if (f32_out) {
            out = (float *)c + i * p->stride_c;
            q.ldc = p->ldc;
        } else {
            out = fc;
            q.ldc = p->m > 1 ? p->m : 1;
            uint16_t *ci = (uint16_t *)c + i * p->stride_c;
            if (p->beta != 0.0f) widen(ci, p->m, p->n, p->ldc, fc, to_f32);
        }
        if (p->k == 0)
            scale_f32(&q, out);
        else
            cblas_sgemm(CblasColMajor, blas_trans(q.trans_a), blas_trans(q.trans_b), (int)q.m,
                        (int)q.n, (int)q.k, q.alpha, fa, (int)q.lda, fb, (int)q.ldb, q.beta, out,
                        (int)q.ldc);
        if (p->epilogue) tl_cpu_gemm_epilogue_f32(p, out, q.ldc);
        if (!f32_out) narrow(fc, p->m, p->n, (uint16_t *)c + i * p->stride_c, p->ldc, from_f32);
    }
    free(scratch);
    tl_cpu_gemm_bias_grad(p, b);
    return TL_OK;
}

static tl_status gemm_bf16(tl_device device, const GemmParams *p, const void *a, const void *b,
                           void *c) {
    (void)device; /* the CPU */
    return gemm_16(p, a, b, c, tl_bf16_to_f32, tl_f32_to_bf16);
}

static tl_status gemm_f16(tl_device device, const GemmParams *p, const void *a, const void *b,
                          void *c) {
    (void)device; /* the CPU */
    return gemm_16(p, a, b, c, tl_f16_to_f32, tl_f32_to_f16);
}

/* One problem of a grouped GEMM through the kernel of the dtype (nothing where it is empty). */
static tl_status gemm_one(tl_device device, const GemmGroupedParams *p, const GemmGroup *q) {
    if (q->m == 0 || q->n == 0 || q->k == 0) return TL_OK;
    tl_gemm_kernel one = p->input_dtype == TL_F64    ? gemm_f64
                         : p->input_dtype == TL_BF16 ? gemm_bf16
                         : p->input_dtype == TL_F16  ? gemm_f16
                                                     : gemm_f32;
    GemmParams single = tl_gemm_problem_params(p, q);
    return one(device, &single, q->a, q->b, q->c);
}

/* A segmented GEMM (the ends in host memory): a problem per segment, and the zero blocks. */
static tl_status gemm_segments(tl_device device, const GemmGroupedParams *p) {
    const GemmSegments *s = p->segments;
    if (!s->ends_on_host)
        return tl_error(TL_ERR_DEVICE,
                        "gemm_grouped: the CPU kernel needs the ends in host memory");
    int64_t *ends = malloc(sizeof *ends * (size_t)(s->groups > 0 ? s->groups : 1));
    if (!ends) return tl_error(TL_ERR_MEMORY, "gemm_grouped: out of memory");
    tl_gemm_segment_ends(s, s->ends, ends);
    tl_status status = TL_OK;
    for (int64_t g = 0; g < s->groups && status == TL_OK; g++) {
        const GemmGroup q = tl_gemm_segment_problem(s, ends, g);
        status = gemm_one(device, p, &q);
    }
    const size_t elem = tl_dtype_size(s->dtype);
    for (int64_t i = 0; i <= s->groups && status == TL_OK; i++) {
        void *first;
        int64_t rows;
        if (!tl_gemm_segment_zeros(s, ends, i, &first, &rows)) continue;
        for (int64_t r = 0; r < rows; r++)
            memset((char *)first + (size_t)(r * s->ldc) * elem, 0, (size_t)s->n * elem);
    }
    free(ends);
    return status;
}

/* tl_gemm_grouped on the CPU: OpenBLAS per problem, through the kernel of the dtype. */
static tl_status gemm_grouped(tl_device device, const GemmGroupedParams *p) {
    if (p->segments) return gemm_segments(device, p);
    for (int64_t g = 0; g < p->group_count; g++) TL_TRY(gemm_one(device, p, &p->groups[g]));
    return TL_OK;
}

/* The same four functions serve every op that goes through tl_gemm: each op of the GEMM
   family in ops.def gets them (GEMM_OP rows of tlua/ops.def). */
static const tl_kernel_entry entries[] = {
#define GEMM_OP(name, differentiable, backward)                                                    \
    TL_KERNEL_NAMED("cpu_gemm", name, TL_DTYPES_F32, gemm, gemm_f32),                              \
        TL_KERNEL_NAMED("cpu_gemm", name, TL_DTYPES_F64, gemm, gemm_f64),                          \
        TL_KERNEL_NAMED("cpu_gemm", name, TL_DTYPES_BF16, gemm, gemm_bf16),                        \
        TL_KERNEL_NAMED("cpu_gemm", name, TL_DTYPES_F16, gemm, gemm_f16),
#include "tlua/ops.def"
#define GEMM_GROUPED_OP(name, differentiable, backward)                                            \
    TL_KERNEL_NAMED("cpu_gemm_grouped", name, TL_DTYPES_FLOATING, gemm_grouped, gemm_grouped),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cpu_gemm_table, TL_DEVICE_CPU, entries);
