/* CUDA cross entropy forward and backward and their table, the dtypes of cpu/cross_entropy.c: a
   group of threads per row computes the log-sum-exp
   (exponentials summed in double) and the row's loss in double; one block then sums the row
   losses in a fixed order (deterministic). The backward is elementwise. Arithmetic as
   cpu/cross_entropy.c, each operation rounded on its own. The classifier's row kernel
   (linear_cross_entropy) takes a block per row, reads it as 16-byte vectors with an online
   softmax, and writes the row's gradient in place. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"

#define CE_THREADS 256

/* logits [N, K], target (int32/int64 by target_dtype) [N] */
typedef struct tl_cuda_cross_entropy {
    tl_cuda_where at;
    int dtype, target_dtype;
    int64_t N, K;
    double smoothing;
    const void *logits, *target;
    void *loss;            /* forward: one element of dtype */
    void *lse;             /* float32 (float64 for float64 logits); read by the backward */
    const void *grad_loss; /* backward: one element of dtype */
    void *grad;            /* backward: [N, K] */
} tl_cuda_cross_entropy;

template <typename C> struct nan_max {
    /* the CPU's `if (v > max || v != v) max = v`: any NaN gives NaN */
    __device__ C operator()(C a, C b) const { return a != a ? a : b != b ? b : b > a ? b : a; }
};

__device__ __forceinline__ int64_t target_at(const void *target, bool wide, int64_t i) {
    return wide ? ((const int64_t *)target)[i] : (int64_t)((const int32_t *)target)[i];
}

template <class E>
__global__ void __launch_bounds__(CE_THREADS)
    rows_kernel(const typename E::T *logits, const void *target, bool wide_target,
                typename E::C *lse, double *row_loss, int64_t N, int64_t K, double smoothing,
                int group) {
    typedef typename E::C C;
    __shared__ C smem_max[32];
    __shared__ tl_sum2 smem_sums[32];
    const int lane = (int)threadIdx.x % group;
    tl_for_each_group_row(N, group, [&](int64_t i, bool valid) {
        const typename E::T *row = logits + (valid ? i : 0) * K;
        C m = -INFINITY;
        if (valid)
            for (int64_t k = lane; k < K; k += group) m = nan_max<C>()(m, E::load(row[k]));
        m = tl_group_allreduce(m, nan_max<C>(), (C)-INFINITY, smem_max, group);
        tl_sum2 s = {0, 0}; /* a: sum of exp(x - m), b: sum of x */
        if (valid)
            for (int64_t k = lane; k < K; k += group) {
                const C v = E::load(row[k]);
                s.a += (double)tl_exp(tl_sub(v, m));
                s.b += (double)v;
            }
        s = tl_group_reduce(s, tl_sum2_merge(), tl_sum2{0, 0}, smem_sums, group);
        if (valid && lane == 0) {
            const double l = tl_add((double)m, log(s.a));
            lse[i] = (C)l;
            const int64_t t = target_at(target, wide_target, i);
            /* a target out of range (the queued check reports it) makes the row's loss NaN */
            const double picked = t >= 0 && t < K ? (double)E::load(row[t]) : NAN;
            const double keep = tl_sub(1.0, smoothing), spread = tl_div(smoothing, (double)K);
            row_loss[i] = tl_sub(tl_sub(l, tl_mul(keep, picked)), tl_mul(spread, s.b));
        }
    });
}

/* loss = the row losses summed in a fixed order, over N */
template <class E>
__global__ void __launch_bounds__(CE_THREADS)
    total_kernel(typename E::T *loss, const double *row_loss, int64_t N) {
    __shared__ double smem[32];
    double total = 0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) total += row_loss[i];
    total = tl_block_reduce(total, tl_sum_merge(), 0.0, smem);
    if (threadIdx.x == 0) *loss = E::store((typename E::C)tl_div(total, (double)N));
}

static tl_status launch_cross_entropy(const tl_cuda_cross_entropy *c) {
    return tl_cuda_floating(c->dtype, c->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        typedef typename E::C C;
        tl_cuda_scratch scratch;
        TL_TRY(scratch.get(c->at, (size_t)c->N * sizeof(double)));
        double *row_loss = (double *)scratch.ptr;
        if (c->N > 0) {
            const int group = c->K >= 1024 ? CE_THREADS : 32;
            const unsigned grid =
                tl_cuda_grid(tl_ceil_div(c->N, CE_THREADS / group), c->at.sm_count);
            rows_kernel<E><<<grid, CE_THREADS, 0, c->at.stream>>>(
                (const T *)c->logits, c->target, c->target_dtype == TL_CUDA_I64, (C *)c->lse,
                row_loss, c->N, c->K, c->smoothing, group);
            TL_TRY(tl_cuda_check_launch(c->at.op));
        }
        total_kernel<E><<<1, CE_THREADS, 0, c->at.stream>>>((T *)c->loss, row_loss, c->N);
        return tl_cuda_check_launch(c->at.op);
    });
}

/* grad[i, k] = (exp(x - lse[i]) - s / K - (1 - s) [k == target[i]]) * grad_loss / N */
template <class E>
__global__ void __launch_bounds__(CE_THREADS)
    backward_kernel(typename E::T *grad, const typename E::T *grad_loss,
                    const typename E::T *logits, const typename E::C *lse, const void *target,
                    bool wide_target, int64_t N, int64_t K, double smoothing) {
    typedef typename E::C C;
    const C scale = (C)tl_div((double)E::load(*grad_loss), (double)N);
    const C off = (C)tl_div(smoothing, (double)K), on = (C)tl_sub(1.0, smoothing);
    const int64_t total = N * K, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t i = e / K, k = e - i * K;
        C v = tl_sub(tl_exp(tl_sub(E::load(logits[e]), lse[i])), off);
        if (k == target_at(target, wide_target, i)) v = tl_sub(v, on);
        grad[e] = E::store(tl_mul(v, scale));
    }
}

static tl_status launch_cross_entropy_backward(const tl_cuda_cross_entropy *c) {
    return tl_cuda_floating(c->dtype, c->at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        typedef typename E::C C;
        const unsigned grid = tl_cuda_grid(tl_ceil_div(c->N * c->K, CE_THREADS), c->at.sm_count);
        backward_kernel<E><<<grid, CE_THREADS, 0, c->at.stream>>>(
            (T *)c->grad, (const T *)c->grad_loss, (const T *)c->logits, (const C *)c->lse,
            c->target, c->target_dtype == TL_CUDA_I64, c->N, c->K, c->smoothing);
        return tl_cuda_check_launch(c->at.op);
    });
}

/* ---- the classifier's rows (linear_cross_entropy) ------------------------------------------ */
/* A row's softmax state: its max m, the sum s of exp(x - m), and the sum of x (label smoothing's).
   Two states merge by rescaling each sum to the larger max (online softmax), so one read of the
   row gives all three; a NaN anywhere makes m, and then s, NaN. */
struct softmax_state {
    double m, s, sum_x;
};

/* exp(a - m), 1 where a == m (both -inf: no element yet) */
__device__ __forceinline__ double rescale(double a, double m) {
    return a == m ? 1.0 : exp(a - m);
}

struct softmax_merge {
    __device__ softmax_state operator()(softmax_state x, softmax_state y) const {
        const double m = nan_max<double>()(x.m, y.m);
        return softmax_state{m, x.s * rescale(x.m, m) + y.s * rescale(y.m, m), x.sum_x + y.sum_x};
    }
};

/* A block per row of logits [N, L] (its first K columns the classes; L a whole number of 16-byte
   vectors), grid-stride. Read 1: each thread keeps an online softmax state over its vectors (in
   the compute type C), the block merges them in double in a fixed order (deterministic): lse =
   m + log(s), the loss lse - (1 - s) x[t] - s/K sum(x) (0 on an ignored row). Read 2, with
   write_grad: the row becomes (exp(x - lse) - s/K - (1 - s) [k == t]) * scale, the padding
   columns 0, a vector at a time. (At 50k bf16 classes on an H200: 326 us a chunk of 2624 rows, 2.4
   TB/s; 1024 threads a row, to keep the rows in flight within L2 for the second read, was slower.)
 */
template <class E>
__global__ void __launch_bounds__(CE_THREADS)
    rows_grad_kernel(typename E::T *logits, const void *target, bool wide_target,
                     typename E::C *row_loss, const typename E::C *scale, int64_t N, int64_t L,
                     int64_t K, int64_t first_class, double smoothing, bool has_ignore,
                     int64_t ignore_index, bool write_grad) {
    typedef typename E::T T;
    typedef typename E::C C;
    constexpr int W = (int)(16 / sizeof(T));
    __shared__ softmax_state smem[32];
    const int64_t vectors = L / W;
    for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
        uint4 *row = (uint4 *)(logits + i * L);
        C m = -INFINITY, sum = 0, sum_x = 0;
        for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
            T e[W];
            const uint4 bits = row[j];
            memcpy(e, &bits, sizeof bits);
            C v[W], top = m;
#pragma unroll
            for (int w = 0; w < W; w++) {
                v[w] = j * W + w < K ? E::load(e[w]) : (C)-INFINITY;
                top = nan_max<C>()(top, v[w]);
            }
            sum = top == m ? sum : sum * tl_exp(m - top);
            m = top;
#pragma unroll
            for (int w = 0; w < W; w++)
                if (j * W + w < K) sum += tl_exp(v[w] - m), sum_x += v[w];
        }
        softmax_state state{(double)m, (double)sum, (double)sum_x};
        state = tl_group_allreduce(state, softmax_merge(), softmax_state{-INFINITY, 0.0, 0.0}, smem,
                                   (int)blockDim.x);
        const double lse = state.m + log(state.s);
        const int64_t given = target_at(target, wide_target, i), t = given - first_class;
        const bool ignored = has_ignore && given == ignore_index;
        const T *elements = (const T *)row;
        if (threadIdx.x == 0) {
            /* a target out of range (the queued check reports it) makes the row's loss NaN */
            const double picked = t >= 0 && t < K ? (double)E::load(elements[t]) : NAN;
            row_loss[i] =
                ignored
                    ? (C)0
                    : (C)(lse - (1.0 - smoothing) * picked - smoothing / (double)K * state.sum_x);
        }
        if (!write_grad) continue;
        /* every thread has read the target's logit before any is overwritten */
        __syncthreads();
        const C l = (C)lse, g = ignored ? (C)0 : *scale;
        const C off = (C)(smoothing / (double)K), on = (C)(1.0 - smoothing);
        for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
            T e[W];
            const uint4 bits = row[j];
            memcpy(e, &bits, sizeof bits);
#pragma unroll
            for (int w = 0; w < W; w++) {
                const int64_t k = j * W + w;
                C d = 0;
                if (k < K) {
                    d = tl_exp(E::load(e[w]) - l) - off;
                    if (k == t) d -= on;
                }
                e[w] = E::store(d * g);
            }
            uint4 out;
            memcpy(&out, e, sizeof out);
            row[j] = out;
        }
    }
}

static tl_status cuda_cross_entropy_rows(tl_tensor *row_loss, tl_tensor *logits,
                                         const tl_tensor *target, const tl_tensor *scale,
                                         const tl_cross_entropy_rows_args *a) {
    const int64_t N = logits->shape[0], L = logits->shape[1];
    const size_t size = tl_dtype_size(logits->dtype);
    if ((uintptr_t)tl_data(logits) % 16 || (size_t)L * size % 16)
        return tl_error(TL_ERR_ARGUMENT,
                        "linear_cross_entropy: the CUDA row kernel takes rows of whole 16-byte "
                        "vectors on a 16-byte boundary, got rows of %lld %s",
                        (long long)L, tl_dtype_name(logits->dtype));
    if (N == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(row_loss, "linear_cross_entropy", &at));
    const bool wide = tl_cuda_dtype_of(target) == TL_CUDA_I64;
    return tl_cuda_floating(tl_cuda_dtype_of(logits), at.op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        typedef typename E::C C;
        const unsigned grid = tl_cuda_grid(N, at.sm_count);
        rows_grad_kernel<E><<<grid, CE_THREADS, 0, at.stream>>>(
            (T *)tl_data(logits), tl_data(target), wide, (C *)tl_data(row_loss),
            (const C *)tl_data(scale), N, L, a->classes, a->first_class, a->label_smoothing,
            a->has_ignore, a->ignore_index, a->write_grad);
        return tl_cuda_check_launch(at.op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
/* The rows of logits [N, K] with their targets, as forward and backward both read them. */
static tl_cuda_cross_entropy describe_rows(const tl_tensor *logits, const tl_tensor *target,
                                           double smoothing) {
    tl_cuda_cross_entropy c{};
    c.dtype = tl_cuda_dtype_of(logits);
    c.target_dtype = tl_cuda_dtype_of(target);
    c.N = logits->shape[0];
    c.K = logits->shape[1];
    c.smoothing = smoothing;
    c.logits = tl_data(logits);
    c.target = tl_data(target);
    return c;
}

static tl_status cuda_cross_entropy(tl_tensor *loss, tl_tensor *lse, const tl_tensor *logits,
                                    const tl_tensor *target, double smoothing) {
    tl_cuda_cross_entropy c = describe_rows(logits, target, smoothing);
    c.loss = tl_data(loss);
    c.lse = tl_data(lse);
    TL_TRY(tl_cuda_where_of(loss, "cross_entropy", &c.at));
    return launch_cross_entropy(&c);
}

static tl_status cuda_cross_entropy_backward(tl_tensor *grad_logits, const tl_tensor *grad_loss,
                                             const tl_tensor *logits, const tl_tensor *lse,
                                             const tl_tensor *target, double smoothing) {
    tl_cuda_cross_entropy c = describe_rows(logits, target, smoothing);
    c.lse = tl_data(lse);
    c.grad_loss = tl_data(grad_loss);
    c.grad = tl_data(grad_logits);
    if (c.N == 0 || c.K == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(grad_logits, "cross_entropy_backward", &c.at));
    return launch_cross_entropy_backward(&c);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(cross_entropy, TL_DTYPES_FLOATING, cross_entropy, cuda_cross_entropy),
    TL_KERNEL(cross_entropy_backward, TL_DTYPES_FLOATING, cross_entropy_backward,
              cuda_cross_entropy_backward),
    TL_KERNEL(linear_cross_entropy, TL_DTYPES_FLOATING, cross_entropy_rows,
              cuda_cross_entropy_rows),
};

TL_KERNEL_TABLE(tl_cuda_cross_entropy_table, TL_DEVICE_CUDA, entries);
