/* CUDA batch norm over the channels (dim 1) of [N, C, S], the dtypes of cpu/batch_norm.c: the
   per-channel sums (forward: the shifted sums of x and x^2; backward: of g and g * xhat) by
   blocks of a channel's planes (S >= 64: a block's threads along each contiguous plane, the
   planes split in chunks over N) or by columns of [N, C * S] (S < 64: a warp's lanes along
   neighbouring columns, coalesced), each block's sums in double in a fixed order; a per-channel
   kernel merges them in order (the statistics, the running update, or the backward's sums);
   then one elementwise pass (the output, or the input's gradient). Elementwise arithmetic rounds
   each operation on its own, as the CPU does. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"

#define BN_THREADS 256
#define COLS_X     32
#define COLS_Y     8
#define MAX_CHUNKS 1024
#define PLANE_MIN  64 /* S from which a channel's planes are read by whole blocks */

typedef struct tl_cuda_batch_norm {
    tl_cuda_where at;
    int dtype;
    int64_t N, C, S, M;
    double momentum, eps;
    bool training;
    const void *in, *grad_out;              /* grad_out: the backward's */
    const void *weight, *bias;              /* [C] statistics dtype, may be NULL */
    void *running_mean, *running_var;       /* may be NULL when training */
    void *mean, *invstd;                    /* written by the forward, read by the backward */
    void *out;                              /* forward output or grad_in */
    void *sum_dy, *sum_dy_xhat;             /* backward_reduce's outputs (either may be NULL) */
    const void *in_sum_dy, *in_sum_dy_xhat; /* backward_input's (both NULL: eval formula) */
} tl_cuda_batch_norm;

enum { BN_PLANES, BN_COLUMNS };
static const tl_kernel_variant batch_norm_variants[] = {
    TL_VARIANT(batch_norm, TL_DTYPES_FLOATING, "planes",
               "spatial size S >= 64: a block's threads along each channel's contiguous planes"),
    TL_VARIANT(batch_norm, TL_DTYPES_FLOATING, "columns",
               "spatial size S < 64: the lanes of a warp along neighbouring columns of [N, C*S]"),
    TL_VARIANT(batch_norm_backward_reduce, TL_DTYPES_FLOATING, "planes",
               "spatial size S >= 64: a block's threads along each channel's contiguous planes"),
    TL_VARIANT(batch_norm_backward_reduce, TL_DTYPES_FLOATING, "columns",
               "spatial size S < 64: the lanes of a warp along neighbouring columns of [N, C*S]"),
    TL_VARIANT(batch_norm_backward_input, TL_DTYPES_FLOATING, "planes",
               "spatial size S >= 64: a group of threads along each (n, c) plane"),
    TL_VARIANT(batch_norm_backward_input, TL_DTYPES_FLOATING, "columns",
               "spatial size S < 64: one thread per element, its channel from its index"),
};

/* ---- the per-channel sums --------------------------------------------------------------------
   GRADS false (the forward's statistics): a = sum of (x - shift), b = sum of (x - shift)^2, shift
   the channel's first element. GRADS true: a = sum of g, b = sum of g * (x - mean) * invstd (x
   NULL: b stays 0). */
template <class E, bool GRADS>
__device__ __forceinline__ void add_term(tl_sum2 &acc, const typename E::T *x,
                                         const typename E::T *g, int64_t i, double shift,
                                         typename E::C m, typename E::C s) {
    if (!GRADS) {
        const double d = tl_sub((double)E::load(x[i]), shift);
        acc.a = tl_add(acc.a, d);
        acc.b = tl_add(acc.b, tl_mul(d, d));
    } else {
        const typename E::C gv = E::load(g[i]);
        acc.a = tl_add(acc.a, (double)gv);
        if (x) acc.b = tl_add(acc.b, (double)tl_mul(gv, tl_mul(tl_sub(E::load(x[i]), m), s)));
    }
}

/* The shift (GRADS false) or mean and invstd (GRADS true, with x) of channel c. */
template <class E, bool GRADS>
__device__ __forceinline__ void channel_terms(const typename E::T *x, const typename E::C *mean,
                                              const typename E::C *invstd, int64_t c, int64_t S,
                                              double &shift, typename E::C &m, typename E::C &s) {
    shift = 0, m = 0, s = 0;
    if (!GRADS)
        shift = (double)E::load(x[c * S]);
    else if (x)
        m = mean[c], s = invstd[c];
}

/* Planes: block w takes channel c = w / chunks, planes n of chunk w % chunks; partials
   [C][chunks]. */
template <class E, bool GRADS>
__global__ void __launch_bounds__(BN_THREADS)
    planes_reduce_kernel(const typename E::T *x, const typename E::T *g, const typename E::C *mean,
                         const typename E::C *invstd, int64_t N, int64_t C, int64_t S,
                         int64_t chunks, int64_t chunk_len, tl_sum2 *partials) {
    typedef typename E::C CT;
    __shared__ tl_sum2 smem[32];
    for (int64_t w = blockIdx.x; w < C * chunks; w += gridDim.x) {
        const int64_t c = w / chunks, k = w - c * chunks;
        const int64_t n0 = k * chunk_len, n1 = n0 + chunk_len < N ? n0 + chunk_len : N;
        double shift;
        CT m, s;
        channel_terms<E, GRADS>(x, mean, invstd, c, S, shift, m, s);
        tl_sum2 acc = {0, 0};
        for (int64_t n = n0; n < n1; n++) {
            const int64_t base = (n * C + c) * S;
            for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
                add_term<E, GRADS>(acc, x, g, base + j, shift, m, s);
        }
        acc = tl_block_reduce(acc, tl_sum2_merge(), tl_sum2{0, 0}, smem);
        if (threadIdx.x == 0) partials[c * chunks + k] = acc;
    }
}

/* Columns of [N, C * S]: threads x take columns, threads y rows of a chunk, merged in y order;
   partials [chunks][C * S]. */
template <class E, bool GRADS>
__global__ void __launch_bounds__(COLS_X *COLS_Y)
    columns_reduce_kernel(const typename E::T *x, const typename E::T *g, const typename E::C *mean,
                          const typename E::C *invstd, int64_t N, int64_t C, int64_t S,
                          int64_t chunks, int64_t chunk_len, tl_sum2 *partials) {
    typedef typename E::C CT;
    __shared__ tl_sum2 smem[COLS_Y][COLS_X];
    const int64_t D = C * S, tiles = (D + COLS_X - 1) / COLS_X;
    for (int64_t w = blockIdx.x; w < tiles * chunks; w += gridDim.x) {
        const int64_t tile = w / chunks, k = w - tile * chunks, j = tile * COLS_X + threadIdx.x;
        const bool valid = j < D;
        tl_sum2 acc = {0, 0};
        if (valid) {
            double shift;
            CT m, s;
            channel_terms<E, GRADS>(x, mean, invstd, j / S, S, shift, m, s);
            const int64_t r0 = k * chunk_len, r1 = r0 + chunk_len < N ? r0 + chunk_len : N;
            for (int64_t r = r0 + threadIdx.y; r < r1; r += COLS_Y)
                add_term<E, GRADS>(acc, x, g, r * D + j, shift, m, s);
        }
        smem[threadIdx.y][threadIdx.x] = acc;
        __syncthreads();
        if (threadIdx.y == 0 && valid) {
            for (int y = 1; y < COLS_Y; y++) acc = tl_sum2_merge()(acc, smem[y][threadIdx.x]);
            partials[k * D + j] = acc;
        }
        __syncthreads();
    }
}

/* Per channel, the partials merged in order (planes: [C][chunks]; columns: [chunks][C * S]).
   MODE_STATS: mean, invstd and the running update from the shifted sums; MODE_EVAL: mean and
   invstd from the running statistics (no partials); MODE_GRADS: sum_dy, sum_dy_xhat. */
enum finish_mode { MODE_STATS, MODE_EVAL, MODE_GRADS };

template <class E, int MODE>
__global__ void __launch_bounds__(BN_THREADS)
    finish_kernel(const typename E::T *x, typename E::C *mean, typename E::C *invstd,
                  typename E::C *running_mean, typename E::C *running_var, typename E::C *sum_dy,
                  typename E::C *sum_dy_xhat, const tl_sum2 *partials, int64_t C, int64_t S,
                  int64_t M, int64_t chunks, bool columns, double momentum, double eps) {
    typedef typename E::C CT;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += stride) {
        if (MODE == MODE_EVAL) {
            mean[c] = running_mean[c];
            invstd[c] = (CT)tl_div(1.0, tl_sqrt(tl_add((double)running_var[c], eps)));
            continue;
        }
        tl_sum2 s = {0, 0};
        for (int64_t k = 0; k < chunks; k++) {
            if (!columns) {
                s = tl_sum2_merge()(s, partials[c * chunks + k]);
            } else {
                for (int64_t j = 0; j < S; j++)
                    s = tl_sum2_merge()(s, partials[k * C * S + c * S + j]);
            }
        }
        if (MODE == MODE_GRADS) {
            if (sum_dy) sum_dy[c] = (CT)s.a;
            if (sum_dy_xhat) sum_dy_xhat[c] = (CT)s.b;
            continue;
        }
        const double shift = (double)E::load(x[c * S]);
        const double dm = tl_div(s.a, (double)M);
        double var = tl_sub(tl_div(s.b, (double)M), tl_mul(dm, dm));
        if (var < 0) var = 0;
        const double mu = tl_add(shift, dm);
        mean[c] = (CT)mu;
        invstd[c] = (CT)tl_div(1.0, tl_sqrt(tl_add(var, eps)));
        if (running_mean) {
            const double unbiased = tl_div(tl_mul(var, (double)M), (double)(M - 1));
            running_mean[c] =
                (CT)tl_add(tl_mul(1 - momentum, (double)running_mean[c]), tl_mul(momentum, mu));
            running_var[c] = (CT)tl_add(tl_mul(1 - momentum, (double)running_var[c]),
                                        tl_mul(momentum, unbiased));
        }
    }
}

/* ---- the elementwise pass ------------------------------------------------------------------
   BACKWARD false: y = (x - mean) * invstd * weight + bias. BACKWARD true: with sums dx = k * (g -
   sum_dy * (1 / M) - xhat * sum_dy_xhat * (1 / M)), without dx = k * g, k = invstd * weight. */
template <class E, bool BACKWARD>
__device__ __forceinline__ typename E::T
element(const typename E::T *x, const typename E::T *g, int64_t i, typename E::C m, typename E::C s,
        typename E::C wc, typename E::C bc, typename E::C ma, typename E::C mb, bool has_w,
        bool has_b, bool sums) {
    typedef typename E::C CT;
    if (!BACKWARD) {
        CT v = tl_mul(tl_sub(E::load(x[i]), m), s);
        if (has_w) v = tl_mul(v, wc);
        if (has_b) v = tl_add(v, bc);
        return E::store(v);
    }
    const CT k = has_w ? tl_mul(s, wc) : s, gv = E::load(g[i]);
    if (!sums) return E::store(tl_mul(k, gv));
    const CT xhat = tl_mul(tl_sub(E::load(x[i]), m), s);
    return E::store(tl_mul(k, tl_sub(tl_sub(gv, ma), tl_mul(xhat, mb))));
}

/* The per-channel values of channel c for element(). */
template <class E>
__device__ __forceinline__ void
channel_values(int64_t c, const typename E::C *mean, const typename E::C *invstd,
               const typename E::C *weight, const typename E::C *bias, const typename E::C *sum_dy,
               const typename E::C *sum_dy_xhat, double inv_M, typename E::C *v) {
    typedef typename E::C CT;
    v[0] = mean[c], v[1] = invstd[c];
    v[2] = weight ? weight[c] : (CT)1, v[3] = bias ? bias[c] : (CT)0;
    v[4] = sum_dy ? (CT)tl_mul((double)sum_dy[c], inv_M) : (CT)0;
    v[5] = sum_dy_xhat ? (CT)tl_mul((double)sum_dy_xhat[c], inv_M) : (CT)0;
}

/* A group of threads (32, or the block) per (n, c) plane of S elements. */
template <class E, bool BACKWARD>
__global__ void __launch_bounds__(BN_THREADS)
    planes_apply_kernel(typename E::T *out, const typename E::T *x, const typename E::T *g,
                        const typename E::C *mean, const typename E::C *invstd,
                        const typename E::C *weight, const typename E::C *bias,
                        const typename E::C *sum_dy, const typename E::C *sum_dy_xhat, int64_t N,
                        int64_t C, int64_t S, int group) {
    typedef typename E::C CT;
    const int lane = (int)threadIdx.x % group;
    const double inv_M = 1.0 / (double)(N * S);
    tl_for_each_group_row(N * C, group, [&](int64_t r, bool valid) {
        if (!valid) return;
        CT v[6];
        channel_values<E>(r % C, mean, invstd, weight, bias, sum_dy, sum_dy_xhat, inv_M, v);
        const int64_t base = r * S;
        for (int64_t j = lane; j < S; j += group)
            out[base + j] = element<E, BACKWARD>(x, g, base + j, v[0], v[1], v[2], v[3], v[4], v[5],
                                                 weight, bias, sum_dy);
    });
}

/* One thread per element (grid-stride), its channel (i / S) % C in index type I. */
template <class E, bool BACKWARD, typename I>
__global__ void __launch_bounds__(BN_THREADS)
    flat_apply_kernel(typename E::T *out, const typename E::T *x, const typename E::T *g,
                      const typename E::C *mean, const typename E::C *invstd,
                      const typename E::C *weight, const typename E::C *bias,
                      const typename E::C *sum_dy, const typename E::C *sum_dy_xhat, I n, I C, I S,
                      double inv_M) {
    typedef typename E::C CT;
    const I stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        CT v[6];
        channel_values<E>((int64_t)((i / S) % C), mean, invstd, weight, bias, sum_dy, sum_dy_xhat,
                          inv_M, v);
        out[i] = element<E, BACKWARD>(x, g, (int64_t)i, v[0], v[1], v[2], v[3], v[4], v[5], weight,
                                      bias, sum_dy);
    }
}

/* ---- launches ------------------------------------------------------------------------------ */
/* The chunks the sums are split in (0 for no element) and their length, for blocks enough to
   fill the device: planes split N per channel; columns split N per tile of columns. */
static void plan_chunks(const tl_cuda_batch_norm *b, bool columns, int64_t *chunks,
                        int64_t *chunk_len) {
    if (b->M == 0) {
        *chunks = 0, *chunk_len = 0;
        return;
    }
    const int64_t sm = b->at.sm_count;
    const int64_t units = columns ? tl_ceil_div(b->C * b->S, COLS_X) : b->C;
    int64_t k = 1;
    if (units < 2 * sm) {
        k = tl_ceil_div(4 * sm, units);
        /* each chunk at least 64 rows (columns) or 4096 elements (planes) */
        const int64_t most = columns ? tl_ceil_div(b->N, 64) : tl_ceil_div(b->M, 4096);
        if (k > most) k = most;
        if (k > b->N) k = b->N;
        if (k > MAX_CHUNKS) k = MAX_CHUNKS;
        if (k < 1) k = 1;
    }
    *chunk_len = tl_ceil_div(b->N, k);
    *chunks = tl_ceil_div(b->N, *chunk_len);
}

/* The sums of GRADS (see add_term) into a scratch of partials, then finish_kernel<MODE>. */
template <class E, bool GRADS, int MODE>
static tl_status launch_sums(const tl_cuda_batch_norm *b, bool columns) {
    typedef typename E::T T;
    typedef typename E::C CT;
    int64_t chunks = 0, chunk_len = 0;
    if (MODE != MODE_EVAL) plan_chunks(b, columns, &chunks, &chunk_len);
    const int64_t count = chunks * (columns ? b->C * b->S : b->C);
    tl_cuda_scratch scratch;
    if (count > 0) TL_TRY(scratch.get(b->at, (size_t)count * sizeof(tl_sum2)));
    const T *x = (const T *)b->in, *g = (const T *)b->grad_out;
    const CT *mean = (const CT *)b->mean, *invstd = (const CT *)b->invstd;
    tl_sum2 *partials = (tl_sum2 *)scratch.ptr;
    if (count > 0) {
        if (columns) {
            const int64_t tiles = tl_ceil_div(b->C * b->S, COLS_X);
            columns_reduce_kernel<E, GRADS><<<tl_cuda_grid(tiles * chunks, b->at.sm_count),
                                              dim3(COLS_X, COLS_Y), 0, b->at.stream>>>(
                x, g, mean, invstd, b->N, b->C, b->S, chunks, chunk_len, partials);
        } else {
            planes_reduce_kernel<E, GRADS>
                <<<tl_cuda_grid(b->C * chunks, b->at.sm_count), BN_THREADS, 0, b->at.stream>>>(
                    x, g, mean, invstd, b->N, b->C, b->S, chunks, chunk_len, partials);
        }
        TL_TRY(tl_cuda_check_launch(b->at.op));
    }
    finish_kernel<E, MODE>
        <<<tl_cuda_grid(tl_ceil_div(b->C, BN_THREADS), b->at.sm_count), BN_THREADS, 0,
           b->at.stream>>>(x, (CT *)b->mean, (CT *)b->invstd, (CT *)b->running_mean,
                           (CT *)b->running_var, (CT *)b->sum_dy, (CT *)b->sum_dy_xhat, partials,
                           b->C, b->S, b->M, chunks, columns, b->momentum, b->eps);
    return tl_cuda_check_launch(b->at.op);
}

/* The elementwise pass of the forward (BACKWARD false) or the input's gradient. */
template <class E, bool BACKWARD>
static tl_status launch_apply(const tl_cuda_batch_norm *b, bool columns) {
    typedef typename E::T T;
    typedef typename E::C CT;
    const int64_t n = b->N * b->C * b->S;
    if (n == 0) return TL_OK;
    T *out = (T *)b->out;
    const T *x = (const T *)b->in, *g = (const T *)b->grad_out;
    const CT *mean = (const CT *)b->mean, *invstd = (const CT *)b->invstd;
    const CT *w = (const CT *)b->weight, *bias = BACKWARD ? nullptr : (const CT *)b->bias;
    const CT *sa = BACKWARD ? (const CT *)b->in_sum_dy : nullptr;
    const CT *sb = BACKWARD ? (const CT *)b->in_sum_dy_xhat : nullptr;
    if (!columns) {
        const int group = b->S >= 1024 ? BN_THREADS : 32;
        const unsigned grid =
            tl_cuda_grid(tl_ceil_div(b->N * b->C, BN_THREADS / group), b->at.sm_count);
        planes_apply_kernel<E, BACKWARD><<<grid, BN_THREADS, 0, b->at.stream>>>(
            out, x, g, mean, invstd, w, bias, sa, sb, b->N, b->C, b->S, group);
    } else {
        const unsigned grid = tl_cuda_grid(tl_ceil_div(n, BN_THREADS), b->at.sm_count);
        if (n < ((int64_t)1 << 32) - BN_THREADS * (int64_t)grid)
            flat_apply_kernel<E, BACKWARD, uint32_t><<<grid, BN_THREADS, 0, b->at.stream>>>(
                out, x, g, mean, invstd, w, bias, sa, sb, (uint32_t)n, (uint32_t)b->C,
                (uint32_t)b->S, 1.0 / (double)b->M);
        else
            flat_apply_kernel<E, BACKWARD, int64_t><<<grid, BN_THREADS, 0, b->at.stream>>>(
                out, x, g, mean, invstd, w, bias, sa, sb, n, b->C, b->S, 1.0 / (double)b->M);
    }
    return tl_cuda_check_launch(b->at.op);
}

/* ---- the table ------------------------------------------------------------------------------ */
static tl_cuda_batch_norm geometry_of(const tl_tensor *t) {
    tl_cuda_batch_norm b{};
    b.dtype = tl_cuda_dtype_of(t);
    b.N = t->shape[0], b.C = t->shape[1], b.S = 1;
    for (int d = 2; d < t->ndim; d++) b.S *= t->shape[d];
    b.M = b.N * b.S;
    return b;
}

static tl_status cuda_batch_norm(tl_tensor *out, tl_tensor *mean, tl_tensor *invstd,
                                 tl_tensor *running_mean, tl_tensor *running_var,
                                 const tl_tensor *in, const tl_tensor *weight,
                                 const tl_tensor *bias, const tl_batch_norm_args *args) {
    tl_cuda_batch_norm b = geometry_of(in);
    b.momentum = args->momentum, b.eps = args->eps, b.training = args->training;
    b.in = tl_data(in), b.out = tl_data(out);
    b.weight = tl_cuda_data(weight), b.bias = tl_cuda_data(bias);
    b.running_mean = tl_cuda_data(running_mean), b.running_var = tl_cuda_data(running_var);
    b.mean = tl_data(mean), b.invstd = tl_data(invstd);
    if (b.C == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(in, "batch_norm", &b.at));
    const bool columns = b.S < PLANE_MIN;
    tl_variant_ran(&batch_norm_variants[columns ? BN_COLUMNS : BN_PLANES], in->dtype);
    return tl_cuda_floating(b.dtype, b.at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        if (b.training)
            TL_TRY((launch_sums<E, false, MODE_STATS>(&b, columns)));
        else
            TL_TRY((launch_sums<E, false, MODE_EVAL>(&b, columns)));
        return launch_apply<E, false>(&b, columns);
    });
}

/* batch_norm_backward_reduce (INPUT false): first = sum_dy, second = sum_dy_xhat (either NULL);
   batch_norm_backward_input: first = grad_in. */
template <bool INPUT>
static tl_status cuda_batch_norm_backward(tl_tensor *first, tl_tensor *second,
                                          const tl_tensor *grad_out, const tl_tensor *in,
                                          const tl_tensor *mean, const tl_tensor *invstd,
                                          const tl_tensor *weight, const tl_tensor *sum_dy,
                                          const tl_tensor *sum_dy_xhat) {
    const char *op = INPUT ? "batch_norm_backward_input" : "batch_norm_backward_reduce";
    tl_cuda_batch_norm b = geometry_of(grad_out);
    b.grad_out = tl_data(grad_out);
    b.in = tl_cuda_data(in);
    b.mean = tl_cuda_data(mean), b.invstd = tl_cuda_data(invstd);
    b.weight = tl_cuda_data(weight);
    if (INPUT) {
        b.out = tl_data(first);
        b.in_sum_dy = tl_cuda_data(sum_dy), b.in_sum_dy_xhat = tl_cuda_data(sum_dy_xhat);
    } else {
        b.sum_dy = tl_cuda_data(first), b.sum_dy_xhat = tl_cuda_data(second);
        if (!first && !second) return TL_OK;
        if (!second) b.in = nullptr; /* sum_dy only: x is not read */
    }
    if (b.C == 0 || (INPUT && b.M == 0)) return TL_OK;
    TL_TRY(tl_cuda_where_of(grad_out, op, &b.at));
    const bool columns = b.S < PLANE_MIN;
    tl_variant_ran(&batch_norm_variants[(INPUT ? 4 : 2) + (columns ? BN_COLUMNS : BN_PLANES)],
                   grad_out->dtype);
    return tl_cuda_floating(b.dtype, b.at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        if (INPUT) return launch_apply<E, true>(&b, columns);
        return launch_sums<E, true, MODE_GRADS>(&b, columns);
    });
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(batch_norm, TL_DTYPES_FLOATING, batch_norm, cuda_batch_norm),
    TL_KERNEL(batch_norm_backward_reduce, TL_DTYPES_FLOATING, batch_norm_backward,
              cuda_batch_norm_backward<false>),
    TL_KERNEL(batch_norm_backward_input, TL_DTYPES_FLOATING, batch_norm_backward,
              cuda_batch_norm_backward<true>),
};

TL_KERNEL_TABLE(tl_cuda_batch_norm_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_batch_norm_variants, TL_DEVICE_CUDA, batch_norm_variants);
