/* Op bindings: elementwise, comparisons, where, casts, reductions, softmax, joining, indexing,
 * matmul. */
#include <string.h>

#include "binding.h"

typedef tl_status (*unary_fn)(tl_tensor *a, tl_tensor **out);
typedef tl_status (*binary_fn)(tl_tensor *a, tl_tensor *b, tl_tensor **out);

/* ---- elementwise -------------------------------------------------------- */
static int unary(lua_State *L, const char *op, unary_fn fn) {
    tl_tensor *a = tlb_check(L, 1, op), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = fn(a, &out);
    return tlb_result(L, box, status, out);
}

/* op_<name>: the binding of tl_ag_<name> through unary or binary (below) */
#define OP_BINDING(kind, name)                                                                     \
    static int op_##name(lua_State *L) {                                                           \
        return kind(L, #name, tl_ag_##name);                                                       \
    }
OP_BINDING(unary, neg)
OP_BINDING(unary, abs)
OP_BINDING(unary, relu)

/* a pointwise op y = f(x) with its row's numbers after the tensor (tl.leaky_relu(x, 0.2),
   x:hardtanh({min_val = 0, max_val = 6})) */
typedef tl_status (*unary_with_fn)(tl_tensor *a, const double *numbers, tl_tensor **out);
static int unary_with(lua_State *L, const char *op, const char *spec, unary_with_fn fn) {
    tl_tensor *a = tlb_check(L, 1, op), *out = NULL;
    double numbers[TLB_MAX_NUMBERS];
    tlb_pointwise_numbers(L, 2, op, spec, numbers);
    tlb_box *box = tlb_newbox(L);
    tl_status status = fn(a, numbers, &out);
    return tlb_result(L, box, status, out);
}
/* every POINTWISE row of ops.def: tl.<name>(t, numbers...) and t:<name>(numbers...) */
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    static int op_##name(lua_State *L) {                                                           \
        return unary_with(L, #name, spec, tl_ag_##name##_with);                                    \
    }
#include "tlua/ops.def"

/* a op b where either side may be a Lua number or boolean (the hot path of
   `a + b`: two type checks, the call, one userdata) */
static int binary(lua_State *L, const char *op, binary_fn fn) {
    if (lua_gettop(L) > 2)
        return tlb_errorf(L, "%s: expected 2 arguments (a, b), got %d", op, lua_gettop(L));
    tl_tensor *a = tlb_totensor(L, 1, op), *b = tlb_totensor(L, 2, op);
    tl_tensor *scalar = NULL, *out = NULL;
    tl_scalar s;
    if (!a || !b) {
        if (!a && !b)
            return tlb_errorf(L, "%s: expected a tensor as argument 1 or 2, got %s and %s", op,
                              tlb_typename(L, 1), tlb_typename(L, 2));
        int idx = a ? 2 : 1;
        if (!tlb_to_scalar(L, idx, &s)) return tlb_type_error(L, idx, op, "a tensor or a number");
    }
    tlb_box *box = tlb_newbox(L);
    if (!a || !b) {
        if (tl_scalar_tensor(s, a ? a : b, &scalar) != TL_OK) return tlb_fail(L);
        if (!a)
            a = scalar;
        else
            b = scalar;
    }
    tl_status status = fn(a, b, &out);
    tl_release(scalar);
    return tlb_result(L, box, status, out);
}

/* add(a, b, {alpha = x}) and sub: a + alpha * b, a - alpha * b, as torch.add's alpha; b scaled
   first (a number in Lua, a tensor by a recorded mul) */
static int scaled_binary(lua_State *L, const char *op, binary_fn fn) {
    const double alpha = tlb_alpha_option(L, op, "a, b");
    if (alpha == 1) return binary(L, op, fn);
    tl_tensor *b = tlb_check(L, 2, op);
    tl_tensor *factor = NULL, *scaled = NULL;
    tlb_box *box = tlb_newbox(L); /* holds alpha * b, then stands in for b */
    if (tl_scalar_tensor(tl_scalar_float(alpha), b, &factor) != TL_OK) return tlb_fail(L);
    tl_status status = tl_ag_mul(b, factor, &scaled);
    tl_release(factor);
    tlb_result(L, box, tl_error_as(status, op), scaled);
    lua_replace(L, 2);
    return binary(L, op, fn);
}
static int op_add(lua_State *L) {
    return scaled_binary(L, "add", tl_ag_add);
}
static int op_sub(lua_State *L) {
    return scaled_binary(L, "sub", tl_ag_sub);
}
OP_BINDING(binary, mul)
/* every POINTWISE_BINARY row of ops.def: tl.<name>(a, b) and a:<name>(b) */
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes) OP_BINDING(binary, name)
#include "tlua/ops.def"

/* a pointwise op y = f(a, b, c), each a tensor or a number (a number takes the dtype and device
   of the first tensor), the row's numbers after them (tl.addcmul(x, t1, t2, {value = 2})) */
typedef tl_status (*ternary_with_fn)(tl_tensor *a, tl_tensor *b, tl_tensor *c,
                                     const double *numbers, tl_tensor **out);
static int ternary_with(lua_State *L, const char *op, const char *spec, ternary_with_fn fn) {
    tl_tensor *in[3], *like = NULL, *scalars[3] = {NULL, NULL, NULL}, *out = NULL;
    tl_scalar s[3];
    for (int i = 0; i < 3; i++) {
        in[i] = tlb_totensor(L, i + 1, op);
        if (in[i] && !like) like = in[i];
        if (!in[i] && !tlb_to_scalar(L, i + 1, &s[i]))
            return tlb_type_error(L, i + 1, op, "a tensor or a number");
    }
    if (!like)
        return tlb_errorf(L, "%s: expected a tensor among arguments 1 to 3, got three numbers", op);
    double numbers[TLB_MAX_NUMBERS];
    tlb_pointwise_numbers(L, 4, op, spec, numbers);
    tlb_box *box = tlb_newbox(L);
    tl_status status = TL_OK;
    for (int i = 0; i < 3 && status == TL_OK; i++)
        if (!in[i]) {
            status = tl_scalar_tensor(s[i], like, &scalars[i]);
            in[i] = scalars[i];
        }
    if (status == TL_OK) status = fn(in[0], in[1], in[2], numbers, &out);
    for (int i = 0; i < 3; i++) tl_release(scalars[i]);
    return tlb_result(L, box, status, out);
}
/* every POINTWISE_TERNARY row of ops.def: tl.<name>(a, b, c, numbers...) and a:<name>(b, c, ...) */
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    static int op_##name(lua_State *L) {                                                           \
        return ternary_with(L, #name, spec, tl_ag_##name##_with);                                  \
    }
#include "tlua/ops.def"

#define COMPARE(name)                                                                              \
    static tl_status compare_##name(tl_tensor *a, tl_tensor *b, tl_tensor **out) {                 \
        return tl_##name(a, b, out);                                                               \
    }                                                                                              \
    static int op_##name(lua_State *L) {                                                           \
        return binary(L, #name, compare_##name);                                                   \
    }
COMPARE(eq)
COMPARE(ne)
COMPARE(lt)
COMPARE(le)
COMPARE(gt)
COMPARE(ge)
#undef COMPARE

/* pow(a, exponent): a number exponent takes the pow_scalar kernel */
static int op_pow(lua_State *L) {
    tl_tensor *a = tlb_totensor(L, 1, "pow");
    if (a && lua_type(L, 2) == LUA_TNUMBER) {
        double exponent = (double)lua_tonumber(L, 2);
        tl_tensor *out = NULL;
        tlb_box *box = tlb_newbox(L);
        tl_status status = tl_ag_pow_scalar(a, exponent, &out);
        return tlb_result(L, box, status, out);
    }
    return binary(L, "pow", tl_ag_pow);
}

/* clamp(t, min?, max?): nil for an absent bound; a tensor bound (the other a tensor, a number or
   absent) takes clamp_tensor, or maximum / minimum for one bound */
static int op_clamp(lua_State *L) {
    if (tlb_is_tensor(L, 2) || tlb_is_tensor(L, 3)) {
        lua_settop(L, 3);
        if (lua_isnil(L, 3)) {
            lua_settop(L, 2);
            return binary(L, "clamp", tl_ag_maximum);
        }
        if (lua_isnil(L, 2)) {
            lua_remove(L, 2);
            return binary(L, "clamp", tl_ag_minimum);
        }
        return ternary_with(L, "clamp", "", tl_ag_clamp_tensor_with);
    }
    tl_tensor *a = tlb_check(L, 1, "clamp"), *out = NULL;
    bool has_min = !lua_isnoneornil(L, 2), has_max = !lua_isnoneornil(L, 3);
    double min = has_min ? tlb_check_number(L, 2, "clamp", "min") : 0;
    double max = has_max ? tlb_check_number(L, 3, "clamp", "max") : 0;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_clamp(a, has_min, min, has_max, max, &out);
    return tlb_result(L, box, status, out);
}

/* where(cond, a, b): a and b tensors or numbers */
static int op_where(lua_State *L) {
    tl_tensor *cond = tlb_check(L, 1, "where");
    tl_tensor *in[2] = {tlb_totensor(L, 2, "where"), tlb_totensor(L, 3, "where")};
    tl_scalar s[2];
    for (int i = 0; i < 2; i++)
        if (!in[i] && !tlb_to_scalar(L, i + 2, &s[i]))
            return tlb_type_error(L, i + 2, "where", "a tensor or a number");
    tlb_box *box = tlb_newbox(L);
    tl_tensor *scalars[2] = {NULL, NULL}, *out = NULL;
    tl_status status = TL_OK;
    for (int i = 0; i < 2 && status == TL_OK; i++) {
        if (in[i]) continue;
        const tl_tensor *like = in[1 - i] ? in[1 - i] : cond;
        status = tl_scalar_tensor(s[i], like, &scalars[i]);
        in[i] = scalars[i];
    }
    if (status == TL_OK) status = tl_ag_where(cond, in[0], in[1], &out);
    tl_release(scalars[0]);
    tl_release(scalars[1]);
    return tlb_result(L, box, status, out);
}

/* ---- casts -------------------------------------------------------------- */
/* Pushes the result of a cast: the input object itself when nothing changed. */
static int cast_result(lua_State *L, tlb_box *box, tl_status status, tl_tensor *in,
                       tl_tensor *out) {
    if (status != TL_OK) return tlb_fail(L);
    if (out == in) {
        tl_release(out);
        lua_pushvalue(L, 1);
        return 1;
    }
    return tlb_result(L, box, status, out);
}

/* t:to(dtype_or_device, ...): strings, an options table or a tensor (its dtype and device) */
static int op_to(lua_State *L) {
    static const tlb_option accepted[] = {
        {"dtype", TLB_OPTION_DTYPE},
        {"device", TLB_OPTION_DEVICE},
        {NULL, 0},
    };
    tl_tensor *t = tlb_check(L, 1, "to");
    tl_dtype dtype = t->dtype;
    tl_device device = tl_tensor_device(t);
    int top = lua_gettop(L);
    if (top < 2) return tlb_type_error(L, 2, "to", "a dtype or a device");
    for (int i = 2; i <= top; i++) {
        tl_tensor *other;
        if (lua_type(L, i) == LUA_TSTRING) {
            const char *name = lua_tostring(L, i);
            if (tl_dtype_parse(name, &dtype) != TL_OK && tl_device_parse(name, &device) != TL_OK)
                return tlb_errorf(L,
                                  "to: '%s' is neither a dtype (float32, float64, bfloat16, "
                                  "float16, int32, int64, bool) nor a device (cpu, cuda, cuda:N)",
                                  name);
        } else if (lua_istable(L, i)) {
            tlb_check_options(L, i, "to", accepted);
            tlb_option_dtype(L, i, "to", "dtype", &dtype);
            tlb_option_device(L, i, "to", "device", &device);
        } else if ((other = tlb_totensor(L, i, "to"))) {
            dtype = other->dtype;
            device = tl_tensor_device(other);
        } else if (!lua_isnil(L, i)) {
            return tlb_type_error(L, i, "to", "a dtype, a device or an options table");
        }
    }
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_to(t, dtype, device, &out);
    return cast_result(L, box, status, t, out);
}

static int cast(lua_State *L, const char *op, tl_dtype dtype) {
    tl_tensor *t = tlb_check(L, 1, op), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_cast(t, dtype, &out);
    return cast_result(L, box, status, t, out);
}

static int op_float(lua_State *L) {
    return cast(L, "float", TL_F32);
}
static int op_double(lua_State *L) {
    return cast(L, "double", TL_F64);
}
static int op_bfloat16(lua_State *L) {
    return cast(L, "bfloat16", TL_BF16);
}
static int op_half(lua_State *L) {
    return cast(L, "half", TL_F16);
}
static int op_int(lua_State *L) {
    return cast(L, "int", TL_I32);
}
static int op_long(lua_State *L) {
    return cast(L, "long", TL_I64);
}
static int op_bool(lua_State *L) {
    return cast(L, "bool", TL_BOOL);
}

/* ---- reductions --------------------------------------------------------- */
typedef tl_status (*reduce_all_fn)(tl_tensor *a, tl_tensor **out);

/* Every REDUCE_OP row: tl.<name>(x, dims?, keepdim?) and x:<name>(...), dims a dim (1-based,
   negative from the end), a table of dims or nil (every element); the last argument keepdim or
   an options table {keepdim = false, <the row's number> = its default} ({correction = 1}). An op
   whose number is an order p takes it first, as torch's x:norm(p, dim, keepdim): p a number
   (math.huge for inf) or "fro" (2), nil for the row's default. */
typedef tl_status (*fold_fn)(tl_tensor *a, const int *dims, int ndims, bool keepdim, double number,
                             tl_tensor **out);
typedef struct fold_args {
    int dims[TL_MAX_DIMS], ndims;
    bool keepdim;
    double number;
} fold_args;

/* Reads a fold's arguments after x (number: the row's default, replaced when given). */
static void fold_parse(lua_State *L, const char *op, const char *number_name, double number,
                       fold_args *f) {
    const bool has_number = strcmp(number_name, "none") != 0;
    const int lead = has_number && strcmp(number_name, "p") == 0; /* the order comes first */
    if (lua_gettop(L) > 3 + lead)
        tlb_errorf(L, "%s: expected at most %d arguments (x, %sdims, keepdim or options), got %d",
                   op, 3 + lead, lead ? "p, " : "", lua_gettop(L));
    if (lead && lua_type(L, 2) == LUA_TSTRING) {
        if (strcmp(lua_tostring(L, 2), "fro") != 0)
            tlb_errorf(L, "%s: p expected a number or \"fro\", got \"%s\"", op, lua_tostring(L, 2));
        number = 2;
    } else if (lead && !lua_isnoneornil(L, 2)) {
        number = tlb_check_number(L, 2, op, "p");
    }
    const int at = 2 + lead; /* dims, then keepdim or options */
    f->ndims = 0;
    if (lua_istable(L, at)) {
        lua_Integer n = luaL_len(L, at);
        if (n > TL_MAX_DIMS)
            tlb_errorf(L, "%s: expected at most %d dims, got %lld", op, TL_MAX_DIMS, (long long)n);
        for (int i = 0; i < (int)n; i++) {
            lua_geti(L, at, i + 1);
            f->dims[f->ndims++] = tlb_check_dim(L, lua_gettop(L), op);
            lua_pop(L, 1);
        }
        if (n == 0) tlb_errorf(L, "%s: expected a dim or a non-empty table of dims, got {}", op);
    } else if (!lua_isnoneornil(L, at)) {
        f->dims[f->ndims++] = tlb_check_dim(L, at, op);
    }
    f->keepdim = false;
    if (lua_istable(L, at + 1)) {
        const tlb_option accepted[] = {{"keepdim", TLB_OPTION_BOOLEAN},
                                       {has_number ? number_name : NULL, TLB_OPTION_NUMBER},
                                       {NULL, 0}};
        tlb_check_options(L, at + 1, op, accepted);
        tlb_option_bool(L, at + 1, op, "keepdim", &f->keepdim);
        if (has_number) tlb_option_number(L, at + 1, op, number_name, &number);
    } else {
        f->keepdim = tlb_opt_bool(L, at + 1, op, false);
    }
    f->number = number;
}

static int fold(lua_State *L, const char *op, fold_fn fn, const char *number_name, double number) {
    tl_tensor *a = tlb_check(L, 1, op), *out = NULL;
    fold_args f;
    fold_parse(L, op, number_name, number, &f);
    tlb_box *box = tlb_newbox(L);
    tl_status status = fn(a, f.dims, f.ndims, f.keepdim, f.number, &out);
    return tlb_result(L, box, status, out);
}

/* std_mean, var_mean (as torch): the statistic and the mean over the same dims, from std's
   arguments (dims, keepdim or {keepdim, correction = 1}) */
static int fold_with_mean(lua_State *L, const char *op, fold_fn statistic) {
    tl_tensor *a = tlb_check(L, 1, op), *out = NULL, *mean = NULL;
    fold_args f;
    fold_parse(L, op, "correction", 1, &f);
    tlb_box *box = tlb_newbox(L);
    tlb_box *mean_box = tlb_newbox(L);
    if (tl_error_as(statistic(a, f.dims, f.ndims, f.keepdim, f.number, &out), op) != TL_OK)
        return tlb_fail(L);
    box->tensor = out;
    tlb_account(L, out);
    if (tl_error_as(tl_ag_mean_dims(a, f.dims, f.ndims, f.keepdim, 0, &mean), op) != TL_OK)
        return tlb_fail(L);
    mean_box->tensor = mean;
    tlb_account(L, mean);
    return 2;
}
static int op_std_mean(lua_State *L) {
    return fold_with_mean(L, "std_mean", tl_ag_std_dims);
}
static int op_var_mean(lua_State *L) {
    return fold_with_mean(L, "var_mean", tl_ag_var_dims);
}
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    static int op_##name(lua_State *L) {                                                           \
        return fold(L, #name, tl_ag_##name##_dims, #number_name, param);                           \
    }
#include "tlua/ops.def"

typedef tl_status (*extreme_dim_fn)(tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                                    tl_tensor **indices);

/* max() -> 0-dim tensor; max(dim, keepdim?) -> values, 1-based indices */
static int extreme(lua_State *L, const char *op, reduce_all_fn all, extreme_dim_fn by_dim) {
    tl_tensor *a = tlb_check(L, 1, op);
    if (lua_isnoneornil(L, 2)) {
        tl_tensor *out = NULL;
        tlb_box *box = tlb_newbox(L);
        tl_status status = all(a, &out);
        return tlb_result(L, box, status, out);
    }
    int dim = tlb_check_dim(L, 2, op);
    bool keepdim = tlb_opt_bool(L, 3, op, false);
    tlb_box *values_box = tlb_newbox(L);
    tlb_box *indices_box = tlb_newbox(L);
    tl_tensor *values = NULL, *indices = NULL, *shifted = NULL;
    if (by_dim(a, dim, keepdim, &values, &indices) != TL_OK) return tlb_fail(L);
    values_box->tensor = values;
    tl_status status = tlb_one_based(indices, &shifted);
    tl_release(indices);
    if (status != TL_OK) return tlb_fail(L);
    indices_box->tensor = shifted;
    return 2;
}

static int op_max(lua_State *L) {
    return extreme(L, "max", tl_ag_max_all, tl_ag_max_dim);
}
static int op_min(lua_State *L) {
    return extreme(L, "min", tl_ag_min_all, tl_ag_min_dim);
}

typedef tl_status (*arg_all_fn)(const tl_tensor *a, tl_tensor **out);
typedef tl_status (*arg_dim_fn)(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out);

/* argmax(dim?, keepdim?): 1-based indices (a flat index without dim) */
static int arg_extreme(lua_State *L, const char *op, arg_all_fn all, arg_dim_fn by_dim) {
    tl_tensor *a = tlb_check(L, 1, op), *indices = NULL, *out = NULL;
    bool has_dim = !lua_isnoneornil(L, 2);
    int dim = has_dim ? tlb_check_dim(L, 2, op) : 0;
    bool keepdim = tlb_opt_bool(L, 3, op, false);
    tlb_box *box = tlb_newbox(L);
    tl_status status = has_dim ? by_dim(a, dim, keepdim, &indices) : all(a, &indices);
    if (status == TL_OK) {
        status = tlb_one_based(indices, &out);
        tl_release(indices);
    }
    return tlb_result(L, box, status, out);
}

static int op_argmax(lua_State *L) {
    return arg_extreme(L, "argmax", tl_argmax_all, tl_argmax_dim);
}
static int op_argmin(lua_State *L) {
    return arg_extreme(L, "argmin", tl_argmin_all, tl_argmin_dim);
}

typedef tl_status (*softmax_fn)(tl_tensor *a, int dim, tl_tensor **out);

static int softmax(lua_State *L, const char *op, softmax_fn fn) {
    tl_tensor *a = tlb_check(L, 1, op), *out = NULL;
    int dim = tlb_check_dim(L, 2, op);
    tlb_box *box = tlb_newbox(L);
    tl_status status = fn(a, dim, &out);
    return tlb_result(L, box, status, out);
}

static int op_softmax(lua_State *L) {
    return softmax(L, "softmax", tl_ag_softmax);
}
static int op_log_softmax(lua_State *L) {
    return softmax(L, "log_softmax", tl_ag_log_softmax);
}

/* ---- joining ---------------------------------------------------------------------------------
   tl.cat(list, dim = 1) joins along dim; tl.stack(list, dim = 1) joins along a new dim (each
   tensor unsqueezed there; every one must have the same shape). */
static int op_cat(lua_State *L) {
    const int dim = lua_isnoneornil(L, 2) ? 0 : tlb_check_dim(L, 2, "cat");
    int n;
    tl_tensor **list = tlb_check_tensor_list(L, 1, "cat", "list", &n); /* pushes its scratch */
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    const tl_status status = tl_ag_cat(list, n, dim, &out);
    return tlb_result(L, box, status, out);
}
static int op_stack(lua_State *L) {
    const int dim = lua_isnoneornil(L, 2) ? 0 : tlb_check_dim(L, 2, "stack");
    int n;
    tl_tensor **list = tlb_check_tensor_list(L, 1, "stack", "list", &n); /* pushes its scratch */
    if (n == 0) return tlb_errorf(L, "stack: expected a non-empty list of tensors, got {}");
    char s0[256], si[256];
    for (int i = 1; i < n; i++) {
        bool same = list[i]->ndim == list[0]->ndim;
        for (int k = 0; same && k < list[0]->ndim; k++)
            same = list[i]->shape[k] == list[0]->shape[k];
        if (!same)
            return tlb_errorf(L, "stack: tensor %d has shape %s, expected tensor 1's shape %s",
                              i + 1, tl_shape_str(list[i], si, sizeof si),
                              tl_shape_str(list[0], s0, sizeof s0));
    }
    tl_tensor **pieces = lua_newuserdatauv(L, sizeof *pieces * (size_t)n, 0);
    for (int i = 0; i < n; i++) pieces[i] = NULL;
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = TL_OK;
    for (int i = 0; i < n && status == TL_OK; i++) {
        status = tl_ag_unsqueeze(list[i], dim, &pieces[i]);
        if (status != TL_OK) pieces[i] = NULL; /* a failed recording released it */
    }
    if (status == TL_OK) status = tl_ag_cat(pieces, n, dim, &out);
    for (int i = 0; i < n; i++) tl_release(pieces[i]);
    return tlb_result(L, box, tl_error_as(status, "stack"), out);
}

/* ---- indexing ---------------------------------------------------------------------------------
   index tensors hold 1-based positions (along dim, or flat for take), checked against the size
   they index before they are shifted for the C API. */
/* op(x, dim, index) for gather and index_select */
typedef tl_status (*indexed_fn)(tl_tensor *x, int dim, tl_tensor *index, tl_tensor **out);
static int read_at(lua_State *L, const char *op, indexed_fn fn) {
    tl_tensor *x = tlb_check(L, 1, op), *out = NULL;
    const int dim = tlb_check_dim(L, 2, op);
    tlb_check(L, 3, op);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *index = tlb_index_arg(L, op, 3);
    tl_status status = fn(x, dim, index, &out);
    tl_release(index);
    return tlb_result(L, box, status, out);
}
static int op_gather(lua_State *L) {
    return read_at(L, "gather", tl_ag_gather);
}
/* index_select(x, dim, index): index a 1-d tensor of 1-based positions along dim */
static int op_index_select(lua_State *L) {
    return read_at(L, "index_select", tl_ag_index_select);
}

/* op(x, dim, index, src) for scatter_add, index_copy and scatter with a tensor */
typedef tl_status (*write_fn)(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src,
                              tl_tensor **out);
static int write_at(lua_State *L, const char *op, write_fn fn) {
    tl_tensor *x = tlb_check(L, 1, op), *src = tlb_check(L, 4, op), *out = NULL;
    const int dim = tlb_check_dim(L, 2, op);
    tlb_check(L, 3, op);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *index = tlb_index_arg(L, op, 3);
    tl_status status = fn(x, dim, index, src, &out);
    tl_release(index);
    return tlb_result(L, box, status, out);
}
static int op_scatter_add(lua_State *L) {
    return write_at(L, "scatter_add", tl_ag_scatter_add);
}
static int op_index_copy(lua_State *L) {
    return write_at(L, "index_copy", tl_ag_index_copy);
}

/* op(x, dim, index, value) for scatter and index_fill with a number or a boolean */
typedef tl_status (*fill_fn)(tl_tensor *x, int dim, tl_tensor *index, tl_scalar value,
                             tl_tensor **out);
static int fill_at(lua_State *L, const char *op, fill_fn fn) {
    tl_tensor *x = tlb_check(L, 1, op), *out = NULL;
    const int dim = tlb_check_dim(L, 2, op);
    tlb_check(L, 3, op);
    tl_scalar value;
    if (!tlb_to_scalar(L, 4, &value))
        return tlb_type_error(L, 4, op, "a tensor, a number or a boolean");
    tlb_box *box = tlb_newbox(L);
    tl_tensor *index = tlb_index_arg(L, op, 3);
    tl_status status = fn(x, dim, index, value, &out);
    tl_release(index);
    return tlb_result(L, box, status, out);
}
/* scatter(x, dim, index, src_or_value) */
static int op_scatter(lua_State *L) {
    if (tlb_totensor(L, 4, "scatter")) return write_at(L, "scatter", tl_ag_scatter);
    return fill_at(L, "scatter", tl_ag_scatter_value);
}
/* index_fill(x, dim, index, value) */
static int op_index_fill(lua_State *L) {
    return fill_at(L, "index_fill", tl_ag_index_fill);
}

/* scatter_reduce(x, dim, index, src, reduce, {include_self = true}) */
static int op_scatter_reduce(lua_State *L) {
    const char *op = "scatter_reduce";
    static const tlb_option accepted[] = {{"include_self", TLB_OPTION_BOOLEAN}, {NULL, 0}};
    tl_tensor *x = tlb_check(L, 1, op), *src = tlb_check(L, 4, op), *out = NULL;
    const int dim = tlb_check_dim(L, 2, op);
    tlb_check(L, 3, op);
    if (lua_type(L, 5) != LUA_TSTRING)
        return tlb_type_error(L, 5, op,
                              "a reduction (\"sum\", \"prod\", \"mean\", \"amax\", \"amin\")");
    const char *reduce = lua_tostring(L, 5);
    bool include_self = true;
    if (tlb_check_options(L, 6, op, accepted))
        tlb_option_bool(L, 6, op, "include_self", &include_self);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *index = tlb_index_arg(L, op, 3);
    tl_status status = tl_ag_scatter_reduce(x, dim, index, src, reduce, include_self, &out);
    tl_release(index);
    return tlb_result(L, box, status, out);
}

/* index_add(x, dim, index, src, {alpha = 1}) */
static int op_index_add(lua_State *L) {
    const char *op = "index_add";
    static const tlb_option accepted[] = {{"alpha", TLB_OPTION_NUMBER}, {NULL, 0}};
    tl_tensor *x = tlb_check(L, 1, op), *src = tlb_check(L, 4, op), *out = NULL;
    const int dim = tlb_check_dim(L, 2, op);
    tlb_check(L, 3, op);
    double alpha = 1;
    if (tlb_check_options(L, 5, op, accepted)) tlb_option_number(L, 5, op, "alpha", &alpha);
    tlb_box *box = tlb_newbox(L);
    tl_tensor *index = tlb_index_arg(L, op, 3);
    tl_status status = tl_ag_index_add(x, dim, index, src, alpha, &out);
    tl_release(index);
    return tlb_result(L, box, status, out);
}

/* take(x, index): x's elements at 1-based flat positions, in index's shape */
static int op_take(lua_State *L) {
    const char *op = "take";
    tl_tensor *x = tlb_check(L, 1, op), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_tensor *index = tlb_zero_based_indices(L, op, "index", tlb_check(L, 2, op),
                                              "x's number of elements", tl_numel(x));
    tl_status status = tl_ag_take(x, index, &out);
    tl_release(index);
    return tlb_result(L, box, status, out);
}

/* masked_select(x, mask): x's elements where mask (bool, broadcast with x) is true, 1-d */
static int op_masked_select(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "masked_select"), *mask = tlb_check(L, 2, "masked_select");
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_masked_select(x, mask, &out);
    return tlb_result(L, box, status, out);
}

/* masked_fill(x, mask, value): x with value where the bool mask (broadcasting to x) is true */
static int op_masked_fill(lua_State *L) {
    const char *op = "masked_fill";
    tl_tensor *x = tlb_check(L, 1, op), *mask = tlb_check(L, 2, op), *out = NULL;
    tl_scalar value;
    if (!tlb_to_scalar(L, 3, &value)) return tlb_type_error(L, 3, op, "a number or a boolean");
    if (mask->dtype != TL_BOOL)
        return tlb_errorf(L, "%s: mask must be a bool tensor, got %s", op,
                          tl_dtype_name(mask->dtype));
    bool fits = mask->ndim <= x->ndim;
    for (int k = 1; fits && k <= mask->ndim; k++) {
        const int64_t m = mask->shape[mask->ndim - k], s = x->shape[x->ndim - k];
        fits = m == s || m == 1;
    }
    if (!fits) {
        char sm[256], sx[256];
        return tlb_errorf(L, "%s: mask of shape %s does not broadcast to x's shape %s", op,
                          tl_shape_str(mask, sm, sizeof sm), tl_shape_str(x, sx, sizeof sx));
    }
    tlb_box *box = tlb_newbox(L);
    tl_tensor *filler = NULL;
    tl_status status = tl_scalar_tensor(value, x, &filler);
    if (status == TL_OK) status = tl_ag_where(mask, filler, x, &out);
    tl_release(filler);
    return tlb_result(L, box, status, out);
}

/* ---- matmul and friends ------------------------------------------------- */
static int op_matmul(lua_State *L) {
    tl_tensor *a = tlb_check(L, 1, "matmul"), *b = tlb_check(L, 2, "matmul"), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_matmul(a, b, &out);
    return tlb_result(L, box, status, out);
}

/* linear(input, weight, bias?): input [..., in], weight [out, in], bias [out] */
static int op_linear(lua_State *L) {
    tl_tensor *input = tlb_check(L, 1, "linear"), *weight = tlb_check(L, 2, "linear");
    tl_tensor *bias = lua_isnoneornil(L, 3) ? NULL : tlb_check(L, 3, "linear"), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_linear(input, weight, bias, &out);
    return tlb_result(L, box, status, out);
}

/* gelu's form from option approximate's value: "none" (the default, as torch's gelu: the exact erf
   form) or "tanh"; true for "tanh" */
static bool gelu_form(lua_State *L, const char *op, const char *form) {
    if (strcmp(form, "tanh") != 0 && strcmp(form, "none") != 0)
        tlb_errorf(L, "%s: option approximate expected \"tanh\" or \"none\", got \"%s\"", op, form);
    return strcmp(form, "tanh") == 0;
}

/* gelu_linear(pre, weight, bias?, {approximate}): linear(gelu(pre), weight, bias) as one node
   that keeps pre, not gelu(pre) (tl_ag_gelu_linear) */
static int op_gelu_linear(lua_State *L) {
    const char *op = "gelu_linear";
    tl_tensor *pre = tlb_check(L, 1, op), *weight = tlb_check(L, 2, op);
    tl_tensor *bias = lua_isnoneornil(L, 3) ? NULL : tlb_check(L, 3, op), *out = NULL;
    static const tlb_option accepted[] = {{"approximate", TLB_OPTION_STRING}, {NULL, 0}};
    const char *form = "none";
    if (tlb_check_options(L, 4, op, accepted)) tlb_option_string(L, 4, op, "approximate", &form);
    const bool tanh_form = gelu_form(L, op, form);
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_gelu_linear(pre, weight, bias, tanh_form, &out);
    return tlb_result(L, box, status, out);
}

/* linear_gelu_linear(x, weight1, bias1?, weight2, bias2?, {approximate, gelu_epilogue}): a
   feed-forward, linear(gelu(linear(x, weight1, bias1)), weight2, bias2), as one node keeping the
   first linear's output only, its GEMMs with cuBLASLt's epilogues (tl_ag_linear_gelu_linear) */
static int op_linear_gelu_linear(lua_State *L) {
    const char *op = "linear_gelu_linear";
    tl_tensor *x = tlb_check(L, 1, op), *w1 = tlb_check(L, 2, op);
    tl_tensor *b1 = lua_isnoneornil(L, 3) ? NULL : tlb_check(L, 3, op);
    tl_tensor *w2 = tlb_check(L, 4, op);
    tl_tensor *b2 = lua_isnoneornil(L, 5) ? NULL : tlb_check(L, 5, op), *out = NULL;
    static const tlb_option accepted[] = {
        {"approximate", TLB_OPTION_STRING}, {"gelu_epilogue", TLB_OPTION_BOOLEAN}, {NULL, 0}};
    const char *form = "none";
    bool gelu_epilogue = false;
    if (tlb_check_options(L, 6, op, accepted)) {
        tlb_option_string(L, 6, op, "approximate", &form);
        tlb_option_bool(L, 6, op, "gelu_epilogue", &gelu_epilogue);
    }
    const bool tanh_form = gelu_form(L, op, form);
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_linear_gelu_linear(x, w1, b1, w2, b2, tanh_form, gelu_epilogue, &out);
    return tlb_result(L, box, status, out);
}

/* outer(a, b): a [n], b [m] -> [n, m] */
static int op_outer(lua_State *L) {
    tl_tensor *a = tlb_check(L, 1, "outer"), *b = tlb_check(L, 2, "outer"), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_outer(a, b, &out);
    return tlb_result(L, box, status, out);
}

#define POINTWISE_ENTRY(name) {#name, op_##name},

// clang-format off
const luaL_Reg tlb_op_methods[] = {
    {"neg", op_neg},         {"abs", op_abs},
    {"relu", op_relu},       {"clamp", op_clamp},
    {"pow", op_pow},         {"add", op_add},
    {"sub", op_sub},         {"mul", op_mul},
    {"eq", op_eq},
    {"ne", op_ne},           {"lt", op_lt},
    {"le", op_le},           {"gt", op_gt},
    {"ge", op_ge},           {"where", op_where},
    {"to", op_to},           {"float", op_float},
    {"double", op_double},   {"bfloat16", op_bfloat16},
    {"half", op_half},       {"int", op_int},
    {"long", op_long},       {"bool", op_bool},
    {"max", op_max},         {"min", op_min},
    {"argmax", op_argmax},   {"argmin", op_argmin},
    {"softmax", op_softmax}, {"log_softmax", op_log_softmax},
    {"matmul", op_matmul},   {"linear", op_linear}, {"gelu_linear", op_gelu_linear},
    {"linear_gelu_linear", op_linear_gelu_linear},
    {"outer", op_outer},
    {"gather", op_gather},   {"scatter_add", op_scatter_add},
    {"cat", op_cat},         {"stack", op_stack},
    {"index_select", op_index_select}, {"masked_fill", op_masked_fill},
    {"std_mean", op_std_mean}, {"var_mean", op_var_mean},
    {"scatter", op_scatter}, {"scatter_reduce", op_scatter_reduce},
    {"index_add", op_index_add}, {"index_copy", op_index_copy},
    {"index_fill", op_index_fill}, {"take", op_take},
    {"masked_select", op_masked_select},
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec) POINTWISE_ENTRY(name)
#include "tlua/ops.def"
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes) POINTWISE_ENTRY(name)
#include "tlua/ops.def"
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec) POINTWISE_ENTRY(name)
#include "tlua/ops.def"
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param) POINTWISE_ENTRY(name)
#include "tlua/ops.def"
    {NULL, NULL},
};
// clang-format on

/* the operators of the metatable */
const luaL_Reg tlb_op_meta[] = {
    {"__add", op_add}, {"__sub", op_sub}, {"__mul", op_mul}, {"__div", op_div},
    {"__pow", op_pow}, {"__unm", op_neg}, {NULL, NULL},
};
