/* CUDA kernels of the cumulative ops along one dim (family CUMULATIVE): cumprod, logcumsumexp,
   cummax and cummin, the math of cpu/cumulative.c (floating lines fold in double through
   kernels/reduction.h, integers and bool in int64 / uint64, each value rounded once): a thread
   walks each line in order, as many lines at once as the grid holds. */
#include <type_traits>

#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/reduction.h"

#define CUM_THREADS 256

enum cum_kind { CUM_PROD, CUM_LSE, CUM_MAX, CUM_MIN };

/* The lines: positions over x's dims but dim (tensors: 0 in, 1 values, 2 indices), len elements
   each, steps apart along dim. */
struct cum_lines {
    tl_cuda_positions pos;
    int64_t len, step_in, step_out, step_idx;
};

/* cummax (cummin): an element equal to the running extreme (ties) or a NaN takes its place, so a
   NaN stays with the latest NaN's index, as torch's */
__device__ __forceinline__ bool takes_extreme(double x, double current, bool max) {
    return x != x || (max ? x >= current : x <= current);
}
__device__ __forceinline__ bool takes_extreme(int64_t x, int64_t current, bool max) {
    return max ? x >= current : x <= current;
}

template <class E, int K>
__global__ void __launch_bounds__(CUM_THREADS)
    cumulative_lines(const typename E::T *in, void *values, int64_t *indices,
                     const __grid_constant__ cum_lines c) {
    constexpr bool floating = std::is_floating_point<typename E::V>::value;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < c.pos.count;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        tl_position_offsets<3>(c.pos, o, off);
        const typename E::T *x = in + off[0];
        if constexpr (K == CUM_MAX || K == CUM_MIN) {
            typename E::T *y = (typename E::T *)values + off[1];
            int64_t *idx = indices + off[2];
            typename E::V extreme = 0;
            int64_t at = 0;
            for (int64_t r = 0; r < c.len; r++) {
                const typename E::V v = E::wide(x[r * c.step_in]);
                if (r == 0 || takes_extreme(v, extreme, K == CUM_MAX)) extreme = v, at = r;
                y[r * c.step_out] = E::from_wide(extreme);
                idx[r * c.step_idx] = at;
            }
        } else if constexpr (!floating) { /* cumprod of integers and bool: int64, wrapping */
            int64_t *y = (int64_t *)values + off[1];
            tl_ifold s;
            tl_ifold_prod_init(&s);
            for (int64_t r = 0; r < c.len; r++) {
                tl_ifold_prod_step(&s, E::wide(x[r * c.step_in]));
                y[r * c.step_out] = tl_ifold_prod_finish(&s, r + 1);
            }
        } else {
            typename E::T *y = (typename E::T *)values + off[1];
            tl_fold s;
            if constexpr (K == CUM_PROD)
                tl_fold_prod_init(&s, 0);
            else
                tl_fold_logsumexp_init(&s, 0);
            for (int64_t r = 0; r < c.len; r++) {
                const double v = E::wide(x[r * c.step_in]);
                double out;
                if constexpr (K == CUM_PROD) {
                    tl_fold_prod_step(&s, v, 0);
                    out = tl_fold_prod_finish(&s, r + 1, 0);
                } else {
                    tl_fold_logsumexp_step(&s, v, 0);
                    out = tl_fold_logsumexp_finish(&s, r + 1, 0);
                }
                y[r * c.step_out] = E::from_wide(out);
            }
        }
    }
}

/* out[0] the values (out[1] the int64 indices of cummax / cummin), in[0] x, args->dim the dim */
template <int K, unsigned Set>
static tl_status run(const char *op, tl_tensor *const *out, const tl_tensor *const *in,
                     const tl_op_args *args) {
    const tl_tensor *x = in[0];
    const bool indexed = K == CUM_MAX || K == CUM_MIN;
    const int dim = args->dim;
    cum_lines c{};
    c.len = x->shape[dim];
    c.step_in = x->strides[dim];
    c.step_out = out[0]->strides[dim];
    c.step_idx = indexed ? out[1]->strides[dim] : 0;
    tl_cuda_positions_of(&c.pos, x, dim, {x, out[0], indexed ? out[1] : nullptr});
    if (c.pos.count == 0 || c.len == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(x, op, &at));
    return tl_cuda_dispatch<Set>(tl_cuda_dtype_of(x), op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        const unsigned grid = tl_cuda_grid(tl_ceil_div(c.pos.count, CUM_THREADS), at.sm_count);
        cumulative_lines<E, K><<<grid, CUM_THREADS, 0, at.stream>>>(
            (const typename E::T *)tl_data(x), tl_data(out[0]),
            indexed ? tl_cuda_data<int64_t>(out[1]) : nullptr, c);
        return tl_cuda_check_launch(op);
    });
}

static tl_status cuda_cumprod(tl_tensor *const *out, const tl_tensor *const *in,
                              const tl_op_args *args) {
    return run<CUM_PROD, TL_CUDA_ALL>("cumprod", out, in, args);
}
static tl_status cuda_logcumsumexp(tl_tensor *const *out, const tl_tensor *const *in,
                                   const tl_op_args *args) {
    return run<CUM_LSE, TL_CUDA_FLOATING>("logcumsumexp", out, in, args);
}
static tl_status cuda_cummax(tl_tensor *const *out, const tl_tensor *const *in,
                             const tl_op_args *args) {
    return run<CUM_MAX, TL_CUDA_ALL>("cummax", out, in, args);
}
static tl_status cuda_cummin(tl_tensor *const *out, const tl_tensor *const *in,
                             const tl_op_args *args) {
    return run<CUM_MIN, TL_CUDA_ALL>("cummin", out, in, args);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(cumprod, TL_DTYPES_ALL, tensors, cuda_cumprod),
    TL_KERNEL(logcumsumexp, TL_DTYPES_FLOATING, tensors, cuda_logcumsumexp),
    TL_KERNEL(cummax, TL_DTYPES_ALL, tensors, cuda_cummax),
    TL_KERNEL(cummin, TL_DTYPES_ALL, tensors, cuda_cummin),
};

TL_KERNEL_TABLE(tl_cuda_cumulative_table, TL_DEVICE_CUDA, entries);
