/* The embedding sandbox: the standard libraries a state opens, what it takes from them, and the
   configuration's tl, require and package, built from allow-lists. */
#define _GNU_SOURCE /* realpath */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "binding.h"
#include "embed_internal.h"

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

void tle_open_libraries(lua_State *L, bool sandbox) {
    if (!sandbox) {
        luaL_openlibs(L);
        return;
    }
    /* no io, no debug (linit.c's list less those two); package stays for tlua's own loading */
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
    static const char *const os_fields[] = {"clock", "time", "date", NULL};
    keep_fields(L, LUA_OSLIBNAME, os_fields);
    lua_pushnil(L);
    lua_setglobal(L, "dofile");
    lua_pushnil(L);
    lua_setglobal(L, "loadfile");
    lua_getglobal(L, "load");
    lua_pushcclosure(L, load_text, 1);
    lua_setglobal(L, "load");
    tle_guard_base(L);
}

/* ---- require ----------------------------------------------------------------------------------
   The configuration's require(name): what require gave before (upvalue 2, package.loaded), then
   tlua's allowed modules (upvalue 1: name -> module), then the host's folder (upvalue 3: its real
   path, or nil): name of letters, digits and _ in dot-separated parts, as folders, + ".lua",
   inside the folder once links are followed, loaded as text. Nothing a configuration can change
   is consulted. */
static bool module_name_ok(const char *name) {
    if (!*name || *name == '.') return false;
    for (const char *c = name; *c; c++) {
        bool word = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                    (*c >= '0' && *c <= '9') || *c == '_';
        if (!word && !(*c == '.' && c[1] && c[1] != '.')) return false;
    }
    return true;
}

static int sandbox_require(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    lua_settop(L, 1);
    lua_pushvalue(L, 1);
    if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    lua_pushvalue(L, 1);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) {
        lua_pushvalue(L, 1);
        lua_pushvalue(L, -2);
        lua_rawset(L, lua_upvalueindex(2));
        return 1;
    }
    lua_pop(L, 1);
    const char *folder = lua_tostring(L, lua_upvalueindex(3));
    char real[PATH_MAX];
    bool found = false;
    if (folder && module_name_ok(name) && strlen(folder) + strlen(name) + 6 < PATH_MAX) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s.lua", folder, name);
        for (char *c = path + strlen(folder) + 1; *c; c++)
            if (*c == '.' && strcmp(c, ".lua") != 0) *c = '/';
        size_t len = strlen(folder);
        found = realpath(path, real) && strncmp(real, folder, len) == 0 && real[len] == '/';
    }
    if (!found)
        return luaL_error(L,
                          "module '%s' not found (a sandboxed configuration requires tlua's "
                          "modules and the host's module folder only)",
                          name);
    if (luaL_loadfilex(L, real, "t") != LUA_OK)
        return luaL_error(L, "error loading module '%s':\n\t%s", name, lua_tostring(L, -1));
    lua_pushvalue(L, 1);
    lua_pushstring(L, real);
    lua_call(L, 2, 1);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 1);
    }
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, lua_upvalueindex(2));
    return 1;
}

/* Sets the tensor metatable's __metatable: getmetatable(t) gives its name, so no configuration
   reaches (or changes) the metamethods, __gc among them. */
static void protect_tensor_metatable(lua_State *L) {
    luaL_getmetatable(L, TLB_TENSOR_NAME);
    lua_pushliteral(L, TLB_TENSOR_NAME);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
}

void tle_apply_sandbox(lua_State *L, const tl_lua_options *opts) {
    tlb_restrict(L, opts->read_dirs, opts->write_dirs, opts->network);
    protect_tensor_metatable(L);
    /* the allow-listed tl and modules (tlua/sandbox.lua), with the real require still in place */
    lua_getglobal(L, "require");
    lua_pushliteral(L, "tlua.sandbox");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "view");
    lua_getglobal(L, "tl");
    lua_createtable(L, 0, 3);
    lua_pushboolean(L, tlb_may(L, "read"));
    lua_setfield(L, -2, "read");
    lua_pushboolean(L, tlb_may(L, "write"));
    lua_setfield(L, -2, "write");
    lua_pushboolean(L, opts->network);
    lua_setfield(L, -2, "network");
    lua_call(L, 2, 2); /* view, modules */
    int modules = lua_gettop(L), view = modules - 1;

    /* package: only what require gave this configuration (the standard libraries to start) */
    lua_newtable(L);
    int loaded = lua_gettop(L);
    static const char *const libraries[] = {
        LUA_GNAME,      LUA_COLIBNAME,   LUA_TABLIBNAME,  LUA_OSLIBNAME,
        LUA_STRLIBNAME, LUA_MATHLIBNAME, LUA_UTF8LIBNAME, NULL};
    for (const char *const *lib = libraries; *lib; lib++) {
        lua_getglobal(L, *lib);
        lua_setfield(L, loaded, *lib);
    }
    lua_pushvalue(L, modules);
    lua_pushvalue(L, loaded);
    if (opts->module_dir) {
        char real[PATH_MAX];
        if (!realpath(opts->module_dir, real))
            luaL_error(L, "module_dir '%s' is not a folder", opts->module_dir);
        lua_pushstring(L, real);
    } else {
        lua_pushnil(L);
    }
    lua_pushcclosure(L, sandbox_require, 3);
    lua_setglobal(L, "require");
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, loaded);
    lua_setfield(L, -2, "loaded");
    lua_pushvalue(L, -1);
    lua_setglobal(L, LUA_LOADLIBNAME);
    lua_setfield(L, loaded, LUA_LOADLIBNAME);
    lua_pushvalue(L, view);
    lua_setglobal(L, "tl");
    lua_settop(L, view - 2);
}
