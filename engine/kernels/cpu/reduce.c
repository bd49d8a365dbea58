/* CPU reduction kernels along one dim: sum, mean, max, min (argmax/argmin are max/min with
   no values). Floating sums accumulate in double; integer and bool sums in uint64, so an
   overflowing int64 sum wraps (two's complement) without undefined behaviour; bool bytes are
   read as byte != 0. max/min propagate NaN and give the first index of the extreme. */
#include <math.h>
#include <stdlib.h>

#include "kernels/arith.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

#define PARALLEL_THRESHOLD 32768 /* elements read before OpenMP is worth it */
#define SPLIT_MAX_ITEMS    16    /* with fewer work items a long dim is split in chunks */
#define SPLIT_MIN_CHUNK    16384
#define SPLIT_MAX_CHUNKS   64

/* The tensors of a reduction, walked along loop.h's lines: in, then the values (out) and the
   indices (idx), either of which may be absent (argmax has no values, sum no indices). */
enum { IN, OUT, IDX, TENSORS };

/* Per-lane partial results; a reduction of one (op, dtype) is three typed functions. max and
   min keep a key of kind f (floating dtypes) or i (integers and bool) and its first index. */
typedef double key_f;
typedef int64_t key_i;
typedef struct extreme_f {
    key_f value;
    int64_t index;
} extreme_f;
typedef struct extreme_i {
    key_i value;
    int64_t index;
} extreme_i;
typedef union lane_states {
    double sum_f[TL_CPU_LANE_BLOCK];
    uint64_t sum_i[TL_CPU_LANE_BLOCK];
    extreme_f ext_f[TL_CPU_LANE_BLOCK];
    extreme_i ext_i[TL_CPU_LANE_BLOCK];
} lane_states;

typedef struct reduce_ops {
    size_t state_size; /* bytes of one lane's state */
    /* the state of `lanes` lanes over reduced elements [r0, r1) (r0 < r1 for extremes) */
    void (*block)(const tl_cpu_lines *p, const char *in, int64_t lanes, int64_t r0, int64_t r1,
                  void *state);
    /* folds the state of a later chunk of the reduced dim into an earlier one */
    void (*merge)(void *into, const void *from, int64_t lanes);
    /* writes values (out, may be NULL) and indices (idx, may be NULL) */
    void (*finish)(const tl_cpu_lines *p, const void *state, int64_t lanes, char *out, char *idx);
} reduce_ops;

/* One work item over the whole reduced dim (ctx: the reduce_ops). */
static void reduce_item(const tl_cpu_lines *p, char *const *at, int64_t lanes, const void *ctx) {
    const reduce_ops *ops = ctx;
    lane_states state;
    ops->block(p, at[IN], lanes, 0, p->len, &state);
    ops->finish(p, &state, lanes, at[OUT], at[IDX]);
}

/* A reduction's walk: the lines of the plan (kernels/cpu/loop.c reports lanes or line), or, for a
   few long lines, chunks of the reduced dim merged in order. */
static const tl_kernel_variant reduce_variants[] = {
    TL_LOOP_VARIANT("reduce", TL_DTYPES_ALL, "split",
                    "fewer than 16 lines of at least 32768 elements: chunks of the reduced dim in "
                    "parallel, their partial states merged in order"),
};

static tl_status run_reduce(const reduce_ops *ops, tl_tensor *out, tl_tensor *indices,
                            const tl_tensor *in, int dim) {
    tl_cpu_lines p;
    tl_cpu_lines_plan(&p, TENSORS, (const tl_tensor *[]){in, out, indices}, dim);
    const int64_t items = p.items;
    if (items == 0) return TL_OK;

    int64_t chunks = 1;
    if (items < SPLIT_MAX_ITEMS && p.len >= 2 * SPLIT_MIN_CHUNK) {
        chunks = p.len / SPLIT_MIN_CHUNK;
        if (chunks > SPLIT_MAX_CHUNKS) chunks = SPLIT_MAX_CHUNKS;
    }
    size_t block_bytes = TL_CPU_LANE_BLOCK * ops->state_size;
    char *partials = chunks > 1 ? malloc((size_t)(items * chunks) * block_bytes) : NULL;
    if (!partials) { /* one item's reduced dim at a time (also when the small allocation fails) */
        tl_cpu_lines_for_each(&p, PARALLEL_THRESHOLD, reduce_item, ops);
        return TL_OK;
    }
    /* a few items with long lines: chunks of the reduced dim in parallel, then merged in order */
    tl_loop_variant_ran(&reduce_variants[0]);
    int64_t chunk_len = (p.len + chunks - 1) / chunks;
    chunks = (p.len + chunk_len - 1) / chunk_len; /* no empty chunk at the end */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t w = 0; w < items * chunks; w++) {
        int64_t item = w / chunks, r0 = (w % chunks) * chunk_len;
        int64_t r1 = r0 + chunk_len < p.len ? r0 + chunk_len : p.len;
        char *at[TENSORS];
        int64_t lanes = tl_cpu_lines_locate(&p, item, at);
        ops->block(&p, at[IN], lanes, r0, r1, partials + (size_t)w * block_bytes);
    }
    for (int64_t item = 0; item < items; item++) {
        char *first = partials + (size_t)(item * chunks) * block_bytes;
        char *at[TENSORS];
        int64_t lanes = tl_cpu_lines_locate(&p, item, at);
        for (int64_t c = 1; c < chunks; c++)
            ops->merge(first, first + (size_t)c * block_bytes, lanes);
        ops->finish(&p, first, lanes, at[OUT], at[IDX]);
    }
    free(partials);
    return TL_OK;
}

/* ---- element access ------------------------------------------------------ */
#define LOAD_F32(x)       ((double)(x))
#define LOAD_F64(x)       (x)
#define LOAD_BF16(x)      ((double)tl_bf16_load(x))
#define LOAD_F16(x)       ((double)tl_f16_load(x))
#define LOAD_INT(x)       ((int64_t)(x))
#define LOAD_BOOL(x)      ((int64_t)((x) != 0)) /* any non-zero byte is true */
#define LOAD_WRAP(x)      ((uint64_t)(int64_t)(x))
#define LOAD_WRAP_BOOL(x) ((uint64_t)((x) != 0))
#define STORE_F32(x)      ((float)(x))
#define STORE_F64(x)      (x)
#define STORE_BF16(x)     tl_bf16_round((float)(x))
#define STORE_F16(x)      tl_f16_round((float)(x))
#define STORE_I32(x)      ((int32_t)(x))
#define STORE_I64(x)      (x)
#define STORE_BOOL(x)     ((uint8_t)((x) != 0))

/* the keys max and min compare: double for floating dtypes, int64 for integers and bool */
static inline bool is_nan_f(double x) {
    return isnan(x);
}
static inline bool is_nan_i(int64_t x) {
    (void)x;
    return false;
}

/* ---- kernels -------------------------------------------------------------------- */
static tl_status check_out(const char *op, const tl_tensor *out, tl_dtype expected) {
    if (out && out->dtype != expected)
        return tl_error(TL_ERR_DTYPE, "%s: kernel expected a %s output, got %s", op,
                        tl_dtype_name(expected), tl_dtype_name(out->dtype));
    return TL_OK;
}

/* sum and mean; `out_dtype` is what the op layer allocates */
#define DEFINE_SUM_KERNEL(name, sfx, out_dtype)                                                    \
    static tl_status name##_##sfx(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,         \
                                  int dim) {                                                       \
        TL_TRY(check_out(#name, out, out_dtype));                                                  \
        return run_reduce(&name##_ops_##sfx, out, indices, in, dim);                               \
    }
/* max and min also serve argmax and argmin (out NULL) */
#define DEFINE_EXTREME_KERNEL(name, sfx, dtype)                                                    \
    static tl_status name##_##sfx(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,         \
                                  int dim) {                                                       \
        TL_TRY(check_out(#name, out, dtype));                                                      \
        if (in->ndim > 0 && in->shape[dim] == 0)                                                   \
            return tl_error(TL_ERR_SHAPE, #name ": cannot reduce a dim of size 0");                \
        return run_reduce(&name##_ops_##sfx, out, indices, in, dim);                               \
    }

/* ---- sums: the state is the running sum per lane (ACC: double or uint64) ------ */
#define DEFINE_SUM_BLOCK(sfx, T, ACC, LOAD)                                                        \
    static void sum_block_##sfx(const tl_cpu_lines *p, const char *base, int64_t lanes,            \
                                int64_t r0, int64_t r1, void *state) {                             \
        const T *in = (const T *)base;                                                             \
        ACC *acc = state;                                                                          \
        int64_t step = p->step[IN];                                                                \
        if (lanes == 1) {                                                                          \
            ACC s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                    \
            int64_t r = r0;                                                                        \
            for (; r + 4 <= r1; r += 4) {                                                          \
                s0 += LOAD(in[r * step]);                                                          \
                s1 += LOAD(in[(r + 1) * step]);                                                    \
                s2 += LOAD(in[(r + 2) * step]);                                                    \
                s3 += LOAD(in[(r + 3) * step]);                                                    \
            }                                                                                      \
            for (; r < r1; r++) s0 += LOAD(in[r * step]);                                          \
            acc[0] = (s0 + s1) + (s2 + s3);                                                        \
            return;                                                                                \
        }                                                                                          \
        for (int64_t l = 0; l < lanes; l++) acc[l] = 0;                                            \
        int64_t lane_in = p->lane[IN];                                                             \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const T *row = in + r * step;                                                          \
            if (lane_in == 1)                                                                      \
                for (int64_t l = 0; l < lanes; l++) acc[l] += LOAD(row[l]);                        \
            else                                                                                   \
                for (int64_t l = 0; l < lanes; l++) acc[l] += LOAD(row[l * lane_in]);              \
        }                                                                                          \
    }

static void merge_sum_f(void *into, const void *from, int64_t lanes) {
    double *a = into;
    const double *b = from;
    for (int64_t l = 0; l < lanes; l++) a[l] += b[l];
}
static void merge_sum_i(void *into, const void *from, int64_t lanes) {
    uint64_t *a = into;
    const uint64_t *b = from;
    for (int64_t l = 0; l < lanes; l++) a[l] += b[l];
}

/* floating sum and mean write the input's dtype (DTYPE) */
#define DEFINE_FLOAT_SUM(sfx, T, DTYPE, LOAD, STORE)                                               \
    DEFINE_SUM_BLOCK(sfx, T, double, LOAD)                                                         \
    static void sum_finish_##sfx(const tl_cpu_lines *p, const void *state, int64_t lanes,          \
                                 char *out, char *idx) {                                           \
        (void)idx;                                                                                 \
        const double *acc = state;                                                                 \
        T *o = (T *)out;                                                                           \
        for (int64_t l = 0; l < lanes; l++) o[l * p->lane[OUT]] = STORE(acc[l]);                   \
    }                                                                                              \
    static void mean_finish_##sfx(const tl_cpu_lines *p, const void *state, int64_t lanes,         \
                                  char *out, char *idx) {                                          \
        (void)idx;                                                                                 \
        const double *acc = state;                                                                 \
        T *o = (T *)out;                                                                           \
        for (int64_t l = 0; l < lanes; l++) o[l * p->lane[OUT]] = STORE(acc[l] / (double)p->len);  \
    }                                                                                              \
    static const reduce_ops sum_ops_##sfx = {sizeof(double), sum_block_##sfx, merge_sum_f,         \
                                             sum_finish_##sfx};                                    \
    static const reduce_ops mean_ops_##sfx = {sizeof(double), sum_block_##sfx, merge_sum_f,        \
                                              mean_finish_##sfx};                                  \
    DEFINE_SUM_KERNEL(sum, sfx, DTYPE)                                                             \
    DEFINE_SUM_KERNEL(mean, sfx, DTYPE)

/* integer and bool sums write int64: the uint64 sum modulo 2^64, as two's complement */
static void sum_finish_int(const tl_cpu_lines *p, const void *state, int64_t lanes, char *out,
                           char *idx) {
    (void)idx;
    const uint64_t *acc = state;
    int64_t *o = (int64_t *)out;
    for (int64_t l = 0; l < lanes; l++) o[l * p->lane[OUT]] = tl_wrap_to_i64(acc[l]);
}
#define DEFINE_INT_SUM(sfx, T, LOAD)                                                               \
    DEFINE_SUM_BLOCK(sfx, T, uint64_t, LOAD)                                                       \
    static const reduce_ops sum_ops_##sfx = {sizeof(uint64_t), sum_block_##sfx, merge_sum_i,       \
                                             sum_finish_int};                                      \
    DEFINE_SUM_KERNEL(sum, sfx, TL_I64)

/* ---- max and min: the state is the best value and its first index -------------
   CMP is > or <; a NaN beats any number and the first NaN stays. */
#define DEFINE_EXTREME(name, sfx, T, STATE, KEY, LOAD, STORE, IS_NAN, CMP)                         \
    static void name##_block_##sfx(const tl_cpu_lines *p, const char *base, int64_t lanes,         \
                                   int64_t r0, int64_t r1, void *state) {                          \
        const T *in = (const T *)base;                                                             \
        STATE *s = state;                                                                          \
        int64_t step = p->step[IN], lane_in = p->lane[IN];                                         \
        for (int64_t l = 0; l < lanes; l++) {                                                      \
            s[l].value = LOAD(in[r0 * step + l * lane_in]);                                        \
            s[l].index = r0;                                                                       \
        }                                                                                          \
        for (int64_t r = r0 + 1; r < r1; r++) {                                                    \
            const T *row = in + r * step;                                                          \
            for (int64_t l = 0; l < lanes; l++) {                                                  \
                KEY v = LOAD(row[l * lane_in]);                                                    \
                if (v CMP s[l].value || (IS_NAN(v) && !IS_NAN(s[l].value))) {                      \
                    s[l].value = v;                                                                \
                    s[l].index = r;                                                                \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void name##_finish_##sfx(const tl_cpu_lines *p, const void *state, int64_t lanes,       \
                                    char *out, char *idx) {                                        \
        const STATE *s = state;                                                                    \
        if (out)                                                                                   \
            for (int64_t l = 0; l < lanes; l++) ((T *)out)[l * p->lane[OUT]] = STORE(s[l].value);  \
        if (idx)                                                                                   \
            for (int64_t l = 0; l < lanes; l++) ((int64_t *)idx)[l * p->lane[IDX]] = s[l].index;   \
    }

#define DEFINE_MERGE(name, STATE, IS_NAN, CMP)                                                     \
    static void merge_##name(void *into, const void *from, int64_t lanes) {                        \
        STATE *a = into;                                                                           \
        const STATE *b = from;                                                                     \
        for (int64_t l = 0; l < lanes; l++)                                                        \
            if (b[l].value CMP a[l].value || (IS_NAN(b[l].value) && !IS_NAN(a[l].value)))          \
                a[l] = b[l];                                                                       \
    }
DEFINE_MERGE(max_f, extreme_f, is_nan_f, >)
DEFINE_MERGE(min_f, extreme_f, is_nan_f, <)
DEFINE_MERGE(max_i, extreme_i, is_nan_i, >)
DEFINE_MERGE(min_i, extreme_i, is_nan_i, <)

/* max and min of one dtype, compared as keys of KIND f (double) or i (int64) */
#define DEFINE_EXTREMES(sfx, T, DTYPE, KIND, LOAD, STORE)                                          \
    DEFINE_EXTREME(max, sfx, T, extreme_##KIND, key_##KIND, LOAD, STORE, is_nan_##KIND, >)         \
    DEFINE_EXTREME(min, sfx, T, extreme_##KIND, key_##KIND, LOAD, STORE, is_nan_##KIND, <)         \
    static const reduce_ops max_ops_##sfx = {sizeof(extreme_##KIND), max_block_##sfx,              \
                                             merge_max_##KIND, max_finish_##sfx};                  \
    static const reduce_ops min_ops_##sfx = {sizeof(extreme_##KIND), min_block_##sfx,              \
                                             merge_min_##KIND, min_finish_##sfx};                  \
    DEFINE_EXTREME_KERNEL(max, sfx, DTYPE)                                                         \
    DEFINE_EXTREME_KERNEL(min, sfx, DTYPE)

DEFINE_FLOAT_SUM(f32, float, TL_F32, LOAD_F32, STORE_F32)
DEFINE_FLOAT_SUM(f64, double, TL_F64, LOAD_F64, STORE_F64)
DEFINE_FLOAT_SUM(bf16, uint16_t, TL_BF16, LOAD_BF16, STORE_BF16)
DEFINE_FLOAT_SUM(f16, uint16_t, TL_F16, LOAD_F16, STORE_F16)
DEFINE_INT_SUM(i32, int32_t, LOAD_WRAP)
DEFINE_INT_SUM(i64, int64_t, LOAD_WRAP)
DEFINE_INT_SUM(b8, uint8_t, LOAD_WRAP_BOOL)
DEFINE_EXTREMES(f32, float, TL_F32, f, LOAD_F32, STORE_F32)
DEFINE_EXTREMES(f64, double, TL_F64, f, LOAD_F64, STORE_F64)
DEFINE_EXTREMES(bf16, uint16_t, TL_BF16, f, LOAD_BF16, STORE_BF16)
DEFINE_EXTREMES(f16, uint16_t, TL_F16, f, LOAD_F16, STORE_F16)
DEFINE_EXTREMES(i32, int32_t, TL_I32, i, LOAD_INT, STORE_I32)
DEFINE_EXTREMES(i64, int64_t, TL_I64, i, LOAD_INT, STORE_I64)
DEFINE_EXTREMES(b8, uint8_t, TL_BOOL, i, LOAD_BOOL, STORE_BOOL)

static const tl_kernel_entry entries[] = {
    TL_CPU_KERNELS_ALL(sum, reduce, sum),
    TL_KERNELS_FLOATING(mean, reduce, mean),
    /* argmax/argmin: the max/min kernels, which set only the indices when out is NULL */
    TL_CPU_KERNELS_ALL(max, reduce, max),
    TL_CPU_KERNELS_ALL(min, reduce, min),
    TL_CPU_KERNELS_ALL(argmax, reduce, max),
    TL_CPU_KERNELS_ALL(argmin, reduce, min),
};

TL_KERNEL_TABLE(tl_cpu_reduce_table, TL_DEVICE_CPU, entries);
TL_VARIANT_TABLE(tl_cpu_reduce_variants, TL_DEVICE_CPU, reduce_variants);
