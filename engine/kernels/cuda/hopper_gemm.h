/* Internal: the Hopper GEMM core (hopper_gemm.cu, built for sm_90a only): its problem description
   and launcher, for the C kernel files of engine/kernels/cuda. */
#ifndef TLUA_CUDA_HOPPER_GEMM_H
#define TLUA_CUDA_HOPPER_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "core/cuda/cuda_runtime.h"
#include "tlua/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the core's persistent tile scheduler walks (row-major throughout; s_g, e_g the start and
   end of segment g: s_0 = 0, s_g = e_{g-1}, e_g = ends[g], ends on the device, clamped into
   [s_g, the rows] as they are read):
   ROWS:      C[s_g:e_g) = A[s_g:e_g) op(B_g) for g < groups, C [m, n], A [m, k] K-major, B_g the
              g-th matrix of b (group_stride apart), [k, n] (b_n_major) or [n, k]; the rows of C
              from the last end on are written zeros. One product is ROWS with one group.
   REDUCTION: C_g = A[s_g:e_g)^T B[s_g:e_g) for g < groups, C_g [m, n] the g-th matrix of c
              (group_stride apart), A [k, m] (M-major: a_m_major), B [k, n] (b_n_major); an empty
              segment's C_g is written zeros.
   INPLACE:   A = A op(B), written over A [m, k] (K-major) with k = n <= TL_HOPPER_MAX_INPLACE_N,
              B [k, n] (b_n_major) or [n, k]: n / 256 CTAs take the column tiles of 128 rows in
              the same round, and each stores its product once all of them have read those rows
              (counters for two rounds of 128-row blocks: a workspace independent of m, no
              products in it); c, groups and ends are unused.
   Every tile a CTA takes is found on the device from the ends: nothing waits on the host. */
typedef enum tl_hopper_kind {
    TL_HOPPER_ROWS,
    TL_HOPPER_REDUCTION,
    TL_HOPPER_INPLACE
} tl_hopper_kind;
#define TL_HOPPER_MAX_INPLACE_N 8192 /* 32 CTAs of 256 columns wait for each other */

/* A row-major matrix (or stack of matrices): data, elements between rows, between matrices. */
typedef struct tl_hopper_operand {
    const void *data;
    int64_t ld, group_stride;
} tl_hopper_operand;

typedef struct tl_hopper_gemm {
    tl_hopper_kind kind;
    bool half;                   /* float16 operands and result, else bfloat16 */
    bool a_m_major, b_n_major;   /* see above: ROWS takes a_m_major false, REDUCTION both true */
    int64_t m, n, k;             /* ROWS: the rows in all, n and k of each product; REDUCTION: each
                                    C_g's m and n, k the rows in all */
    int64_t groups;              /* >= 1 */
    const void *ends;            /* groups cumulative ends, int32 or int64 (ends_i64) */
    bool ends_i64, ends_on_host; /* host ends are staged on the stream (no wait) */
    tl_hopper_operand a, b, c;   /* c is written */
    /* where the schedule reports an end outside [0, rows] (range_id) or a step between ends
       outside it (steps_id: a decrease), as an index check does; NULL: no check */
    tl_cuda_fault *fault;
    unsigned int range_id, steps_id;
} tl_hopper_gemm;

/* True when the build has the core and device is a Hopper GPU (compute capability 9.0). */
bool tl_hopper_gemm_available(int device);
/* True when the core takes g as described: available on device, every size below 2^31, at most
   TL_HOPPER_MAX_GROUPS groups, every operand 16-byte aligned with rows (and matrices) a multiple
   of 16 bytes apart. Else the caller takes another path. */
#define TL_HOPPER_MAX_GROUPS 4096
bool tl_hopper_gemm_takes(int device, const tl_hopper_gemm *g);
/* Queues g on stream (device current). op names the caller in errors. */
tl_status tl_hopper_gemm_run(int device, cudaStream_t stream, const tl_hopper_gemm *g,
                             const char *op);

/* The block-sparse linear's forward and input gradient on the core's pieces
   (hopper_block_sparse.cu, blocks of 64): out [rows, outputs * 64], its block column o = the sum
   over the entries e of o's list (offsets[o] .. offsets[o + 1]) of dense's block column
   dense_index[e] times the weight block w = weight_index[e] (e itself when weight_index is NULL)
   of blocks [nnz, 64, 64]: W_w^T in the forward (+ bias[o * 64 ..] when given), W_w in the input
   gradient. An entry whose index is out of range is skipped. Rows dense_width / out_width
   elements apart; every operand 16-byte aligned with those a multiple of 8. */
typedef struct tl_hopper_block_sparse {
    bool half, forward;
    int64_t block, rows, outputs, nnz, dense_limit;
    const void *dense, *blocks, *bias;
    void *out;
    int64_t dense_width, out_width;
    const int32_t *offsets, *dense_index, *weight_index;
} tl_hopper_block_sparse;

bool tl_hopper_block_sparse_takes(int device, const tl_hopper_block_sparse *p);
tl_status tl_hopper_block_sparse_run(int device, cudaStream_t stream,
                                     const tl_hopper_block_sparse *p, const char *op);

#ifdef __cplusplus
}
#endif

#endif
