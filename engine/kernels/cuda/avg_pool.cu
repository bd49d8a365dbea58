/* CUDA avg_pool2d and adaptive_avg_pool2d with their table, the dtypes of cpu/avg_pool.c: the
   forward one thread per output (the windows of kernels/pool_window.h); the backward one thread
   per input element, gathering the gradients of the outputs whose windows hold it (no atomics:
   deterministic), summed in the compute type. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/pool_window.h"

#define AVG_THREADS 256

/* The window of output o along one axis of a (rows or columns). */
struct avg_axis {
    int64_t in, out, kernel, stride, pad;
};

__device__ __forceinline__ void axis_span(const avg_axis &a, bool adaptive, bool count_pad,
                                          int64_t o, int64_t *start, int64_t *end, int64_t *count) {
    tl_avg_span(o, a.in, a.out, a.kernel, a.stride, a.pad, adaptive, count_pad, start, end, count);
}

/* The first output whose window ends past i (windows' ends never decrease along the axis). */
__device__ __forceinline__ int64_t first_covering(const avg_axis &a, bool adaptive, int64_t i) {
    int64_t lo = 0, hi = a.out;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        int64_t s, e, c;
        axis_span(a, adaptive, false, mid, &s, &e, &c);
        if (e > i)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

template <class E>
__global__ void __launch_bounds__(AVG_THREADS)
    avg_kernel(typename E::T *out, const typename E::T *in,
               const __grid_constant__ tl_avg_window2d a, int64_t total) {
    typedef typename E::C C;
    const tl_window2d &w = a.window;
    const avg_axis rows = {w.height, w.out_h, w.kernel_h, w.stride_h, w.pad_h};
    const avg_axis cols = {w.width, w.out_w, w.kernel_w, w.stride_w, w.pad_w};
    const int64_t step = (int64_t)gridDim.x * blockDim.x, out_size = w.out_h * w.out_w;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        const int64_t plane = e / out_size, q = e - plane * out_size;
        const int64_t oh = q / w.out_w, ow = q - oh * w.out_w;
        const typename E::T *x = in + plane * w.height * w.width;
        int64_t h0, h1, ch, w0, w1, cw;
        axis_span(rows, a.adaptive, a.count_include_pad, oh, &h0, &h1, &ch);
        axis_span(cols, a.adaptive, a.count_include_pad, ow, &w0, &w1, &cw);
        C sum = C(0);
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) sum += E::load(x[ih * w.width + iw]);
        const int64_t divisor = a.divisor > 0 ? a.divisor : ch * cw;
        out[e] = E::store(sum / (C)divisor);
    }
}

template <class E>
__global__ void __launch_bounds__(AVG_THREADS)
    avg_backward_kernel(typename E::T *grad_in, const typename E::T *grad_out,
                        const __grid_constant__ tl_avg_window2d a, int64_t total) {
    typedef typename E::C C;
    const tl_window2d &w = a.window;
    const avg_axis rows = {w.height, w.out_h, w.kernel_h, w.stride_h, w.pad_h};
    const avg_axis cols = {w.width, w.out_w, w.kernel_w, w.stride_w, w.pad_w};
    const int64_t step = (int64_t)gridDim.x * blockDim.x, in_size = w.height * w.width;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        const int64_t plane = e / in_size, q = e - plane * in_size;
        const int64_t ih = q / w.width, iw = q - ih * w.width;
        const typename E::T *g = grad_out + plane * w.out_h * w.out_w;
        const int64_t oh0 = first_covering(rows, a.adaptive, ih);
        const int64_t ow0 = first_covering(cols, a.adaptive, iw);
        C sum = C(0);
        for (int64_t oh = oh0; oh < w.out_h; oh++) {
            int64_t h0, h1, ch;
            axis_span(rows, a.adaptive, a.count_include_pad, oh, &h0, &h1, &ch);
            if (h0 > ih) break;
            for (int64_t ow = ow0; ow < w.out_w; ow++) {
                int64_t w0, w1, cw;
                axis_span(cols, a.adaptive, a.count_include_pad, ow, &w0, &w1, &cw);
                if (w0 > iw) break;
                const int64_t divisor = a.divisor > 0 ? a.divisor : ch * cw;
                sum += E::load(g[oh * w.out_w + ow]) / (C)divisor;
            }
        }
        grad_in[e] = E::store(sum);
    }
}

static tl_status launch_avg(const tl_cuda_where *at, int dtype, void *dst, const void *src,
                            const tl_avg_window2d *a, bool backward) {
    return tl_cuda_floating(dtype, at->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        const tl_window2d &w = a->window;
        const int64_t planes = w.batch * w.channels;
        const int64_t total = planes * (backward ? w.height * w.width : w.out_h * w.out_w);
        const unsigned grid = tl_cuda_grid(tl_ceil_div(total, AVG_THREADS), at->sm_count);
        if (backward)
            avg_backward_kernel<E>
                <<<grid, AVG_THREADS, 0, at->stream>>>((T *)dst, (const T *)src, *a, total);
        else
            avg_kernel<E>
                <<<grid, AVG_THREADS, 0, at->stream>>>((T *)dst, (const T *)src, *a, total);
        return tl_cuda_check_launch(at->op);
    });
}

static tl_status run_avg(const char *op, tl_tensor *dst, const tl_tensor *src,
                         const tl_avg_window2d *a, bool backward) {
    if (tl_numel(dst) == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(dst, op, &at));
    return launch_avg(&at, tl_cuda_dtype_of(src), tl_data(dst), tl_data(src), a, backward);
}

/* ---- the table -------------------------------------------------------------------------- */
static tl_status cuda_avg_pool2d(tl_tensor *dst, const tl_tensor *src, const tl_avg_window2d *a) {
    return run_avg("avg_pool2d", dst, src, a, false);
}
static tl_status cuda_avg_pool2d_backward(tl_tensor *dst, const tl_tensor *src,
                                          const tl_avg_window2d *a) {
    return run_avg("avg_pool2d_backward", dst, src, a, true);
}
static tl_status cuda_adaptive_avg_pool2d(tl_tensor *dst, const tl_tensor *src,
                                          const tl_avg_window2d *a) {
    return run_avg("adaptive_avg_pool2d", dst, src, a, false);
}
static tl_status cuda_adaptive_avg_pool2d_backward(tl_tensor *dst, const tl_tensor *src,
                                                   const tl_avg_window2d *a) {
    return run_avg("adaptive_avg_pool2d_backward", dst, src, a, true);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(avg_pool2d, TL_DTYPES_FLOATING, avg_pool, cuda_avg_pool2d),
    TL_KERNEL(avg_pool2d_backward, TL_DTYPES_FLOATING, avg_pool, cuda_avg_pool2d_backward),
    TL_KERNEL(adaptive_avg_pool2d, TL_DTYPES_FLOATING, avg_pool, cuda_adaptive_avg_pool2d),
    TL_KERNEL(adaptive_avg_pool2d_backward, TL_DTYPES_FLOATING, avg_pool,
              cuda_adaptive_avg_pool2d_backward),
};

TL_KERNEL_TABLE(tl_cuda_avg_pool_table, TL_DEVICE_CUDA, entries);
