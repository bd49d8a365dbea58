/* Autograd hooks from Lua: tensors' gradient hooks, a leaf's grad-ready hook and callbacks
   queued to run when the current backward ends. */
#include <stdlib.h>

#include "binding.h"

static const char hook_call_key = 'h';
static const char queue_key = 'q';

/* What a tensor's hook keeps: its state's anchor and the registry reference of its Lua function
   there. */
typedef struct hook_user {
    tlb_anchor *anchor;
    int ref;
} hook_user;

static void hook_release(void *user) {
    hook_user *u = user;
    lua_State *main = tlb_anchor_state(u->anchor);
    if (main && lua_checkstack(main, 2)) luaL_unref(main, LUA_REGISTRYINDEX, u->ref);
    tlb_anchor_release(u->anchor);
    free(u);
}

/* Calls a hook's function with the tensor, leaving its one result: upvalue 1 is the tensor
   metatable. */
static int hook_call_body(lua_State *L) {
    hook_user *u = lua_touserdata(L, 1);
    tl_tensor *t = lua_touserdata(L, 2);
    lua_rawgeti(L, LUA_REGISTRYINDEX, u->ref);
    tlb_box *box = tlb_newbox(L);
    box->tensor = tl_retain(t);
    lua_call(L, 1, 1);
    return 1;
}

/* Runs the hook's function (user) with t, protected, in the state of the running backward: an
   error is a status naming kind ("grad-ready hook"); on success its result is at the top of
   the stack, above *top, where the caller puts the stack back. */
static tl_status call_hook(void *user, tl_tensor *t, const char *kind, const char *set_from,
                           lua_State **state, int *top) {
    lua_State *L = tlb_backward_state();
    TL_TRY(tlb_anchor_check(((hook_user *)user)->anchor, L, set_from));
    if (!lua_checkstack(L, 4)) return tl_error(TL_ERR_MEMORY, "backward: Lua stack overflow");
    *state = L, *top = lua_gettop(L);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &hook_call_key);
    lua_pushlightuserdata(L, user);
    lua_pushlightuserdata(L, t);
    if (lua_pcall(L, 2, 1, 0) == LUA_OK) return TL_OK;
    const char *message = lua_tostring(L, -1);
    tl_status status = tl_error(TL_ERR_AUTOGRAD, "%s: %s", kind,
                                message ? message : "(error object is not a string)");
    lua_settop(L, *top);
    return status;
}

static tl_status hook_fire(void *user, tl_tensor *t) {
    lua_State *L = NULL;
    int top = 0;
    TL_TRY(call_hook(user, t, "grad-ready hook", "a grad-ready hook set from Lua", &L, &top));
    lua_settop(L, top);
    return TL_OK;
}

/* tl.autograd.set_grad_ready_hook(t, fn | nil) */
static int ag_set_grad_ready_hook(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "set_grad_ready_hook");
    if (lua_isnoneornil(L, 2)) {
        if (tl_set_grad_ready_hook(t, NULL, NULL, NULL) != TL_OK) return tlb_fail(L);
        return 0;
    }
    if (!lua_isfunction(L, 2))
        return tlb_type_error(L, 2, "set_grad_ready_hook", "a function or nil");
    if (!tl_requires_grad(t))
        return tlb_errorf(L, "set_grad_ready_hook: the tensor does not require grad (a hook on "
                             "it would never run)");
    hook_user *u = malloc(sizeof *u);
    if (!u) return tlb_errorf(L, "set_grad_ready_hook: out of memory");
    lua_pushvalue(L, 2);
    u->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    u->anchor = tlb_anchor_of(L);
    if (tl_set_grad_ready_hook(t, hook_fire, u, hook_release) != TL_OK) return tlb_fail(L);
    return 0;
}

/* A gradient hook: its result, nil or a tensor of the gradient's shape, replaces the gradient
   when a tensor. */
static tl_status grad_hook_fire(void *user, tl_tensor *grad, tl_tensor **replacement) {
    lua_State *L = NULL;
    int top = 0;
    TL_TRY(call_hook(user, grad, "gradient hook", "a gradient hook set from Lua", &L, &top));
    tl_status status = TL_OK;
    if (!lua_isnil(L, -1)) {
        tl_tensor *t = tlb_peek_tensor(L, -1);
        if (!t)
            status = tl_error(TL_ERR_AUTOGRAD,
                              "gradient hook: expected to return nil or a tensor, got %s",
                              luaL_typename(L, -1));
        else
            *replacement = tl_retain(t);
    }
    lua_settop(L, top);
    return status;
}

/* tl._add_grad_hook(t, fn) -> the hook's id (tl_remove_grad_hook) */
static int ag_add_grad_hook(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "register_hook");
    if (!lua_isfunction(L, 2)) /* numbered as the user's t:register_hook(fn) counts */
        return tlb_errorf(L, "register_hook: argument %d expected a function, got %s",
                          tlb_wrapper_arg_number(L, 2), tlb_typename(L, 2));
    hook_user *u = malloc(sizeof *u);
    if (!u) return tlb_errorf(L, "register_hook: out of memory");
    lua_pushvalue(L, 2);
    u->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    u->anchor = tlb_anchor_of(L);
    int64_t id = 0;
    if (tl_add_grad_hook(t, grad_hook_fire, u, hook_release, &id) != TL_OK) return tlb_fail(L);
    lua_pushinteger(L, (lua_Integer)id);
    return 1;
}

/* tl._remove_grad_hook(t, id) -> whether t had that hook */
static int ag_remove_grad_hook(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "remove_hook");
    lua_pushboolean(L, tl_remove_grad_hook(t, (int64_t)luaL_checkinteger(L, 2)));
    return 1;
}

/* tl.autograd.queue_callback(fn): fn() runs once the outermost backward now running ends
   (before it returns), in the order queued. */
static int ag_queue_callback(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    if (!tlb_backward_state())
        return tlb_errorf(L, "queue_callback: no backward is running (call it from a hook)");
    lua_rawgetp(L, LUA_REGISTRYINDEX, &queue_key);
    lua_pushvalue(L, 1);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    return 0;
}

void tlb_run_backward_callbacks(lua_State *L, bool ok) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &queue_key);
    int queue = lua_gettop(L);
    lua_newtable(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &queue_key); /* a fresh queue for callbacks that queue */
    lua_Integer n = (lua_Integer)lua_rawlen(L, queue);
    for (lua_Integer i = 1; ok && i <= n; i++) {
        lua_rawgeti(L, queue, i);
        lua_call(L, 0, 0); /* an error propagates: the backward fails with it */
    }
    lua_settop(L, queue - 1);
}

void tlb_grad_hooks_init(lua_State *L, int mt) {
    mt = lua_absindex(L, mt);
    lua_newtable(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &queue_key);
    lua_pushvalue(L, mt);
    lua_pushcclosure(L, hook_call_body, 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &hook_call_key);
}

const luaL_Reg tlb_grad_hook_functions[] = {
    {"_set_grad_ready_hook", ag_set_grad_ready_hook},
    {"_queue_callback", ag_queue_callback},
    {"_add_grad_hook", ag_add_grad_hook},
    {"_remove_grad_hook", ag_remove_grad_hook},
    {NULL, NULL},
};
