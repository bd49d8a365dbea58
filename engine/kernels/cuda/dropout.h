/* Internal: what the C side of the CUDA dropout kernel (cuda/dropout.c) hands to its device side
   (cuda/dropout.cu). Plain C for gcc and nvcc alike. */
#ifndef TLUA_CUDA_DROPOUT_H
#define TLUA_CUDA_DROPOUT_H

#include "kernels/cuda/ops_launch.h" /* tl_cuda_where; launch.h: TL_CUDA_* dtypes, geometry */

#ifdef __cplusplus
extern "C" {
#endif

/* out = in * keep / (1 - p) over n elements, element e (out's row-major index) kept when the
   float32 uniform `rand` draws for it from (seed, counter) is >= threshold ((float)p; 1 drops
   all). dense: out and in contiguous; else geometry holds out's row-major dims (size-1 dims
   dropped, merged where both allow) with the strides of out (operand 0) and in (operand 1). */
typedef struct tl_cuda_dropout {
    tl_cuda_where at;
    int dtype; /* TL_CUDA_* */
    void *out;
    const void *in;
    int64_t n;
    bool dense;
    tl_cuda_geometry geometry;
    uint64_t seed, counter;
    float threshold;
    double keep_div; /* 1 - p */
} tl_cuda_dropout;

tl_status tl_cuda_dropout_run(const tl_cuda_dropout *d);

#ifdef __cplusplus
}
#endif

#endif
