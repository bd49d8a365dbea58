/* Internal to the CPU depthwise conv2d kernels: the geometry of a problem and the stride-1 path
   (flat correlations, depthwise_flat.c) that depthwise.c's kernels call. */
#ifndef TLUA_CPU_DEPTHWISE_H
#define TLUA_CPU_DEPTHWISE_H

#include "kernels/cpu/nn_kernels.h"

/* The geometry of one problem: x [N, C, H, W], weight [C M, 1, KH, KW], y [N, C M, OH, OW]; output
   o reads input channel o / M. y[n, o, oh, ow] = sum over i < KH, j < KW of
   x[n, o / M, oh sh - ph + i dh, ow sw - pw + j dw] w[o, i, j] (the taps outside x read 0). */
typedef struct depthwise {
    int64_t n, c, h, w, o, m, kh, kw, oh, ow;
    int64_t sh, sw, ph, pw, dh, dw;
} depthwise;

static inline depthwise depthwise_geometry(const tl_tensor *x, const tl_tensor *weight,
                                           const tl_tensor *y, const tl_conv2d_options *o) {
    return (depthwise){.n = x->shape[0],
                       .c = x->shape[1],
                       .h = x->shape[2],
                       .w = x->shape[3],
                       .o = weight->shape[0],
                       .m = weight->shape[0] / x->shape[1],
                       .kh = weight->shape[2],
                       .kw = weight->shape[3],
                       .oh = y->shape[2],
                       .ow = y->shape[3],
                       .sh = o->stride[0],
                       .sw = o->stride[1],
                       .ph = o->padding[0],
                       .pw = o->padding[1],
                       .dh = o->dilation[0],
                       .dw = o->dilation[1]};
}

/* The three passes, each over dense tensors of one floating dtype: the forward (out y, a x, b
   weight), the input gradient (out dx, a gy, b weight), the weight gradient (out dw, a gy, b x). */
typedef enum depthwise_pass {
    DEPTHWISE_FORWARD,
    DEPTHWISE_INPUT,
    DEPTHWISE_WEIGHT,
} depthwise_pass;

/* Runs pass of a stride-1 problem g (sh = sw = 1) by flat correlations; *finite tells whether
   every sum was finite. The flat sums multiply the zero border of a frame (and the weight
   gradient's zero columns) with the other operand, which adds exact zeros when that operand is
   finite but nan when it holds an inf or nan: a sum that is not finite may hold a nan that the
   taps inside the image alone would not give, so the caller redoes that pass by the direct loops.
 */
tl_status tl_cpu_depthwise_flat(depthwise_pass pass, tl_tensor *out, const tl_tensor *a,
                                const tl_tensor *b, const depthwise *g, bool *finite);

#endif
