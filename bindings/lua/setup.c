/* A new state of the tlua executable or of libtlua_embed: tlua.core, the module path, tl. */
#define _GNU_SOURCE /* dladdr, realpath */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "binding.h"

/* Where the Lua modules lie relative to an installed binary's folder (CMake computes them from
   the install dirs) and the configured install folder itself. */
#ifndef TLUA_LUADIR_FROM_BINDIR
#define TLUA_LUADIR_FROM_BINDIR "../share/lua/5.4"
#endif
#ifndef TLUA_LUADIR_FROM_LIBDIR
#define TLUA_LUADIR_FROM_LIBDIR "../share/lua/5.4"
#endif
#ifndef TLUA_INSTALL_LUADIR
#define TLUA_INSTALL_LUADIR "/usr/local/share/lua/5.4"
#endif

/* The folder of the file that holds `symbol` (dladdr), or of the executable (symbol NULL), in
   dir; false when it cannot be found. */
static bool binary_dir(const void *symbol, char *dir, size_t size) {
    char path[PATH_MAX];
    Dl_info info;
    if (symbol && dladdr(symbol, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
        if (!realpath(info.dli_fname, path)) return false;
    } else {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0) return false;
        path[n] = '\0';
    }
    char *slash = strrchr(path, '/');
    if (!slash) return false;
    *slash = '\0';
    return snprintf(dir, size, "%s", path) < (int)size;
}

/* True when dir holds tlua's Lua modules (dir/tlua/init.lua). */
static bool has_modules(const char *dir) {
    char probe[PATH_MAX + 32];
    if (snprintf(probe, sizeof probe, "%s/tlua/init.lua", dir) >= (int)sizeof probe) return false;
    return access(probe, R_OK) == 0;
}

const char *tlb_module_dir(const void *symbol, char *dir, size_t size) {
    char base[PATH_MAX];
    if (binary_dir(symbol, base, sizeof base)) {
        /* a build folder of the source tree, then an installed bin/ or lib/ */
        const char *const relative[] = {"../bindings/lua", TLUA_LUADIR_FROM_BINDIR,
                                        TLUA_LUADIR_FROM_LIBDIR};
        for (size_t i = 0; i < sizeof relative / sizeof relative[0]; i++) {
            char candidate[PATH_MAX * 2];
            snprintf(candidate, sizeof candidate, "%s/%s", base, relative[i]);
            if (!has_modules(candidate)) continue;
            if (!realpath(candidate, dir) && snprintf(dir, size, "%s", candidate) >= (int)size)
                continue;
            return dir;
        }
    }
    if (has_modules(TLUA_INSTALL_LUADIR) &&
        snprintf(dir, size, "%s", TLUA_INSTALL_LUADIR) < (int)size)
        return dir;
    return NULL;
}

/* Pushes the package.path entries for tlua's Lua modules ("" when none is found). */
static void push_module_path(lua_State *L, const void *symbol, bool ignore_env) {
    const char *env = ignore_env ? NULL : getenv("TLUA_LUA_PATH");
    if (env && env[0]) {
        if (strchr(env, '?'))
            lua_pushfstring(L, "%s;", env);
        else
            lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", env, env);
        return;
    }
    char dir[PATH_MAX];
    if (tlb_module_dir(symbol, dir, sizeof dir))
        lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", dir, dir);
    else
        lua_pushliteral(L, "");
}

void tlb_prepare_state(lua_State *L, const void *symbol, bool ignore_env) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, luaopen_tlua_core);
    lua_setfield(L, -2, "tlua.core");
    lua_pop(L, 1);
    push_module_path(L, symbol, ignore_env);
    lua_getfield(L, -2, "path");
    lua_concat(L, 2);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
}

int tlb_open_tl(lua_State *L) {
    lua_getglobal(L, "require");
    lua_pushliteral(L, "tlua");
    lua_call(L, 1, 1);
    lua_setglobal(L, "tl");
    return 0;
}

int tlb_traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}
