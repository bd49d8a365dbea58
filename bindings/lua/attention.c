/* Attention binding: tl.scaled_dot_product_attention(q, k, v, {causal, scale, dropout}). */
#include <math.h>

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

/* opts {causal = false, scale = nil (1 / sqrt(D)), dropout = 0} at idx (a table, nil or none). */
static void read_options(lua_State *L, int idx, tl_attention_options *opts) {
    static const tlb_option accepted[] = {
        {"causal", TLB_OPTION_BOOLEAN},
        {"scale", TLB_OPTION_NUMBER},
        {"dropout", TLB_OPTION_NUMBER},
        {NULL, 0},
    };
    if (!tlb_check_options(L, idx, OP, accepted)) return;
    tlb_option_bool(L, idx, OP, "causal", &opts->causal);
    double scale = 0;
    if (tlb_option_number(L, idx, OP, "scale", &scale) && !(scale > 0 && isfinite(scale)))
        tlb_errorf(L, "%s: option scale must be a finite number > 0 (nil for 1 / sqrt(D)), got %g",
                   OP, scale);
    opts->scale = scale;
    tlb_option_number(L, idx, OP, "dropout", &opts->dropout); /* the engine checks its range */
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
