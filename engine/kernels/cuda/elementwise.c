/* The CUDA elementwise kernel tables (unary, binary, where, fill, cast, activation backward):
   each kernel merges its tensors' geometry into a tl_cuda_launch and runs the device code of its
   .cu file on the device's stream. */
#include <string.h>

#include "core/cuda/cuda_runtime.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.h"

_Static_assert(TL_CUDA_F32 == (int)TL_F32 && TL_CUDA_F64 == (int)TL_F64 &&
                   TL_CUDA_BF16 == (int)TL_BF16 && TL_CUDA_F16 == (int)TL_F16 &&
                   TL_CUDA_I32 == (int)TL_I32 && TL_CUDA_I64 == (int)TL_I64 &&
                   TL_CUDA_BOOL == (int)TL_BOOL && TL_CUDA_DTYPE_COUNT == (int)TL_DTYPE_COUNT,
               "launch.h mirrors tl_dtype");
_Static_assert(TL_CUDA_DIMS == TL_MAX_DIMS, "launch.h mirrors TL_MAX_DIMS");

/* The launch of count operands of out's shape (t[0] the output): the device's stream, size-1
   dims dropped, adjacent dims merged where every operand's strides allow, and the dense case
   (one dim, each operand of stride 1 or 0) marked for the flat kernels. */
static tl_status prepare(tl_op op, int count, const tl_tensor *const *t, tl_cuda_launch *l) {
    const tl_tensor *out = t[0];
    l->op = tl_op_info_of(op)->name;
    for (int i = 1; i < count; i++)
        if (t[i]->ndim != out->ndim)
            return tl_error(TL_ERR_SHAPE,
                            "%s: CUDA kernel got an input of %d dims for an output of %d", l->op,
                            t[i]->ndim, out->ndim);
    int device = out->storage->device.index;
    TL_TRY(tl_cuda_stream(device, l->op, &l->stream));
    l->sm_count = tl_cuda_sm_count(device);
    l->count = count;
    l->numel = tl_numel(out);
    for (int i = 0; i < count; i++) l->data[i] = tl_data(t[i]);

    tl_cuda_geometry *g = &l->geometry;
    g->ndim = 0;
    for (int d = 0; d < out->ndim; d++) {
        int64_t size = out->shape[d];
        if (size == 1) continue;
        int n = g->ndim;
        bool merge = n > 0;
        for (int i = 0; i < count && merge; i++)
            merge = g->strides[i][n - 1] == t[i]->strides[d] * size;
        if (merge) {
            g->shape[n - 1] *= size;
        } else {
            g->shape[n] = size;
            g->ndim++;
        }
        for (int i = 0; i < count; i++) g->strides[i][g->ndim - 1] = t[i]->strides[d];
    }
    l->dense = g->ndim <= 1;
    l->scalar_mask = 0;
    if (g->ndim == 1) {
        l->dense = g->strides[0][0] == 1;
        for (int i = 1; i < count; i++) {
            if (g->strides[i][0] == 0)
                l->scalar_mask |= 1u << i;
            else if (g->strides[i][0] != 1)
                l->dense = false;
        }
    }
    return TL_OK;
}

/* ---- unary ------------------------------------------------------------------------------- */
static tl_status unary(tl_op op, tl_tensor *out, const tl_tensor *in, const tl_op_args *args) {
    static const double no_scalar[2];
    static const bool no_flags[2];
    tl_cuda_launch l;
    TL_TRY(prepare(op, 2, (const tl_tensor *const[]){out, in}, &l));
    return tl_cuda_unary_run(op, (int)in->dtype, &l, args ? args->scalar : no_scalar,
                             args ? args->has_scalar : no_flags);
}

/* The unary and binary ops beyond ops.def's POINTWISE families, with the dtypes they serve: one
   list for the functions below and the tables at the end. */
#define UNARY_OPS(X)                                                                               \
    X(neg, NUMERIC) X(abs, NUMERIC) X(relu, NUMERIC) X(pow_scalar, NUMERIC) X(clamp, NUMERIC)
/* clang-format off */
#define BINARY_OPS(X)                                                                              \
    X(add, NUMERIC) X(sub, NUMERIC) X(mul, NUMERIC) X(pow, NUMERIC)                                \
    X(eq, ALL) X(ne, ALL) X(lt, ALL) X(le, ALL) X(gt, ALL) X(ge, ALL)
/* clang-format on */

#define UNARY(op, dtypes)                                                                          \
    static tl_status cuda_##op(tl_tensor *out, const tl_tensor *in, const tl_op_args *args) {      \
        return unary(TL_OP_##op, out, in, args);                                                   \
    }
UNARY_OPS(UNARY)
#define POINTWISE_OP(name, differentiable, backward) UNARY(name, FLOATING)
#include "tlua/ops.def"

/* ---- binary and activation backward ------------------------------------------------------ */
static tl_status binary(tl_op op, tl_tensor *out, const tl_tensor *a, const tl_tensor *b) {
    tl_cuda_launch l;
    TL_TRY(prepare(op, 3, (const tl_tensor *const[]){out, a, b}, &l));
    return tl_cuda_binary_run(op, (int)a->dtype, &l);
}

#define BINARY(op, dtypes)                                                                         \
    static tl_status cuda_##op(tl_tensor *out, const tl_tensor *a, const tl_tensor *b) {           \
        return binary(TL_OP_##op, out, a, b);                                                      \
    }
BINARY_OPS(BINARY)
#define POINTWISE_BINARY_OP(name, differentiable, backward) BINARY(name, FLOATING)
#include "tlua/ops.def"

static tl_status activation_backward(tl_op op, tl_tensor *out, const tl_tensor *grad,
                                     const tl_tensor *saved) {
    tl_cuda_launch l;
    TL_TRY(prepare(op, 3, (const tl_tensor *const[]){out, grad, saved}, &l));
    return tl_cuda_activation_backward_run(op, (int)out->dtype, &l);
}

#define BACKWARD(op)                                                                               \
    static tl_status cuda_##op(tl_tensor *out, const tl_tensor *grad, const tl_tensor *saved) {    \
        return activation_backward(TL_OP_##op, out, grad, saved);                                  \
    }
#define POINTWISE_BACKWARD_OP(name, differentiable, backward) BACKWARD(name)
#include "tlua/ops.def"

/* ---- where, fill, cast ------------------------------------------------------------------- */
static tl_status cuda_where(tl_tensor *out, const tl_tensor *cond, const tl_tensor *a,
                            const tl_tensor *b) {
    tl_cuda_launch l;
    TL_TRY(prepare(TL_OP_where, 4, (const tl_tensor *const[]){out, cond, a, b}, &l));
    return tl_cuda_where_run(tl_dtype_size(out->dtype), &l);
}

/* The value converted once on the host (tl_dtype_store, as the CPU kernel), then set as bits. */
static tl_status cuda_fill(tl_tensor *out, tl_scalar value) {
    if (tl_numel(out) == 0) return TL_OK;
    uint64_t bits = 0;
    tl_dtype_store(out->dtype, &bits, value);
    /* an expanded out holds each element once: walk it without its 0-stride dims */
    tl_tensor view = *out;
    for (int d = 0; d < view.ndim; d++)
        if (view.strides[d] == 0) view.shape[d] = 1;
    tl_cuda_launch l;
    TL_TRY(prepare(TL_OP_fill, 1, (const tl_tensor *const[]){&view}, &l));
    return tl_cuda_fill_run(tl_dtype_size(out->dtype), bits, &l);
}

static tl_status cuda_cast(tl_tensor *dst, const tl_tensor *src) {
    tl_cuda_launch l;
    TL_TRY(prepare(TL_OP_cast, 2, (const tl_tensor *const[]){dst, src}, &l));
    return tl_cuda_cast_run((int)src->dtype, (int)dst->dtype, &l);
}

/* ---- the tables: one function per op serves every dtype (the .cu side dispatches) ---------- */
#define UNARY_ENTRY(op, dtypes)  TL_KERNEL(op, TL_DTYPES_##dtypes, unary, cuda_##op),
#define BINARY_ENTRY(op, dtypes) TL_KERNEL(op, TL_DTYPES_##dtypes, binary, cuda_##op),
static const tl_kernel_entry unary_entries[] = {
    UNARY_OPS(UNARY_ENTRY) /* and the POINTWISE ops: */
#define POINTWISE_OP(name, differentiable, backward) UNARY_ENTRY(name, FLOATING)
#include "tlua/ops.def"
};
TL_KERNEL_TABLE(tl_cuda_unary_table, TL_DEVICE_CUDA, unary_entries);

static const tl_kernel_entry binary_entries[] = {
    BINARY_OPS(BINARY_ENTRY) /* and the POINTWISE_BINARY ops: */
#define POINTWISE_BINARY_OP(name, differentiable, backward) BINARY_ENTRY(name, FLOATING)
#include "tlua/ops.def"
};
TL_KERNEL_TABLE(tl_cuda_binary_table, TL_DEVICE_CUDA, binary_entries);

static const tl_kernel_entry activation_backward_entries[] = {
#define POINTWISE_BACKWARD_OP(name, differentiable, backward) BINARY_ENTRY(name, FLOATING)
#include "tlua/ops.def"
};
TL_KERNEL_TABLE(tl_cuda_activation_backward_table, TL_DEVICE_CUDA, activation_backward_entries);

static const tl_kernel_entry where_entries[] = {
    TL_KERNEL(where, TL_DTYPES_ALL, ternary, cuda_where)};
TL_KERNEL_TABLE(tl_cuda_where_table, TL_DEVICE_CUDA, where_entries);

static const tl_kernel_entry fill_entries[] = {TL_KERNEL(fill, TL_DTYPES_ALL, fill, cuda_fill)};
TL_KERNEL_TABLE(tl_cuda_fill_table, TL_DEVICE_CUDA, fill_entries);

static const tl_kernel_entry copy_entries[] = {TL_KERNEL(cast, TL_DTYPES_ALL, copy, cuda_cast)};
TL_KERNEL_TABLE(tl_cuda_copy_table, TL_DEVICE_CUDA, copy_entries);
