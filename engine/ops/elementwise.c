/* Elementwise ops (unary, binary, comparisons, where): validate, choose the result
   dtype, broadcast, allocate the output and dispatch to a kernel. No autograd.

   Result dtypes (PyTorch's, except where said):
   - binary arithmetic (add, sub, mul, pow): tl_promote_types of the inputs;
     bool with bool computes as int64 (true + true = 2; PyTorch keeps bool);
   - comparisons: computed in the inputs' common dtype, result bool;
   - where: tl_promote_types of a and b; cond must be bool;
   - pointwise ops (one, two or three inputs; their common dtype) by their row's dtypes rule
     (tlua/ops.def): FLOAT keeps floating dtypes and computes integer and bool inputs in float32
     (exp, gelu, div, lerp); FLOAT_ONLY refuses integer and bool inputs (frac); INT keeps
     integers exactly and computes bool as int64 (floor, maximum, fmod, addcmul); BOOL_OUT
     computes in the input's dtype and gives bool (isnan, logical_and); BITS refuses floating
     inputs (bitwise_and). Their numbers (leaky_relu's negative_slope, ...) are resolved for the
     compute dtype (kernels/op.h's tl_op_numbers).
   - neg, abs, relu: the input's dtype; bool computes as int64 (PyTorch rejects it);
   - pow_scalar: integer/bool inputs stay integer (bool -> int64) for an integral
     exponent >= 0, else float32; clamp: integer/bool inputs stay integer (bool ->
     int64) when the given bounds are integral, else float32.
   Inputs are cast to the compute dtype before broadcasting, so a broadcast operand is
   cast at its own size. Broadcast views live on the stack: a small op allocates only
   its output. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/kernel.h"
#include "ops/checks.h"
#include "tlua/ops.h"

/* ---- checks ------------------------------------------------------------- */
static tl_status check_same_device(const char *op, const tl_tensor *a, const tl_tensor *b) {
    tl_device da = tl_tensor_device(a), db = tl_tensor_device(b);
    if (tl_device_equal(da, db)) return TL_OK;
    char na[16], nb[16];
    return tl_error(TL_ERR_DEVICE, "%s: expected both tensors on the same device, got %s and %s",
                    op, tl_device_name(da, na), tl_device_name(db, nb));
}

/* ---- helpers ------------------------------------------------------------ */
/* t viewed with shape (validated by tl_broadcast_shapes): t itself when the shapes are
   equal, else `view` filled in on the caller's stack with 0 strides where t is
   broadcast. The view borrows t's storage: it is never retained nor released and
   must not outlive the call. */
static const tl_tensor *broadcast_view(const tl_tensor *t, const int64_t *shape, int ndim,
                                       tl_tensor *view) {
    if (t->ndim == ndim && memcmp(t->shape, shape, (size_t)ndim * sizeof *shape) == 0) return t;
    *view = *t;
    view->ndim = ndim;
    view->autograd = NULL;
    int lead = ndim - t->ndim;
    for (int d = 0; d < ndim; d++) {
        int src = d - lead;
        view->shape[d] = shape[d];
        view->strides[d] = src >= 0 && t->shape[src] == shape[d] ? t->strides[src] : 0;
    }
    return view;
}

/* t in dtype: *owned is a new tensor to release, or NULL when t already is. */
static tl_status as_dtype(const tl_tensor *t, tl_dtype dtype, const tl_tensor **result,
                          tl_tensor **owned) {
    *owned = NULL;
    *result = t;
    if (t->dtype == dtype) return TL_OK;
    tl_status status = tl_cast((tl_tensor *)t, dtype, owned);
    if (status == TL_OK) *result = *owned;
    return status;
}

/* floating dtypes keep theirs; integers and bool compute in float32 */
static tl_dtype floating_or_f32(tl_dtype d) {
    return tl_dtype_is_floating(d) ? d : TL_F32;
}
/* ops with integer kernels: bool computes as int64 */
static tl_dtype bool_as_i64(tl_dtype d) {
    return d == TL_BOOL ? TL_I64 : d;
}
static bool is_integral_value(double v) {
    return isfinite(v) && floor(v) == v;
}

/* ---- unary -------------------------------------------------------------- */
/* result = op(a) computed in dtype (result has a's shape and dtype `dtype`; it may be a itself,
   the kernels read each element before writing it). */
static tl_status unary_into(tl_op op, const tl_tensor *a, tl_dtype dtype, const tl_op_args *args,
                            tl_tensor *result) {
    const tl_tensor *in;
    tl_tensor *owned = NULL;
    tl_status status = as_dtype(a, dtype, &in, &owned);
    if (status == TL_OK) {
        const tl_kernel_entry *k = tl_dispatch(op, tl_tensor_device(a), dtype,
                                               (const tl_tensor *const[]){result, in, NULL});
        status = k ? k->fn.unary(result, in, args) : tl_dispatch_status();
    }
    tl_release(owned);
    return status;
}

/* op(a) computed in dtype, into a new result of out_dtype */
static tl_status unary_to(tl_op op, const tl_tensor *a, tl_dtype dtype, tl_dtype out_dtype,
                          const tl_op_args *args, tl_tensor **out) {
    tl_tensor *result;
    TL_TRY(tl_empty(a->shape, a->ndim, out_dtype, tl_tensor_device(a), &result));
    tl_status status = unary_into(op, a, dtype, args, result);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

static tl_status unary(tl_op op, const tl_tensor *a, tl_dtype dtype, const tl_op_args *args,
                       tl_tensor **out) {
    return unary_to(op, a, dtype, dtype, args, out);
}

/* an op with integer kernels too */
static tl_status unary_any(tl_op op, const tl_tensor *a, tl_tensor **out) {
    TL_TRY(tl_check_tensor_arg(tl_op_info_of(op)->name, "a", a));
    return unary(op, a, bool_as_i64(a->dtype), NULL, out);
}

/* tl_<name>(a, out), run by unary_any or unary_floating */
#define UNARY_FUNCTION(name, run)                                                                  \
    tl_status tl_##name(const tl_tensor *a, tl_tensor **out) {                                     \
        return run(TL_OP_##name, a, out);                                                          \
    }
UNARY_FUNCTION(neg, unary_any)
UNARY_FUNCTION(abs, unary_any)
UNARY_FUNCTION(relu, unary_any)

/* ---- pointwise: the dtypes rules of the rows --------------------------------------------- */
typedef enum pointwise_rule {
    RULE_FLOAT,
    RULE_FLOAT_ONLY,
    RULE_INT,
    RULE_BOOL_OUT,
    RULE_BITS
} pointwise_rule;

/* *compute: the dtype op computes an input of dtype in by rule (an error naming op and the
   argument where the rule refuses it) */
static tl_status rule_dtype(const char *op, const char *arg, pointwise_rule rule, tl_dtype in,
                            tl_dtype *compute) {
    const bool floating = tl_dtype_is_floating(in);
    if ((rule == RULE_FLOAT_ONLY && !floating) || (rule == RULE_BITS && floating))
        return tl_error(TL_ERR_DTYPE, "%s: expected %s of %s dtype, got %s", op, arg,
                        rule == RULE_BITS ? "an integer or bool" : "a floating", tl_dtype_name(in));
    *compute = rule == RULE_FLOAT ? floating_or_f32(in) : rule == RULE_INT ? bool_as_i64(in) : in;
    return TL_OK;
}

/* the kernel's args: op's numbers, given (NULL or NaN entries: the row's defaults) resolved for
   the compute dtype */
static tl_op_args pointwise_args(tl_op op, tl_dtype dtype, const double *numbers) {
    tl_op_args args = {0};
    tl_op_numbers(op, dtype, numbers, args.scalar);
    return args;
}

static tl_status pointwise_unary(tl_op op, pointwise_rule rule, const tl_tensor *a,
                                 const double *numbers, tl_tensor **out) {
    const char *name = tl_op_info_of(op)->name;
    TL_TRY(tl_check_tensor_arg(name, "a", a));
    tl_dtype dtype = a->dtype;
    TL_TRY(rule_dtype(name, "a", rule, a->dtype, &dtype));
    tl_op_args args = pointwise_args(op, dtype, numbers);
    return unary_to(op, a, dtype, rule == RULE_BOOL_OUT ? TL_BOOL : dtype, &args, out);
}

/* every POINTWISE row of ops.def: tl_<name>_with(a, numbers, out) and tl_<name>(a, out) */
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    tl_status tl_##name##_with(const tl_tensor *a, const double *numbers, tl_tensor **out) {       \
        return pointwise_unary(TL_OP_##name, RULE_##dtypes, a, numbers, out);                      \
    }                                                                                              \
    tl_status tl_##name(const tl_tensor *a, tl_tensor **out) {                                     \
        return tl_##name##_with(a, NULL, out);                                                     \
    }
#include "tlua/ops.def"

tl_status tl_pow_scalar(const tl_tensor *a, double exponent, tl_tensor **out) {
    TL_TRY(tl_check_tensor_arg("pow_scalar", "a", a));
    tl_dtype dtype = tl_dtype_is_floating(a->dtype)                 ? a->dtype
                     : is_integral_value(exponent) && exponent >= 0 ? bool_as_i64(a->dtype)
                                                                    : TL_F32;
    tl_op_args args = {.scalar = {exponent, 0}, .has_scalar = {true, false}};
    return unary(TL_OP_pow_scalar, a, dtype, &args, out);
}

static tl_op_args clamp_args(bool has_min, double min, bool has_max, double max) {
    return (tl_op_args){.scalar = {has_min ? min : 0, has_max ? max : 0},
                        .has_scalar = {has_min, has_max}};
}

/* integer and bool inputs stay integer (bool as int64) when the bounds are integral */
static tl_dtype clamp_dtype(const tl_tensor *a, const tl_op_args *args) {
    bool integral_bounds = true;
    for (int i = 0; i < 2; i++)
        if (args->has_scalar[i] && !is_integral_value(args->scalar[i])) integral_bounds = false;
    return tl_dtype_is_floating(a->dtype) ? a->dtype
           : integral_bounds              ? bool_as_i64(a->dtype)
                                          : TL_F32;
}

tl_status tl_clamp(const tl_tensor *a, bool has_min, double min, bool has_max, double max,
                   tl_tensor **out) {
    TL_TRY(tl_check_tensor_arg("clamp", "a", a));
    tl_op_args args = clamp_args(has_min, min, has_max, max);
    return unary(TL_OP_clamp, a, clamp_dtype(a, &args), &args, out);
}

/* ---- binary ------------------------------------------------------------- */
/* ARITHMETIC keeps integers (bool as int64); COMPARISON gives bool; the pointwise binary rows
   by their rule (RULE_FLOAT: true division, atan2, ...) */
typedef enum binary_kind {
    ARITHMETIC = RULE_INT,
    COMPARISON = RULE_BOOL_OUT,
    FLOATING = RULE_FLOAT
} binary_kind;

/* *dtype: the compute dtype of a binary op on a and b (its result's, except for comparisons:
   bool), or an error where the kind refuses their common dtype */
static tl_status binary_dtype(const char *op, binary_kind kind, const tl_tensor *a,
                              const tl_tensor *b, tl_dtype *dtype) {
    return rule_dtype(op, "a and b", (pointwise_rule)kind, tl_promote_types(a->dtype, b->dtype),
                      dtype);
}

/* result = op(a, b) computed in dtype, broadcast to result's shape (validated); result may be a
   itself (the kernels read each element before writing it). */
static tl_status binary_into(tl_op op, const tl_tensor *a, const tl_tensor *b, tl_dtype dtype,
                             tl_tensor *result) {
    const tl_tensor *ca, *cb;
    tl_tensor *owned_a = NULL, *owned_b = NULL;
    tl_status status = as_dtype(a, dtype, &ca, &owned_a);
    if (status == TL_OK) status = as_dtype(b, dtype, &cb, &owned_b);
    if (status == TL_OK) {
        /* the trace shows the inputs before broadcasting */
        const tl_kernel_entry *k = tl_dispatch(op, tl_tensor_device(result), dtype,
                                               (const tl_tensor *const[]){result, ca, cb, NULL});
        if (k) {
            tl_tensor view_a, view_b;
            status = k->fn.binary(result, broadcast_view(ca, result->shape, result->ndim, &view_a),
                                  broadcast_view(cb, result->shape, result->ndim, &view_b), NULL);
        } else {
            status = tl_dispatch_status();
        }
    }
    tl_release(owned_a);
    tl_release(owned_b);
    return status;
}

static tl_status binary(tl_op op, binary_kind kind, const tl_tensor *a, const tl_tensor *b,
                        tl_tensor **out) {
    const char *name = tl_op_info_of(op)->name;
    TL_TRY(tl_check_tensor_arg(name, "a", a));
    TL_TRY(tl_check_tensor_arg(name, "b", b));
    TL_TRY(check_same_device(name, a, b));
    int64_t shape[TL_MAX_DIMS];
    int ndim;
    TL_TRY(tl_broadcast_shapes(name, a->shape, a->ndim, b->shape, b->ndim, shape, &ndim));
    tl_dtype dtype = a->dtype;
    TL_TRY(binary_dtype(name, kind, a, b, &dtype));
    tl_tensor *result;
    TL_TRY(
        tl_empty(shape, ndim, kind == COMPARISON ? TL_BOOL : dtype, tl_tensor_device(a), &result));
    tl_status status = binary_into(op, a, b, dtype, result);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

/* tl_<name>(a, b, out) of a binary_kind */
#define BINARY_FUNCTION(name, kind)                                                                \
    tl_status tl_##name(const tl_tensor *a, const tl_tensor *b, tl_tensor **out) {                 \
        return binary(TL_OP_##name, kind, a, b, out);                                              \
    }
BINARY_FUNCTION(add, ARITHMETIC)
BINARY_FUNCTION(sub, ARITHMETIC)
BINARY_FUNCTION(mul, ARITHMETIC)
BINARY_FUNCTION(pow, ARITHMETIC)
BINARY_FUNCTION(eq, COMPARISON)
BINARY_FUNCTION(ne, COMPARISON)
BINARY_FUNCTION(lt, COMPARISON)
BINARY_FUNCTION(le, COMPARISON)
BINARY_FUNCTION(gt, COMPARISON)
BINARY_FUNCTION(ge, COMPARISON)
/* and every POINTWISE_BINARY row of ops.def (div, atan2, ...), by its rule */
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    BINARY_FUNCTION(name, (binary_kind)RULE_##dtypes)
#include "tlua/ops.def"

/* ---- pointwise ternary ------------------------------------------------------------------- */
/* out = op(a, b, c) with its numbers: the three broadcast, computed in their common dtype by
   rule */
static tl_status pointwise_ternary(tl_op op, pointwise_rule rule, const tl_tensor *a,
                                   const tl_tensor *b, const tl_tensor *c, const double *numbers,
                                   tl_tensor **out) {
    const char *name = tl_op_info_of(op)->name;
    TL_TRY(tl_check_tensor_arg(name, "a", a));
    TL_TRY(tl_check_tensor_arg(name, "b", b));
    TL_TRY(tl_check_tensor_arg(name, "c", c));
    TL_TRY(check_same_device(name, a, b));
    TL_TRY(check_same_device(name, a, c));
    int64_t ab[TL_MAX_DIMS], shape[TL_MAX_DIMS];
    int nab, ndim;
    TL_TRY(tl_broadcast_shapes(name, a->shape, a->ndim, b->shape, b->ndim, ab, &nab));
    TL_TRY(tl_broadcast_shapes(name, ab, nab, c->shape, c->ndim, shape, &ndim));
    tl_dtype dtype = a->dtype;
    TL_TRY(rule_dtype(name, "a, b and c", rule,
                      tl_promote_types(tl_promote_types(a->dtype, b->dtype), c->dtype), &dtype));
    const tl_op_args args = pointwise_args(op, dtype, numbers);
    const tl_tensor *in[3] = {a, b, c};
    tl_tensor *owned[3] = {NULL, NULL, NULL}, *result = NULL;
    tl_status status = TL_OK;
    for (int i = 0; i < 3 && status == TL_OK; i++)
        status = as_dtype(in[i], dtype, &in[i], &owned[i]);
    if (status == TL_OK) status = tl_empty(shape, ndim, dtype, tl_tensor_device(a), &result);
    if (status == TL_OK) {
        const tl_kernel_entry *k =
            tl_dispatch(op, tl_tensor_device(a), dtype,
                        (const tl_tensor *const[]){result, in[0], in[1], in[2], NULL});
        if (k) {
            tl_tensor views[3];
            const tl_tensor *broadcast[3];
            for (int i = 0; i < 3; i++)
                broadcast[i] = broadcast_view(in[i], shape, ndim, &views[i]);
            status = k->fn.tensors(&result, broadcast, &args);
        } else {
            status = tl_dispatch_status();
        }
    }
    for (int i = 0; i < 3; i++) tl_release(owned[i]);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

/* every POINTWISE_TERNARY row of ops.def: tl_<name>_with(a, b, c, numbers, out), tl_<name> */
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    tl_status tl_##name##_with(const tl_tensor *a, const tl_tensor *b, const tl_tensor *c,         \
                               const double *numbers, tl_tensor **out) {                           \
        return pointwise_ternary(TL_OP_##name, RULE_##dtypes, a, b, c, numbers, out);              \
    }                                                                                              \
    tl_status tl_##name(const tl_tensor *a, const tl_tensor *b, const tl_tensor *c,                \
                        tl_tensor **out) {                                                         \
        return tl_##name##_with(a, b, c, NULL, out);                                               \
    }
#include "tlua/ops.def"

/* ---- where -------------------------------------------------------------- */
tl_status tl_where(const tl_tensor *cond, const tl_tensor *a, const tl_tensor *b, tl_tensor **out) {
    TL_TRY(tl_check_tensor_arg("where", "cond", cond));
    TL_TRY(tl_check_tensor_arg("where", "a", a));
    TL_TRY(tl_check_tensor_arg("where", "b", b));
    if (cond->dtype != TL_BOOL)
        return tl_error(TL_ERR_DTYPE, "where: expected cond of dtype bool, got %s",
                        tl_dtype_name(cond->dtype));
    tl_device dc = tl_tensor_device(cond), da = tl_tensor_device(a), db = tl_tensor_device(b);
    if (!tl_device_equal(dc, da) || !tl_device_equal(dc, db)) {
        char nc[16], na[16], nb[16];
        return tl_error(TL_ERR_DEVICE,
                        "where: expected cond, a and b on the same device, got %s, %s and %s",
                        tl_device_name(dc, nc), tl_device_name(da, na), tl_device_name(db, nb));
    }
    int64_t ab[TL_MAX_DIMS], shape[TL_MAX_DIMS];
    int nab, ndim;
    TL_TRY(tl_broadcast_shapes("where", a->shape, a->ndim, b->shape, b->ndim, ab, &nab));
    TL_TRY(tl_broadcast_shapes("where", cond->shape, cond->ndim, ab, nab, shape, &ndim));

    tl_dtype dtype = tl_promote_types(a->dtype, b->dtype);
    const tl_tensor *ca, *cb;
    tl_tensor *owned_a = NULL, *owned_b = NULL, *result = NULL;
    tl_status status = as_dtype(a, dtype, &ca, &owned_a);
    if (status == TL_OK) status = as_dtype(b, dtype, &cb, &owned_b);
    if (status == TL_OK) status = tl_empty(shape, ndim, dtype, dc, &result);
    if (status == TL_OK) {
        const tl_kernel_entry *k = tl_dispatch(
            TL_OP_where, dc, dtype, (const tl_tensor *const[]){result, cond, ca, cb, NULL});
        if (k) {
            tl_tensor view_c, view_a, view_b;
            status = k->fn.ternary(result, broadcast_view(cond, shape, ndim, &view_c),
                                   broadcast_view(ca, shape, ndim, &view_a),
                                   broadcast_view(cb, shape, ndim, &view_b));
        } else {
            status = tl_dispatch_status();
        }
    }
    tl_release(owned_a);
    tl_release(owned_b);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

/* ---- in place ------------------------------------------------------------ */
/* The end of an in-place write: x's version moves when the write succeeded. */
static tl_status bump_when_written(tl_tensor *x, tl_status status) {
    if (status == TL_OK) tl_bump_version(x);
    return status;
}

/* x <- result, the out-of-place op's result in a dtype other than x's (released). */
static tl_status copy_result_back(tl_tensor *x, tl_tensor *result) {
    tl_status status = tl_copy_(x, result);
    tl_release(result);
    return bump_when_written(x, status);
}

/* x <- op(x) computed in dtype, the out-of-place op's result of out_dtype. */
static tl_status unary_inplace_to(const char *name, tl_op op, tl_tensor *x, tl_dtype dtype,
                                  tl_dtype out_dtype, const tl_op_args *args) {
    TL_TRY(tl_check_writable(name, "x", x));
    TL_TRY(tl_check_result_fits(name, out_dtype, x));
    if (tl_numel(x) == 0) return bump_when_written(x, TL_OK);
    if (dtype == x->dtype && out_dtype == x->dtype)
        return bump_when_written(x, unary_into(op, x, dtype, args, x));
    tl_tensor *result; /* a result to convert (a bool of a predicate) */
    TL_TRY(unary_to(op, x, dtype, out_dtype, args, &result));
    return copy_result_back(x, result);
}
static tl_status unary_inplace(const char *name, tl_op op, tl_tensor *x, tl_dtype dtype,
                               const tl_op_args *args) {
    return unary_inplace_to(name, op, x, dtype, dtype, args);
}

/* tl_<name>_(x), the result dtype from x's by result_dtype */
#define UNARY_INPLACE(name, result_dtype)                                                          \
    tl_status tl_##name##_(tl_tensor *x) {                                                         \
        TL_TRY(tl_check_tensor_arg(#name "_", "x", x));                                            \
        return unary_inplace(#name "_", TL_OP_##name, x, result_dtype(x->dtype), NULL);            \
    }
UNARY_INPLACE(neg, bool_as_i64)
UNARY_INPLACE(abs, bool_as_i64)
UNARY_INPLACE(relu, bool_as_i64)
tl_status tl_clamp_(tl_tensor *x, bool has_min, double min, bool has_max, double max) {
    TL_TRY(tl_check_tensor_arg("clamp_", "x", x));
    tl_op_args args = clamp_args(has_min, min, has_max, max);
    return unary_inplace("clamp_", TL_OP_clamp, x, clamp_dtype(x, &args), &args);
}

/* x <- op(x) of a pointwise row with its numbers */
static tl_status pointwise_unary_inplace(tl_op op, pointwise_rule rule, tl_tensor *x,
                                         const double *numbers) {
    char name[64];
    snprintf(name, sizeof name, "%s_", tl_op_info_of(op)->name);
    TL_TRY(tl_check_tensor_arg(name, "x", x));
    tl_dtype dtype = x->dtype;
    TL_TRY(rule_dtype(name, "x", rule, x->dtype, &dtype));
    tl_op_args args = pointwise_args(op, dtype, numbers);
    return unary_inplace_to(name, op, x, dtype, rule == RULE_BOOL_OUT ? TL_BOOL : dtype, &args);
}

/* and every POINTWISE row of ops.def: tl_exp_, tl_gelu_, tl_leaky_relu_with_, ... */
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    tl_status tl_##name##_with_(tl_tensor *x, const double *numbers) {                             \
        return pointwise_unary_inplace(TL_OP_##name, RULE_##dtypes, x, numbers);                   \
    }                                                                                              \
    tl_status tl_##name##_(tl_tensor *x) {                                                         \
        return tl_##name##_with_(x, NULL);                                                         \
    }
#include "tlua/ops.def"

/* x <- op(x, other), other broadcast to x's shape. */
static tl_status binary_inplace(const char *name, tl_op op, binary_kind kind, tl_tensor *x,
                                const tl_tensor *other) {
    TL_TRY(tl_check_writable(name, "x", x));
    TL_TRY(tl_check_tensor_arg(name, "other", other));
    TL_TRY(check_same_device(name, x, other));
    TL_TRY(tl_check_broadcasts_to(name, other, x));
    tl_dtype dtype = x->dtype;
    TL_TRY(binary_dtype(name, kind, x, other, &dtype));
    const tl_dtype out_dtype = kind == COMPARISON ? TL_BOOL : dtype;
    TL_TRY(tl_check_result_fits(name, out_dtype, x));
    if (tl_numel(x) == 0) return bump_when_written(x, TL_OK);
    if (dtype == x->dtype && out_dtype == x->dtype) {
        /* an other that overlaps x otherwise than element for element is read from a copy */
        tl_tensor *copy = NULL;
        if (!tl_same_elements(x, other) && tl_may_overlap(x, other)) TL_TRY(tl_clone(other, &copy));
        tl_status status = binary_into(op, x, copy ? copy : other, dtype, x);
        tl_release(copy);
        return bump_when_written(x, status);
    }
    tl_tensor *result; /* computed in a wider dtype (or a bool), then stored in x's */
    TL_TRY(binary(op, kind, x, other, &result));
    return copy_result_back(x, result);
}

/* tl_<name>_(x, other) of a binary_kind */
#define BINARY_INPLACE(name, kind)                                                                 \
    tl_status tl_##name##_(tl_tensor *x, const tl_tensor *other) {                                 \
        return binary_inplace(#name "_", TL_OP_##name, kind, x, other);                            \
    }
BINARY_INPLACE(add, ARITHMETIC)
BINARY_INPLACE(sub, ARITHMETIC)
BINARY_INPLACE(mul, ARITHMETIC)
/* and every POINTWISE_BINARY row of ops.def: tl_div_, tl_atan2_, ... */
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    BINARY_INPLACE(name, (binary_kind)RULE_##dtypes)
#include "tlua/ops.def"
