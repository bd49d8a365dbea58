/* adam_step_multi as an op: every parameter's tensors validated before any write, one dispatch,
   one kernel for all of them. */
#include <stdint.h>
#include <stdlib.h>

#include "ops/checks.h"
#include "ops/nn/nn_common.h"

/* More params than this in one call is a mistake (a Lua list holds at most 2^20 tensors). */
#define MAX_PARAMS (1 << 24)

static bool is_half(tl_dtype dtype) {
    return dtype == TL_BF16 || dtype == TL_F16;
}

/* The dtype of a moment of a param: float64 for float64, else float32. */
static tl_dtype moment_dtype(tl_dtype param) {
    return param == TL_F64 ? TL_F64 : TL_F32;
}

/* t, tensor `name` of parameter i (0-based; messages count from 1), matches param's shape and
   device, has dtype and, when written, is contiguous. */
static tl_status check_like_param(const char *op, const char *name, int64_t i,
                                  const tl_tensor *param, const tl_tensor *t, tl_dtype dtype,
                                  bool written) {
    const long long at = (long long)i + 1;
    if (!t) return tl_error(TL_ERR_ARGUMENT, "%s: %s %lld is missing", op, name, at);
    char a[256], b[256];
    if (!nn_same_shape(t, param->shape, param->ndim))
        return tl_error(TL_ERR_SHAPE, "%s: %s %lld has shape %s but param %lld has %s", op, name,
                        at, tl_shape_str(t, a, sizeof a), at, tl_shape_str(param, b, sizeof b));
    if (!tl_device_equal(tl_tensor_device(t), tl_tensor_device(param)))
        return tl_error(TL_ERR_DEVICE, "%s: %s %lld is on %s but param %lld is on %s", op, name, at,
                        tl_device_name(tl_tensor_device(t), a), at,
                        tl_device_name(tl_tensor_device(param), b));
    if (t->dtype != dtype)
        return tl_error(TL_ERR_DTYPE, "%s: %s %lld is %s, expected %s for a %s param", op, name, at,
                        tl_dtype_name(t->dtype), tl_dtype_name(dtype), tl_dtype_name(param->dtype));
    if (written && !tl_is_contiguous(t))
        return tl_error(TL_ERR_ARGUMENT, "%s: %s %lld must be contiguous (it is updated in place)",
                        op, name, at);
    return TL_OK;
}

/* Parameter i's own tensors. */
static tl_status check_param(const char *op, int64_t i, tl_tensor *const *params,
                             const tl_tensor *const *grads, tl_tensor *const *exp_avg,
                             tl_tensor *const *exp_avg_sq, tl_tensor *const *master) {
    const long long at = (long long)i + 1;
    const tl_tensor *p = params[i];
    char a[16], b[16];
    if (!p) return tl_error(TL_ERR_ARGUMENT, "%s: param %lld is missing", op, at);
    if (!tl_dtype_is_floating(p->dtype))
        return tl_error(TL_ERR_DTYPE,
                        "%s: param %lld must have a floating dtype (float32, float64, bfloat16, "
                        "float16), got %s",
                        op, at, tl_dtype_name(p->dtype));
    if (!tl_is_contiguous(p))
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: param %lld must be contiguous (it is updated in place)", op, at);
    if (i > 0 && !tl_device_equal(tl_tensor_device(p), tl_tensor_device(params[0])))
        return tl_error(TL_ERR_DEVICE, "%s: param %lld is on %s but param 1 is on %s", op, at,
                        tl_device_name(tl_tensor_device(p), a),
                        tl_device_name(tl_tensor_device(params[0]), b));
    TL_TRY(check_like_param(op, "grad", i, p, grads[i], p->dtype, false));
    TL_TRY(check_like_param(op, "exp_avg", i, p, exp_avg[i], moment_dtype(p->dtype), true));
    TL_TRY(check_like_param(op, "exp_avg_sq", i, p, exp_avg_sq[i], moment_dtype(p->dtype), true));
    if (master && master[i]) {
        if (!is_half(p->dtype))
            return tl_error(TL_ERR_DTYPE,
                            "%s: master %lld is given for a %s param (master copies are for "
                            "bfloat16 and float16 params)",
                            op, at, tl_dtype_name(p->dtype));
        TL_TRY(check_like_param(op, "master", i, p, master[i], TL_F32, true));
    }
    return TL_OK;
}

/* A written tensor's bytes: [start, end), which one it is (role, parameter). */
typedef struct span {
    uintptr_t start, end;
    int role;
    int64_t index;
} span;

static const char *const ROLES[] = {"param", "exp_avg", "exp_avg_sq", "master"};

static int span_order(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* No two written tensors share memory (each element is read and written once per step). */
static tl_status check_disjoint(const char *op, tl_tensor *const *params, tl_tensor *const *exp_avg,
                                tl_tensor *const *exp_avg_sq, tl_tensor *const *master, int64_t n) {
    span *spans = malloc(sizeof *spans * (size_t)n * 4);
    if (!spans) return tl_error(TL_ERR_MEMORY, "%s: out of memory (%lld params)", op, (long long)n);
    size_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        const tl_tensor *list[4] = {params[i], exp_avg[i], exp_avg_sq[i],
                                    master ? master[i] : NULL};
        for (int r = 0; r < 4; r++) {
            const tl_tensor *t = list[r];
            if (!t || tl_numel(t) == 0) continue;
            const uintptr_t start = (uintptr_t)tl_data(t);
            spans[count++] =
                (span){start, start + (uintptr_t)tl_numel(t) * tl_dtype_size(t->dtype), r, i};
        }
    }
    qsort(spans, count, sizeof *spans, span_order);
    tl_status status = TL_OK;
    size_t widest = 0; /* the span seen so far that reaches furthest */
    for (size_t k = 1; k < count && status == TL_OK; k++) {
        if (spans[k].start < spans[widest].end) {
            const span *x = &spans[widest], *y = &spans[k];
            const bool x_first = x->index < y->index || (x->index == y->index && x->role < y->role);
            const span *u = x_first ? x : y, *v = x_first ? y : x;
            status = tl_error(TL_ERR_ARGUMENT,
                              "%s: %s %lld and %s %lld share memory (each is updated in place)", op,
                              ROLES[u->role], (long long)u->index + 1, ROLES[v->role],
                              (long long)v->index + 1);
        }
        if (spans[k].end > spans[widest].end) widest = k;
    }
    free(spans);
    return status;
}

static tl_status check_all(const char *op, tl_tensor *const *params, const tl_tensor *const *grads,
                           tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                           tl_tensor *const *master, int64_t n, int64_t step, double lr,
                           double beta1, double beta2, double eps, double weight_decay) {
    if (n < 0 || n > MAX_PARAMS)
        return tl_error(TL_ERR_ARGUMENT, "%s: the number of params must be in [0, %d], got %lld",
                        op, MAX_PARAMS, (long long)n);
    TL_TRY(nn_check_adam_hyper(op, step, lr, beta1, beta2, eps, weight_decay));
    if (n == 0) return TL_OK;
    if (!params || !grads || !exp_avg || !exp_avg_sq)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: params, grads, exp_avg and exp_avg_sq are required lists", op);
    for (int64_t i = 0; i < n; i++)
        TL_TRY(check_param(op, i, params, grads, exp_avg, exp_avg_sq, master));
    return check_disjoint(op, params, exp_avg, exp_avg_sq, master, n);
}

/* The step, lr and step checked (or read on the device from hyper when not NULL). */
static tl_status adam_multi(const char *op, tl_tensor *const *params, const tl_tensor *const *grads,
                            tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                            tl_tensor *const *master, int64_t n, int64_t step, double lr,
                            const double *hyper, double beta1, double beta2, double eps,
                            double weight_decay, bool decoupled) {
    /* grads are only read: a strided one goes through a contiguous copy */
    tl_tensor **g = calloc((size_t)n, sizeof *g);
    if (!g) return tl_error(TL_ERR_MEMORY, "%s: out of memory (%lld params)", op, (long long)n);
    tl_status status = TL_OK;
    int64_t elements = 0;
    for (int64_t i = 0; i < n && status == TL_OK; i++) {
        status = tl_contiguous((tl_tensor *)grads[i], &g[i]);
        elements += tl_numel(params[i]);
    }
    if (status == TL_OK) {
        const int ndims[2] = {1, 1};
        const int64_t shapes[2][TL_MAX_DIMS] = {{n}, {elements}};
        const tl_kernel_entry *k = tl_dispatch_shapes(
            TL_OP_adam_step_multi, tl_tensor_device(params[0]), params[0]->dtype, 2, ndims, shapes);
        tl_optim_args args = nn_adam_args(step, lr, beta1, beta2, eps, weight_decay, decoupled);
        args.hyper = hyper;
        status = k ? k->fn.optim_multi(params, (const tl_tensor *const *)g, exp_avg, exp_avg_sq,
                                       master, n, &args)
                   : tl_dispatch_status();
    }
    for (int64_t i = 0; i < n; i++) tl_release(g[i]);
    free(g);
    if (status != TL_OK) return status;
    for (int64_t i = 0; i < n; i++) {
        tl_bump_version(params[i]);
        tl_bump_version(exp_avg[i]);
        tl_bump_version(exp_avg_sq[i]);
        if (master && master[i]) tl_bump_version(master[i]);
    }
    return TL_OK;
}

tl_status tl_adam_step_multi(tl_tensor *const *params, const tl_tensor *const *grads,
                             tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                             tl_tensor *const *master, int64_t n, int64_t step, double lr,
                             double beta1, double beta2, double eps, double weight_decay,
                             bool decoupled) {
    const char *op = decoupled ? "adamw_step_multi" : "adam_step_multi";
    TL_TRY(check_all(op, params, grads, exp_avg, exp_avg_sq, master, n, step, lr, beta1, beta2, eps,
                     weight_decay));
    if (n <= 0) return TL_OK;
    return adam_multi(op, params, grads, exp_avg, exp_avg_sq, master, n, step, lr, NULL, beta1,
                      beta2, eps, weight_decay, decoupled);
}

tl_status tl_adam_step_multi_hyper(tl_tensor *const *params, const tl_tensor *const *grads,
                                   tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                                   tl_tensor *const *master, int64_t n, const tl_tensor *hyper,
                                   double beta1, double beta2, double eps, double weight_decay,
                                   bool decoupled) {
    const char *op = decoupled ? "adamw_step_multi" : "adam_step_multi";
    TL_TRY(tl_check_tensor_arg(op, "hyper", hyper));
    if (hyper->dtype != TL_F64 || hyper->ndim != 1 || hyper->shape[0] != 2 ||
        !tl_is_contiguous(hyper))
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: hyper must be a contiguous float64 tensor of shape [2] ({lr, step}), "
                        "got %s of %d dims",
                        op, tl_dtype_name(hyper->dtype), hyper->ndim);
    if (n > 0 && params && params[0] &&
        !tl_device_equal(tl_tensor_device(hyper), tl_tensor_device(params[0])))
        return tl_error(TL_ERR_DEVICE, "%s: hyper must be on the params' device", op);
    const double *values = tl_data(hyper);
    const bool on_cpu = tl_tensor_device(hyper).type == TL_DEVICE_CPU;
    /* on the CPU the values are checked as numbers are; on a GPU they are read by the kernel */
    double lr = on_cpu ? values[0] : 0.0, step_value = on_cpu ? values[1] : 1.0;
    const int64_t step = (int64_t)step_value;
    if (on_cpu && (double)step != step_value)
        return tl_error(TL_ERR_ARGUMENT, "%s: hyper's step must be an integer >= 1, got %g", op,
                        step_value);
    TL_TRY(check_all(op, params, grads, exp_avg, exp_avg_sq, master, n, step, lr, beta1, beta2, eps,
                     weight_decay));
    if (n <= 0) return TL_OK;
    return adam_multi(op, params, grads, exp_avg, exp_avg_sq, master, n, step, lr,
                      on_cpu ? NULL : values, beta1, beta2, eps, weight_decay, decoupled);
}
