/* CPU im2col and col2im of conv2d, OpenMP over image planes. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/nn_kernels.h"

/* The smallest x >= 0 with x * step >= a (step >= 1). */
static inline int64_t first_at_least(int64_t a, int64_t step) {
    return a <= 0 ? 0 : (a - 1) / step + 1; /* no a + step: step may be near INT64_MAX */
}

/* The output columns ow in [*lo, *hi) whose input column ow * stride_w - pad_w + j * dilation_w
   is inside the image. */
static inline void valid_columns(const tl_window2d *w, int64_t j, int64_t *lo, int64_t *hi) {
    const int64_t tap = j * w->dilation_w;
    int64_t a = first_at_least(w->pad_w - tap, w->stride_w);
    int64_t b = first_at_least(w->width + w->pad_w - tap, w->stride_w);
    *lo = a < w->out_w ? a : w->out_w;
    *hi = b < w->out_w ? b : w->out_w;
    if (*hi < *lo) *hi = *lo;
}

static inline int64_t work_of(const tl_window2d *w) {
    return w->batch * w->channels * w->kernel_h * w->kernel_w * w->out_h * w->out_w;
}

/* ---- im2col: only moves elements, so one version per element size (zero bits are 0.0 in
   every floating dtype) ---------------------------------------------------------------- */
#define DEFINE_IM2COL(suffix, T)                                                                   \
    static inline void im2col_plane_##suffix(T *col, const T *img, const tl_window2d *w,           \
                                             int64_t bc) {                                         \
        const int64_t b = bc / w->channels, c = bc % w->channels, SW = w->stride_w;                \
        const T *plane = img + bc * w->height * w->width;                                          \
        for (int64_t i = 0; i < w->kernel_h; i++) {                                                \
            for (int64_t j = 0; j < w->kernel_w; j++) {                                            \
                int64_t lo, hi;                                                                    \
                valid_columns(w, j, &lo, &hi);                                                     \
                const int64_t r = (c * w->kernel_h + i) * w->kernel_w + j;                         \
                T *out = col + r * w->col_row_stride + b * w->col_batch_stride;                    \
                for (int64_t oh = 0; oh < w->out_h; oh++) {                                        \
                    T *row = out + oh * w->out_w;                                                  \
                    const int64_t ih = oh * w->stride_h - w->pad_h + i * w->dilation_h;            \
                    if (ih < 0 || ih >= w->height) {                                               \
                        memset(row, 0, (size_t)w->out_w * sizeof(T));                              \
                        continue;                                                                  \
                    }                                                                              \
                    const int64_t base = ih * w->width + j * w->dilation_w - w->pad_w;             \
                    if (lo > 0) memset(row, 0, (size_t)lo * sizeof(T));                            \
                    if (SW == 1 && hi > lo)                                                        \
                        memcpy(row + lo, plane + base + lo, (size_t)(hi - lo) * sizeof(T));        \
                    else                                                                           \
                        for (int64_t ow = lo; ow < hi; ow++) row[ow] = plane[base + ow * SW];      \
                    if (hi < w->out_w) memset(row + hi, 0, (size_t)(w->out_w - hi) * sizeof(T));   \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static tl_status im2col_##suffix(tl_tensor *dst, const tl_tensor *src, const tl_window2d *w) { \
        T *col = tl_data(dst);                                                                     \
        const T *img = tl_data(src);                                                               \
        const int64_t planes = w->batch * w->channels;                                             \
        NN_PARALLEL_FOR(work_of(w))                                                                \
        for (int64_t bc = 0; bc < planes; bc++) im2col_plane_##suffix(col, img, w, bc);            \
        return TL_OK;                                                                              \
    }

DEFINE_IM2COL(32, uint32_t)
DEFINE_IM2COL(64, uint64_t)
DEFINE_IM2COL(16, uint16_t)

/* ---- col2im: plane (b, c) of the image sums the kernel_h * kernel_w column rows that read
   it, into acc (A, the accumulation type; the rounding to T, STORE, is the caller's); planes are
   independent, so the sums are deterministic
   --------------------------------------------------------------------------- */
#define DEFINE_COL2IM_PLANE(suffix, T, A, LOAD, STORE)                                             \
    static inline void col2im_plane_##suffix(A *acc, const T *col, const tl_window2d *w,           \
                                             int64_t bc) {                                         \
        const int64_t b = bc / w->channels, c = bc % w->channels, SW = w->stride_w;                \
        memset(acc, 0, (size_t)(w->height * w->width) * sizeof(A));                                \
        for (int64_t i = 0; i < w->kernel_h; i++) {                                                \
            for (int64_t j = 0; j < w->kernel_w; j++) {                                            \
                int64_t lo, hi;                                                                    \
                valid_columns(w, j, &lo, &hi);                                                     \
                const int64_t r = (c * w->kernel_h + i) * w->kernel_w + j;                         \
                const T *in = col + r * w->col_row_stride + b * w->col_batch_stride;               \
                for (int64_t oh = 0; oh < w->out_h; oh++) {                                        \
                    const int64_t ih = oh * w->stride_h - w->pad_h + i * w->dilation_h;            \
                    if (ih < 0 || ih >= w->height) continue;                                       \
                    const T *row = in + oh * w->out_w;                                             \
                    const int64_t base = ih * w->width + j * w->dilation_w - w->pad_w;             \
                    for (int64_t ow = lo; ow < hi; ow++) acc[base + ow * SW] += LOAD(row[ow]);     \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

NN_FOR_FLOATING(DEFINE_COL2IM_PLANE)

/* float32, float64: each plane sums straight into the image. */
#define DEFINE_COL2IM(suffix, T)                                                                   \
    static tl_status col2im_##suffix(tl_tensor *dst, const tl_tensor *src, const tl_window2d *w) { \
        T *img = tl_data(dst);                                                                     \
        const T *col = tl_data(src);                                                               \
        const int64_t planes = w->batch * w->channels, size = w->height * w->width;                \
        NN_PARALLEL_FOR(work_of(w))                                                                \
        for (int64_t bc = 0; bc < planes; bc++)                                                    \
            col2im_plane_##suffix(img + bc * size, col, w, bc);                                    \
        return TL_OK;                                                                              \
    }
DEFINE_COL2IM(f32, float)
DEFINE_COL2IM(f64, double)

/* 16-bit: one float32 plane per thread, rounded once into the image. */
static tl_status col2im_16(tl_tensor *dst, const tl_tensor *src, const tl_window2d *w, bool bf16) {
    uint16_t *img = tl_data(dst);
    const uint16_t *col = tl_data(src);
    const int64_t planes = w->batch * w->channels, size = w->height * w->width;
    const int threads = nn_max_threads();
    float *scratch = malloc((size_t)threads * (size_t)(size + 1) * sizeof(float));
    if (!scratch) return tl_error(TL_ERR_MEMORY, "col2im: out of memory for the float32 sums");
#pragma omp parallel for schedule(static) if (work_of(w) > NN_PARALLEL_THRESHOLD)
    for (int64_t bc = 0; bc < planes; bc++) {
        float *acc = scratch + (size_t)nn_thread_id() * (size_t)(size + 1);
        uint16_t *out = img + bc * size;
        if (bf16) {
            col2im_plane_bf16(acc, col, w, bc);
            for (int64_t e = 0; e < size; e++) out[e] = tl_bf16_round(acc[e]);
        } else {
            col2im_plane_f16(acc, col, w, bc);
            for (int64_t e = 0; e < size; e++) out[e] = tl_f16_round(acc[e]);
        }
    }
    free(scratch);
    return TL_OK;
}

static tl_status col2im_bf16(tl_tensor *dst, const tl_tensor *src, const tl_window2d *w) {
    return col2im_16(dst, src, w, true);
}

static tl_status col2im_f16(tl_tensor *dst, const tl_tensor *src, const tl_window2d *w) {
    return col2im_16(dst, src, w, false);
}

static const tl_kernel_entry entries[] = {
    TL_KERNEL(im2col, TL_DTYPES_F32, im2col, im2col_32),
    TL_KERNEL(im2col, TL_DTYPES_F64, im2col, im2col_64),
    TL_KERNEL(im2col, TL_DTYPES_BF16 | TL_DTYPES_F16, im2col, im2col_16),
    TL_KERNELS_FLOATING(col2im, im2col, col2im),
};

TL_KERNEL_TABLE(tl_cpu_conv_table, TL_DEVICE_CPU, entries);
