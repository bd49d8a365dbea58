/* CUDA layer norm backward and its table: the input's gradient by rows (a group of threads per
   row, sums in double as cpu/layer_norm.c); the weight and bias gradients summing blocks of rows
   per column in double, then the blocks in order (deterministic); the one pass writing the
   input's gradient and summing the weight's and bias's per block in shared memory, then the
   blocks in order. Mixed precision: grad_out in a 16-bit type over a float32 row, and
   add_layer_norm's residual's gradient written in it beside the input's, in the same pass. */
#include "kernels/cuda/layer_norm.cuh"

#define COLS_X     32
#define COLS_Y     8
#define MAX_CHUNKS 1024
/* The one-pass backward: a block's warps each keep their columns' two sums in shared memory. */
#define ONE_PASS_SHARED 49152
#define ONE_PASS_WARPS  8

/* The backward's paths. */
enum { PATH_ONE_PASS, PATH_ONE_PASS_VECTOR, PATH_SPLIT, PATH_MIXED, PATH_INPUT_MIXED };
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
    TL_VARIANT(layer_norm_backward, TL_DTYPES_F32, "mixed",
               "a float32 row with grad_out and/or the residual's gradient in bfloat16 or float16 "
               "(mixed precision), on any path above"),
    TL_VARIANT(layer_norm_backward_input, TL_DTYPES_F32, "mixed",
               "a float32 row with grad_out and/or the residual's gradient in bfloat16 or float16 "
               "(mixed precision)"),
};

/* One row's input gradient by a group of threads (lane its place), every thread of the group
   calling: grad_in = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) + grad_sum (grad_sum may be
   NULL), gw = grad_out * weight; the residual's gradient (grad_residual.p may be NULL) is grad_in
   again in its type. Each element's grad_out and xhat go to column(j, gv, xhat) (the one pass
   sums them per column). */
template <class E, class B, class Column>
__device__ __forceinline__ void
input_gradient_row(typename E::T *grad_in, tl_ln_operand<E, B> grad_residual,
                   tl_ln_operand<E, B> grad_out, const typename E::T *grad_sum,
                   const typename E::T *in, const typename E::C *mean, const typename E::C *rstd,
                   const typename E::T *weight, int64_t r, bool valid, int64_t D, int lane,
                   int group, tl_sum2 *smem, Column column) {
    typedef typename E::C C;
    const int64_t base = (valid ? r : 0) * D;
    const C m = mean[valid ? r : 0], s = rstd[valid ? r : 0];
    tl_sum2 sums = {0, 0};
    if (valid)
        for (int64_t j = lane; j < D; j += group) {
            C gw = grad_out.load(base + j);
            if (weight) gw = tl_mul(gw, E::load(weight[j]));
            sums.a += (double)gw;
            sums.b += (double)tl_mul(gw, tl_mul(tl_sub(E::load(in[base + j]), m), s));
        }
    sums = tl_group_allreduce(sums, tl_sum2_merge(), tl_sum2{0, 0}, smem, group);
    if (!valid) return;
    const C a = (C)tl_div(sums.a, (double)D), c = (C)tl_div(sums.b, (double)D);
    for (int64_t j = lane; j < D; j += group) {
        const C gv = grad_out.load(base + j);
        const C gw = weight ? tl_mul(gv, E::load(weight[j])) : gv;
        const C xhat = tl_mul(tl_sub(E::load(in[base + j]), m), s);
        C v = tl_mul(s, tl_sub(tl_sub(gw, a), tl_mul(xhat, c)));
        if (grad_sum) v = tl_add(v, E::load(grad_sum[base + j]));
        grad_in[base + j] = E::store(v);
        if (grad_residual.p) grad_residual.store(base + j, E::load(E::store(v)));
        column(j, gv, xhat);
    }
}

template <class E, class B>
__global__ void __launch_bounds__(LN_THREADS)
    backward_input_kernel(typename E::T *grad_in, tl_ln_operand<E, B> grad_residual,
                          tl_ln_operand<E, B> grad_out, const typename E::T *grad_sum,
                          const typename E::T *in, const typename E::C *mean,
                          const typename E::C *rstd, const typename E::T *weight, int64_t rows,
                          int64_t D, int group) {
    typedef typename E::C C;
    __shared__ tl_sum2 smem[32];
    const int lane = (int)threadIdx.x % group;
    tl_for_each_group_row(rows, group, [&](int64_t r, bool valid) {
        input_gradient_row<E, B>(grad_in, grad_residual, grad_out, grad_sum, in, mean, rstd, weight,
                                 r, valid, D, lane, group, smem, [](int64_t, C, C) {});
    });
}

static tl_status launch_input_rows(const tl_cuda_layer_norm *l) {
    return tl_layer_norm_types(l, [&](auto e, auto b) -> tl_status {
        typedef decltype(e) E;
        typedef decltype(b) B;
        typedef typename E::T T;
        typedef typename E::C C;
        const int group = tl_layer_norm_row_group(l->D);
        const unsigned grid =
            tl_cuda_grid(tl_ceil_div(l->rows, LN_THREADS / group), l->at.sm_count);
        backward_input_kernel<E, B><<<grid, LN_THREADS, 0, l->at.stream>>>(
            (T *)l->out, tl_ln_row<E, B>(l->grad_residual, l->grad_residual_branch),
            tl_ln_row<E, B>(l->grad_out, l->grad_out_branch), (const T *)l->grad_sum,
            (const T *)l->in, (const C *)l->mean, (const C *)l->rstd, (const T *)l->weight, l->rows,
            l->D, group);
        return tl_cuda_check_launch(l->at.op);
    });
}

/* grad_weight = sum over rows of grad_out * xhat, grad_bias = sum of grad_out: threads x take
   columns, threads y rows of a chunk, merged in y order; the chunks' sums (partials) are then
   added in chunk order. x (and mean, rstd) NULL: no grad_weight. */
template <class E, class B>
__global__ void __launch_bounds__(COLS_X *COLS_Y)
    backward_weight_kernel(typename E::T *grad_weight, typename E::T *grad_bias,
                           tl_ln_operand<E, B> grad_out, const typename E::T *x,
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
                const C gv = grad_out.load(r * D + j);
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

static tl_status launch_weight(const tl_cuda_layer_norm *l) {
    return tl_layer_norm_types(l, [&](auto e, auto b) -> tl_status {
        typedef decltype(e) E;
        typedef decltype(b) B;
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
        backward_weight_kernel<E, B><<<grid, dim3(COLS_X, COLS_Y), 0, l->at.stream>>>(
            (T *)l->grad_weight, (T *)l->grad_bias,
            tl_ln_row<E, B>(l->grad_out, l->grad_out_branch), x, (const C *)l->mean,
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
template <class E, class B>
__global__ void __launch_bounds__(LN_THREADS)
    one_pass_kernel(typename E::T *grad_in, tl_ln_operand<E, B> grad_residual,
                    tl_ln_operand<E, B> grad_out, const typename E::T *grad_sum,
                    const typename E::T *in, const typename E::C *mean, const typename E::C *rstd,
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
        input_gradient_row<E, B>(grad_in, grad_residual, grad_out, grad_sum, in, mean, rstd, weight,
                                 r, true, D, lane, 32, nullptr, [&](int64_t j, C gv, C xhat) {
                                     acc_w[j] = tl_add(acc_w[j], tl_mul(gv, xhat));
                                     acc_b[j] = tl_add(acc_b[j], gv);
                                 });
    block_column_sums(acc, warps, D, partials);
}

/* grad_weight[j] = sum over the blocks of partials[block][0][j], grad_bias[j] of [1][j] (either
   NULL): threads x take FINISH_X columns, threads y every FINISH_Y-th block, their sums then
   merged over y by a fixed tree in shared memory (the same order every run). Many rows of threads
   a column: the blocks' partials (4 blocks an SM) are read by many threads at once. */
#define FINISH_X 8
#define FINISH_Y 128
template <class E>
__global__ void __launch_bounds__(FINISH_X *FINISH_Y)
    one_pass_finish(typename E::T *grad_weight, typename E::T *grad_bias, int64_t D, int64_t blocks,
                    const typename E::C *partials) {
    typedef typename E::C C;
    __shared__ tl_sum2 smem[FINISH_Y][FINISH_X];
    const int x = (int)threadIdx.x, y = (int)threadIdx.y;
    for (int64_t tile = blockIdx.x; tile * FINISH_X < D; tile += gridDim.x) {
        const int64_t j = tile * FINISH_X + x;
        tl_sum2 s = {0, 0};
        if (j < D)
            for (int64_t b = y; b < blocks; b += FINISH_Y) {
                s.a += (double)partials[b * 2 * D + j];
                s.b += (double)partials[b * 2 * D + D + j];
            }
        smem[y][x] = s;
        __syncthreads();
        for (int half = FINISH_Y / 2; half > 0; half /= 2) {
            if (y < half) smem[y][x] = tl_sum2_merge()(smem[y][x], smem[y + half][x]);
            __syncthreads();
        }
        if (y == 0 && j < D) {
            if (grad_weight) grad_weight[j] = E::store((C)smem[0][x].a);
            if (grad_bias) grad_bias[j] = E::store((C)smem[0][x].b);
        }
        __syncthreads();
    }
}

/* acc[j0 .. j0 + W) += v, in 16-byte accesses (j0 a multiple of W, acc 16-byte aligned): a warp's
   lanes touch consecutive 16-byte words, so its shared-memory accesses take no bank conflicts. */
template <int W, class C>
__device__ __forceinline__ void add_columns(C *acc, int64_t j0, const C (&v)[W]) {
    constexpr int P = (int)(16 / sizeof(C)); /* elements a 16-byte access */
#pragma unroll
    for (int q = 0; q < W; q += P) {
        uint4 bits = *(const uint4 *)(acc + j0 + q);
        C e[P];
        memcpy(e, &bits, sizeof bits);
#pragma unroll
        for (int p = 0; p < P; p++) e[p] = tl_add(e[p], v[q + p]);
        memcpy(&bits, e, sizeof bits);
        *(uint4 *)(acc + j0 + q) = bits;
    }
}

/* one_pass_kernel with each warp's row held in registers (lane l its vectors l, l + 32, ... up
   to NV, W elements each): grad_out and the input are read once; the arithmetic is
   input_gradient_row's, and a column is still only ever touched by one lane of a warp. */
template <class E, class B, int NV>
__global__ void __launch_bounds__(LN_THREADS)
    one_pass_vector_kernel(typename E::T *grad_in, tl_ln_operand<E, B> grad_residual,
                           tl_ln_operand<E, B> grad_out, const typename E::T *grad_sum,
                           const typename E::T *in, const typename E::C *mean,
                           const typename E::C *rstd, const typename E::T *weight, int64_t rows,
                           int64_t D, int64_t run, typename E::C *partials) {
    typedef typename E::C C;
    typedef typename E::T T;
    constexpr int W = (int)(16 / sizeof(T));
    extern __shared__ double one_pass_shared[];
    C *acc = (C *)one_pass_shared;
    const tl_ln_operand<E, B> x_in = tl_ln_row<E, B>(in, false),
                              add_in = tl_ln_row<E, B>(grad_sum, false),
                              dx = tl_ln_row<E, B>(grad_in, false);
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
            C x[W];
            grad_out.load_vector(base + at * W, gv[k]);
            x_in.load_vector(base + at * W, x);
#pragma unroll
            for (int w = 0; w < W; w++) {
                xhat[k][w] = tl_mul(tl_sub(x[w], m), s);
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
            C d[W], add[W], gx[W];
            if (grad_sum) add_in.load_vector(base + at * W, add);
#pragma unroll
            for (int w = 0; w < W; w++) {
                const int64_t j = at * W + w;
                const C gw = weight ? tl_mul(gv[k][w], E::load(weight[j])) : gv[k][w];
                C v = tl_mul(s, tl_sub(tl_sub(gw, a), tl_mul(xhat[k][w], c)));
                if (grad_sum) v = tl_add(v, add[w]);
                d[w] = E::load(E::store(v));
                gx[w] = tl_mul(gv[k][w], xhat[k][w]);
            }
            add_columns(acc_w, at * W, gx);
            add_columns(acc_b, at * W, gv[k]);
            dx.store_vector(base + at * W, d);
            if (grad_residual.p) grad_residual.store_vector(base + at * W, d);
        }
    }
    block_column_sums(acc, warps, D, partials);
}

static tl_status launch_one_pass(const tl_cuda_layer_norm *l) {
    const int64_t row_bytes =
        2 * l->D * (int64_t)(l->dtype == TL_CUDA_F64 ? sizeof(double) : sizeof(float));
    int64_t warps = ONE_PASS_SHARED / row_bytes;
    if (warps > ONE_PASS_WARPS) warps = ONE_PASS_WARPS;
    if (warps < 1) {
        tl_variant_ran(&paths[PATH_SPLIT], (tl_dtype)l->dtype);
        if (l->rows > 0) TL_TRY(launch_input_rows(l));
        return launch_weight(l);
    }
    int nv = 0;
    const bool vector = tl_layer_norm_vector_rows(l, &nv);
    tl_variant_ran(&paths[vector ? PATH_ONE_PASS_VECTOR : PATH_ONE_PASS], (tl_dtype)l->dtype);
    return tl_layer_norm_types(l, [&](auto e, auto b) -> tl_status {
        typedef decltype(e) E;
        typedef decltype(b) B;
        typedef typename E::T T;
        typedef typename E::C C;
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
        auto kernel = !vector   ? one_pass_kernel<E, B>
                      : nv == 1 ? one_pass_vector_kernel<E, B, 1>
                      : nv == 2 ? one_pass_vector_kernel<E, B, 2>
                      : nv == 4 ? one_pass_vector_kernel<E, B, 4>
                      : nv == 6 ? one_pass_vector_kernel<E, B, 6>
                                : one_pass_vector_kernel<E, B, 8>;
        kernel<<<(unsigned)blocks, (unsigned)(warps * 32), (size_t)(warps * row_bytes),
                 l->at.stream>>>(
            (T *)l->out, tl_ln_row<E, B>(l->grad_residual, l->grad_residual_branch),
            tl_ln_row<E, B>(l->grad_out, l->grad_out_branch), (const T *)l->grad_sum,
            (const T *)l->in, (const C *)l->mean, (const C *)l->rstd, (const T *)l->weight, l->rows,
            l->D, run, partials);
        TL_TRY(tl_cuda_check_launch(l->at.op));
        const unsigned grid = tl_cuda_grid(tl_ceil_div(l->D, FINISH_X), l->at.sm_count);
        one_pass_finish<E><<<grid, dim3(FINISH_X, FINISH_Y), 0, l->at.stream>>>(
            (T *)l->grad_weight, (T *)l->grad_bias, l->D, blocks, partials);
        return tl_cuda_check_launch(l->at.op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
/* The backward kernels, by which gradients they write. */
enum backward_kind { BACKWARD_INPUT, BACKWARD_WEIGHT, BACKWARD_ONE_PASS };

template <backward_kind KIND>
static tl_status cuda_layer_norm_backward(tl_tensor *grad_in, tl_tensor *grad_residual,
                                          tl_tensor *grad_weight, tl_tensor *grad_bias,
                                          const tl_tensor *grad_out, const tl_tensor *grad_sum,
                                          const tl_tensor *in, const tl_tensor *mean,
                                          const tl_tensor *rstd, const tl_tensor *weight) {
    const char *op = KIND == BACKWARD_INPUT    ? "layer_norm_backward_input"
                     : KIND == BACKWARD_WEIGHT ? "layer_norm_backward_weight"
                                               : "layer_norm_backward";
    /* the stream's dtype: the input's (grad_out may be in a 16-bit type over it) */
    tl_cuda_layer_norm l = tl_layer_norm_rows_of(in && KIND != BACKWARD_WEIGHT ? in : grad_out);
    if (KIND == BACKWARD_WEIGHT && grad_weight) l.dtype = l.branch = tl_cuda_dtype_of(grad_weight);
    if (KIND == BACKWARD_WEIGHT && !grad_weight && grad_bias)
        l.dtype = l.branch = tl_cuda_dtype_of(grad_bias);
    l.grad_out = tl_data(grad_out);
    l.in = tl_cuda_data(in);
    l.mean = tl_cuda_data(mean);
    l.rstd = tl_cuda_data(rstd);
    if (KIND != BACKWARD_WEIGHT) {
        l.out = tl_data(grad_in);
        l.grad_residual = tl_cuda_data(grad_residual);
        l.grad_sum = tl_cuda_data(grad_sum);
        l.weight = tl_cuda_data(weight);
        l.grad_residual_branch = tl_layer_norm_branch(&l, grad_residual);
    }
    l.grad_out_branch = tl_layer_norm_branch(&l, grad_out);
    if (KIND != BACKWARD_INPUT) {
        l.grad_weight = tl_cuda_data(grad_weight);
        l.grad_bias = tl_cuda_data(grad_bias);
        if (!grad_weight && !grad_bias && KIND == BACKWARD_WEIGHT) return TL_OK;
    }
    if (l.D == 0 || (KIND == BACKWARD_INPUT && l.rows == 0)) return TL_OK;
    TL_TRY(tl_cuda_where_of(grad_out, op, &l.at));
    if (l.branch != l.dtype)
        tl_variant_ran(&paths[KIND == BACKWARD_INPUT ? PATH_INPUT_MIXED : PATH_MIXED],
                       (tl_dtype)l.dtype);
    return KIND == BACKWARD_INPUT    ? launch_input_rows(&l)
           : KIND == BACKWARD_WEIGHT ? launch_weight(&l)
                                     : launch_one_pass(&l);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(layer_norm_backward_input, TL_DTYPES_FLOATING, layer_norm_backward,
              cuda_layer_norm_backward<BACKWARD_INPUT>),
    TL_KERNEL(layer_norm_backward_weight, TL_DTYPES_FLOATING, layer_norm_backward,
              cuda_layer_norm_backward<BACKWARD_WEIGHT>),
    TL_KERNEL(layer_norm_backward, TL_DTYPES_FLOATING, layer_norm_backward,
              cuda_layer_norm_backward<BACKWARD_ONE_PASS>),
};

TL_KERNEL_TABLE(tl_cuda_layer_norm_backward_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_layer_norm_backward_variants, TL_DEVICE_CUDA, paths);
