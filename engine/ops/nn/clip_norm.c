/* clip_grad_norm_multi as an op: every gradient checked before any write, the total norm as a new
   0-dim tensor, one dispatch (one kernel for all the gradients, no host synchronization). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops/nn/nn_common.h"

#define OP_NAME "clip_grad_norm_multi"

/* More grads than this in one call is a mistake (a Lua list holds at most 2^20 tensors). */
#define MAX_GRADS (1 << 24)

/* Grad i (0-based; messages count from 1): present, floating, contiguous, on grad 1's device. */
static tl_status check_grad(tl_tensor *const *grads, int64_t i) {
    const long long at = (long long)i + 1;
    const tl_tensor *g = grads[i];
    char a[16], b[16];
    if (!g) return tl_error(TL_ERR_ARGUMENT, OP_NAME ": grad %lld is missing", at);
    if (!tl_dtype_is_floating(g->dtype))
        return tl_error(TL_ERR_DTYPE,
                        OP_NAME ": grad %lld must have a floating dtype (float32, float64, "
                                "bfloat16, float16), got %s",
                        at, tl_dtype_name(g->dtype));
    if (!tl_is_contiguous(g))
        return tl_error(TL_ERR_ARGUMENT,
                        OP_NAME ": grad %lld must be contiguous (it is scaled in place)", at);
    if (i > 0 && !tl_device_equal(tl_tensor_device(g), tl_tensor_device(grads[0])))
        return tl_error(TL_ERR_DEVICE, OP_NAME ": grad %lld is on %s but grad 1 is on %s", at,
                        tl_device_name(tl_tensor_device(g), a),
                        tl_device_name(tl_tensor_device(grads[0]), b));
    return TL_OK;
}

/* A grad's bytes: [start, end) of grad index. */
typedef struct span {
    uintptr_t start, end;
    int64_t index;
} span;

static int span_order(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* No two grads share memory (each element is scaled once). */
static tl_status check_disjoint(tl_tensor *const *grads, int64_t n) {
    span *spans = malloc(sizeof *spans * (size_t)n);
    if (!spans)
        return tl_error(TL_ERR_MEMORY, OP_NAME ": out of memory (%lld grads)", (long long)n);
    size_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        if (tl_numel(grads[i]) == 0) continue;
        const uintptr_t start = (uintptr_t)tl_data(grads[i]);
        spans[count++] = (span){
            start, start + (uintptr_t)tl_numel(grads[i]) * tl_dtype_size(grads[i]->dtype), i};
    }
    qsort(spans, count, sizeof *spans, span_order);
    tl_status status = TL_OK;
    size_t widest = 0; /* the span seen so far that reaches furthest */
    for (size_t k = 1; k < count && status == TL_OK; k++) {
        if (spans[k].start < spans[widest].end) {
            const int64_t u = spans[widest].index, v = spans[k].index;
            status =
                tl_error(TL_ERR_ARGUMENT,
                         OP_NAME ": grads %lld and %lld share memory (each is scaled in place)",
                         (long long)(u < v ? u : v) + 1, (long long)(u < v ? v : u) + 1);
        }
        if (spans[k].end > spans[widest].end) widest = k;
    }
    free(spans);
    return status;
}

/* v for a message: %g, but NaN as "nan" whatever its sign bit. */
static const char *number_str(double v, char *buf, size_t size) {
    if (v != v)
        snprintf(buf, size, "nan");
    else
        snprintf(buf, size, "%g", v);
    return buf;
}

static tl_status check_all(tl_tensor *const *grads, int64_t n, double max_norm, double norm_type,
                           tl_tensor **total) {
    if (!total) return tl_error(TL_ERR_ARGUMENT, OP_NAME ": total (the output) is required");
    if (n < 0 || n > MAX_GRADS)
        return tl_error(TL_ERR_ARGUMENT,
                        OP_NAME ": the number of grads must be in [0, %d], got %lld", MAX_GRADS,
                        (long long)n);
    char got[32];
    if (!(max_norm > 0))
        return tl_error(TL_ERR_ARGUMENT, OP_NAME ": max_norm must be a number > 0, got %s",
                        number_str(max_norm, got, sizeof got));
    if (!(norm_type >= 1))
        return tl_error(TL_ERR_ARGUMENT,
                        OP_NAME ": norm_type must be a number >= 1 or infinity, got %s",
                        number_str(norm_type, got, sizeof got));
    if (n == 0) return TL_OK;
    if (!grads) return tl_error(TL_ERR_ARGUMENT, OP_NAME ": grads is a required list");
    for (int64_t i = 0; i < n; i++) TL_TRY(check_grad(grads, i));
    return check_disjoint(grads, n);
}

tl_status tl_clip_grad_norm_multi(tl_tensor *const *grads, int64_t n, double max_norm,
                                  double norm_type, tl_tensor **total) {
    TL_TRY(check_all(grads, n, max_norm, norm_type, total));
    *total = NULL;
    if (n == 0) { /* a CPU float32 0, no kernel */
        TL_TRY(tl_empty(NULL, 0, TL_F32, TL_CPU, total));
        *(float *)tl_data(*total) = 0.0f;
        return TL_OK;
    }
    bool all_f64 = true;
    int64_t elements = 0;
    for (int64_t i = 0; i < n; i++) {
        all_f64 = all_f64 && grads[i]->dtype == TL_F64;
        elements += tl_numel(grads[i]);
    }
    const tl_device device = tl_tensor_device(grads[0]);
    tl_tensor *out = NULL;
    TL_TRY(tl_empty(NULL, 0, all_f64 ? TL_F64 : TL_F32, device, &out));
    const int ndims[2] = {1, 1};
    const int64_t shapes[2][TL_MAX_DIMS] = {{n}, {elements}};
    const tl_kernel_entry *k =
        tl_dispatch_shapes(TL_OP_clip_grad_norm_multi, device, grads[0]->dtype, 2, ndims, shapes);
    tl_status status =
        k ? k->fn.clip_norm_multi(grads, n, max_norm, norm_type, out) : tl_dispatch_status();
    if (status != TL_OK) {
        tl_release(out);
        return status;
    }
    for (int64_t i = 0; i < n; i++) tl_bump_version(grads[i]);
    *total = out;
    return TL_OK;
}
