/* Internal: what the C side of the CUDA reduction, softmax, random and nn kernels
   (cuda/reduce.c, softmax.c, ...) hands to their device side (the .cu files of the same name):
   plain-C descriptions of the data, the geometry and the stream. */
#ifndef TLUA_CUDA_OPS_LAUNCH_H
#define TLUA_CUDA_OPS_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/cuda/launch.h" /* TL_CUDA_* dtypes, TL_CUDA_DIMS */
#include "tlua/error.h"

/* Where a kernel runs: the device, its stream and multiprocessor count, the op (for errors). */
typedef struct tl_cuda_where {
    const char *op;
    int device;
    cudaStream_t stream;
    int sm_count;
} tl_cuda_where;

/* Positions (a reduction's outputs, a softmax's rows): `count` of them, position j at
   coordinates of j (row-major over shape[0..ndim)) and element offset sum of coordinate d *
   strides[k][d] in tensor k. Dims are ordered so tensor 0's strides decrease, merged where
   every tensor allows. */
typedef struct tl_cuda_positions {
    int ndim;
    int64_t count;
    int64_t shape[TL_CUDA_DIMS];
    int64_t strides[3][TL_CUDA_DIMS];
} tl_cuda_positions;

/* ---- reductions (cuda/reduce.cu) ----------------------------------------------------- */
enum { TL_CUDA_REDUCE_SUM, TL_CUDA_REDUCE_MEAN, TL_CUDA_REDUCE_MAX, TL_CUDA_REDUCE_MIN };

/* out (may be NULL: argmax/argmin) and idx (int64, may be NULL: sum/mean) at position j get the
   reduction of in[pos(j) + r * step], r < len. pos's tensors: 0 in, 1 out, 2 idx. */
typedef struct tl_cuda_reduce {
    tl_cuda_where at;
    int kind;  /* TL_CUDA_REDUCE_* */
    int dtype; /* the input's TL_CUDA_* */
    const void *in;
    void *out;
    int64_t *idx;
    int64_t len, step;
    tl_cuda_positions pos;
} tl_cuda_reduce;
tl_status tl_cuda_reduce_run(const tl_cuda_reduce *r);

/* ---- softmax (cuda/softmax.cu) -------------------------------------------------------- */
/* Rows at pos (tensors: 0 in, 1 out), len elements each, step_in / step_out apart. */
typedef struct tl_cuda_softmax {
    tl_cuda_where at;
    int dtype;
    bool log_mode;
    const void *in;
    void *out;
    int64_t len, step_in, step_out;
    tl_cuda_positions pos;
} tl_cuda_softmax;
tl_status tl_cuda_softmax_run(const tl_cuda_softmax *s);

/* ---- random (cuda/random.cu) ---------------------------------------------------------- */
enum { TL_CUDA_RAND, TL_CUDA_RANDN, TL_CUDA_RANDINT };
/* n contiguous elements of dtype from Philox blocks counter, counter + 1, ... of seed;
   randint: low + (64 bits mod range). */
typedef struct tl_cuda_random {
    tl_cuda_where at;
    int kind, dtype;
    void *out;
    int64_t n;
    uint64_t seed, counter;
    int64_t low;
    uint64_t range;
} tl_cuda_random;
tl_status tl_cuda_random_run(const tl_cuda_random *r);

/* ---- nn: the window of im2col/col2im/pooling (kernels/kernel.h's tl_window2d) ----------- */
typedef struct tl_cuda_window {
    int64_t batch, channels, height, width;
    int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
    int64_t out_h, out_w;
    int64_t col_row_stride, col_batch_stride;
} tl_cuda_window;
/* the window of kernels/kernel.h in this plain form (cuda/conv.c; used by cuda/pool.c too) */
struct tl_window2d;
tl_cuda_window tl_cuda_window_of(const struct tl_window2d *w);

/* cuda/conv.cu: im2col (dst columns, src images) or col2im (dst images, src columns) */
tl_status tl_cuda_im2col_run(const tl_cuda_where *at, bool to_columns, int dtype, void *dst,
                             const void *src, const tl_cuda_window *w);
/* cuda/pool.cu */
tl_status tl_cuda_max_pool_run(const tl_cuda_where *at, int dtype, void *out, int64_t *indices,
                               const void *in, const tl_cuda_window *w);
tl_status tl_cuda_max_pool_backward_run(const tl_cuda_where *at, int dtype, void *grad_in,
                                        const void *grad_out, const int64_t *indices,
                                        const tl_cuda_window *w);

struct tl_cuda_fault; /* core/cuda/cuda_runtime.h */
/* cuda/index_check.cu: indices (n, int32 or int64 by index_dtype) outside [first, first +
   count) are reported in *fault under id (the first failure wins; see tl_cuda_fault) */
tl_status tl_cuda_index_check_run(const tl_cuda_where *at, const void *indices, int index_dtype,
                                  int64_t n, int64_t first, int64_t count,
                                  struct tl_cuda_fault *fault, unsigned int id);

/* cuda/embedding.cu: indices (n, int32 or int64 by index_dtype) into the `rows` rows of D
   elements of src; an index outside [0, rows) gives a zero row */
tl_status tl_cuda_embedding_run(const tl_cuda_where *at, int dtype, void *out, const void *src,
                                const void *indices, int index_dtype, int64_t n, int64_t rows,
                                int64_t D);
/* out [rows, D] = the rows of src [n, D] summed by index, in order (an index outside [0, rows)
   adds nowhere) */
tl_status tl_cuda_embedding_backward_run(const tl_cuda_where *at, int dtype, void *out,
                                         const void *src, const void *indices, int index_dtype,
                                         int64_t n, int64_t rows, int64_t D);

/* cuda/cross_entropy.cu: logits [N, K], target (int32/int64 by target_dtype) [N] */
typedef struct tl_cuda_cross_entropy {
    tl_cuda_where at;
    int dtype, target_dtype;
    int64_t N, K;
    double smoothing;
    const void *logits, *target;
    void *loss;            /* forward: one element of dtype */
    void *lse;             /* float32 (float64 for float64 logits); read by the backward */
    const void *grad_loss; /* backward: one element of dtype */
    void *grad;            /* backward: [N, K] */
} tl_cuda_cross_entropy;
tl_status tl_cuda_cross_entropy_run(const tl_cuda_cross_entropy *c);
tl_status tl_cuda_cross_entropy_backward_run(const tl_cuda_cross_entropy *c);

/* cuda/layer_norm.cu: rows of D elements; mean/rstd float32 (float64 for float64). */
typedef struct tl_cuda_layer_norm {
    tl_cuda_where at;
    int dtype;
    int64_t rows, D;
    double eps;
    const void *in, *weight, *bias, *grad_out; /* weight, bias may be NULL */
    void *out;                                 /* forward output or grad_in */
    void *mean, *rstd;                         /* written by the forward, read by the backward */
    void *grad_weight, *grad_bias;             /* may be NULL */
} tl_cuda_layer_norm;
tl_status tl_cuda_layer_norm_run(const tl_cuda_layer_norm *l);
tl_status tl_cuda_layer_norm_backward_input_run(const tl_cuda_layer_norm *l);
tl_status tl_cuda_layer_norm_backward_weight_run(const tl_cuda_layer_norm *l);

/* cuda/optim.cu: the hyper-parameters already in the form the CPU kernels compute them (in
   double); the device rounds them to the compute type as the CPU does. */
typedef struct tl_cuda_optim {
    tl_cuda_where at;
    int dtype;
    int64_t n;
    void *param, *state0, *state1; /* state0/state1 NULL where unused */
    const void *grad;
    /* sgd */
    double weight_decay, momentum, keep, neg_lr;
    bool decay, nesterov, first_step;
    /* adam */
    double neg_step_size, correction2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps,
        shrink;
    bool decoupled, l2;
} tl_cuda_optim;
tl_status tl_cuda_sgd_run(const tl_cuda_optim *o);
tl_status tl_cuda_adam_run(const tl_cuda_optim *o);

#ifdef __cplusplus
}
#endif

/* ---- C side helpers (the kernel tables' files) ------------------------------------------ */
#ifndef __cplusplus
#include "core/cuda/cuda_runtime.h"
#include "kernels/kernel.h"

/* The stream of t's device, its multiprocessor count and the op's name. */
static inline tl_status tl_cuda_where_of(const tl_tensor *t, const char *op, tl_cuda_where *at) {
    at->op = op;
    at->device = tl_tensor_device(t).index;
    TL_TRY(tl_cuda_stream(at->device, op, &at->stream));
    at->sm_count = tl_cuda_sm_count(at->device);
    return TL_OK;
}

/* The positions over the dims of shape other than `skip` (-1: none) and of size > 1, with
   the strides of `count` tensors (a NULL strides array: zeros). */
static inline void tl_cuda_positions_make(tl_cuda_positions *p, int ndim, const int64_t *shape,
                                          int skip, int count, const int64_t *const *strides) {
    int dims[TL_CUDA_DIMS], n = 0;
    for (int d = 0; d < ndim; d++)
        if (d != skip && shape[d] > 1) dims[n++] = d;
    /* stable insertion sort: tensor 0's |stride| decreasing */
    for (int i = 1; i < n; i++) {
        int d = dims[i], j = i;
        int64_t s = strides[0][d] < 0 ? -strides[0][d] : strides[0][d];
        while (j > 0) {
            int64_t t = strides[0][dims[j - 1]];
            if ((t < 0 ? -t : t) >= s) break;
            dims[j] = dims[j - 1];
            j--;
        }
        dims[j] = d;
    }
    p->ndim = 0;
    p->count = 1;
    for (int i = 0; i < n; i++) {
        int d = dims[i], k = p->ndim;
        bool merge = k > 0;
        for (int t = 0; t < count && merge; t++) {
            int64_t st = strides[t] ? strides[t][d] : 0;
            merge = p->strides[t][k - 1] == st * shape[d];
        }
        if (merge) {
            p->shape[k - 1] *= shape[d];
            for (int t = 0; t < count; t++) p->strides[t][k - 1] = strides[t] ? strides[t][d] : 0;
        } else {
            p->shape[k] = shape[d];
            for (int t = 0; t < 3; t++)
                p->strides[t][k] = t < count && strides[t] ? strides[t][d] : 0;
            p->ndim++;
        }
        p->count *= shape[d];
    }
    for (int d = 0; d < ndim; d++)
        if (d != skip && shape[d] == 0) p->count = 0;
}
#endif

#endif
