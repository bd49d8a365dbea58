/* CUDA interpolate (nearest, bilinear) with its table, the dtypes of cpu/resize.c: the forward one
   thread per output (the source positions of kernels/pool_window.h); the backward one thread per
   input element, gathering the weighted gradients of the outputs that read it (no atomics:
   deterministic). The outputs that read input i along an axis are consecutive: their first
   source position never decreases along the axis. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"
#include "kernels/pool_window.h"

#define RESIZE_THREADS 256

/* One axis: in, out and the source step. */
struct resize_axis {
    int64_t in, out;
    double scale;
    bool align_corners;
};

/* Output o's first source position and the weights of o on positions i0 and i1 (C: the compute
   type; nearest: i1 = i0, l0 = 1, l1 = 0). */
template <bool LINEAR, typename C>
__device__ __forceinline__ void taps(const resize_axis &a, int64_t o, int64_t *i0, int64_t *i1,
                                     C *l0, C *l1) {
    if (!LINEAR) {
        *i0 = *i1 = tl_nearest_source(o, a.in, (float)a.scale);
        *l0 = C(1), *l1 = C(0);
    } else if (sizeof(C) == sizeof(double)) {
        double w0, w1;
        tl_linear_source_d(o, a.in, a.scale, a.align_corners, i0, i1, &w0, &w1);
        *l0 = (C)w0, *l1 = (C)w1;
    } else {
        float w0, w1;
        tl_linear_source_f(o, a.in, a.scale, a.align_corners, i0, i1, &w0, &w1);
        *l0 = (C)w0, *l1 = (C)w1;
    }
}

/* The first output whose first source position is at least i. */
template <bool LINEAR, typename C>
__device__ __forceinline__ int64_t first_reading(const resize_axis &a, int64_t i) {
    int64_t lo = 0, hi = a.out;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        int64_t i0, i1;
        C l0, l1;
        taps<LINEAR, C>(a, mid, &i0, &i1, &l0, &l1);
        if (i0 >= i)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

template <class E, bool LINEAR>
__global__ void __launch_bounds__(RESIZE_THREADS)
    resize_kernel(typename E::T *out, const typename E::T *in,
                  const __grid_constant__ tl_resize2d r, int64_t total) {
    typedef typename E::C C;
    const resize_axis rows = {r.in_h, r.out_h, r.scale_h, r.align_corners};
    const resize_axis cols = {r.in_w, r.out_w, r.scale_w, r.align_corners};
    const int64_t step = (int64_t)gridDim.x * blockDim.x, out_size = r.out_h * r.out_w;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        const int64_t plane = e / out_size, q = e - plane * out_size;
        const int64_t oh = q / r.out_w, ow = q - oh * r.out_w;
        const typename E::T *x = in + plane * r.in_h * r.in_w;
        int64_t h0, h1, w0, w1;
        C a0, a1, b0, b1;
        taps<LINEAR, C>(rows, oh, &h0, &h1, &a0, &a1);
        taps<LINEAR, C>(cols, ow, &w0, &w1, &b0, &b1);
        if (!LINEAR) {
            out[e] = x[h0 * r.in_w + w0];
        } else {
            const C v =
                a0 * (b0 * E::load(x[h0 * r.in_w + w0]) + b1 * E::load(x[h0 * r.in_w + w1])) +
                a1 * (b0 * E::load(x[h1 * r.in_w + w0]) + b1 * E::load(x[h1 * r.in_w + w1]));
            out[e] = E::store(v);
        }
    }
}

/* The weight of output o on input i along an axis (0 when o does not read i). */
template <bool LINEAR, typename C>
__device__ __forceinline__ C weight_on(const resize_axis &a, int64_t o, int64_t i, int64_t *first) {
    int64_t i0, i1;
    C l0, l1;
    taps<LINEAR, C>(a, o, &i0, &i1, &l0, &l1);
    *first = i0;
    return (i0 == i ? l0 : C(0)) + (i1 == i ? l1 : C(0));
}

template <class E, bool LINEAR>
__global__ void __launch_bounds__(RESIZE_THREADS)
    resize_backward_kernel(typename E::T *grad_in, const typename E::T *grad_out,
                           const __grid_constant__ tl_resize2d r, int64_t total) {
    typedef typename E::C C;
    const resize_axis rows = {r.in_h, r.out_h, r.scale_h, r.align_corners};
    const resize_axis cols = {r.in_w, r.out_w, r.scale_w, r.align_corners};
    const int64_t step = (int64_t)gridDim.x * blockDim.x, in_size = r.in_h * r.in_w;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {
        const int64_t plane = e / in_size, q = e - plane * in_size;
        const int64_t ih = q / r.in_w, iw = q - ih * r.in_w;
        const typename E::T *g = grad_out + plane * r.out_h * r.out_w;
        /* outputs reading ih: first position ih (nearest), or ih - 1 or ih (linear) */
        const int64_t oh0 = first_reading<LINEAR, C>(rows, LINEAR ? ih - 1 : ih);
        const int64_t ow0 = first_reading<LINEAR, C>(cols, LINEAR ? iw - 1 : iw);
        C sum = C(0);
        for (int64_t oh = oh0; oh < r.out_h; oh++) {
            int64_t fh;
            const C wh = weight_on<LINEAR, C>(rows, oh, ih, &fh);
            if (fh > ih) break;
            if (wh == C(0)) continue;
            C row = C(0);
            for (int64_t ow = ow0; ow < r.out_w; ow++) {
                int64_t fw;
                const C ww = weight_on<LINEAR, C>(cols, ow, iw, &fw);
                if (fw > iw) break;
                row += ww * E::load(g[oh * r.out_w + ow]);
            }
            sum += wh * row;
        }
        grad_in[e] = E::store(sum);
    }
}

static tl_status launch_resize(const tl_cuda_where *at, int dtype, void *dst, const void *src,
                               const tl_resize2d *r, bool linear, bool backward) {
    return tl_cuda_floating(dtype, at->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        const int64_t planes = r->batch * r->channels;
        const int64_t total = planes * (backward ? r->in_h * r->in_w : r->out_h * r->out_w);
        const unsigned grid = tl_cuda_grid(tl_ceil_div(total, RESIZE_THREADS), at->sm_count);
        T *d = (T *)dst;
        const T *s = (const T *)src;
        if (backward && linear)
            resize_backward_kernel<E, true>
                <<<grid, RESIZE_THREADS, 0, at->stream>>>(d, s, *r, total);
        else if (backward)
            resize_backward_kernel<E, false>
                <<<grid, RESIZE_THREADS, 0, at->stream>>>(d, s, *r, total);
        else if (linear)
            resize_kernel<E, true><<<grid, RESIZE_THREADS, 0, at->stream>>>(d, s, *r, total);
        else
            resize_kernel<E, false><<<grid, RESIZE_THREADS, 0, at->stream>>>(d, s, *r, total);
        return tl_cuda_check_launch(at->op);
    });
}

static tl_status run_resize(const char *op, tl_tensor *dst, const tl_tensor *src,
                            const tl_resize2d *r, bool linear, bool backward) {
    if (tl_numel(dst) == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(dst, op, &at));
    return launch_resize(&at, tl_cuda_dtype_of(src), tl_data(dst), tl_data(src), r, linear,
                         backward);
}

/* ---- the table -------------------------------------------------------------------------- */
static tl_status cuda_nearest(tl_tensor *dst, const tl_tensor *src, const tl_resize2d *r) {
    return run_resize("upsample_nearest2d", dst, src, r, false, false);
}
static tl_status cuda_nearest_backward(tl_tensor *dst, const tl_tensor *src, const tl_resize2d *r) {
    return run_resize("upsample_nearest2d_backward", dst, src, r, false, true);
}
static tl_status cuda_bilinear(tl_tensor *dst, const tl_tensor *src, const tl_resize2d *r) {
    return run_resize("upsample_bilinear2d", dst, src, r, true, false);
}
static tl_status cuda_bilinear_backward(tl_tensor *dst, const tl_tensor *src,
                                        const tl_resize2d *r) {
    return run_resize("upsample_bilinear2d_backward", dst, src, r, true, true);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(upsample_nearest2d, TL_DTYPES_FLOATING, resize, cuda_nearest),
    TL_KERNEL(upsample_nearest2d_backward, TL_DTYPES_FLOATING, resize, cuda_nearest_backward),
    TL_KERNEL(upsample_bilinear2d, TL_DTYPES_FLOATING, resize, cuda_bilinear),
    TL_KERNEL(upsample_bilinear2d_backward, TL_DTYPES_FLOATING, resize, cuda_bilinear_backward),
};

TL_KERNEL_TABLE(tl_cuda_resize_table, TL_DEVICE_CUDA, entries);
