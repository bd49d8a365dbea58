/* CPU avg_pool2d and adaptive_avg_pool2d: window means and their backward (each output's
   gradient spread over its window), summed in the compute type. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/nn_kernels.h"
#include "kernels/pool_window.h"

/* The window of output (oh, ow) and its divisor. */
typedef struct avg_cell {
    int64_t h0, h1, w0, w1, divisor;
} avg_cell;

static inline avg_cell avg_cell_of(const tl_avg_window2d *a, int64_t oh, int64_t ow) {
    const tl_window2d *w = &a->window;
    avg_cell c;
    int64_t ch, cw;
    tl_avg_span(oh, w->height, w->out_h, w->kernel_h, w->stride_h, w->pad_h, a->adaptive,
                a->count_include_pad, &c.h0, &c.h1, &ch);
    tl_avg_span(ow, w->width, w->out_w, w->kernel_w, w->stride_w, w->pad_w, a->adaptive,
                a->count_include_pad, &c.w0, &c.w1, &cw);
    c.divisor = a->divisor > 0 ? a->divisor : ch * cw;
    return c;
}

static inline int64_t avg_work(const tl_avg_window2d *a) {
    const tl_window2d *w = &a->window;
    const int64_t planes = w->batch * w->channels;
    if (a->adaptive) return planes * (w->height * w->width + w->out_h * w->out_w);
    return planes * w->out_h * w->out_w * w->kernel_h * w->kernel_w;
}

/* forward: dst = window sums / divisor */
#define DEFINE_AVG(suffix, T, C, LOAD, STORE)                                                      \
    static tl_status avg_##suffix(tl_tensor *dst, const tl_tensor *src,                            \
                                  const tl_avg_window2d *a) {                                      \
        const tl_window2d *w = &a->window;                                                         \
        T *out = tl_data(dst);                                                                     \
        const T *in = tl_data(src);                                                                \
        const int64_t planes = w->batch * w->channels, in_size = w->height * w->width,             \
                      out_size = w->out_h * w->out_w;                                              \
        NN_PARALLEL_FOR(avg_work(a)) for (int64_t p = 0; p < planes; p++) {                        \
            const T *x = in + p * in_size;                                                         \
            T *y = out + p * out_size;                                                             \
            for (int64_t oh = 0; oh < w->out_h; oh++)                                              \
                for (int64_t ow = 0; ow < w->out_w; ow++) {                                        \
                    const avg_cell c = avg_cell_of(a, oh, ow);                                     \
                    C sum = 0;                                                                     \
                    for (int64_t ih = c.h0; ih < c.h1; ih++)                                       \
                        for (int64_t iw = c.w0; iw < c.w1; iw++)                                   \
                            sum += LOAD(x[ih * w->width + iw]);                                    \
                    y[oh * w->out_w + ow] = STORE(sum / (C)c.divisor);                             \
                }                                                                                  \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

/* backward: dst = 0, then each output's gradient / divisor added over its window, per plane in
   output order (deterministic); 16-bit planes sum in a float32 scratch plane of their thread */
#define DEFINE_AVG_BACKWARD(suffix, T, C, LOAD, STORE)                                             \
    static tl_status avg_backward_##suffix(tl_tensor *dst, const tl_tensor *src,                   \
                                           const tl_avg_window2d *a) {                             \
        const tl_window2d *w = &a->window;                                                         \
        T *gi = tl_data(dst);                                                                      \
        const T *go = tl_data(src);                                                                \
        const int64_t planes = w->batch * w->channels, in_size = w->height * w->width,             \
                      out_size = w->out_h * w->out_w;                                              \
        const bool native = sizeof(T) == sizeof(C);                                                \
        C *scratch = NULL;                                                                         \
        if (!native) {                                                                             \
            scratch = malloc((size_t)nn_max_threads() * (size_t)(in_size + 1) * sizeof(C));        \
            if (!scratch)                                                                          \
                return tl_error(TL_ERR_MEMORY, "avg_pool2d_backward: out of memory for the sums"); \
        }                                                                                          \
        NN_PARALLEL_FOR(avg_work(a)) for (int64_t p = 0; p < planes; p++) {                        \
            C *acc = native ? (C *)(void *)(gi + p * in_size)                                      \
                            : scratch + (size_t)nn_thread_id() * (size_t)(in_size + 1);            \
            memset(acc, 0, (size_t)in_size * sizeof(C));                                           \
            const T *g = go + p * out_size;                                                        \
            for (int64_t oh = 0; oh < w->out_h; oh++)                                              \
                for (int64_t ow = 0; ow < w->out_w; ow++) {                                        \
                    const avg_cell c = avg_cell_of(a, oh, ow);                                     \
                    const C v = LOAD(g[oh * w->out_w + ow]) / (C)c.divisor;                        \
                    for (int64_t ih = c.h0; ih < c.h1; ih++)                                       \
                        for (int64_t iw = c.w0; iw < c.w1; iw++) acc[ih * w->width + iw] += v;     \
                }                                                                                  \
            if (!native)                                                                           \
                for (int64_t e = 0; e < in_size; e++) gi[p * in_size + e] = STORE(acc[e]);         \
        }                                                                                          \
        free(scratch);                                                                             \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_AVG)
NN_FOR_FLOATING(DEFINE_AVG_BACKWARD)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(avg_pool2d, avg_pool, avg),
    TL_KERNELS_FLOATING(avg_pool2d_backward, avg_pool, avg_backward),
    TL_KERNELS_FLOATING(adaptive_avg_pool2d, avg_pool, avg),
    TL_KERNELS_FLOATING(adaptive_avg_pool2d_backward, avg_pool, avg_backward),
};

TL_KERNEL_TABLE(tl_cpu_avg_pool_table, TL_DEVICE_CPU, entries);
