/* Autograd from Lua: requires_grad, grad, backward, detach, no_grad, and custom functions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

/* ---- fields ------------------------------------------------------------- */
int tlb_field_requires_grad(lua_State *L) {
    lua_pushboolean(L, tl_requires_grad(tlb_check(L, 1, "requires_grad")));
    return 1;
}

int tlb_field_grad(lua_State *L) {
    tl_tensor *grad = tl_grad(tlb_check(L, 1, "grad"));
    if (!grad) {
        lua_pushnil(L);
        return 1;
    }
    tlb_box *box = tlb_newbox(L);
    box->tensor = tl_retain(grad);
    return 1;
}

int tlb_field_grad_fn(lua_State *L) {
    const char *name = tl_grad_fn_name(tlb_check(L, 1, "grad_fn"));
    if (name)
        lua_pushstring(L, name);
    else
        lua_pushnil(L);
    return 1;
}

int tlb_field_is_leaf(lua_State *L) {
    lua_pushboolean(L, tl_is_leaf(tlb_check(L, 1, "is_leaf")));
    return 1;
}

void tlb_set_requires_grad_field(lua_State *L, tl_tensor *t, int value_idx) {
    if (!lua_isboolean(L, value_idx))
        tlb_errorf(L, "requires_grad: expected a boolean, got %s", tlb_typename(L, value_idx));
    if (tl_set_requires_grad(t, lua_toboolean(L, value_idx)) != TL_OK) tlb_fail(L);
}

void tlb_set_grad_field(lua_State *L, tl_tensor *t, int value_idx) {
    tl_tensor *grad = NULL;
    if (!lua_isnil(L, value_idx)) {
        grad = tlb_totensor(L, value_idx, "grad");
        if (!grad)
            tlb_errorf(L, "grad: expected a tensor or nil, got %s", tlb_typename(L, value_idx));
    }
    if (tl_set_grad(t, grad) != TL_OK) tlb_fail(L);
}

/* ---- methods -------------------------------------------------------------- */
/* t:requires_grad_(flag = true) -> t */
static int ag_requires_grad_(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "requires_grad_");
    bool flag = tlb_opt_bool(L, 2, "requires_grad_", true);
    if (tl_set_requires_grad(t, flag) != TL_OK) return tlb_fail(L);
    lua_settop(L, 1);
    return 1;
}

/* t:zero_grad(): drops the accumulated gradient (t.grad becomes nil) -> t */
static int ag_zero_grad(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "zero_grad");
    if (tl_set_grad(t, NULL) != TL_OK) return tlb_fail(L);
    lua_settop(L, 1);
    return 1;
}

static int ag_detach(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "detach"), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_detach(t, &out);
    return tlb_result(L, box, status, out);
}

/* The Lua state running a backward pass now: custom functions call Lua there. */
static _Thread_local lua_State *backward_state;

/* t:backward(grad?, opts?) with opts {retain_graph = bool} (or a boolean) */
static int ag_backward(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "backward");
    tl_tensor *grad = NULL;
    int opts = 3;
    if (lua_istable(L, 2) || lua_isboolean(L, 2))
        opts = 2;
    else if (!lua_isnoneornil(L, 2) && !(grad = tlb_totensor(L, 2, "backward")))
        return tlb_type_error(L, 2, "backward", "a gradient tensor, nil or an options table");
    static const tlb_option accepted[] = {{"retain_graph", TLB_OPTION_BOOLEAN}, {NULL, 0}};
    bool retain_graph = false;
    if (lua_isboolean(L, opts))
        retain_graph = lua_toboolean(L, opts);
    else if (tlb_check_options(L, opts, "backward", accepted))
        tlb_option_bool(L, opts, "backward", "retain_graph", &retain_graph);
    lua_State *previous = backward_state;
    backward_state = L;
    tl_status status = tl_backward(t, grad, retain_graph);
    backward_state = previous;
    /* the outermost backward runs the callbacks its hooks queued (dropped when it failed) */
    if (!previous) tlb_run_backward_callbacks(L, status == TL_OK);
    if (status != TL_OK) return tlb_fail(L);
    return 0;
}

lua_State *tlb_backward_state(void) {
    return backward_state;
}

/* tl._autograd_grad(outputs, inputs, grad_outputs | nil, retain_graph, create_graph) -> the list
   of the inputs' gradients (nil where none reaches an input) and its length: tl_autograd_grad,
   with hooks run in this state as backward runs them */
static int ag_autograd_grad(lua_State *L) {
    int count = 0, n_inputs = 0, n_grads = 0;
    tl_tensor **roots = tlb_check_tensor_list(L, 1, "autograd.grad", "outputs", &count);
    tl_tensor **inputs = tlb_check_tensor_list(L, 2, "autograd.grad", "inputs", &n_inputs);
    tl_tensor **grads = NULL;
    if (!lua_isnoneornil(L, 3)) {
        size_t n = tlb_check_list_length(L, 3, "autograd.grad", "grad_outputs");
        if ((int)n != count)
            return tlb_errorf(L, "autograd.grad: grad_outputs has %d %s for %d %s", (int)n,
                              n == 1 ? "entry" : "entries", count,
                              count == 1 ? "output" : "outputs");
        grads = lua_newuserdatauv(L, sizeof *grads * (size_t)(count ? count : 1), 0);
        for (int r = 0; r < count; r++) {
            lua_rawgeti(L, 3, r + 1);
            grads[r] = lua_isnil(L, -1) ? NULL : tlb_totensor(L, -1, "autograd.grad");
            if (!lua_isnil(L, -1) && !grads[r])
                return tlb_errorf(L,
                                  "autograd.grad: grad_outputs[%d] expected a tensor or nil, "
                                  "got %s",
                                  r + 1, luaL_typename(L, -1));
            lua_pop(L, 1);
        }
        n_grads = count;
    }
    (void)n_grads;
    bool retain_graph = lua_toboolean(L, 4), create_graph = lua_toboolean(L, 5);
    tl_tensor **out = lua_newuserdatauv(L, sizeof *out * (size_t)(n_inputs ? n_inputs : 1), 0);
    lua_State *previous = backward_state;
    backward_state = L;
    tl_status status =
        tl_autograd_grad(count, roots, grads, n_inputs, inputs, retain_graph, create_graph, out);
    backward_state = previous;
    if (!previous) tlb_run_backward_callbacks(L, status == TL_OK);
    if (status != TL_OK) return tlb_fail(L);
    lua_createtable(L, n_inputs, 0);
    int list = lua_gettop(L);
    for (int i = 0; i < n_inputs; i++) {
        if (!out[i]) continue; /* a hole: nil */
        tlb_box *box = tlb_newbox(L);
        box->tensor = out[i];
        tlb_account(L, out[i]);
        lua_rawseti(L, list, i + 1);
    }
    lua_pushinteger(L, n_inputs);
    return 2;
}

/* ---- grad mode ------------------------------------------------------------ */
static int ag_is_grad_enabled(lua_State *L) {
    lua_pushboolean(L, tl_is_grad_enabled());
    return 1;
}

/* tl.set_grad_enabled(flag) -> the previous mode */
static int ag_set_grad_enabled(lua_State *L) {
    if (!lua_isboolean(L, 1)) return tlb_type_error(L, 1, "set_grad_enabled", "a boolean");
    lua_pushboolean(L, tl_set_grad_enabled(lua_toboolean(L, 1)));
    return 1;
}

/* A to-be-closed guard restoring the grad mode: errors in fn pass through
   untouched (their traceback intact) and the mode is restored on the way. */
typedef struct mode_guard {
    bool previous;
    bool armed;
} mode_guard;

static const char guard_key = 'g';

static int guard_close(lua_State *L) {
    mode_guard *g = lua_touserdata(L, 1);
    if (g && g->armed) {
        g->armed = false;
        tl_set_grad_enabled(g->previous);
    }
    return 0;
}

/* Runs fn(...) (the arguments from 1) with grad mode `enabled`; returns its results. */
static int with_grad_mode(lua_State *L, const char *op, bool enabled) {
    if (!tlb_is_callable(L, 1)) return tlb_type_error(L, 1, op, "a function");
    int nargs = lua_gettop(L) - 1;
    mode_guard *g = lua_newuserdatauv(L, sizeof *g, 0);
    g->armed = false;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &guard_key);
    lua_setmetatable(L, -2);
    lua_toclose(L, -1);
    int base = lua_gettop(L); /* the guard */
    luaL_checkstack(L, nargs + 1, op);
    for (int i = 1; i <= nargs + 1; i++) lua_pushvalue(L, i);
    g->previous = tl_set_grad_enabled(enabled);
    g->armed = true;
    lua_call(L, nargs, LUA_MULTRET);
    g->armed = false;
    tl_set_grad_enabled(g->previous);
    return lua_gettop(L) - base;
}

static int ag_no_grad(lua_State *L) {
    return with_grad_mode(L, "no_grad", false);
}
static int ag_enable_grad(lua_State *L) {
    return with_grad_mode(L, "enable_grad", true);
}

/* ---- autocast -------------------------------------------------------------- */
/* tl._autocast_set(dtype | false) -> the previous dtype, or false when it was off */
static int ag_autocast_set(lua_State *L) {
    tl_autocast_state state = {.enabled = false, .dtype = TL_F32};
    if (!(lua_isboolean(L, 1) && !lua_toboolean(L, 1)) && !lua_isnil(L, 1)) {
        state.enabled = true;
        state.dtype = tlb_check_dtype(L, 1, "autocast");
    }
    tl_autocast_state previous;
    if (tl_autocast_set(state, &previous) != TL_OK) tlb_fail(L);
    if (previous.enabled)
        lua_pushstring(L, tl_dtype_name(previous.dtype));
    else
        lua_pushboolean(L, false);
    return 1;
}

/* tl._autocast_get() -> the autocast dtype, or false when off */
static int ag_autocast_get(lua_State *L) {
    tl_autocast_state state = tl_autocast_get();
    if (state.enabled)
        lua_pushstring(L, tl_dtype_name(state.dtype));
    else
        lua_pushboolean(L, false);
    return 1;
}

/* ---- custom functions ----------------------------------------------------- */
/* What a custom node keeps: its state's anchor, the registry reference of its Lua backward (in
   that state) and its name (a copy: the node may outlive the state). */
typedef struct custom_user {
    tlb_anchor *anchor;
    int ref;
    char name[];
} custom_user;

static const char call_key = 'c';

static void custom_release(void *user) {
    custom_user *u = user;
    lua_State *main = tlb_anchor_state(u->anchor);
    if (main && lua_checkstack(main, 2)) luaL_unref(main, LUA_REGISTRYINDEX, u->ref);
    tlb_anchor_release(u->anchor);
    free(u);
}

typedef struct custom_call {
    custom_user *user;
    const char *name;
    int num_outputs, num_inputs;
    tl_tensor *const *grads_out;
    const bool *needs_input_grad;
} custom_call;

/* Runs (protected) the Lua backward with the output gradients; leaves its
   table of input gradients, checked, on the stack. */
static int custom_call_body(lua_State *L) {
    custom_call *c = lua_touserdata(L, 1);
    luaL_checkstack(L, c->num_outputs + 4, "backward");
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->user->ref);
    for (int o = 0; o < c->num_outputs; o++) {
        tlb_box *box = tlb_newbox(L);
        box->tensor = tl_retain(c->grads_out[o]);
    }
    lua_call(L, c->num_outputs, 1);
    if (!lua_istable(L, -1))
        return tlb_errorf(L, "expected a table of input gradients, got %s", tlb_typename(L, -1));
    for (int i = 0; i < c->num_inputs; i++) {
        if (!c->needs_input_grad[i]) continue;
        lua_rawgeti(L, -1, i + 1);
        if (!lua_isnil(L, -1) && !tlb_totensor(L, -1, "backward"))
            return tlb_errorf(L, "gradient %d must be a tensor or nil, got %s", i + 1,
                              tlb_typename(L, -1));
        lua_pop(L, 1);
    }
    return 1;
}

static tl_status custom_backward(void *user, int num_outputs, tl_tensor *const *grads_out,
                                 int num_inputs, const bool *needs_input_grad,
                                 tl_tensor **grads_in) {
    lua_State *L = backward_state;
    custom_user *u = user;
    char what[160];
    snprintf(what, sizeof what, "the custom function '%s'", u->name);
    TL_TRY(tlb_anchor_check(u->anchor, L, what));
    if (!lua_checkstack(L, 4)) return tl_error(TL_ERR_MEMORY, "backward: Lua stack overflow");
    int top = lua_gettop(L);
    custom_call c = {.user = user,
                     .name = ((custom_user *)user)->name,
                     .num_outputs = num_outputs,
                     .num_inputs = num_inputs,
                     .grads_out = grads_out,
                     .needs_input_grad = needs_input_grad};
    lua_rawgetp(L, LUA_REGISTRYINDEX, &call_key);
    lua_pushlightuserdata(L, &c);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        const char *message = lua_tostring(L, -1);
        tl_status status = tl_error(TL_ERR_AUTOGRAD, "%s backward: %s", c.name,
                                    message ? message : "(error object is not a string)");
        lua_settop(L, top);
        return status;
    }
    /* the table was checked: no Lua error can happen below */
    for (int i = 0; i < num_inputs; i++) {
        if (!needs_input_grad[i]) continue;
        lua_rawgeti(L, -1, i + 1);
        tlb_box *box = lua_touserdata(L, -1);
        grads_in[i] = box ? tl_retain(box->tensor) : NULL;
        lua_pop(L, 1);
    }
    lua_settop(L, top);
    return TL_OK;
}

/* The most tensor inputs or outputs of one custom function (the engine's bound on a node). */
#define CUSTOM_MAX 65536

/* Reads a list of tensors at idx into a scratch array left on the stack (collected with it,
   also when an error is raised); returns the count. */
static int tensor_list(lua_State *L, int idx, const char *name, const char *what, tl_tensor ***ts) {
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_Unsigned n = lua_rawlen(L, idx);
    if (n > CUSTOM_MAX)
        tlb_errorf(L, "%s: a custom function takes at most %d tensor %s, got %llu", name,
                   CUSTOM_MAX, what, (unsigned long long)n);
    *ts = lua_newuserdatauv(L, sizeof **ts * (n ? (size_t)n : 1), 0);
    for (int i = 0; i < (int)n; i++) {
        lua_rawgeti(L, idx, i + 1);
        (*ts)[i] = tlb_totensor(L, -1, name);
        if (!(*ts)[i])
            tlb_errorf(L, "%s: %s[%d] expected a tensor, got %s", name, what, i + 1,
                       tlb_typename(L, -1));
        lua_pop(L, 1);
    }
    return (int)n;
}

/* core.custom_function(name, inputs, outputs, backward) -> connected outputs.
   Joins aliases of outputs (computed without recording) to inputs through one
   node whose backward calls backward(grad_1, ..., grad_m), which returns a
   table with one gradient (or nil) per input. Any number of inputs and outputs
   (up to CUSTOM_MAX). */
static int ag_custom_function(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    tl_tensor **inputs, **outputs;
    luaL_checktype(L, 4, LUA_TFUNCTION);
    lua_settop(L, 4);
    int num_inputs = tensor_list(L, 2, name, "inputs", &inputs);
    int num_outputs = tensor_list(L, 3, name, "outputs", &outputs);

    /* Each output joins the graph as a fresh alias: the tensor forward returned
       stays outside the graph, so what forward kept of it (ctx's saved
       tensors) holds no reference to the node, and node -> backward -> ctx ->
       output -> node can never form a cycle. */
    lua_createtable(L, num_outputs, 0); /* the connected outputs */
    int result = lua_gettop(L);
    for (int o = 0; o < num_outputs; o++) {
        tlb_box *box = tlb_newbox(L);
        tl_tensor *out = NULL;
        if (tl_detach(outputs[o], &out) != TL_OK) return tlb_fail(L);
        box->tensor = out;
        outputs[o] = out;
        lua_rawseti(L, result, o + 1);
    }

    size_t name_len = strlen(name);
    custom_user *u = malloc(sizeof *u + name_len + 1);
    if (!u) return tlb_errorf(L, "%s: out of memory", name);
    memcpy(u->name, name, name_len + 1);
    lua_pushvalue(L, 4);
    u->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    u->anchor = tlb_anchor_of(L);
    /* from here the node owns u: custom_release frees it, also when recording fails */
    if (tl_ag_custom(name, num_inputs, inputs, num_outputs, outputs, custom_backward,
                     custom_release, u) != TL_OK)
        return tlb_fail(L);
    lua_settop(L, result);
    return 1;
}

void tlb_autograd_init(lua_State *L, int mt) {
    mt = lua_absindex(L, mt);
    tlb_anchor_init(L);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &guard_key) == LUA_TNIL) {
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, guard_close);
        lua_setfield(L, -2, "__close");
        lua_rawsetp(L, LUA_REGISTRYINDEX, &guard_key);
    }
    lua_pop(L, 1);
    /* the backward body: a closure with the tensor metatable (upvalue 1 of
       the caller) so it can make tensor objects */
    lua_pushvalue(L, mt);
    lua_pushcclosure(L, custom_call_body, 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &call_key);
    tlb_grad_hooks_init(L, mt);
}

const luaL_Reg tlb_autograd_methods[] = {
    {"requires_grad_", ag_requires_grad_},
    {"zero_grad", ag_zero_grad},
    {"detach", ag_detach},
    {"backward", ag_backward},
    {NULL, NULL},
};

const luaL_Reg tlb_autograd_functions[] = {
    {"is_grad_enabled", ag_is_grad_enabled},
    {"set_grad_enabled", ag_set_grad_enabled},
    {"no_grad", ag_no_grad},
    {"_autocast_set", ag_autocast_set},
    {"_autocast_get", ag_autocast_get},
    {"enable_grad", ag_enable_grad},
    {"custom_function", ag_custom_function},
    {"_autograd_grad", ag_autograd_grad},
    {NULL, NULL},
};
