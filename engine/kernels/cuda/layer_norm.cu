/* CUDA layer norm forward (of x, or of x + residual: add_layer_norm) and its table, the dtypes of
   cpu/layer_norm.c: a group of threads per row (a warp, or a block for long rows), or a warp per
   row held in registers, with the row's sums in double as cpu/layer_norm.c. Elementwise
   arithmetic rounds each operation on its own, as the CPU does. Mixed precision: a float32 row
   with its residual and/or out in a 16-bit type (widened on load, rounded once on store). */
#include "kernels/cuda/layer_norm.cuh"

/* The forward's paths. */
enum {
    PATH_VECTOR_LAYER_NORM,
    PATH_ROWS_LAYER_NORM,
    PATH_VECTOR_ADD,
    PATH_ROWS_ADD,
    PATH_MIXED_LAYER_NORM,
    PATH_MIXED_ADD
};
#define MIXED_CONDITION                                                                            \
    "a float32 row with a bfloat16 or float16 residual and/or out (mixed precision), on either "   \
    "path above"

#define VECTOR_CONDITION                                                                           \
    "rows of whole 16-byte vectors on 16-byte boundaries, at most 8 vectors a lane (D <= 1024 "    \
    "float32, 2048 bfloat16/float16, 512 float64): a warp per row held in registers, one read "    \
    "and one write"
#define ROWS_CONDITION "other rows: a group of threads per row reading it once for each sum"
static const tl_kernel_variant paths[] = {
    TL_VARIANT(layer_norm, TL_DTYPES_FLOATING, "vector", VECTOR_CONDITION),
    TL_VARIANT(layer_norm, TL_DTYPES_FLOATING, "rows", ROWS_CONDITION),
    TL_VARIANT(add_layer_norm, TL_DTYPES_FLOATING, "vector", VECTOR_CONDITION),
    TL_VARIANT(add_layer_norm, TL_DTYPES_FLOATING, "rows", ROWS_CONDITION),
    TL_VARIANT(layer_norm, TL_DTYPES_F32, "mixed", MIXED_CONDITION),
    TL_VARIANT(add_layer_norm, TL_DTYPES_F32, "mixed", MIXED_CONDITION),
};

/* With a residual, each thread first writes its elements of the row's sum s = in + residual
   (rounded to T) and then reads them back as the row: a thread reads only what it wrote. */
template <class E, class B>
__global__ void __launch_bounds__(LN_THREADS)
    forward_kernel(tl_ln_operand<E, B> out, typename E::T *sum_out, typename E::C *mean,
                   typename E::C *rstd, const typename E::T *in, tl_ln_operand<E, B> residual,
                   const typename E::T *weight, const typename E::T *bias, int64_t rows, int64_t D,
                   double eps, int group) {
    typedef typename E::C C;
    typedef typename E::T T;
    __shared__ double smem[32];
    const int lane = (int)threadIdx.x % group;
    tl_for_each_group_row(rows, group, [&](int64_t r, bool valid) {
        const int64_t base = (valid ? r : 0) * D;
        const T *x = in + base;
        if (residual.p && valid) {
            for (int64_t j = lane; j < D; j += group)
                sum_out[base + j] = E::store(tl_add(E::load(x[j]), residual.load(base + j)));
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
        for (int64_t j = lane; j < D; j += group) {
            C v = tl_mul(tl_sub(E::load(x[j]), m), s);
            if (weight) v = tl_mul(v, E::load(weight[j]));
            if (bias) v = tl_add(v, E::load(bias[j]));
            out.store(base + j, v);
        }
    });
}

/* The forward with the row in registers: a warp per row, lane l holding the row's vectors l,
   l + 32, ... (NV at most; W elements each, 16 bytes of the stream's type); with a residual,
   s = in + residual is rounded to T, written, and normalized as stored. The sums are in double
   and the elementwise arithmetic as forward_kernel's. */
template <class E, class B, int NV>
__global__ void __launch_bounds__(LN_THREADS)
    forward_vector_kernel(tl_ln_operand<E, B> out, typename E::T *sum_out, typename E::C *mean,
                          typename E::C *rstd, const typename E::T *in,
                          tl_ln_operand<E, B> residual, const typename E::T *weight,
                          const typename E::T *bias, int64_t rows, int64_t D, double eps) {
    typedef typename E::C C;
    typedef typename E::T T;
    constexpr int W = (int)(16 / sizeof(T));
    const tl_ln_operand<E, B> x_in = tl_ln_row<E, B>(in, false),
                              sum = tl_ln_row<E, B>(sum_out, false);
    const int lane = (int)threadIdx.x % 32;
    const int64_t vectors = D / W, warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
        const int64_t base = r * D;
        C v[NV][W];
        double total = 0;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int64_t at = lane + 32 * (int64_t)k;
            if (at >= vectors) break;
            x_in.load_vector(base + at * W, v[k]);
            if (residual.p) {
                C add[W];
                residual.load_vector(base + at * W, add);
#pragma unroll
                for (int w = 0; w < W; w++) v[k][w] = E::load(E::store(tl_add(v[k][w], add[w])));
                sum.store_vector(base + at * W, v[k]);
            }
#pragma unroll
            for (int w = 0; w < W; w++) total += (double)v[k][w];
        }
        total = tl_group_allreduce(total, tl_sum_merge(), 0.0, (double *)nullptr, 32);
        const double mu = tl_div(total, (double)D);
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
            C y[W];
#pragma unroll
            for (int w = 0; w < W; w++) {
                const int64_t j = at * W + w;
                y[w] = tl_mul(tl_sub(v[k][w], m), s);
                if (weight) y[w] = tl_mul(y[w], E::load(weight[j]));
                if (bias) y[w] = tl_add(y[w], E::load(bias[j]));
            }
            out.store_vector(base + at * W, y);
        }
    }
}

bool tl_layer_norm_vector_rows(const tl_cuda_layer_norm *l, int *nv) {
    const size_t size = tl_dtype_size((tl_dtype)l->dtype);
    const void *ptrs[] = {l->in,  l->residual, l->weight,   l->bias,         l->out,
                          l->sum, l->grad_out, l->grad_sum, l->grad_residual};
    for (const void *p : ptrs)
        if ((uintptr_t)p % 16) return false;
    if ((size_t)l->D * size % 16) return false;
    const int64_t per_lane = tl_ceil_div((int64_t)((size_t)l->D * size / 16), 32);
    if (per_lane > 8 || per_lane < 1) return false;
    /* 6 for 5 or 6 (D = 768 float32: 6 a lane): registers for no empty vector, more warps an SM */
    *nv = per_lane <= 1 ? 1 : per_lane <= 2 ? 2 : per_lane <= 4 ? 4 : per_lane <= 6 ? 6 : 8;
    return true;
}

static tl_status launch_forward(const tl_cuda_layer_norm *l, bool vector, int nv) {
    return tl_layer_norm_types(l, [&](auto e, auto b) -> tl_status {
        typedef decltype(e) E;
        typedef decltype(b) B;
        typedef typename E::T T;
        typedef typename E::C C;
        const tl_ln_operand<E, B> out = tl_ln_row<E, B>(l->out, l->out_branch);
        const tl_ln_operand<E, B> residual = tl_ln_row<E, B>(l->residual, l->residual_branch);
        if (!vector) {
            const int group = tl_layer_norm_row_group(l->D);
            const unsigned grid =
                tl_cuda_grid(tl_ceil_div(l->rows, LN_THREADS / group), l->at.sm_count);
            forward_kernel<E, B><<<grid, LN_THREADS, 0, l->at.stream>>>(
                out, (T *)l->sum, (C *)l->mean, (C *)l->rstd, (const T *)l->in, residual,
                (const T *)l->weight, (const T *)l->bias, l->rows, l->D, l->eps, group);
            return tl_cuda_check_launch(l->at.op);
        }
        const unsigned grid = tl_cuda_grid(tl_ceil_div(l->rows, LN_THREADS / 32), l->at.sm_count);
        auto kernel = nv == 1   ? forward_vector_kernel<E, B, 1>
                      : nv == 2 ? forward_vector_kernel<E, B, 2>
                      : nv == 4 ? forward_vector_kernel<E, B, 4>
                      : nv == 6 ? forward_vector_kernel<E, B, 6>
                                : forward_vector_kernel<E, B, 8>;
        kernel<<<grid, LN_THREADS, 0, l->at.stream>>>(
            out, (T *)l->sum, (C *)l->mean, (C *)l->rstd, (const T *)l->in, residual,
            (const T *)l->weight, (const T *)l->bias, l->rows, l->D, l->eps);
        return tl_cuda_check_launch(l->at.op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
static tl_status run_layer_norm(const char *op, tl_tensor *out, tl_tensor *sum, tl_tensor *mean,
                                tl_tensor *rstd, const tl_tensor *in, const tl_tensor *residual,
                                const tl_tensor *weight, const tl_tensor *bias, double eps) {
    tl_cuda_layer_norm l = tl_layer_norm_rows_of(in);
    l.eps = eps;
    l.in = tl_data(in);
    l.residual = tl_cuda_data(residual);
    l.weight = tl_cuda_data(weight);
    l.bias = tl_cuda_data(bias);
    l.out = tl_data(out);
    l.sum = tl_cuda_data(sum);
    l.mean = tl_data(mean);
    l.rstd = tl_data(rstd);
    l.residual_branch = tl_layer_norm_branch(&l, residual);
    l.out_branch = tl_layer_norm_branch(&l, out);
    if (l.rows == 0) return TL_OK;
    TL_TRY(tl_cuda_where_of(in, op, &l.at));
    int nv = 0;
    const bool vector = tl_layer_norm_vector_rows(&l, &nv);
    const int path = residual ? (vector ? PATH_VECTOR_ADD : PATH_ROWS_ADD)
                              : (vector ? PATH_VECTOR_LAYER_NORM : PATH_ROWS_LAYER_NORM);
    tl_variant_ran(&paths[path], (tl_dtype)l.dtype);
    if (l.branch != l.dtype)
        tl_variant_ran(&paths[residual ? PATH_MIXED_ADD : PATH_MIXED_LAYER_NORM],
                       (tl_dtype)l.dtype);
    return launch_forward(&l, vector, nv);
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

static const tl_kernel_entry entries[] = {
    TL_KERNEL(layer_norm, TL_DTYPES_FLOATING, layer_norm, cuda_layer_norm),
    TL_KERNEL(add_layer_norm, TL_DTYPES_FLOATING, layer_norm, cuda_add_layer_norm),
};

TL_KERNEL_TABLE(tl_cuda_layer_norm_table, TL_DEVICE_CUDA, entries);
TL_VARIANT_TABLE(tl_cuda_layer_norm_variants, TL_DEVICE_CUDA, paths);
