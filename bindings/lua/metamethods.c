/* Tensor metamethods: __index (fields, methods, t[i], t[index], t[mask]), __newindex (t[i] = v,
 * t[index] = v, t[mask] = v), __len. */
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

/* status, with *out cleared when it failed: a recording op that fails has released its result */
static tl_status made(tl_status status, tl_tensor **out) {
    if (status != TL_OK) *out = NULL;
    return status;
}

/* ---- t[index], t[mask] ------------------------------------------------------------------------
   An int64/int32 tensor key selects along dim 1 (1-based positions: index_select, any shape of
   index giving index's shape then t's other dims), a bool key of t's shape selects the elements
   where it is true (masked_select, 1-d). Assignments write through the recorded in-place ops:
   t[index] = v is index_fill_ (a number) or index_copy_ (a tensor broadcast to the selected
   slices), t[mask] = v is masked_fill_ (a number or a one-element tensor) or, for a tensor of as
   many elements as the mask has true ones, those values in order (masked_fill_ with them spread
   to t's places by an index_copy, so their gradient flows). */
static tl_tensor *tensor_key(lua_State *L, tl_tensor *t) {
    tl_tensor *key = tlb_check(L, 2, "index");
    if (key->dtype == TL_BOOL) {
        bool same = key->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = key->shape[d] == t->shape[d];
        if (!same) {
            char sk[256], st[256];
            tlb_errorf(L, "index: a bool mask must have the tensor's shape %s, got %s",
                       tl_shape_str(t, st, sizeof st), tl_shape_str(key, sk, sizeof sk));
        }
    } else if (key->dtype != TL_I64 && key->dtype != TL_I32) {
        tlb_errorf(L,
                   "index: a tensor key must hold int64 or int32 positions or be a bool mask, "
                   "got %s",
                   tl_dtype_name(key->dtype));
    }
    return key;
}

static int tensor_key_get(lua_State *L, tl_tensor *t) {
    tl_tensor *key = tensor_key(L, t), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    if (key->dtype == TL_BOOL) {
        const tl_status status = tl_ag_masked_select(t, key, &out);
        return tlb_result(L, box, status, out);
    }
    if (key->ndim + t->ndim - 1 > TL_MAX_DIMS)
        return tlb_errorf(L, "index: the result would have more than %d dims", TL_MAX_DIMS);
    tl_tensor *index = tlb_index_arg_checked(L, "index", 2, "the size along dim", t->shape[0]),
              *flat = NULL, *rows = NULL;
    int64_t n = tl_numel(index), shape[TL_MAX_DIMS];
    int ndim = 0;
    for (int d = 0; d < key->ndim; d++) shape[ndim++] = key->shape[d];
    for (int d = 1; d < t->ndim; d++) shape[ndim++] = t->shape[d];
    tl_status status = tl_reshape(index, &n, 1, &flat);
    if (status == TL_OK) status = made(tl_ag_index_select(t, 0, flat, &rows), &rows);
    if (status == TL_OK) status = tl_ag_reshape(rows, shape, ndim, &out);
    tl_release(index), tl_release(flat), tl_release(rows);
    return tlb_result(L, box, status, out);
}

/* t[mask] = tensor of count elements: x <- masked_fill_(x, mask, those values spread to the
   mask's true places) */
static tl_status masked_assign(tl_tensor *t, tl_tensor *mask, tl_tensor *v) {
    int64_t shape[TL_MAX_DIMS];
    int ndim;
    tl_tensor *positions = NULL, *flat_v = NULL, *zeros = NULL, *spread = NULL, *shaped = NULL;
    TL_TRY(tl_masked_positions(t, mask, shape, &ndim, &positions));
    const int64_t count = tl_numel(positions), n = tl_numel(t);
    if (tl_numel(v) != count) {
        tl_release(positions);
        return tl_error(TL_ERR_SHAPE,
                        "index: t[mask] = v takes a number or a tensor of 1 or %lld elements "
                        "(the mask's true ones), got %lld",
                        (long long)count, (long long)tl_numel(v));
    }
    tl_status status = made(tl_ag_reshape(v, &count, 1, &flat_v), &flat_v);
    if (status == TL_OK) status = tl_zeros(&n, 1, t->dtype, tl_tensor_device(t), &zeros);
    if (status == TL_OK)
        status = made(tl_ag_index_copy(zeros, 0, positions, flat_v, &spread), &spread);
    if (status == TL_OK) status = made(tl_ag_reshape(spread, t->shape, t->ndim, &shaped), &shaped);
    if (status == TL_OK) status = tl_ag_masked_fill_(t, mask, shaped);
    tl_release(positions), tl_release(flat_v), tl_release(zeros), tl_release(spread);
    tl_release(shaped);
    return status;
}

static int tensor_key_set(lua_State *L, tl_tensor *t) {
    tl_tensor *key = tensor_key(L, t), *v = tlb_totensor(L, 3, "index"), *cast = NULL;
    tl_scalar value;
    if (!v && !tlb_to_scalar(L, 3, &value))
        return tlb_errorf(L,
                          "index: cannot assign a %s to tensor elements (expected a number, a "
                          "boolean or a tensor)",
                          tlb_typename(L, 3));
    if (key->dtype != TL_BOOL && key->ndim > 1)
        return tlb_errorf(L, "index: t[index] = v takes a 1-d index, got %d dims", key->ndim);
    tlb_box *box = tlb_newbox(L); /* holds the index shifted to 0-based, whatever is raised */
    if (key->dtype != TL_BOOL)
        box->tensor = tlb_index_arg_checked(L, "index", 2, "the size along dim", t->shape[0]);
    tl_status status = TL_OK;
    if (v && v->dtype != t->dtype) status = made(tl_ag_cast(v, t->dtype, &cast), &cast);
    if (cast) v = cast;
    if (status == TL_OK && key->dtype == TL_BOOL) {
        tl_tensor *filler = NULL;
        if (!v) status = tl_scalar_check_fits("index", t->dtype, value);
        if (status == TL_OK && !v)
            status = tl_full(NULL, 0, value, t->dtype, tl_tensor_device(t), &filler);
        if (status == TL_OK && v && tl_numel(v) != 1) {
            status = masked_assign(t, key, v);
        } else if (status == TL_OK) {
            tl_tensor *one = NULL;
            const int64_t none[1] = {1};
            if (v) status = made(tl_ag_reshape(v, none, 0, &one), &one); /* one element: 0-dim */
            if (status == TL_OK) status = tl_ag_masked_fill_(t, key, v ? one : filler);
            tl_release(one);
        }
        tl_release(filler);
    } else if (status == TL_OK) {
        tl_tensor *index = box->tensor, *rows = NULL;
        int64_t shape[TL_MAX_DIMS];
        shape[0] = tl_numel(index);
        for (int d = 1; d < t->ndim; d++) shape[d] = t->shape[d];
        if (!v) {
            status = tl_ag_index_fill_(t, 0, index, value);
        } else {
            status = made(tl_ag_expand(v, shape, t->ndim, &rows), &rows);
            if (status == TL_OK) status = tl_ag_index_copy_(t, 0, index, rows);
        }
        tl_release(rows);
    }
    tl_release(cast);
    if (status != TL_OK) return tlb_fail(L);
    return 0;
}

/* ---- fields ------------------------------------------------------------- */
static void push_layout_key(lua_State *L, const tl_tensor *t) {
    char key[TL_MAX_DIMS * 21 + 64], device[16];
    int at = 0;
    for (int d = 0; d < t->ndim; d++)
        at += snprintf(key + at, sizeof key - (size_t)at, d ? ",%lld" : "%lld",
                       (long long)t->shape[d]);
    snprintf(key + at, sizeof key - (size_t)at, "|%s|%s", tl_dtype_name(t->dtype),
             tl_device_name(tl_tensor_device(t), device));
    lua_pushstring(L, key);
}

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
        /* the address of the first element: whether two tensors are the same view of one
           storage (nn.DataParallel's check that a gradient is still its bucket's view) */
        if (strcmp(key, "_data_ptr") == 0)
            return lua_pushinteger(L, (lua_Integer)(intptr_t)tl_data(t)), 1;
        /* shape, dtype and device as one string ("2,3|float32|cpu"): a cache key (einsum's) */
        if (strcmp(key, "_layout_key") == 0) return push_layout_key(L, t), 1;
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
    if (type == LUA_TUSERDATA && tlb_peek_tensor(L, 2)) return tensor_key_get(L, indexable(L));
    return tlb_errorf(L,
                      "index: expected an integer index, a field name, a tensor of positions or a "
                      "bool mask, got %s",
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
    if (type == LUA_TUSERDATA && tlb_peek_tensor(L, 2)) return tensor_key_set(L, indexable(L));
    return tlb_errorf(
        L, "index: expected an integer index, a tensor of positions or a bool mask, got %s",
        tlb_typename(L, 2));
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
