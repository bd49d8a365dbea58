/* Internal header of the embedding library: the state behind tl_lua, its limits and its sandbox. */
#ifndef TLUA_EMBED_INTERNAL_H
#define TLUA_EMBED_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "tlua/embed.h"

struct tl_lua {
    lua_State *L;
    tl_lua_options opts;
    int step;            /* the count hook's period: 1000 instructions, or the limit if less */
    size_t used;         /* bytes of the Lua heap now */
    bool refused;        /* the allocator refused an allocation during this call */
    bool busy;           /* a call of the API is running (no re-entry) */
    uint64_t executed;   /* instructions counted during this call */
    char *string_result; /* tl_lua_get_string's answer, until the next call */
};

/* ---- limits.c --------------------------------------------------------------------------- */
/* The lua_Alloc of every tl_lua state (ud: the tl_lua): counts the heap, refuses to grow it past
   opts.memory_limit (sets refused). */
void *tle_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* Starts the instruction budget of one call (a count hook on the main thread; none without a
   limit) and ends it (the hook removed). */
void tle_limits_begin(tl_lua *T);
void tle_limits_end(tl_lua *T);

/* ---- sandbox.c ------------------------------------------------------------------------------ */
/* Opens the standard libraries a state gets: all of them (sandbox off), or the sandbox's (base,
   package, coroutine, table, os, string, math, utf8). Runs inside a protected call. */
void tle_open_libraries(lua_State *L, bool sandbox);
/* Removes what the sandbox forbids, once tlua is loaded (protected call); module_path (tlua's
   modules, "?" templates) becomes package.path and the only path require searches. */
void tle_apply_sandbox(lua_State *L, const char *module_path);

#endif
