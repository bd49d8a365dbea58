/* The embedding API (tlua/embed.h): states, protected calls, values and tensors across. */
#define _GNU_SOURCE /* realpath */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lauxlib.h>
#include <lualib.h>

#include "binding.h"
#include "embed_internal.h"
#include "tlua/runtime.h"

/* What a protected body needs and answers: the state, the API function's name for messages and,
   for errors the body finds itself (a missing function, a wrong result), their status and text. */
typedef struct call_ctx {
    tl_lua *T;
    const char *api;
    tl_status status; /* set with message by api_error */
    char message[768];
    /* arguments and answers of the bodies */
    const char *name, *chunk, *chunkname;
    tl_tensor *const *in;
    tl_tensor **out;
    int n_in, n_out;
    double number;
} call_ctx;

/* Raises an error of the API (not of Lua code): its status and message travel in c, so no
   traceback is added. */
static int api_error(lua_State *L, call_ctx *c, tl_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int api_error(lua_State *L, call_ctx *c, tl_status status, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(c->message, sizeof c->message, fmt, args);
    va_end(args);
    c->status = status;
    lua_pushnil(L);
    return lua_error(L);
}

/* Whether the call failed for the memory limit: an allocation of the heap or of a tensor was
   refused during it and the error says so (a script may have caught a refusal and failed later
   for another reason). */
static bool memory_failure(tl_lua *T, int status, const char *message) {
    bool refused =
        T->refused || (T->budget && tl_memory_budget_refusals(T->budget) != T->tensor_refusals);
    if (!refused) return false;
    return status == LUA_ERRMEM || status == LUA_ERRERR ||
           (message && (strstr(message, "not enough memory") || strstr(message, "memory limit")));
}

/* Turns the status of lua_pcall (error value on top of the stack) into the API's. */
static tl_status translate(lua_State *L, call_ctx *c, int status) {
    if (status == LUA_OK) return TL_OK;
    if (c->status != TL_OK) return tl_error(c->status, "%s: %s", c->api, c->message);
    tl_lua *T = c->T;
    const char *message = lua_tostring(L, -1);
    if (memory_failure(T, status, message)) {
        if (T->opts.memory_limit)
            return tl_error(TL_ERR_MEMORY,
                            "%s: memory limit of %zu bytes exceeded (the Lua heap and tensors)%s%s",
                            c->api, T->opts.memory_limit, message ? ": " : "",
                            message ? message : "");
        return tl_error(TL_ERR_MEMORY, "%s: not enough memory", c->api);
    }
    if (status == LUA_ERRMEM) return tl_error(TL_ERR_MEMORY, "%s: not enough memory", c->api);
    if (status == LUA_ERRERR && tle_over(T))
        return tl_error(TL_ERR_RUNTIME, "%s: %s limit exceeded (in a message handler)", c->api,
                        T->deadline > 0 && tl_clock() >= T->deadline ? "time" : "instruction");
    return tl_error(TL_ERR_RUNTIME, "%s: %s", c->api,
                    message ? message : "(error object is not a string)");
}

/* Runs body(c) protected, with a traceback for Lua errors and this call's limits and settings;
   the state's stack is left as it was, the host's settings restored however the body ended. */
static tl_status run(call_ctx *c, lua_CFunction body) {
    tl_lua *T = c->T;
    lua_State *L = T->L;
    if (T->busy)
        return tl_error(TL_ERR_ARGUMENT, "%s: the state is running a call (no call from Lua code)",
                        c->api);
    free(T->string_result);
    T->string_result = NULL;
    int top = lua_gettop(L);
    if (!lua_checkstack(L, 3)) return tl_error(TL_ERR_MEMORY, "%s: Lua stack overflow", c->api);
    T->busy = true;
    tle_settings_enter(T);
    tle_limits_begin(T);
    lua_pushcfunction(L, tlb_traceback);
    lua_pushcfunction(L, body);
    lua_pushlightuserdata(L, c);
    tl_status status = translate(L, c, lua_pcall(L, 1, 0, top + 1));
    tle_limits_end(T);
    tle_settings_leave(T);
    T->busy = false;
    lua_settop(L, top);
    return status;
}

/* A failed load (status, message on the stack) as the API's error. */
static int load_failed(lua_State *L, call_ctx *c, int status) {
    if (status == LUA_ERRMEM && c->T->refused)
        return api_error(L, c, TL_ERR_MEMORY,
                         "memory limit of %zu bytes exceeded (the Lua heap and tensors)",
                         c->T->opts.memory_limit);
    if (status == LUA_ERRMEM) return api_error(L, c, TL_ERR_MEMORY, "not enough memory");
    return api_error(L, c, TL_ERR_ARGUMENT, "%s", lua_tostring(L, -1));
}

/* "nil", or "a <type>" ("a tlua.Tensor") for the value at idx, for messages. */
static const char *kind(lua_State *L, int idx) {
    if (lua_isnil(L, idx)) return "nil";
    return lua_pushfstring(L, "a %s", tlb_typename(L, idx)); /* stays until the error */
}

/* Pushes the value at a dotted path of globals ("a.b.2" is a.b[2]) or raises its error. */
static void push_path(lua_State *L, call_ctx *c, const char *path) {
    lua_pushglobaltable(L);
    const char *segment = path;
    for (;;) {
        const char *dot = strchr(segment, '.');
        size_t len = dot ? (size_t)(dot - segment) : strlen(segment);
        if (len == 0) api_error(L, c, TL_ERR_ARGUMENT, "'%s' has an empty name", path);
        if (segment != path && !lua_istable(L, -1)) {
            if (luaL_getmetafield(L, -1, "__index") == LUA_TNIL)
                api_error(L, c, TL_ERR_ARGUMENT, "no value at '%s': '%.*s' is %s, not a table",
                          path, (int)(segment - 1 - path), path, kind(L, -1));
            lua_pop(L, 1);
        }
        size_t digits = strspn(segment, "0123456789");
        if (digits == len && len <= 18)
            lua_pushinteger(L, (lua_Integer)strtoll(segment, NULL, 10));
        else
            lua_pushlstring(L, segment, len);
        lua_gettable(L, -2);
        lua_remove(L, -2);
        if (!dot) return;
        if (lua_isnil(L, -1))
            api_error(L, c, TL_ERR_ARGUMENT, "no value at '%s': '%.*s' is nil", path,
                      (int)(dot - path), path);
        segment = dot + 1;
    }
}

/* ---- open and close ---------------------------------------------------------------------- */
static int open_body(lua_State *L) {
    call_ctx *c = lua_touserdata(L, 1);
    bool sandbox = c->T->opts.sandbox;
    tle_open_libraries(L, sandbox);
    /* the incremental collector, as the tlua executable (main.c says why) */
    lua_gc(L, LUA_GCINC, 0, 0, 0);
    lua_getglobal(L, LUA_LOADLIBNAME);
    if (sandbox) { /* tlua's modules only, found in text, none of C */
        lua_pushliteral(L, "");
        lua_setfield(L, -2, "path");
        lua_pushliteral(L, "");
        lua_setfield(L, -2, "cpath");
        lua_getfield(L, -1, "searchers");
        for (int i = 3; i <= 4; i++) {
            lua_pushnil(L);
            lua_rawseti(L, -2, i);
        }
        lua_pop(L, 1);
        lua_pushnil(L);
        lua_setfield(L, -2, "loadlib");
    }
    tlb_prepare_state(L, (const void *)tl_lua_open, false);
    tlb_open_tl(L);
    if (sandbox) {
        /* every module a configuration may get, loaded now with tlua's own require */
        static const char *const modules[] = {"tlua.nn",   "tlua.optim", "tlua.autograd",
                                              "tlua.data", "tlua.cuda",  NULL};
        for (const char *const *m = modules; *m; m++) {
            lua_getglobal(L, "require");
            lua_pushstring(L, *m);
            lua_call(L, 1, 0);
        }
        if (c->T->opts.network) {
            lua_getglobal(L, "require");
            lua_pushliteral(L, "tlua.distributed");
            lua_call(L, 1, 0);
        }
        tle_apply_sandbox(L, &c->T->opts);
    }
    return 0;
}

static int panic(lua_State *L) {
    const char *message = lua_tostring(L, -1);
    fprintf(stderr, "tlua embed: unprotected Lua error (%s)\n", message ? message : "?");
    return 0; /* Lua aborts */
}

/* The sandbox's folders (opts->read_dirs, write_dirs, module_dir) exist and are folders: bad
   options are TL_ERR_ARGUMENT, found before any state is made. */
static tl_status check_folder(const char *what, const char *dir) {
    char real[PATH_MAX];
    struct stat st;
    const char *why; /* realpath may set errno when it succeeds: read it only on failure */
    if (!realpath(dir, real) || stat(real, &st) != 0)
        why = strerror(errno);
    else if (!S_ISDIR(st.st_mode))
        why = "not a directory";
    else
        return TL_OK;
    return tl_error(TL_ERR_ARGUMENT, "tl_lua_open: %s '%s' is not a folder (%s)", what, dir, why);
}

static tl_status check_folders(const tl_lua_options *opts) {
    const char *const *lists[2] = {opts->read_dirs, opts->write_dirs};
    static const char *const names[2] = {"readable folder", "writable folder"};
    for (int l = 0; l < 2; l++)
        for (int i = 0; lists[l] && lists[l][i]; i++) TL_TRY(check_folder(names[l], lists[l][i]));
    if (opts->module_dir) TL_TRY(check_folder("module_dir", opts->module_dir));
    return TL_OK;
}

tl_status tl_lua_open(const tl_lua_options *opts, tl_lua **out) {
    if (!out) return tl_error(TL_ERR_ARGUMENT, "tl_lua_open: out is NULL");
    *out = NULL;
    if (opts && opts->sandbox) TL_TRY(check_folders(opts));
    tl_lua *T = calloc(1, sizeof *T);
    if (!T) return tl_error(TL_ERR_MEMORY, "tl_lua_open: out of memory");
    if (opts) T->opts = *opts;
    if (!T->opts.sandbox) { /* grants mean nothing without the sandbox */
        T->opts.read_dirs = T->opts.write_dirs = NULL;
        T->opts.module_dir = NULL;
    }
    uint64_t limit = T->opts.instruction_limit, time_limit = T->opts.time_limit_ms;
    T->step = limit && limit < 1000 ? (int)limit : 1000;
    if (T->opts.memory_limit && tl_memory_budget_new(T->opts.memory_limit, &T->budget) != TL_OK) {
        free(T);
        return tl_error(TL_ERR_MEMORY, "tl_lua_open: out of memory");
    }
    tle_settings_read(&T->own); /* a state starts with the host's settings */
    T->L = lua_newstate(tle_alloc, T);
    if (!T->L) {
        tl_memory_budget_release(T->budget);
        free(T);
        return tl_error(TL_ERR_MEMORY, "tl_lua_open: cannot create a Lua state%s",
                        opts && opts->memory_limit ? " within the memory limit" : "");
    }
    lua_atpanic(T->L, panic);
    call_ctx c = {.T = T, .api = "tl_lua_open"};
    /* limits of the host's calls, not of loading tlua */
    T->opts.instruction_limit = T->opts.time_limit_ms = 0;
    tl_status status = run(&c, open_body);
    T->opts.instruction_limit = limit;
    T->opts.time_limit_ms = time_limit;
    if (status != TL_OK) {
        tl_lua_close(T);
        return status;
    }
    *out = T;
    return TL_OK;
}

tl_status tl_lua_close(tl_lua *T) {
    if (!T) return TL_OK;
    /* the configuration's finalizers run now, under one budget of the limits */
    tle_settings_enter(T);
    tle_limits_begin(T);
    lua_close(T->L);
    tl_set_thread_deadline(0, 0);
    tl_set_thread_memory_budget(NULL);
    tle_settings_leave(T);
    tl_status status = TL_OK;
    if (T->finalizer_error[0])
        status = tl_error(TL_ERR_RUNTIME, "tl_lua_close: %s", T->finalizer_error);
    tl_memory_budget_release(T->budget); /* tensors still alive keep it */
    free(T->string_result);
    free(T);
    return status;
}

lua_State *tl_lua_state(tl_lua *T) {
    return T ? T->L : NULL;
}

/* ---- running code ------------------------------------------------------------------------ */
static int dofile_body(lua_State *L) {
    call_ctx *c = lua_touserdata(L, 1);
    int status = luaL_loadfilex(L, c->name, c->T->opts.sandbox ? "t" : NULL);
    if (status != LUA_OK) return load_failed(L, c, status);
    lua_call(L, 0, 0);
    return 0;
}

tl_status tl_lua_dofile(tl_lua *T, const char *path) {
    if (!T) return tl_error(TL_ERR_ARGUMENT, "tl_lua_dofile: the state is NULL");
    if (!path) return tl_error(TL_ERR_ARGUMENT, "tl_lua_dofile: path is NULL");
    call_ctx c = {.T = T, .api = "tl_lua_dofile", .name = path};
    return run(&c, dofile_body);
}

static int dostring_body(lua_State *L) {
    call_ctx *c = lua_touserdata(L, 1);
    int status = luaL_loadbufferx(L, c->chunk, strlen(c->chunk), c->chunkname,
                                  c->T->opts.sandbox ? "t" : NULL);
    if (status != LUA_OK) return load_failed(L, c, status);
    lua_call(L, 0, 0);
    return 0;
}

tl_status tl_lua_dostring(tl_lua *T, const char *chunk, const char *chunkname) {
    if (!T) return tl_error(TL_ERR_ARGUMENT, "tl_lua_dostring: the state is NULL");
    if (!chunk) return tl_error(TL_ERR_ARGUMENT, "tl_lua_dostring: chunk is NULL");
    call_ctx c = {.T = T,
                  .api = "tl_lua_dostring",
                  .chunk = chunk,
                  .chunkname = chunkname ? chunkname : "=tl_lua_dostring"};
    return run(&c, dostring_body);
}

/* ---- calls with tensors ------------------------------------------------------------------- */
static int call_body(lua_State *L) {
    call_ctx *c = lua_touserdata(L, 1);
    push_path(L, c, c->name);
    if (!tlb_is_callable(L, -1))
        api_error(L, c, TL_ERR_ARGUMENT, "'%s' is %s, not a function", c->name, kind(L, -1));
    int base = lua_gettop(L) - 1;
    luaL_checkstack(L, c->n_in, "too many tensors");
    for (int i = 0; i < c->n_in; i++) tlb_push_tensor(L, c->in[i]);
    lua_call(L, c->n_in, LUA_MULTRET);
    int n = lua_gettop(L) - base;
    if (n != c->n_out)
        api_error(L, c, TL_ERR_ARGUMENT, "'%s' returned %d value%s, expected %d tensor%s", c->name,
                  n, n == 1 ? "" : "s", c->n_out, c->n_out == 1 ? "" : "s");
    for (int i = base + 1; i <= base + n; i++) {
        if (tlb_peek_tensor(L, i)) continue;
        const char *what = luaL_testudata(L, i, TLB_TENSOR_NAME) ? "a released tensor" : kind(L, i);
        api_error(L, c, TL_ERR_ARGUMENT, "'%s' returned %s as value %d, expected a tensor", c->name,
                  what, i - base);
    }
    for (int i = 0; i < n; i++) c->out[i] = tl_retain(tlb_peek_tensor(L, base + 1 + i));
    return 0;
}

tl_status tl_lua_call(tl_lua *T, const char *global_function, tl_tensor *const *in, int n_in,
                      tl_tensor **out, int n_out) {
    static const char api[] = "tl_lua_call";
    if (out && n_out > 0) memset(out, 0, sizeof *out * (size_t)n_out);
    if (!T) return tl_error(TL_ERR_ARGUMENT, "%s: the state is NULL", api);
    if (!global_function) return tl_error(TL_ERR_ARGUMENT, "%s: global_function is NULL", api);
    if (n_in < 0 || n_out < 0)
        return tl_error(TL_ERR_ARGUMENT, "%s: n_in and n_out must be >= 0, got %d and %d", api,
                        n_in, n_out);
    if (n_in > 0 && !in) return tl_error(TL_ERR_ARGUMENT, "%s: in is NULL (n_in %d)", api, n_in);
    if (n_out > 0 && !out)
        return tl_error(TL_ERR_ARGUMENT, "%s: out is NULL (n_out %d)", api, n_out);
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return tl_error(TL_ERR_ARGUMENT, "%s: in[%d] is NULL", api, i);
    call_ctx c = {.T = T,
                  .api = api,
                  .name = global_function,
                  .in = in,
                  .n_in = n_in,
                  .out = out,
                  .n_out = n_out};
    return run(&c, call_body);
}

/* ---- values at dotted paths --------------------------------------------------------------- */
static int get_number_body(lua_State *L) {
    call_ctx *c = lua_touserdata(L, 1);
    push_path(L, c, c->name);
    if (lua_type(L, -1) != LUA_TNUMBER)
        api_error(L, c, TL_ERR_ARGUMENT, "'%s' is %s, expected a number", c->name, kind(L, -1));
    c->number = lua_tonumber(L, -1);
    return 0;
}

tl_status tl_lua_get_number(tl_lua *T, const char *dotted_path, double *out) {
    if (!T) return tl_error(TL_ERR_ARGUMENT, "tl_lua_get_number: the state is NULL");
    if (!dotted_path) return tl_error(TL_ERR_ARGUMENT, "tl_lua_get_number: dotted_path is NULL");
    if (!out) return tl_error(TL_ERR_ARGUMENT, "tl_lua_get_number: out is NULL");
    call_ctx c = {.T = T, .api = "tl_lua_get_number", .name = dotted_path};
    tl_status status = run(&c, get_number_body);
    if (status == TL_OK) *out = c.number;
    return status;
}

static int get_string_body(lua_State *L) {
    call_ctx *c = lua_touserdata(L, 1);
    push_path(L, c, c->name);
    if (lua_type(L, -1) != LUA_TSTRING)
        api_error(L, c, TL_ERR_ARGUMENT, "'%s' is %s, expected a string", c->name, kind(L, -1));
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    char *copy = malloc(len + 1);
    if (!copy) api_error(L, c, TL_ERR_MEMORY, "out of memory (a string of %zu bytes)", len);
    memcpy(copy, s, len + 1);
    c->T->string_result = copy;
    return 0;
}

tl_status tl_lua_get_string(tl_lua *T, const char *dotted_path, const char **out) {
    if (!T) return tl_error(TL_ERR_ARGUMENT, "tl_lua_get_string: the state is NULL");
    if (!dotted_path) return tl_error(TL_ERR_ARGUMENT, "tl_lua_get_string: dotted_path is NULL");
    if (!out) return tl_error(TL_ERR_ARGUMENT, "tl_lua_get_string: out is NULL");
    call_ctx c = {.T = T, .api = "tl_lua_get_string", .name = dotted_path};
    tl_status status = run(&c, get_string_body);
    if (status == TL_OK) *out = T->string_result;
    return status;
}
