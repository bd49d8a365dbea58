/* CPU interpolate: nearest and bilinear resampling of image planes and their backward (each
   output's gradient added to the inputs it read, per plane in output order: deterministic). */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/nn_kernels.h"
#include "kernels/pool_window.h"

static tl_status no_memory(const char *op) {
    return tl_error(TL_ERR_MEMORY, "%s: out of memory for the source positions", op);
}

static inline int64_t resize_work(const tl_resize2d *r) {
    return r->batch * r->channels * (r->in_h * r->in_w + r->out_h * r->out_w);
}

/* ---- nearest: the source row of each output row and column, then copies ------------------- */
static int64_t *nearest_sources(const tl_resize2d *r) {
    int64_t *at = malloc((size_t)(r->out_h + r->out_w) * sizeof(int64_t));
    if (!at) return NULL;
    for (int64_t o = 0; o < r->out_h; o++) at[o] = tl_nearest_source(o, r->in_h, (float)r->scale_h);
    for (int64_t o = 0; o < r->out_w; o++)
        at[r->out_h + o] = tl_nearest_source(o, r->in_w, (float)r->scale_w);
    return at;
}

#define DEFINE_NEAREST(suffix, T, C, LOAD, STORE)                                                  \
    static tl_status nearest_##suffix(tl_tensor *dst, const tl_tensor *src,                        \
                                      const tl_resize2d *r) {                                      \
        int64_t *at = nearest_sources(r);                                                          \
        if (!at) return no_memory("upsample_nearest2d");                                           \
        const int64_t *col = at + r->out_h, planes = r->batch * r->channels;                       \
        const int64_t in_size = r->in_h * r->in_w, out_size = r->out_h * r->out_w;                 \
        T *out = tl_data(dst);                                                                     \
        const T *in = tl_data(src);                                                                \
        NN_PARALLEL_FOR(resize_work(r)) for (int64_t p = 0; p < planes; p++) {                     \
            for (int64_t oh = 0; oh < r->out_h; oh++) {                                            \
                const T *row = in + p * in_size + at[oh] * r->in_w;                                \
                T *y = out + p * out_size + oh * r->out_w;                                         \
                for (int64_t ow = 0; ow < r->out_w; ow++) y[ow] = row[col[ow]];                    \
            }                                                                                      \
        }                                                                                          \
        free(at);                                                                                  \
        return TL_OK;                                                                              \
    }

/* Backward kernels accumulate each plane in acc: the plane itself (float32, float64) or a float32
   scratch plane of the thread (16-bit), rounded once. */
#define RESIZE_BACKWARD_BEGIN(T, C, op, sources)                                                   \
    const int64_t planes = r->batch * r->channels, in_size = r->in_h * r->in_w,                    \
                  out_size = r->out_h * r->out_w;                                                  \
    const bool native = sizeof(T) == sizeof(C);                                                    \
    T *gi = tl_data(dst);                                                                          \
    const T *go = tl_data(src);                                                                    \
    C *scratch = NULL;                                                                             \
    if (!native) {                                                                                 \
        scratch = malloc((size_t)nn_max_threads() * (size_t)(in_size + 1) * sizeof(C));            \
        if (!scratch) {                                                                            \
            free(sources);                                                                         \
            return no_memory(op);                                                                  \
        }                                                                                          \
    }
#define RESIZE_BACKWARD_PLANE(T, C)                                                                \
    C *acc = native ? (C *)(void *)(gi + p * in_size)                                              \
                    : scratch + (size_t)nn_thread_id() * (size_t)(in_size + 1);                    \
    memset(acc, 0, (size_t)in_size * sizeof(C));                                                   \
    const T *g = go + p * out_size;
#define RESIZE_BACKWARD_STORE(STORE)                                                               \
    if (!native)                                                                                   \
        for (int64_t e = 0; e < in_size; e++) gi[p * in_size + e] = STORE(acc[e]);

#define DEFINE_NEAREST_BACKWARD(suffix, T, C, LOAD, STORE)                                         \
    static tl_status nearest_backward_##suffix(tl_tensor *dst, const tl_tensor *src,               \
                                               const tl_resize2d *r) {                             \
        int64_t *at = nearest_sources(r);                                                          \
        if (!at) return no_memory("upsample_nearest2d_backward");                                  \
        const int64_t *col = at + r->out_h;                                                        \
        RESIZE_BACKWARD_BEGIN(T, C, "upsample_nearest2d_backward", at)                             \
        NN_PARALLEL_FOR(resize_work(r)) for (int64_t p = 0; p < planes; p++) {                     \
            RESIZE_BACKWARD_PLANE(T, C)                                                            \
            for (int64_t oh = 0; oh < r->out_h; oh++) {                                            \
                C *row = acc + at[oh] * r->in_w;                                                   \
                for (int64_t ow = 0; ow < r->out_w; ow++)                                          \
                    row[col[ow]] += LOAD(g[oh * r->out_w + ow]);                                   \
            }                                                                                      \
            RESIZE_BACKWARD_STORE(STORE)                                                           \
        }                                                                                          \
        free(scratch);                                                                             \
        free(at);                                                                                  \
        return TL_OK;                                                                              \
    }

/* ---- bilinear: per output row and column its two sources and weights ---------------------- */
#define DEFINE_LINEAR_TAPS(C, SOURCE)                                                              \
    typedef struct taps_##C {                                                                      \
        int64_t i0, i1;                                                                            \
        C l0, l1;                                                                                  \
    } taps_##C;                                                                                    \
    static taps_##C *linear_taps_##C(const tl_resize2d *r) {                                       \
        taps_##C *t = malloc((size_t)(r->out_h + r->out_w) * sizeof(taps_##C));                    \
        if (!t) return NULL;                                                                       \
        for (int64_t o = 0; o < r->out_h; o++)                                                     \
            SOURCE(o, r->in_h, r->scale_h, r->align_corners, &t[o].i0, &t[o].i1, &t[o].l0,         \
                   &t[o].l1);                                                                      \
        for (int64_t o = 0; o < r->out_w; o++) {                                                   \
            taps_##C *c = t + r->out_h + o;                                                        \
            SOURCE(o, r->in_w, r->scale_w, r->align_corners, &c->i0, &c->i1, &c->l0, &c->l1);      \
        }                                                                                          \
        return t;                                                                                  \
    }
DEFINE_LINEAR_TAPS(float, tl_linear_source_f)
DEFINE_LINEAR_TAPS(double, tl_linear_source_d)

#define DEFINE_BILINEAR(suffix, T, C, LOAD, STORE)                                                 \
    static tl_status bilinear_##suffix(tl_tensor *dst, const tl_tensor *src,                       \
                                       const tl_resize2d *r) {                                     \
        taps_##C *t = linear_taps_##C(r);                                                          \
        if (!t) return no_memory("upsample_bilinear2d");                                           \
        const taps_##C *col = t + r->out_h;                                                        \
        const int64_t planes = r->batch * r->channels, in_size = r->in_h * r->in_w,                \
                      out_size = r->out_h * r->out_w, W = r->in_w;                                 \
        T *out = tl_data(dst);                                                                     \
        const T *in = tl_data(src);                                                                \
        NN_PARALLEL_FOR(resize_work(r)) for (int64_t p = 0; p < planes; p++) {                     \
            const T *x = in + p * in_size;                                                         \
            for (int64_t oh = 0; oh < r->out_h; oh++) {                                            \
                const taps_##C h = t[oh];                                                          \
                const T *r0 = x + h.i0 * W, *r1 = x + h.i1 * W;                                    \
                T *y = out + p * out_size + oh * r->out_w;                                         \
                for (int64_t ow = 0; ow < r->out_w; ow++) {                                        \
                    const taps_##C c = col[ow];                                                    \
                    y[ow] = STORE(h.l0 * (c.l0 * LOAD(r0[c.i0]) + c.l1 * LOAD(r0[c.i1])) +         \
                                  h.l1 * (c.l0 * LOAD(r1[c.i0]) + c.l1 * LOAD(r1[c.i1])));         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        free(t);                                                                                   \
        return TL_OK;                                                                              \
    }

#define DEFINE_BILINEAR_BACKWARD(suffix, T, C, LOAD, STORE)                                        \
    static tl_status bilinear_backward_##suffix(tl_tensor *dst, const tl_tensor *src,              \
                                                const tl_resize2d *r) {                            \
        taps_##C *t = linear_taps_##C(r);                                                          \
        if (!t) return no_memory("upsample_bilinear2d_backward");                                  \
        const taps_##C *col = t + r->out_h;                                                        \
        const int64_t W = r->in_w;                                                                 \
        RESIZE_BACKWARD_BEGIN(T, C, "upsample_bilinear2d_backward", t)                             \
        NN_PARALLEL_FOR(resize_work(r)) for (int64_t p = 0; p < planes; p++) {                     \
            RESIZE_BACKWARD_PLANE(T, C)                                                            \
            for (int64_t oh = 0; oh < r->out_h; oh++) {                                            \
                const taps_##C h = t[oh];                                                          \
                C *r0 = acc + h.i0 * W, *r1 = acc + h.i1 * W;                                      \
                for (int64_t ow = 0; ow < r->out_w; ow++) {                                        \
                    const taps_##C c = col[ow];                                                    \
                    const C v = LOAD(g[oh * r->out_w + ow]);                                       \
                    r0[c.i0] += h.l0 * c.l0 * v;                                                   \
                    r0[c.i1] += h.l0 * c.l1 * v;                                                   \
                    r1[c.i0] += h.l1 * c.l0 * v;                                                   \
                    r1[c.i1] += h.l1 * c.l1 * v;                                                   \
                }                                                                                  \
            }                                                                                      \
            RESIZE_BACKWARD_STORE(STORE)                                                           \
        }                                                                                          \
        free(scratch);                                                                             \
        free(t);                                                                                   \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_NEAREST)
NN_FOR_FLOATING(DEFINE_NEAREST_BACKWARD)
NN_FOR_FLOATING(DEFINE_BILINEAR)
NN_FOR_FLOATING(DEFINE_BILINEAR_BACKWARD)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(upsample_nearest2d, resize, nearest),
    TL_KERNELS_FLOATING(upsample_nearest2d_backward, resize, nearest_backward),
    TL_KERNELS_FLOATING(upsample_bilinear2d, resize, bilinear),
    TL_KERNELS_FLOATING(upsample_bilinear2d_backward, resize, bilinear_backward),
};

TL_KERNEL_TABLE(tl_cpu_resize_table, TL_DEVICE_CPU, entries);
