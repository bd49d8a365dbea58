/* In-place op bindings: t:add_(other), t:exp_(), t:softmax_(dim), t:matmul_(w), t:scatter_(dim,
 * index, src), ... return t. */
#include "binding.h"

/* Finishes an in-place call: raises the engine's error, else returns x (argument 1) itself. */
static int inplace_result(lua_State *L, tl_status status) {
    if (status != TL_OK) return tlb_fail(L);
    lua_settop(L, 1);
    return 1;
}

/* op_<name>_, the binding of tl_ag_<name>_ through form (unary or binary below) */
#define INPLACE_BINDING(form, name)                                                                \
    static int op_##name##_(lua_State *L) {                                                        \
        return form(L, #name "_", tl_ag_##name##_);                                                \
    }

/* ---- x <- f(x) ------------------------------------------------------------------------------ */
static int unary(lua_State *L, const char *op, tl_status (*fn)(tl_tensor *x)) {
    return inplace_result(L, fn(tlb_check(L, 1, op)));
}

INPLACE_BINDING(unary, neg)
INPLACE_BINDING(unary, abs)
INPLACE_BINDING(unary, relu)
/* every POINTWISE row of ops.def: t:exp_(), t:gelu_(), t:leaky_relu_(0.2), ... (the row's
   numbers after the tensor, as the out-of-place op) */
static int unary_with(lua_State *L, const char *op, const char *spec,
                      tl_status (*fn)(tl_tensor *x, const double *numbers)) {
    tl_tensor *x = tlb_check(L, 1, op);
    double numbers[TLB_MAX_NUMBERS];
    tlb_pointwise_numbers(L, 2, op, spec, numbers);
    return inplace_result(L, fn(x, numbers));
}
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    static int op_##name##_(lua_State *L) {                                                        \
        return unary_with(L, #name "_", spec, tl_ag_##name##_with_);                               \
    }
#include "tlua/ops.def"

/* ---- x <- f(x, other), other a tensor or a number -------------------------------------------- */
static int binary(lua_State *L, const char *op, tl_status (*fn)(tl_tensor *x, tl_tensor *other)) {
    if (lua_gettop(L) > 2)
        return tlb_errorf(L, "%s: expected 2 arguments (x, other), got %d", op, lua_gettop(L));
    tl_tensor *x = tlb_check(L, 1, op), *other = tlb_totensor(L, 2, op), *scalar = NULL;
    if (!other) {
        tl_scalar s;
        if (!tlb_to_scalar(L, 2, &s)) return tlb_type_error(L, 2, op, "a tensor or a number");
        if (tl_scalar_tensor(s, x, &scalar) != TL_OK) return tlb_fail(L);
        other = scalar;
    }
    tl_status status = fn(x, other);
    tl_release(scalar);
    return inplace_result(L, status);
}

/* add_(x, other, {alpha = a}) and sub_: x <- x + a * other, x - a * other (other scaled first) */
static int scaled_binary(lua_State *L, const char *op, tl_status (*fn)(tl_tensor *, tl_tensor *)) {
    const double alpha = tlb_alpha_option(L, op, "x, other");
    if (alpha == 1) return binary(L, op, fn);
    tl_tensor *x = tlb_check(L, 1, op), *other = tlb_check(L, 2, op);
    tl_tensor *factor = NULL, *scaled = NULL;
    tl_status status = tl_scalar_tensor(tl_scalar_float(alpha), other, &factor);
    if (status == TL_OK) status = tl_ag_mul(other, factor, &scaled);
    tl_release(factor);
    if (status == TL_OK) status = fn(x, scaled);
    tl_release(scaled);
    return inplace_result(L, tl_error_as(status, op));
}
static int op_add_(lua_State *L) {
    return scaled_binary(L, "add_", tl_ag_add_);
}
static int op_sub_(lua_State *L) {
    return scaled_binary(L, "sub_", tl_ag_sub_);
}
INPLACE_BINDING(binary, mul)
/* t:copy_(src): a tensor src converts as tl_copy_ does (floats into an integer dtype truncate
   and saturate, as casts do); a number must fit t's dtype, as fill_'s value (no silent
   saturation) */
static int op_copy_(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "copy_");
    tl_scalar s;
    if (lua_gettop(L) == 2 && !tlb_is_tensor(L, 2) && tlb_to_scalar(L, 2, &s) &&
        tl_scalar_check_fits("copy_", x->dtype, s) != TL_OK)
        return tlb_fail(L);
    return binary(L, "copy_", tl_ag_copy_);
}
/* every POINTWISE_BINARY row of ops.def: t:div_(other), t:atan2_(other), ... */
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes) INPLACE_BINDING(binary, name)
#include "tlua/ops.def"
#undef INPLACE_BINDING

/* t:clamp_(min?, max?): nil for an absent bound; tensor bounds (or a number with a tensor) as
   t:maximum_(min) then t:minimum_(max) */
static int op_clamp_(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "clamp_");
    if (tlb_is_tensor(L, 2) || tlb_is_tensor(L, 3)) {
        tl_status (*const by_bound[2])(tl_tensor *, tl_tensor *) = {tl_ag_maximum_, tl_ag_minimum_};
        tl_status status = TL_OK;
        for (int i = 0; i < 2 && status == TL_OK; i++) {
            if (lua_isnoneornil(L, i + 2)) continue;
            tl_tensor *bound = tlb_totensor(L, i + 2, "clamp_"), *scalar = NULL;
            tl_scalar s;
            if (!bound && !tlb_to_scalar(L, i + 2, &s))
                return tlb_type_error(L, i + 2, "clamp_", "a tensor, a number or nil");
            if (!bound && (status = tl_scalar_tensor(s, x, &scalar)) != TL_OK) break;
            status = by_bound[i](x, bound ? bound : scalar);
            tl_release(scalar);
        }
        return inplace_result(L, status);
    }
    bool has_min = !lua_isnoneornil(L, 2), has_max = !lua_isnoneornil(L, 3);
    double min = has_min ? tlb_check_number(L, 2, "clamp_", "min") : 0;
    double max = has_max ? tlb_check_number(L, 3, "clamp_", "max") : 0;
    return inplace_result(L, tl_ag_clamp_(x, has_min, min, has_max, max));
}

/* t:fill_(value) -> t */
static int op_fill_(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "fill_");
    tl_scalar value = tlb_check_scalar(L, 2, "fill_");
    return inplace_result(L, tl_ag_fill_(x, value));
}

/* ---- rows ---------------------------------------------------------------------------------- */
static int op_softmax_(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "softmax_");
    return inplace_result(L, tl_ag_softmax_(x, tlb_check_dim(L, 2, "softmax_")));
}

static int op_log_softmax_(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "log_softmax_");
    return inplace_result(L, tl_ag_log_softmax_(x, tlb_check_dim(L, 2, "log_softmax_")));
}

/* t:layer_norm_(weight?, bias?, eps = 1e-5): over the last dim, as tl.layer_norm */
static int op_layer_norm_(lua_State *L) {
    const char *op = "layer_norm_";
    tl_tensor *x = tlb_check(L, 1, op);
    tl_tensor *weight = tlb_opt_tensor(L, 2, op, "weight"),
              *bias = tlb_opt_tensor(L, 3, op, "bias");
    double eps = lua_isnoneornil(L, 4) ? 1e-5 : tlb_check_number(L, 4, op, "eps");
    return inplace_result(L, tl_ag_layer_norm_(x, weight, bias, eps));
}

/* t:matmul_(w): t[..., n] <- t @ w, w [n, n] */
static int op_matmul_(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "matmul_"), *w = tlb_check(L, 2, "matmul_");
    return inplace_result(L, tl_ag_matmul_(x, w));
}

/* t:dropout_(p = 0.5): t <- t * keep / (1 - p), the mask of tl.dropout */
static int op_dropout_(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "dropout_");
    double p = lua_isnoneornil(L, 2) ? 0.5 : tlb_check_number(L, 2, "dropout_", "p");
    return inplace_result(L, tl_ag_dropout_(x, p));
}

/* ---- indexing: x's places at an index (1-based) written, added or filled --------------------- */
/* t:scatter_(dim, index, src_or_value), t:scatter_add_(dim, index, src),
   t:index_copy_(dim, index, src), t:index_fill_(dim, index, value),
   t:index_add_(dim, index, src, {alpha = 1}) */
static int write_at_(lua_State *L, const char *op, int kind) {
    tl_tensor *x = tlb_check(L, 1, op);
    const int dim = tlb_check_dim(L, 2, op);
    tlb_check(L, 3, op);
    tl_tensor *src = kind == 'f' ? NULL : tlb_totensor(L, 4, op);
    tl_scalar value = tl_scalar_int(0);
    if (kind == 's' && !src && !tlb_to_scalar(L, 4, &value))
        return tlb_type_error(L, 4, op, "a tensor, a number or a boolean");
    if (kind == 'f' && !tlb_to_scalar(L, 4, &value))
        return tlb_type_error(L, 4, op, "a number or a boolean");
    if ((kind == 'a' || kind == 'c' || kind == 'i') && !src) tlb_check(L, 4, op);
    double alpha = 1;
    static const tlb_option accepted[] = {{"alpha", TLB_OPTION_NUMBER}, {NULL, 0}};
    if (kind == 'i' && tlb_check_options(L, 5, op, accepted))
        tlb_option_number(L, 5, op, "alpha", &alpha);
    tl_tensor *index = tlb_index_arg(L, op, 3);
    tl_status status;
    switch (kind) {
    case 's': /* scatter_ */
        status =
            src ? tl_ag_scatter_(x, dim, index, src) : tl_ag_scatter_value_(x, dim, index, value);
        break;
    case 'a':
        status = tl_ag_scatter_add_(x, dim, index, src);
        break;
    case 'c':
        status = tl_ag_index_copy_(x, dim, index, src);
        break;
    case 'i':
        status = tl_ag_index_add_(x, dim, index, src, alpha);
        break;
    default:
        status = tl_ag_index_fill_(x, dim, index, value);
        break;
    }
    tl_release(index);
    return inplace_result(L, status);
}
static int op_scatter_(lua_State *L) {
    return write_at_(L, "scatter_", 's');
}
static int op_scatter_add_(lua_State *L) {
    return write_at_(L, "scatter_add_", 'a');
}
static int op_index_copy_(lua_State *L) {
    return write_at_(L, "index_copy_", 'c');
}
static int op_index_add_(lua_State *L) {
    return write_at_(L, "index_add_", 'i');
}
static int op_index_fill_(lua_State *L) {
    return write_at_(L, "index_fill_", 'f');
}

/* t:masked_fill_(mask, value): value a number, a boolean or a tensor (broadcasting to t, cast to
   its dtype) */
static int op_masked_fill_(lua_State *L) {
    const char *op = "masked_fill_";
    tl_tensor *x = tlb_check(L, 1, op), *mask = tlb_check(L, 2, op);
    tl_tensor *value = tlb_totensor(L, 3, op), *owned = NULL;
    tl_scalar s;
    if (!value && !tlb_to_scalar(L, 3, &s))
        return tlb_type_error(L, 3, op, "a tensor, a number or a boolean");
    tl_status status = TL_OK;
    if (!value) {
        status = tl_scalar_check_fits(op, x->dtype, s);
        if (status == TL_OK) status = tl_full(NULL, 0, s, x->dtype, tl_tensor_device(x), &owned);
    } else if (value->dtype != x->dtype) {
        status = tl_ag_cast(value, x->dtype, &owned);
        if (status != TL_OK) owned = NULL; /* released by the failed cast */
    }
    if (status == TL_OK) status = tl_ag_masked_fill_(x, mask, owned ? owned : value);
    tl_release(owned);
    return inplace_result(L, status);
}

#define INPLACE_ENTRY(name) {#name "_", op_##name##_},

const luaL_Reg tlb_inplace_methods[] = {
    INPLACE_ENTRY(add) INPLACE_ENTRY(sub) INPLACE_ENTRY(mul) INPLACE_ENTRY(copy) INPLACE_ENTRY(fill)
        INPLACE_ENTRY(neg) INPLACE_ENTRY(abs) INPLACE_ENTRY(relu) INPLACE_ENTRY(clamp)
            INPLACE_ENTRY(softmax) INPLACE_ENTRY(log_softmax) INPLACE_ENTRY(layer_norm)
                INPLACE_ENTRY(matmul) INPLACE_ENTRY(dropout) INPLACE_ENTRY(scatter)
                    INPLACE_ENTRY(scatter_add) INPLACE_ENTRY(index_copy) INPLACE_ENTRY(index_add)
                        INPLACE_ENTRY(index_fill) INPLACE_ENTRY(masked_fill)
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec) INPLACE_ENTRY(name)
#include "tlua/ops.def"
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes) INPLACE_ENTRY(name)
#include "tlua/ops.def"
                            {NULL, NULL},
};
