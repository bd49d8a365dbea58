/* The geometry of a 2-D convolution (stride, padding, dilation, groups): a data layout the conv
   ops (tlua/nn.h) and their kernels share. */
#ifndef TLUA_CONV_H
#define TLUA_CONV_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The geometry, {h, w} per field: stride >= 1, zero padding >= 0 on both sides, dilation >= 1
   (the kernel's taps that far apart), and groups >= 1: the C input and O output channels split
   into `groups` equal runs, output run g reading only input run g (groups = C: depthwise). */
typedef struct tl_conv2d_options {
    int64_t stride[2], padding[2], dilation[2];
    int64_t groups;
} tl_conv2d_options;

/* Stride 1, no padding, dilation 1, one group. */
static inline tl_conv2d_options tl_conv2d_defaults(void) {
    tl_conv2d_options defaults = {{1, 1}, {0, 0}, {1, 1}, 1};
    return defaults;
}

#ifdef __cplusplus
}
#endif

#endif
