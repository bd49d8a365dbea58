/* CUDA max_pool2d, adaptive_max_pool2d and their backward with their table, the dtypes of
   cpu/pool.c: the forward as cpu/pool.c (first maximum, the last NaN wins, padding never does); the
   backward scatters each plane's gradients with one warp that adds them in output order (lanes with
   the same index add in lane order), so the sums are deterministic and equal to the CPU's. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/pool_window.h"

#define POOL_THREADS    256
#define POOL_SMEM_BYTES (48 * 1024) /* shared accumulators without an opt-in */
#define POOL_WARPS      4           /* planes per block of the backward */
#define POOL_BATCH      4           /* outputs per lane loaded at once by the backward */

/* One thread per output element; ADAPTIVE: adaptive_max_pool2d's windows (kernels/pool_window.h).
 */
template <class E, bool ADAPTIVE>
__global__ void __launch_bounds__(POOL_THREADS)
    pool_kernel(typename E::T *out, int64_t *indices, const typename E::T *in,
                const __grid_constant__ tl_window2d w, int64_t total) {
    typedef typename E::C C;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, out_size = w.out_h * w.out_w;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t plane = e / out_size, q = e - plane * out_size;
        const int64_t oh = q / w.out_w, ow = q - oh * w.out_w;
        const typename E::T *x = in + plane * w.height * w.width;
        int64_t h0, h1, dh, w0, w1, dw;
        tl_max_taps(oh, w.height, w.out_h, w.kernel_h, w.stride_h, w.pad_h, w.dilation_h, ADAPTIVE,
                    &h0, &h1, &dh);
        tl_max_taps(ow, w.width, w.out_w, w.kernel_w, w.stride_w, w.pad_w, w.dilation_w, ADAPTIVE,
                    &w0, &w1, &dw);
        int64_t best = h0 * w.width + w0;
        C max = E::load(x[best]);
        bool nan = false;
        for (int64_t ih = h0; ih < h1; ih += dh)
            for (int64_t iw = w0; iw < w1; iw += dw) {
                const C v = E::load(x[ih * w.width + iw]);
                if (v > max) max = v, best = ih * w.width + iw;
                nan |= v != v;
            }
        if (nan)
            for (int64_t ih = h0; ih < h1; ih += dh)
                for (int64_t iw = w0; iw < w1; iw += dw) {
                    const C v = E::load(x[ih * w.width + iw]);
                    if (v != v) best = ih * w.width + iw;
                }
        out[e] = x[best];
        indices[e] = best;
    }
}

/* One warp per plane: acc (shared memory, grad_in itself, or a float32 scratch plane) starts at
   zero; 32 outputs at a time, lanes sharing an index add their gradients to acc in lane order
   and the first of them writes. A is the accumulation type (float32 for 16-bit). */
template <class E, typename A, bool SHARED>
__global__ void pool_backward_kernel(typename E::T *grad_in, const typename E::T *grad_out,
                                     const int64_t *indices, int64_t planes, int64_t in_size,
                                     int64_t out_size, A *scratch) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr bool NATIVE = sizeof(A) == sizeof(typename E::T);
    const int lane = (int)threadIdx.x & 31, warp = (int)threadIdx.x >> 5;
    const int warps = (int)blockDim.x >> 5;
    for (int64_t p = (int64_t)blockIdx.x * warps + warp; p < planes;
         p += (int64_t)gridDim.x * warps) {
        typename E::T *plane = grad_in + p * in_size;
        A *acc = SHARED   ? (A *)smem_raw + (int64_t)warp * in_size
                 : NATIVE ? (A *)plane
                          : scratch + p * in_size;
        for (int64_t e = lane; e < in_size; e += 32) acc[e] = A(0);
        __syncwarp();
        const typename E::T *g = grad_out + p * out_size;
        const int64_t *at = indices + p * out_size;
        for (int64_t o0 = 0; o0 < out_size; o0 += 32 * POOL_BATCH) {
            /* the batch's indices and gradients first, so their loads overlap */
            int64_t t[POOL_BATCH];
            A v[POOL_BATCH];
#pragma unroll
            for (int k = 0; k < POOL_BATCH; k++) {
                const int64_t o = o0 + k * 32 + lane;
                /* an index outside the plane (the queued check reports it) adds 0 to element 0 */
                const int64_t index = o < out_size ? at[o] : 0;
                const bool inside = index >= 0 && index < in_size;
                t[k] = inside ? index : 0;
                v[k] = o < out_size && inside ? (A)E::load(g[o]) : A(0);
            }
#pragma unroll
            for (int k = 0; k < POOL_BATCH; k++) {
                const bool active = o0 + k * 32 + lane < out_size; /* a prefix of the lanes */
                /* indices increasing along the lanes (the usual case): no two lanes share one */
                const int64_t before = __shfl_up_sync(0xffffffffu, t[k], 1);
                if (__all_sync(0xffffffffu, !active || lane == 0 || t[k] > before)) {
                    if (active) acc[t[k]] = acc[t[k]] + v[k];
                } else {
                    const unsigned mask = __ballot_sync(0xffffffffu, active);
                    if (active) {
                        const unsigned peers = __match_any_sync(mask, (unsigned long long)t[k]);
                        A sum = acc[t[k]];
                        for (unsigned rest = peers; rest; rest &= rest - 1)
                            sum = sum + __shfl_sync(peers, v[k], __ffs(rest) - 1);
                        if (lane == __ffs(peers) - 1) acc[t[k]] = sum;
                    }
                }
                __syncwarp();
            }
        }
        if (SHARED || !NATIVE)
            for (int64_t e = lane; e < in_size; e += 32) plane[e] = E::store(acc[e]);
        __syncwarp();
    }
}

static tl_status launch_max_pool(const tl_cuda_where *at, int dtype, void *out, int64_t *indices,
                                 const void *in, const tl_window2d *w, bool adaptive) {
    return tl_cuda_floating(dtype, at->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        const int64_t total = w->batch * w->channels * w->out_h * w->out_w;
        const unsigned grid = tl_cuda_grid(tl_ceil_div(total, POOL_THREADS), at->sm_count);
        if (adaptive)
            pool_kernel<E, true><<<grid, POOL_THREADS, 0, at->stream>>>((T *)out, indices,
                                                                        (const T *)in, *w, total);
        else
            pool_kernel<E, false><<<grid, POOL_THREADS, 0, at->stream>>>((T *)out, indices,
                                                                         (const T *)in, *w, total);
        return tl_cuda_check_launch(at->op);
    });
}

static tl_status launch_max_pool_backward(const tl_cuda_where *at, int dtype, void *grad_in,
                                          const void *grad_out, const int64_t *indices,
                                          const tl_window2d *w) {
    return tl_cuda_floating(dtype, at->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        typedef typename E::C A;
        const int64_t planes = w->batch * w->channels, in_size = w->height * w->width;
        const int64_t out_size = w->out_h * w->out_w;
        const int64_t plane_bytes = in_size * (int64_t)sizeof(A);
        const int64_t fit = plane_bytes > 0 ? POOL_SMEM_BYTES / plane_bytes : POOL_WARPS;
        const int warps = fit < POOL_WARPS ? (int)fit : POOL_WARPS;
        T *gi = (T *)grad_in;
        const T *go = (const T *)grad_out;
        if (warps >= 1) {
            const unsigned grid = tl_cuda_grid(tl_ceil_div(planes, warps), at->sm_count);
            pool_backward_kernel<E, A, true>
                <<<grid, 32 * warps, (size_t)(warps * plane_bytes), at->stream>>>(
                    gi, go, indices, planes, in_size, out_size, nullptr);
            return tl_cuda_check_launch(at->op);
        }
        /* planes too large for shared memory: accumulate in global memory */
        tl_cuda_scratch scratch;
        if (sizeof(A) != sizeof(T)) TL_TRY(scratch.get(*at, (size_t)(planes * plane_bytes)));
        const unsigned grid = tl_cuda_grid(tl_ceil_div(planes, POOL_WARPS), at->sm_count);
        pool_backward_kernel<E, A, false><<<grid, 32 * POOL_WARPS, 0, at->stream>>>(
            gi, go, indices, planes, in_size, out_size, (A *)scratch.ptr);
        return tl_cuda_check_launch(at->op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
static tl_status run_max_pool(const char *op, tl_tensor *out, tl_tensor *indices,
                              const tl_tensor *in, const tl_window2d *w, bool adaptive) {
    if (tl_numel(out) == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(out, op, &at));
    return launch_max_pool(&at, tl_cuda_dtype_of(in), tl_data(out), tl_cuda_data<int64_t>(indices),
                           tl_data(in), w, adaptive);
}

static tl_status cuda_max_pool2d(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,
                                 const tl_window2d *w) {
    return run_max_pool("max_pool2d", out, indices, in, w, false);
}

static tl_status cuda_adaptive_max_pool2d(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,
                                          const tl_window2d *w) {
    return run_max_pool("adaptive_max_pool2d", out, indices, in, w, true);
}

static tl_status cuda_max_pool2d_backward(tl_tensor *grad_in, const tl_tensor *grad_out,
                                          const tl_tensor *indices, const tl_window2d *w) {
    if (tl_numel(grad_in) == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(grad_in, "max_pool2d_backward", &at));
    return launch_max_pool_backward(&at, tl_cuda_dtype_of(grad_in), tl_data(grad_in),
                                    tl_data(grad_out), tl_cuda_data<const int64_t>(indices), w);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(max_pool2d, TL_DTYPES_FLOATING, pool, cuda_max_pool2d),
    TL_KERNEL(adaptive_max_pool2d, TL_DTYPES_FLOATING, pool, cuda_adaptive_max_pool2d),
    TL_KERNEL(max_pool2d_backward, TL_DTYPES_FLOATING, pool_backward, cuda_max_pool2d_backward),
};

TL_KERNEL_TABLE(tl_cuda_pool_table, TL_DEVICE_CUDA, entries);
