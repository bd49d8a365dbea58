/* CPU index kernels along a dim: gather (elements moved as bits; index_select's rows copied
 * whole), scatter (bits), scatter_add and scatter_reduce. Writes keep the index's row-major order
 * at each place of the target (deterministic: duplicates add in that order, the last write
 * wins), with threads over rows or over ranges of the last dim that never share a place. */
#include <string.h>

#include "core/half.h"
#include "kernels/arith.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/scatter_reduce.h"

/* The walk over the index tensor's elements by rows of its last dim: for a row, the offsets
   (in elements) of its first element in each tensor (0: out or target, 1: index, 2: source),
   the tensor indexed along `dim` taking none for that dim (the index value adds it); step[k]:
   tensor k's stride along the last dim (none for the indexed tensor when dim is the last). */
typedef struct index_walk {
    int ndim, dim, skip; /* skip: the tensor indexed along dim (0 or 2) */
    int64_t shape[TL_MAX_DIMS];
    int64_t strides[3][TL_MAX_DIMS]; /* out-or-target, index, source */
    int64_t rows, width, step[3];
    const void *index;
    bool wide;     /* int64 index, else int32 */
    int64_t base;  /* the index's index_base: value v is position v - base */
    int64_t along; /* the indexed tensor's stride along dim */
    uint64_t size; /* ... and its size there */
} index_walk;

static void walk_plan(index_walk *w, const tl_tensor *index, const tl_tensor *const *t, int dim,
                      int skip) {
    w->ndim = index->ndim;
    w->dim = dim;
    w->skip = skip;
    w->width = index->ndim ? index->shape[index->ndim - 1] : 1;
    w->rows = 1;
    for (int d = 0; d < index->ndim; d++) {
        w->shape[d] = index->shape[d];
        for (int k = 0; k < 3; k++) w->strides[k][d] = t[k]->strides[d];
        if (d < index->ndim - 1) w->rows *= index->shape[d];
    }
    const int last = index->ndim - 1;
    for (int k = 0; k < 3; k++)
        w->step[k] = last < 0 || (k == skip && last == dim) ? 0 : w->strides[k][last];
    w->index = tl_data(index);
    w->wide = index->dtype == TL_I64;
    w->base = index->index_base;
    const tl_tensor *indexed = t[skip];
    w->along = indexed->ndim ? indexed->strides[dim] : 0;
    w->size = (uint64_t)(indexed->ndim ? indexed->shape[dim] : 1);
}

/* offsets of row r's first element in the three tensors */
static void walk_row(const index_walk *w, int64_t r, int64_t off[3]) {
    off[0] = off[1] = off[2] = 0;
    for (int d = w->ndim - 2; d >= 0; d--) {
        const int64_t i = r % w->shape[d];
        r /= w->shape[d];
        for (int k = 0; k < 3; k++)
            if (k != w->skip || d != w->dim) off[k] += i * w->strides[k][d];
    }
}

static inline int64_t index_value(const index_walk *w, int64_t offset) {
    return w->wide ? ((const int64_t *)w->index)[offset] : ((const int32_t *)w->index)[offset];
}
/* index value v as a position from 0 (wrapping: out of range stays out) */
static inline int64_t position_of(const index_walk *w, int64_t v) {
    return (int64_t)((uint64_t)v - (uint64_t)w->base);
}
/* the index value at offset as a position from 0 */
static inline int64_t index_at(const index_walk *w, int64_t offset) {
    return position_of(w, index_value(w, offset));
}

/* A kernel's work on elements j0 .. j1 - 1 of row r (off: the row's offsets); returns the
   first j whose index value is out of range, or -1 */
typedef int64_t (*row_fn)(const index_walk *w, int64_t r, const int64_t off[3], int64_t j0,
                          int64_t j1, const void *ctx);

/* Runs fn over the index's rows: rows over threads where fn only reads (gather) or where
   different rows reach different places (indexing along the last dim), else ranges of the
   last dim over threads, each taking every row (a place is reached from one column only, so
   its writes keep row-major order). Returns the first position (row-major) out of range,
   or -1. */
static int64_t for_each_row(const index_walk *w, bool reads_only, row_fn fn, const void *ctx) {
    int64_t first_bad = INT64_MAX;
    const bool parallel = w->rows * w->width > TL_CPU_PARALLEL_THRESHOLD;
    if (reads_only || w->dim == w->ndim - 1 || w->width == 1) {
#pragma omp parallel for schedule(static) if (parallel)
        for (int64_t r = 0; r < w->rows; r++) {
            int64_t off[3];
            walk_row(w, r, off);
            const int64_t j = fn(w, r, off, 0, w->width, ctx);
            if (j >= 0) {
#pragma omp critical(tl_cpu_index_bad)
                if (r * w->width + j < first_bad) first_bad = r * w->width + j;
            }
        }
    } else {
        const int64_t ranges = w->width < 64 ? w->width : 64;
#pragma omp parallel for schedule(static) if (parallel)
        for (int64_t c = 0; c < ranges; c++) {
            const int64_t j0 = w->width * c / ranges, j1 = w->width * (c + 1) / ranges;
            for (int64_t r = 0; r < w->rows; r++) {
                int64_t off[3];
                walk_row(w, r, off);
                const int64_t j = fn(w, r, off, j0, j1, ctx);
                if (j < 0) continue;
#pragma omp critical(tl_cpu_index_bad)
                if (r * w->width + j < first_bad) first_bad = r * w->width + j;
                break;
            }
        }
    }
    return first_bad == INT64_MAX ? -1 : first_bad;
}

/* ---- gather: out[p] = src[p with its dim-th coordinate replaced by index[p]] ------------------
   Each index value is checked as it is read: of the values out of range the first in
   row-major order is the error (args->index_range names it; out is the caller's to discard). */
typedef struct gather_call {
    char *out;
    const char *src;
} gather_call;

/* elements j0 .. j1 - 1 of a row, of size bytes (a constant where inlined) */
static inline int64_t gather_run(const index_walk *w, const int64_t off[3], int64_t j0, int64_t j1,
                                 const gather_call *c, int64_t size, bool wide) {
    /* the walk's fields in locals: the byte copies below may alias anything */
    const index_walk k = *w;
    char *o = c->out + off[0] * size;
    const char *s = c->src + off[2] * size;
    const int64_t *i64 = (const int64_t *)k.index + off[1];
    const int32_t *i32 = (const int32_t *)k.index + off[1];
    for (int64_t j = j0; j < j1; j++) {
        const int64_t raw = wide ? i64[j * k.step[1]] : (int64_t)i32[j * k.step[1]];
        const int64_t v = position_of(&k, raw);
        if ((uint64_t)v >= k.size) return j;
        memcpy(o + j * k.step[0] * size, s + (j * k.step[2] + v * k.along) * size, (size_t)size);
    }
    return -1;
}
#define GATHER_ROW(bytes)                                                                          \
    static int64_t gather_row_##bytes(const index_walk *w, int64_t r, const int64_t off[3],        \
                                      int64_t j0, int64_t j1, const void *ctx) {                   \
        (void)r; /* the loop made for each index type */                                           \
        return w->wide ? gather_run(w, off, j0, j1, ctx, bytes, true)                              \
                       : gather_run(w, off, j0, j1, ctx, bytes, false);                            \
    }
GATHER_ROW(1)
GATHER_ROW(2)
GATHER_ROW(4)
GATHER_ROW(8)

static tl_status range_error(const tl_op_args *args, const tl_tensor *index, const index_walk *w,
                             int64_t position) {
    if (!args->index_range) return tl_error(TL_ERR_INDEX, "gather: an index is out of range");
    int64_t off[3];
    walk_row(w, position / w->width, off);
    const int64_t value = index_value(w, off[1] + position % w->width * w->step[1]);
    return tl_index_range_error(args->index_range, index->shape, index->ndim, value, position);
}

/* index_select's rows: an index constant but along dim (stride 0 or size 1 elsewhere) and a
   source whose dims after dim are one contiguous run of `inner` elements: out row r (of
   rows = elements / inner, out being contiguous) is that run at the source's row at
   index[r % n along dim], one memcpy each. Returns whether it applied (*bad: as for_each_row). */
static bool gather_rows(const tl_tensor *out, const tl_tensor *src, const tl_tensor *index,
                        const index_walk *w, int64_t *bad) {
    const int dim = w->dim;
    int64_t inner = 1;
    for (int d = index->ndim - 1; d >= 0; d--) {
        if (d != dim && index->shape[d] != 1 && index->strides[d] != 0) return false;
        if (d <= dim) continue;
        if (index->shape[d] != src->shape[d] || (src->shape[d] != 1 && src->strides[d] != inner))
            return false;
        inner *= index->shape[d];
    }
    if (index->ndim == 0 || inner < 16) return false;
    const int64_t n = index->shape[dim], rows = tl_numel(index) / inner;
    const int64_t size = tl_dtype_size(src->dtype);
    char *o = tl_data(out);
    const char *s = tl_data(src);
    int64_t first_bad = INT64_MAX;
#pragma omp parallel for schedule(static) if (rows * inner > TL_CPU_PARALLEL_THRESHOLD)
    for (int64_t r = 0; r < rows; r++) {
        int64_t outer = r / n, from = 0;
        for (int d = dim - 1; d >= 0; d--) {
            from += outer % index->shape[d] * src->strides[d];
            outer /= index->shape[d];
        }
        const int64_t v = index_at(w, r % n * index->strides[dim]);
        if ((uint64_t)v >= w->size) {
#pragma omp critical(tl_cpu_index_bad)
            if (r * inner < first_bad) first_bad = r * inner;
            continue;
        }
        memcpy(o + r * inner * size, s + (from + v * w->along) * size, (size_t)(inner * size));
    }
    *bad = first_bad == INT64_MAX ? -1 : first_bad;
    return true;
}

static tl_status cpu_gather(tl_tensor *const *out, const tl_tensor *const *in,
                            const tl_op_args *args) {
    const tl_tensor *src = in[0], *index = in[1];
    if (tl_numel(index) == 0) return TL_OK;
    index_walk w;
    walk_plan(&w, index, (const tl_tensor *[]){out[0], index, src}, args->dim, 2);
    int64_t bad;
    if (!gather_rows(out[0], src, index, &w, &bad)) {
        const gather_call call = {tl_data(out[0]), tl_data(src)};
        const int64_t size = tl_dtype_size(src->dtype);
        const row_fn fn = size == 1   ? gather_row_1
                          : size == 2 ? gather_row_2
                          : size == 4 ? gather_row_4
                                      : gather_row_8;
        bad = for_each_row(&w, true, fn, &call);
    }
    return bad < 0 ? TL_OK : range_error(args, index, &w, bad);
}

/* ---- scatter_add: target[p with its dim-th coordinate replaced by index[p]] += src[p] ---------
   ---- scatter: ... = src[p] (bits moved); scatter_reduce (prod, amax, amin): ... = fold(...) --
   The index was checked before (nothing is written when a value is out of range); a value out of
   range is skipped. A value (index_fill, scatter of a number) is a src expanded to the index's
   shape (stride 0). kernels/scatter_reduce.h has the folds. */
typedef struct scatter_call {
    char *target;
    const char *src;
    int mode; /* scatter_reduce's fold */
} scatter_call;

#define SCATTER_ROW(name, T, UPDATE)                                                               \
    static inline int64_t name##_run(const index_walk *w, const int64_t off[3], int64_t j0,        \
                                     int64_t j1, const scatter_call *c, bool wide) {               \
        const index_walk k = *w; /* in locals: a byte-sized T may alias anything */                \
        T *t = (T *)c->target + off[0];                                                            \
        const T *s = (const T *)c->src + off[2];                                                   \
        const int64_t *i64 = (const int64_t *)k.index + off[1];                                    \
        const int32_t *i32 = (const int32_t *)k.index + off[1];                                    \
        for (int64_t j = j0; j < j1; j++) {                                                        \
            const int64_t raw = wide ? i64[j * k.step[1]] : (int64_t)i32[j * k.step[1]];           \
            const int64_t v = position_of(&k, raw);                                                \
            if ((uint64_t)v >= k.size) continue;                                                   \
            T *at = t + j * k.step[0] + v * k.along;                                               \
            const T x = s[j * k.step[2]];                                                          \
            UPDATE;                                                                                \
        }                                                                                          \
        return -1;                                                                                 \
    }                                                                                              \
    static int64_t name(const index_walk *w, int64_t r, const int64_t off[3], int64_t j0,          \
                        int64_t j1, const void *ctx) {                                             \
        (void)r; /* the loop made for each index type */                                           \
        return w->wide ? name##_run(w, off, j0, j1, ctx, true)                                     \
                       : name##_run(w, off, j0, j1, ctx, false);                                   \
    }

#define SCATTER_KERNEL(kernel, row)                                                                \
    static tl_status kernel(tl_tensor *const *out, const tl_tensor *const *in,                     \
                            const tl_op_args *args) {                                              \
        const tl_tensor *index = in[0], *src = in[1];                                              \
        if (tl_numel(index) == 0) return TL_OK;                                                    \
        index_walk w;                                                                              \
        walk_plan(&w, index, (const tl_tensor *[]){out[0], index, src}, args->dim, 0);             \
        const scatter_call call = {tl_data(out[0]), tl_data(src), (int)args->scalar[0]};           \
        for_each_row(&w, false, row, &call);                                                       \
        return TL_OK;                                                                              \
    }

/* scatter_add: integers wrap (the sum in uint64, stored back as its low bits) */
#define SCATTER_ADD(sfx, T, C, LOAD, STORE)                                                        \
    SCATTER_ROW(scatter_add_row_##sfx, T, *at = STORE((C)LOAD(*at) + (C)LOAD(x)))                  \
    SCATTER_KERNEL(cpu_scatter_add_##sfx, scatter_add_row_##sfx)
#define SAME(x)     (x)
#define WRAP_I32(x) ((int32_t)(uint32_t)(x))
#define WRAP_I64(x) tl_wrap_to_i64(x)
SCATTER_ADD(f32, float, float, SAME, SAME)
SCATTER_ADD(f64, double, double, SAME, SAME)
SCATTER_ADD(bf16, uint16_t, float, tl_bf16_load, tl_bf16_round)
SCATTER_ADD(f16, uint16_t, float, tl_f16_load, tl_f16_round)
SCATTER_ADD(i32, int32_t, uint64_t, SAME, WRAP_I32)
SCATTER_ADD(i64, int64_t, uint64_t, SAME, WRAP_I64)

/* scatter: elements move as bits, by size */
SCATTER_ROW(scatter_row_1, uint8_t, *at = x)
SCATTER_ROW(scatter_row_2, uint16_t, *at = x)
SCATTER_ROW(scatter_row_4, uint32_t, *at = x)
SCATTER_ROW(scatter_row_8, uint64_t, *at = x)
static tl_status cpu_scatter(tl_tensor *const *out, const tl_tensor *const *in,
                             const tl_op_args *args) {
    const tl_tensor *index = in[0], *src = in[1];
    if (tl_numel(index) == 0) return TL_OK;
    index_walk w;
    walk_plan(&w, index, (const tl_tensor *[]){out[0], index, src}, args->dim, 0);
    const scatter_call call = {tl_data(out[0]), tl_data(src), 0};
    const int64_t size = tl_dtype_size(out[0]->dtype);
    for_each_row(&w, false,
                 size == 1   ? scatter_row_1
                 : size == 2 ? scatter_row_2
                 : size == 4 ? scatter_row_4
                             : scatter_row_8,
                 &call);
    return TL_OK;
}

/* scatter_reduce: each fold is a variant of the kernel (args->scalar[0]: a tl_scatter_mode) */
static const tl_kernel_variant scatter_reduce_variants[] = {
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "prod", "reduce = \"prod\""),
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "amax", "reduce = \"amax\""),
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "amin", "reduce = \"amin\""),
};
#define SCATTER_REDUCE(sfx, dtype, T, LOAD, FOLD, STORE)                                           \
    SCATTER_ROW(scatter_reduce_row_##sfx, T, *at = STORE(FOLD(c->mode, LOAD(*at), LOAD(x))))       \
    static tl_status cpu_scatter_reduce_##sfx(tl_tensor *const *out, const tl_tensor *const *in,   \
                                              const tl_op_args *args) {                            \
        const int mode = (int)args->scalar[0];                                                     \
        tl_variant_ran(&scatter_reduce_variants[mode - TL_SCATTER_PROD], dtype);                   \
        const tl_tensor *index = in[0], *src = in[1];                                              \
        if (tl_numel(index) == 0) return TL_OK;                                                    \
        index_walk w;                                                                              \
        walk_plan(&w, index, (const tl_tensor *[]){out[0], index, src}, args->dim, 0);             \
        const scatter_call call = {tl_data(out[0]), tl_data(src), mode};                           \
        for_each_row(&w, false, scatter_reduce_row_##sfx, &call);                                  \
        return TL_OK;                                                                              \
    }
#define TO_I32(x) ((int32_t)(uint32_t)(uint64_t)(x))
SCATTER_REDUCE(f32, TL_F32, float, SAME, tl_scatter_fold_f, SAME)
SCATTER_REDUCE(f64, TL_F64, double, SAME, tl_scatter_fold_d, SAME)
SCATTER_REDUCE(bf16, TL_BF16, uint16_t, tl_bf16_load, tl_scatter_fold_f, tl_bf16_round)
SCATTER_REDUCE(f16, TL_F16, uint16_t, tl_f16_load, tl_scatter_fold_f, tl_f16_round)
SCATTER_REDUCE(i32, TL_I32, int32_t, (int64_t), tl_scatter_fold_i, TO_I32)
SCATTER_REDUCE(i64, TL_I64, int64_t, SAME, tl_scatter_fold_i, SAME)

static const tl_kernel_entry entries[] = {
    TL_KERNEL(gather, TL_DTYPES_ALL, tensors, cpu_gather),
    TL_KERNELS_FLOATING(scatter_add, tensors, cpu_scatter_add),
    TL_KERNELS_INTEGER(scatter_add, tensors, cpu_scatter_add),
    TL_KERNEL(scatter, TL_DTYPES_ALL, tensors, cpu_scatter),
    TL_KERNELS_FLOATING(scatter_reduce, tensors, cpu_scatter_reduce),
    TL_KERNELS_INTEGER(scatter_reduce, tensors, cpu_scatter_reduce),
};

TL_KERNEL_TABLE(tl_cpu_index_table, TL_DEVICE_CPU, entries);
TL_VARIANT_TABLE(tl_cpu_scatter_reduce_variants, TL_DEVICE_CPU, scatter_reduce_variants);
