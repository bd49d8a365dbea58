/* CUDA grouped GEMM: a list of problems on cuBLAS (problems of one shape merged into one cuBLAS
   group, all groups in one cublasGemmGroupedBatchedEx call, cublasDgemmGroupedBatched for f64;
   identical, evenly spaced problems as one strided batched GEMM; sizes on the host, nothing
   waits), and segmented problems on the Hopper core where it takes them (the ends read on the
   device, nothing waits) or as such a list (the ends read on the host). */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/blas_types.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/hopper_gemm.h"
#include "tlua/runtime.h"

#define OP_NAME "gemm_grouped"

static const tl_kernel_variant grouped_paths[] = {
    TL_LOOP_VARIANT("gemm_grouped", TL_DTYPES_FLOATING, "strided",
                    "every problem of one shape, evenly spaced: one strided batched cuBLAS GEMM"),
    TL_LOOP_VARIANT("gemm_grouped", TL_DTYPES_FLOATING, "grouped",
                    "problems of several shapes or spacings: one cuBLAS grouped batched GEMM"),
    TL_LOOP_VARIANT("gemm_grouped", TL_DTYPES_BF16 | TL_DTYPES_F16, "hopper_rows",
                    "row segments times a stack (grouped_mm and its input gradient) on a Hopper "
                    "GPU, operands 16-byte aligned: the Hopper core, tiles found on the device"),
    TL_LOOP_VARIANT("gemm_grouped", TL_DTYPES_BF16 | TL_DTYPES_F16, "hopper_reduction",
                    "segments summed over their rows (grouped_mm's weight gradient) on a Hopper "
                    "GPU, operands 16-byte aligned: the Hopper core, tiles found on the device"),
    TL_LOOP_VARIANT("gemm_grouped", TL_DTYPES_FLOATING, "segments_on_host",
                    "segments the Hopper core does not take: their ends read on the host (a "
                    "wait where they are on the device), then a list of problems"),
};
TL_VARIANT_TABLE(tl_cuda_gemm_grouped_variants, TL_DEVICE_CUDA, grouped_paths);

static tl_status check_int(const GemmGroup *q) {
    const int64_t v[] = {q->m, q->n, q->k, q->lda, q->ldb, q->ldc};
    return tl_cuda_blas_ints(OP_NAME, v, (int)(sizeof v / sizeof v[0]));
}

/* Orders problems by shape, so that equal shapes sit together and form one cuBLAS group. */
static int compare_shapes(const void *x, const void *y) {
    const GemmGroup *a = *(const GemmGroup *const *)x, *b = *(const GemmGroup *const *)y;
    const int64_t ka[] = {a->trans_a, a->trans_b, a->m, a->n, a->k, a->lda, a->ldb, a->ldc};
    const int64_t kb[] = {b->trans_a, b->trans_b, b->m, b->n, b->k, b->lda, b->ldb, b->ldc};
    for (size_t i = 0; i < sizeof ka / sizeof ka[0]; i++)
        if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
    /* then by address, so evenly spaced problems stay in order */
    uintptr_t ca = (uintptr_t)a->c, cb = (uintptr_t)b->c;
    return ca < cb ? -1 : ca > cb;
}

static bool same_shape(const GemmGroup *a, const GemmGroup *b) {
    return a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->m == b->m && a->n == b->n &&
           a->k == b->k && a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc;
}

static const char *operand(const GemmGroup *q, int which) {
    return which == 0 ? (const char *)q->a : which == 1 ? (const char *)q->b : (const char *)q->c;
}

/* The element stride (>= 0) from problem to problem of one operand, if all are evenly spaced. */
static bool even_stride(GemmGroup *const *list, int64_t count, int which, size_t elem,
                        long long *stride) {
    *stride = 0;
    if (count == 1) return true;
    ptrdiff_t step = operand(list[1], which) - operand(list[0], which);
    if (step < 0 || step % (ptrdiff_t)elem != 0) return false;
    for (int64_t i = 2; i < count; i++)
        if (operand(list[i], which) - operand(list[0], which) != step * (ptrdiff_t)i) return false;
    *stride = (long long)(step / (ptrdiff_t)elem);
    return true;
}

typedef struct call_scalars {
    cublasComputeType_t compute;
    float alpha32, beta32;
    double alpha64, beta64;
} call_scalars;

/* All problems of one shape, evenly spaced: one (strided batched) GEMM. */
static tl_status run_strided(cublasHandle_t handle, const GemmGroupedParams *p,
                             GemmGroup *const *list, int64_t count, const call_scalars *s,
                             const long long *strides) {
    const GemmGroup *q = list[0];
    cudaDataType_t in = tl_cuda_data_type(p->input_dtype), out = tl_cuda_data_type(p->output_dtype);
    const void *alpha = s->compute == CUBLAS_COMPUTE_64F ? (const void *)&s->alpha64 : &s->alpha32;
    const void *beta = s->compute == CUBLAS_COMPUTE_64F ? (const void *)&s->beta64 : &s->beta32;
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        handle, tl_cuda_blas_op(q->trans_a), tl_cuda_blas_op(q->trans_b), (int)q->m, (int)q->n,
        (int)q->k, alpha, q->a, in, (int)q->lda, strides[0], q->b, in, (int)q->ldb, strides[1],
        beta, q->c, out, (int)q->ldc, strides[2], (int)count, s->compute, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return tl_cublas_fail(st, OP_NAME, "cublasGemmStridedBatchedEx");
    tl_loop_variant_ran(&grouped_paths[0]);
    return TL_OK;
}

/* Host arrays of one grouped call: per cuBLAS group, then per problem pointers. */
typedef struct grouped_call {
    int groups;
    cublasOperation_t *trans_a, *trans_b;
    int *m, *n, *k, *lda, *ldb, *ldc, *size;
    float *alpha32, *beta32;
    double *alpha64, *beta64;
    const void **pointers; /* A..., B..., C... */
} grouped_call;

static tl_status run_grouped(int device, cudaStream_t stream, cublasHandle_t handle,
                             const GemmGroupedParams *p, GemmGroup *const *list, int64_t count,
                             const call_scalars *s) {
    if (count > INT_MAX) return tl_error(TL_ERR_ARGUMENT, OP_NAME ": too many problems");
    size_t n = (size_t)count;
    grouped_call c = {0};
    void *host = calloc(1, n * (2 * sizeof(cublasOperation_t) + 7 * sizeof(int) +
                                2 * sizeof(float) + 2 * sizeof(double) + 3 * sizeof(void *)));
    if (!host) return tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory");
    char *cursor = host;
    c.pointers = (const void **)cursor, cursor += 3 * n * sizeof(void *);
    c.alpha64 = (double *)cursor, cursor += n * sizeof(double);
    c.beta64 = (double *)cursor, cursor += n * sizeof(double);
    c.alpha32 = (float *)cursor, cursor += n * sizeof(float);
    c.beta32 = (float *)cursor, cursor += n * sizeof(float);
    c.trans_a = (cublasOperation_t *)cursor, cursor += n * sizeof(cublasOperation_t);
    c.trans_b = (cublasOperation_t *)cursor, cursor += n * sizeof(cublasOperation_t);
    int **ints[] = {&c.m, &c.n, &c.k, &c.lda, &c.ldb, &c.ldc, &c.size};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        *ints[i] = (int *)cursor, cursor += n * sizeof(int);

    for (int64_t i = 0; i < count; i++) {
        const GemmGroup *q = list[i];
        c.pointers[i] = q->a;
        c.pointers[n + (size_t)i] = q->b;
        c.pointers[2 * n + (size_t)i] = q->c;
        if (i > 0 && same_shape(q, list[i - 1])) {
            c.size[c.groups - 1]++;
            continue;
        }
        int g = c.groups++;
        c.trans_a[g] = tl_cuda_blas_op(q->trans_a), c.trans_b[g] = tl_cuda_blas_op(q->trans_b);
        c.m[g] = (int)q->m, c.n[g] = (int)q->n, c.k[g] = (int)q->k;
        c.lda[g] = (int)q->lda, c.ldb[g] = (int)q->ldb, c.ldc[g] = (int)q->ldc;
        c.size[g] = 1;
        c.alpha32[g] = s->alpha32, c.beta32[g] = s->beta32;
        c.alpha64[g] = s->alpha64, c.beta64[g] = s->beta64;
    }

    /* cuBLAS reads the pointer arrays on the device: staged on the stream (no wait), the buffer
       given back to the cache behind the call, in stream order */
    void *device_pointers = NULL;
    tl_status status = tl_cuda_malloc(device, 3 * n * sizeof(void *), OP_NAME, &device_pointers);
    if (status == TL_OK) {
        status = tl_cuda_stage(device, stream, device_pointers, c.pointers, 3 * n * sizeof(void *),
                               OP_NAME, "pointer arrays");
    }
    if (status == TL_OK) {
        const void *const *da = device_pointers;
        const void *const *db = da + n;
        void *const *dc = (void *const *)(da + 2 * n);
        cublasStatus_t st;
        if (p->input_dtype == TL_F64) {
            st = cublasDgemmGroupedBatched(handle, c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha64,
                                           (const double *const *)da, c.lda,
                                           (const double *const *)db, c.ldb, c.beta64,
                                           (double *const *)dc, c.ldc, c.groups, c.size);
        } else {
            cudaDataType_t in = tl_cuda_data_type(p->input_dtype),
                           out = tl_cuda_data_type(p->output_dtype);
            st = cublasGemmGroupedBatchedEx(handle, c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha32,
                                            da, in, c.lda, db, in, c.ldb, c.beta32, dc, out, c.ldc,
                                            c.groups, c.size, s->compute);
            /* TF32 (precision "high") where the grouped GEMM takes it, else plain f32 */
            if ((st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) &&
                s->compute != CUBLAS_COMPUTE_32F)
                st = cublasGemmGroupedBatchedEx(
                    handle, c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha32, da, in, c.lda, db, in,
                    c.ldb, c.beta32, dc, out, c.ldc, c.groups, c.size, CUBLAS_COMPUTE_32F);
        }
        if (st != CUBLAS_STATUS_SUCCESS)
            status = tl_cublas_fail(st, OP_NAME,
                                    p->input_dtype == TL_F64 ? "cublasDgemmGroupedBatched"
                                                             : "cublasGemmGroupedBatchedEx");
    }
    if (device_pointers) tl_cuda_free(device, device_pointers);
    free(host);
    if (status == TL_OK) tl_loop_variant_ran(&grouped_paths[1]);
    return status;
}

/* The problems of a list (tl_gemm_grouped validated each one and the dtypes). */
static tl_status run_list(tl_device device, const GemmGroupedParams *p, const GemmGroup *groups,
                          int64_t group_count) {
    GemmGroup **list = malloc(sizeof *list * (size_t)(group_count > 0 ? group_count : 1));
    if (!list) return tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory");
    int64_t count = 0;
    tl_status status = TL_OK;
    for (int64_t g = 0; g < group_count && status == TL_OK; g++) {
        const GemmGroup *q = &groups[g];
        if (q->m == 0 || q->n == 0 || q->k == 0) continue;
        status = check_int(q);
        list[count++] = (GemmGroup *)q;
    }
    if (status != TL_OK || count == 0) {
        free(list);
        return status;
    }
    qsort(list, (size_t)count, sizeof *list, compare_shapes);
    cublasHandle_t handle;
    cudaStream_t stream;
    status = tl_cuda_blas(device.index, OP_NAME, &handle, &stream);
    call_scalars s = {.compute = CUBLAS_COMPUTE_32F,
                      .alpha32 = p->alpha,
                      .beta32 = p->beta,
                      .alpha64 = p->alpha,
                      .beta64 = p->beta};
    if (p->input_dtype == TL_F64)
        s.compute = CUBLAS_COMPUTE_64F;
    else if (p->input_dtype == TL_F32 && tl_cuda_matmul_allow_tf32())
        s.compute = CUBLAS_COMPUTE_32F_FAST_TF32;

    if (status == TL_OK) {
        bool one_shape = same_shape(list[0], list[count - 1]);
        long long strides[3];
        size_t in = tl_dtype_size(p->input_dtype), out = tl_dtype_size(p->output_dtype);
        if (one_shape && count <= INT_MAX && even_stride(list, count, 0, in, &strides[0]) &&
            even_stride(list, count, 1, in, &strides[1]) &&
            even_stride(list, count, 2, out, &strides[2]) && (count == 1 || strides[2] != 0))
            status = run_strided(handle, p, list, count, &s, strides);
        else
            status = run_grouped(device.index, stream, handle, p, list, count, &s);
    }
    free(list);
    if (status != TL_OK) return status;
    return tl_cuda_check_launch(OP_NAME);
}

/* The Hopper core's description of s (row-major, as GemmSegments). */
static tl_hopper_gemm hopper_of(const GemmSegments *s) {
    const bool rows = s->kind == TL_GEMM_SEGMENT_ROWS;
    return (tl_hopper_gemm){.kind = rows ? TL_HOPPER_ROWS : TL_HOPPER_REDUCTION,
                            .half = s->dtype == TL_F16,
                            .a_m_major = !rows,
                            .b_n_major = !rows || !s->b_transposed,
                            .m = s->m,
                            .n = s->n,
                            .k = s->k,
                            .groups = s->groups,
                            .ends = s->ends,
                            .ends_i64 = s->ends_dtype == TL_I64,
                            .ends_on_host = s->ends_on_host,
                            .a = {s->a, s->lda, 0},
                            .b = {s->b, s->ldb, rows ? s->stride_b : 0},
                            .c = {s->c, s->ldc, rows ? 0 : s->stride_c}};
}

/* The ends' checks (s->ends_range, s->steps_range) on ends read on the host: the first failure's
   error, as the device's would read. */
static tl_status check_ends(const GemmSegments *s, const void *raw) {
    if (!s->ends_range) return TL_OK;
    const int64_t rows = s->kind == TL_GEMM_SEGMENT_ROWS ? s->m : s->k;
    const int64_t steps_shape = s->groups - 1;
    for (int64_t g = 0; g < s->groups; g++) {
        const int64_t e =
            s->ends_dtype == TL_I64 ? ((const int64_t *)raw)[g] : ((const int32_t *)raw)[g];
        if (e < 0 || e > rows) return tl_index_range_error(s->ends_range, &s->groups, 1, e, g);
        if (g == 0) continue;
        const int64_t before =
            s->ends_dtype == TL_I64 ? ((const int64_t *)raw)[g - 1] : ((const int32_t *)raw)[g - 1];
        if (e - before < 0 || e - before > rows)
            return tl_index_range_error(s->steps_range, &steps_shape, 1, e - before, g - 1);
    }
    return TL_OK;
}

/* Segments whose ends are read on the host: the list of their problems, and the zero blocks. */
static tl_status run_segments_on_host(tl_device device, cudaStream_t stream,
                                      const GemmGroupedParams *p) {
    const GemmSegments *s = p->segments;
    const size_t n = (size_t)(s->groups > 0 ? s->groups : 1);
    const size_t raw_bytes = (size_t)s->groups * tl_dtype_size(s->ends_dtype);
    int64_t *ends = malloc(n * sizeof *ends);
    void *raw = malloc(n * sizeof(int64_t));
    GemmGroup *problems = malloc(n * sizeof *problems);
    tl_status status = TL_OK;
    if (!ends || !raw || !problems) status = tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory");
    if (status == TL_OK && s->groups > 0) {
        if (s->ends_on_host)
            memcpy(raw, s->ends, raw_bytes);
        else /* the host waits for the ends, and checks them */
            status = tl_cuda_memcpy(TL_CPU, raw, device, s->ends, raw_bytes);
        if (status == TL_OK && !s->ends_on_host) status = check_ends(s, raw);
    }
    if (status == TL_OK) {
        tl_gemm_segment_ends(s, raw, ends);
        for (int64_t g = 0; g < s->groups; g++) problems[g] = tl_gemm_segment_problem(s, ends, g);
        status = run_list(device, p, problems, s->groups);
    }
    const size_t elem = tl_dtype_size(s->dtype);
    for (int64_t i = 0; i <= s->groups && status == TL_OK; i++) {
        void *first;
        int64_t rows;
        if (!tl_gemm_segment_zeros(s, ends, i, &first, &rows)) continue;
        cudaError_t err = cudaMemset2DAsync(first, (size_t)s->ldc * elem, 0, (size_t)s->n * elem,
                                            (size_t)rows, stream);
        if (err != cudaSuccess) status = tl_cuda_fail(err, OP_NAME, "cudaMemset2DAsync");
    }
    if (status == TL_OK) tl_loop_variant_ran(&grouped_paths[4]);
    free(ends), free(raw), free(problems);
    return status;
}

#ifndef TLUA_HAVE_HOPPER_GEMM /* a CUDA toolkit before 12 cannot build the core */
bool tl_hopper_gemm_available(int device) {
    (void)device;
    return false;
}
bool tl_hopper_gemm_takes(int device, const tl_hopper_gemm *g) {
    (void)device, (void)g;
    return false;
}
tl_status tl_hopper_gemm_run(int device, cudaStream_t stream, const tl_hopper_gemm *g,
                             const char *op) {
    (void)device, (void)stream, (void)g;
    return tl_error(TL_ERR_RUNTIME, "%s: this build has no Hopper GEMM core", op);
}
bool tl_hopper_block_sparse_takes(int device, const tl_hopper_block_sparse *p) {
    (void)device, (void)p;
    return false;
}
tl_status tl_hopper_block_sparse_run(int device, cudaStream_t stream,
                                     const tl_hopper_block_sparse *p, const char *op) {
    (void)device, (void)stream, (void)p;
    return tl_error(TL_ERR_RUNTIME, "%s: this build has no Hopper GEMM core", op);
}
#endif

static tl_status run_segments(tl_device device, const GemmGroupedParams *p) {
    const GemmSegments *s = p->segments;
    cudaStream_t stream;
    TL_TRY(tl_cuda_stream(device.index, OP_NAME, &stream));
    const bool sixteen = s->dtype == TL_BF16 || s->dtype == TL_F16;
    if (sixteen && tl_hopper_gemm_enabled()) {
        tl_hopper_gemm h = hopper_of(s);
        if (tl_hopper_gemm_takes(device.index, &h)) {
            /* the schedule checks the ends as it reads them */
            if (s->ends_range && !s->ends_on_host) {
                const int64_t steps = s->groups - 1;
                TL_TRY(tl_cuda_fault_arm(device.index, s->ends_range, &s->groups, 1, &h.fault,
                                         &h.range_id));
                TL_TRY(tl_cuda_fault_arm(device.index, s->steps_range, &steps, 1, &h.fault,
                                         &h.steps_id));
            }
            TL_TRY(tl_hopper_gemm_run(device.index, stream, &h, OP_NAME));
            tl_loop_variant_ran(&grouped_paths[h.kind == TL_HOPPER_ROWS ? 2 : 3]);
            return TL_OK;
        }
    }
    return run_segments_on_host(device, stream, p);
}

/* One kernel for every dtype: a list of problems, or segments. */
static tl_status gemm_grouped(tl_device device, const GemmGroupedParams *p) {
    if (p->segments) return run_segments(device, p);
    return run_list(device, p, p->groups, p->group_count);
}

/* Every op of the GEMM_GROUPED family in ops.def gets the entries. */
static const tl_kernel_entry entries[] = {
#define GEMM_GROUPED_OP(name, differentiable, backward)                                            \
    TL_KERNEL_NAMED("cuda_gemm_grouped", name, TL_DTYPES_FLOATING, gemm_grouped, gemm_grouped),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cuda_gemm_grouped_table, TL_DEVICE_CUDA, entries);
