/* Attention binding: tl.scaled_dot_product_attention(q, k, v, {causal, scale, dropout}). */
#include <math.h>
#include <string.h>

#include "binding.h"

#define OP "scaled_dot_product_attention"

static tl_tensor *tensor_arg(lua_State *L, int idx, const char *name) {
    char where[96];
    tl_tensor *t = tlb_totensor(L, idx, OP);
    if (!t)
        tlb_errorf(L, "%s: %s expected a tensor, got %s", OP,
                   tlb_position(L, idx, name, where, sizeof where), tlb_typename(L, idx));
    return t;
}

/* opts.name as a number (nil: *value unchanged, false returned). */
static bool number_option(lua_State *L, int opts, const char *name, double *value) {
    lua_getfield(L, opts, name);
    bool present = !lua_isnil(L, -1);
    if (present) {
        if (lua_type(L, -1) != LUA_TNUMBER)
            tlb_errorf(L, "%s: option %s expected a number, got %s", OP, name, tlb_typename(L, -1));
        *value = (double)lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return present;
}

static void read_options(lua_State *L, int idx, tl_attention_options *opts) {
    static const char *const keys[] = {"causal", "scale", "dropout"};
    if (lua_isnoneornil(L, idx)) return;
    if (!lua_istable(L, idx) || tlb_is_tensor(L, idx))
        tlb_type_error(L, idx, OP, "an options table {causal = false, scale = nil, dropout = 0}");
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        bool known = false;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !known; i++)
            known = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), keys[i]) == 0;
        if (!known)
            tlb_errorf(L, "%s: unknown option '%s' (expected causal, scale, dropout)", OP,
                       lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : tlb_typename(L, -1));
    }
    lua_getfield(L, idx, "causal");
    if (!lua_isnil(L, -1)) {
        if (!lua_isboolean(L, -1))
            tlb_errorf(L, "%s: option causal expected a boolean, got %s", OP, tlb_typename(L, -1));
        opts->causal = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    double scale = 0;
    if (number_option(L, idx, "scale", &scale) && !(scale > 0 && isfinite(scale)))
        tlb_errorf(L, "%s: option scale must be a finite number > 0 (nil for 1 / sqrt(D)), got %g",
                   OP, scale);
    opts->scale = scale;
    number_option(L, idx, "dropout", &opts->dropout); /* the engine checks its range */
}

/* tl.scaled_dot_product_attention(q [..., T, D], k [..., S, D], v [..., S, D], opts?) */
static int scaled_dot_product_attention(lua_State *L) {
    tl_tensor *q = tensor_arg(L, 1, "q"), *k = tensor_arg(L, 2, "k"), *v = tensor_arg(L, 3, "v");
    tl_attention_options opts = {0};
    read_options(L, 4, &opts);
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_scaled_dot_product_attention(q, k, v, &opts, &out);
    return tlb_result(L, box, status, out);
}

const luaL_Reg tlb_attention_functions[] = {
    {"scaled_dot_product_attention", scaled_dot_product_attention},
    {NULL, NULL},
};
