/* The embedding sandbox: the standard libraries a state opens and what it takes from them. */
#include <lauxlib.h>
#include <lualib.h>

#include "embed_internal.h"

void tle_open_libraries(lua_State *L, bool sandbox) {
    if (!sandbox) {
        luaL_openlibs(L);
        return;
    }
    /* no io, no debug (linit.c's list less those two) */
    static const luaL_Reg libraries[] = {
        {LUA_GNAME, luaopen_base},          {LUA_LOADLIBNAME, luaopen_package},
        {LUA_COLIBNAME, luaopen_coroutine}, {LUA_TABLIBNAME, luaopen_table},
        {LUA_OSLIBNAME, luaopen_os},        {LUA_STRLIBNAME, luaopen_string},
        {LUA_MATHLIBNAME, luaopen_math},    {LUA_UTF8LIBNAME, luaopen_utf8},
    };
    for (size_t i = 0; i < sizeof libraries / sizeof libraries[0]; i++) {
        luaL_requiref(L, libraries[i].name, libraries[i].func, 1);
        lua_pop(L, 1);
    }
}

/* load(chunk, chunkname, mode, env) with the mode forced to "t": binary chunks are refused (the
   original load is upvalue 1). */
static int load_text(lua_State *L) {
    if (lua_gettop(L) < 3) lua_settop(L, 3); /* env stays absent when it was */
    lua_pushliteral(L, "t");
    lua_replace(L, 3);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* The searcher of Lua modules under the sandbox: package.searchpath over the path fixed when the
   sandbox was made (upvalue 1, so changing package.path reaches no other file), then a text-only
   load. */
static int search_text(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    lua_getfield(L, lua_upvalueindex(2), "searchpath");
    lua_pushvalue(L, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_call(L, 2, 2);
    if (lua_isnil(L, -2)) return 1; /* the "no file" lines */
    lua_pop(L, 1);
    const char *file = lua_tostring(L, -1);
    if (luaL_loadfilex(L, file, "t") != LUA_OK)
        return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, file,
                          lua_tostring(L, -1));
    lua_insert(L, -2); /* the chunk, then the file name (its second argument) */
    return 2;
}

/* Keeps only the named fields of the global library `name` (in a new table, also in
   package.loaded). */
static void keep_fields(lua_State *L, const char *name, const char *const *fields) {
    lua_getglobal(L, name);
    lua_newtable(L);
    for (const char *const *f = fields; *f; f++) {
        lua_getfield(L, -2, *f);
        lua_setfield(L, -2, *f);
    }
    lua_pushvalue(L, -1);
    lua_setglobal(L, name);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_insert(L, -2);
    lua_setfield(L, -2, name);
    lua_pop(L, 2);
}

void tle_apply_sandbox(lua_State *L, const char *module_path) {
    static const char *const os_fields[] = {"clock", "time", "date", NULL};
    keep_fields(L, LUA_OSLIBNAME, os_fields);

    lua_pushnil(L);
    lua_setglobal(L, "dofile");
    lua_pushnil(L);
    lua_setglobal(L, "loadfile");
    lua_getglobal(L, "load");
    lua_pushcclosure(L, load_text, 1);
    lua_setglobal(L, "load");

    /* require: preloaded modules and Lua files of tlua's module path, in text; no C modules */
    lua_getglobal(L, LUA_LOADLIBNAME);
    int package = lua_gettop(L);
    lua_pushnil(L);
    lua_setfield(L, package, "loadlib");
    lua_pushliteral(L, "");
    lua_setfield(L, package, "cpath");
    lua_pushstring(L, module_path);
    lua_pushvalue(L, -1);
    lua_setfield(L, package, "path");
    lua_createtable(L, 2, 0); /* package.searchers: the preload searcher, then ours */
    lua_getfield(L, package, "searchers");
    lua_rawgeti(L, -1, 1);
    lua_rawseti(L, -3, 1);
    lua_pop(L, 1);
    lua_pushvalue(L, -2); /* the path */
    lua_pushvalue(L, package);
    lua_pushcclosure(L, search_text, 2);
    lua_rawseti(L, -2, 2);
    lua_setfield(L, package, "searchers");
    lua_pop(L, 2); /* the path, package */
}
