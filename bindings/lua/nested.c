/* Nested Lua tables <-> tensors: tl.tensor(data, opts) and t:totable(). */
#include <stdio.h>
#include <string.h>

#include "binding.h"

/* What pass 1 learns about the data: its shape and the kinds of its leaves. */
typedef struct nested_info {
    int ndim;
    int64_t shape[TL_MAX_DIMS];
    int64_t path[TL_MAX_DIMS]; /* 1-based position, for messages */
    bool has_float, has_int, has_bool;
} nested_info;

static const char *path_str(const nested_info *info, int depth, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "data");
    for (int d = 0; d < depth && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "[%lld]", (long long)info->path[d]);
    return buf;
}

/* Pass 1b: checks the table at the top of the stack against the shape. */
static void check_level(lua_State *L, nested_info *info, int depth) {
    char where[256];
    int64_t n = (int64_t)lua_rawlen(L, -1);
    if (n != info->shape[depth])
        tlb_errorf(L, "tensor: %s has %lld elements but %lld were expected (ragged nested tables)",
                   path_str(info, depth, where, sizeof where), (long long)n,
                   (long long)info->shape[depth]);
    luaL_checkstack(L, 3, "tensor: nested tables too deep");
    for (int64_t i = 1; i <= n; i++) {
        info->path[depth] = i;
        int type = lua_rawgeti(L, -1, (lua_Integer)i);
        if (depth + 1 < info->ndim) {
            if (type != LUA_TTABLE)
                tlb_errorf(L, "tensor: %s expected a table of %lld elements, got %s",
                           path_str(info, depth + 1, where, sizeof where),
                           (long long)info->shape[depth + 1], tlb_typename(L, -1));
            check_level(L, info, depth + 1);
        } else if (type == LUA_TNUMBER) {
            if (lua_isinteger(L, -1))
                info->has_int = true;
            else
                info->has_float = true;
        } else if (type == LUA_TBOOLEAN) {
            info->has_bool = true;
        } else {
            tlb_errorf(L, "tensor: %s expected a number or a boolean, got %s",
                       path_str(info, depth + 1, where, sizeof where), tlb_typename(L, -1));
        }
        lua_pop(L, 1);
    }
}

/* Pass 1a: the shape, from the first element of each level. */
static void find_shape(lua_State *L, int idx, nested_info *info) {
    int depth = 0;
    lua_pushvalue(L, idx);
    for (;;) {
        if (depth == TL_MAX_DIMS)
            tlb_errorf(L, "tensor: nested tables deeper than %d dims", TL_MAX_DIMS);
        int64_t n = (int64_t)lua_rawlen(L, -1);
        info->shape[depth++] = n;
        if (n == 0) break;
        int type = lua_rawgeti(L, -1, 1);
        lua_remove(L, -2);
        if (type != LUA_TTABLE) break;
    }
    lua_pop(L, 1);
    info->ndim = depth;
}

typedef struct fill_state {
    char *data;
    tl_dtype dtype;
    size_t size;
    int64_t next;
} fill_state;

static void store(fill_state *f, tl_scalar s) {
    void *p = f->data + (size_t)f->next++ * f->size;
    switch (f->dtype) {
    case TL_F32:
        *(float *)p = (float)tl_scalar_to_double(s);
        break;
    case TL_F64:
        *(double *)p = tl_scalar_to_double(s);
        break;
    default:
        tl_dtype_store(f->dtype, p, s);
        break;
    }
}

/* Pass 2: writes the leaves in row-major order (the structure is known good). */
static void fill_level(lua_State *L, const nested_info *info, int depth, fill_state *f) {
    int64_t n = info->shape[depth];
    for (int64_t i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i);
        if (depth + 1 < info->ndim)
            fill_level(L, info, depth + 1, f);
        else {
            tl_scalar s;
            tlb_to_scalar(L, -1, &s);
            store(f, s);
        }
        lua_pop(L, 1);
    }
}

/* tl.tensor(data, opts?): data is a number, a boolean, nested tables or a tensor (copied) */
int tlb_tensor_ctor(lua_State *L) {
    tlb_options o = {.dtype = TL_F32, .device = TL_CPU, .requires_grad = -1};
    tl_scalar scalar;
    if (tlb_to_scalar(L, 1, &scalar)) {
        o.dtype = scalar.kind == TL_SCALAR_FLOAT ? TL_F32
                  : scalar.kind == TL_SCALAR_INT ? TL_I64
                                                 : TL_BOOL;
        tlb_options_parse(L, 2, "tensor", &o);
        tlb_box *box = tlb_newbox(L);
        tl_tensor *out = NULL;
        tl_status status = tl_full(NULL, 0, scalar, o.dtype, o.device, &out);
        tlb_result(L, box, status, out);
        tlb_apply_requires_grad(L, out, &o);
        return 1;
    }
    tl_tensor *src = tlb_totensor(L, 1, "tensor");
    if (src) {
        o.dtype = src->dtype;
        o.device = tl_tensor_device(src);
        tlb_options_parse(L, 2, "tensor", &o);
        tlb_box *box = tlb_newbox(L);
        tl_tensor *out = NULL;
        tl_status status = tl_to(src, o.dtype, o.device, &out);
        if (status == TL_OK && out == src) { /* same dtype and device: copy it */
            tl_release(out);
            status = tl_clone(src, &out);
        }
        tlb_result(L, box, status, out);
        tlb_apply_requires_grad(L, out, &o);
        return 1;
    }
    if (!lua_istable(L, 1))
        return tlb_type_error(L, 1, "tensor", "a number, a boolean, a table or a tensor");
    tlb_options_parse(L, 2, "tensor", &o);
    nested_info info = {0};
    find_shape(L, 1, &info);
    lua_pushvalue(L, 1);
    check_level(L, &info, 0);
    lua_pop(L, 1);
    if (!o.has_dtype)
        o.dtype = info.has_float  ? TL_F32
                  : info.has_int  ? TL_I64
                  : info.has_bool ? TL_BOOL
                                  : TL_F32;

    tlb_box *box = tlb_newbox(L);
    tl_tensor *host = NULL;
    if (tl_empty(info.shape, info.ndim, o.dtype, TL_CPU, &host) != TL_OK) return tlb_fail(L);
    box->tensor = host;
    fill_state f = {.data = tl_data(host), .dtype = o.dtype, .size = tl_dtype_size(o.dtype)};
    lua_pushvalue(L, 1);
    fill_level(L, &info, 0, &f);
    lua_pop(L, 1);
    if (o.device.type != TL_DEVICE_CPU) {
        tl_tensor *moved = NULL;
        tl_status status = tl_to(host, o.dtype, o.device, &moved);
        if (status != TL_OK) return tlb_fail(L);
        box->tensor = moved;
        tl_release(host);
    }
    tlb_account(L, box->tensor);
    tlb_apply_requires_grad(L, box->tensor, &o);
    return 1;
}

/* ---- totable ------------------------------------------------------------- */
#define TLB_TOTABLE_MAX ((int64_t)1 << 28)

typedef struct read_state {
    const char *data;
    tl_dtype dtype;
    size_t size;
    int64_t next;
} read_state;

static void push_element(lua_State *L, read_state *r) {
    const void *p = r->data + (size_t)r->next++ * r->size;
    switch (r->dtype) {
    case TL_F32:
        lua_pushnumber(L, (lua_Number) * (const float *)p);
        break;
    case TL_F64:
        lua_pushnumber(L, (lua_Number) * (const double *)p);
        break;
    case TL_I64:
        lua_pushinteger(L, (lua_Integer) * (const int64_t *)p);
        break;
    default:
        tlb_push_scalar(L, tl_dtype_load(r->dtype, p), r->dtype);
        break;
    }
}

static void build_level(lua_State *L, const tl_tensor *t, int depth, read_state *r) {
    int64_t n = t->shape[depth];
    lua_createtable(L, n > INT32_MAX ? INT32_MAX : (int)n, 0);
    for (int64_t i = 1; i <= n; i++) {
        if (depth + 1 < t->ndim)
            build_level(L, t, depth + 1, r);
        else
            push_element(L, r);
        lua_rawseti(L, -2, (lua_Integer)i);
    }
}

/* t:totable(): nested tables of Lua numbers/booleans (a 0-dim tensor gives its value) */
int tlb_totable(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "totable");
    int64_t numel = tl_numel(t);
    if (numel > TLB_TOTABLE_MAX)
        return tlb_errorf(L, "totable: %lld elements are too many for Lua tables (at most %lld)",
                          (long long)numel, (long long)TLB_TOTABLE_MAX);
    /* the nested tables count too: [2^40, 0] holds no element but 2^40 empty tables */
    int64_t tables = 1;
    for (int d = 0; d + 1 < t->ndim && tables > 0; d++) {
        if (t->shape[d] > TLB_TOTABLE_MAX / tables) {
            char shape[256];
            return tlb_errorf(L, "totable: shape %s needs more than %lld nested tables",
                              tl_shape_str(t, shape, sizeof shape), (long long)TLB_TOTABLE_MAX);
        }
        tables *= t->shape[d];
    }
    size_t bytes = (size_t)numel * tl_dtype_size(t->dtype);
    /* the host copy lives in a userdata, so a Lua error while building frees it */
    void *host = lua_newuserdatauv(L, bytes ? bytes : 1, 0);
    if (numel > 0 && tl_to_host(t, host) != TL_OK) return tlb_fail(L);
    read_state r = {.data = host, .dtype = t->dtype, .size = tl_dtype_size(t->dtype)};
    luaL_checkstack(L, t->ndim + 4, "totable: too many dims");
    if (t->ndim == 0)
        push_element(L, &r);
    else
        build_level(L, t, 0, &r);
    return 1;
}
