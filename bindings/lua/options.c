/* Options tables of the binding's functions: one checker of the keys an op accepts and of their
   kinds, typed getters, the new tensors' options {dtype, device, requires_grad} and a pointwise
   op's numbers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "binding.h"

/* What a value of kind is, for messages: "option causal expected <this>, got number". */
static const char *kind_description(tlb_option_kind kind) {
    switch (kind) {
    case TLB_OPTION_BOOLEAN:
        return "a boolean";
    case TLB_OPTION_NUMBER:
        return "a number";
    case TLB_OPTION_INTEGER:
        return "an integer";
    case TLB_OPTION_STRING:
        return "a string";
    case TLB_OPTION_DTYPE:
        return "a dtype (a string such as \"float32\")";
    case TLB_OPTION_DEVICE:
        return "a device (a string such as \"cpu\" or \"cuda:0\")";
    case TLB_OPTION_TENSOR:
        return "a tensor";
    case TLB_OPTION_PAIR:
        return "an integer or a table {h, w}";
    }
    return "a value";
}

/* The accepted names, "causal, scale, dropout", into buf. */
static const char *accepted_names(const tlb_option *accepted, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (const tlb_option *o = accepted; o->name && used < size; o++) {
        int n = snprintf(buf + used, size - used, "%s%s", o == accepted ? "" : ", ", o->name);
        if (n < 0) break;
        used += (size_t)n;
    }
    return buf;
}

static const tlb_option *find_option(const tlb_option *accepted, const char *name) {
    for (const tlb_option *o = accepted; o->name; o++)
        if (strcmp(o->name, name) == 0) return o;
    return NULL;
}

/* The key at idx as a message shows it: 'name' for a string, [3] for a number, else its type.
   Never converts the key in place (lua_next walks on it). */
static const char *key_text(lua_State *L, int idx, char *buf, size_t size) {
    switch (lua_type(L, idx)) {
    case LUA_TSTRING:
        snprintf(buf, size, "'%s'", lua_tostring(L, idx));
        break;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            snprintf(buf, size, "[%lld]", (long long)lua_tointeger(L, idx));
        else
            snprintf(buf, size, "[%g]", (double)lua_tonumber(L, idx));
        break;
    default:
        snprintf(buf, size, "(a %s key)", tlb_typename(L, idx));
    }
    return buf;
}

/* Raises unless the value at idx (an option's value, not nil) is of kind: first its Lua type,
   then what the kind asks of the value itself (an integral number, a known dtype or device, an
   open tensor, a pair's entries). */
static void check_kind(lua_State *L, int idx, const char *op, const char *name,
                       tlb_option_kind kind) {
    idx = lua_absindex(L, idx);
    int type = lua_type(L, idx);
    bool fits = false;
    switch (kind) {
    case TLB_OPTION_BOOLEAN:
        fits = type == LUA_TBOOLEAN;
        break;
    case TLB_OPTION_NUMBER:
        fits = type == LUA_TNUMBER;
        break;
    case TLB_OPTION_INTEGER: { /* floats of integral value accepted, as tlb_check_int does */
        int exact = 0;
        if (type == LUA_TNUMBER) lua_tointegerx(L, idx, &exact);
        fits = exact;
        break;
    }
    case TLB_OPTION_STRING:
    case TLB_OPTION_DTYPE:
    case TLB_OPTION_DEVICE:
        fits = type == LUA_TSTRING;
        break;
    case TLB_OPTION_TENSOR:
        fits = tlb_totensor(L, idx, op) != NULL; /* a released tensor raises there */
        break;
    case TLB_OPTION_PAIR: {
        int exact = 0;
        if (type == LUA_TNUMBER) lua_tointegerx(L, idx, &exact);
        fits = exact || type == LUA_TTABLE;
        break;
    }
    }
    if (!fits) {
        /* a number's value says more than its type where the kind wants an integer */
        bool show_value =
            type == LUA_TNUMBER && (kind == TLB_OPTION_INTEGER || kind == TLB_OPTION_PAIR);
        char value[64];
        if (show_value) snprintf(value, sizeof value, "%.14g", (double)lua_tonumber(L, idx));
        tlb_errorf(L, "%s: option %s expected %s, got %s", op, name, kind_description(kind),
                   show_value ? value : tlb_typename(L, idx));
    }
    int64_t pair[2];
    switch (kind) {
    case TLB_OPTION_DTYPE:
        tlb_check_dtype(L, idx, op);
        break;
    case TLB_OPTION_DEVICE:
        tlb_check_device(L, idx, op);
        break;
    case TLB_OPTION_PAIR:
        tlb_check_pair(L, idx, op, name, pair);
        break;
    default:
        break;
    }
}

bool tlb_check_options(lua_State *L, int idx, const char *op, const tlb_option *accepted) {
    if (idx == 0 || lua_isnoneornil(L, idx)) return false;
    char names[256];
    accepted_names(accepted, names, sizeof names);
    if (!lua_istable(L, idx)) {
        char what[300];
        snprintf(what, sizeof what, "an options table {%s}", names);
        tlb_type_error(L, idx, op, what);
    }
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const tlb_option *o =
            lua_type(L, -2) == LUA_TSTRING ? find_option(accepted, lua_tostring(L, -2)) : NULL;
        if (!o) {
            char key[128];
            tlb_errorf(L, "%s: unknown option %s (accepted: %s)", op,
                       key_text(L, -2, key, sizeof key), names);
        }
        check_kind(L, -1, op, o->name, o->kind);
        lua_pop(L, 1);
    }
    return true;
}

/* Pushes the value of option name of the table at idx and returns true; pushes nothing and
   returns false when there is no table or no such option. Reads raw, as the checker walks. */
static bool push_option(lua_State *L, int idx, const char *name) {
    if (idx == 0 || lua_isnoneornil(L, idx)) return false;
    idx = lua_absindex(L, idx);
    lua_pushstring(L, name);
    if (lua_rawget(L, idx) == LUA_TNIL) {
        lua_pop(L, 1);
        return false;
    }
    return true;
}

/* The option's value on top, checked against kind: true; false when absent (nothing pushed). */
static bool push_checked(lua_State *L, int idx, const char *op, const char *name,
                         tlb_option_kind kind) {
    if (!push_option(L, idx, name)) return false;
    check_kind(L, -1, op, name, kind);
    return true;
}

bool tlb_option_bool(lua_State *L, int idx, const char *op, const char *name, bool *out) {
    if (!push_checked(L, idx, op, name, TLB_OPTION_BOOLEAN)) return false;
    *out = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return true;
}

bool tlb_option_number(lua_State *L, int idx, const char *op, const char *name, double *out) {
    if (!push_checked(L, idx, op, name, TLB_OPTION_NUMBER)) return false;
    *out = (double)lua_tonumber(L, -1);
    lua_pop(L, 1);
    return true;
}

bool tlb_option_integer(lua_State *L, int idx, const char *op, const char *name, int64_t *out) {
    if (!push_checked(L, idx, op, name, TLB_OPTION_INTEGER)) return false;
    *out = (int64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return true;
}

bool tlb_option_string(lua_State *L, int idx, const char *op, const char *name, const char **out) {
    if (!push_checked(L, idx, op, name, TLB_OPTION_STRING)) return false;
    *out = lua_tostring(L, -1); /* the table keeps the string alive */
    lua_pop(L, 1);
    return true;
}

bool tlb_option_dtype(lua_State *L, int idx, const char *op, const char *name, tl_dtype *out) {
    if (!push_checked(L, idx, op, name, TLB_OPTION_DTYPE)) return false;
    *out = tlb_check_dtype(L, -1, op);
    lua_pop(L, 1);
    return true;
}

bool tlb_option_device(lua_State *L, int idx, const char *op, const char *name, tl_device *out) {
    if (!push_checked(L, idx, op, name, TLB_OPTION_DEVICE)) return false;
    *out = tlb_check_device(L, -1, op);
    lua_pop(L, 1);
    return true;
}

bool tlb_option_tensor(lua_State *L, int idx, const char *op, const char *name, tl_tensor **out) {
    if (!push_checked(L, idx, op, name, TLB_OPTION_TENSOR)) return false;
    *out = tlb_totensor(L, -1, op); /* the table keeps the tensor alive */
    lua_pop(L, 1);
    return true;
}

bool tlb_option_pair(lua_State *L, int idx, const char *op, const char *name, int64_t out[2]) {
    if (!push_checked(L, idx, op, name, TLB_OPTION_PAIR)) return false;
    tlb_check_pair(L, -1, op, name, out);
    lua_pop(L, 1);
    return true;
}

/* ---- new tensors: {dtype, device, requires_grad} ------------------------------------------ */
const tlb_option tlb_new_tensor_options[] = {
    {"dtype", TLB_OPTION_DTYPE},
    {"device", TLB_OPTION_DEVICE},
    {"requires_grad", TLB_OPTION_BOOLEAN},
    {NULL, 0},
};

void tlb_options_parse(lua_State *L, int idx, const char *op, tlb_options *opts) {
    if (!tlb_check_options(L, idx, op, tlb_new_tensor_options)) return;
    if (tlb_option_dtype(L, idx, op, "dtype", &opts->dtype)) opts->has_dtype = true;
    if (tlb_option_device(L, idx, op, "device", &opts->device)) opts->has_device = true;
    bool requires_grad = false;
    if (tlb_option_bool(L, idx, op, "requires_grad", &requires_grad))
        opts->requires_grad = requires_grad;
}

void tlb_apply_requires_grad(lua_State *L, tl_tensor *t, const tlb_options *opts) {
    if (opts->requires_grad == 1 && tl_set_requires_grad(t, true) != TL_OK) tlb_fail(L);
}

/* ---- a pointwise op's numbers ---------------------------------------------------------------- */
void tlb_pointwise_numbers(lua_State *L, int first, const char *op, const char *spec,
                           double numbers[TLB_MAX_NUMBERS]) {
    /* the names of spec's "name=default" words */
    char names[TLB_MAX_NUMBERS][32];
    tlb_option accepted[TLB_MAX_NUMBERS + 1];
    int count = 0;
    for (const char *p = spec; *p && count < TLB_MAX_NUMBERS;) {
        while (*p == ' ') p++;
        const char *equals = strchr(p, '=');
        if (!equals) break;
        snprintf(names[count], sizeof names[count], "%.*s", (int)(equals - p), p);
        accepted[count] = (tlb_option){names[count], TLB_OPTION_NUMBER};
        count++;
        for (p = equals; *p && *p != ' '; p++) {
        }
    }
    accepted[count] = (tlb_option){NULL, 0};
    for (int i = 0; i < TLB_MAX_NUMBERS; i++) numbers[i] = NAN;
    const int top = lua_gettop(L);
    if (top == first && lua_istable(L, first)) {
        tlb_check_options(L, first, op, accepted);
        for (int i = 0; i < count; i++) tlb_option_number(L, first, op, names[i], &numbers[i]);
        return;
    }
    if (top - first + 1 > count) {
        if (count == 0)
            tlb_errorf(L, "%s: takes no numbers, got %d more argument%s", op, top - first + 1,
                       top - first + 1 == 1 ? "" : "s");
        char list[128];
        accepted_names(accepted, list, sizeof list);
        tlb_errorf(L, "%s: expected at most %d number%s (%s) or an options table, got %d arguments",
                   op, count, count == 1 ? "" : "s", list, top - first + 1);
    }
    for (int i = 0; i < count && first + i <= top; i++)
        if (!lua_isnil(L, first + i)) numbers[i] = tlb_check_number(L, first + i, op, names[i]);
}

double tlb_alpha_option(lua_State *L, const char *op, const char *operands) {
    static const tlb_option accepted[] = {{"alpha", TLB_OPTION_NUMBER}, {NULL, 0}};
    double alpha = 1;
    if (lua_gettop(L) > 3)
        tlb_errorf(L, "%s: expected 2 arguments and options (%s, {alpha}), got %d", op, operands,
                   lua_gettop(L));
    if (lua_gettop(L) == 3) {
        if (tlb_check_options(L, 3, op, accepted)) tlb_option_number(L, 3, op, "alpha", &alpha);
        lua_settop(L, 2);
    }
    if (alpha != 1 && !tlb_is_tensor(L, 2)) {
        if (lua_type(L, 2) != LUA_TNUMBER) tlb_type_error(L, 2, op, "a tensor or a number");
        lua_pushnumber(L, lua_tonumber(L, 2) * alpha); /* a number operand scaled here */
        lua_replace(L, 2);
        alpha = 1;
    }
    return alpha;
}
