/* CPU reduction kernels along one dim: the value reductions of the REDUCE_OP rows (sum, mean,
   ...: their math in kernels/reduction.h, floating inputs in double, integer and bool inputs
   exactly in int64, bool bytes read as byte != 0) and max, min (argmax/argmin are max/min with
   no values), which propagate NaN and give the first index of the extreme. */
#include <math.h>
#include <stdlib.h>

#include "kernels/arith.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/reduction.h"

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
/* A value reduction's states of a block of lanes, field by field: the loop over the lanes of
   one row reads and writes each field as an array, which vectorizes. */
typedef struct fold_lanes {
    double a[TL_CPU_LANE_BLOCK], b[TL_CPU_LANE_BLOCK], c[TL_CPU_LANE_BLOCK];
} fold_lanes;
typedef struct ifold_lanes {
    int64_t v[TL_CPU_LANE_BLOCK];
    uint64_t u[TL_CPU_LANE_BLOCK];
} ifold_lanes;
static inline tl_fold fold_get(const fold_lanes *s, int64_t l) {
    return (tl_fold){s->a[l], s->b[l], s->c[l]};
}
static inline void fold_put(fold_lanes *s, int64_t l, const tl_fold *t) {
    s->a[l] = t->a, s->b[l] = t->b, s->c[l] = t->c;
}
static inline tl_ifold ifold_get(const ifold_lanes *s, int64_t l) {
    return (tl_ifold){s->v[l], s->u[l]};
}
static inline void ifold_put(ifold_lanes *s, int64_t l, const tl_ifold *t) {
    s->v[l] = t->v, s->u[l] = t->u;
}

typedef union lane_states {
    fold_lanes fold_f;
    ifold_lanes fold_i;
    extreme_f ext_f[TL_CPU_LANE_BLOCK];
    extreme_i ext_i[TL_CPU_LANE_BLOCK];
} lane_states;

typedef struct reduce_call reduce_call;
typedef struct reduce_ops {
    size_t state_size; /* bytes of one lane's state */
    /* the state of `lanes` lanes over reduced elements [r0, r1) (r0 < r1 for extremes) */
    void (*block)(const tl_cpu_lines *p, const char *in, int64_t lanes, int64_t r0, int64_t r1,
                  void *state, const reduce_call *call);
    /* folds the state of a later chunk of the reduced dim into an earlier one */
    void (*merge)(void *into, const void *from, int64_t lanes, const reduce_call *call);
    /* writes values (out, may be NULL) and indices (idx, may be NULL) */
    void (*finish)(const tl_cpu_lines *p, const void *state, int64_t lanes, char *out, char *idx,
                   const reduce_call *call);
} reduce_ops;

/* A reduction's run: its functions, the op's number and the output's dtype. */
struct reduce_call {
    const reduce_ops *ops;
    double param;
    tl_dtype out_dtype;
};

/* One work item over the whole reduced dim (ctx: the reduce_call). */
static void reduce_item(const tl_cpu_lines *p, char *const *at, int64_t lanes, const void *ctx) {
    const reduce_call *call = ctx;
    lane_states state;
    call->ops->block(p, at[IN], lanes, 0, p->len, &state, call);
    call->ops->finish(p, &state, lanes, at[OUT], at[IDX], call);
}

/* A reduction's walk: the lines of the plan (kernels/cpu/loop.c reports lanes or line), or, for a
   few long lines, chunks of the reduced dim merged in order. */
static const tl_kernel_variant reduce_variants[] = {
    TL_LOOP_VARIANT("reduce", TL_DTYPES_ALL, "split",
                    "fewer than 16 lines of at least 32768 elements: chunks of the reduced dim in "
                    "parallel, their partial states merged in order"),
};

static tl_status run_reduce(const reduce_call *call, tl_tensor *out, tl_tensor *indices,
                            const tl_tensor *in, int dim) {
    const reduce_ops *ops = call->ops;
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
        tl_cpu_lines_for_each(&p, PARALLEL_THRESHOLD, reduce_item, call);
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
        ops->block(&p, at[IN], lanes, r0, r1, partials + (size_t)w * block_bytes, call);
    }
    for (int64_t item = 0; item < items; item++) {
        char *first = partials + (size_t)(item * chunks) * block_bytes;
        char *at[TENSORS];
        int64_t lanes = tl_cpu_lines_locate(&p, item, at);
        for (int64_t c = 1; c < chunks; c++)
            ops->merge(first, first + (size_t)c * block_bytes, lanes, call);
        ops->finish(&p, first, lanes, at[OUT], at[IDX], call);
    }
    free(partials);
    return TL_OK;
}

/* ---- element access ------------------------------------------------------ */
#define LOAD_F32(x)   ((double)(x))
#define LOAD_F64(x)   (x)
#define LOAD_BF16(x)  ((double)tl_bf16_load(x))
#define LOAD_F16(x)   ((double)tl_f16_load(x))
#define LOAD_INT(x)   ((int64_t)(x))
#define LOAD_BOOL(x)  ((int64_t)((x) != 0)) /* any non-zero byte is true */
#define STORE_F32(x)  ((float)(x))
#define STORE_F64(x)  (x)
#define STORE_BF16(x) tl_bf16_round((float)(x))
#define STORE_F16(x)  tl_f16_round((float)(x))
#define STORE_I32(x)  ((int32_t)(x))
#define STORE_I64(x)  (x)
#define STORE_BOOL(x) ((uint8_t)((x) != 0))

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

/* max and min also serve argmax and argmin (out NULL) */
#define DEFINE_EXTREME_KERNEL(name, sfx, dtype)                                                    \
    static tl_status name##_##sfx(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,         \
                                  int dim) {                                                       \
        TL_TRY(check_out(#name, out, dtype));                                                      \
        if (in->ndim > 0 && in->shape[dim] == 0)                                                   \
            return tl_error(TL_ERR_SHAPE, #name ": cannot reduce a dim of size 0");                \
        const reduce_call call = {&name##_ops_##sfx, 0, dtype};                                    \
        return run_reduce(&call, out, indices, in, dim);                                           \
    }

/* ---- value reductions: each REDUCE_OP row's math (kernels/reduction.h) per lane --------------
   A line of one lane folds in four states (elements r, r + 4, ... in each, four loads in flight),
   merged as (s0 + s1) + (s2 + s3); lanes side by side fold one state each. The result is stored
   in the output's dtype (the row's output rule). */
/* a result in the output's dtype (tl_dtype_store: floats rounded as the kernels' STORE_*) */
static void store_double(char *at, tl_dtype dtype, double v) {
    tl_dtype_store(dtype, at, tl_scalar_float(v));
}
static void store_int(char *at, tl_dtype dtype, int64_t v) {
    tl_dtype_store(dtype, at, tl_scalar_int(v));
}

/* The block, merge and finish of op `name` over states S (tl_fold or tl_ifold, functions
   tl_<FOLD>_<name>_*): ARGS is the extra argument the functions take (the op's number q for
   floating folds, nothing for integer ones), STORE writes a result of type R. */
#define DEFINE_FOLD_OP(name, S, FOLD, R, STORE, ...)                                               \
    static void FOLD##_##name##_merge_lanes(void *into, const void *from, int64_t lanes,           \
                                            const reduce_call *call) {                             \
        const double q = call->param;                                                              \
        (void)q;                                                                                   \
        FOLD##_lanes *a = into;                                                                    \
        const FOLD##_lanes *b = from;                                                              \
        for (int64_t l = 0; l < lanes; l++) {                                                      \
            S x = FOLD##_get(a, l), y = FOLD##_get(b, l);                                          \
            tl_##FOLD##_##name##_merge(&x, &y __VA_ARGS__);                                        \
            FOLD##_put(a, l, &x);                                                                  \
        }                                                                                          \
    }                                                                                              \
    static void FOLD##_##name##_finish_lanes(const tl_cpu_lines *p, const void *state,             \
                                             int64_t lanes, char *out, char *idx,                  \
                                             const reduce_call *call) {                            \
        (void)idx;                                                                                 \
        const double q = call->param;                                                              \
        (void)q;                                                                                   \
        const FOLD##_lanes *s = state;                                                             \
        const int64_t stride = p->lane[OUT] * p->size[OUT];                                        \
        for (int64_t l = 0; l < lanes; l++) {                                                      \
            const S x = FOLD##_get(s, l);                                                          \
            const R v = tl_##FOLD##_##name##_finish(&x, p->len __VA_ARGS__);                       \
            STORE(out + l * stride, call->out_dtype, v);                                           \
        }                                                                                          \
    }

/* A float32 line of unit stride, elements [r0, r1), of a row that folds in float (below): blocks
   of FLOAT_BLOCK elements, each folded by the row's run in float (kernels/reduction.h: in lanes,
   which vectorize; for AVX2 too), its state merged into the line's state in double, so that a
   long line adds up in double. Returns false (nothing done) for other lines and rows. */
#define FLOAT_BLOCK 1024
/* The rows whose float32 lines fold in float: sums (merged in double every block), extremes,
   truth and counts (exact), logsumexp (its terms are at most 1, its sum at most a block's
   count). prod and norm stay in double (a float product or square overflows where the double
   one does not), and so do var and std (Welford's cancellation). */
enum {
    FOLDS_IN_FLOAT_sum = 1,
    FOLDS_IN_FLOAT_mean = 1,
    FOLDS_IN_FLOAT_amax = 1,
    FOLDS_IN_FLOAT_amin = 1,
    FOLDS_IN_FLOAT_all = 1,
    FOLDS_IN_FLOAT_any = 1,
    FOLDS_IN_FLOAT_count_nonzero = 1,
    FOLDS_IN_FLOAT_logsumexp = 1,
    FOLDS_IN_FLOAT_var = 0,
    FOLDS_IN_FLOAT_std = 0,
    FOLDS_IN_FLOAT_prod = 0,
    FOLDS_IN_FLOAT_norm = 0,
};
#define DEFINE_FLOAT_LINE(name)                                                                    \
    TL_CPU_WIDE static bool fold_##name##_line_f32(const void *base, int64_t step, int64_t r0,     \
                                                   int64_t r1, void *state, double q) {            \
        if (step != 1 || !FOLDS_IN_FLOAT_##name) return false;                                     \
        const float *in = (const float *)base + r0;                                                \
        tl_fold s;                                                                                 \
        tl_fold_##name##_init(&s, q);                                                              \
        for (int64_t r = 0; r < r1 - r0; r += FLOAT_BLOCK) {                                       \
            const int k = (int)(r1 - r0 - r < FLOAT_BLOCK ? r1 - r0 - r : FLOAT_BLOCK);            \
            tl_ffold f;                                                                            \
            tl_ffold_##name##_init(&f, q);                                                         \
            tl_ffold_##name##_run(&f, in + r, k, q);                                               \
            const tl_fold d = {f.a, f.b, f.c};                                                     \
            tl_fold_##name##_merge(&s, &d, q);                                                     \
        }                                                                                          \
        fold_put(state, 0, &s);                                                                    \
        return true;                                                                               \
    }
/* the line hook of the kernels without a float line */
static bool no_line(const void *base, int64_t step, int64_t r0, int64_t r1, void *state, double q) {
    (void)base, (void)step, (void)r0, (void)r1, (void)state, (void)q;
    return false;
}

/* The kernel of op `name` for one input dtype: LINE (a float line, or no_line) first takes a
   line of one lane. */
#define DEFINE_FOLD_KERNEL(name, sfx, T, LOAD, S, FOLD, LINE, ...)                                 \
    static void FOLD##_##name##_block_##sfx(const tl_cpu_lines *p, const char *base,               \
                                            int64_t lanes, int64_t r0, int64_t r1, void *state,    \
                                            const reduce_call *call) {                             \
        const T *in = (const T *)base;                                                             \
        FOLD##_lanes *acc = state;                                                                 \
        const double q = call->param;                                                              \
        (void)q;                                                                                   \
        const int64_t step = p->step[IN];                                                          \
        if (lanes == 1 && LINE(base, step, r0, r1, state, q)) return;                              \
        if (lanes == 1) {                                                                          \
            S s0, s1, s2, s3;                                                                      \
            tl_##FOLD##_##name##_init(&s0 __VA_ARGS__);                                            \
            s1 = s2 = s3 = s0;                                                                     \
            int64_t r = r0;                                                                        \
            for (; r + 4 <= r1; r += 4) {                                                          \
                tl_##FOLD##_##name##_step(&s0, LOAD(in[r * step]) __VA_ARGS__);                    \
                tl_##FOLD##_##name##_step(&s1, LOAD(in[(r + 1) * step]) __VA_ARGS__);              \
                tl_##FOLD##_##name##_step(&s2, LOAD(in[(r + 2) * step]) __VA_ARGS__);              \
                tl_##FOLD##_##name##_step(&s3, LOAD(in[(r + 3) * step]) __VA_ARGS__);              \
            }                                                                                      \
            for (; r < r1; r++) tl_##FOLD##_##name##_step(&s0, LOAD(in[r * step]) __VA_ARGS__);    \
            tl_##FOLD##_##name##_merge(&s0, &s1 __VA_ARGS__);                                      \
            tl_##FOLD##_##name##_merge(&s2, &s3 __VA_ARGS__);                                      \
            tl_##FOLD##_##name##_merge(&s0, &s2 __VA_ARGS__);                                      \
            FOLD##_put(acc, 0, &s0);                                                               \
            return;                                                                                \
        }                                                                                          \
        S first;                                                                                   \
        tl_##FOLD##_##name##_init(&first __VA_ARGS__);                                             \
        for (int64_t l = 0; l < lanes; l++) FOLD##_put(acc, l, &first);                            \
        const int64_t lane_in = p->lane[IN];                                                       \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            const T *row = in + r * step;                                                          \
            for (int64_t l = 0; l < lanes; l++) {                                                  \
                S x = FOLD##_get(acc, l);                                                          \
                tl_##FOLD##_##name##_step(&x, LOAD(row[l * lane_in]) __VA_ARGS__);                 \
                FOLD##_put(acc, l, &x);                                                            \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static const reduce_ops FOLD##_##name##_ops_##sfx = {sizeof(S), FOLD##_##name##_block_##sfx,   \
                                                         FOLD##_##name##_merge_lanes,              \
                                                         FOLD##_##name##_finish_lanes};            \
    static tl_status fold_##name##_##sfx(tl_tensor *out, const tl_tensor *in, int dim,             \
                                         const tl_op_args *args) {                                 \
        const reduce_call call = {&FOLD##_##name##_ops_##sfx, args ? args->scalar[0] : 0,          \
                                  out->dtype};                                                     \
        return run_reduce(&call, out, NULL, in, dim);                                              \
    }

/* The kernels of a row: floating dtypes fold in tl_fold (with the op's number q), integer and
   bool ones (dtypes ALL) in tl_ifold. */
#define FOLD_KERNELS_FLOATING(name)                                                                \
    DEFINE_FOLD_OP(name, tl_fold, fold, double, store_double, , q)                                 \
    DEFINE_FLOAT_LINE(name)                                                                        \
    DEFINE_FOLD_KERNEL(name, f32, float, LOAD_F32, tl_fold, fold, fold_##name##_line_f32, , q)     \
    DEFINE_FOLD_KERNEL(name, f64, double, LOAD_F64, tl_fold, fold, no_line, , q)                   \
    DEFINE_FOLD_KERNEL(name, bf16, uint16_t, LOAD_BF16, tl_fold, fold, no_line, , q)               \
    DEFINE_FOLD_KERNEL(name, f16, uint16_t, LOAD_F16, tl_fold, fold, no_line, , q)
#define FOLD_KERNELS_ALL(name)                                                                     \
    FOLD_KERNELS_FLOATING(name)                                                                    \
    DEFINE_FOLD_OP(name, tl_ifold, ifold, int64_t, store_int, )                                    \
    DEFINE_FOLD_KERNEL(name, i32, int32_t, LOAD_INT, tl_ifold, ifold, no_line, )                   \
    DEFINE_FOLD_KERNEL(name, i64, int64_t, LOAD_INT, tl_ifold, ifold, no_line, )                   \
    DEFINE_FOLD_KERNEL(name, b8, uint8_t, LOAD_BOOL, tl_ifold, ifold, no_line, )
#define FOLD_ENTRIES_FLOATING(name) TL_KERNELS_FLOATING(name, fold, fold_##name)
#define FOLD_ENTRIES_ALL(name)                                                                     \
    TL_KERNELS_FLOATING(name, fold, fold_##name), TL_KERNELS_INTEGER(name, fold, fold_##name),     \
        TL_KERNEL(name, TL_DTYPES_BOOL, fold, fold_##name##_b8)

/* ---- max and min: the state is the best value and its first index -------------
   CMP is > or <; a NaN beats any number and the first NaN stays. */
#define DEFINE_EXTREME(name, sfx, T, STATE, KEY, LOAD, STORE, IS_NAN, CMP)                         \
    static void name##_block_##sfx(const tl_cpu_lines *p, const char *base, int64_t lanes,         \
                                   int64_t r0, int64_t r1, void *state, const reduce_call *call) { \
        (void)call;                                                                                \
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
                                    char *out, char *idx, const reduce_call *call) {               \
        (void)call;                                                                                \
        const STATE *s = state;                                                                    \
        if (out)                                                                                   \
            for (int64_t l = 0; l < lanes; l++) ((T *)out)[l * p->lane[OUT]] = STORE(s[l].value);  \
        if (idx)                                                                                   \
            for (int64_t l = 0; l < lanes; l++) ((int64_t *)idx)[l * p->lane[IDX]] = s[l].index;   \
    }

#define DEFINE_MERGE(name, STATE, IS_NAN, CMP)                                                     \
    static void merge_##name(void *into, const void *from, int64_t lanes,                          \
                             const reduce_call *call) {                                            \
        (void)call;                                                                                \
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

DEFINE_EXTREMES(f32, float, TL_F32, f, LOAD_F32, STORE_F32)
DEFINE_EXTREMES(f64, double, TL_F64, f, LOAD_F64, STORE_F64)
DEFINE_EXTREMES(bf16, uint16_t, TL_BF16, f, LOAD_BF16, STORE_BF16)
DEFINE_EXTREMES(f16, uint16_t, TL_F16, f, LOAD_F16, STORE_F16)
DEFINE_EXTREMES(i32, int32_t, TL_I32, i, LOAD_INT, STORE_I32)
DEFINE_EXTREMES(i64, int64_t, TL_I64, i, LOAD_INT, STORE_I64)
DEFINE_EXTREMES(b8, uint8_t, TL_BOOL, i, LOAD_BOOL, STORE_BOOL)

/* the value reductions' kernels, one set per REDUCE_OP row */
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    FOLD_KERNELS_##dtypes(name)
#include "tlua/ops.def"

static const tl_kernel_entry entries[] = {
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    FOLD_ENTRIES_##dtypes(name),
#include "tlua/ops.def"
    /* argmax/argmin: the max/min kernels, which set only the indices when out is NULL */
    TL_CPU_KERNELS_ALL(max, reduce, max),
    TL_CPU_KERNELS_ALL(min, reduce, min),
    TL_CPU_KERNELS_ALL(argmax, reduce, max),
    TL_CPU_KERNELS_ALL(argmin, reduce, min),
};

TL_KERNEL_TABLE(tl_cpu_reduce_table, TL_DEVICE_CPU, entries);
TL_VARIANT_TABLE(tl_cpu_reduce_variants, TL_DEVICE_CPU, reduce_variants);
