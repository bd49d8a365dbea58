/* Internal header of the embedding library: the state behind tl_lua, its limits, its sandbox and
   the settings it keeps apart from the host's. */
#ifndef TLUA_EMBED_INTERNAL_H
#define TLUA_EMBED_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "tlua/autograd.h"
#include "tlua/embed.h"
#include "tlua/runtime.h"

/* The thread and process settings a configuration can change: the state's own values, or the
   host's while a call runs. */
typedef struct tle_settings {
    bool grad_enabled;
    tl_autocast_state autocast;
    int num_threads;
    tl_rng_state rng;
    bool sync_checks;
    char matmul_precision[16];
} tle_settings;

struct tl_lua {
    lua_State *L;
    tl_lua_options opts;
    int step;                 /* the count hook's period: 1000 instructions, or the limit if less */
    tl_memory_budget *budget; /* the Lua heap and the tensors made during calls */
    bool refused;             /* an allocation was refused for the limit during this call */
    uint64_t tensor_refusals; /* the budget's refusals when this call began */
    bool busy;                /* a call of the API is running (no re-entry) */
    bool over;                /* this call went over a limit (the hook raises at once) */
    uint64_t executed;        /* instructions counted during this call */
    double deadline;          /* tl_clock() time at which this call's time runs out (0: none) */
    char *string_result;      /* tl_lua_get_string's answer, until the next call */
    tle_settings own, host;   /* the state's settings; the host's during a call */
    char finalizer_error[256]; /* the first finalizer abandoned during tl_lua_close */
};

/* The tl_lua of a Lua state made by tl_lua_open (its allocator's userdata). */
tl_lua *tle_of(lua_State *L);

/* ---- limits.c --------------------------------------------------------------------------- */
/* The lua_Alloc of every tl_lua state (ud: the tl_lua): charges the heap to the state's budget,
   refused past opts.memory_limit (sets refused). */
void *tle_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* Starts the limits of one call: the instruction and time budgets (a count hook on the main
   thread, none without a limit), the thread's deadline and memory budget; and ends them. */
void tle_limits_begin(tl_lua *T);
void tle_limits_end(tl_lua *T);
/* Puts the count hook on a new thread L1 (a coroutine made by C code: a finalizer's). */
void tle_limits_hook(tl_lua *T, lua_State *L1);
/* Matcher steps a pattern function may still take in this call (instructions and time left;
   UINT64_MAX without limits). */
double tle_steps_left(tl_lua *T);
/* Whether this call went over its instruction or time limit. */
bool tle_over(tl_lua *T);

/* ---- guards.c: the sandbox's base functions that code cannot get around -----------------------
 */
/* Replaces setmetatable (a __gc finalizer runs in a coroutine under the limits), xpcall (its
   message handler does not run once a limit is hit) and string.find/match/gmatch/gsub (patterns
   bounded by the budget left). Runs before tlua loads, so tlua's modules get them too. */
void tle_guard_base(lua_State *L);

/* ---- sandbox.c ------------------------------------------------------------------------------ */
/* Opens the standard libraries a state gets: all of them (sandbox off), or the sandbox's (base,
   package, coroutine, table, os, string, math, utf8), then what the sandbox takes from them
   (os cut, load in text, no dofile/loadfile) and tle_guard_base. Runs inside a protected call. */
void tle_open_libraries(lua_State *L, bool sandbox);
/* Once tlua is loaded (protected call): the grants, the allow-listed tl as the global tl, and
   the configuration's require and package, which resolve tlua's allowed modules and
   opts.module_dir only. */
void tle_apply_sandbox(lua_State *L, const tl_lua_options *opts);

/* ---- settings.c ----------------------------------------------------------------------------- */
/* The thread's settings now, into s. */
void tle_settings_read(tle_settings *s);
/* Makes s the thread's settings. */
void tle_settings_write(const tle_settings *s);
/* Around a call: the host's settings saved and the state's put in place (grad on, autocast
   off); then the state's saved and the host's put back. */
void tle_settings_enter(tl_lua *T);
void tle_settings_leave(tl_lua *T);

#endif
