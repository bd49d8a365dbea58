/* The pooling windows and interpolate's source positions along one axis, for the CPU kernels
   and (as CUDA C++) the CUDA kernels, so that both devices read the same elements. */
#ifndef TLUA_KERNELS_POOL_WINDOW_H
#define TLUA_KERNELS_POOL_WINDOW_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TL_POOL_FN static __host__ __device__ __forceinline__
#else
#define TL_POOL_FN static inline
#endif

/* Adaptive pooling's window of output o (of out) over in: floor(o in / out) ..
   ceil((o + 1) in / out), never empty. */
TL_POOL_FN void tl_adaptive_span(int64_t o, int64_t in, int64_t out, int64_t *start, int64_t *end) {
    *start = o * in / out;
    *end = ((o + 1) * in + out - 1) / out;
}

/* Max pooling's taps of output o: start, start + step, ... below end, all inside [0, in) (the
   op makes sure there is one). adaptive: the adaptive window, step 1. */
TL_POOL_FN void tl_max_taps(int64_t o, int64_t in, int64_t out, int64_t kernel, int64_t stride,
                            int64_t pad, int64_t dilation, bool adaptive, int64_t *start,
                            int64_t *end, int64_t *step) {
    if (adaptive) {
        tl_adaptive_span(o, in, out, start, end);
        *step = 1;
        return;
    }
    int64_t s = o * stride - pad, e = s + (kernel - 1) * dilation + 1;
    if (e > in) e = in;
    if (s < 0) s += (-s + dilation - 1) / dilation * dilation;
    *start = s, *end = e, *step = dilation;
}

/* Average pooling's window of output o: [start, end) inside the input, and count, its part of
   the divisor: the window clipped to the padded input (count_include_pad) or to the input. */
TL_POOL_FN void tl_avg_span(int64_t o, int64_t in, int64_t out, int64_t kernel, int64_t stride,
                            int64_t pad, bool adaptive, bool count_include_pad, int64_t *start,
                            int64_t *end, int64_t *count) {
    if (adaptive) {
        tl_adaptive_span(o, in, out, start, end);
        *count = *end - *start;
        return;
    }
    int64_t s = o * stride - pad, e = s + kernel;
    if (e > in + pad) e = in + pad;
    const int64_t padded = e - s;
    if (s < 0) s = 0;
    if (e > in) e = in;
    *start = s, *end = e;
    *count = count_include_pad ? padded : e - s;
}

/* interpolate 'nearest': min(floor((float)o * scale), in - 1), in float as PyTorch. */
TL_POOL_FN int64_t tl_nearest_source(int64_t o, int64_t in, float scale) {
    const int64_t s = (int64_t)floorf((float)o * scale);
    return s < in - 1 ? s : in - 1;
}

/* interpolate 'bilinear' along one axis: the two inputs i0, i1 (i1 = i0 at the last) and their
   weights l0, l1 of output o; the coordinate computed in double and rounded to the compute type
   C (float or double), as PyTorch's CPU kernels. */
#define TL_LINEAR_SOURCE(name, C)                                                                  \
    TL_POOL_FN void name(int64_t o, int64_t in, double scale, bool align_corners, int64_t *i0,     \
                         int64_t *i1, C *l0, C *l1) {                                              \
        C src = align_corners ? (C)((C)scale * (C)o) : (C)((C)scale * ((double)o + 0.5) - 0.5);    \
        if (src < (C)0) src = (C)0;                                                                \
        int64_t a = (int64_t)src;                                                                  \
        if (a > in - 1) a = in - 1;                                                                \
        *i0 = a;                                                                                   \
        *i1 = a + (a < in - 1 ? 1 : 0);                                                            \
        *l1 = src - (C)a;                                                                          \
        *l0 = (C)1 - *l1;                                                                          \
    }
TL_LINEAR_SOURCE(tl_linear_source_f, float)
TL_LINEAR_SOURCE(tl_linear_source_d, double)

#endif
