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

static operand operand_of(const tl_tensor *t) {
    if (!t) return (operand){0};
    return (operand){(char *)tl_data(t), t->dtype, t->strides[0], t->strides[1], t->strides[2]};
}

static char *row_of(const operand *o, int64_t b, int64_t h, int64_t r) {
    return o->data + (size_t)(b * o->sb + h * o->sh + r * o->sr) * tl_dtype_size(o->dtype);
}

/* ---- the compute type ------------------------------------------------------------------------
   Tiles hold float (for float32, bfloat16 and float16) or double (for float64). The tile loops
   further down are written once over untyped tiles; what depends on the type is this table: the
   tile product, the moves between operands and tiles, and the arithmetic on rows of scores. */
typedef struct real_type {
    size_t size; /* bytes of one element */
    /* Row-major C [m, n] (ldc) = alpha op(A) op(B) + beta C: A [m, k] (or [k, m] when ta), B
       [k, n] (or [n, k] when tb). Single-threaded inside the parallel loops (OpenBLAS's OpenMP
       build). */
    void (*gemm)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                 int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
    /* n rows r0 .. r0 + n of operand o at (b, h) into dst [n, D] */
    void (*load)(void *dst, const operand *o, int64_t b, int64_t h, int64_t r0, int64_t n,
                 int64_t D);
    /* src [n, D] into rows r0 .. r0 + n of t [B, H, R, D] at (b, h), rounded once to t's dtype */
    void (*store)(tl_tensor *t, const void *src, int64_t b, int64_t h, int64_t r0, int64_t n,
                  int64_t D);
    /* The arithmetic on tiles of scores [m, n], rows BK elements apart: visible[r] is how many of
       the tile's keys query row r sees (all but those above the diagonal when causal), keep [m,
       BK] (dropout; NULL without) which of them are kept (0 from visible[r] on). */
    /* the online softmax's state of m rows before any key: max -inf, sum 0 */
    void (*start_rows)(void *max, void *sum, int64_t m);
    /* the tile st meets the next key block: for each row, with top the largest of its running max
       and its visible scores, its row of acc [m, D] and its running sum are rescaled by
       exp(max - top), max becomes top, st = exp(st - top) (0 where not visible) and their sum is
       added to the running sum; a row that sees no key of the block is only zeroed */
    void (*online_rows)(void *st, int64_t m, int64_t n, const int64_t *visible, void *acc,
                        int64_t D, void *max, void *sum);
    /* dropout on probabilities: st = keep ? st keep_scale : 0 */
    void (*keep_rows)(void *st, int64_t m, int64_t n, const uint8_t *keep, double keep_scale);
    /* the end of the online softmax: acc [m, D] divided by each row's sum, lse[r] = max + log(sum)
       (0 and -inf for a row that saw no key) */
    void (*finish_rows)(void *acc, int64_t m, int64_t D, const void *max, const void *sum,
                        void *lse);
    /* scores into probabilities p = exp(p - lse[r]), 0 where not visible */
    void (*probabilities)(void *p, int64_t m, int64_t n, const int64_t *visible, const void *lse);
    /* the scores' gradient before the scale, ds = p (dp~ - delta[r]) with ds holding dO v^T and dp~
       it masked: with keep (dropout) pd = p masked and dp~ = ds masked, each kept one times
       keep_scale; without keep, dp~ = ds and pd is not written */
    void (*scores_grad)(const void *p, void *pd, void *ds, int64_t m, int64_t n,
                        const uint8_t *keep, double keep_scale, const void *delta);
    /* delta[r] = sum over d of o[r, d] g[r, d] for m rows of D */
    void (*row_dots)(void *delta, const void *o, const void *g, int64_t m, int64_t D);
} real_type;

/* element i of a tile or a row of the compute type */
static void *element(const real_type *real, const void *base, int64_t i) {
    return (char *)base + (size_t)i * real->size;
}

static CBLAS_TRANSPOSE blas_trans(bool t) {
    return t ? CblasTrans : CblasNoTrans;
}

static void gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                     int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, blas_trans(ta), blas_trans(tb), (int)m, (int)n, (int)k, (float)alpha,
                a, (int)lda, b, (int)ldb, (float)beta, c, (int)ldc);
}

static void gemm_f64(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const void *a,
                     int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    cblas_dgemm(CblasRowMajor, blas_trans(ta), blas_trans(tb), (int)m, (int)n, (int)k, alpha, a,
                (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* float tiles of float32, bfloat16 and float16 operands */
static void load_f32(void *dst, const operand *o, int64_t b, int64_t h, int64_t r0, int64_t n,
                     int64_t D) {
    for (int64_t r = 0; r < n; r++) {
        const char *row = row_of(o, b, h, r0 + r);
        float *d = (float *)dst + r * D;
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

static void store_f32(tl_tensor *t, const void *src, int64_t b, int64_t h, int64_t r0, int64_t n,
                      int64_t D) {
    const operand o = operand_of(t);
    for (int64_t r = 0; r < n; r++) {
        char *row = row_of(&o, b, h, r0 + r);
        const float *s = (const float *)src + r * D;
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

/* double tiles of float64 operands */
static void load_f64(void *dst, const operand *o, int64_t b, int64_t h, int64_t r0, int64_t n,
                     int64_t D) {
    for (int64_t r = 0; r < n; r++)
        memcpy((double *)dst + r * D, row_of(o, b, h, r0 + r), sizeof(double) * (size_t)D);
}

static void store_f64(tl_tensor *t, const void *src, int64_t b, int64_t h, int64_t r0, int64_t n,
                      int64_t D) {
    const operand o = operand_of(t);
    for (int64_t r = 0; r < n; r++)
        memcpy(row_of(&o, b, h, r0 + r), (const double *)src + r * D, sizeof(double) * (size_t)D);
}

/* The row arithmetic of real_type in the compute type REAL (EXP and LOG its exp and log), every
   operation rounded to REAL as it goes. */
#define DEFINE_REAL_TYPE(sfx, REAL, EXP, LOG)                                                      \
    static void start_rows_##sfx(void *max, void *sum, int64_t m) {                                \
        for (int64_t r = 0; r < m; r++) ((REAL *)max)[r] = (REAL)-INFINITY, ((REAL *)sum)[r] = 0;  \
    }                                                                                              \
    static void online_rows_##sfx(void *st, int64_t m, int64_t n, const int64_t *visible,          \
                                  void *acc_v, int64_t D, void *max_v, void *sum_v) {              \
        REAL *max = max_v, *sum = sum_v;                                                           \
        for (int64_t r = 0; r < m; r++) {                                                          \
            REAL *row = (REAL *)st + r * BK, *acc = (REAL *)acc_v + r * D;                         \
            const int64_t seen = visible[r];                                                       \
            if (seen == 0) { /* this row sees none of the block's keys */                          \
                memset(row, 0, sizeof(REAL) * (size_t)n);                                          \
                continue;                                                                          \
            }                                                                                      \
            REAL top = max[r];                                                                     \
            for (int64_t c = 0; c < seen; c++) top = row[c] > top ? row[c] : top;                  \
            const REAL alpha = EXP(max[r] - top); /* 0 for the first block (max = -inf) */         \
            if (alpha != (REAL)1) {                                                                \
                for (int64_t d = 0; d < D; d++) acc[d] *= alpha;                                   \
                sum[r] *= alpha;                                                                   \
            }                                                                                      \
            max[r] = top;                                                                          \
            REAL block_sum = 0;                                                                    \
            for (int64_t c = 0; c < seen; c++) block_sum += row[c] = EXP(row[c] - top);            \
            for (int64_t c = seen; c < n; c++) row[c] = 0;                                         \
            sum[r] += block_sum;                                                                   \
        }                                                                                          \
    }                                                                                              \
    static void keep_rows_##sfx(void *st, int64_t m, int64_t n, const uint8_t *keep,               \
                                double keep_scale) {                                               \
        const REAL scale = (REAL)keep_scale;                                                       \
        for (int64_t r = 0; r < m; r++) {                                                          \
            REAL *row = (REAL *)st + r * BK;                                                       \
            const uint8_t *kept = keep + r * BK;                                                   \
            for (int64_t c = 0; c < n; c++) row[c] = kept[c] ? row[c] * scale : 0;                 \
        }                                                                                          \
    }                                                                                              \
    static void finish_rows_##sfx(void *acc_v, int64_t m, int64_t D, const void *max_v,            \
                                  const void *sum_v, void *lse_v) {                                \
        REAL *acc = acc_v, *lse = lse_v;                                                           \
        const REAL *max = max_v, *sum = sum_v;                                                     \
        for (int64_t r = 0; r < m; r++) {                                                          \
            const REAL inv = sum[r] > 0 ? (REAL)1 / sum[r] : (REAL)0;                              \
            for (int64_t d = 0; d < D; d++) acc[r * D + d] *= inv;                                 \
            lse[r] = sum[r] > 0 ? max[r] + LOG(sum[r]) : (REAL)-INFINITY;                          \
        }                                                                                          \
    }                                                                                              \
    static void probabilities_##sfx(void *p, int64_t m, int64_t n, const int64_t *visible,         \
                                    const void *lse) {                                             \
        for (int64_t r = 0; r < m; r++) {                                                          \
            REAL *row = (REAL *)p + r * BK;                                                        \
            const REAL *shift = (const REAL *)lse + r;                                             \
            const int64_t seen = visible[r];                                                       \
            for (int64_t c = 0; c < seen; c++) row[c] = EXP(row[c] - *shift);                      \
            for (int64_t c = seen; c < n; c++) row[c] = 0;                                         \
        }                                                                                          \
    }                                                                                              \
    static void scores_grad_##sfx(const void *p_v, void *pd_v, void *ds_v, int64_t m, int64_t n,   \
                                  const uint8_t *keep, double keep_scale, const void *delta_v) {   \
        const REAL scale = (REAL)keep_scale;                                                       \
        for (int64_t r = 0; r < m; r++) {                                                          \
            const REAL *p = (const REAL *)p_v + r * BK, delta = ((const REAL *)delta_v)[r];        \
            REAL *pd = (REAL *)pd_v + r * BK, *ds = (REAL *)ds_v + r * BK;                         \
            if (!keep) {                                                                           \
                for (int64_t c = 0; c < n; c++) ds[c] = p[c] * (ds[c] - delta);                    \
                continue;                                                                          \
            }                                                                                      \
            const uint8_t *kept = keep + r * BK;                                                   \
            for (int64_t c = 0; c < n; c++) {                                                      \
                pd[c] = kept[c] ? p[c] * scale : 0;                                                \
                ds[c] = p[c] * ((kept[c] ? ds[c] * scale : 0) - delta);                            \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void row_dots_##sfx(void *delta_v, const void *o_v, const void *g_v, int64_t m,         \
                               int64_t D) {                                                        \
        REAL *delta = delta_v;                                                                     \
        const REAL *o = o_v, *g = g_v;                                                             \
        for (int64_t r = 0; r < m; r++) {                                                          \
            REAL s = 0;                                                                            \
            for (int64_t d = 0; d < D; d++) s += o[r * D + d] * g[r * D + d];                      \
            delta[r] = s;                                                                          \
        }                                                                                          \
    }                                                                                              \
    static const real_type real_##sfx = {                                                          \
        .size = sizeof(REAL),                                                                      \
        .gemm = gemm_##sfx,                                                                        \
        .load = load_##sfx,                                                                        \
        .store = store_##sfx,                                                                      \
        .start_rows = start_rows_##sfx,                                                            \
        .online_rows = online_rows_##sfx,                                                          \
        .keep_rows = keep_rows_##sfx,                                                              \
        .finish_rows = finish_rows_##sfx,                                                          \
        .probabilities = probabilities_##sfx,                                                      \
        .scores_grad = scores_grad_##sfx,                                                          \
        .row_dots = row_dots_##sfx,                                                                \
    };
DEFINE_REAL_TYPE(f32, float, expf, logf)
DEFINE_REAL_TYPE(f64, double, exp, log)

/* ---- the problem and its masks --------------------------------------------------------------- */
typedef struct attention_problem {
    int64_t B, H, T, S, D;
    operand q, k, v, out, grad_out;
    const tl_attention_args *args;
    const real_type *real;
    float dropout;     /* the float32 threshold `rand(...) >= p` compares with */
    double keep_scale; /* 1 / (1 - p), what a kept probability is multiplied by */
} attention_problem;

/* visible[r]: how many of keys j0 .. j0 + n query i0 + r sees, for m rows: all but those above
   the diagonal when causal. */
static void visible_keys(int64_t *visible, const tl_attention_args *args, int64_t i0, int64_t m,
                         int64_t j0, int64_t n) {
    for (int64_t r = 0; r < m; r++) {
        const int64_t seen = args->causal ? i0 + r - j0 + 1 : n;
        visible[r] = seen > n ? n : seen < 0 ? 0 : seen;
    }
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

/* The dropout mask of a tile, keep [m, BK]: for each row, its visible keys' draws, 0 after. */
static void dropout_tile(uint8_t *keep, const attention_problem *pb, int64_t b, int64_t h,
                         int64_t i0, int64_t m, int64_t j0, int64_t n, const int64_t *visible) {
    for (int64_t r = 0; r < m; r++) {
        dropout_keep(keep + r * BK, pb, b, h, i0 + r, j0, visible[r]);
        memset(keep + r * BK + visible[r], 0, (size_t)(n - visible[r]));
    }
}

/* One thread's share of a scratch buffer of `per_thread` elements. */
static void *thread_scratch(const real_type *real, void *scratch, size_t per_thread) {
    return element(real, scratch, (int64_t)(per_thread * (size_t)omp_get_thread_num()));
}

/* ---- forward ----------------------------------------------------------------------------------
   One thread's tiles: the query block qt [BQ, D], a key and a value block kt, vt [BK, D], the
   output's accumulator acc [BQ, D], the scores st [BQ, BK] and the online softmax's running max
   and sum of each query row. */
typedef struct forward_tiles {
    void *qt, *kt, *vt, *acc, *st, *max, *sum;
} forward_tiles;

enum { FORWARD_SCRATCH = 2 * BQ + 2 * BK, FORWARD_SCRATCH_FIXED = BQ * BK + 2 * BQ };

static forward_tiles carve_forward(const real_type *real, void *s, int64_t D) {
    forward_tiles w;
    w.qt = s, w.kt = element(real, w.qt, BQ * D), w.vt = element(real, w.kt, BK * D);
    w.acc = element(real, w.vt, BK * D), w.st = element(real, w.acc, BQ * D);
    w.max = element(real, w.st, BQ * BK), w.sum = element(real, w.max, BQ);
    return w;
}

/* The forward of one (b, h, query block): an online softmax over the key blocks the block sees. */
static void forward_block(const attention_problem *pb, tl_tensor *out, void *lse_bh, int64_t b,
                          int64_t h, int64_t i0, forward_tiles w) {
    const real_type *real = pb->real;
    const tl_attention_args *args = pb->args;
    const int64_t T = pb->T, S = pb->S, D = pb->D, m = T - i0 < BQ ? T - i0 : BQ;
    int64_t visible[BQ];
    uint8_t keep[BQ * BK];
    real->load(w.qt, &pb->q, b, h, i0, m, D);
    real->start_rows(w.max, w.sum, m);
    memset(w.acc, 0, real->size * (size_t)(m * D));
    const int64_t key_end = args->causal && i0 + m < S ? i0 + m : S;
    for (int64_t j0 = 0; j0 < key_end; j0 += BK) {
        const int64_t n = key_end - j0 < BK ? key_end - j0 : BK;
        real->load(w.kt, &pb->k, b, h, j0, n, D);
        real->load(w.vt, &pb->v, b, h, j0, n, D);
        real->gemm(false, true, m, n, D, args->scale, w.qt, D, w.kt, D, 0, w.st, BK);
        visible_keys(visible, args, i0, m, j0, n);
        real->online_rows(w.st, m, n, visible, w.acc, D, w.max, w.sum);
        if (args->dropout > 0) {
            dropout_tile(keep, pb, b, h, i0, m, j0, n, visible);
            real->keep_rows(w.st, m, n, keep, pb->keep_scale);
        }
        real->gemm(false, false, m, D, n, 1, w.st, BK, w.vt, D, 1, w.acc, D);
    }
    real->finish_rows(w.acc, m, D, w.max, w.sum, element(real, lse_bh, i0));
    real->store(out, w.acc, b, h, i0, m, D);
}

static tl_status forward(tl_tensor *out, tl_tensor *lse, const attention_problem *pb) {
    const real_type *real = pb->real;
    const int64_t D = pb->D, blocks = (pb->T + BQ - 1) / BQ, tasks = pb->B * pb->H * blocks;
    const size_t per_thread = (size_t)(FORWARD_SCRATCH * D + FORWARD_SCRATCH_FIXED);
    void *scratch = malloc(real->size * per_thread * (size_t)omp_get_max_threads());
    if (!scratch) return tl_error(TL_ERR_MEMORY, "scaled_dot_product_attention: out of memory");
    void *lse_data = tl_data(lse);
#pragma omp parallel for schedule(dynamic) if (tasks > 1)
    for (int64_t task = 0; task < tasks; task++) {
        const int64_t bh = task / blocks, i0 = task % blocks * BQ;
        const forward_tiles w = carve_forward(real, thread_scratch(real, scratch, per_thread), D);
        forward_block(pb, out, element(real, lse_data, bh * pb->T), bh / pb->H, bh % pb->H, i0, w);
    }
    free(scratch);
    return TL_OK;
}

/* ---- backward ---------------------------------------------------------------------------------
   One thread's tiles: the query block qt and its output gradient dot [BQ, D], the key and value
   blocks kt, vt [BK, D], p, pd, ds [BQ, BK] (see backward_tile), two accumulators acc_a, acc_b
   [ROWS_MAX, D] and the query rows' lse and delta. */
typedef struct backward_tiles {
    void *qt, *dot, *kt, *vt, *p, *pd, *ds, *acc_a, *acc_b, *lse, *delta;
} backward_tiles;

enum {
    BACKWARD_SCRATCH = 2 * BQ + 2 * BK + 2 * ROWS_MAX,
    BACKWARD_SCRATCH_FIXED = 3 * BQ * BK + 2 * BQ,
};

static backward_tiles carve_backward(const real_type *real, void *s, int64_t D) {
    backward_tiles w;
    w.qt = s, w.dot = element(real, w.qt, BQ * D), w.kt = element(real, w.dot, BQ * D);
    w.vt = element(real, w.kt, BK * D), w.p = element(real, w.vt, BK * D);
    w.pd = element(real, w.p, BQ * BK), w.ds = element(real, w.pd, BQ * BK);
    w.acc_a = element(real, w.ds, BQ * BK), w.acc_b = element(real, w.acc_a, ROWS_MAX * D);
    w.lse = element(real, w.acc_b, ROWS_MAX * D), w.delta = element(real, w.lse, BQ);
    return w;
}

/* The backward's shared step for one tile (query rows i0 .. i0 + m, keys j0 .. j0 + n):
   p [m, n] = the probabilities (recomputed from lse), pd = p with the dropout mask applied
   (what the forward multiplied v by; p itself without dropout), ds = p (dp~ - delta) with
   dp~ = (dO v^T) masked, the scores' gradient before the scale. */
static void backward_tile(const attention_problem *pb, const backward_tiles *w, int64_t b,
                          int64_t h, int64_t i0, int64_t m, int64_t j0, int64_t n) {
    const real_type *real = pb->real;
    const tl_attention_args *args = pb->args;
    const int64_t D = pb->D;
    int64_t visible[BQ];
    uint8_t keep[BQ * BK];
    visible_keys(visible, args, i0, m, j0, n);
    real->gemm(false, true, m, n, D, args->scale, w->qt, D, w->kt, D, 0, w->p, BK);
    real->probabilities(w->p, m, n, visible, w->lse);
    real->gemm(false, true, m, n, D, 1, w->dot, D, w->vt, D, 0, w->ds, BK); /* dO v^T */
    if (args->dropout > 0) dropout_tile(keep, pb, b, h, i0, m, j0, n, visible);
    real->scores_grad(w->p, w->pd, w->ds, m, n, args->dropout > 0 ? keep : NULL, pb->keep_scale,
                      w->delta);
}

/* What the backward's blocks read and write beside the problem: each query row's lse and delta,
   and the gradients asked for (NULL when not). */
typedef struct backward_pass {
    const void *lse, *delta;
    tl_tensor *grad_q, *grad_k, *grad_v;
} backward_pass;

/* The query rows i0 .. i0 + m of (b, h): q, dO, lse and delta. */
static void load_rows_state(const attention_problem *pb, const backward_tiles *w,
                            const backward_pass *pass, int64_t b, int64_t h, int64_t i0,
                            int64_t m) {
    const real_type *real = pb->real;
    real->load(w->qt, &pb->q, b, h, i0, m, pb->D);
    real->load(w->dot, &pb->grad_out, b, h, i0, m, pb->D);
    const int64_t at = (b * pb->H + h) * pb->T + i0;
    memcpy(w->lse, element(real, pass->lse, at), real->size * (size_t)m);
    memcpy(w->delta, element(real, pass->delta, at), real->size * (size_t)m);
}

/* dK and dV of one (b, h, key block), over the query blocks that see it. */
static void backward_keys(const attention_problem *pb, const backward_tiles *w,
                          const backward_pass *pass, int64_t b, int64_t h, int64_t j0) {
    tl_tensor *grad_k = pass->grad_k, *grad_v = pass->grad_v;
    const real_type *real = pb->real;
    const int64_t T = pb->T, D = pb->D, n = pb->S - j0 < BK ? pb->S - j0 : BK;
    real->load(w->kt, &pb->k, b, h, j0, n, D);
    real->load(w->vt, &pb->v, b, h, j0, n, D);
    memset(w->acc_a, 0, real->size * (size_t)(n * D));
    memset(w->acc_b, 0, real->size * (size_t)(n * D));
    const int64_t first = pb->args->causal ? j0 / BQ * BQ : 0; /* rows i >= j0 see key j0 */
    for (int64_t i0 = first; i0 < T; i0 += BQ) {
        const int64_t m = T - i0 < BQ ? T - i0 : BQ;
        load_rows_state(pb, w, pass, b, h, i0, m);
        backward_tile(pb, w, b, h, i0, m, j0, n);
        if (grad_v) /* dV += pd^T dO (pd is p without dropout) */
            real->gemm(true, false, n, D, m, 1, pb->args->dropout > 0 ? w->pd : w->p, BK, w->dot, D,
                       1, w->acc_b, D);
        if (grad_k) /* dK += scale ds^T q */
            real->gemm(true, false, n, D, m, pb->args->scale, w->ds, BK, w->qt, D, 1, w->acc_a, D);
    }
    if (grad_k) real->store(grad_k, w->acc_a, b, h, j0, n, D);
    if (grad_v) real->store(grad_v, w->acc_b, b, h, j0, n, D);
}

/* dQ of one (b, h, query block), over the key blocks it sees. */
static void backward_queries(const attention_problem *pb, const backward_tiles *w,
                             const backward_pass *pass, int64_t b, int64_t h, int64_t i0) {
    const real_type *real = pb->real;
    const int64_t D = pb->D, m = pb->T - i0 < BQ ? pb->T - i0 : BQ;
    load_rows_state(pb, w, pass, b, h, i0, m);
    memset(w->acc_a, 0, real->size * (size_t)(m * D));
    const int64_t key_end = pb->args->causal && i0 + m < pb->S ? i0 + m : pb->S;
    for (int64_t j0 = 0; j0 < key_end; j0 += BK) {
        const int64_t n = key_end - j0 < BK ? key_end - j0 : BK;
        real->load(w->kt, &pb->k, b, h, j0, n, D);
        real->load(w->vt, &pb->v, b, h, j0, n, D);
        backward_tile(pb, w, b, h, i0, m, j0, n);
        real->gemm(false, false, m, D, n, pb->args->scale, w->ds, BK, w->kt, D, 1, w->acc_a, D);
    }
    real->store(pass->grad_q, w->acc_a, b, h, i0, m, D);
}

/* fn over every (b, h, block of `block` rows among `rows`), OpenMP over them, each thread on its
   share of scratch (per_thread elements). */
typedef void (*backward_block_fn)(const attention_problem *pb, const backward_tiles *w,
                                  const backward_pass *pass, int64_t b, int64_t h, int64_t start);
static void for_each_block(const attention_problem *pb, const backward_pass *pass, void *scratch,
                           size_t per_thread, int64_t rows, int64_t block, backward_block_fn fn) {
    const int64_t blocks = (rows + block - 1) / block, tasks = pb->B * pb->H * blocks;
#pragma omp parallel for schedule(dynamic) if (tasks > 1)
    for (int64_t task = 0; task < tasks; task++) {
        const int64_t bh = task / blocks, start = task % blocks * block;
        const backward_tiles w =
            carve_backward(pb->real, thread_scratch(pb->real, scratch, per_thread), pb->D);
        fn(pb, &w, pass, bh / pb->H, bh % pb->H, start);
    }
}

static tl_status backward(tl_tensor *grad_q, tl_tensor *grad_k, tl_tensor *grad_v,
                          tl_tensor *delta_t, const tl_tensor *lse_t, const attention_problem *pb) {
    const real_type *real = pb->real;
    const int64_t B = pb->B, H = pb->H, T = pb->T, S = pb->S, D = pb->D;
    const int64_t q_blocks = (T + BQ - 1) / BQ;
    const size_t per_thread = (size_t)(BACKWARD_SCRATCH * D + BACKWARD_SCRATCH_FIXED);
    void *scratch = malloc(real->size * per_thread * (size_t)omp_get_max_threads());
    if (!scratch) return tl_error(TL_ERR_MEMORY, "scaled_dot_product_attention: out of memory");
    const void *lse = tl_data(lse_t);
    void *delta = tl_data(delta_t);
    /* delta = rowsum(dO * O), from the forward's (rounded) output */
    const int64_t row_tasks = B * H * q_blocks;
#pragma omp parallel for schedule(static) if (row_tasks > 1)
    for (int64_t task = 0; task < row_tasks; task++) {
        const int64_t bh = task / q_blocks, i0 = task % q_blocks * BQ;
        const int64_t m = T - i0 < BQ ? T - i0 : BQ;
        void *o = thread_scratch(real, scratch, per_thread), *g = element(real, o, BQ * D);
        real->load(o, &pb->out, bh / H, bh % H, i0, m, D);
        real->load(g, &pb->grad_out, bh / H, bh % H, i0, m, D);
        real->row_dots(element(real, delta, bh * T + i0), o, g, m, D);
    }
    const backward_pass pass = {lse, delta, grad_q, grad_k, grad_v};
    if (grad_k || grad_v) for_each_block(pb, &pass, scratch, per_thread, S, BK, backward_keys);
    if (grad_q) for_each_block(pb, &pass, scratch, per_thread, T, BQ, backward_queries);
    free(scratch);
    return TL_OK;
}

/* ---- kernels ----------------------------------------------------------------------------------
 */
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
                              .real = q->dtype == TL_F64 ? &real_f64 : &real_f32,
                              .dropout = (float)args->dropout,
                              .keep_scale = 1.0 / (1.0 - args->dropout)};
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
    return forward(out, lse, &pb);
}

static tl_status attention_backward(tl_tensor *grad_q, tl_tensor *grad_k, tl_tensor *grad_v,
                                    tl_tensor *delta, const tl_tensor *grad_out, const tl_tensor *q,
                                    const tl_tensor *k, const tl_tensor *v, const tl_tensor *out,
                                    const tl_tensor *lse, const tl_attention_args *args) {
    attention_problem pb;
    TL_TRY(problem_of(&pb, q, k, v, out, grad_out, args));
    if (pb.B * pb.H == 0 || pb.T == 0 || pb.S == 0 || pb.D == 0) return TL_OK;
    return backward(grad_q, grad_k, grad_v, delta, lse, &pb);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(scaled_dot_product_attention, TL_DTYPES_FLOATING, attention, attention),
    TL_KERNEL(scaled_dot_product_attention_backward, TL_DTYPES_FLOATING, attention_backward,
              attention_backward),
};

TL_KERNEL_TABLE(tl_cpu_attention_table, TL_DEVICE_CPU, entries);
