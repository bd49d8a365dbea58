/* The sandbox's base functions that code cannot get around: finalizers and message handlers run
   under the limits (Lua runs both with hooks off), pattern matching bounded by the budget left. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "embed_internal.h"

/* ---- finalizers ------------------------------------------------------------------------------
   Lua calls a __gc metamethod with hooks off, so no count hook can stop a runaway one. The
   sandbox's setmetatable never lets Lua mark a table for finalization: it sets the metatable with
   its __gc field hidden for that moment, and ties to the table a sentinel userdata (in an
   ephemeron table: table -> sentinel, the sentinel's user value holding the table) whose own C
   finalizer runs when the table has become garbage. It calls the metatable's __gc of that moment
   with the table in a new coroutine, which gets the count hook (a new thread runs with hooks on),
   so the call's instruction and time budgets bound it; an error or a yield abandons it. */
static const char finalizers_key = 'F';

static int run_finalizer(lua_State *L) {
    tl_lua *T = tle_of(L);
    lua_getiuservalue(L, 1, 1); /* the table */
    if (!lua_istable(L, -1) || !lua_getmetatable(L, -1)) return 0;
    lua_getfield(L, -1, "__gc");
    if (!lua_isfunction(L, -1)) return 0;
    lua_State *co = lua_newthread(L);
    tle_limits_hook(T, co);
    lua_pushvalue(L, -2); /* the finalizer */
    lua_pushvalue(L, -5); /* the table */
    lua_xmove(L, co, 2);
    int results = 0;
    int status = lua_resume(co, L, 1, &results);
    if (status != LUA_OK && !T->finalizer_error[0]) {
        const char *message = status == LUA_YIELD ? "it yielded" : lua_tostring(co, -1);
        snprintf(T->finalizer_error, sizeof T->finalizer_error,
                 "a __gc finalizer was abandoned: %s",
                 message ? message : "(error object is not a string)");
    }
    return 0;
}

static int guarded_setmetatable(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int t = lua_type(L, 2);
    luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
    if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
        return luaL_error(L, "cannot change a protected metatable");
    lua_settop(L, 2);
    bool finalized = false;
    if (t == LUA_TTABLE) {
        lua_rawgetp(L, LUA_REGISTRYINDEX, &finalizers_key); /* 3 */
        lua_pushliteral(L, "__gc");
        finalized = lua_rawget(L, 2) != LUA_TNIL; /* 4 */
    }
    if (!finalized) {
        lua_settop(L, 2);
        lua_setmetatable(L, 1);
        return 1;
    }
    /* 3: the ephemeron table, 4: the __gc value */
    lua_pushliteral(L, "__gc");
    lua_pushnil(L);
    lua_rawset(L, 2);
    lua_pushvalue(L, 2);
    lua_setmetatable(L, 1); /* cannot fail: checked above */
    lua_pushliteral(L, "__gc");
    lua_pushvalue(L, 4);
    lua_rawset(L, 2);
    lua_pushvalue(L, 1);
    if (lua_rawget(L, 3) == LUA_TNIL) { /* one sentinel per table */
        lua_newuserdatauv(L, 1, 1);
        lua_pushvalue(L, 1);
        lua_setiuservalue(L, -2, 1);
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, run_finalizer);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        lua_pushvalue(L, 1);
        lua_insert(L, -2);
        lua_rawset(L, 3);
    }
    lua_settop(L, 1);
    return 1;
}

/* ---- message handlers ------------------------------------------------------------------------
   Lua calls xpcall's handler for an error raised inside the count hook with hooks off; once the
   call is over a limit, the handler is skipped and the error passes through as it is. */
static int guarded_handler(lua_State *L) {
    if (tle_over(tle_of(L))) return 1;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static int guarded_xpcall(lua_State *L) {
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, guarded_handler, 1);
    lua_replace(L, 2);
    lua_pushvalue(L, lua_upvalueindex(1)); /* the original xpcall */
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* ---- patterns --------------------------------------------------------------------------------
   Lua's matcher backtracks: for each start position, each repetition item (a single-character
   class followed by *, + or -, and %b) may try every length, so a pattern with r such items
   over n bytes takes up to (n + 1)^(r + 1) steps unanchored ((n + 1)^r anchored), times the
   pattern's length; '?' doubles. A pattern function refuses to start when that bound exceeds
   the steps left of the call's instruction or time budget. */
/* The index after the single-character class that starts at i (x, %x, [set]). */
static size_t class_end(const char *p, size_t plen, size_t i) {
    if (p[i] == '%') return i + 2 <= plen ? i + 2 : plen;
    if (p[i] != '[') return i + 1;
    i++;
    if (i < plen && p[i] == '^') i++;
    do {
        if (i < plen && p[i] == '%') i++;
        i++;
    } while (i < plen && p[i] != ']');
    return i < plen ? i + 1 : plen;
}

static double worst_steps(const char *p, size_t plen, double n) {
    size_t i = 0;
    double steps = n + 1; /* start positions */
    if (plen > 0 && p[0] == '^') {
        steps = 1;
        i = 1;
    }
    while (i < plen) {
        if (p[i] == '%' && i + 1 < plen && p[i + 1] == 'b') { /* %bxy: a balanced run */
            steps *= n + 1;
            i += 4;
            continue;
        }
        if (p[i] == '%' && i + 1 < plen && p[i + 1] == 'f') { /* %f[set]: a frontier */
            i = i + 2 < plen ? class_end(p, plen, i + 2) : plen;
            continue;
        }
        if (p[i] == '(' || p[i] == ')') {
            i++;
            continue;
        }
        i = class_end(p, plen, i);
        if (i < plen && (p[i] == '*' || p[i] == '+' || p[i] == '-')) {
            steps *= n + 1;
            i++;
        } else if (i < plen && p[i] == '?') {
            steps *= 2;
            i++;
        }
    }
    return steps * (double)(plen > 0 ? plen : 1);
}

/* Checks the pattern at argument 2 against the subject at 1 (init at 3 when given). */
static void check_pattern(lua_State *L, const char *name, bool has_init, bool plain_arg) {
    size_t n = 0, plen = 0;
    luaL_checklstring(L, 1, &n);
    const char *p = luaL_checklstring(L, 2, &plen);
    if (plain_arg && lua_toboolean(L, 4)) return;
    double subject = (double)n;
    if (has_init && lua_isinteger(L, 3)) {
        lua_Integer init = lua_tointeger(L, 3);
        if (init > 0 && (size_t)init <= n) subject = (double)(n - (size_t)init + 1);
    }
    double worst = worst_steps(p, plen, subject), left = tle_steps_left(tle_of(L));
    if (worst > left) {
        char message[320];
        snprintf(message, sizeof message,
                 "string.%s: the pattern may take about %.3g matcher steps on a %.0f-byte "
                 "subject, more than the %.3g left of this call's limits (fewer repetition "
                 "items such as .- or .*, an anchor ^, or a shorter subject)",
                 name, worst, subject, left);
        luaL_error(L, "%s", message);
    }
}

static int call_original(lua_State *L) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int guarded_find(lua_State *L) {
    check_pattern(L, "find", true, true);
    return call_original(L);
}
static int guarded_match(lua_State *L) {
    check_pattern(L, "match", true, false);
    return call_original(L);
}
static int guarded_gmatch(lua_State *L) {
    check_pattern(L, "gmatch", true, false);
    return call_original(L);
}
static int guarded_gsub(lua_State *L) {
    check_pattern(L, "gsub", false, false);
    return call_original(L);
}

/* Replaces lib[name] by a closure of f over the original. */
static void wrap(lua_State *L, int lib, const char *name, lua_CFunction f) {
    lua_getfield(L, lib, name);
    lua_pushcclosure(L, f, 1);
    lua_setfield(L, lib, name);
}

void tle_guard_base(lua_State *L) {
    lua_newtable(L); /* the finalizers' ephemeron table */
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &finalizers_key);
    lua_pushcfunction(L, guarded_setmetatable);
    lua_setglobal(L, "setmetatable");
    lua_pushglobaltable(L);
    wrap(L, lua_gettop(L), "xpcall", guarded_xpcall);
    lua_pop(L, 1);
    lua_getglobal(L, LUA_STRLIBNAME); /* also the strings' __index: s:find(...) */
    int string = lua_gettop(L);
    wrap(L, string, "find", guarded_find);
    wrap(L, string, "match", guarded_match);
    wrap(L, string, "gmatch", guarded_gmatch);
    wrap(L, string, "gsub", guarded_gsub);
    lua_pop(L, 1);
}
