/* Which kernels ran (a trace of executed kernels, per-kernel run counts) and the op table. */
#ifndef TLUA_TRACE_H
#define TLUA_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "tlua/device.h"
#include "tlua/dtype.h"
#include "tlua/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_TRACE_MAX_TENSORS  4
#define TL_TRACE_MAX_VARIANTS 6

typedef struct tl_trace_event {
    const char *op;     /* "add" */
    const char *kernel; /* "cpu_add_f32" */
    /* the paths the kernel took, for a kernel that has several ("mma_d64", "dropout_ahead") */
    int nvariants;
    const char *variants[TL_TRACE_MAX_VARIANTS];
    tl_device device;
    tl_dtype dtype;
    int ntensors; /* shapes of the output then the inputs */
    int ndims[TL_TRACE_MAX_TENSORS];
    int64_t shapes[TL_TRACE_MAX_TENSORS][TL_MAX_DIMS];
} tl_trace_event;

/* Starts recording kernel runs of this thread (nested starts are counted; an end nested more
   than 64 deep is an error). */
void tl_trace_begin(void);
/* Stops recording; *events (owned by the caller, free()) and *count get the
   runs since the matching begin. On error *events is NULL and *count 0 (the begin is still
   ended). */
tl_status tl_trace_end(tl_trace_event **events, int *count);

/* Every registered kernel with how often it ran in this process. */
typedef struct tl_kernel_info {
    const char *op;
    const char *kernel;
    tl_device_type device;
    tl_dtype dtype;
    uint64_t runs;
} tl_kernel_info;
/* Writes up to max entries; returns the number of registered kernels. */
int tl_kernel_list(tl_kernel_info *out, int max);

/* Every registered path of a kernel that has several (kernels/kernel.h's tl_kernel_variant): the
   kernel (as tl_kernel_list names it), the path's name and the condition that picks it, and how
   often it ran in this process. A path of a loop many kernels share has loop set (its name) and
   no op or kernel: it counts the runs of every kernel of its dtype. */
typedef struct tl_kernel_variant_info {
    const char *op;     /* NULL for a loop's */
    const char *kernel; /* NULL for a loop's */
    const char *loop;   /* NULL for a kernel's */
    const char *variant;
    const char *condition;
    tl_device_type device;
    tl_dtype dtype;
    uint64_t runs;
} tl_kernel_variant_info;
/* Writes up to max entries; returns the number of registered variants. */
int tl_kernel_variant_list(tl_kernel_variant_info *out, int max);

/* A row of the op table (tlua/ops.def). */
typedef struct tl_op_description {
    const char *name;     /* "add" */
    const char *family;   /* "binary", lower case */
    bool differentiable;  /* autograd records it */
    const char *backward; /* "none", "kernels" or "composed" */
    const char *dtypes;   /* pointwise rows: "FLOAT", "INT", ... (tlua/ops.def); else NULL */
    const char *numbers;  /* pointwise rows: "min_val=-1 max_val=1", "" for none; else NULL */
} tl_op_description;
/* Writes up to max rows in table order; returns the number of ops. */
int tl_op_list(tl_op_description *out, int max);

#ifdef __cplusplus
}
#endif

#endif
