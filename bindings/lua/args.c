/* Errors and argument helpers of the binding: messages naming the op and the argument, shapes
   (varargs or a table), pairs of sizes, 1-based dims and indices, numbers and scalars. Knows
   nothing of the tensor box (tensor_object.c builds on it). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "binding.h"

/* ---- errors --------------------------------------------------------------------------------- */
const char *tlb_typename(lua_State *L, int idx) {
    if (luaL_getmetafield(L, idx, "__name") == LUA_TSTRING) {
        const char *name = lua_tostring(L, -1);
        lua_pop(L, 1); /* the string stays alive in the metatable */
        return name;
    }
    if (lua_type(L, idx) == LUA_TNONE) return "no value";
    return luaL_typename(L, idx);
}

/* Whether a Lua chunk source is one of tlua's own Lua modules, as tlua.options decides (false
   when that module is not loaded: the stock position then) */
static bool is_tlua_source(lua_State *L, const char *source) {
    int top = lua_gettop(L);
    bool inside = false;
    if (lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE) == LUA_TTABLE &&
        lua_getfield(L, -1, "tlua.options") == LUA_TTABLE &&
        lua_getfield(L, -1, "_is_tlua_source") == LUA_TFUNCTION) {
        lua_pushstring(L, source);
        inside = lua_pcall(L, 1, 1, 0) == LUA_OK && lua_toboolean(L, -1);
    }
    lua_settop(L, top);
    return inside;
}

/* Pushes "chunk:line: " of the line that called into tlua, as luaL_where(L, level) gives it for
   the first function up the stack that is not one of tlua's Lua modules: an op failing inside
   nn.Linear's forward is reported at the user's line, one called directly as the stock position
   (its caller's; none for a C caller such as pcall). */
static void push_user_where(lua_State *L) {
    lua_Debug ar;
    int level = 1;
    while (lua_getstack(L, level, &ar) && lua_getinfo(L, "S", &ar) && ar.what[0] != 'C' &&
           is_tlua_source(L, ar.source))
        level++;
    luaL_where(L, level);
}

int tlb_errorf(lua_State *L, const char *fmt, ...) {
    char message[1536];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    push_user_where(L);
    lua_pushstring(L, message);
    lua_concat(L, 2);
    return lua_error(L);
}

int tlb_type_error(lua_State *L, int idx, const char *op, const char *what) {
    char where[96];
    return tlb_errorf(L, "%s: %s expected %s, got %s", op,
                      tlb_position(L, idx, NULL, where, sizeof where), what, tlb_typename(L, idx));
}

int tlb_fail(lua_State *L) {
    const char *message = tl_last_error();
    return tlb_errorf(L, "%s", message[0] ? message : "tlua: unknown error");
}

/* ---- arguments ------------------------------------------------------------------------------ */
/* dims beyond this are out of range for any tensor; keeps int conversions safe */
#define TLB_DIM_LIMIT (1 << 20)

static bool is_integral(lua_State *L, int idx, int64_t *out) {
    if (lua_type(L, idx) != LUA_TNUMBER) return false;
    int isnum = 0;
    lua_Integer v = lua_tointegerx(L, idx, &isnum);
    if (!isnum) return false;
    *out = (int64_t)v;
    return true;
}

bool tlb_is_callable(lua_State *L, int idx) {
    if (lua_type(L, idx) == LUA_TFUNCTION) return true;
    if (luaL_getmetafield(L, idx, "__call") == LUA_TNIL) return false;
    lua_pop(L, 1);
    return true;
}

int tlb_arg_number(lua_State *L, int idx) {
    lua_Debug ar;
    if (idx > 0 && lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) && ar.namewhat &&
        strcmp(ar.namewhat, "method") == 0)
        idx--; /* t:op(x): x is argument 1, as luaL_argerror counts */
    return idx;
}

int tlb_wrapper_arg_number(lua_State *L, int idx) {
    lua_Debug ar;
    if (idx > 0 && lua_getstack(L, 1, &ar) && lua_getinfo(L, "nS", &ar) && ar.what[0] != 'C' &&
        ar.namewhat && strcmp(ar.namewhat, "method") == 0 && is_tlua_source(L, ar.source))
        idx--; /* t:register_hook(fn) calling core._add_grad_hook(t, fn): fn is argument 1 */
    return idx;
}

const char *tlb_position(lua_State *L, int idx, const char *what, char *buf, size_t size) {
    if (idx <= 0) /* a value read from a table (an option, a field) sits at a relative index */
        snprintf(buf, size, "%s", what ? what : "a value");
    else if ((idx = tlb_arg_number(L, idx)) == 0) /* obj:op() on an object that is not a tensor */
        snprintf(buf, size, what ? "self (%s)" : "self", what);
    else
        snprintf(buf, size, what ? "argument %d (%s)" : "argument %d", idx, what);
    return buf;
}

int64_t tlb_check_int(lua_State *L, int idx, const char *op, const char *what) {
    int64_t v = 0;
    char where[96];
    if (!is_integral(L, idx, &v))
        tlb_errorf(L, "%s: %s expected an integer, got %s", op,
                   tlb_position(L, idx, what, where, sizeof where),
                   lua_type(L, idx) == LUA_TNUMBER ? lua_tostring(L, idx) : tlb_typename(L, idx));
    return v;
}

double tlb_check_number(lua_State *L, int idx, const char *op, const char *what) {
    char where[96];
    if (lua_type(L, idx) != LUA_TNUMBER)
        tlb_errorf(L, "%s: %s expected a number, got %s", op,
                   tlb_position(L, idx, what, where, sizeof where), tlb_typename(L, idx));
    return (double)lua_tonumber(L, idx);
}

int tlb_shape_table(lua_State *L, int idx, const char *op, int64_t *shape) {
    lua_Unsigned n = lua_rawlen(L, idx);
    if (n > TL_MAX_DIMS)
        tlb_errorf(L, "%s: expected at most %d dims, got a shape of %d", op, TL_MAX_DIMS, (int)n);
    for (int d = 0; d < (int)n; d++) {
        lua_rawgeti(L, idx, d + 1);
        if (!is_integral(L, -1, &shape[d]))
            tlb_errorf(L, "%s: size %d of the shape expected an integer, got %s", op, d + 1,
                       lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : tlb_typename(L, -1));
        lua_pop(L, 1);
    }
    /* a key past the sizes is a mistake (an option written into the shape, {2, 3, dtype = ...}),
       not something to drop; table.pack's n is allowed */
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        lua_Integer k = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
        if (k >= 1 && (lua_Unsigned)k <= n) continue;
        if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "n") == 0) continue;
        const char *key =
            lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1);
        tlb_errorf(L,
                   "%s: the shape table has a key '%s' besides its %d sizes (options go in a table "
                   "of their own: %s({2, 3}, {dtype = ...}))",
                   op, key, (int)n, op);
    }
    return (int)n;
}

void tlb_check_pair(lua_State *L, int idx, const char *op, const char *what, int64_t out[2]) {
    idx = lua_absindex(L, idx);
    if (is_integral(L, idx, &out[0])) {
        out[1] = out[0];
        return;
    }
    if (!lua_istable(L, idx) || lua_rawlen(L, idx) != 2)
        tlb_errorf(L, "%s: %s expected an integer or a table {h, w}, got %s", op, what,
                   lua_type(L, idx) == LUA_TNUMBER ? lua_tostring(L, idx)
                   : lua_istable(L, idx)           ? "a table of another length"
                                                   : tlb_typename(L, idx));
    for (int i = 0; i < 2; i++) {
        lua_rawgeti(L, idx, i + 1);
        int64_t v = 0;
        if (!is_integral(L, -1, &v))
            tlb_errorf(L, "%s: %s[%d] expected an integer, got %s", op, what, i + 1,
                       lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : tlb_typename(L, -1));
        out[i] = v;
        lua_pop(L, 1);
    }
}

/* A table with no array part and some key is an options table ({dtype = "float64"}, or a
   misspelled option, which the options checker then names); {} is the shape of a 0-dim tensor. */
static bool looks_like_options(lua_State *L, int idx) {
    if (lua_rawlen(L, idx) != 0) return false;
    lua_pushnil(L);
    if (!lua_next(L, idx)) return false;
    lua_pop(L, 2);
    return true;
}

static void check_no_more(lua_State *L, int from, const char *op) {
    int top = lua_gettop(L);
    char where[96];
    for (int i = from; i <= top; i++)
        if (!lua_isnil(L, i))
            tlb_errorf(L, "%s: unexpected %s after the options table", op,
                       tlb_position(L, i, tlb_typename(L, i), where, sizeof where));
}

int tlb_shape_args(lua_State *L, int first, const char *op, int64_t *shape, int *opts_index) {
    int top = lua_gettop(L);
    int ndim = 0, next;
    *opts_index = 0;
    if (first > top) return 0;
    switch (lua_type(L, first)) {
    case LUA_TTABLE:
        if (looks_like_options(L, first)) {
            *opts_index = first;
            check_no_more(L, first + 1, op);
            return 0;
        }
        ndim = tlb_shape_table(L, first, op, shape);
        next = first + 1;
        break;
    case LUA_TNUMBER:
        next = first;
        while (next <= top && lua_type(L, next) == LUA_TNUMBER) {
            if (ndim == TL_MAX_DIMS)
                tlb_errorf(L, "%s: expected at most %d dims, got more sizes", op, TL_MAX_DIMS);
            shape[ndim++] = tlb_check_int(L, next, op, "a size");
            next++;
        }
        break;
    case LUA_TNIL:
        next = first + 1;
        break;
    default:
        return tlb_type_error(L, first, op, "a shape (sizes or a table of sizes)");
    }
    if (next <= top) {
        if (lua_istable(L, next))
            *opts_index = next;
        else if (!lua_isnil(L, next))
            tlb_type_error(L, next, op, "a size (an integer) or an options table");
        check_no_more(L, next + 1, op);
    }
    return ndim;
}

/* The name of a dtype or a device at idx, a string: what ("dtype") and an example name say what
   was expected otherwise. */
static const char *check_name(lua_State *L, int idx, const char *op, const char *what,
                              const char *example) {
    if (lua_type(L, idx) != LUA_TSTRING)
        tlb_errorf(L, "%s: %s expected a string such as \"%s\", got %s", op, what, example,
                   tlb_typename(L, idx));
    return lua_tostring(L, idx);
}

tl_dtype tlb_check_dtype(lua_State *L, int idx, const char *op) {
    const char *name = check_name(L, idx, op, "dtype", "float32");
    tl_dtype dtype;
    if (tl_dtype_parse(name, &dtype) != TL_OK)
        tlb_errorf(L,
                   "%s: unknown dtype '%s' (expected float32, float64, bfloat16, float16, "
                   "int32, int64 or bool)",
                   op, name);
    return dtype;
}

tl_device tlb_check_device(lua_State *L, int idx, const char *op) {
    const char *name = check_name(L, idx, op, "device", "cpu");
    tl_device device;
    if (tl_device_parse(name, &device) != TL_OK)
        tlb_errorf(L, "%s: unknown device '%s' (expected cpu, cuda or cuda:N)", op, name);
    return device;
}

int tlb_check_dim(lua_State *L, int idx, const char *op) {
    int64_t d = 0;
    if (!is_integral(L, idx, &d)) {
        char where[96];
        if (lua_type(L, idx) == LUA_TNUMBER)
            tlb_errorf(L, "%s: %s expected an integer, got %s", op,
                       tlb_position(L, idx, "a dim", where, sizeof where), lua_tostring(L, idx));
        tlb_type_error(L, idx, op, "a dim (an integer)");
    }
    if (d == 0)
        tlb_errorf(L, "%s: dim 0 is out of range: dims count from 1 (negative ones from the end)",
                   op);
    if (d > TLB_DIM_LIMIT || d < -TLB_DIM_LIMIT)
        tlb_errorf(L, "%s: dim %lld is out of range", op, (long long)d);
    return d > 0 ? (int)(d - 1) : (int)d;
}

int64_t tlb_check_index(lua_State *L, int idx, const char *op) {
    int64_t i = tlb_check_int(L, idx, op, "an index");
    if (i == 0)
        tlb_errorf(L,
                   "%s: index 0 is out of range: indices count from 1 (negative ones from the end)",
                   op);
    return i > 0 ? i - 1 : i;
}

int tlb_opt_dim(lua_State *L, int idx, const char *op, int def_c_dim) {
    if (lua_isnoneornil(L, idx)) return def_c_dim;
    return tlb_check_dim(L, idx, op);
}

bool tlb_to_scalar(lua_State *L, int idx, tl_scalar *out) {
    switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            *out = tl_scalar_int((int64_t)lua_tointeger(L, idx));
        else
            *out = tl_scalar_float((double)lua_tonumber(L, idx));
        return true;
    case LUA_TBOOLEAN:
        *out = tl_scalar_bool(lua_toboolean(L, idx));
        return true;
    default:
        return false;
    }
}

tl_scalar tlb_check_scalar(lua_State *L, int idx, const char *op) {
    tl_scalar s;
    if (!tlb_to_scalar(L, idx, &s)) tlb_type_error(L, idx, op, "a number or a boolean");
    return s;
}

bool tlb_opt_bool(lua_State *L, int idx, const char *op, bool def) {
    if (lua_isnoneornil(L, idx)) return def;
    if (!lua_isboolean(L, idx)) tlb_type_error(L, idx, op, "a boolean");
    return lua_toboolean(L, idx);
}

void tlb_push_scalar(lua_State *L, tl_scalar s, tl_dtype dtype) {
    if (tl_dtype_is_floating(dtype))
        lua_pushnumber(L, (lua_Number)tl_scalar_to_double(s));
    else if (dtype == TL_BOOL)
        lua_pushboolean(L, tl_scalar_to_int(s) != 0);
    else
        lua_pushinteger(L, (lua_Integer)tl_scalar_to_int(s));
}

void tlb_push_shape(lua_State *L, const tl_tensor *t) {
    lua_createtable(L, t->ndim, 0);
    for (int d = 0; d < t->ndim; d++) {
        lua_pushinteger(L, (lua_Integer)t->shape[d]);
        lua_rawseti(L, -2, d + 1);
    }
}

void tlb_push_counters(lua_State *L, const void *stats, const tlb_counter *counters, int count) {
    lua_createtable(L, 0, count);
    for (int i = 0; i < count; i++) {
        uint64_t value;
        memcpy(&value, (const char *)stats + counters[i].offset, sizeof value);
        lua_pushinteger(L, (lua_Integer)value);
        lua_setfield(L, -2, counters[i].name);
    }
}

void tlb_push_guard_metatable(lua_State *L, lua_CFunction release) {
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, release);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, release);
    lua_setfield(L, -2, "__gc");
}
