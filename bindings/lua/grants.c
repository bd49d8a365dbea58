/* What a sandboxed state may touch outside itself: folders it may read or write, the network.
   The checks sit in the C functions that open files or sockets, so no Lua path reaches around
   them; a state without grants (the tlua executable, tlua.core in a plain lua) is unrestricted. */
#define _GNU_SOURCE /* realpath */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "binding.h"

typedef struct grants {
    bool network;
    int n_read, n_write;
    char **read, **write; /* real paths of the folders, without a trailing slash ("/" stays) */
} grants;

static const char grants_key = 'G';

static void free_list(char **list, int n) {
    for (int i = 0; list && i < n; i++) free(list[i]);
    free(list);
}

static int grants_gc(lua_State *L) {
    grants *g = lua_touserdata(L, 1);
    if (g) {
        free_list(g->read, g->n_read);
        free_list(g->write, g->n_write);
        g->read = g->write = NULL;
        g->n_read = g->n_write = 0;
    }
    return 0;
}

static grants *find(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &grants_key);
    grants *g = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return g;
}

/* Copies the real paths of the NULL-ended folder list into *out (raises on a folder that does
   not resolve or is not a folder). */
static int copy_folders(lua_State *L, grants *g, const char *const *dirs, char ***out,
                        const char *what) {
    int n = 0;
    while (dirs && dirs[n]) n++;
    if (n == 0) return 0;
    *out = calloc((size_t)n, sizeof **out);
    if (!*out) luaL_error(L, "out of memory");
    for (int i = 0; i < n; i++) {
        char real[PATH_MAX];
        struct stat st;
        /* realpath may set errno when it succeeds: read it only on failure */
        if (!realpath(dirs[i], real) || stat(real, &st) != 0)
            luaL_error(L, "%s folder '%s' is not a folder (%s)", what, dirs[i], strerror(errno));
        if (!S_ISDIR(st.st_mode))
            luaL_error(L, "%s folder '%s' is not a folder (not a directory)", what, dirs[i]);
        (*out)[i] = strdup(real);
        if (!(*out)[i]) luaL_error(L, "out of memory");
        if (what[0] == 'r')
            g->n_read = i + 1;
        else
            g->n_write = i + 1;
    }
    return n;
}

void tlb_restrict(lua_State *L, const char *const *read_dirs, const char *const *write_dirs,
                  bool network) {
    grants *g = lua_newuserdatauv(L, sizeof *g, 0);
    memset(g, 0, sizeof *g);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, grants_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &grants_key); /* collected with the state, also on error */
    g->network = network;
    copy_folders(L, g, read_dirs, &g->read, "readable");
    copy_folders(L, g, write_dirs, &g->write, "writable");
}

bool tlb_is_restricted(lua_State *L) {
    return find(L) != NULL;
}

bool tlb_may(lua_State *L, const char *what) {
    grants *g = find(L);
    if (!g) return true;
    if (strcmp(what, "network") == 0) return g->network;
    if (strcmp(what, "read") == 0) return g->n_read + g->n_write > 0;
    if (strcmp(what, "write") == 0) return g->n_write > 0;
    return false;
}

/* True when the real path lies inside one of the folders. */
static bool inside(const char *real, char *const *folders, int n) {
    for (int i = 0; i < n; i++) {
        size_t len = strlen(folders[i]);
        if (strcmp(folders[i], "/") == 0) return true;
        if (strncmp(real, folders[i], len) == 0 && (real[len] == '\0' || real[len] == '/'))
            return true;
    }
    return false;
}

/* The real path of a file to write: its folder resolved (links followed) and its own name,
   itself resolved when it is a link to follow. False when the folder does not resolve. */
static bool resolve_for_write(const char *path, char *out) {
    char copy[PATH_MAX];
    if (strlen(path) >= sizeof copy) return false;
    strcpy(copy, path);
    char *slash = strrchr(copy, '/');
    const char *name = slash ? slash + 1 : copy;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return false;
    char folder[PATH_MAX];
    if (slash == copy)
        strcpy(folder, "/");
    else if (slash) {
        *slash = '\0';
        if (!realpath(copy, folder)) return false;
    } else if (!realpath(".", folder))
        return false;
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) return realpath(path, out) != NULL;
    size_t len = strlen(folder), name_len = strlen(name);
    bool root = strcmp(folder, "/") == 0;
    if (len + 1 + name_len >= PATH_MAX) return false;
    memcpy(out, folder, len);
    if (!root) out[len++] = '/';
    memcpy(out + len, name, name_len + 1);
    return true;
}

/* Whether path may be opened for mode ('r' or 'w') under g; real gets the resolved path. */
static bool allowed(const grants *g, const char *path, char mode, char *real) {
    if (mode == 'w') return resolve_for_write(path, real) && inside(real, g->write, g->n_write);
    return realpath(path, real) &&
           (inside(real, g->read, g->n_read) || inside(real, g->write, g->n_write));
}

const char *tlb_check_file(lua_State *L, int idx, char mode, const char *op) {
    const char *path = lua_tostring(L, idx);
    grants *g = find(L);
    if (!g || !path) return path;
    char real[PATH_MAX];
    /* the same message for a file outside the grants and one that does not exist there: no
       answer tells what lies outside */
    if (!allowed(g, path, mode, real)) {
        if (mode == 'w')
            tlb_errorf(L, "%s: cannot write '%s': not inside a folder the host granted for writing",
                       op, path);
        tlb_errorf(L,
                   "%s: cannot read '%s': not a file inside the folders the host granted for "
                   "reading",
                   op, path);
    }
    lua_pushstring(L, real);
    lua_replace(L, idx); /* the resolved path is the one opened, anchored at idx */
    return lua_tostring(L, idx);
}

bool tlb_file_readable(lua_State *L, const char *path) {
    grants *g = find(L);
    char real[PATH_MAX];
    if (g && !allowed(g, path, 'r', real)) return false;
    FILE *f = fopen(g ? real : path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

void tlb_check_network(lua_State *L, const char *op) {
    if (!tlb_may(L, "network"))
        tlb_errorf(L, "%s: this state has no network access (the host did not grant it)", op);
}

void tlb_check_process(lua_State *L, const char *op) {
    if (tlb_is_restricted(L))
        tlb_errorf(L, "%s: a sandboxed state may not change the process's devices", op);
}
