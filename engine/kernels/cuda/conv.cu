/* CUDA im2col and col2im of conv2d and their table, the dtypes of cpu/conv.c. im2col moves elements
   (one version per element size); col2im gathers: each image element sums the columns that read it,
   in the order cpu/conv.c adds them (kernel row, then column), so results are deterministic and
   equal to the CPU's. */
#include "kernels/cuda/describe.cuh"
#include "kernels/cuda/ops_common.cuh"

#define CONV_THREADS 256

/* The lowest digit of the mixed-radix index t, whose lowest place counts to size: t % size; t
   becomes t / size, the index of the places above it. */
template <typename I> __device__ __forceinline__ int64_t take_digit(I &t, int64_t size) {
    const int64_t digit = t % (I)size;
    t /= (I)size;
    return digit;
}

/* One thread per column element (row r, sample b, position oh, ow), ow fastest. */
template <typename T, typename I>
__global__ void __launch_bounds__(CONV_THREADS)
    im2col_kernel(T *col, const T *img, const __grid_constant__ tl_window2d w, I total) {
    const I stride = (I)gridDim.x * blockDim.x;
    for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        I t = e;
        const int64_t ow = take_digit(t, w.out_w), oh = take_digit(t, w.out_h);
        const int64_t b = take_digit(t, w.batch), r = t;
        const int64_t j = r % w.kernel_w, i = (r / w.kernel_w) % w.kernel_h;
        const int64_t c = r / (w.kernel_w * w.kernel_h);
        const int64_t ih = oh * w.stride_h - w.pad_h + i * w.dilation_h;
        const int64_t iw = ow * w.stride_w - w.pad_w + j * w.dilation_w;
        T v = T(0);
        if (ih >= 0 && ih < w.height && iw >= 0 && iw < w.width)
            v = img[((b * w.channels + c) * w.height + ih) * w.width + iw];
        col[r * w.col_row_stride + b * w.col_batch_stride + oh * w.out_w + ow] = v;
    }
}

/* One thread per image element (b, c, h, x), x fastest; A accumulates (float32 for 16-bit). */
template <class E, typename A, typename I>
__global__ void __launch_bounds__(CONV_THREADS)
    col2im_kernel(typename E::T *img, const typename E::T *col,
                  const __grid_constant__ tl_window2d w, I total) {
    const I stride = (I)gridDim.x * blockDim.x;
    for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        I t = e;
        const int64_t x = take_digit(t, w.width), h = take_digit(t, w.height);
        const int64_t c = take_digit(t, w.channels), b = t;
        A acc = A(0);
        for (int64_t i = 0; i < w.kernel_h; i++) {
            const int64_t ih = h + w.pad_h - i * w.dilation_h; /* = oh * stride_h */
            if (ih < 0) break;
            if (ih % w.stride_h != 0 || ih / w.stride_h >= w.out_h) continue;
            const int64_t oh = ih / w.stride_h;
            for (int64_t j = 0; j < w.kernel_w; j++) {
                const int64_t iw = x + w.pad_w - j * w.dilation_w;
                if (iw < 0) break;
                if (iw % w.stride_w != 0 || iw / w.stride_w >= w.out_w) continue;
                const int64_t ow = iw / w.stride_w, r = (c * w.kernel_h + i) * w.kernel_w + j;
                acc = acc +
                      (A)E::load(
                          col[r * w.col_row_stride + b * w.col_batch_stride + oh * w.out_w + ow]);
            }
        }
        img[e] = E::store(acc);
    }
}

template <typename T>
static void launch_im2col_as(const tl_cuda_where *at, T *dst, const T *src, const tl_window2d *w) {
    const int64_t total = w->channels * w->kernel_h * w->kernel_w * w->batch * w->out_h * w->out_w;
    const unsigned grid = tl_cuda_grid(tl_ceil_div(total, CONV_THREADS), at->sm_count);
    if (total <= (int64_t)UINT32_MAX)
        im2col_kernel<T, uint32_t>
            <<<grid, CONV_THREADS, 0, at->stream>>>(dst, src, *w, (uint32_t)total);
    else
        im2col_kernel<T, int64_t><<<grid, CONV_THREADS, 0, at->stream>>>(dst, src, *w, total);
}

/* dst columns, src images: moves elements, so bf16 and f16 share the 16-bit kernel */
static tl_status launch_im2col(const tl_cuda_where *at, int dtype, void *dst, const void *src,
                               const tl_window2d *w) {
    return tl_cuda_floating(dtype, at->op, [&](auto e) -> tl_status {
        typedef typename decltype(e)::T T;
        launch_im2col_as(at, (T *)dst, (const T *)src, w);
        return tl_cuda_check_launch(at->op);
    });
}

/* dst images, src columns */
static tl_status launch_col2im(const tl_cuda_where *at, int dtype, void *dst, const void *src,
                               const tl_window2d *w) {
    return tl_cuda_floating(dtype, at->op, [&](auto e) -> tl_status {
        typedef decltype(e) E;
        typedef typename E::T T;
        typedef typename E::C A;
        const int64_t total = w->batch * w->channels * w->height * w->width;
        const unsigned grid = tl_cuda_grid(tl_ceil_div(total, CONV_THREADS), at->sm_count);
        if (total <= (int64_t)UINT32_MAX)
            col2im_kernel<E, A, uint32_t><<<grid, CONV_THREADS, 0, at->stream>>>(
                (T *)dst, (const T *)src, *w, (uint32_t)total);
        else
            col2im_kernel<E, A, int64_t>
                <<<grid, CONV_THREADS, 0, at->stream>>>((T *)dst, (const T *)src, *w, total);
        return tl_cuda_check_launch(at->op);
    });
}

/* ---- the table -------------------------------------------------------------------------- */
static tl_status cuda_im2col(tl_tensor *dst, const tl_tensor *src, const tl_window2d *w) {
    if (tl_numel(dst) == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(dst, "im2col", &at));
    return launch_im2col(&at, tl_cuda_dtype_of(src), tl_data(dst), tl_data(src), w);
}

static tl_status cuda_col2im(tl_tensor *dst, const tl_tensor *src, const tl_window2d *w) {
    if (tl_numel(dst) == 0) return TL_OK;
    tl_cuda_where at;
    TL_TRY(tl_cuda_where_of(dst, "col2im", &at));
    return launch_col2im(&at, tl_cuda_dtype_of(src), tl_data(dst), tl_data(src), w);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(im2col, TL_DTYPES_FLOATING, im2col, cuda_im2col),
    TL_KERNEL(col2im, TL_DTYPES_FLOATING, im2col, cuda_col2im),
};

TL_KERNEL_TABLE(tl_cuda_conv_table, TL_DEVICE_CUDA, entries);
