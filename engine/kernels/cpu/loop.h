/* Internal: the CPU kernels' walks: the strided N-d iterator of the elementwise kernels (fill,
   cast, unary, binary, where), the lines along one dim of reduce, scan and softmax, and the chunks
   of many tensors of the multi-tensor kernels. */
#ifndef TLUA_CPU_LOOP_H
#define TLUA_CPU_LOOP_H

#include <stdint.h>

#include "tlua/tensor.h"

/* out and up to 3 inputs */
#define TL_CPU_LOOP_MAX_TENSORS 4
/* Work of more elements than this is split over OpenMP threads. */
#define TL_CPU_PARALLEL_THRESHOLD 32768

/* A loop that gains from wider vectors (float math that vectorizes: erf, a float reduction's
   lanes) is compiled twice on x86-64, for AVX2 and for the baseline, and the first is taken on a
   CPU with AVX2 (target_clones: chosen once, when the library loads). No FMA: both give the same
   results. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__)
#define TL_CPU_WIDE __attribute__((target_clones("avx2", "default")))
#else
#define TL_CPU_WIDE
#endif

/* The inner loop: n elements, ptrs[0] the output's first one and ptrs[1..] the
   inputs', each advancing by strides[i] bytes (0 for a broadcast input). ctx is the
   caller's (a kernel's tl_op_args, a fill value). A loop should test for the dense
   case (strides equal to the element sizes) and run a flat loop there. */
typedef void (*tl_cpu_loop_fn)(char **ptrs, const int64_t *strides, int64_t n, const void *ctx);

/* Calls fn over every element of tensors[0] (the output) and tensors[1..count-1]
   (inputs of the output's shape, maybe expanded with 0 strides; dtypes may differ).
   Adjacent dims are merged where the strides allow, and dims are ordered so the
   output is walked in memory order. Work above TL_CPU_PARALLEL_THRESHOLD elements is
   split into ranges over OpenMP threads; below it nothing is allocated and no OpenMP
   region is entered. The output must not overlap itself (no 0 stride on a dim of
   size > 1) unless every element written there is the same (fill). */
void tl_cpu_for_each(int count, const tl_tensor *const *tensors, tl_cpu_loop_fn fn,
                     const void *ctx);

/* Kernel table entries (kernels/kernel.h) of an op with one kernel per numeric dtype, named
   <op>_f32, <op>_f64, <op>_bf16, <op>_f16, <op>_i32 and <op>_i64. */
#define TL_CPU_KERNELS_NUMERIC(op, member)                                                         \
    TL_KERNELS_FLOATING(op, member, op), TL_KERNELS_INTEGER(op, member, op)
/* ... and of an op with one kernel per dtype, bool included: <fn>_f32 ... <fn>_i64, <fn>_b8. */
#define TL_CPU_KERNELS_ALL(op, member, fn)                                                         \
    TL_KERNELS_FLOATING(op, member, fn), TL_KERNELS_INTEGER(op, member, fn),                       \
        TL_KERNEL(op, TL_DTYPES_BOOL, member, fn##_b8)
/* ... and of a pointwise op by its row's dtypes rule (tlua/ops.def): <op>_f32 ... as above */
#define TL_POINTWISE_ENTRIES_FLOAT(op, member)      TL_KERNELS_FLOATING(op, member, op)
#define TL_POINTWISE_ENTRIES_FLOAT_ONLY(op, member) TL_KERNELS_FLOATING(op, member, op)
#define TL_POINTWISE_ENTRIES_INT(op, member)        TL_CPU_KERNELS_NUMERIC(op, member)
#define TL_POINTWISE_ENTRIES_BOOL_OUT(op, member)   TL_CPU_KERNELS_ALL(op, member, op)
#define TL_POINTWISE_ENTRIES_BITS(op, member)                                                      \
    TL_KERNELS_INTEGER(op, member, op), TL_KERNEL(op, TL_DTYPES_BOOL, member, op##_b8)

/* ---- lines along one dim ---------------------------------------------------------------------
   The walk of a kernel that runs along one dim (reductions, cumsum, softmax and its backward): the
   elements of tensors[0] are `outer` positions (its other dims, size-1 dims dropped) times `lanes`
   lines side by side times `len` elements along dim. When dim is not unit-stride in tensors[0],
   the lanes are its last unit-stride kept dim, so the inner loop over lanes reads memory in order;
   otherwise lanes = 1 and each line is read in order. A work item is one outer position and a
   block of up to TL_CPU_LANE_BLOCK lanes. The other tensors are walked at the same positions with
   their own strides (a reduction's output has size 1 along dim, an expanded input stride 0). */
#define TL_CPU_LINES_MAX_TENSORS 3
#define TL_CPU_LANE_BLOCK        64

typedef struct tl_cpu_lines {
    int count;                                     /* tensors */
    int64_t len, step[TL_CPU_LINES_MAX_TENSORS];   /* along dim: its size, each tensor's stride */
    int64_t lanes, lane[TL_CPU_LINES_MAX_TENSORS]; /* lines side by side, the stride between them */
    int nouter;
    int64_t outer_shape[TL_MAX_DIMS], outer_stride[TL_CPU_LINES_MAX_TENSORS][TL_MAX_DIMS];
    int64_t outer, blocks, items;           /* items = outer positions x blocks of lanes */
    char *data[TL_CPU_LINES_MAX_TENSORS];   /* first elements (NULL: no tensor, or an empty one) */
    int64_t size[TL_CPU_LINES_MAX_TENSORS]; /* element sizes */
} tl_cpu_lines;

/* Plans the lines along dim of tensors[0 .. count-1]: tensors[0]'s shape is walked and its strides
   choose the lanes; a NULL tensor (an output not asked for) gets zero strides. A 0-dim tensors[0]
   is one line of one element. Strides count elements of their own tensor. */
void tl_cpu_lines_plan(tl_cpu_lines *lines, int count, const tl_tensor *const *tensors, int dim);

/* Sets at[t] to work item `item`'s first element in tensor t (NULL where data[t] is) and returns
   how many lanes the item has. */
int64_t tl_cpu_lines_locate(const tl_cpu_lines *lines, int64_t item, char **at);

/* A kernel's work on one item: `lanes` lines starting at at[0 .. count-1]. */
typedef void (*tl_cpu_lines_fn)(const tl_cpu_lines *lines, char *const *at, int64_t lanes,
                                const void *ctx);

/* Runs fn over every item, split over OpenMP threads when there are several items and the lines
   hold more than parallel_threshold elements of tensors[0]. */
void tl_cpu_lines_for_each(const tl_cpu_lines *lines, int64_t parallel_threshold,
                           tl_cpu_lines_fn fn, const void *ctx);

/* ---- chunks of many tensors --------------------------------------------------------------------
   The elements of n contiguous tensors cut into chunks of TL_CPU_CHUNK (a tensor's last chunk may
   be shorter, an empty tensor has none), numbered across the tensors: the tasks of the
   multi-tensor kernels (adam_step_multi, clip_grad_norm_multi), one OpenMP loop for all. */
#define TL_CPU_CHUNK 16384

typedef struct tl_cpu_chunks {
    tl_tensor *const *tensors;
    int64_t n;
    int64_t *first;   /* first[i]: tensor i's first chunk; first[n] = count */
    int64_t count;    /* chunks */
    int64_t elements; /* of all the tensors */
} tl_cpu_chunks;

/* Plans the chunks of tensors[0 .. n-1]; an allocation failure is an error naming op. Free with
   tl_cpu_chunks_free. */
tl_status tl_cpu_chunks_plan(tl_cpu_chunks *chunks, tl_tensor *const *tensors, int64_t n,
                             const char *op);
/* The tensor of chunk c (returned) and the chunk's elements [*lo, *hi) in it. */
int64_t tl_cpu_chunk_range(const tl_cpu_chunks *chunks, int64_t c, int64_t *lo, int64_t *hi);
void tl_cpu_chunks_free(tl_cpu_chunks *chunks);

#endif
