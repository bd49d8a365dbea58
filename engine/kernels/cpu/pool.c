/* CPU max_pool2d and adaptive_max_pool2d: window maxima with int64 argmax indices, and the
   scatter backward they share. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/nn_kernels.h"
#include "kernels/pool_window.h"

static inline int64_t plane_work(const tl_window2d *w) {
    return w->batch * w->channels * w->out_h * w->out_w * w->kernel_h * w->kernel_w;
}

/* The kernel pool_<suffix> (and adaptive_pool_<suffix>) and its plane: out/indices get the
   maximum of each window's taps (kernels/pool_window.h; compared as C) and its flat position
   ih * width + iw; the value written is the input element itself. As PyTorch, padding never wins
   and a NaN replaces the maximum. */
#define DEFINE_POOL(suffix, T, C, LOAD, STORE)                                                     \
    static inline void pool_plane_##suffix(T *out, int64_t *indices, const T *in,                  \
                                           const tl_window2d *w, bool adaptive) {                  \
        for (int64_t oh = 0; oh < w->out_h; oh++) {                                                \
            int64_t h0, h1, dh;                                                                    \
            tl_max_taps(oh, w->height, w->out_h, w->kernel_h, w->stride_h, w->pad_h,               \
                        w->dilation_h, adaptive, &h0, &h1, &dh);                                   \
            for (int64_t ow = 0; ow < w->out_w; ow++) {                                            \
                int64_t w0, w1, dw;                                                                \
                tl_max_taps(ow, w->width, w->out_w, w->kernel_w, w->stride_w, w->pad_w,            \
                            w->dilation_w, adaptive, &w0, &w1, &dw);                               \
                int64_t best = h0 * w->width + w0;                                                 \
                C max = LOAD(in[best]);                                                            \
                bool nan = false;                                                                  \
                for (int64_t ih = h0; ih < h1; ih += dh) {                                         \
                    const T *row = in + ih * w->width;                                             \
                    for (int64_t iw = w0; iw < w1; iw += dw) {                                     \
                        const C v = LOAD(row[iw]);                                                 \
                        const bool greater = v > max; /* selects, no branch */                     \
                        max = greater ? v : max;                                                   \
                        best = greater ? ih * w->width + iw : best;                                \
                        nan |= v != v;                                                             \
                    }                                                                              \
                }                                                                                  \
                if (nan) /* rare: the last NaN wins, as in PyTorch */                              \
                    for (int64_t ih = h0; ih < h1; ih += dh)                                       \
                        for (int64_t iw = w0; iw < w1; iw += dw)                                   \
                            if (LOAD(in[ih * w->width + iw]) != LOAD(in[ih * w->width + iw]))      \
                                best = ih * w->width + iw;                                         \
                out[oh * w->out_w + ow] = in[best];                                                \
                indices[oh * w->out_w + ow] = best;                                                \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static tl_status pool_run_##suffix(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,    \
                                       const tl_window2d *w, bool adaptive) {                      \
        T *o = tl_data(out);                                                                       \
        int64_t *idx = tl_data(indices);                                                           \
        const T *x = tl_data(in);                                                                  \
        const int64_t planes = w->batch * w->channels, in_size = w->height * w->width,             \
                      out_size = w->out_h * w->out_w,                                              \
                      work = adaptive ? planes * (in_size + out_size) : plane_work(w);             \
        NN_PARALLEL_FOR(work)                                                                      \
        for (int64_t p = 0; p < planes; p++)                                                       \
            pool_plane_##suffix(o + p * out_size, idx + p * out_size, x + p * in_size, w,          \
                                adaptive);                                                         \
        return TL_OK;                                                                              \
    }                                                                                              \
    static tl_status pool_##suffix(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,        \
                                   const tl_window2d *w) {                                         \
        return pool_run_##suffix(out, indices, in, w, false);                                      \
    }                                                                                              \
    static tl_status adaptive_pool_##suffix(tl_tensor *out, tl_tensor *indices,                    \
                                            const tl_tensor *in, const tl_window2d *w) {           \
        return pool_run_##suffix(out, indices, in, w, true);                                       \
    }

NN_FOR_FLOATING(DEFINE_POOL)

/* ---- backward: grad_in = zeros, then grad_out added at each index (overlapping windows
   add up), per plane in output order: deterministic --------------------------------------- */
#define DEFINE_POOL_BACKWARD_NATIVE(suffix, T)                                                     \
    static tl_status pool_backward_##suffix(tl_tensor *grad_in, const tl_tensor *grad_out,         \
                                            const tl_tensor *indices, const tl_window2d *w) {      \
        T *gi = tl_data(grad_in);                                                                  \
        const T *go = tl_data(grad_out);                                                           \
        const int64_t *idx = tl_data(indices);                                                     \
        const int64_t planes = w->batch * w->channels, in_size = w->height * w->width,             \
                      out_size = w->out_h * w->out_w, work = planes * (in_size + out_size);        \
        NN_PARALLEL_FOR(work) for (int64_t p = 0; p < planes; p++) {                               \
            T *plane = gi + p * in_size;                                                           \
            memset(plane, 0, (size_t)in_size * sizeof(T));                                         \
            const T *g = go + p * out_size;                                                        \
            const int64_t *at = idx + p * out_size;                                                \
            for (int64_t o = 0; o < out_size; o++) plane[at[o]] += g[o];                           \
        }                                                                                          \
        return TL_OK;                                                                              \
    }

DEFINE_POOL_BACKWARD_NATIVE(f32, float)
DEFINE_POOL_BACKWARD_NATIVE(f64, double)

/* 16-bit: each plane sums in a float32 scratch plane of its thread, rounded once. */
static tl_status pool_backward_16(tl_tensor *grad_in, const tl_tensor *grad_out,
                                  const tl_tensor *indices, const tl_window2d *w, bool bf16) {
    uint16_t *gi = tl_data(grad_in);
    const uint16_t *go = tl_data(grad_out);
    const int64_t *idx = tl_data(indices);
    const int64_t planes = w->batch * w->channels, in_size = w->height * w->width,
                  out_size = w->out_h * w->out_w;
    const int threads = nn_max_threads();
    float *scratch = malloc((size_t)threads * (size_t)(in_size + 1) * sizeof(float));
    if (!scratch)
        return tl_error(TL_ERR_MEMORY, "max_pool2d_backward: out of memory for the float32 sums");
#pragma omp parallel for schedule(static) if (planes * (in_size + out_size) > NN_PARALLEL_THRESHOLD)
    for (int64_t p = 0; p < planes; p++) {
        float *acc = scratch + (size_t)nn_thread_id() * (size_t)(in_size + 1);
        memset(acc, 0, (size_t)in_size * sizeof(float));
        const uint16_t *g = go + p * out_size;
        const int64_t *at = idx + p * out_size;
        uint16_t *plane = gi + p * in_size;
        if (bf16) {
            for (int64_t o = 0; o < out_size; o++) acc[at[o]] += tl_bf16_load(g[o]);
            for (int64_t e = 0; e < in_size; e++) plane[e] = tl_bf16_round(acc[e]);
        } else {
            for (int64_t o = 0; o < out_size; o++) acc[at[o]] += tl_f16_load(g[o]);
            for (int64_t e = 0; e < in_size; e++) plane[e] = tl_f16_round(acc[e]);
        }
    }
    free(scratch);
    return TL_OK;
}

static tl_status pool_backward_bf16(tl_tensor *grad_in, const tl_tensor *grad_out,
                                    const tl_tensor *indices, const tl_window2d *w) {
    return pool_backward_16(grad_in, grad_out, indices, w, true);
}

static tl_status pool_backward_f16(tl_tensor *grad_in, const tl_tensor *grad_out,
                                   const tl_tensor *indices, const tl_window2d *w) {
    return pool_backward_16(grad_in, grad_out, indices, w, false);
}

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(max_pool2d, pool, pool),
    TL_KERNELS_FLOATING(adaptive_max_pool2d, pool, adaptive_pool),
    TL_KERNELS_FLOATING(max_pool2d_backward, pool_backward, pool_backward),
};

TL_KERNEL_TABLE(tl_cpu_pool_table, TL_DEVICE_CPU, entries);
