/* CPU scaled dot-product attention, flash-style: per (b, h, block of 64 queries) an online softmax
   over blocks of 64 keys (tile products on OpenBLAS), so memory is a few tiles per thread, never
   [T, S]; the backward recomputes the probabilities from lse, once per key block (dK, dV) and
   once per query block (dQ), so no two threads write one gradient row. float32 accumulation for
   float32/bfloat16/float16, float64 for float64; OpenMP over the blocks. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/philox.h"

/* queries and keys per tile */
enum { BQ = 64, BK = 64, ROWS_MAX = BQ > BK ? BQ : BK };

/* A [B, H, R, D] operand as the kernels read it: element (b, h, r, d) at
   data + (b sb + h sh + r sr + d) elements. */
typedef struct operand {
    char *data;
    tl_dtype dtype;
    int64_t sb, sh, sr;
} operand;

typedef struct attention_problem {
    int64_t B, H, T, S, D;
    operand q, k, v, out, grad_out;
    const tl_attention_args *args;
    float dropout; /* the float32 threshold `rand(...) >= p` compares with */
} attention_problem;

static operand operand_of(const tl_tensor *t) {
    if (!t) return (operand){0};
    return (operand){(char *)tl_data(t), t->dtype, t->strides[0], t->strides[1], t->strides[2]};
}

static char *row_of(const operand *o, int64_t b, int64_t h, int64_t r) {
    return o->data + (size_t)(b * o->sb + h * o->sh + r * o->sr) * tl_dtype_size(o->dtype);
}

/* n rows r0 .. r0 + n of operand o at (b, h) into dst [n, D] (float for float32, bfloat16 and
   float16; double for float64). */
static void load_f32(float *dst, const operand *o, int64_t b, int64_t h, int64_t r0, int64_t n,
                     int64_t D) {
    for (int64_t r = 0; r < n; r++) {
        const char *row = row_of(o, b, h, r0 + r);
        float *d = dst + r * D;
        if (o->dtype == TL_F32) {
            memcpy(d, row, sizeof(float) * (size_t)D);
        } else {
            const uint16_t *x = (const uint16_t *)row;
            if (o->dtype == TL_BF16)
                for (int64_t c = 0; c < D; c++) d[c] = tl_bf16_load(x[c]);
            else
                for (int64_t c = 0; c < D; c++) d[c] = tl_f16_load(x[c]);
        }
    }
}

static void load_f64(double *dst, const operand *o, int64_t b, int64_t h, int64_t r0, int64_t n,
                     int64_t D) {
    for (int64_t r = 0; r < n; r++)
        memcpy(dst + r * D, row_of(o, b, h, r0 + r), sizeof(double) * (size_t)D);
}

/* src [n, D] into rows r0 .. r0 + n of t [B, H, R, D] at (b, h), rounded once to t's dtype. */
static void store_f32(tl_tensor *t, const float *src, int64_t b, int64_t h, int64_t r0, int64_t n,
                      int64_t D) {
    const operand o = operand_of(t);
    for (int64_t r = 0; r < n; r++) {
        char *row = row_of(&o, b, h, r0 + r);
        const float *s = src + r * D;
        if (o.dtype == TL_F32) {
            memcpy(row, s, sizeof(float) * (size_t)D);
        } else {
            uint16_t *x = (uint16_t *)row;
            if (o.dtype == TL_BF16)
                for (int64_t c = 0; c < D; c++) x[c] = tl_bf16_round(s[c]);
            else
                for (int64_t c = 0; c < D; c++) x[c] = tl_f16_round(s[c]);
        }
    }
}

static void store_f64(tl_tensor *t, const double *src, int64_t b, int64_t h, int64_t r0, int64_t n,
                      int64_t D) {
    const operand o = operand_of(t);
    for (int64_t r = 0; r < n; r++)
        memcpy(row_of(&o, b, h, r0 + r), src + r * D, sizeof(double) * (size_t)D);
}

/* keep[c] for keys j0 .. j0 + n of query i at (b, h): element e = ((b H + h) T + i) S + j of the
   virtual [B, H, T, S] tensor is kept when its float32 uniform (block counter + e / 4, word
   e % 4, as `rand` draws it: kernels/philox.h's tl_philox_uniform_f32) is >= p, compared in
   float32 as `rand(...) >= p` compares. One Philox block serves four neighbours. */
static void dropout_keep(uint8_t *keep, const attention_problem *pb, int64_t b, int64_t h,
                         int64_t i, int64_t j0, int64_t n) {
    const uint64_t seed = pb->args->seed, counter = pb->args->counter;
    const uint64_t e0 = (uint64_t)(((b * pb->H + h) * pb->T + i) * pb->S + j0);
    uint64_t have = UINT64_MAX;
    tl_philox_block block = {{0, 0, 0, 0}};
    for (int64_t c = 0; c < n; c++) {
        const uint64_t e = e0 + (uint64_t)c;
        if (e / 4 != have) have = e / 4, block = tl_philox(counter + have, seed);
        const float u = (float)(block.w[e % 4] >> 8) * 0x1p-24f;
        keep[c] = u >= pb->dropout;
    }
}

/* Row-major C [m, n] (ldc) = alpha op(A) op(B) + beta C: A [m, k] (or [k, m] when ta), B [k, n]
   (or [n, k] when tb). Single-threaded inside the parallel loops (OpenBLAS's OpenMP build). */
static void gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

static void gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                     const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                     double *c, int64_t ldc) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

#define REAL      float
#define SFX(name) name##_f32
#define EXP       expf
#define LOG       logf
#define GEMM      gemm_f32
#include "kernels/cpu/attention_impl.h"
#undef REAL
#undef SFX
#undef EXP
#undef LOG
#undef GEMM

#define REAL      double
#define SFX(name) name##_f64
#define EXP       exp
#define LOG       log
#define GEMM      gemm_f64
#include "kernels/cpu/attention_impl.h"
#undef REAL
#undef SFX
#undef EXP
#undef LOG
#undef GEMM

static tl_status problem_of(attention_problem *pb, const tl_tensor *q, const tl_tensor *k,
                            const tl_tensor *v, const tl_tensor *out, const tl_tensor *grad_out,
                            const tl_attention_args *args) {
    *pb = (attention_problem){.B = q->shape[0],
                              .H = q->shape[1],
                              .T = q->shape[2],
                              .S = k->shape[2],
                              .D = q->shape[3],
                              .q = operand_of(q),
                              .k = operand_of(k),
                              .v = operand_of(v),
                              .out = operand_of(out),
                              .grad_out = operand_of(grad_out),
                              .args = args,
                              .dropout = (float)args->dropout};
    if (pb->D > INT_MAX / ROWS_MAX)
        return tl_error(TL_ERR_ARGUMENT,
                        "scaled_dot_product_attention: head dim %lld exceeds the BLAS range",
                        (long long)pb->D);
    return TL_OK;
}

static tl_status attention(tl_tensor *out, tl_tensor *lse, const tl_tensor *q, const tl_tensor *k,
                           const tl_tensor *v, const tl_attention_args *args) {
    attention_problem pb;
    TL_TRY(problem_of(&pb, q, k, v, NULL, NULL, args));
    if (pb.B * pb.H * pb.T == 0 || pb.D == 0) return TL_OK;
    return q->dtype == TL_F64 ? forward_f64(out, lse, &pb) : forward_f32(out, lse, &pb);
}

static tl_status attention_backward(tl_tensor *grad_q, tl_tensor *grad_k, tl_tensor *grad_v,
                                    tl_tensor *delta, const tl_tensor *grad_out, const tl_tensor *q,
                                    const tl_tensor *k, const tl_tensor *v, const tl_tensor *out,
                                    const tl_tensor *lse, const tl_attention_args *args) {
    attention_problem pb;
    TL_TRY(problem_of(&pb, q, k, v, out, grad_out, args));
    if (pb.B * pb.H == 0 || pb.T == 0 || pb.S == 0 || pb.D == 0) return TL_OK;
    return q->dtype == TL_F64 ? backward_f64(grad_q, grad_k, grad_v, delta, lse, &pb)
                              : backward_f32(grad_q, grad_k, grad_v, delta, lse, &pb);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(scaled_dot_product_attention, TL_DTYPES_FLOATING, attention, attention),
    TL_KERNEL(scaled_dot_product_attention_backward, TL_DTYPES_FLOATING, attention_backward,
              attention_backward),
};

TL_KERNEL_TABLE(tl_cpu_attention_table, TL_DEVICE_CPU, entries);
