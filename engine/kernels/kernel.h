/* Kernel signatures (one per op family), the op enum from ops.def, and the
   typed dispatch by (op, device, dtype) every functional op goes through. */
#ifndef TLUA_KERNEL_H
#define TLUA_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "tlua/tensor.h"
#include "kernels/gemm.h"
#include "kernels/op.h"



/* Scalars an op passes to its kernel: pow's exponent (scalar[0]); clamp's
   bounds (scalar[0..1] with has_scalar); randint's [low, high) (scalar[0..1]);
   the random stream (seed, counter). */
typedef struct tl_op_args {
    double scalar[2];
    bool has_scalar[2];
    uint64_t seed;
    uint64_t counter;
} tl_op_args;

/* Elementwise kernels get inputs already broadcast (expanded, stride 0) to
   out's shape. `out` is freshly allocated or validated; kernels never fail
   on user input, only on device errors. */
typedef tl_status (*tl_unary_kernel)(tl_tensor *out, const tl_tensor *in, const tl_op_args *args);
typedef tl_status (*tl_binary_kernel)(tl_tensor *out, const tl_tensor *a, const tl_tensor *b);
typedef tl_status (*tl_ternary_kernel)(tl_tensor *out, const tl_tensor *cond, const tl_tensor *a,
                                       const tl_tensor *b);
typedef tl_status (*tl_fill_kernel)(tl_tensor *out, tl_scalar value);
/* dst and src have the same shape (src expanded); dtypes may differ; the
   kernel is looked up by src's dtype and handles every dst dtype. */
typedef tl_status (*tl_copy_kernel)(tl_tensor *dst, const tl_tensor *src);
/* Reduces dim of in into out (out has in's shape with dim of size 1);
   indices (int64, same shape as out) is set for max/min/argmax/argmin and
   NULL for sum/mean. For argmax/argmin `out` is NULL. */
typedef tl_status (*tl_reduce_kernel)(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,
                                      int dim);
typedef tl_status (*tl_softmax_kernel)(tl_tensor *out, const tl_tensor *in, int dim);
typedef tl_status (*tl_gemm_kernel)(const GemmParams *params, const void *a, const void *b,
                                    void *c);
typedef tl_status (*tl_random_kernel)(tl_tensor *out, const tl_op_args *args);

typedef struct tl_kernel_entry {
    tl_op op;
    tl_dtype dtype;
    const char *name; /* "cpu_add_f32" */
    union {
        tl_unary_kernel unary;
        tl_binary_kernel binary;
        tl_ternary_kernel ternary;
        tl_fill_kernel fill;
        tl_copy_kernel copy;
        tl_reduce_kernel reduce;
        tl_softmax_kernel softmax;
        tl_gemm_kernel gemm;
        tl_random_kernel random;
    } fn;
} tl_kernel_entry;

/* A kernel table of one file, registered in kernels/registry.c. */
typedef struct tl_kernel_table {
    tl_device_type device;
    const tl_kernel_entry *entries;
    int count;
} tl_kernel_table;

/* Ends a kernel file: `TL_KERNEL_TABLE(tl_cpu_unary_table, TL_DEVICE_CPU, entries);` */
#define TL_KERNEL_TABLE(table_name, device, entries)                                             \
    const tl_kernel_table table_name = {device, entries, (int)(sizeof entries / sizeof entries[0])}

/* Finds the kernel for (op, device, dtype) and records the run for tl.trace
   and the coverage report with the shapes of `tensors` (output first, then
   inputs; NULL-terminated, at most TL_TRACE_MAX_TENSORS). On failure sets an
   error naming the op, device and dtype and returns NULL. */
const tl_kernel_entry *tl_dispatch(tl_op op, tl_device device, tl_dtype dtype,
                                   const tl_tensor *const *tensors);
/* The same with explicit shapes (for GEMM, which sees pointers, not tensors). */
const tl_kernel_entry *tl_dispatch_shapes(tl_op op, tl_device device, tl_dtype dtype, int count,
                                          const int *ndims,
                                          const int64_t (*shapes)[TL_MAX_DIMS]);
/* True if a kernel exists (no error, no record). */
bool tl_has_kernel(tl_op op, tl_device_type device, tl_dtype dtype);

#endif
