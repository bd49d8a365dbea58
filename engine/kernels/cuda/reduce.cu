/* CUDA reductions along one dim and their table, the dtypes of cpu/reduce.c: the value
   reductions of the REDUCE_OP rows (sum, mean, ...: their math in kernels/reduction.h, float64
   inputs in double, float32, bfloat16 and float16 in float but for counts, integer and bool
   inputs exactly in int64, sums wrapping as on the CPU), and
   max/min (argmax/argmin) with NaN propagation and the first index of the extreme
   (cpu/reduce.c's results); a fixed combination order, so every result is deterministic. */
#include <type_traits>

#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/reduction.h"

#define REDUCE_THREADS 256
#define COLS_X         32 /* outputs per block of the column kernel */
#define COLS_Y         8  /* slices of the reduced dim per block of the column kernel */
#define MAX_CHUNKS     1024

enum { TL_CUDA_REDUCE_FOLD, TL_CUDA_REDUCE_MAX, TL_CUDA_REDUCE_MIN };

/* out (may be NULL: argmax/argmin) and idx (int64, may be NULL: sum/mean) at position j get the
   reduction of in[pos(j) + r * step], r < len. pos's tensors: 0 in, 1 out, 2 idx. */
typedef struct tl_cuda_reduce {
    tl_cuda_where at;
    int kind;      /* TL_CUDA_REDUCE_* */
    int dtype;     /* the input's TL_CUDA_* */
    int out_dtype; /* the output's TL_CUDA_* (a value reduction's row rule) */
    int fold;      /* a value reduction: its row, FOLD_ROW_<name> */
    double param;  /* its number */
    const void *in;
    void *out;
    int64_t *idx;
    int64_t len, step;
    tl_cuda_positions pos;
} tl_cuda_reduce;

/* ---- value reductions: the REDUCE_OP rows' math (kernels/reduction.h) -------------------- */
/* A result stored in the output's dtype (the row's output rule). */
__device__ __forceinline__ void store_as(void *out, int64_t off, int dtype, double v) {
    switch (dtype) {
    case TL_CUDA_F32:
        ((float *)out)[off] = (float)v;
        break;
    case TL_CUDA_F64:
        ((double *)out)[off] = v;
        break;
    case TL_CUDA_BF16:
        ((uint16_t *)out)[off] = tl_elem<TL_CUDA_BF16>::from_wide(v);
        break;
    case TL_CUDA_F16:
        ((uint16_t *)out)[off] = tl_elem<TL_CUDA_F16>::from_wide(v);
        break;
    case TL_CUDA_I32:
        ((int32_t *)out)[off] = (int32_t)v;
        break;
    case TL_CUDA_I64:
        ((int64_t *)out)[off] = (int64_t)v;
        break;
    default:
        ((uint8_t *)out)[off] = v != 0;
        break;
    }
}
__device__ __forceinline__ void store_as(void *out, int64_t off, int dtype, int64_t v) {
    switch (dtype) {
    case TL_CUDA_I32:
        ((int32_t *)out)[off] = (int32_t)v;
        break;
    case TL_CUDA_I64:
        ((int64_t *)out)[off] = v;
        break;
    case TL_CUDA_BOOL:
        ((uint8_t *)out)[off] = v != 0;
        break;
    default:
        store_as(out, off, dtype, (double)v);
        break;
    }
}

/* Each row's functions as a type (floating ones over tl_fold or tl_ffold; integer ones too for
   dtypes ALL), whether float32, bfloat16 and float16 fold in float (every row but the counts,
   output LONG, which stay exact in double), and its index FOLD_ROW_<name>. */
enum { FOLD_OUT_SAME, FOLD_OUT_WIDE, FOLD_OUT_BOOL, FOLD_OUT_LONG };
#define FOLD_FLOATING_FUNCTIONS(name, output)                                                      \
    static constexpr bool in_float = FOLD_OUT_##output != FOLD_OUT_LONG;                           \
    template <class S> __device__ static void init(S *s, double q) {                               \
        tl_fold_##name##_init(s, q);                                                               \
    }                                                                                              \
    template <class S, class R> __device__ static void step(S *s, R x, double q) {                 \
        tl_fold_##name##_step(s, x, q);                                                            \
    }                                                                                              \
    template <class S> __device__ static void merge(S *s, const S *t, double q) {                  \
        tl_fold_##name##_merge(s, t, q);                                                           \
    }                                                                                              \
    template <class S> __device__ static double finish(const S *s, int64_t n, double q) {          \
        return tl_fold_##name##_finish(s, n, q);                                                   \
    }                                                                                              \
    template <class S, class R> __device__ static void run(S *s, const R *xs, int k, double q) {   \
        tl_fold_##name##_run(s, xs, k, q);                                                         \
    }
#define FOLD_FUNCTIONS_FLOATING(name, output)                                                      \
    struct fold_##name {                                                                           \
        FOLD_FLOATING_FUNCTIONS(name, output)                                                      \
    };
#define FOLD_FUNCTIONS_ALL(name, output)                                                           \
    struct fold_##name {                                                                           \
        FOLD_FLOATING_FUNCTIONS(name, output)                                                      \
        __device__ static void init(tl_ifold *s, double) { tl_ifold_##name##_init(s); }            \
        __device__ static void step(tl_ifold *s, int64_t x, double) {                              \
            tl_ifold_##name##_step(s, x);                                                          \
        }                                                                                          \
        __device__ static void merge(tl_ifold *s, const tl_ifold *t, double) {                     \
            tl_ifold_##name##_merge(s, t);                                                         \
        }                                                                                          \
        __device__ static int64_t finish(const tl_ifold *s, int64_t n, double) {                   \
            return tl_ifold_##name##_finish(s, n);                                                 \
        }                                                                                          \
    };
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    FOLD_FUNCTIONS_##dtypes(name, output)
#include "tlua/ops.def"
enum {
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    FOLD_ROW_##name,
#include "tlua/ops.def"
};

/* A value reduction as an op of the launch (below): float64 inputs fold in tl_fold, float32,
   bfloat16 and float16 ones in tl_ffold where F folds them in float (else tl_fold), integer and
   bool ones in tl_ifold (F's functions for each); the result goes out in the output's dtype.
   add folds one element, add_vectors U vectors of W elements as one run (F::run). */
template <int D, class F> struct fold_op {
    typedef typename tl_elem<D>::T T;
    typedef typename tl_elem<D>::K K; /* float, double or int64_t */
    static constexpr bool exact = std::is_integral<K>::value;
    static constexpr bool in_float = std::is_same<K, float>::value && F::in_float;
    typedef typename std::conditional<in_float, float, double>::type R;
    typedef typename std::conditional<in_float, tl_ffold, tl_fold>::type SR;
    typedef typename std::conditional<exact, tl_ifold, SR>::type S;
    typedef typename std::conditional<exact, int64_t, R>::type X;
    double q;
    int64_t len;
    int out_dtype;
    __device__ S identity() const {
        S s;
        F::init(&s, q);
        return s;
    }
    __device__ S add(S s, T x, int64_t) const {
        F::step(&s, (X)tl_elem<D>::value(x), q);
        return s;
    }
    template <int U, int W>
    __device__ S add_vectors(S s, const T (&x)[U * W], int64_t, int64_t) const {
        X v[U * W];
#pragma unroll
        for (int i = 0; i < U * W; i++) v[i] = (X)tl_elem<D>::value(x[i]);
        if constexpr (exact) {
#pragma unroll
            for (int i = 0; i < U * W; i++) F::step(&s, v[i], q);
        } else {
            F::run(&s, v, U * W, q);
        }
        return s;
    }
    __device__ S operator()(S a, S b) const {
        F::merge(&a, &b, q);
        return a;
    }
    __device__ void finish(S s, void *out, int64_t *, int64_t out_off, int64_t) const {
        store_as(out, out_off, out_dtype, F::finish(&s, len, q));
    }
};

template <typename V> struct extreme {
    V value;
    int64_t index; /* -1: no element yet */
};

/* The better of two candidates as the CPU's sequential scan decides: a NaN beats any number
   and the first NaN stays, otherwise the larger (smaller) value, the first index on ties.
   Values compare in the compute type (float for float32, bfloat16, float16: exact). */
template <int D> struct extreme_op {
    typedef typename tl_elem<D>::T T;
    typedef typename tl_elem<D>::K V;
    typedef extreme<V> S;
    bool is_max;
    __device__ S identity() const { return S{V(0), -1}; }
    __device__ S make(T x, int64_t r) const { return S{(V)tl_elem<D>::value(x), r}; }
    __device__ S add(S s, T x, int64_t r) const { return (*this)(s, make(x, r)); }
    /* vector u's element j is element r + u * jump + j of the line */
    template <int U, int W>
    __device__ S add_vectors(S s, const T (&x)[U * W], int64_t r, int64_t jump) const {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < W; j++) s = add(s, x[u * W + j], r + u * jump + j);
        return s;
    }
    __device__ S operator()(S a, S b) const {
        if (b.index < 0) return a;
        if (a.index < 0) return b;
        const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
        if (a_nan || b_nan) {
            if (a_nan && b_nan) return b.index < a.index ? b : a;
            return a_nan ? a : b;
        }
        if (is_max ? b.value > a.value : b.value < a.value) return b;
        if (is_max ? a.value > b.value : a.value < b.value) return a;
        return b.index < a.index ? b : a;
    }
    __device__ void finish(S s, void *out, int64_t *idx, int64_t out_off, int64_t idx_off) const {
        if (out) ((T *)out)[out_off] = tl_elem<D>::from_wide(s.value);
        if (idx) idx[idx_off] = s.index;
    }
};

/* s merged with p's elements r, r + stride, ... below r1 (step apart), in that order, four
   loads in flight; the address moves by adding (no multiply per element). */
template <class Op>
__device__ __forceinline__ typename Op::S accumulate(const Op &op, typename Op::S s,
                                                     const typename Op::T *p, int64_t step,
                                                     int64_t r, int64_t r1, int64_t stride) {
    const int64_t jump = stride * step;
    const typename Op::T *x = p + r * step;
    for (; r + 3 * stride < r1; r += 4 * stride, x += 4 * jump) {
        const typename Op::T x0 = x[0], x1 = x[jump], x2 = x[2 * jump], x3 = x[3 * jump];
        s = op.add(s, x0, r);
        s = op.add(s, x1, r + stride);
        s = op.add(s, x2, r + 2 * stride);
        s = op.add(s, x3, r + 3 * stride);
    }
    for (; r < r1; r += stride, x += jump) s = op.add(s, *x, r);
    return s;
}

/* The same for lane `lane` of `group` (>= 32) over the elements [r0, r1) of a unit-stride line p:
   the first ones, up to a 16-byte boundary, one per lane; then vectors of 16 bytes (W elements),
   vector v to lane v % group, U of them in flight and folded as one run; then the last (fewer
   than W) one per lane. A fixed order for a given shape and alignment. */
template <class Op>
__device__ __forceinline__ typename Op::S accumulate_vectors(const Op &op, typename Op::S s,
                                                             const typename Op::T *p, int64_t r0,
                                                             int64_t r1, int lane, int group) {
    typedef typename Op::T T;
    constexpr int W = 16 / sizeof(T), U = 4;
    const int misaligned = (int)((uintptr_t)(p + r0) % 16 / sizeof(T));
    int64_t head = misaligned ? W - misaligned : 0;
    if (head > r1 - r0) head = r1 - r0;
    if (lane < head) s = op.add(s, p[r0 + lane], r0 + lane);
    const int64_t first = r0 + head, vectors = (r1 - first) / W, jump = (int64_t)group * W;
    const uint4 *v = (const uint4 *)(p + first);
    int64_t i = lane;
    for (; i + (U - 1) * group < vectors; i += U * group) {
        T x[U * W];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint4 w = v[i + u * group];
            memcpy(x + u * W, &w, sizeof w);
        }
        s = op.template add_vectors<U, W>(s, x, first + i * W, jump);
    }
    for (; i < vectors; i += group) {
        T x[W];
        const uint4 w = v[i];
        memcpy(x, &w, sizeof w);
        s = op.template add_vectors<1, W>(s, x, first + i * W, 0);
    }
    const int64_t r = first + vectors * W + lane;
    if (r < r1) s = op.add(s, p[r], r);
    return s;
}

/* Groups of `group` threads (32 or the block) reduce one (position, chunk) item each: the
   reduced dim is read along the group's threads, in 16-byte vectors where it is unit-stride. */
template <class Op>
__global__ void __launch_bounds__(REDUCE_THREADS)
    reduce_rows(Op op, const typename Op::T *in, void *out, int64_t *idx,
                const __grid_constant__ tl_cuda_positions pos, int64_t len, int64_t step, int group,
                int64_t chunks, int64_t chunk_len, typename Op::S *partials) {
    typedef typename Op::S S;
    __shared__ S smem[32];
    const int lane = (int)threadIdx.x % group, per_block = (int)blockDim.x / group;
    const int64_t items = pos.count * chunks;
    for (int64_t first = (int64_t)blockIdx.x * per_block; first < items;
         first += (int64_t)gridDim.x * per_block) {
        const int64_t item = first + (int)threadIdx.x / group;
        const bool valid = item < items;
        S s = op.identity();
        int64_t off[3] = {0, 0, 0};
        if (valid) {
            const int64_t o = item / chunks, r0 = (item - o * chunks) * chunk_len;
            const int64_t r1 = r0 + chunk_len < len ? r0 + chunk_len : len;
            tl_position_offsets<3>(pos, o, off);
            const typename Op::T *p = in + off[0];
            s = step == 1 ? accumulate_vectors(op, s, p, r0, r1, lane, group)
                          : accumulate(op, s, p, step, r0 + lane, r1, group);
        }
        s = tl_group_reduce(s, op, op.identity(), smem, group);
        if (valid && lane == 0) {
            if (chunks == 1)
                op.finish(s, out, idx, off[1], off[2]);
            else
                partials[item] = s;
        }
    }
}

/* Threads x of a block take COLS_X consecutive positions (coalesced where the positions are
   unit-stride), threads y slices of the reduced dim, merged in y order. */
template <class Op>
__global__ void __launch_bounds__(COLS_X *COLS_Y)
    reduce_cols(Op op, const typename Op::T *in, void *out, int64_t *idx,
                const __grid_constant__ tl_cuda_positions pos, int64_t len, int64_t step,
                int64_t chunks, int64_t chunk_len, typename Op::S *partials) {
    typedef typename Op::S S;
    __shared__ S smem[COLS_Y][COLS_X];
    const int64_t tiles = (pos.count + COLS_X - 1) / COLS_X;
    for (int64_t w = blockIdx.x; w < tiles * chunks; w += gridDim.x) {
        const int64_t tile = w / chunks, c = w - tile * chunks;
        const int64_t o = tile * COLS_X + threadIdx.x;
        const bool valid = o < pos.count;
        S s = op.identity();
        int64_t off[3] = {0, 0, 0};
        if (valid) {
            const int64_t r0 = c * chunk_len;
            const int64_t r1 = r0 + chunk_len < len ? r0 + chunk_len : len;
            tl_position_offsets<3>(pos, o, off);
            const typename Op::T *p = in + off[0];
            s = accumulate(op, s, p, step, r0 + threadIdx.y, r1, (int64_t)COLS_Y);
        }
        smem[threadIdx.y][threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.y == 0 && valid) {
            for (int y = 1; y < COLS_Y; y++) s = op(s, smem[y][threadIdx.x]);
            if (chunks == 1)
                op.finish(s, out, idx, off[1], off[2]);
            else
                partials[o * chunks + c] = s;
        }
        __syncthreads();
    }
}

/* A block per position merges its chunks (each thread a strided subset in order, then a
   fixed tree) and writes the result. */
template <class Op>
__global__ void __launch_bounds__(REDUCE_THREADS)
    reduce_finish(Op op, void *out, int64_t *idx, const __grid_constant__ tl_cuda_positions pos,
                  int64_t chunks, const typename Op::S *partials) {
    typedef typename Op::S S;
    __shared__ S smem[32];
    for (int64_t o = blockIdx.x; o < pos.count; o += gridDim.x) {
        S s = op.identity();
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x)
            s = op(s, partials[o * chunks + c]);
        s = tl_block_reduce(s, op, op.identity(), smem);
        if (threadIdx.x == 0) {
            int64_t off[3];
            tl_position_offsets<3>(pos, o, off);
            op.finish(s, out, idx, off[1], off[2]);
        }
    }
}

static int64_t clamp_chunks(int64_t want, int64_t most) {
    if (want > most) want = most;
    if (want > MAX_CHUNKS) want = MAX_CHUNKS;
    return want > 1 ? want : 1;
}

/* The launch's paths, shared by every reduction kernel (kernels/kernel.h's loop variants). */
enum {
    REDUCE_ROWS_WARP,
    REDUCE_ROWS_BLOCK,
    REDUCE_ROWS_SPLIT,
    REDUCE_COLS,
    REDUCE_COLS_SPLIT,
    REDUCE_ROWS_VECTOR
};
static const tl_kernel_variant reduce_variants[] = {
    TL_LOOP_VARIANT("reduce", TL_DTYPES_ALL, "rows_warp",
                    "the dim unit-stride (or the positions not): a warp per line"),
    TL_LOOP_VARIANT("reduce", TL_DTYPES_ALL, "rows_block",
                    "lines of >= 1024 with fewer than 8 per SM (or of >= 32768): a block per "
                    "line"),
    TL_LOOP_VARIANT("reduce", TL_DTYPES_ALL, "rows_split",
                    "block lines of >= 16384, fewer than 2 per SM: chunks of each line, then a "
                    "finishing pass"),
    TL_LOOP_VARIANT("reduce", TL_DTYPES_ALL, "cols",
                    "the dim strided, the positions unit-stride: tiles of neighbouring lines"),
    TL_LOOP_VARIANT("reduce", TL_DTYPES_ALL, "cols_split",
                    "column tiles fewer than 2 per SM, lines of >= 1024: chunks of each line, then "
                    "a finishing pass"),
    TL_LOOP_VARIANT("reduce", TL_DTYPES_ALL, "rows_vector",
                    "rows of a unit-stride dim (with rows_warp, rows_block or rows_split): "
                    "16-byte loads, the elements before a 16-byte boundary and after the last "
                    "whole vector one at a time"),
};

template <class Op> static tl_status launch_op(const tl_cuda_reduce *r, Op op) {
    typedef typename Op::S S;
    const tl_cuda_positions &pos = r->pos;
    const int64_t count = pos.count, len = r->len, sm = r->at.sm_count;
    const int64_t inner = pos.ndim ? pos.strides[0][pos.ndim - 1] : 0;
    const typename Op::T *in = (const typename Op::T *)r->in;
    /* rows: the reduced dim is unit-stride, or the positions are not (nothing to coalesce) */
    const bool rows = len > 1 && (r->step == 1 || inner != 1 || count == 1);
    int group = 32;
    int64_t chunks = 1;
    if (rows) {
        /* a block per row for long rows when there are few rows (or very long ones), else a
           warp per row */
        if (len >= 1024 && (count < 8 * sm || len >= 32768)) group = REDUCE_THREADS;
        if (group == REDUCE_THREADS && count < 2 * sm && len >= 16384)
            chunks = clamp_chunks(tl_ceil_div(8 * sm, count), tl_ceil_div(len, 4096));
    } else {
        int64_t tiles = tl_ceil_div(count, COLS_X);
        if (tiles < 2 * sm && len >= 1024)
            chunks = clamp_chunks(tl_ceil_div(4 * sm, tiles), tl_ceil_div(len, 512));
    }
    const int64_t chunk_len = chunks > 1 ? tl_ceil_div(len, chunks) : len;
    if (chunks > 1) chunks = tl_ceil_div(len, chunk_len); /* no empty chunk */
    tl_cuda_scratch scratch;
    S *partials = nullptr;
    if (chunks > 1) {
        TL_TRY(scratch.get(r->at, (size_t)(count * chunks) * sizeof(S)));
        partials = (S *)scratch.ptr;
    }
    cudaStream_t stream = r->at.stream;
    tl_loop_variant_ran(&reduce_variants[!rows ? (chunks > 1 ? REDUCE_COLS_SPLIT : REDUCE_COLS)
                                         : chunks > 1              ? REDUCE_ROWS_SPLIT
                                         : group == REDUCE_THREADS ? REDUCE_ROWS_BLOCK
                                                                   : REDUCE_ROWS_WARP]);
    if (rows && r->step == 1) tl_loop_variant_ran(&reduce_variants[REDUCE_ROWS_VECTOR]);
    if (rows) {
        const int per_block = REDUCE_THREADS / group;
        unsigned grid = tl_cuda_grid(tl_ceil_div(count * chunks, per_block), r->at.sm_count);
        reduce_rows<Op><<<grid, REDUCE_THREADS, 0, stream>>>(
            op, in, r->out, r->idx, pos, len, r->step, group, chunks, chunk_len, partials);
    } else {
        unsigned grid = tl_cuda_grid(tl_ceil_div(count, COLS_X) * chunks, r->at.sm_count);
        reduce_cols<Op><<<grid, dim3(COLS_X, COLS_Y), 0, stream>>>(
            op, in, r->out, r->idx, pos, len, r->step, chunks, chunk_len, partials);
    }
    TL_TRY(tl_cuda_check_launch(r->at.op));
    if (chunks > 1) {
        unsigned grid = tl_cuda_grid(count, r->at.sm_count);
        reduce_finish<Op>
            <<<grid, REDUCE_THREADS, 0, stream>>>(op, r->out, r->idx, pos, chunks, partials);
        TL_TRY(tl_cuda_check_launch(r->at.op));
    }
    return TL_OK;
}

/* A value reduction: its row's functions over the dtypes its row allows. */
template <class F, unsigned DTYPES> static tl_status launch_fold_row(const tl_cuda_reduce *r) {
    return tl_cuda_dispatch<DTYPES>(r->dtype, r->at.op, [&](auto e) -> tl_status {
        return launch_op(r, fold_op<decltype(e)::dtype, F>{r->param, r->len, r->out_dtype});
    });
}
static const unsigned FOLD_DTYPES_ALL = TL_CUDA_ALL, FOLD_DTYPES_FLOATING = TL_CUDA_FLOATING;
static tl_status launch_fold(const tl_cuda_reduce *r) {
    switch (r->fold) {
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    case FOLD_ROW_##name:                                                                          \
        return launch_fold_row<fold_##name, FOLD_DTYPES_##dtypes>(r);
#include "tlua/ops.def"
    default:
        return tl_error(TL_ERR_RUNTIME, "%s: no value reduction %d", r->at.op, r->fold);
    }
}

static tl_status launch_reduce(const tl_cuda_reduce *r) {
    if (r->kind == TL_CUDA_REDUCE_FOLD) return launch_fold(r);
    return tl_cuda_dispatch<TL_CUDA_ALL>(r->dtype, r->at.op, [&](auto e) -> tl_status {
        return launch_op(r, extreme_op<decltype(e)::dtype>{r->kind == TL_CUDA_REDUCE_MAX});
    });
}

/* ---- the table -------------------------------------------------------------------------- */
/* The reduction of kind over dim of in into out (its dtype checked against out_dtype) and/or
   indices. */
static tl_status run_reduce(const char *op, int kind, tl_dtype out_dtype, tl_tensor *out,
                            tl_tensor *indices, const tl_tensor *in, int dim, int fold = -1,
                            double param = 0) {
    if (out && out->dtype != out_dtype)
        return tl_error(TL_ERR_DTYPE, "%s: kernel expected a %s output, got %s", op,
                        tl_dtype_name(out_dtype), tl_dtype_name(out->dtype));
    bool extreme = kind == TL_CUDA_REDUCE_MAX || kind == TL_CUDA_REDUCE_MIN;
    if (extreme && in->ndim > 0 && in->shape[dim] == 0)
        return tl_error(TL_ERR_SHAPE, "%s: cannot reduce a dim of size 0", op);
    tl_cuda_reduce r{};
    r.kind = kind;
    r.dtype = tl_cuda_dtype_of(in);
    r.out_dtype = out ? tl_cuda_dtype_of(out) : 0;
    r.fold = fold;
    r.param = param;
    r.in = tl_data(in);
    r.out = tl_cuda_data(out);
    r.idx = tl_cuda_data<int64_t>(indices);
    r.len = in->ndim ? in->shape[dim] : 1;
    r.step = in->ndim ? in->strides[dim] : 0;
    tl_cuda_positions_of(&r.pos, in, in->ndim ? dim : -1, {in, out, indices});
    if (r.pos.count == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(in, op, &r.at));
    return launch_reduce(&r);
}

/* One kernel per value reduction for its dtypes (launch_fold dispatches on the row and the
   dtype); the op layer allocates out in the row's output dtype. */
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    static tl_status cuda_##name(tl_tensor *out, const tl_tensor *in, int dim,                     \
                                 const tl_op_args *args) {                                         \
        return run_reduce(#name, TL_CUDA_REDUCE_FOLD, out->dtype, out, NULL, in, dim,              \
                          FOLD_ROW_##name, args ? args->scalar[0] : 0);                            \
    }
#include "tlua/ops.def"

/* One kernel per op for every dtype (launch_reduce dispatches on it). */
static tl_status cuda_max(tl_tensor *out, tl_tensor *indices, const tl_tensor *in, int dim) {
    return run_reduce("max", TL_CUDA_REDUCE_MAX, in->dtype, out, indices, in, dim);
}
static tl_status cuda_min(tl_tensor *out, tl_tensor *indices, const tl_tensor *in, int dim) {
    return run_reduce("min", TL_CUDA_REDUCE_MIN, in->dtype, out, indices, in, dim);
}

/* argmax/argmin: the max/min kernels, which set only the indices when out is NULL */
static const tl_kernel_entry entries[] = {
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    TL_KERNEL(name, TL_DTYPES_##dtypes, fold, cuda_##name),
#include "tlua/ops.def"
    TL_KERNEL(max, TL_DTYPES_ALL, reduce, cuda_max),
    TL_KERNEL(min, TL_DTYPES_ALL, reduce, cuda_min),
    TL_KERNEL(argmax, TL_DTYPES_ALL, reduce, cuda_max),
    TL_KERNEL(argmin, TL_DTYPES_ALL, reduce, cuda_min),
};

TL_KERNEL_TABLE(tl_cuda_reduce_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_reduce_variants, TL_DEVICE_CUDA, reduce_variants);
