/* tl_gemm and tl_gemm_grouped: validate a GemmParams (or each problem of a grouped GEMM) and
   hand it to the device's GEMM kernel, traced under the calling op. */
#include <stdio.h>
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

static const char *epilogue_name(tl_gemm_epilogue_kind kind) {
    switch (kind) {
    case TL_GEMM_EPILOGUE_BIAS:
        return "bias";
    case TL_GEMM_EPILOGUE_GELU_AUX:
        return "gelu_aux";
    case TL_GEMM_EPILOGUE_DGELU:
        return "dgelu";
    case TL_GEMM_EPILOGUE_BGRADB:
        return "bgradb";
    }
    return NULL;
}

/* An epilogue: a single GEMM with beta 0 and the vectors and aux its kind reads or writes. */
static tl_status validate_epilogue(const char *op, const GemmParams *p) {
    const GemmEpilogue *e = p->epilogue;
    const char *kind = epilogue_name(e->kind);
    if (!kind)
        return tl_error(TL_ERR_ARGUMENT, "%s: gemm epilogue %d is unknown", op, (int)e->kind);
    if (p->batch_count > 1 || p->beta != 0.0f)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: gemm epilogue %s needs a single GEMM with beta 0, got batch count "
                        "%lld and beta %g",
                        op, kind, (long long)p->batch_count, (double)p->beta);
    bool missing = false;
    if (e->kind == TL_GEMM_EPILOGUE_BIAS) missing = !e->bias;
    if (e->kind == TL_GEMM_EPILOGUE_GELU_AUX || e->kind == TL_GEMM_EPILOGUE_DGELU)
        missing = !e->aux && p->m > 0 && p->n > 0;
    if (e->kind == TL_GEMM_EPILOGUE_BGRADB) missing = !e->bias_grad && p->n > 0;
    if (missing)
        return tl_error(TL_ERR_ARGUMENT, "%s: gemm epilogue %s got a NULL vector", op, kind);
    if ((e->kind == TL_GEMM_EPILOGUE_GELU_AUX || e->kind == TL_GEMM_EPILOGUE_DGELU) &&
        e->ld_aux < at_least_one(p->m))
        return tl_error(TL_ERR_ARGUMENT, "%s: gemm epilogue %s: ld_aux must be >= %lld, got %lld",
                        op, kind, (long long)at_least_one(p->m), (long long)e->ld_aux);
    return TL_OK;
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
    if (p->epilogue) TL_TRY(validate_epilogue(op, p));
    /* bgradb reads op(B) even where C is empty (m 0) */
    if (p->epilogue && p->epilogue->kind == TL_GEMM_EPILOGUE_BGRADB && p->m == 0 && p->n > 0 &&
        p->k > 0 && !b)
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
    if (!kernel) return tl_dispatch_status();
    /* an empty C has nothing to compute, but a bias gradient of n values still has its sums */
    const bool bias_grad_left =
        p->epilogue && p->epilogue->kind == TL_GEMM_EPILOGUE_BGRADB && p->m == 0 && p->n > 0;
    if ((p->m == 0 || p->n == 0) && !bias_grad_left) return TL_OK;
    return kernel->fn.gemm(device, p, a, b, c);
}

/* Validates a problem as tl_gemm would validate it alone. */
static tl_status validate_group(const char *op, const GemmGroupedParams *p, int64_t g) {
    const GemmGroup *q = &p->groups[g];
    GemmParams one = tl_gemm_group_params(p, g);
    tl_status status = validate(op, &one, q->a, q->b, q->c);
    if (status == TL_OK) return TL_OK;
    char message[512];
    snprintf(message, sizeof message, "%s", tl_last_error());
    return tl_error(status, "%s (group %lld of %lld)", message, (long long)g + 1,
                    (long long)p->group_count);
}

tl_status tl_gemm_grouped(tl_op op, tl_device device, const GemmGroupedParams *p) {
    const char *name = tl_op_info_of(op)->name;
    if (!p) return tl_error(TL_ERR_ARGUMENT, "%s: grouped gemm got no params", name);
    if (p->group_count < 0 || (p->group_count > 0 && !p->groups))
        return tl_error(TL_ERR_ARGUMENT, "%s: grouped gemm got %lld groups and %s", name,
                        (long long)p->group_count, p->groups ? "a list" : "no list");
    int64_t max_m = 0, max_n = 0, max_k = 0;
    for (int64_t g = 0; g < p->group_count; g++) {
        TL_TRY(validate_group(name, p, g));
        const GemmGroup *q = &p->groups[g];
        max_m = q->m > max_m ? q->m : max_m;
        max_n = q->n > max_n ? q->n : max_n;
        max_k = q->k > max_k ? q->k : max_k;
    }
    /* traced as tl_gemm traces a batch, the largest sizes standing for the group's */
    const int ndims[3] = {3, 3, 3};
    const int64_t shapes[3][TL_MAX_DIMS] = {{p->group_count, max_n, max_m},
                                            {p->group_count, max_n, max_k},
                                            {p->group_count, max_k, max_m}};
    const tl_kernel_entry *kernel =
        tl_dispatch_shapes(op, device, p->input_dtype, 3, ndims, shapes);
    if (!kernel) return tl_dispatch_status();
    return kernel->fn.gemm_grouped(device, p);
}

/* ---- segments ------------------------------------------------------------------------------ */
static int64_t segment_rows(const GemmSegments *s) {
    return s->kind == TL_GEMM_SEGMENT_ROWS ? s->m : s->k;
}

void tl_gemm_segment_ends(const GemmSegments *s, const void *host_ends, int64_t *ends) {
    const int64_t rows = segment_rows(s);
    int64_t previous = 0;
    for (int64_t g = 0; g < s->groups; g++) {
        int64_t e = s->ends_dtype == TL_I64 ? ((const int64_t *)host_ends)[g]
                                            : ((const int32_t *)host_ends)[g];
        e = e < previous ? previous : e > rows ? rows : e;
        ends[g] = previous = e;
    }
}

GemmGroup tl_gemm_segment_problem(const GemmSegments *s, const int64_t *ends, int64_t g) {
    const size_t elem = tl_dtype_size(s->dtype);
    const int64_t start = g > 0 ? ends[g - 1] : 0, rows = ends[g] - start;
    const char *a = (const char *)s->a + (size_t)(start * s->lda) * elem;
    /* row-major c = x y is column-major c^T = y^T x^T: GEMM's A is y, its B is x */
    if (s->kind == TL_GEMM_SEGMENT_ROWS)
        return (GemmGroup){.trans_a = s->b_transposed,
                           .trans_b = false,
                           .m = s->n,
                           .n = rows,
                           .k = s->k,
                           .lda = s->ldb,
                           .ldb = s->lda,
                           .ldc = s->ldc,
                           .a = (const char *)s->b + (size_t)(g * s->stride_b) * elem,
                           .b = a,
                           .c = (char *)s->c + (size_t)(start * s->ldc) * elem};
    /* c_g = x^T y with x, y the segment's rows: GEMM's B is x read transposed */
    return (GemmGroup){.trans_a = false,
                       .trans_b = true,
                       .m = s->n,
                       .n = s->m,
                       .k = rows,
                       .lda = s->ldb,
                       .ldb = s->lda,
                       .ldc = s->ldc,
                       .a = (const char *)s->b + (size_t)(start * s->ldb) * elem,
                       .b = a,
                       .c = (char *)s->c + (size_t)(g * s->stride_c) * elem};
}

bool tl_gemm_segment_zeros(const GemmSegments *s, const int64_t *ends, int64_t i, void **first,
                           int64_t *rows) {
    const size_t elem = tl_dtype_size(s->dtype);
    const int64_t start = i > 0 ? ends[i - 1] : 0;
    if (s->kind == TL_GEMM_SEGMENT_ROWS) {
        /* the tail after the last end; every segment when there is no k to sum over */
        const int64_t end = i == s->groups ? s->m : ends[i];
        if (end == start || (i < s->groups && s->k > 0)) return false;
        *first = (char *)s->c + (size_t)(start * s->ldc) * elem;
        *rows = end - start;
        return true;
    }
    if (i == s->groups || ends[i] > start || s->m == 0) return false;
    *first = (char *)s->c + (size_t)(i * s->stride_c) * elem;
    *rows = s->m;
    return true;
}

/* A matrix of rows x cols (row-major, ld apart) that must be there. */
static tl_status check_matrix(const char *op, const char *what, const void *p, int64_t rows,
                              int64_t cols, int64_t ld) {
    if (rows > 0 && cols > 0 && !p)
        return tl_error(TL_ERR_ARGUMENT, "%s: segmented gemm got a NULL %s", op, what);
    if (rows > 1 && ld < cols)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: segmented gemm: %s's rows are %lld apart, under its "
                        "%lld columns",
                        op, what, (long long)ld, (long long)cols);
    return TL_OK;
}

tl_status tl_gemm_segmented(tl_op op, tl_device device, const GemmSegments *s) {
    const char *name = tl_op_info_of(op)->name;
    if (!s) return tl_error(TL_ERR_ARGUMENT, "%s: segmented gemm got no description", name);
    if (s->groups < 0 || s->m < 0 || s->n < 0 || s->k < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: segmented gemm got a negative size", name);
    if (!tl_dtype_is_floating(s->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: segmented gemm needs a floating dtype, got %s", name,
                        tl_dtype_name(s->dtype));
    if ((s->ends_dtype != TL_I32 && s->ends_dtype != TL_I64) || (s->groups > 0 && !s->ends))
        return tl_error(TL_ERR_ARGUMENT, "%s: segmented gemm needs int32 or int64 ends", name);
    const bool rows = s->kind == TL_GEMM_SEGMENT_ROWS;
    const int64_t all = segment_rows(s);
    const int64_t b_rows = rows ? (s->b_transposed ? s->n : s->k) : all;
    const int64_t b_cols = rows ? (s->b_transposed ? s->k : s->n) : s->n;
    TL_TRY(check_matrix(name, "a", s->a, all, rows ? s->k : s->m, s->lda));
    TL_TRY(check_matrix(name, "b", s->b, s->groups > 0 ? b_rows : 0, b_cols, s->ldb));
    TL_TRY(check_matrix(name, "c", s->c, s->m, s->n, s->ldc));
    if (rows ? s->stride_b < 0 : s->stride_c < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: segmented gemm got a negative stride", name);
    const int ndims[3] = {3, 3, 3};
    const int64_t shapes[3][TL_MAX_DIMS] = {
        {s->groups, s->m, s->n}, {s->groups, s->m, s->k}, {s->groups, s->k, s->n}};
    const tl_kernel_entry *kernel = tl_dispatch_shapes(op, device, s->dtype, 3, ndims, shapes);
    if (!kernel) return tl_dispatch_status();
    if (s->m == 0 || s->n == 0 || (!rows && s->groups == 0)) return TL_OK;
    GemmGroupedParams params = tl_gemm_grouped_params(0, NULL, s->dtype);
    params.segments = s;
    return kernel->fn.gemm_grouped(device, &params);
}
