/* Internal: what cuda/clip_norm.c hands to the device side (cuda/clip_norm.cu): one descriptor per
   non-empty gradient and the workspace, all on the device, and the norm's scalars. */
#ifndef TLUA_CUDA_CLIP_NORM_LAUNCH_H
#define TLUA_CUDA_CLIP_NORM_LAUNCH_H

#include "kernels/cuda/ops_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elements of one chunk: one partial result, a CTA's unit of work (a multiple of the vector
   width, 4). */
#define TL_CUDA_CLIP_CHUNK 16384

/* One gradient: numel contiguous elements of dtype (TL_CUDA_F32, _F64, _BF16, _F16); its chunks
   are first_chunk .. first_chunk + ceil(numel / TL_CUDA_CLIP_CHUNK) - 1 of the launch. vec: data
   is aligned for accesses of 4 elements. */
typedef struct tl_cuda_clip_grad {
    void *data;
    int64_t numel, first_chunk;
    int32_t dtype, vec;
} tl_cuda_clip_grad;

/* count descriptors (on the device, ordered by first_chunk), chunks in all; partials: chunks
   doubles and coef: one double, device scratch; total: the 0-dim result (float64 when total_f64,
   else float32); mode: TL_CLIP_NORM_* of kernels/clip_norm.h, p the norm type. */
typedef struct tl_cuda_clip {
    tl_cuda_where at;
    const tl_cuda_clip_grad *grads;
    int64_t count, chunks;
    double *partials, *coef;
    void *total;
    bool total_f64;
    int mode;
    double p, max_norm;
} tl_cuda_clip;

/* Three launches, whatever count is: the partials of every chunk, the total and the coefficient
   (one block), the scaling (which reads the coefficient on the device). No synchronization. */
tl_status tl_cuda_clip_norm_run(const tl_cuda_clip *c);

#ifdef __cplusplus
}
#endif

#endif
