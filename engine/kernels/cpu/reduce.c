/* CPU reduction kernels along one dim: sum, mean, max, min (argmax/argmin are max/min with
   no values). Floating sums accumulate in double; integer and bool sums in uint64, so an
   overflowing int64 sum wraps (two's complement) without undefined behaviour; bool bytes are
   read as byte != 0. max/min propagate NaN and give the first index of the extreme. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

#define LANE_BLOCK         64    /* kept elements reduced side by side in the inner loop */
#define PARALLEL_THRESHOLD 32768 /* elements read before OpenMP is worth it */
#define SPLIT_MAX_ITEMS    16    /* with fewer work items a long dim is split in chunks */
#define SPLIT_MIN_CHUNK    16384
#define SPLIT_MAX_CHUNKS   64

/* The reduction as loops: `outer` positions (outer_* dims) times `lanes` kept elements
   (one kept dim walked in the inner loop, preferably a unit-stride one) times `len`
   reduced elements. Strides count elements of the tensor they belong to. */
typedef struct reduce_plan {
    int64_t len, step; /* the reduced dim */
    int64_t lanes, lane_in, lane_out, lane_idx;
    int nouter;
    int64_t outer_shape[TL_MAX_DIMS], outer_in[TL_MAX_DIMS], outer_out[TL_MAX_DIMS],
        outer_idx[TL_MAX_DIMS];
    int64_t outer, blocks; /* blocks: LANE_BLOCK-wide pieces of the lanes */
} reduce_plan;

static void make_plan(reduce_plan *p, const tl_tensor *out, const tl_tensor *indices,
                      const tl_tensor *in, int dim) {
    memset(p, 0, sizeof *p);
    p->len = in->ndim ? in->shape[dim] : 1;
    p->step = in->ndim ? in->strides[dim] : 0;
    const int lane = p->len <= 1 || p->step != 1 ? tl_cpu_unit_lane(in, dim) : -1;
    p->lanes = lane >= 0 ? in->shape[lane] : 1;
    if (lane >= 0) {
        p->lane_in = in->strides[lane];
        p->lane_out = out ? out->strides[lane] : 0;
        p->lane_idx = indices ? indices->strides[lane] : 0;
    }
    p->outer = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (d == dim || d == lane || in->shape[d] == 1) continue;
        int i = p->nouter++;
        p->outer_shape[i] = in->shape[d];
        p->outer_in[i] = in->strides[d];
        p->outer_out[i] = out ? out->strides[d] : 0;
        p->outer_idx[i] = indices ? indices->strides[d] : 0;
        p->outer *= in->shape[d];
    }
    p->blocks = (p->lanes + LANE_BLOCK - 1) / LANE_BLOCK;
}

/* Where work item `item` (outer position, lane block) reads and writes. */
typedef struct item_ptrs {
    const char *in;
    char *out, *idx;
    int64_t lanes;
} item_ptrs;

static item_ptrs locate(const reduce_plan *p, int64_t item, const char *in, size_t in_size,
                        char *out, size_t out_size, char *idx) {
    int64_t o = item / p->blocks, l0 = (item % p->blocks) * LANE_BLOCK;
    int64_t in_off = l0 * p->lane_in, out_off = l0 * p->lane_out, idx_off = l0 * p->lane_idx;
    for (int d = p->nouter - 1; d >= 0; d--) {
        int64_t i = o % p->outer_shape[d];
        o /= p->outer_shape[d];
        in_off += i * p->outer_in[d];
        out_off += i * p->outer_out[d];
        idx_off += i * p->outer_idx[d];
    }
    int64_t left = p->lanes - l0;
    return (item_ptrs){
        .in = in + in_off * (int64_t)in_size,
        .out = out ? out + out_off * (int64_t)out_size : NULL,
        .idx = idx ? idx + idx_off * (int64_t)sizeof(int64_t) : NULL,
        .lanes = left < LANE_BLOCK ? left : LANE_BLOCK,
    };
}

/* Per-lane partial results; a reduction of one (op, dtype) is three typed functions. */
typedef struct extreme_f {
    double value;
    int64_t index;
} extreme_f;
typedef struct extreme_i {
    int64_t value;
    int64_t index;
} extreme_i;
typedef union lane_states {
    double sum_f[LANE_BLOCK];
    uint64_t sum_i[LANE_BLOCK];
    extreme_f ext_f[LANE_BLOCK];
    extreme_i ext_i[LANE_BLOCK];
} lane_states;

typedef struct reduce_ops {
    size_t state_size; /* bytes of one lane's state */
    /* the state of `lanes` lanes over reduced elements [r0, r1) (r0 < r1 for extremes) */
    void (*block)(const reduce_plan *p, const char *in, int64_t lanes, int64_t r0, int64_t r1,
                  void *state);
    /* folds the state of a later chunk of the reduced dim into an earlier one */
    void (*merge)(void *into, const void *from, int64_t lanes);
    /* writes values (out, may be NULL) and indices (idx, may be NULL) */
    void (*finish)(const reduce_plan *p, const void *state, int64_t lanes, char *out, char *idx);
} reduce_ops;

static tl_status run_reduce(const reduce_ops *ops, tl_tensor *out, tl_tensor *indices,
                            const tl_tensor *in, int dim) {
    reduce_plan p;
    make_plan(&p, out, indices, in, dim);
    int64_t items = p.outer * p.blocks;
    if (items == 0) return TL_OK;
    const char *in_data = tl_data(in);
    char *out_data = out ? tl_data(out) : NULL, *idx_data = indices ? tl_data(indices) : NULL;
    size_t in_size = tl_dtype_size(in->dtype), out_size = out ? tl_dtype_size(out->dtype) : 0;
    bool parallel = p.outer * p.lanes * p.len > PARALLEL_THRESHOLD;

    int64_t chunks = 1;
    if (items < SPLIT_MAX_ITEMS && p.len >= 2 * SPLIT_MIN_CHUNK) {
        chunks = p.len / SPLIT_MIN_CHUNK;
        if (chunks > SPLIT_MAX_CHUNKS) chunks = SPLIT_MAX_CHUNKS;
    }
    size_t block_bytes = LANE_BLOCK * ops->state_size;
    char *partials = chunks > 1 ? malloc((size_t)(items * chunks) * block_bytes) : NULL;
    if (!partials) chunks = 1; /* a small allocation failing: reduce without splitting */

    if (chunks == 1) {
#pragma omp parallel for schedule(static) if (parallel && items > 1)
        for (int64_t item = 0; item < items; item++) {
            lane_states state;
            item_ptrs at = locate(&p, item, in_data, in_size, out_data, out_size, idx_data);
            ops->block(&p, at.in, at.lanes, 0, p.len, &state);
            ops->finish(&p, &state, at.lanes, at.out, at.idx);
        }
        return TL_OK;
    }
    int64_t chunk_len = (p.len + chunks - 1) / chunks;
    chunks = (p.len + chunk_len - 1) / chunk_len; /* no empty chunk at the end */
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t w = 0; w < items * chunks; w++) {
        int64_t item = w / chunks, r0 = (w % chunks) * chunk_len;
        int64_t r1 = r0 + chunk_len < p.len ? r0 + chunk_len : p.len;
        item_ptrs at = locate(&p, item, in_data, in_size, out_data, out_size, idx_data);
        ops->block(&p, at.in, at.lanes, r0, r1, partials + (size_t)w * block_bytes);
    }
    for (int64_t item = 0; item < items; item++) {
        char *first = partials + (size_t)(item * chunks) * block_bytes;
        item_ptrs at = locate(&p, item, in_data, in_size, out_data, out_size, idx_data);
        for (int64_t c = 1; c < chunks; c++)
            ops->merge(first, first + (size_t)c * block_bytes, at.lanes);
        ops->finish(&p, first, at.lanes, at.out, at.idx);
    }
    free(partials);
    return TL_OK;
}

/* ---- element access ------------------------------------------------------ */
static inline float bf16_to_f32(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#define LOAD_F32(x)       ((double)(x))
#define LOAD_F64(x)       (x)
#define LOAD_BF16(x)      ((double)bf16_to_f32(x))
#define LOAD_F16(x)       ((double)tl_f16_to_f32(x))
#define LOAD_INT(x)       ((int64_t)(x))
#define LOAD_BOOL(x)      ((int64_t)((x) != 0)) /* any non-zero byte is true */
#define LOAD_WRAP(x)      ((uint64_t)(int64_t)(x))
#define LOAD_WRAP_BOOL(x) ((uint64_t)((x) != 0))
#define STORE_F32(x)      ((float)(x))
#define STORE_F64(x)      (x)
#define STORE_BF16(x)     tl_f32_to_bf16((float)(x))
#define STORE_F16(x)      tl_f32_to_f16((float)(x))
#define STORE_I32(x)      ((int32_t)(x))
#define STORE_I64(x)      (x)
#define STORE_BOOL(x)     ((uint8_t)((x) != 0))
#define IS_NAN_F(x)       isnan(x)
#define IS_NAN_I(x)       false

/* ---- sums: the state is the running sum per lane (ACC: double or uint64) ------ */
#define DEFINE_SUM_BLOCK(sfx, T, ACC, LOAD)                                                        \
    static void sum_block_##sfx(const reduce_plan *p, const char *base, int64_t lanes, int64_t r0, \
                                int64_t r1, void *state) {                                         \
        const T *in = (const T *)base;                                                             \
        ACC *acc = state;                                                                          \
        int64_t step = p->step;                                                                    \
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
        int64_t lane_in = p->lane_in;                                                              \
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

/* floating sum and mean write the input's dtype */
#define DEFINE_FLOAT_SUM(sfx, T, LOAD, STORE)                                                      \
    DEFINE_SUM_BLOCK(sfx, T, double, LOAD)                                                         \
    static void sum_finish_##sfx(const reduce_plan *p, const void *state, int64_t lanes,           \
                                 char *out, char *idx) {                                           \
        (void)idx;                                                                                 \
        const double *acc = state;                                                                 \
        T *o = (T *)out;                                                                           \
        for (int64_t l = 0; l < lanes; l++) o[l * p->lane_out] = STORE(acc[l]);                    \
    }                                                                                              \
    static void mean_finish_##sfx(const reduce_plan *p, const void *state, int64_t lanes,          \
                                  char *out, char *idx) {                                          \
        (void)idx;                                                                                 \
        const double *acc = state;                                                                 \
        T *o = (T *)out;                                                                           \
        for (int64_t l = 0; l < lanes; l++) o[l * p->lane_out] = STORE(acc[l] / (double)p->len);   \
    }                                                                                              \
    static const reduce_ops sum_ops_##sfx = {sizeof(double), sum_block_##sfx, merge_sum_f,         \
                                             sum_finish_##sfx};                                    \
    static const reduce_ops mean_ops_##sfx = {sizeof(double), sum_block_##sfx, merge_sum_f,        \
                                              mean_finish_##sfx};

/* integer and bool sums write int64: the uint64 sum modulo 2^64, as two's complement */
static inline int64_t wrap_to_i64(uint64_t u) {
    return u <= INT64_MAX ? (int64_t)u : -(int64_t)(UINT64_MAX - u) - 1;
}
static void sum_finish_int(const reduce_plan *p, const void *state, int64_t lanes, char *out,
                           char *idx) {
    (void)idx;
    const uint64_t *acc = state;
    int64_t *o = (int64_t *)out;
    for (int64_t l = 0; l < lanes; l++) o[l * p->lane_out] = wrap_to_i64(acc[l]);
}
#define DEFINE_INT_SUM(sfx, T, LOAD)                                                               \
    DEFINE_SUM_BLOCK(sfx, T, uint64_t, LOAD)                                                       \
    static const reduce_ops sum_ops_##sfx = {sizeof(uint64_t), sum_block_##sfx, merge_sum_i,       \
                                             sum_finish_int};

/* ---- max and min: the state is the best value and its first index -------------
   CMP is > or <; a NaN beats any number and the first NaN stays. */
#define DEFINE_EXTREME(name, sfx, T, STATE, KEY, LOAD, STORE, IS_NAN, CMP)                         \
    static void name##_block_##sfx(const reduce_plan *p, const char *base, int64_t lanes,          \
                                   int64_t r0, int64_t r1, void *state) {                          \
        const T *in = (const T *)base;                                                             \
        STATE *s = state;                                                                          \
        int64_t step = p->step, lane_in = p->lane_in;                                              \
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
    static void name##_finish_##sfx(const reduce_plan *p, const void *state, int64_t lanes,        \
                                    char *out, char *idx) {                                        \
        const STATE *s = state;                                                                    \
        if (out)                                                                                   \
            for (int64_t l = 0; l < lanes; l++) ((T *)out)[l * p->lane_out] = STORE(s[l].value);   \
        if (idx)                                                                                   \
            for (int64_t l = 0; l < lanes; l++) ((int64_t *)idx)[l * p->lane_idx] = s[l].index;    \
    }

#define DEFINE_MERGE(name, STATE, IS_NAN, CMP)                                                     \
    static void merge_##name(void *into, const void *from, int64_t lanes) {                        \
        STATE *a = into;                                                                           \
        const STATE *b = from;                                                                     \
        for (int64_t l = 0; l < lanes; l++)                                                        \
            if (b[l].value CMP a[l].value || (IS_NAN(b[l].value) && !IS_NAN(a[l].value)))          \
                a[l] = b[l];                                                                       \
    }
DEFINE_MERGE(max_f, extreme_f, IS_NAN_F, >)
DEFINE_MERGE(min_f, extreme_f, IS_NAN_F, <)
DEFINE_MERGE(max_i, extreme_i, IS_NAN_I, >)
DEFINE_MERGE(min_i, extreme_i, IS_NAN_I, <)

#define DEFINE_FLOAT_EXTREMES(sfx, T, LOAD, STORE)                                                 \
    DEFINE_EXTREME(max, sfx, T, extreme_f, double, LOAD, STORE, IS_NAN_F, >)                       \
    DEFINE_EXTREME(min, sfx, T, extreme_f, double, LOAD, STORE, IS_NAN_F, <)                       \
    static const reduce_ops max_ops_##sfx = {sizeof(extreme_f), max_block_##sfx, merge_max_f,      \
                                             max_finish_##sfx};                                    \
    static const reduce_ops min_ops_##sfx = {sizeof(extreme_f), min_block_##sfx, merge_min_f,      \
                                             min_finish_##sfx};
#define DEFINE_INT_EXTREMES(sfx, T, LOAD, STORE)                                                   \
    DEFINE_EXTREME(max, sfx, T, extreme_i, int64_t, LOAD, STORE, IS_NAN_I, >)                      \
    DEFINE_EXTREME(min, sfx, T, extreme_i, int64_t, LOAD, STORE, IS_NAN_I, <)                      \
    static const reduce_ops max_ops_##sfx = {sizeof(extreme_i), max_block_##sfx, merge_max_i,      \
                                             max_finish_##sfx};                                    \
    static const reduce_ops min_ops_##sfx = {sizeof(extreme_i), min_block_##sfx, merge_min_i,      \
                                             min_finish_##sfx};

DEFINE_FLOAT_SUM(f32, float, LOAD_F32, STORE_F32)
DEFINE_FLOAT_SUM(f64, double, LOAD_F64, STORE_F64)
DEFINE_FLOAT_SUM(bf16, uint16_t, LOAD_BF16, STORE_BF16)
DEFINE_FLOAT_SUM(f16, uint16_t, LOAD_F16, STORE_F16)
DEFINE_INT_SUM(i32, int32_t, LOAD_WRAP)
DEFINE_INT_SUM(i64, int64_t, LOAD_WRAP)
DEFINE_INT_SUM(b8, uint8_t, LOAD_WRAP_BOOL)
DEFINE_FLOAT_EXTREMES(f32, float, LOAD_F32, STORE_F32)
DEFINE_FLOAT_EXTREMES(f64, double, LOAD_F64, STORE_F64)
DEFINE_FLOAT_EXTREMES(bf16, uint16_t, LOAD_BF16, STORE_BF16)
DEFINE_FLOAT_EXTREMES(f16, uint16_t, LOAD_F16, STORE_F16)
DEFINE_INT_EXTREMES(i32, int32_t, LOAD_INT, STORE_I32)
DEFINE_INT_EXTREMES(i64, int64_t, LOAD_INT, STORE_I64)
DEFINE_INT_EXTREMES(b8, uint8_t, LOAD_BOOL, STORE_BOOL)

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

DEFINE_SUM_KERNEL(sum, f32, TL_F32)
DEFINE_SUM_KERNEL(sum, f64, TL_F64)
DEFINE_SUM_KERNEL(sum, bf16, TL_BF16)
DEFINE_SUM_KERNEL(sum, f16, TL_F16)
DEFINE_SUM_KERNEL(sum, i32, TL_I64)
DEFINE_SUM_KERNEL(sum, i64, TL_I64)
DEFINE_SUM_KERNEL(sum, b8, TL_I64)
DEFINE_SUM_KERNEL(mean, f32, TL_F32)
DEFINE_SUM_KERNEL(mean, f64, TL_F64)
DEFINE_SUM_KERNEL(mean, bf16, TL_BF16)
DEFINE_SUM_KERNEL(mean, f16, TL_F16)
#define DEFINE_EXTREME_KERNELS(sfx, dtype)                                                         \
    DEFINE_EXTREME_KERNEL(max, sfx, dtype)                                                         \
    DEFINE_EXTREME_KERNEL(min, sfx, dtype)
DEFINE_EXTREME_KERNELS(f32, TL_F32)
DEFINE_EXTREME_KERNELS(f64, TL_F64)
DEFINE_EXTREME_KERNELS(bf16, TL_BF16)
DEFINE_EXTREME_KERNELS(f16, TL_F16)
DEFINE_EXTREME_KERNELS(i32, TL_I32)
DEFINE_EXTREME_KERNELS(i64, TL_I64)
DEFINE_EXTREME_KERNELS(b8, TL_BOOL)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(sum, reduce, sum),
    TL_KERNELS_INTEGER(sum, reduce, sum),
    TL_KERNEL(sum, TL_DTYPES_BOOL, reduce, sum_b8),
    TL_KERNELS_FLOATING(mean, reduce, mean),
    /* argmax/argmin: the max/min kernels, which set only the indices when out is NULL */
    TL_KERNELS_FLOATING(max, reduce, max),
    TL_KERNELS_INTEGER(max, reduce, max),
    TL_KERNEL(max, TL_DTYPES_BOOL, reduce, max_b8),
    TL_KERNELS_FLOATING(min, reduce, min),
    TL_KERNELS_INTEGER(min, reduce, min),
    TL_KERNEL(min, TL_DTYPES_BOOL, reduce, min_b8),
    TL_KERNELS_FLOATING(argmax, reduce, max),
    TL_KERNELS_INTEGER(argmax, reduce, max),
    TL_KERNEL(argmax, TL_DTYPES_BOOL, reduce, max_b8),
    TL_KERNELS_FLOATING(argmin, reduce, min),
    TL_KERNELS_INTEGER(argmin, reduce, min),
    TL_KERNEL(argmin, TL_DTYPES_BOOL, reduce, min_b8),
};

TL_KERNEL_TABLE(tl_cpu_reduce_table, TL_DEVICE_CPU, entries);
