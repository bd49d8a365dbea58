/* The CPU kernels' walks (see loop.h): the strided N-d iterator and the lines along one dim. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/loop.h"
#include "kernels/kernel.h"

/* The paths of the walks, reported for the kernel that runs them (kernels/kernel.h). One
   element takes no plan and is not reported (the report would cost a small op 4%): the inner
   loop runs once with zero strides, the strided path's code. */
enum { WALK_DENSE, WALK_BROADCAST, WALK_STRIDED, LINES_SIDE_BY_SIDE, LINES_ONE };
static const tl_kernel_variant walk_variants[] = {
    [WALK_DENSE] = TL_LOOP_VARIANT("elementwise", TL_DTYPES_ALL, "dense",
                                   "every tensor steps by one element along the innermost walked "
                                   "dim: the kernels' flat loops"),
    [WALK_BROADCAST] = TL_LOOP_VARIANT("elementwise", TL_DTYPES_ALL, "broadcast",
                                       "along the innermost walked dim the output steps by one "
                                       "element and some input by none (an expanded operand)"),
    [WALK_STRIDED] = TL_LOOP_VARIANT("elementwise", TL_DTYPES_ALL, "strided",
                                     "any other innermost strides (a transposed or sliced view)"),
    [LINES_SIDE_BY_SIDE] = TL_LOOP_VARIANT("lines", TL_DTYPES_ALL, "lanes",
                                           "the dim is not unit-stride in the first tensor: "
                                           "blocks of lines side by side, read across"),
    [LINES_ONE] = TL_LOOP_VARIANT("lines", TL_DTYPES_ALL, "line",
                                  "the dim is unit-stride in the first tensor (or the only one "
                                  "of size > 1): one line at a time, read in order"),
};
TL_VARIANT_TABLE(tl_cpu_loop_variants, TL_DEVICE_CPU, walk_variants);

/* tl_dtype_size and tl_data without calls: the small-op path counts nanoseconds */
static inline int64_t element_size(tl_dtype dtype) {
    static const int8_t sizes[TL_DTYPE_COUNT] = {
        [TL_F32] = 4, [TL_F64] = 8, [TL_BF16] = 2, [TL_F16] = 2,
        [TL_I32] = 4, [TL_I64] = 8, [TL_BOOL] = 1,
    };
    return sizes[dtype];
}

static inline char *data_of(const tl_tensor *t, int64_t size) {
    return (char *)t->storage->data + t->offset * size;
}

/* The walk: dims without the size-1 ones, ordered and merged, innermost last. */
typedef struct loop_plan {
    int count;
    int ndim;
    int64_t shape[TL_MAX_DIMS];
    int64_t strides[TL_MAX_DIMS][TL_CPU_LOOP_MAX_TENSORS]; /* bytes */
    char *base[TL_CPU_LOOP_MAX_TENSORS];
} loop_plan;

static void swap_dims(loop_plan *p, int a, int b) {
    int64_t size = p->shape[a];
    p->shape[a] = p->shape[b];
    p->shape[b] = size;
    for (int t = 0; t < p->count; t++) {
        int64_t stride = p->strides[a][t];
        p->strides[a][t] = p->strides[b][t];
        p->strides[b][t] = stride;
    }
}

/* True if dim `outer` has smaller strides than dim `inner` and so should be walked
   inside it: the first tensor with non-zero, different strides in both decides. */
static bool belongs_inside(const loop_plan *p, int outer, int inner) {
    for (int t = 0; t < p->count; t++) {
        int64_t so = p->strides[outer][t], si = p->strides[inner][t];
        if (so == 0 || si == 0 || so == si) continue;
        return so < si;
    }
    return false;
}

static void build_plan(loop_plan *p, int count, const tl_tensor *const *tensors) {
    const tl_tensor *out = tensors[0];
    p->count = count;
    p->ndim = 0;
    int64_t size[TL_CPU_LOOP_MAX_TENSORS];
    for (int t = 0; t < count; t++) {
        size[t] = element_size(tensors[t]->dtype);
        p->base[t] = data_of(tensors[t], size[t]);
    }
    for (int d = 0; d < out->ndim; d++) {
        if (out->shape[d] == 1) continue;
        p->shape[p->ndim] = out->shape[d];
        for (int t = 0; t < count; t++) p->strides[p->ndim][t] = tensors[t]->strides[d] * size[t];
        p->ndim++;
    }
    /* memory order (a stable insertion sort: nothing moves for dense outputs) */
    for (int i = 1; i < p->ndim; i++)
        for (int j = i; j > 0 && belongs_inside(p, j - 1, j); j--) swap_dims(p, j - 1, j);
    /* merge a dim into the one outside it when every tensor steps over both evenly */
    int n = 0;
    for (int d = 0; d < p->ndim; d++) {
        bool merge = n > 0;
        for (int t = 0; t < count && merge; t++)
            merge = p->strides[n - 1][t] == p->strides[d][t] * p->shape[d];
        if (merge) {
            p->shape[n - 1] *= p->shape[d];
            for (int t = 0; t < count; t++) p->strides[n - 1][t] = p->strides[d][t];
        } else {
            if (n != d) {
                p->shape[n] = p->shape[d];
                for (int t = 0; t < count; t++) p->strides[n][t] = p->strides[d][t];
            }
            n++;
        }
    }
    p->ndim = n;
}

/* The path the kernels' inner loops take: by the strides of the innermost walked dim. */
static int inner_walk(const loop_plan *p, const tl_tensor *const *tensors) {
    if (p->ndim == 0) return WALK_DENSE;
    const int64_t *inner = p->strides[p->ndim - 1];
    bool dense = true, broadcast = inner[0] == element_size(tensors[0]->dtype);
    for (int t = 0; t < p->count; t++) {
        const int64_t size = element_size(tensors[t]->dtype);
        dense = dense && inner[t] == size;
        if (t > 0) broadcast = broadcast && (inner[t] == size || inner[t] == 0);
    }
    return dense ? WALK_DENSE : broadcast ? WALK_BROADCAST : WALK_STRIDED;
}

/* Runs fn over the elements [begin, end) of the walk's row-major order. */
static void run_range(const loop_plan *p, int64_t begin, int64_t end, tl_cpu_loop_fn fn,
                      const void *ctx) {
    char *ptrs[TL_CPU_LOOP_MAX_TENSORS];
    int64_t inner_strides[TL_CPU_LOOP_MAX_TENSORS] = {0};
    int k = p->ndim;
    if (k == 0) { /* one element */
        for (int t = 0; t < p->count; t++) ptrs[t] = p->base[t];
        fn(ptrs, inner_strides, 1, ctx);
        return;
    }
    int64_t index[TL_MAX_DIMS];
    int64_t rest = begin;
    for (int d = k - 1; d >= 0; d--) {
        index[d] = rest % p->shape[d];
        rest /= p->shape[d];
    }
    for (int t = 0; t < p->count; t++) {
        ptrs[t] = p->base[t];
        for (int d = 0; d < k; d++) ptrs[t] += index[d] * p->strides[d][t];
        inner_strides[t] = p->strides[k - 1][t];
    }
    int64_t inner = p->shape[k - 1];
    for (int64_t pos = begin; pos < end;) {
        int64_t n = inner - index[k - 1];
        if (n > end - pos) n = end - pos;
        fn(ptrs, inner_strides, n, ctx);
        pos += n;
        if (pos >= end) break;
        /* back to the start of the row, then one step in the outer dims with carry */
        for (int t = 0; t < p->count; t++) ptrs[t] -= index[k - 1] * inner_strides[t];
        index[k - 1] = 0;
        for (int d = k - 2; d >= 0; d--) {
            for (int t = 0; t < p->count; t++) ptrs[t] += p->strides[d][t];
            if (++index[d] < p->shape[d]) break;
            for (int t = 0; t < p->count; t++) ptrs[t] -= p->shape[d] * p->strides[d][t];
            index[d] = 0;
        }
    }
}

static void run_parallel(const loop_plan *p, int64_t numel, tl_cpu_loop_fn fn, const void *ctx) {
    /* each thread gets at least a quarter of the threshold; chunks are multiples of 64 elements */
    int64_t chunks = numel / (TL_CPU_PARALLEL_THRESHOLD / 4);
    int threads = omp_get_max_threads();
    if (chunks > threads) chunks = threads;
    int64_t chunk = (numel + chunks - 1) / chunks;
    chunk = (chunk + 63) / 64 * 64;
#pragma omp parallel for schedule(static) num_threads((int)chunks)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t begin = c * chunk, end = begin + chunk < numel ? begin + chunk : numel;
        if (begin < end) run_range(p, begin, end, fn, ctx);
    }
}

void tl_cpu_for_each(int count, const tl_tensor *const *tensors, tl_cpu_loop_fn fn,
                     const void *ctx) {
    const tl_tensor *out = tensors[0];
    int64_t numel = 1;
    for (int d = 0; d < out->ndim; d++) numel *= out->shape[d];
    if (numel == 0) return;
    if (numel == 1) { /* the small ops of scripts: no plan */
        char *ptrs[TL_CPU_LOOP_MAX_TENSORS];
        int64_t strides[TL_CPU_LOOP_MAX_TENSORS] = {0};
        for (int t = 0; t < count; t++)
            ptrs[t] = data_of(tensors[t], element_size(tensors[t]->dtype));
        fn(ptrs, strides, 1, ctx);
        return;
    }
    loop_plan p;
    build_plan(&p, count, tensors);
    tl_loop_variant_ran(&walk_variants[inner_walk(&p, tensors)]);
    if (numel > TL_CPU_PARALLEL_THRESHOLD && !omp_in_parallel() && omp_get_max_threads() > 1)
        run_parallel(&p, numel, fn, ctx);
    else
        run_range(&p, 0, numel, fn, ctx);
}

/* ---- lines along one dim ------------------------------------------------------------------- */

/* The dim walked side by side: tensors[0]'s last dim other than dim with size > 1 and stride 1,
   or -1 when there is none. */
static int unit_lane(const tl_tensor *in, int dim) {
    for (int d = in->ndim - 1; d >= 0; d--)
        if (d != dim && in->shape[d] > 1 && in->strides[d] == 1) return d;
    return -1;
}

static int64_t stride_of(const tl_tensor *t, int d) {
    return t ? t->strides[d] : 0;
}

void tl_cpu_lines_plan(tl_cpu_lines *p, int count, const tl_tensor *const *tensors, int dim) {
    memset(p, 0, sizeof *p);
    const tl_tensor *first = tensors[0];
    p->count = count;
    p->len = first->ndim ? first->shape[dim] : 1;
    if (first->ndim)
        for (int t = 0; t < count; t++) p->step[t] = stride_of(tensors[t], dim);
    const int lane = p->len <= 1 || p->step[0] != 1 ? unit_lane(first, dim) : -1;
    p->lanes = lane >= 0 ? first->shape[lane] : 1;
    if (lane >= 0)
        for (int t = 0; t < count; t++) p->lane[t] = stride_of(tensors[t], lane);
    p->outer = 1;
    for (int d = 0; d < first->ndim; d++) {
        if (d == dim || d == lane || first->shape[d] == 1) continue;
        const int i = p->nouter++;
        p->outer_shape[i] = first->shape[d];
        for (int t = 0; t < count; t++) p->outer_stride[t][i] = stride_of(tensors[t], d);
        p->outer *= first->shape[d];
    }
    p->blocks = (p->lanes + TL_CPU_LANE_BLOCK - 1) / TL_CPU_LANE_BLOCK;
    p->items = p->outer * p->blocks;
    for (int t = 0; t < count; t++) {
        const tl_tensor *x = tensors[t];
        if (!x) continue;
        p->size[t] = element_size(x->dtype);
        int64_t numel = 1;
        for (int d = 0; d < x->ndim; d++) numel *= x->shape[d];
        if (numel > 0)
            p->data[t] = data_of(x, p->size[t]); /* an empty tensor's offset may be any */
    }
}

int64_t tl_cpu_lines_locate(const tl_cpu_lines *p, int64_t item, char **at) {
    int64_t position = item / p->blocks, first_lane = (item % p->blocks) * TL_CPU_LANE_BLOCK;
    int64_t offset[TL_CPU_LINES_MAX_TENSORS];
    for (int t = 0; t < p->count; t++) offset[t] = first_lane * p->lane[t];
    for (int d = p->nouter - 1; d >= 0; d--) {
        const int64_t i = position % p->outer_shape[d];
        position /= p->outer_shape[d];
        for (int t = 0; t < p->count; t++) offset[t] += i * p->outer_stride[t][d];
    }
    for (int t = 0; t < p->count; t++)
        at[t] = p->data[t] ? p->data[t] + offset[t] * p->size[t] : NULL;
    const int64_t left = p->lanes - first_lane;
    return left < TL_CPU_LANE_BLOCK ? left : TL_CPU_LANE_BLOCK;
}

void tl_cpu_lines_for_each(const tl_cpu_lines *p, int64_t parallel_threshold, tl_cpu_lines_fn fn,
                           const void *ctx) {
    const bool parallel = p->items > 1 && p->outer * p->lanes * p->len > parallel_threshold;
    tl_loop_variant_ran(&walk_variants[p->lanes > 1 ? LINES_SIDE_BY_SIDE : LINES_ONE]);
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t item = 0; item < p->items; item++) {
        char *at[TL_CPU_LINES_MAX_TENSORS];
        const int64_t lanes = tl_cpu_lines_locate(p, item, at);
        fn(p, at, lanes, ctx);
    }
}

/* ---- chunks of many tensors ---------------------------------------------------------------- */

tl_status tl_cpu_chunks_plan(tl_cpu_chunks *chunks, tl_tensor *const *tensors, int64_t n,
                             const char *op) {
    *chunks = (tl_cpu_chunks){.tensors = tensors, .n = n};
    chunks->first = malloc(sizeof *chunks->first * (size_t)(n + 1));
    if (!chunks->first)
        return tl_error(TL_ERR_MEMORY, "%s: out of memory (%lld tensors)", op, (long long)n);
    chunks->first[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t numel = tl_numel(tensors[i]);
        chunks->first[i + 1] = chunks->first[i] + (numel + TL_CPU_CHUNK - 1) / TL_CPU_CHUNK;
        chunks->elements += numel;
    }
    chunks->count = chunks->first[n];
    return TL_OK;
}

/* The tensor whose chunks include chunk c: the last i with first[i] <= c (a binary search; empty
   tensors have no chunk). */
static int64_t owner_of(const tl_cpu_chunks *chunks, int64_t c) {
    int64_t lo = 0, hi = chunks->n; /* first[lo] <= c < first[hi] */
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (chunks->first[mid] <= c)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int64_t tl_cpu_chunk_range(const tl_cpu_chunks *chunks, int64_t c, int64_t *lo, int64_t *hi) {
    const int64_t i = owner_of(chunks, c), numel = tl_numel(chunks->tensors[i]);
    *lo = (c - chunks->first[i]) * TL_CPU_CHUNK;
    *hi = *lo + TL_CPU_CHUNK < numel ? *lo + TL_CPU_CHUNK : numel;
    return i;
}

void tl_cpu_chunks_free(tl_cpu_chunks *chunks) {
    free(chunks->first);
    chunks->first = NULL;
}
