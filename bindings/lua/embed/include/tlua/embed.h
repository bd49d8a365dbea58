/* The embedding API (libtlua_embed): a C host runs Lua configurations and models on the engine. */
#ifndef TLUA_EMBED_H
#define TLUA_EMBED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlua/tlua.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Lua's state, for hosts that include <lua.h> and use tl_lua_state (the same declaration). */
typedef struct lua_State lua_State;

/* A Lua 5.4 state with the engine loaded: the global `tl` holds require("tlua"), and
   require("tlua") (with tl.nn, tl.optim, ...) works, as in the tlua executable. tlua's Lua
   modules are found where $TLUA_LUA_PATH says (a folder), else relative to libtlua_embed (a
   build folder of the source tree, or the install prefix), else in the configured prefix.

   Threads: a tl_lua is not thread-safe. Use each state from one thread at a time (one state per
   thread is the simple rule); states of different threads may run at the same time. The error
   message of tl_last_error() belongs to the calling thread. Do not call these functions from
   Lua code running in the same state (a C function of the host called by Lua).

   Errors: every function returns TL_OK or a non-OK status and sets tl_last_error() to the
   message: for a Lua error the Lua message (with its position) followed by a traceback, and
   the state stays usable (the next call starts afresh). Statuses:
     TL_ERR_ARGUMENT  NULL arguments or bad options, a file that cannot be read, a syntax error,
                      a global function or a value that is missing or has another type, a
                      function that returned another number or type of values;
     TL_ERR_MEMORY    the memory limit (or the process) refused an allocation;
     TL_ERR_RUNTIME   an error raised while running Lua code (tlua's own errors included), the
                      instruction limit. */
typedef struct tl_lua tl_lua;

typedef struct tl_lua_options {
    /* Run untrusted configuration code: no io library; os holds only clock, time and date; no
       debug library; no dofile or loadfile; load() and require() compile text chunks only
       (binary chunks are refused); no C modules (no package.loadlib, no C searchers, cpath
       empty) and package.path holds tlua's modules only; print, the coroutine, string, table,
       math and utf8 libraries stay. tl.save and tl.load still read and write checkpoints: a host
       that forbids files removes them from tl (through tl_lua_state). */
    bool sandbox;
    /* The most bytes the state's Lua heap may hold (0: no limit), counted by its allocator:
       tlua and tl.nn take about 200 KiB of it; tensor storage lives outside the Lua heap and
       is not counted. Going over it is a "memory limit ... exceeded" error (TL_ERR_MEMORY). */
    size_t memory_limit;
    /* The most Lua VM instructions one call of tl_lua_dofile, tl_lua_dostring, tl_lua_call,
       tl_lua_get_number or tl_lua_get_string may run, coroutines included (0: no limit),
       counted by a count hook every 1000 instructions (so to within 1000 per coroutine). Time
       spent inside C functions (tensor ops) is not counted. Going over it is an "instruction
       limit ... exceeded" error (TL_ERR_RUNTIME) that pcall in the script cannot get past. */
    uint64_t instruction_limit;
} tl_lua_options;

/* Opens a state into *out with opts (NULL: the defaults, all zero: no sandbox, no limits). On
   failure *out is NULL. */
tl_status tl_lua_open(const tl_lua_options *opts, tl_lua **out);

/* Runs a Lua file (text only under the sandbox) in the global environment; results are dropped. */
tl_status tl_lua_dofile(tl_lua *L, const char *path);

/* Runs a chunk of Lua source; chunkname names it in messages (Lua's convention: "=name" as is,
   "@file" a file; NULL: "=tl_lua_dostring"). */
tl_status tl_lua_dostring(tl_lua *L, const char *chunk, const char *chunkname);

/* Calls the function at global_function (a global name or a dotted path, "model.forward") with
   the n_in tensors of in (the function gets its own references) and expects exactly n_out
   tensors back: out[i] gets a new reference to the i-th (tl_release each). On failure every
   out[i] is NULL. in may be NULL when n_in is 0, out when n_out is 0. */
tl_status tl_lua_call(tl_lua *L, const char *global_function, tl_tensor *const *in, int n_in,
                      tl_tensor **out, int n_out);

/* The number at a dotted path of globals: "train.lr" is train.lr; a segment of digits indexes
   an array ("model.sizes.2" is model.sizes[2]). A missing value, or one that is not a number,
   is an error (a numeric string is not a number). */
tl_status tl_lua_get_number(tl_lua *L, const char *dotted_path, double *out);

/* The string at a dotted path, as tl_lua_get_number. *out stays valid until the next call on
   this state (or tl_lua_close): copy it to keep it. */
tl_status tl_lua_get_string(tl_lua *L, const char *dotted_path, const char **out);

/* The Lua state, for hosts that use Lua's own C API beside this one (NULL for NULL). The
   limits and the error translation apply only to calls made through this API. */
lua_State *tl_lua_state(tl_lua *L);

/* Closes the state: Lua's references to tensors are dropped (the host's stay valid). NULL is
   fine. */
void tl_lua_close(tl_lua *L);

#ifdef __cplusplus
}
#endif

#endif
