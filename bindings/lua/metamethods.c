/* Tensor metamethods: __index (fields, methods, t[i]), __newindex (t[i] = v), __len. */
#include <string.h>

#include "binding.h"

/* ---- t[i] --------------------------------------------------------------- */
/* The integer key at idx as a C index along a dim of size n (errors for 0 and
   out-of-range keys name "index"). */
static int64_t key_index(lua_State *L, int idx, int64_t n) {
    int isnum = 0;
    lua_Integer i = lua_tointegerx(L, idx, &isnum);
    if (!isnum)
        tlb_errorf(L, "index: expected an integer index or a field name, got %s",
                   lua_type(L, idx) == LUA_TNUMBER ? lua_tostring(L, idx) : tlb_typename(L, idx));
    if (i == 0)
        tlb_errorf(L, "index: index 0 is out of range: indices count from 1 (negative ones from "
                      "the end)");
    if (i > n || i < -n)
        tlb_errorf(L,
                   "index: index %lld is out of range for dim 1 of size %lld (expected 1 to %lld, "
                   "or -%lld to -1 from the end)",
                   (long long)i, (long long)n, (long long)n, (long long)n);
    return i > 0 ? (int64_t)i - 1 : (int64_t)i + n;
}

static tl_tensor *indexable(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "index");
    if (t->ndim == 0)
        tlb_errorf(L, "index: a 0-dim tensor cannot be indexed (use item() for its value)");
    return t;
}

static int index_get(lua_State *L) {
    tl_tensor *t = indexable(L);
    int64_t i = key_index(L, 2, t->shape[0]);
    if (t->ndim == 1) {
        tl_scalar s;
        if (tl_get(t, &i, &s) != TL_OK) return tlb_fail(L);
        tlb_push_scalar(L, s, t->dtype);
        return 1;
    }
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_select(t, 0, i, &out);
    return tlb_result(L, box, status, out);
}

/* t[i] = number | boolean | tensor: fills or copies into the slice t:select(1, i) */
static int index_set(lua_State *L) {
    tl_tensor *t = indexable(L);
    int64_t i = key_index(L, 2, t->shape[0]);
    tl_scalar value;
    tl_tensor *src = tlb_totensor(L, 3, "index");
    bool is_scalar = !src && tlb_to_scalar(L, 3, &value);
    if (!src && !is_scalar)
        return tlb_errorf(L,
                          "index: cannot assign a %s to a tensor element (expected a number, "
                          "a boolean or a tensor)",
                          tlb_typename(L, 3));
    if (t->ndim == 1 && is_scalar) {
        if (tl_set(t, &i, value) != TL_OK) return tlb_fail(L);
        return 0;
    }
    tl_tensor *slice = NULL;
    if (tl_select(t, 0, i, &slice) != TL_OK) return tlb_fail(L);
    tl_status status = is_scalar ? tl_fill_(slice, value) : tl_copy_(slice, src);
    tl_release(slice);
    if (status != TL_OK) return tlb_fail(L);
    return 0;
}

/* ---- fields ------------------------------------------------------------- */
static int field(lua_State *L, tl_tensor *t, const char *key) {
    char buf[16];
    switch (key[0]) {
    case 's':
        if (strcmp(key, "shape") == 0) return tlb_push_shape(L, t), 1;
        break;
    case 'd':
        if (strcmp(key, "dtype") == 0) return lua_pushstring(L, tl_dtype_name(t->dtype)), 1;
        if (strcmp(key, "device") == 0)
            return lua_pushstring(L, tl_device_name(tl_tensor_device(t), buf)), 1;
        break;
    case 'n':
        if (strcmp(key, "ndim") == 0) return lua_pushinteger(L, t->ndim), 1;
        break;
    case 'r':
        if (strcmp(key, "requires_grad") == 0) return tlb_field_requires_grad(L);
        break;
    case 'g':
        if (strcmp(key, "grad") == 0) return tlb_field_grad(L);
        if (strcmp(key, "grad_fn") == 0) return tlb_field_grad_fn(L);
        break;
    case 'i':
        if (strcmp(key, "is_leaf") == 0) return tlb_field_is_leaf(L);
        break;
    case '_':
        /* the storage's version: every in-place change bumps it */
        if (strcmp(key, "_version") == 0)
            return lua_pushinteger(L, (lua_Integer)t->storage->version), 1;
        break;
    default:
        break;
    }
    lua_pushnil(L);
    return 1;
}

/* __index (upvalue 2: the methods table): methods first (the common case of
   t:add(b) costs one raw lookup), then integer keys, then fields */
int tlb_meta_index(lua_State *L) {
    int type = lua_type(L, 2);
    if (type == LUA_TSTRING) {
        lua_pushvalue(L, 2);
        if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) return 1;
        lua_pop(L, 1);
        tl_tensor *t = tlb_check(L, 1, "index");
        return field(L, t, lua_tostring(L, 2));
    }
    if (type == LUA_TNUMBER) return index_get(L);
    return tlb_errorf(L, "index: expected an integer index or a field name, got %s",
                      tlb_typename(L, 2));
}

static int meta_newindex(lua_State *L) {
    int type = lua_type(L, 2);
    if (type == LUA_TNUMBER) return index_set(L);
    if (type == LUA_TSTRING) {
        tl_tensor *t = tlb_check(L, 1, "index");
        const char *key = lua_tostring(L, 2);
        if (strcmp(key, "requires_grad") == 0) return tlb_set_requires_grad_field(L, t, 3), 0;
        if (strcmp(key, "grad") == 0) return tlb_set_grad_field(L, t, 3), 0;
        return tlb_errorf(L,
                          "tensor: cannot set field '%s' (settable: requires_grad, grad, and "
                          "t[i] = value)",
                          key);
    }
    return tlb_errorf(L, "index: expected an integer index, got %s", tlb_typename(L, 2));
}

/* #t: the size of dim 1 */
static int meta_len(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "len");
    if (t->ndim == 0) return tlb_errorf(L, "len: a 0-dim tensor has no length (use item())");
    lua_pushinteger(L, (lua_Integer)t->shape[0]);
    return 1;
}

const luaL_Reg tlb_meta_methods[] = {
    {"__newindex", meta_newindex},
    {"__len", meta_len},
    {"__tostring", tlb_tostring},
    {NULL, NULL},
};
