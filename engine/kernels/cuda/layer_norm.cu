/* CUDA layer norm over the last dim (of x, or of x + residual: add_layer_norm), forward and
   backward, and their table, the dtypes of cpu/layer_norm.c: a group of threads per row (a warp,
   or a block for long rows) with the row's sums in double, as cpu/layer_norm.c; the weight and
   bias gradients sum blocks of rows per column in double, then the blocks in order
   (deterministic); the one-pass backward writes the input's gradient and sums the weight's and
   bias's per block in shared memory, then the blocks in order. Elementwise arithmetic rounds
   each operation on its own, as the CPU does. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"

#define LN_THREADS 256
#define COLS_X     32
#define COLS_Y     8
#define MAX_CHUNKS 1024
/* The one-pass backward: a block's warps each keep their columns' two sums in shared memory. */
#define ONE_PASS_SHARED 49152
#define ONE_PASS_WARPS  8

/* rows of D elements; mean/rstd float32 (float64 for float64). */
typedef struct tl_cuda_layer_norm {
    tl_cuda_where at;
    int dtype;
    int64_t rows, D;
    double eps;
    const void *in, *weight, *bias, *grad_out; /* weight, bias may be NULL */
    const void *residual, *grad_sum;           /* add_layer_norm's; may be NULL */
    void *out;                                 /* forward output or grad_in */
    void *sum;                                 /* add_layer_norm's in + residual */
    void *mean, *rstd;                         /* written by the forward, read by the backward */
    void *grad_weight, *grad_bias;             /* may be NULL */
} tl_cuda_layer_norm;

static int row_group(int64_t D) {
    return D >= 1024 ? LN_THREADS : 32;
}

/* With a residual, each thread first writes its elements of the row's sum s = in + residual
   (rounded to T) and then reads them back as the row: a thread reads only what it wrote. */
template <class E>
__global__ void __launch_bounds__(LN_THREADS)
    forward_kernel(typename E::T *out, typename E::T *sum_out, typename E::C *mean,
                   typename E::C *rstd, const typename E::T *in, const typename E::T *residual,
                   const typename E::T *weight, const typename E::T *bias, int64_t rows, int64_t D,
                   double eps, int group) {
    typedef typename E::C C;
    typedef typename E::T T;
    __shared__ double smem[32];
    const int lane = (int)threadIdx.x % group;
    tl_for_each_group_row(rows, group, [&](int64_t r, bool valid) {
        const int64_t base = (valid ? r : 0) * D;
        const T *x = in + base;
        if (residual && valid) {
            for (int64_t j = lane; j < D; j += group)
                sum_out[base + j] = E::store(tl_add(E::load(x[j]), E::load(residual[base + j])));
            x = sum_out + base;
        }
        double sum = 0;
        if (valid)
            for (int64_t j = lane; j < D; j += group) sum += (double)E::load(x[j]);
        sum = tl_group_allreduce(sum, tl_sum_merge(), 0.0, smem, group);
        const double mu = tl_div(sum, (double)D);
        double sq = 0;
        if (valid)
            for (int64_t j = lane; j < D; j += group) {
                const double d = tl_sub((double)E::load(x[j]), mu);
                sq = tl_add(sq, tl_mul(d, d));
            }
        sq = tl_group_allreduce(sq, tl_sum_merge(), 0.0, smem, group);
        if (!valid) return;
        const C m = (C)mu, s = (C)tl_div(1.0, tl_sqrt(tl_add(tl_div(sq, (double)D), eps)));
        if (lane == 0) mean[r] = m, rstd[r] = s;
        T *y = out + base;
        for (int64_t j = lane; j < D; j += group) {
            C v = tl_mul(tl_sub(E::load(x[j]), m), s);
            if (weight) v = tl_mul(v, E::load(weight[j]));
            if (bias) v = tl_add(v, E::load(bias[j]));
            y[j] = E::store(v);
        }
    });
}

/* One row's input gradient by a group of threads (lane its place), every thread of the group
   calling: grad_in = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) + grad_sum (grad_sum may be
   NULL), gw = grad_out * weight. Each element's grad_out and xhat go to column(j, gv, xhat) (the
   one pass sums them per column). */
template <class E, class Column>
__device__ __forceinline__ void
input_gradient_row(typename E::T *grad_in, const typename E::T *grad_out,
                   const typename E::T *grad_sum, const typename E::T *in,
                   const typename E::C *mean, const typename E::C *rstd,
                   const typename E::T *weight, int64_t r, bool valid, int64_t D, int lane,
                   int group, tl_sum2 *smem, Column column) {
    typedef typename E::C C;
    const int64_t base = (valid ? r : 0) * D;
    const C m = mean[valid ? r : 0], s = rstd[valid ? r : 0];
    tl_sum2 sums = {0, 0};
    if (valid)
        for (int64_t j = lane; j < D; j += group) {
            C gw = E::load(grad_out[base + j]);
            if (weight) gw = tl_mul(gw, E::load(weight[j]));
            sums.a += (double)gw;
            sums.b += (double)tl_mul(gw, tl_mul(tl_sub(E::load(in[base + j]), m), s));
        }
    sums = tl_group_allreduce(sums, tl_sum2_merge(), tl_sum2{0, 0}, smem, group);
    if (!valid) return;
    const C a = (C)tl_div(sums.a, (double)D), c = (C)tl_div(sums.b, (double)D);
    for (int64_t j = lane; j < D; j += group) {
        const C gv = E::load(grad_out[base + j]);
        const C gw = weight ? tl_mul(gv, E::load(weight[j])) : gv;
        const C xhat = tl_mul(tl_sub(E::load(in[base + j]), m), s);
        C v = tl_mul(s, tl_sub(tl_sub(gw, a), tl_mul(xhat, c)));
        if (grad_sum) v = tl_add(v, E::load(grad_sum[base + j]));
        grad_in[base + j] = E::store(v);
        column(j, gv, xhat);
    }
}

template <class E>
__global__ void __launch_bounds__(LN_THREADS)
    backward_input_kernel(typename E::T *grad_in, const typename E::T *grad_out,
                          const typename E::T *grad_sum, const typename E::T *in,
                          const typename E::C *mean, const typename E::C *rstd,
                          const typename E::T *weight, int64_t rows, int64_t D, int group) {
    typedef typename E::C C;
    __shared__ tl_sum2 smem[32];
    const int lane = (int)threadIdx.x % group;
    tl_for_each_group_row(rows, group, [&](int64_t r, bool valid) {
        input_gradient_row<E>(grad_in, grad_out, grad_sum, in, mean, rstd, weight, r, valid, D,
                              lane, group, smem, [](int64_t, C, C) {});
    });
}

/* The paths of the forward (layer_norm's and add_layer_norm's) and of the one-pass backward. */
enum {
    PATH_ONE_PASS,
    PATH_ONE_PASS_VECTOR,
    PATH_SPLIT,
    PATH_VECTOR_LAYER_NORM,
    PATH_ROWS_LAYER_NORM,
    PATH_VECTOR_ADD,
    PATH_ROWS_ADD
};
#define VECTOR_CONDITION                                                                           \
    "rows of whole 16-byte vectors on 16-byte boundaries, at most 8 vectors a lane (D <= 1024 "    \
    "float32, 2048 bfloat16/float16, 512 float64): a warp per row held in registers, one read "    \
    "and "                                                                                         \
    "one write"
#define ROWS_CONDITION "other rows: a group of threads per row reading it once for each sum"
static const tl_kernel_variant paths[] = {
    TL_VARIANT(layer_norm_backward, TL_DTYPES_FLOATING, "warps",
               "rows of D <= 6144 (float64: 3072): a warp per row, each warp's column sums in "
               "shared memory, the blocks' sums added by a second kernel"),
    TL_VARIANT(layer_norm_backward, TL_DTYPES_FLOATING, "vector",
               "rows as the forward's vector path takes them (whole 16-byte vectors, at most 8 a "
               "lane): the warps' rows held in registers, one read of grad_out and the input"),
    TL_VARIANT(layer_norm_backward, TL_DTYPES_FLOATING, "split",
               "longer rows (their sums do not fit a block's shared memory): the input gradient's "
               "kernel, then the weight gradient's"),
    TL_VARIANT(layer_norm, TL_DTYPES_FLOATING, "vector", VECTOR_CONDITION),
    TL_VARIANT(layer_norm, TL_DTYPES_FLOATING, "rows", ROWS_CONDITION),
    TL_VARIANT(add_layer_norm, TL_DTYPES_FLOATING, "vector", VECTOR_CONDITION),
    TL_VARIANT(add_layer_norm, TL_DTYPES_FLOATING, "rows", ROWS_CONDITION),
};

/* The forward with the row in registers: a warp per row, lane l holding the row's 16-byte vectors
   l, l + 32, ... (NV at most); with a residual, s = in + residual is rounded to T, written, and
   normalized as stored. The sums are in double and the elementwise arithmetic as
   forward_kernel's. */
template <class E, int NV>
__global__ void __launch_bounds__(LN_THREADS)
    forward_vector_kernel(typename E::T *out, typename E::T *sum_out, typename E::C *mean,
                          typename E::C *rstd, const typename E::T *in,
                          const typename E::T *residual, const typename E::T *weight,
                          const typename E::T *bias, int64_t rows, int64_t D, double eps) {
    typedef typename E::C C;
    typedef typename E::T T;
    constexpr int W = (int)(16 / sizeof(T));
    const int lane = (int)threadIdx.x % 32;
    const int64_t vectors = D / W, warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
        const int64_t base = r * D;
        C v[NV][W];
        double sum = 0;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int64_t at = lane + 32 * (int64_t)k;
            if (at >= vectors) break;
            T e[W];
            uint4 bits = ((const uint4 *)(in + base))[at];
            memcpy(e, &bits, sizeof bits);
            if (residual) {
                T f[W];
                const uint4 more = ((const uint4 *)(residual + base))[at];
                memcpy(f, &more, sizeof more);
#pragma unroll
                for (int w = 0; w < W; w++) e[w] = E::store(tl_add(E::load(e[w]), E::load(f[w])));
                memcpy(&bits, e, sizeof bits);
                ((uint4 *)(sum_out + base))[at] = bits;
            }
#pragma unroll
            for (int w = 0; w < W; w++) v[k][w] = E::load(e[w]), sum += (double)v[k][w];
        }
        sum = tl_group_allreduce(sum, tl_sum_merge(), 0.0, (double *)nullptr, 32);
        const double mu = tl_div(sum, (double)D);
        double sq = 0;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            if (lane + 32 * (int64_t)k >= vectors) break;
#pragma unroll
            for (int w = 0; w < W; w++) {
                const double d = tl_sub((double)v[k][w], mu);
                sq = tl_add(sq, tl_mul(d, d));
            }
        }
        sq = tl_group_allreduce(sq, tl_sum_merge(), 0.0, (double *)nullptr, 32);
        const C m = (C)mu, s = (C)tl_div(1.0, tl_sqrt(tl_add(tl_div(sq, (double)D), eps)));
        if (lane == 0) mean[r] = m, rstd[r] = s;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int64_t at = lane + 32 * (int64_t)k;
            if (at >= vectors) break;
            T e[W];
#pragma unroll
            for (int w = 0; w < W; w++) {
                const int64_t j = at * W + w;
                C y = tl_mul(tl_sub(v[k][w], m), s);
                if (weight) y = tl_mul(y, E::load(weight[j]));
                if (bias) y = tl_add(y, E::load(bias[j]));
                e[w] = E::store(y);
            }
            uint4 bits;
            memcpy(&bits, e, sizeof bits);
            ((uint4 *)(out + base))[at] = bits;
        }
    }
}

/* Whether l's forward takes the vector kernel, and its NV (vectors a lane, a power of two). */
static bool vector_rows(const tl_cuda_layer_norm *l, int *nv) {
    const size_t size = tl_dtype_size((tl_dtype)l->dtype);
    const void *ptrs[] = {l->in, l->residual, l->weight, l->bias, l->out, l->sum};
    for (const void *p : ptrs)
        if ((uintptr_t)p % 16) return false;
    if ((size_t)l->D * size % 16) return false;
    const int64_t per_lane = tl_ceil_div((int64_t)((size_t)l->D * size / 16), 32);
    if (per_lane > 8 || per_lane < 1) return false;
    *nv = per_lane <= 1 ? 1 : per_lane <= 2 ? 2 : per_lane <= 4 ? 4 : 8;
    return true;
}

static tl_status launch_forward_vector(const tl_cuda_layer_norm *l, int nv) {
    return tl_cuda_floating(l->dtype, l->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        typedef typename E::C C;
        const unsigned grid = tl_cuda_grid(tl_ceil_div(l->rows, LN_THREADS / 32), l->at.sm_count);
        auto kernel = nv == 1   ? forward_vector_kernel<E, 1>
                      : nv == 2 ? forward_vector_kernel<E, 2>
                      : nv == 4 ? forward_vector_kernel<E, 4>
                                : forward_vector_kernel<E, 8>;
        kernel<<<grid, LN_THREADS, 0, l->at.stream>>>((T *)l->out, (T *)l->sum, (C *)l->mean,
                                                      (C *)l->rstd, (const T *)l->in,
                                                      (const T *)l->residual, (const T *)l->weight,
                                                      (const T *)l->bias, l->rows, l->D, l->eps);
        return tl_cuda_check_launch(l->at.op);
    });
}

/* The kernels by rows, a group of threads (row_group) per row: the forward and the input
   gradient. */
enum row_kernel { FORWARD_ROWS, INPUT_GRADIENT_ROWS };

static tl_status launch_rows(const tl_cuda_layer_norm *l, row_kernel kernel) {
    return tl_cuda_floating(l->dtype, l->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        typedef typename E::C C;
        const int group = row_group(l->D);
        const unsigned grid =
            tl_cuda_grid(tl_ceil_div(l->rows, LN_THREADS / group), l->at.sm_count);
        if (kernel == INPUT_GRADIENT_ROWS)
            backward_input_kernel<E><<<grid, LN_THREADS, 0, l->at.stream>>>(
                (T *)l->out, (const T *)l->grad_out, (const T *)l->grad_sum, (const T *)l->in,
                (const C *)l->mean, (const C *)l->rstd, (const T *)l->weight, l->rows, l->D, group);
        else
            forward_kernel<E><<<grid, LN_THREADS, 0, l->at.stream>>>(
                (T *)l->out, (T *)l->sum, (C *)l->mean, (C *)l->rstd, (const T *)l->in,
                (const T *)l->residual, (const T *)l->weight, (const T *)l->bias, l->rows, l->D,
                l->eps, group);
        return tl_cuda_check_launch(l->at.op);
    });
}

/* grad_weight = sum over rows of grad_out * xhat, grad_bias = sum of grad_out: threads x take
   columns, threads y rows of a chunk, merged in y order; the chunks' sums (partials) are then
   added in chunk order. x (and mean, rstd) NULL: no grad_weight. */
template <class E>
__global__ void __launch_bounds__(COLS_X *COLS_Y)
    backward_weight_kernel(typename E::T *grad_weight, typename E::T *grad_bias,
                           const typename E::T *grad_out, const typename E::T *x,
                           const typename E::C *mean, const typename E::C *rstd, int64_t rows,
                           int64_t D, int64_t chunks, int64_t chunk_len, tl_sum2 *partials) {
    typedef typename E::C C;
    __shared__ tl_sum2 smem[COLS_Y][COLS_X];
    const int64_t tiles = (D + COLS_X - 1) / COLS_X;
    for (int64_t w = blockIdx.x; w < tiles * chunks; w += gridDim.x) {
        const int64_t tile = w / chunks, c = w - tile * chunks, j = tile * COLS_X + threadIdx.x;
        const bool valid = j < D;
        tl_sum2 s = {0, 0};
        if (valid) {
            const int64_t r0 = c * chunk_len, r1 = r0 + chunk_len < rows ? r0 + chunk_len : rows;
            for (int64_t r = r0 + threadIdx.y; r < r1; r += COLS_Y) {
                const C gv = E::load(grad_out[r * D + j]);
                if (x)
                    s.a +=
                        (double)tl_mul(gv, tl_mul(tl_sub(E::load(x[r * D + j]), mean[r]), rstd[r]));
                s.b += (double)gv;
            }
        }
        smem[threadIdx.y][threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.y == 0 && valid) {
            for (int y = 1; y < COLS_Y; y++) s = tl_sum2_merge()(s, smem[y][threadIdx.x]);
            if (chunks > 1) {
                partials[c * D + j] = s;
            } else {
                if (grad_weight) grad_weight[j] = E::store((C)s.a);
                if (grad_bias) grad_bias[j] = E::store((C)s.b);
            }
        }
        __syncthreads();
    }
}

template <class E>
__global__ void __launch_bounds__(LN_THREADS)
    weight_finish_kernel(typename E::T *grad_weight, typename E::T *grad_bias, int64_t D,
                         int64_t chunks, const tl_sum2 *partials) {
    typedef typename E::C C;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < D; j += stride) {
        tl_sum2 s = partials[j];
        for (int64_t c = 1; c < chunks; c++) s = tl_sum2_merge()(s, partials[c * D + j]);
        if (grad_weight) grad_weight[j] = E::store((C)s.a);
        if (grad_bias) grad_bias[j] = E::store((C)s.b);
    }
}

static tl_status launch_layer_norm_backward_weight(const tl_cuda_layer_norm *l) {
    return tl_cuda_floating(l->dtype, l->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        typedef typename E::C C;
        const int64_t tiles = tl_ceil_div(l->D, COLS_X), sm = l->at.sm_count;
        int64_t chunks = 1;
        if (tiles < 2 * sm && l->rows >= 128) {
            chunks = tl_ceil_div(4 * sm, tiles);
            const int64_t most = tl_ceil_div(l->rows, 64);
            if (chunks > most) chunks = most;
            if (chunks > MAX_CHUNKS) chunks = MAX_CHUNKS;
        }
        const int64_t chunk_len = chunks > 1 ? tl_ceil_div(l->rows, chunks) : l->rows;
        if (chunks > 1) chunks = tl_ceil_div(l->rows, chunk_len);
        tl_cuda_scratch scratch;
        if (chunks > 1) TL_TRY(scratch.get(l->at, (size_t)(chunks * l->D) * sizeof(tl_sum2)));
        const T *x = l->grad_weight ? (const T *)l->in : nullptr;
        const unsigned grid = tl_cuda_grid(tiles * chunks, l->at.sm_count);
        backward_weight_kernel<E><<<grid, dim3(COLS_X, COLS_Y), 0, l->at.stream>>>(
            (T *)l->grad_weight, (T *)l->grad_bias, (const T *)l->grad_out, x, (const C *)l->mean,
            (const C *)l->rstd, l->rows, l->D, chunks, chunk_len, (tl_sum2 *)scratch.ptr);
        TL_TRY(tl_cuda_check_launch(l->at.op));
        if (chunks > 1) {
            const unsigned g2 = tl_cuda_grid(tl_ceil_div(l->D, LN_THREADS), l->at.sm_count);
            weight_finish_kernel<E><<<g2, LN_THREADS, 0, l->at.stream>>>(
                (T *)l->grad_weight, (T *)l->grad_bias, l->D, chunks, (const tl_sum2 *)scratch.ptr);
            TL_TRY(tl_cuda_check_launch(l->at.op));
        }
        return TL_OK;
    });
}

/* The end of a one-pass block: its warps' column sums (acc, warps slices of [2, D]) added in warp
   order into partials[block] (every thread calling). */
template <typename C>
__device__ __forceinline__ void block_column_sums(const C *acc, int warps, int64_t D, C *partials) {
    __syncthreads();
    C *out = partials + (int64_t)blockIdx.x * 2 * D;
    for (int64_t j = threadIdx.x; j < 2 * D; j += blockDim.x) {
        C total = acc[j];
        for (int w = 1; w < warps; w++) total = tl_add(total, acc[(int64_t)w * 2 * D + j]);
        out[j] = total;
    }
}

/* ---- the one pass ------------------------------------------------------------------------
   A block owns a run of rows, a warp per row (warp w takes rows w, w + warps, ... of the run):
   it writes the row's grad_in (input_gradient_row) and adds grad_out * xhat and grad_out, per
   column, into its own slice of shared memory (acc[w] = [2, D] in the compute type: a column j
   is only ever touched by lane j % 32 of warp w, so no atomics). The block then sums its warps'
   slices in warp order into partials[block] ([2, D]), and one_pass_finish sums the blocks in
   block order, in double: the result does not depend on the timing. */
template <class E>
__global__ void __launch_bounds__(LN_THREADS)
    one_pass_kernel(typename E::T *grad_in, const typename E::T *grad_out,
                    const typename E::T *grad_sum, const typename E::T *in,
                    const typename E::C *mean, const typename E::C *rstd,
                    const typename E::T *weight, int64_t rows, int64_t D, int64_t run,
                    typename E::C *partials) {
    typedef typename E::C C;
    /* the block's only shared memory (its whole 48 KiB may be asked for): a warp's row sums
       need none (tl_group_allreduce of 32 threads shuffles) */
    extern __shared__ double one_pass_shared[];
    C *acc = (C *)one_pass_shared;
    const int warps = (int)blockDim.x / 32, warp = (int)threadIdx.x / 32,
              lane = (int)threadIdx.x % 32;
    C *acc_w = acc + (int64_t)warp * 2 * D, *acc_b = acc_w + D;
    for (int64_t j = lane; j < D; j += 32) acc_w[j] = 0, acc_b[j] = 0;
    const int64_t r0 = (int64_t)blockIdx.x * run, r1 = r0 + run < rows ? r0 + run : rows;
    for (int64_t r = r0 + warp; r < r1; r += warps)
        input_gradient_row<E>(grad_in, grad_out, grad_sum, in, mean, rstd, weight, r, true, D, lane,
                              32, nullptr, [&](int64_t j, C gv, C xhat) {
                                  acc_w[j] = tl_add(acc_w[j], tl_mul(gv, xhat));
                                  acc_b[j] = tl_add(acc_b[j], gv);
                              });
    block_column_sums(acc, warps, D, partials);
}

/* grad_weight[j] = sum over the blocks of partials[block][0][j], grad_bias[j] of [1][j] (either
   NULL): threads x take columns, threads y every COLS_Y-th block, merged in y order. */
template <class E>
__global__ void __launch_bounds__(COLS_X *COLS_Y)
    one_pass_finish(typename E::T *grad_weight, typename E::T *grad_bias, int64_t D, int64_t blocks,
                    const typename E::C *partials) {
    typedef typename E::C C;
    __shared__ tl_sum2 smem[COLS_Y][COLS_X];
    for (int64_t tile = blockIdx.x; tile * COLS_X < D; tile += gridDim.x) {
        const int64_t j = tile * COLS_X + threadIdx.x;
        tl_sum2 s = {0, 0};
        if (j < D)
            for (int64_t b = threadIdx.y; b < blocks; b += COLS_Y) {
                s.a += (double)partials[b * 2 * D + j];
                s.b += (double)partials[b * 2 * D + D + j];
            }
        smem[threadIdx.y][threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.y == 0 && j < D) {
            for (int y = 1; y < COLS_Y; y++) s = tl_sum2_merge()(s, smem[y][threadIdx.x]);
            if (grad_weight) grad_weight[j] = E::store((C)s.a);
            if (grad_bias) grad_bias[j] = E::store((C)s.b);
        }
        __syncthreads();
    }
}

/* one_pass_kernel with each warp's row held in registers (lane l its 16-byte vectors l, l + 32,
   ... up to NV): grad_out and the input are read once; the arithmetic is input_gradient_row's,
   and a column is still only ever touched by one lane of a warp. */
template <class E, int NV>
__global__ void __launch_bounds__(LN_THREADS)
    one_pass_vector_kernel(typename E::T *grad_in, const typename E::T *grad_out,
                           const typename E::T *grad_sum, const typename E::T *in,
                           const typename E::C *mean, const typename E::C *rstd,
                           const typename E::T *weight, int64_t rows, int64_t D, int64_t run,
                           typename E::C *partials) {
    typedef typename E::C C;
    typedef typename E::T T;
    constexpr int W = (int)(16 / sizeof(T));
    extern __shared__ double one_pass_shared[];
    C *acc = (C *)one_pass_shared;
    const int warps = (int)blockDim.x / 32, warp = (int)threadIdx.x / 32,
              lane = (int)threadIdx.x % 32;
    const int64_t vectors = D / W;
    C *acc_w = acc + (int64_t)warp * 2 * D, *acc_b = acc_w + D;
    for (int64_t j = lane; j < D; j += 32) acc_w[j] = 0, acc_b[j] = 0;
    const int64_t r0 = (int64_t)blockIdx.x * run, r1 = r0 + run < rows ? r0 + run : rows;
    for (int64_t r = r0 + warp; r < r1; r += warps) {
        const int64_t base = r * D;
        const C m = mean[r], s = rstd[r];
        C gv[NV][W], xhat[NV][W];
        tl_sum2 sums = {0, 0};
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int64_t at = lane + 32 * (int64_t)k;
            if (at >= vectors) break;
            T g[W], x[W];
            const uint4 gbits = ((const uint4 *)(grad_out + base))[at];
            const uint4 xbits = ((const uint4 *)(in + base))[at];
            memcpy(g, &gbits, sizeof gbits);
            memcpy(x, &xbits, sizeof xbits);
#pragma unroll
            for (int w = 0; w < W; w++) {
                gv[k][w] = E::load(g[w]);
                xhat[k][w] = tl_mul(tl_sub(E::load(x[w]), m), s);
                const C gw = weight ? tl_mul(gv[k][w], E::load(weight[at * W + w])) : gv[k][w];
                sums.a += (double)gw;
                sums.b += (double)tl_mul(gw, xhat[k][w]);
            }
        }
        sums = tl_group_allreduce(sums, tl_sum2_merge(), tl_sum2{0, 0}, (tl_sum2 *)nullptr, 32);
        const C a = (C)tl_div(sums.a, (double)D), c = (C)tl_div(sums.b, (double)D);
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int64_t at = lane + 32 * (int64_t)k;
            if (at >= vectors) break;
            T d[W], add[W];
            if (grad_sum) {
                const uint4 bits = ((const uint4 *)(grad_sum + base))[at];
                memcpy(add, &bits, sizeof bits);
            }
#pragma unroll
            for (int w = 0; w < W; w++) {
                const int64_t j = at * W + w;
                const C gw = weight ? tl_mul(gv[k][w], E::load(weight[j])) : gv[k][w];
                C v = tl_mul(s, tl_sub(tl_sub(gw, a), tl_mul(xhat[k][w], c)));
                if (grad_sum) v = tl_add(v, E::load(add[w]));
                d[w] = E::store(v);
                acc_w[j] = tl_add(acc_w[j], tl_mul(gv[k][w], xhat[k][w]));
                acc_b[j] = tl_add(acc_b[j], gv[k][w]);
            }
            uint4 bits;
            memcpy(&bits, d, sizeof bits);
            ((uint4 *)(grad_in + base))[at] = bits;
        }
    }
    block_column_sums(acc, warps, D, partials);
}

/* Whether the backward's rows take the vector kernels (its NV as vector_rows gives it). */
static bool vector_backward_rows(const tl_cuda_layer_norm *l, int *nv) {
    tl_cuda_layer_norm as_forward = *l;
    as_forward.in = l->in, as_forward.residual = l->grad_out,
    as_forward.sum = const_cast<void *>(l->grad_sum);
    as_forward.out = l->out, as_forward.weight = l->weight, as_forward.bias = nullptr;
    return vector_rows(&as_forward, nv);
}

static tl_status launch_one_pass(const tl_cuda_layer_norm *l) {
    return tl_cuda_floating(l->dtype, l->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        typedef typename E::C C;
        const int64_t row_bytes = 2 * l->D * (int64_t)sizeof(C);
        int64_t warps = ONE_PASS_SHARED / row_bytes;
        if (warps > ONE_PASS_WARPS) warps = ONE_PASS_WARPS;
        if (warps < 1) {
            tl_variant_ran(&paths[PATH_SPLIT], (tl_dtype)l->dtype);
            if (l->rows > 0) TL_TRY(launch_rows(l, INPUT_GRADIENT_ROWS));
            return launch_layer_norm_backward_weight(l);
        }
        int nv = 0;
        const bool vector = vector_backward_rows(l, &nv);
        tl_variant_ran(&paths[vector ? PATH_ONE_PASS_VECTOR : PATH_ONE_PASS], (tl_dtype)l->dtype);
        /* four blocks per multiprocessor (4 x 48 KiB of shared memory fit an H100's 228), each a
           run of whole rows: with two, 16 warps an SM, the [16384, 768] float32 pass took 149 us
           on an H200 (the loads of a warp's row wait on its sums) */
        int64_t blocks = tl_ceil_div(l->rows, warps);
        if (blocks > 4 * (int64_t)l->at.sm_count) blocks = 4 * (int64_t)l->at.sm_count;
        if (blocks < 1) blocks = 1;
        const int64_t run = l->rows > 0 ? tl_ceil_div(l->rows, blocks) : 0;
        if (run > 0) blocks = tl_ceil_div(l->rows, run);
        tl_cuda_scratch scratch;
        TL_TRY(scratch.get(l->at, (size_t)(blocks * 2 * l->D) * sizeof(C)));
        C *partials = (C *)scratch.ptr;
        auto kernel = !vector   ? one_pass_kernel<E>
                      : nv == 1 ? one_pass_vector_kernel<E, 1>
                      : nv == 2 ? one_pass_vector_kernel<E, 2>
                      : nv == 4 ? one_pass_vector_kernel<E, 4>
                                : one_pass_vector_kernel<E, 8>;
        kernel<<<(unsigned)blocks, (unsigned)(warps * 32), (size_t)(warps * row_bytes),
                 l->at.stream>>>((T *)l->out, (const T *)l->grad_out, (const T *)l->grad_sum,
                                 (const T *)l->in, (const C *)l->mean, (const C *)l->rstd,
                                 (const T *)l->weight, l->rows, l->D, run, partials);
        TL_TRY(tl_cuda_check_launch(l->at.op));
        const unsigned grid = tl_cuda_grid(tl_ceil_div(l->D, COLS_X), l->at.sm_count);
        one_pass_finish<E><<<grid, dim3(COLS_X, COLS_Y), 0, l->at.stream>>>(
            (T *)l->grad_weight, (T *)l->grad_bias, l->D, blocks, partials);
        return tl_cuda_check_launch(l->at.op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
/* The description of t's rows (of its last dim's D elements each): dtype, rows and D set, nothing
   else. */
static tl_cuda_layer_norm rows_of(const tl_tensor *t) {
    const int64_t D = t->shape[t->ndim - 1];
    tl_cuda_layer_norm l{};
    l.dtype = tl_cuda_dtype_of(t);
    l.rows = D > 0 ? tl_numel(t) / D : 0;
    l.D = D;
    return l;
}

static tl_status run_layer_norm(const char *op, tl_tensor *out, tl_tensor *sum, tl_tensor *mean,
                                tl_tensor *rstd, const tl_tensor *in, const tl_tensor *residual,
                                const tl_tensor *weight, const tl_tensor *bias, double eps) {
    tl_cuda_layer_norm l = rows_of(in);
    l.eps = eps;
    l.in = tl_data(in);
    l.residual = tl_cuda_data(residual);
    l.weight = tl_cuda_data(weight);
    l.bias = tl_cuda_data(bias);
    l.out = tl_data(out);
    l.sum = tl_cuda_data(sum);
    l.mean = tl_data(mean);
    l.rstd = tl_data(rstd);
    if (l.rows == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(in, op, &l.at));
    int nv = 0;
    const bool vector = vector_rows(&l, &nv);
    const int path = residual ? (vector ? PATH_VECTOR_ADD : PATH_ROWS_ADD)
                              : (vector ? PATH_VECTOR_LAYER_NORM : PATH_ROWS_LAYER_NORM);
    tl_variant_ran(&paths[path], (tl_dtype)l.dtype);
    return vector ? launch_forward_vector(&l, nv) : launch_rows(&l, FORWARD_ROWS);
}

static tl_status cuda_layer_norm(tl_tensor *out, tl_tensor *sum, tl_tensor *mean, tl_tensor *rstd,
                                 const tl_tensor *in, const tl_tensor *residual,
                                 const tl_tensor *weight, const tl_tensor *bias, double eps) {
    return run_layer_norm("layer_norm", out, sum, mean, rstd, in, residual, weight, bias, eps);
}

static tl_status cuda_add_layer_norm(tl_tensor *out, tl_tensor *sum, tl_tensor *mean,
                                     tl_tensor *rstd, const tl_tensor *in,
                                     const tl_tensor *residual, const tl_tensor *weight,
                                     const tl_tensor *bias, double eps) {
    return run_layer_norm("add_layer_norm", out, sum, mean, rstd, in, residual, weight, bias, eps);
}

/* The backward kernels, by which gradients they write. */
enum backward_kind { BACKWARD_INPUT, BACKWARD_WEIGHT, BACKWARD_ONE_PASS };

template <backward_kind KIND>
static tl_status
cuda_layer_norm_backward(tl_tensor *grad_in, tl_tensor *grad_weight, tl_tensor *grad_bias,
                         const tl_tensor *grad_out, const tl_tensor *grad_sum, const tl_tensor *in,
                         const tl_tensor *mean, const tl_tensor *rstd, const tl_tensor *weight) {
    const char *op = KIND == BACKWARD_INPUT    ? "layer_norm_backward_input"
                     : KIND == BACKWARD_WEIGHT ? "layer_norm_backward_weight"
                                               : "layer_norm_backward";
    tl_cuda_layer_norm l = rows_of(grad_out);
    l.grad_out = tl_data(grad_out);
    l.in = tl_cuda_data(in);
    l.mean = tl_cuda_data(mean);
    l.rstd = tl_cuda_data(rstd);
    if (KIND != BACKWARD_WEIGHT) {
        l.out = tl_data(grad_in);
        l.grad_sum = tl_cuda_data(grad_sum);
        l.weight = tl_cuda_data(weight);
    }
    if (KIND != BACKWARD_INPUT) {
        l.grad_weight = tl_cuda_data(grad_weight);
        l.grad_bias = tl_cuda_data(grad_bias);
        if (!grad_weight && !grad_bias && KIND == BACKWARD_WEIGHT) return TL_OK;
    }
    if (l.D == 0 || (KIND == BACKWARD_INPUT && l.rows == 0)) return TL_OK;
    TL_TRY(tl_cuda_where_of(grad_out, op, &l.at));
    return KIND == BACKWARD_INPUT    ? launch_rows(&l, INPUT_GRADIENT_ROWS)
           : KIND == BACKWARD_WEIGHT ? launch_layer_norm_backward_weight(&l)
                                     : launch_one_pass(&l);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(layer_norm, TL_DTYPES_FLOATING, layer_norm, cuda_layer_norm),
    TL_KERNEL(add_layer_norm, TL_DTYPES_FLOATING, layer_norm, cuda_add_layer_norm),
    TL_KERNEL(layer_norm_backward_input, TL_DTYPES_FLOATING, layer_norm_backward,
              cuda_layer_norm_backward<BACKWARD_INPUT>),
    TL_KERNEL(layer_norm_backward_weight, TL_DTYPES_FLOATING, layer_norm_backward,
              cuda_layer_norm_backward<BACKWARD_WEIGHT>),
    TL_KERNEL(layer_norm_backward, TL_DTYPES_FLOATING, layer_norm_backward,
              cuda_layer_norm_backward<BACKWARD_ONE_PASS>),
};

TL_KERNEL_TABLE(tl_cuda_layer_norm_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_layer_norm_variants, TL_DEVICE_CUDA, paths);
