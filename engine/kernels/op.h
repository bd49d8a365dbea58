/* The op enum and per-op facts (family, differentiable, backward), all from ops.def. */
#ifndef TLUA_OP_H
#define TLUA_OP_H

#include <stdbool.h>

typedef enum tl_op {
#define OP(name, family, differentiable, backward) TL_OP_##name,
#include "tlua/ops.def"
#undef OP
    TL_OP_COUNT
} tl_op;

typedef enum tl_op_family {
    TL_FAMILY_UNARY,
    TL_FAMILY_POINTWISE,          /* y = f(x), math shared by CPU and CUDA (kernels/pointwise.h) */
    TL_FAMILY_POINTWISE_BACKWARD, /* out = f(grad, saved), binary kernels, math as above */
    TL_FAMILY_POINTWISE_BINARY,   /* y = f(a, b) broadcasting, binary kernels, math as above */
    TL_FAMILY_BINARY,
    TL_FAMILY_TERNARY,
    TL_FAMILY_FILL,
    TL_FAMILY_COPY,
    TL_FAMILY_REDUCE,
    TL_FAMILY_SOFTMAX,
    TL_FAMILY_GEMM,
    TL_FAMILY_RANDOM,
    TL_FAMILY_VIEW, /* no kernels */
    /* nn (engine/include/tlua/nn.h) */
    TL_FAMILY_IM2COL,                 /* conv2d's im2col and col2im */
    TL_FAMILY_POOL,                   /* max_pool2d forward: values and argmax indices */
    TL_FAMILY_POOL_BACKWARD,          /* max_pool2d backward: scatter to the indices */
    TL_FAMILY_EMBEDDING,              /* gather rows / scatter-add rows by index */
    TL_FAMILY_CROSS_ENTROPY,          /* fused log-softmax + NLL, mean over rows */
    TL_FAMILY_CROSS_ENTROPY_BACKWARD, /* (softmax - smoothed one-hot) * grad / N */
    TL_FAMILY_LAYER_NORM,             /* forward with per-row mean and rstd */
    TL_FAMILY_LAYER_NORM_BACKWARD,    /* input grad; weight and bias grads */
    TL_FAMILY_OPTIM,                  /* fused in-place optimizer steps */
} tl_op_family;

typedef enum tl_backward_kind {
    TL_BACKWARD_NONE,
    TL_BACKWARD_KERNELS,
    TL_BACKWARD_COMPOSED,
} tl_backward_kind;

typedef struct tl_op_info {
    const char *name;
    tl_op_family family;
    const char *family_name; /* as written in ops.def */
    bool differentiable;
    tl_backward_kind backward;
} tl_op_info;

const tl_op_info *tl_op_info_of(tl_op op);
/* The op named name, or TL_OP_COUNT. */
tl_op tl_op_by_name(const char *name);

#endif
