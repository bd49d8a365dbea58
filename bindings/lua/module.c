/* luaopen_tlua_core: builds the tensor metatable, the methods table and the module table. */
#define _GNU_SOURCE /* dladdr, RTLD_NODELETE */
#include <dlfcn.h>

#include "binding.h"

/* Keeps this library (and with it libtlua and its OpenMP runtime) loaded
   for the life of the process: lua_close dlcloses C modules, and unloading
   libgomp under its idle worker threads crashes the process at exit. */
static void pin_library(void) {
    static bool pinned;
    Dl_info info;
    if (pinned || !dladdr((void *)pin_library, &info) || !info.dli_fname) return;
    void *self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    pinned = self != NULL; /* the extra reference is kept on purpose */
}

/* Sets target[name] = closure(f, mt) for each entry of list. */
static void set_functions(lua_State *L, const luaL_Reg *list, int target, int mt) {
    lua_pushvalue(L, target);
    lua_pushvalue(L, mt);
    luaL_setfuncs(L, list, 1);
    lua_pop(L, 1);
}

/* casts are methods only: tl.float, tl.long, ... are dtype names (init.lua) */
static const char *const method_only[] = {"float", "double", "bfloat16", "half",
                                          "int",   "long",   "bool"};

/* The CUDA allocator's reclaim hook (tlua/cuda.h): a full collection of this state, whose dead
   tensors may hold the memory asked for. The hook is the thread's, set by the state that loaded
   tlua last and cleared when that state closes (the __gc of a registry value). */
static void collect_garbage(void *state) {
    lua_gc((lua_State *)state, LUA_GCCOLLECT);
}

static int clear_reclaim_hook(lua_State *L) {
    tl_cuda_clear_reclaim_hook(lua_touserdata(L, lua_upvalueindex(1)));
    return 0;
}

static void set_reclaim_hook(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, "tlua.reclaim_hook") != LUA_TNIL) {
        lua_pop(L, 1); /* loaded before in this state: its hook stands */
        return;
    }
    lua_pop(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    lua_State *main_thread = lua_tothread(L, -1);
    lua_pop(L, 1);
    tl_cuda_set_reclaim_hook(collect_garbage, main_thread);
    lua_newuserdatauv(L, 1, 0); /* its __gc clears the hook when the state closes */
    lua_newtable(L);
    lua_pushlightuserdata(L, main_thread);
    lua_pushcclosure(L, clear_reclaim_hook, 1);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, "tlua.reclaim_hook");
}

int luaopen_tlua_core(lua_State *L) {
    luaL_checkversion(L);
    pin_library();
    /* The collector's mode is the host's choice (the tlua executable keeps the
       generational one; tensor_object.c paces either); a module leaves it alone. */
    set_reclaim_hook(L);
    luaL_newmetatable(L, TLB_TENSOR_NAME); /* sets __name */
    int mt = lua_gettop(L);
    lua_newtable(L);
    int methods = lua_gettop(L);
    lua_newtable(L);
    int module = lua_gettop(L);

    const luaL_Reg *method_lists[] = {tlb_view_methods,     tlb_op_methods,   tlb_inplace_methods,
                                      tlb_autograd_methods, tlb_scan_methods, tlb_shape_methods,
                                      tlb_sort_methods,     tlb_nn_methods};
    for (size_t i = 0; i < sizeof method_lists / sizeof method_lists[0]; i++) {
        set_functions(L, method_lists[i], methods, mt);
        set_functions(L, method_lists[i], module, mt);
    }
    for (size_t i = 0; i < sizeof method_only / sizeof method_only[0]; i++) {
        lua_pushnil(L);
        lua_setfield(L, module, method_only[i]);
    }
    const luaL_Reg *function_lists[] = {
        tlb_constructor_functions, tlb_runtime_functions,   tlb_autograd_functions,
        tlb_object_functions,      tlb_nn_functions,        tlb_io_functions,
        tlb_cuda_functions,        tlb_grouped_functions,   tlb_block_sparse_functions,
        tlb_attention_functions,   tlb_grad_hook_functions, tlb_distributed_functions,
        tlb_pool_functions};
    for (size_t i = 0; i < sizeof function_lists / sizeof function_lists[0]; i++)
        set_functions(L, function_lists[i], module, mt);

    set_functions(L, tlb_lifetime_meta, mt, mt);
    set_functions(L, tlb_meta_methods, mt, mt);
    set_functions(L, tlb_op_meta, mt, mt);
    lua_pushvalue(L, mt);
    lua_pushvalue(L, methods);
    lua_pushcclosure(L, tlb_meta_index, 2);
    lua_setfield(L, mt, "__index");

    /* tl.Tensor: the methods table; Lua code may add methods to it */
    lua_pushvalue(L, methods);
    lua_setfield(L, module, "Tensor");
    tlb_autograd_init(L, mt);
    return 1;
}
