/* The embedding limits: a counting allocator (memory) and a count hook (instructions). */
#include <stdlib.h>

#include <lauxlib.h>

#include "embed_internal.h"

#define COUNT_STEP 1000 /* instructions between two runs of the count hook */

void *tle_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    tl_lua *T = ud;
    if (!ptr) osize = 0; /* osize then tells the kind of object, not a size */
    if (nsize == 0) {
        free(ptr);
        T->used -= osize;
        return NULL;
    }
    /* used never exceeds the limit (it holds from the state's first allocation) */
    size_t limit = T->opts.memory_limit;
    if (limit && nsize > osize && nsize - osize > limit - T->used) {
        T->refused = true;
        return NULL; /* Lua collects and tries once more, then raises a memory error */
    }
    void *p = realloc(ptr, nsize);
    if (p) T->used = T->used - osize + nsize;
    return p;
}

/* Runs every T->step instructions of any thread of the state (coroutines inherit the hook from
   the thread that creates them) and adds them to the call's count. Once over the limit, it runs
   at every instruction of the thread and raises each time, so a pcall in the script cannot get
   past it: the error climbs out to the host's call. */
static void count_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    void *ud;
    lua_getallocf(L, &ud);
    tl_lua *T = ud;
    int period = lua_gethookcount(L);
    T->executed += (uint64_t)period;
    if (T->executed < T->opts.instruction_limit) {
        if (period != T->step) lua_sethook(L, count_hook, LUA_MASKCOUNT, T->step);
        return;
    }
    if (period != 1) lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
    luaL_error(L, "instruction limit of %I exceeded", (lua_Integer)T->opts.instruction_limit);
}

void tle_limits_begin(tl_lua *T) {
    T->refused = false;
    T->executed = 0;
    if (T->opts.instruction_limit) lua_sethook(T->L, count_hook, LUA_MASKCOUNT, T->step);
}

void tle_limits_end(tl_lua *T) {
    if (T->opts.instruction_limit) lua_sethook(T->L, NULL, 0, 0);
}
