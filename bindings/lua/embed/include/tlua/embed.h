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
                      instruction and time limits.
   States side by side: tensors may pass from one state to another through the host. A graph
   recorded in one state (a custom Function, a grad-ready hook) is differentiated in that state:
   a backward of it started in another state, or after its state closed, is an error naming the
   states (they are numbered 1, 2, ... as they open). */
typedef struct tl_lua tl_lua;

typedef struct tl_lua_options {
    /* Run untrusted configuration code. The state is built from an allow-list, not from the full
       libraries with parts removed:
       - globals: the base library less dofile and loadfile; load() compiles text only (binary
         chunks are refused) in the global environment unless given one; setmetatable refuses
         nothing but runs a __gc finalizer under the limits (see below); xpcall's message
         handler does not run once a limit is hit; the coroutine, string, table, math and utf8
         libraries; os with clock, time and date only; print. No io, no debug, no C modules.
       - tl: a table of the functions that touch nothing outside the state (tensors, ops,
         autograd, tl.nn, tl.optim, tl.autograd, tl.data's datasets and loaders, tl.cuda's
         queries); tl.save with write_dirs, tl.load and the data readers with read_dirs (or
         write_dirs), tl.distributed with network. Files are opened only inside those folders,
         resolved with links followed (a link out of a folder is refused), checked where the
         C code opens them; a refusal reads the same whether the file exists or not.
       - require(name): "tlua" (the sandboxed tl) and tlua's Lua modules of the allow-list, then
         module_dir/name.lua (dots as folders) in text; one fixed searcher (package.path,
         package.searchers and package.searchpath are not consulted; package.loaded holds only
         what require gave this configuration).
       - settings of the thread or process a configuration can change (grad mode, autocast,
         the number of threads, the random stream, sync checks, matmul precision) are the
         state's own: each call starts with grad on and autocast off and the state's random
         stream, threads, sync checks and precision; when it returns, however it returns, the
         host's are back. */
    bool sandbox;
    /* The most bytes the state may hold (0: no limit): its Lua heap (counted by its allocator;
       tlua and tl.nn take about 300 KiB of it) plus the storage of every tensor made while one
       of its calls runs, on the CPU and on GPUs, until that tensor is freed (a tensor returned
       to the host stays counted until the host releases it). Going over it is a "memory limit
       ... exceeded" error (TL_ERR_MEMORY). */
    size_t memory_limit;
    /* The most Lua VM instructions one call of tl_lua_dofile, tl_lua_dostring, tl_lua_call,
       tl_lua_get_number or tl_lua_get_string may run, coroutines, message handlers and
       finalizers included (0: no limit), counted by a count hook every 1000 instructions (so to
       within 1000 per coroutine). Going over it is an "instruction limit ... exceeded" error
       (TL_ERR_RUNTIME) that pcall in the script cannot get past. Finalizers (__gc) are under
       the limits only in a sandbox: Lua runs a __gc metamethod with hooks off, and only the
       sandbox's setmetatable routes them through a guard (without a sandbox the script also has
       debug and can remove any hook: limits without a sandbox bound honest code only). */
    uint64_t instruction_limit;
    /* The most wall-clock milliseconds one call may take (0: no limit), checked by the same
       hook and before every tensor op (no kernel starts after it): a "time limit ... exceeded"
       error (TL_ERR_RUNTIME). Not bounded by either limit: one kernel or one C function that
       started before the limit runs to its end (a 4096^3 matmul on the CPU takes seconds), so
       under the sandbox, string.find/match/gmatch/gsub refuse a pattern whose worst case
       (subject length to the power of its repetition items) exceeds what is left of the
       instruction or time budget, and sort, rep, concat and format are bounded by the memory
       limit. */
    uint64_t time_limit_ms;
    /* Sandbox grants (ignored without the sandbox): NULL-ended lists of folders whose files
       tl.load and the data readers may read (read_dirs; write_dirs are readable too) and
       tl.save may write (write_dirs); NULL: none. Every folder must exist. */
    const char *const *read_dirs;
    const char *const *write_dirs;
    /* A folder of the host's Lua modules for require (NULL: tlua's modules only). */
    const char *module_dir;
    /* Whether tl.distributed (sockets to the launcher's store, NCCL) is available. */
    bool network;
} tl_lua_options;

/* Opens a state into *out with opts (NULL: the defaults, all zero: no sandbox, no limits). On
   failure *out is NULL. With the sandbox, a granted folder or module_dir that is not an existing
   folder is a bad option (TL_ERR_ARGUMENT). */
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

/* Closes the state: Lua's references to tensors are dropped (the host's stay valid). In a
   sandbox the configuration's finalizers run under the state's limits (one budget for all of
   them; without one, as Lua runs them: see instruction_limit); one that
   goes over is abandoned, the others still run, memory is freed all the same, and the result is
   TL_ERR_RUNTIME with a message naming the first abandoned finalizer's error. NULL is fine. */
tl_status tl_lua_close(tl_lua *L);

#ifdef __cplusplus
}
#endif

#endif
