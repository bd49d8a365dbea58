/* GemmParams: the description of one (batched) GEMM, and tl_gemm, its single entry point. */
#ifndef TLUA_GEMM_H
#define TLUA_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "tlua/device.h"
#include "tlua/dtype.h"
#include "kernels/op.h"

/* What a single GEMM does with its product P = alpha op(A) op(B) before storing it, as cuBLASLt's
   epilogues do (the CPU and CUDA's fallback apply the same math after the product, in the compute
   type). GELU is the tanh form, gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), and
   gelu' its derivative (kernels/pointwise.h's lines). Vectors and aux have the output dtype. */
typedef enum tl_gemm_epilogue_kind {
    TL_GEMM_EPILOGUE_BIAS,     /* C = P + bias (bias[i] on row i of C: m values) */
    TL_GEMM_EPILOGUE_GELU_AUX, /* aux = P (+ bias when given), C = gelu(aux) */
    TL_GEMM_EPILOGUE_DGELU,    /* C = P * gelu'(aux) */
    TL_GEMM_EPILOGUE_BGRADB,   /* C = P, and bias_grad[j] = sum over k of op(B)[k, j] (n values) */
} tl_gemm_epilogue_kind;

typedef struct GemmEpilogue {
    tl_gemm_epilogue_kind kind;
    const void *bias; /* BIAS (required), GELU_AUX (optional) */
    void *aux;        /* GELU_AUX: written; DGELU: read. m x n column-major, ld_aux apart */
    int64_t ld_aux;
    void *bias_grad; /* BGRADB */
} GemmEpilogue;

/* Column-major, as BLAS and cuBLAS: C[m x n] = alpha * op(A)[m x k] * op(B)[k x n]
   + beta * C, with op(X) = X^T when trans_x. A row-major [r x c] matrix is a
   column-major [c x r] one with ld = c. Batched when batch_count > 1, each
   operand advancing by its stride (in elements; 0 broadcasts one matrix). An epilogue
   (single GEMMs, beta 0) post-processes the product (above); NULL for none. */
typedef struct GemmParams {
    bool trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    int64_t lda, ldb, ldc;
    int64_t batch_count; /* 0 or 1: a single GEMM */
    int64_t stride_a, stride_b, stride_c;
    tl_dtype input_dtype;   /* A and B */
    tl_dtype output_dtype;  /* C */
    tl_dtype compute_dtype; /* f32 for f32/bf16/f16 inputs, f64 for f64 */
    const GemmEpilogue *epilogue;
} GemmParams;

/* The compute type of a GEMM on inputs of `input` dtype: float64 for float64, float32 otherwise
   (bfloat16 and float16 accumulate in float32). */
static inline tl_dtype tl_gemm_compute_dtype(tl_dtype input) {
    return input == TL_F64 ? TL_F64 : TL_F32;
}

/* How a rows x cols matrix with strides (rs, cs) looks to BLAS: row-major (unit column stride,
   ld = rs) or column-major (unit row stride, ld = cs); false when neither. */
static inline bool tl_gemm_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                                  bool *col_major, int64_t *ld) {
    int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
    if ((cols <= 1 || cs == 1) && (rows <= 1 || rs >= c1)) {
        *col_major = false;
        *ld = rows <= 1 ? c1 : rs;
        return true;
    }
    if ((rows <= 1 || rs == 1) && (cols <= 1 || cs >= r1)) {
        *col_major = true;
        *ld = cols <= 1 ? r1 : cs;
        return true;
    }
    return false;
}

/* Validates params (dims, leading dims, dtype combination) and runs the GEMM
   on device with the runtime's handle and stream for that device. op names
   the caller in errors and the trace (TL_OP_matmul). */
tl_status tl_gemm(tl_op op, tl_device device, const GemmParams *params, const void *a,
                  const void *b, void *c);

/* One problem of a grouped GEMM: GemmParams' per-matrix fields (column-major, as above) and
   its operands. */
typedef struct GemmGroup {
    bool trans_a, trans_b;
    int64_t m, n, k;
    int64_t lda, ldb, ldc;
    const void *a, *b;
    void *c;
} GemmGroup;

/* G products cut from whole row-major matrices by segments of their rows, the segments given by
   cumulative ends (s_0 = 0, s_g = e_{g-1}, e_g = ends[g]; the rows: m for ROWS, k for REDUCTION):
   ROWS:      c[s_g:e_g) = a[s_g:e_g) @ b_g for g < groups: a [m, k], c [m, n], b_g [k, n] the g-th
              matrix of b, stride_b elements apart (b_transposed: each stored [n, k]); the rows of
              c from the last end on are written zeros (all of c when k is 0).
   REDUCTION: c_g = a[s_g:e_g)^T @ b[s_g:e_g) for g < groups: a [k, m], b [k, n], c_g [m, n] the
              g-th matrix of c, stride_c elements apart; an empty segment's c_g is written zeros.
   Rows are ld elements apart (unit column stride). The ends (int32 or int64, nondecreasing,
   within [0, rows]) are host memory (ends_on_host) or the operands' device's: there a kernel reads
   them where it runs, without the host waiting where it can (clamping each into [the previous
   end, rows]; the op checks them). One dtype throughout, alpha 1, beta 0. */
typedef enum tl_gemm_segment_kind {
    TL_GEMM_SEGMENT_ROWS,
    TL_GEMM_SEGMENT_REDUCTION,
} tl_gemm_segment_kind;

typedef struct GemmSegments {
    tl_gemm_segment_kind kind;
    int64_t groups, m, n, k;
    const void *ends;
    tl_dtype ends_dtype;
    bool ends_on_host;
    const void *a, *b;
    void *c;
    int64_t lda, ldb, ldc, stride_b, stride_c;
    bool b_transposed;
    tl_dtype dtype; /* a, b and c */
    /* ends not on the host: what a failed check of them names (an end outside [0, rows], a step
       from one end to the next outside it, i.e. a decrease); the kernel checks them where it
       reads them (on CUDA raised by the next synchronization, as index checks are). NULL: none */
    const struct tl_index_range *ends_range, *steps_range;
} GemmSegments;

/* G independent GEMMs of free sizes, C_g = alpha * op(A_g) op(B_g) + beta * C_g, sharing
   alpha, beta and the dtypes (the combinations tl_gemm takes), run as one grouped launch
   where the device has one (cuBLAS's grouped batched GEMM; OpenBLAS per group on the CPU).
   A problem with m, n or k zero is skipped: its C is left as it is (a caller that wants
   zeros there writes them). The C_g must not overlap one another. Or, with segments set (and
   no groups), the problems a GemmSegments describes (tl_gemm_segmented). */
typedef struct GemmGroupedParams {
    int64_t group_count;
    const GemmGroup *groups;
    float alpha, beta;
    tl_dtype input_dtype, output_dtype, compute_dtype;
    const GemmSegments *segments;
} GemmGroupedParams;

/* C_g = A_g B_g (alpha 1, beta 0) for the group_count problems of groups, all of one dtype. */
static inline GemmGroupedParams tl_gemm_grouped_params(int64_t group_count, const GemmGroup *groups,
                                                       tl_dtype dtype) {
    GemmGroupedParams params = {.group_count = group_count,
                                .groups = groups,
                                .alpha = 1.0f,
                                .beta = 0.0f,
                                .input_dtype = dtype,
                                .output_dtype = dtype,
                                .compute_dtype = tl_gemm_compute_dtype(dtype),
                                .segments = NULL};
    return params;
}

/* Problem q of a grouped GEMM as a single GemmParams (every field named, in order: CUDA C++
   includes this header too). */
static inline GemmParams tl_gemm_problem_params(const GemmGroupedParams *p, const GemmGroup *q) {
    GemmParams params = {.trans_a = q->trans_a,
                         .trans_b = q->trans_b,
                         .m = q->m,
                         .n = q->n,
                         .k = q->k,
                         .alpha = p->alpha,
                         .beta = p->beta,
                         .lda = q->lda,
                         .ldb = q->ldb,
                         .ldc = q->ldc,
                         .batch_count = 0,
                         .stride_a = 0,
                         .stride_b = 0,
                         .stride_c = 0,
                         .input_dtype = p->input_dtype,
                         .output_dtype = p->output_dtype,
                         .compute_dtype = p->compute_dtype,
                         .epilogue = NULL};
    return params;
}

/* Problem g of the list of a grouped GEMM as a single GemmParams. */
static inline GemmParams tl_gemm_group_params(const GemmGroupedParams *p, int64_t g) {
    return tl_gemm_problem_params(p, &p->groups[g]);
}

/* Validates every problem as tl_gemm does and runs them on device, traced once under op
   (shapes in the trace: [G] then the largest m, n and k). */
tl_status tl_gemm_grouped(tl_op op, tl_device device, const GemmGroupedParams *params);

/* Validates s (sizes, leading dims, strides, the dtype) and runs its problems on device through
   the device's grouped GEMM kernel, traced once under op (shapes: [G], then m, n and k). */
tl_status tl_gemm_segmented(tl_op op, tl_device device, const GemmSegments *s);

/* For kernels: the ends of s in host memory as int64 (*ends, s->groups of them), each clamped
   into [the previous end, the rows] as a device kernel clamps them. */
void tl_gemm_segment_ends(const GemmSegments *s, const void *host_ends, int64_t *ends);
/* The column-major problem of segment g (tl_gemm_grouped's form; m, n or k 0 when it has
   nothing to compute). */
GemmGroup tl_gemm_segment_problem(const GemmSegments *s, const int64_t *ends, int64_t g);
/* Block i (0 <= i <= groups) of c that no problem writes and that is zeros: its first element
   (*first) and row count (*rows) of n elements each, ldc apart; false when block i is empty. */
bool tl_gemm_segment_zeros(const GemmSegments *s, const int64_t *ends, int64_t i, void **first,
                           int64_t *rows);

#endif
