/* Internal: the strided N-d iterator of the CPU elementwise kernels (fill, cast,
   unary, binary, where): coalesced dims, a 1-D inner loop, OpenMP for large work. */
#ifndef TLUA_CPU_LOOP_H
#define TLUA_CPU_LOOP_H

#include <stdint.h>

#include "tlua/tensor.h"

/* out and up to 3 inputs */
#define TL_CPU_LOOP_MAX_TENSORS 4
/* Work of more elements than this is split over OpenMP threads. */
#define TL_CPU_PARALLEL_THRESHOLD 32768

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

/* The kept dim a reduction along dim walks in its inner loop: the last dim other than dim
   with size > 1 and stride 1, or -1 when there is none. */
static inline int tl_cpu_unit_lane(const tl_tensor *in, int dim) {
    for (int d = in->ndim - 1; d >= 0; d--)
        if (d != dim && in->shape[d] > 1 && in->strides[d] == 1) return d;
    return -1;
}

#endif
