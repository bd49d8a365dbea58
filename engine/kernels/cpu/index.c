/* CPU index kernels along a dim: gather (bytes moved, one version per element size), scatter
 * (bytes moved), scatter_add and scatter_reduce (in index order: deterministic, the last
 * duplicate's write wins). */
#include <string.h>

#include "core/half.h"
#include "kernels/arith.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"
#include "kernels/scatter_reduce.h"

/* The walk over the index tensor's elements by rows of its last dim: for a row, the offsets
   (in elements) of its first element in each tensor (0: out or target, 1: index, 2: source),
   the tensor indexed along `dim` taking none for that dim (the index value adds it). */
typedef struct index_walk {
    int ndim, dim, skip; /* skip: the tensor indexed along dim (0 or 2) */
    int64_t shape[TL_MAX_DIMS];
    int64_t strides[3][TL_MAX_DIMS]; /* out-or-target, index, source */
    int64_t rows, width;
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

static inline int64_t index_value(const tl_tensor *index, int64_t offset) {
    return index->dtype == TL_I64 ? ((const int64_t *)tl_data(index))[offset]
                                  : ((const int32_t *)tl_data(index))[offset];
}
/* the index value at offset as a position from 0 (the index counts from its index_base) */
static inline int64_t index_at(const tl_tensor *index, int64_t offset) {
    return (int64_t)((uint64_t)index_value(index, offset) - (uint64_t)index->index_base);
}

/* one element of size bytes (1, 2, 4 or 8) moved as bits */
static inline void move_element(char *dst, const char *src, int64_t size) {
    switch (size) {
    case 1:
        *dst = *src;
        break;
    case 2:
        memcpy(dst, src, 2);
        break;
    case 4:
        memcpy(dst, src, 4);
        break;
    default:
        memcpy(dst, src, 8);
        break;
    }
}

/* ---- gather: out[p] = src[p with its dim-th coordinate replaced by index[p]] ------------------
   Each index value is checked against args->index_range as it is read: of the values out of
   range the first in row-major order is the error (out is then the caller's to discard). */
static tl_status cpu_gather(tl_tensor *const *out, const tl_tensor *const *in,
                            const tl_op_args *args) {
    tl_tensor *o = out[0];
    const tl_tensor *src = in[0], *index = in[1];
    if (tl_numel(index) == 0) return TL_OK;
    index_walk w;
    walk_plan(&w, index, (const tl_tensor *[]){o, index, src}, args->dim, 2);
    const int64_t size = tl_dtype_size(src->dtype), along = src->ndim ? src->strides[w.dim] : 0;
    const uint64_t count = (uint64_t)(src->ndim ? src->shape[w.dim] : 1);
    const int last = w.ndim - 1;
    char *obase = tl_data(o);
    const char *sbase = tl_data(src);
    int64_t first_bad = INT64_MAX; /* the first position out of range */
#pragma omp parallel for schedule(static) if (w.rows * w.width > TL_CPU_PARALLEL_THRESHOLD)
    for (int64_t r = 0; r < w.rows; r++) {
        int64_t off[3];
        walk_row(&w, r, off);
        const int64_t so = last >= 0 ? w.strides[0][last] : 0,
                      si = last >= 0 ? w.strides[1][last] : 0;
        const int64_t ss = last >= 0 && last != w.dim ? w.strides[2][last] : 0;
        for (int64_t j = 0; j < w.width; j++) {
            const int64_t v = index_at(index, off[1] + j * si);
            if ((uint64_t)v >= count) {
#pragma omp critical(tl_cpu_gather_bad)
                if (r * w.width + j < first_bad) first_bad = r * w.width + j;
                break;
            }
            move_element(obase + (off[0] + j * so) * size,
                         sbase + (off[2] + j * ss + v * along) * size, size);
        }
    }
    if (first_bad == INT64_MAX) return TL_OK;
    if (!args->index_range) return tl_error(TL_ERR_INDEX, "gather: an index is out of range");
    int64_t off[3];
    walk_row(&w, first_bad / w.width, off);
    const int64_t si = last >= 0 ? w.strides[1][last] : 0;
    const int64_t value = index_value(index, off[1] + first_bad % w.width * si);
    return tl_index_range_error(args->index_range, index->shape, index->ndim, value, first_bad);
}

/* ---- scatter_add: target[p with its dim-th coordinate replaced by index[p]] += src[p] ----------
   In row-major order of the index, one element at a time: duplicates add in that order. */
#define SCATTER_ADD(sfx, T, C, LOAD, STORE)                                                        \
    static tl_status cpu_scatter_add_##sfx(tl_tensor *const *out, const tl_tensor *const *in,      \
                                           const tl_op_args *args) {                               \
        tl_tensor *target = out[0];                                                                \
        const tl_tensor *index = in[0], *src = in[1];                                              \
        if (tl_numel(index) == 0) return TL_OK;                                                    \
        index_walk w;                                                                              \
        walk_plan(&w, index, (const tl_tensor *[]){target, index, src}, args->dim, 0);             \
        const int64_t along = target->ndim ? target->strides[w.dim] : 0;                           \
        const int last = w.ndim - 1;                                                               \
        T *t = tl_data(target);                                                                    \
        const T *s = tl_data(src);                                                                 \
        for (int64_t r = 0; r < w.rows; r++) {                                                     \
            int64_t off[3];                                                                        \
            walk_row(&w, r, off);                                                                  \
            for (int64_t j = 0; j < w.width; j++) {                                                \
                int64_t jt = last >= 0 && last != w.dim ? j * w.strides[0][last] : 0;              \
                const int64_t ji = last >= 0 ? j * w.strides[1][last] : 0;                         \
                const int64_t js = last >= 0 ? j * w.strides[2][last] : 0;                         \
                jt += index_at(index, off[1] + ji) * along;                                        \
                T *at = t + off[0] + jt;                                                           \
                *at = STORE((C)LOAD(*at) + (C)LOAD(s[off[2] + js]));                               \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }
/* Element j of row r of the index (row-major order): its target (along dim at the index value)
   and source offsets, in elements. */
static inline void scatter_at(const index_walk *w, const tl_tensor *index, const int64_t off[3],
                              int64_t j, int64_t along, int64_t *at_target, int64_t *at_src) {
    const int last = w->ndim - 1;
    int64_t jt = last >= 0 && last != w->dim ? j * w->strides[0][last] : 0;
    const int64_t ji = last >= 0 ? j * w->strides[1][last] : 0;
    *at_src = off[2] + (last >= 0 ? j * w->strides[2][last] : 0);
    *at_target = off[0] + jt + index_at(index, off[1] + ji) * along;
}

/* ---- scatter: target[p with its dim-th coordinate replaced by index[p]] = src[p] --------------
   Elements move as bytes, in row-major order of the index: of duplicates the last one wins. A
   value (index_fill, scatter of a number) is a src expanded to the index's shape (stride 0). */
static tl_status cpu_scatter(tl_tensor *const *out, const tl_tensor *const *in,
                             const tl_op_args *args) {
    tl_tensor *target = out[0];
    const tl_tensor *index = in[0], *src = in[1];
    if (tl_numel(index) == 0) return TL_OK;
    index_walk w;
    walk_plan(&w, index, (const tl_tensor *[]){target, index, src}, args->dim, 0);
    const int64_t size = tl_dtype_size(target->dtype);
    const int64_t along = target->ndim ? target->strides[w.dim] : 0;
    char *t = tl_data(target);
    const char *s = tl_data(src);
    for (int64_t r = 0; r < w.rows; r++) {
        int64_t off[3];
        walk_row(&w, r, off);
        for (int64_t j = 0; j < w.width; j++) {
            int64_t at, from;
            scatter_at(&w, index, off, j, along, &at, &from);
            memcpy(t + at * size, s + from * size, (size_t)size);
        }
    }
    return TL_OK;
}

/* ---- scatter_reduce (prod, amax, amin): target[at index[p]] = fold(target[..], src[p]) ------
   In index order, one element at a time (deterministic); kernels/scatter_reduce.h has the folds.
   Each fold is a variant of the kernel. */
static const tl_kernel_variant scatter_reduce_variants[] = {
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "prod", "reduce = \"prod\""),
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "amax", "reduce = \"amax\""),
    TL_VARIANT(scatter_reduce, TL_DTYPES_NUMERIC, "amin", "reduce = \"amin\""),
};

#define SCATTER_REDUCE(sfx, dtype, T, LOAD, FOLD, STORE)                                           \
    static tl_status cpu_scatter_reduce_##sfx(tl_tensor *const *out, const tl_tensor *const *in,   \
                                              const tl_op_args *args) {                            \
        tl_tensor *target = out[0];                                                                \
        const tl_tensor *index = in[0], *src = in[1];                                              \
        const int mode = (int)args->scalar[0];                                                     \
        tl_variant_ran(&scatter_reduce_variants[mode - TL_SCATTER_PROD], dtype);                   \
        if (tl_numel(index) == 0) return TL_OK;                                                    \
        index_walk w;                                                                              \
        walk_plan(&w, index, (const tl_tensor *[]){target, index, src}, args->dim, 0);             \
        const int64_t along = target->ndim ? target->strides[w.dim] : 0;                           \
        T *t = tl_data(target);                                                                    \
        const T *s = tl_data(src);                                                                 \
        for (int64_t r = 0; r < w.rows; r++) {                                                     \
            int64_t off[3];                                                                        \
            walk_row(&w, r, off);                                                                  \
            for (int64_t j = 0; j < w.width; j++) {                                                \
                int64_t at, from;                                                                  \
                scatter_at(&w, index, off, j, along, &at, &from);                                  \
                t[at] = STORE(FOLD(mode, LOAD(t[at]), LOAD(s[from])));                             \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }
#define SAME(x) (x)
/* integers wrap: the sum in uint64, stored back as its low bits (two's complement) */
#define WRAP_I32(x) ((int32_t)(uint32_t)(x))
#define WRAP_I64(x) tl_wrap_to_i64(x)
SCATTER_ADD(f32, float, float, SAME, SAME)
SCATTER_ADD(f64, double, double, SAME, SAME)
SCATTER_ADD(bf16, uint16_t, float, tl_bf16_load, tl_bf16_round)
SCATTER_ADD(f16, uint16_t, float, tl_f16_load, tl_f16_round)
SCATTER_ADD(i32, int32_t, uint64_t, SAME, WRAP_I32)
SCATTER_ADD(i64, int64_t, uint64_t, SAME, WRAP_I64)
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
