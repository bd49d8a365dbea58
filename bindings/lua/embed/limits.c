/* The embedding limits: memory (the Lua heap and tensors, one budget), instructions and time (a
   count hook, and the engine's deadline before every op). */
#include <math.h>
#include <stdlib.h>

#include <lauxlib.h>

#include "embed_internal.h"

/* Pattern matcher steps per millisecond that tle_steps_left grants for the time left: a
   conservative speed of Lua's matcher (it runs about ten times faster on one core). */
#define STEPS_PER_MS 50000.0

tl_lua *tle_of(lua_State *L) {
    void *ud;
    lua_getallocf(L, &ud);
    return ud;
}

void *tle_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    tl_lua *T = ud;
    if (!ptr) osize = 0; /* osize then tells the kind of object, not a size */
    if (nsize == 0) {
        free(ptr);
        if (T->budget) tl_memory_budget_uncharge(T->budget, osize);
        return NULL;
    }
    /* growing takes the difference from the budget first: refused past the limit */
    if (T->budget && nsize > osize && !tl_memory_budget_charge(T->budget, nsize - osize)) {
        T->refused = true;
        return NULL; /* Lua collects and tries once more, then raises a memory error */
    }
    void *p = realloc(ptr, nsize);
    if (!T->budget) return p;
    if (!p && nsize > osize) tl_memory_budget_uncharge(T->budget, nsize - osize);
    if (p && nsize < osize) tl_memory_budget_uncharge(T->budget, osize - nsize);
    return p;
}

bool tle_over(tl_lua *T) {
    return T->over;
}

/* Marks the call over a limit and raises its error; from then on the hook fires at every
   instruction of the thread, so a pcall in the script cannot get past it. */
static int over_limit(lua_State *L, tl_lua *T, bool time) {
    T->over = true;
    if (lua_gethookcount(L) != 1) lua_sethook(L, lua_gethook(L), LUA_MASKCOUNT, 1);
    if (time)
        return luaL_error(L, "time limit of %I ms exceeded", (lua_Integer)T->opts.time_limit_ms);
    return luaL_error(L, "instruction limit of %I exceeded",
                      (lua_Integer)T->opts.instruction_limit);
}

/* Runs every T->step instructions of any thread of the state (coroutines inherit the hook from
   the thread that creates them) and adds them to the call's count; checks the clock too. */
static void count_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    tl_lua *T = tle_of(L);
    int period = lua_gethookcount(L);
    T->executed += (uint64_t)period;
    bool over_count = T->opts.instruction_limit && T->executed >= T->opts.instruction_limit;
    bool over_time = T->deadline > 0 && tl_clock() >= T->deadline;
    if (over_count || over_time || T->over) {
        over_limit(L, T, over_time && !over_count);
        return;
    }
    if (period != T->step) lua_sethook(L, count_hook, LUA_MASKCOUNT, T->step);
}

void tle_limits_hook(tl_lua *T, lua_State *L1) {
    if (T->opts.instruction_limit || T->opts.time_limit_ms)
        lua_sethook(L1, count_hook, LUA_MASKCOUNT, T->over ? 1 : T->step);
}

void tle_limits_begin(tl_lua *T) {
    T->refused = false;
    T->over = false;
    T->executed = 0;
    T->tensor_refusals = T->budget ? tl_memory_budget_refusals(T->budget) : 0;
    T->deadline = T->opts.time_limit_ms ? tl_clock() + (double)T->opts.time_limit_ms / 1000.0 : 0;
    tle_limits_hook(T, T->L);
    tl_set_thread_deadline(T->deadline, T->opts.time_limit_ms);
    tl_set_thread_memory_budget(T->budget);
}

void tle_limits_end(tl_lua *T) {
    if (T->opts.instruction_limit || T->opts.time_limit_ms) lua_sethook(T->L, NULL, 0, 0);
    tl_set_thread_deadline(0, 0);
    tl_set_thread_memory_budget(NULL);
    T->deadline = 0;
}

double tle_steps_left(tl_lua *T) {
    double left = HUGE_VAL;
    if (T->opts.instruction_limit)
        left = T->executed >= T->opts.instruction_limit
                   ? 0
                   : (double)(T->opts.instruction_limit - T->executed);
    if (T->deadline > 0) {
        double ms = (T->deadline - tl_clock()) * 1000.0;
        double steps = ms > 0 ? ms * STEPS_PER_MS : 0;
        if (steps < left) left = steps;
    }
    return left;
}
