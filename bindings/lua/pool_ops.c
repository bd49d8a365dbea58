/* Pooling and interpolate bindings: tl.max_pool2d, tl.avg_pool2d, tl.adaptive_max_pool2d,
   tl.adaptive_avg_pool2d (input [N, C, H, W] or unbatched [C, H, W]) and tl._interpolate (the
   positional form under tl.nn.functional.interpolate). Indices count from 1. */
#include <string.h>

#include "binding.h"
#include "tlua/autograd.h"
#include "tlua/nn.h"

static const tlb_option max_pool_options[] = {
    {"stride", TLB_OPTION_PAIR},
    {"padding", TLB_OPTION_PAIR},
    {"dilation", TLB_OPTION_PAIR},
    {"ceil_mode", TLB_OPTION_BOOLEAN},
    {"return_indices", TLB_OPTION_BOOLEAN},
    {NULL, 0},
};
static const tlb_option avg_pool_options[] = {
    {"stride", TLB_OPTION_PAIR},
    {"padding", TLB_OPTION_PAIR},
    {"ceil_mode", TLB_OPTION_BOOLEAN},
    {"count_include_pad", TLB_OPTION_BOOLEAN},
    {"divisor_override", TLB_OPTION_INTEGER},
    {NULL, 0},
};
static const tlb_option adaptive_max_options[] = {
    {"return_indices", TLB_OPTION_BOOLEAN},
    {NULL, 0},
};

/* What one pooling call runs on the batched input x; values and (maybe) indices. */
typedef struct pool_call {
    const char *op;
    int kind; /* 0 max, 1 avg, 2 adaptive max, 3 adaptive avg, 4 interpolate */
    tl_pool2d_options pool;
    int64_t out_h, out_w;
    tl_interpolate_options interp;
    bool want_indices;
} pool_call;

static tl_status run_call(const pool_call *c, tl_tensor *x, tl_tensor **out, tl_tensor **indices) {
    switch (c->kind) {
    case 0:
        return tl_ag_max_pool2d_with(x, &c->pool, out, indices);
    case 1:
        return tl_ag_avg_pool2d(x, &c->pool, out);
    case 2:
        return tl_ag_adaptive_max_pool2d(x, c->out_h, c->out_w, out, indices);
    case 3:
        return tl_ag_adaptive_avg_pool2d(x, c->out_h, c->out_w, out);
    default:
        return tl_ag_interpolate(x, &c->interp, out);
    }
}

/* Runs c on input ([N, C, H, W], or [C, H, W] as a batch of one) and returns its results to Lua:
   the values, and the 1-based indices when asked for. */
static int finish(lua_State *L, tl_tensor *input, const pool_call *c) {
    tlb_box *values_box = tlb_newbox(L);
    tlb_box *indices_box = c->want_indices ? tlb_newbox(L) : NULL;
    const bool unbatched = input->ndim == 3;
    if (input->ndim != 3 && input->ndim != 4) {
        char si[256];
        return tlb_errorf(L, "%s: input must be [N, C, H, W] or [C, H, W], got shape %s", c->op,
                          tl_shape_str(input, si, sizeof si));
    }
    tl_tensor *x = input, *values = NULL, *indices = NULL, *shifted = NULL;
    /* a failed recording releases its output: nothing to release after one */
    if (unbatched && tl_ag_unsqueeze(input, 0, &x) != TL_OK) return tlb_fail(L);
    tl_status status = run_call(c, x, &values, c->want_indices ? &indices : NULL);
    if (x != input) tl_release(x);
    if (status != TL_OK) return tlb_fail(L);
    if (unbatched) {
        tl_tensor *v = values, *i = indices;
        values = indices = NULL;
        status = tl_ag_squeeze(v, 0, &values);
        if (status != TL_OK) values = NULL;
        if (status == TL_OK && i) status = tl_squeeze(i, 0, &indices);
        tl_release(v), tl_release(i);
    }
    if (status == TL_OK && indices) status = tlb_one_based(indices, &shifted);
    tl_release(indices);
    if (status != TL_OK) {
        tl_release(values), tl_release(shifted);
        return tlb_fail(L);
    }
    values_box->tensor = values;
    tlb_account(L, values);
    if (!indices_box) return 1;
    indices_box->tensor = shifted;
    tlb_account(L, shifted);
    return 2;
}

static void check_kernel(lua_State *L, const char *op, int64_t kernel[2]) {
    if (lua_isnoneornil(L, 2))
        tlb_errorf(L, "%s: argument 2 (kernel_size) expected an integer or a table {h, w}, got nil",
                   op);
    tlb_check_pair(L, 2, op, "kernel_size", kernel);
}

/* max_pool2d(input, kernel_size, {stride = kernel_size, padding = 0, dilation = 1,
   ceil_mode = false, return_indices = false}) -> values (, indices) */
static int nn_max_pool2d(lua_State *L) {
    pool_call c = {.op = "max_pool2d", .kind = 0};
    tl_tensor *input = tlb_check(L, 1, c.op);
    int64_t kernel[2], stride[2], padding[2] = {0, 0}, dilation[2] = {1, 1};
    check_kernel(L, c.op, kernel);
    stride[0] = kernel[0], stride[1] = kernel[1];
    if (tlb_check_options(L, 3, c.op, max_pool_options)) {
        tlb_option_pair(L, 3, c.op, "stride", stride);
        tlb_option_pair(L, 3, c.op, "padding", padding);
        tlb_option_pair(L, 3, c.op, "dilation", dilation);
        tlb_option_bool(L, 3, c.op, "ceil_mode", &c.pool.ceil_mode);
        tlb_option_bool(L, 3, c.op, "return_indices", &c.want_indices);
    }
    c.pool.kernel_h = kernel[0], c.pool.kernel_w = kernel[1];
    c.pool.stride_h = stride[0], c.pool.stride_w = stride[1];
    c.pool.pad_h = padding[0], c.pool.pad_w = padding[1];
    c.pool.dilation_h = dilation[0], c.pool.dilation_w = dilation[1];
    return finish(L, input, &c);
}

/* avg_pool2d(input, kernel_size, {stride = kernel_size, padding = 0, ceil_mode = false,
   count_include_pad = true, divisor_override = nil}) */
static int nn_avg_pool2d(lua_State *L) {
    pool_call c = {.op = "avg_pool2d", .kind = 1};
    tl_tensor *input = tlb_check(L, 1, c.op);
    int64_t kernel[2], stride[2], padding[2] = {0, 0}, divisor = 0;
    check_kernel(L, c.op, kernel);
    stride[0] = kernel[0], stride[1] = kernel[1];
    c.pool.count_include_pad = true;
    if (tlb_check_options(L, 3, c.op, avg_pool_options)) {
        tlb_option_pair(L, 3, c.op, "stride", stride);
        tlb_option_pair(L, 3, c.op, "padding", padding);
        tlb_option_bool(L, 3, c.op, "ceil_mode", &c.pool.ceil_mode);
        tlb_option_bool(L, 3, c.op, "count_include_pad", &c.pool.count_include_pad);
        if (tlb_option_integer(L, 3, c.op, "divisor_override", &divisor) && divisor < 1)
            return tlb_errorf(L, "%s: divisor_override must be >= 1, got %lld", c.op,
                              (long long)divisor);
    }
    c.pool.kernel_h = kernel[0], c.pool.kernel_w = kernel[1];
    c.pool.stride_h = stride[0], c.pool.stride_w = stride[1];
    c.pool.pad_h = padding[0], c.pool.pad_w = padding[1];
    c.pool.dilation_h = c.pool.dilation_w = 1;
    c.pool.divisor = divisor;
    return finish(L, input, &c);
}

/* the output_size argument: an integer or {h, w} (>= 0) */
static void output_size(lua_State *L, pool_call *c) {
    if (lua_isnoneornil(L, 2))
        tlb_errorf(L, "%s: argument 2 (output_size) expected an integer or a table {h, w}, got nil",
                   c->op);
    int64_t size[2];
    tlb_check_pair(L, 2, c->op, "output_size", size);
    c->out_h = size[0], c->out_w = size[1];
}

/* adaptive_max_pool2d(input, output_size, {return_indices = false}) -> values (, indices) */
static int nn_adaptive_max_pool2d(lua_State *L) {
    pool_call c = {.op = "adaptive_max_pool2d", .kind = 2};
    tl_tensor *input = tlb_check(L, 1, c.op);
    output_size(L, &c);
    if (tlb_check_options(L, 3, c.op, adaptive_max_options))
        tlb_option_bool(L, 3, c.op, "return_indices", &c.want_indices);
    return finish(L, input, &c);
}

/* adaptive_avg_pool2d(input, output_size) */
static int nn_adaptive_avg_pool2d(lua_State *L) {
    pool_call c = {.op = "adaptive_avg_pool2d", .kind = 3};
    tl_tensor *input = tlb_check(L, 1, c.op);
    output_size(L, &c);
    if (!lua_isnone(L, 3))
        return tlb_errorf(L, "%s: expected 2 arguments (input, output_size), got %d", c.op,
                          lua_gettop(L));
    return finish(L, input, &c);
}

/* _interpolate(input, mode ("nearest" | "bilinear"), size_h, size_w, scale_h, scale_w,
   align_corners): sizes 0 or scales 0 where not given; checked by tl.nn.functional.interpolate */
static int nn_interpolate(lua_State *L) {
    pool_call c = {.op = "interpolate", .kind = 4};
    tl_tensor *input = tlb_check(L, 1, c.op);
    const char *mode = luaL_checkstring(L, 2);
    if (strcmp(mode, "nearest") == 0)
        c.interp.mode = TL_INTERPOLATE_NEAREST;
    else if (strcmp(mode, "bilinear") == 0)
        c.interp.mode = TL_INTERPOLATE_BILINEAR;
    else
        return tlb_errorf(L, "interpolate: mode must be 'nearest' or 'bilinear', got '%s'", mode);
    c.interp.size_h = luaL_checkinteger(L, 3), c.interp.size_w = luaL_checkinteger(L, 4);
    c.interp.scale_h = luaL_checknumber(L, 5), c.interp.scale_w = luaL_checknumber(L, 6);
    c.interp.align_corners = lua_toboolean(L, 7);
    return finish(L, input, &c);
}

const luaL_Reg tlb_pool_functions[] = {
    {"max_pool2d", nn_max_pool2d},
    {"avg_pool2d", nn_avg_pool2d},
    {"adaptive_max_pool2d", nn_adaptive_max_pool2d},
    {"adaptive_avg_pool2d", nn_adaptive_avg_pool2d},
    {"_interpolate", nn_interpolate},
    {NULL, NULL},
};
