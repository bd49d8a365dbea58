/* C unit test of tlua/embed.h: calls, values, every error path, the sandbox, both limits. */
#include <lua.h>

#include "embed_support.h"

/* ---- states, tl, require("tlua") ----------------------------------------------------------- */
static void test_open_and_tl(void) {
    for (int sandbox = 0; sandbox <= 1; sandbox++) {
        tl_lua *L = open_state(sandbox, 0, 0);
        if (!L) continue;
        CHECK(tl_lua_state(L) != NULL, "tl_lua_state");
        run_ok(L, "=tl",
               "assert(tl == require('tlua'), 'tl is require(\"tlua\")')\n"
               "assert(tl.nn.Linear and tl.optim.SGD, 'submodules load')\n"
               "assert(tl.ones(2, 3):sum():item() == 6)");
        tl_lua_close(L);
    }
    tl_lua *L = NULL;
    OK(tl_lua_open(NULL, &L)); /* NULL options: no sandbox */
    if (L) run_ok(L, "=defaults", "assert(io and debug and os.getenv and dofile)");
    tl_lua_close(L);
    tl_lua_close(NULL);
    CHECK(tl_lua_state(NULL) == NULL, "tl_lua_state(NULL)");
}

/* ---- running files and strings -------------------------------------------------------------- */
static void test_run_errors(void) {
    tl_lua *L = open_state(false, 0, 0);
    if (!L) return;
    ERROR("missing file", tl_lua_dofile(L, file_path(0, "nosuch.lua")), TL_ERR_ARGUMENT,
          "tl_lua_dofile", "cannot open", "nosuch.lua");
    check_usable(L, "a missing file");

    write_file(file_path(0, "syntax.lua"), "x = = 1\n");
    ERROR("syntax error in a file", tl_lua_dofile(L, file_path(0, "syntax.lua")), TL_ERR_ARGUMENT,
          "syntax.lua:1:", "unexpected symbol");
    ERROR("syntax error in a string", tl_lua_dostring(L, "x = = 1", "=config"), TL_ERR_ARGUMENT,
          "tl_lua_dostring", "config:1:");
    check_usable(L, "a syntax error");

    ERROR("runtime error",
          tl_lua_dostring(L, "local function inner() error('boom') end\ninner()", "=config"),
          TL_ERR_RUNTIME, "config:1: boom", "stack traceback:", "inner");
    check_usable(L, "a runtime error");
    ERROR("error of the engine", tl_lua_dostring(L, "return tl.ones(2, 3) + tl.ones(4, 5)", NULL),
          TL_ERR_RUNTIME, "tl_lua_dostring", "stack traceback:");
    ERROR("error object that is not a string", tl_lua_dostring(L, "error({})", "=config"),
          TL_ERR_RUNTIME, "error object is a table value");

    write_file(file_path(0, "ok.lua"), "from_file = 42\n");
    OK(tl_lua_dofile(L, file_path(0, "ok.lua")));
    double value = 0;
    OK(tl_lua_get_number(L, "from_file", &value));
    CHECK(value == 42, "from_file = %g", value);

    ERROR("NULL path", tl_lua_dofile(L, NULL), TL_ERR_ARGUMENT, "path is NULL");
    ERROR("NULL chunk", tl_lua_dostring(L, NULL, "=x"), TL_ERR_ARGUMENT, "chunk is NULL");
    ERROR("NULL state (dofile)", tl_lua_dofile(NULL, "x.lua"), TL_ERR_ARGUMENT, "NULL");
    ERROR("NULL state (dostring)", tl_lua_dostring(NULL, "x = 1", NULL), TL_ERR_ARGUMENT, "NULL");
    ERROR("NULL out (open)", tl_lua_open(NULL, NULL), TL_ERR_ARGUMENT, "out is NULL");

    /* the host's own stack is left as it was */
    lua_State *S = tl_lua_state(L);
    lua_pushinteger(S, 7);
    int top = lua_gettop(S);
    tl_lua_dostring(L, "error('x')", NULL);
    tl_lua_dostring(L, "y = 1", NULL);
    CHECK(lua_gettop(S) == top && lua_tointeger(S, -1) == 7, "the host's stack changed");
    lua_settop(S, 0);
    tl_lua_close(L);
}

/* ---- values at dotted paths ------------------------------------------------------------------ */
static void test_values(void) {
    tl_lua *L = open_state(true, 0, 0);
    if (!L) return;
    run_ok(L, "=config",
           "train = {lr = 0.01, name = 'mlp', steps = 3, number_text = '3',\n"
           "         sizes = {4, 16, 3}, nested = {deep = {value = -2.5}}}\n"
           "proxy = setmetatable({}, {__index = function(_, k) return k .. '!' end})");
    double value = 0;
    OK(tl_lua_get_number(L, "train.lr", &value));
    CHECK(value == 0.01, "train.lr = %g", value);
    OK(tl_lua_get_number(L, "train.steps", &value));
    CHECK(value == 3, "train.steps = %g", value);
    OK(tl_lua_get_number(L, "train.sizes.2", &value));
    CHECK(value == 16, "train.sizes.2 = %g", value);
    OK(tl_lua_get_number(L, "train.nested.deep.value", &value));
    CHECK(value == -2.5, "train.nested.deep.value = %g", value);
    const char *text = NULL;
    OK(tl_lua_get_string(L, "train.name", &text));
    CHECK(text && strcmp(text, "mlp") == 0, "train.name = %s", text ? text : "(null)");
    OK(tl_lua_get_string(L, "proxy.key", &text)); /* __index is honoured */
    CHECK(text && strcmp(text, "key!") == 0, "proxy.key = %s", text ? text : "(null)");

    value = 123;
    ERROR("missing table", tl_lua_get_number(L, "nosuch.lr", &value), TL_ERR_ARGUMENT,
          "no value at 'nosuch.lr'", "'nosuch' is nil");
    CHECK(value == 123, "a failed get wrote %g", value);
    ERROR("missing field", tl_lua_get_number(L, "train.nosuch", &value), TL_ERR_ARGUMENT,
          "'train.nosuch' is nil");
    ERROR("missing global", tl_lua_get_string(L, "nosuch", &text), TL_ERR_ARGUMENT,
          "'nosuch' is nil");
    ERROR("string for a number", tl_lua_get_number(L, "train.name", &value), TL_ERR_ARGUMENT,
          "'train.name' is a string, expected a number");
    ERROR("numeric string for a number", tl_lua_get_number(L, "train.number_text", &value),
          TL_ERR_ARGUMENT, "expected a number");
    ERROR("table for a number", tl_lua_get_number(L, "train", &value), TL_ERR_ARGUMENT,
          "'train' is a table, expected a number");
    ERROR("number for a string", tl_lua_get_string(L, "train.lr", &text), TL_ERR_ARGUMENT,
          "'train.lr' is a number, expected a string");
    ERROR("tensor for a string",
          tl_lua_dostring(L, "t = tl.ones(2)", NULL) == TL_OK ? tl_lua_get_string(L, "t", &text)
                                                              : TL_ERR_RUNTIME,
          TL_ERR_ARGUMENT, "tlua.Tensor");
    ERROR("index into a number", tl_lua_get_number(L, "train.lr.x", &value), TL_ERR_ARGUMENT,
          "'train.lr' is a number, not a table");
    ERROR("empty name", tl_lua_get_number(L, "train..lr", &value), TL_ERR_ARGUMENT, "empty name");
    ERROR("empty path", tl_lua_get_number(L, "", &value), TL_ERR_ARGUMENT, "empty name");
    ERROR("trailing dot", tl_lua_get_number(L, "train.", &value), TL_ERR_ARGUMENT, "empty name");
    ERROR("NULL path", tl_lua_get_number(L, NULL, &value), TL_ERR_ARGUMENT, "dotted_path is NULL");
    ERROR("NULL out", tl_lua_get_number(L, "train.lr", NULL), TL_ERR_ARGUMENT, "out is NULL");
    ERROR("NULL state", tl_lua_get_number(NULL, "train.lr", &value), TL_ERR_ARGUMENT, "NULL");
    ERROR("NULL path (string)", tl_lua_get_string(L, NULL, &text), TL_ERR_ARGUMENT, "NULL");
    ERROR("NULL out (string)", tl_lua_get_string(L, "train.name", NULL), TL_ERR_ARGUMENT, "NULL");
    ERROR("NULL state (string)", tl_lua_get_string(NULL, "x", &text), TL_ERR_ARGUMENT, "NULL");
    ERROR("error in __index",
          tl_lua_dostring(L,
                          "bad = setmetatable({}, {__index = "
                          "function() error('no such key') end})",
                          NULL) == TL_OK
              ? tl_lua_get_number(L, "bad.x", &value)
              : TL_ERR_ARGUMENT,
          TL_ERR_RUNTIME, "no such key", "stack traceback:");
    check_usable(L, "errors at paths");
    tl_lua_close(L);
}

/* ---- calls with tensors ------------------------------------------------------------------------
 */
static tl_tensor *vector(float a, float b) {
    float data[2] = {a, b};
    int64_t shape[1] = {2};
    tl_tensor *t = NULL;
    OK(tl_from_host(data, shape, 1, TL_F32, TL_CPU, &t));
    return t;
}

static void test_calls(void) {
    tl_lua *L = open_state(true, 0, 0);
    if (!L) return;
    run_ok(L, "=model",
           "function add(a, b) return a + b end\n"
           "function both(a) return a * 2, a * 3 end\n"
           "function nothing() end\n"
           "function number() return 1 end\n"
           "function with_nil() return nil end\n"
           "function released() local t = tl.ones(2); tl.release(t)\n"
           "  return t end\n"
           "function two_values() return tl.ones(2), 5 end\n"
           "function fails() local x = nil; return x.field end\n"
           "model = {forward = function(x) return x:neg() end}\n"
           "not_function = 3");
    tl_tensor *a = vector(1, 2), *b = vector(10, 20), *out[2] = {NULL, NULL};
    tl_tensor *in[2] = {a, b};
    OK(tl_lua_call(L, "add", in, 2, out, 1));
    float got[2] = {0, 0};
    if (out[0]) OK(tl_to_host(out[0], got));
    CHECK(got[0] == 11 && got[1] == 22, "add: %g %g", got[0], got[1]);
    tl_release(out[0]);
    OK(tl_lua_call(L, "both", in, 1, out, 2));
    if (out[0] && out[1]) {
        OK(tl_to_host(out[1], got));
        CHECK(got[0] == 3 && got[1] == 6, "both: %g %g", got[0], got[1]);
    }
    tl_release(out[0]);
    tl_release(out[1]);
    OK(tl_lua_call(L, "model.forward", in, 1, out, 1)); /* a dotted path */
    if (out[0]) OK(tl_to_host(out[0], got));
    CHECK(got[0] == -1 && got[1] == -2, "model.forward: %g %g", got[0], got[1]);
    tl_release(out[0]);
    OK(tl_lua_call(L, "nothing", NULL, 0, NULL, 0));

    /* errors: out[] is NULL after each */
    tl_tensor *sentinel = a;
    struct {
        const char *what, *name, *part;
        int n_out;
        tl_status want;
    } cases[] = {
        {"missing function", "nosuch", "'nosuch' is nil, not a function", 1, TL_ERR_ARGUMENT},
        {"missing field", "model.nosuch", "'model.nosuch' is nil", 1, TL_ERR_ARGUMENT},
        {"not a function", "not_function", "'not_function' is a number, not a function", 1,
         TL_ERR_ARGUMENT},
        {"no result", "nothing", "returned 0 values, expected 1 tensor", 1, TL_ERR_ARGUMENT},
        {"too many results", "two_values", "returned 2 values, expected 1 tensor", 1,
         TL_ERR_ARGUMENT},
        {"one result for two", "add", "returned 1 value, expected 2 tensors", 2, TL_ERR_ARGUMENT},
        {"a number", "number", "returned a number as value 1, expected a tensor", 1,
         TL_ERR_ARGUMENT},
        {"nil", "with_nil", "returned nil as value 1", 1, TL_ERR_ARGUMENT},
        {"second not a tensor", "two_values", "returned a number as value 2", 2, TL_ERR_ARGUMENT},
        {"a released tensor", "released", "returned a released tensor as value 1", 1,
         TL_ERR_ARGUMENT},
        {"runtime error", "fails", "attempt to index a nil value", 1, TL_ERR_RUNTIME},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        out[0] = out[1] = sentinel;
        ERROR(cases[i].what, tl_lua_call(L, cases[i].name, in, 2, out, cases[i].n_out),
              cases[i].want, cases[i].part);
        CHECK(out[0] == NULL && (cases[i].n_out < 2 || out[1] == NULL), "%s: out[] not cleared",
              cases[i].what);
    }
    ERROR("traceback of a call", tl_lua_call(L, "fails", NULL, 0, out, 1), TL_ERR_RUNTIME,
          "model:9:", "stack traceback:", "in function 'fails'");
    tl_tensor *with_null[2] = {a, NULL};
    ERROR("NULL state", tl_lua_call(NULL, "add", in, 2, out, 1), TL_ERR_ARGUMENT, "NULL");
    ERROR("NULL name", tl_lua_call(L, NULL, in, 2, out, 1), TL_ERR_ARGUMENT,
          "global_function is NULL");
    ERROR("NULL in", tl_lua_call(L, "add", NULL, 2, out, 1), TL_ERR_ARGUMENT, "in is NULL");
    ERROR("NULL in[1]", tl_lua_call(L, "add", with_null, 2, out, 1), TL_ERR_ARGUMENT,
          "in[1] is NULL");
    ERROR("NULL out", tl_lua_call(L, "add", in, 2, NULL, 1), TL_ERR_ARGUMENT, "out is NULL");
    ERROR("negative n_in", tl_lua_call(L, "add", in, -1, out, 1), TL_ERR_ARGUMENT, ">= 0");
    ERROR("negative n_out", tl_lua_call(L, "add", in, 2, out, -1), TL_ERR_ARGUMENT, ">= 0");
    check_usable(L, "errors of calls");

    /* a result outlives the state; the inputs keep their values */
    OK(tl_lua_call(L, "add", in, 2, out, 1));
    tl_lua_close(L);
    if (out[0]) OK(tl_to_host(out[0], got));
    CHECK(got[0] == 11 && got[1] == 22, "a result after close: %g %g", got[0], got[1]);
    CHECK(a->refcount == 1 && b->refcount == 1, "inputs keep references: %d %d", a->refcount,
          b->refcount);
    tl_release(out[0]);
    tl_release(a);
    tl_release(b);
}

/* A C function of the host that calls back into the API on the same state (refused). */
static int reenter(lua_State *S) {
    tl_lua *L = lua_touserdata(S, lua_upvalueindex(1));
    tl_status status = tl_lua_dostring(L, "x = 1", NULL);
    lua_pushboolean(S, status == TL_ERR_ARGUMENT && contains(tl_last_error(), "running a call"));
    return 1;
}

static void test_reentry(void) {
    tl_lua *L = open_state(false, 0, 0);
    if (!L) return;
    lua_State *S = tl_lua_state(L);
    lua_pushlightuserdata(S, L);
    lua_pushcclosure(S, reenter, 1);
    lua_setglobal(S, "reenter");
    run_ok(L, "=reentry", "assert(reenter(), 'a call from Lua into the API is refused')");
    tl_lua_close(L);
}

/* ---- the sandbox, rule by rule ------------------------------------------------------------------
 */
static void test_sandbox(void) {
    tl_lua *L = open_state(true, 0, 0);
    if (!L) return;
    run_ok(L, "=io", "assert(io == nil and package.loaded.io == nil, 'no io')");
    run_ok(L, "=os",
           "local n = 0; for _ in pairs(os) do n = n + 1 end\n"
           "assert(n == 3 and os.clock() and os.time() and os.date('%Y'), 'os: 3 fields')\n"
           "assert(not os.getenv and not os.execute and not os.remove and not os.exit)\n"
           "assert(package.loaded.os == os)");
    run_ok(L, "=debug", "assert(debug == nil and package.loaded.debug == nil, 'no debug')");
    run_ok(L, "=files", "assert(dofile == nil and loadfile == nil, 'no dofile, loadfile')");
    run_ok(L, "=c modules",
           "assert(package.loadlib == nil and package.cpath == nil and package.searchers == nil)\n"
           "assert(package.preload == nil and package.searchpath == nil)");
    /* tlua.core is not among the modules a configuration may require, whatever it changes */
    run_ok(L, "=tlua.core",
           "package.cpath = '" TLUA_TEST_BUILD_DIR "/lua/?.so'\n"
           "package.loaded['tlua.core'] = nil\n"
           "local ok, err = pcall(require, 'tlua.core')\n"
           "assert(not ok and err:find(\"module 'tlua.core' not found\"), err)\n"
           "assert(package.loaded['tlua.core'] == nil and package.loaded['tlua'] == nil)");
    /* binary chunks: load refuses them whatever the mode asked */
    run_ok(L, "=binary",
           "local dump = string.dump(function() return 1 end)\n"
           "for _, mode in ipairs({'b', 'bt', 't'}) do\n"
           "  local f, err = load(dump, 'dump', mode)\n"
           "  assert(f == nil and err:find('binary'), mode)\n"
           "end\n"
           "local f, err = load(dump); assert(f == nil and err:find('binary'))\n"
           "local pieces = {dump}; local reader = function() return table.remove(pieces) end\n"
           "assert(load(reader) == nil, 'a reader function')\n"
           "local env = {}; load('y = 5', 'env', 't', env)(); assert(env.y == 5)\n"
           "assert(load('return 7')() == 7, 'text still loads')");
    run_ok(L, "=searchers",
           "package.path = '/tmp/?.lua'; package.searchpath = function() return '/etc/passwd' end\n"
           "assert(require('tlua.nn') == tl.nn, 'tlua modules of the allow-list')\n"
           "assert(require('tlua') == tl)\n"
           "local ok, err = pcall(require, 'tlua.class')\n"
           "assert(not ok and err:find('not found'), 'modules off the allow-list')");
    check_usable(L, "the sandbox rules");

    /* a binary file: refused by dofile under the sandbox, run without it */
    tl_lua *plain = open_state(false, 0, 0);
    if (plain) {
        char chunk[768];
        snprintf(chunk, sizeof chunk,
                 "local f = assert(io.open('%s', 'wb'))\n"
                 "f:write(string.dump(function() from_binary = 42 end)); f:close()",
                 file_path(1, "binary.luac"));
        run_ok(plain, "=write binary", chunk);
        OK(tl_lua_dofile(plain, file_path(1, "binary.luac")));
        double value = 0;
        OK(tl_lua_get_number(plain, "from_binary", &value));
        CHECK(value == 42, "the binary chunk ran without the sandbox: %g", value);
        tl_lua_close(plain);
    }
    ERROR("binary file", tl_lua_dofile(L, file_path(1, "binary.luac")), TL_ERR_ARGUMENT,
          "binary chunk");
    check_usable(L, "a binary file");
    tl_lua_close(L);
}

/* ---- the memory limit
 * ---------------------------------------------------------------------------- */
static void test_memory_limit(void) {
    tl_lua *small = NULL;
    tl_lua_options tiny = {.sandbox = true, .memory_limit = 4096};
    ERROR("a limit too small to load tlua", tl_lua_open(&tiny, &small), TL_ERR_MEMORY,
          "tl_lua_open");
    CHECK(small == NULL, "a failed open wrote a state");

    tl_lua *L = open_state(true, 8u << 20, 0);
    if (!L) return;
    run_ok(L, "=nn", "local m = tl.nn.Linear(4, 3); assert(m(tl.ones(2, 4)).shape[2] == 3)");
    ERROR("a growing table",
          tl_lua_dostring(L, "local t = {}; for i = 1, 1e8 do t[i] = {i} end", "=grow"),
          TL_ERR_MEMORY, "memory limit of 8388608 bytes exceeded");
    check_usable(L, "the memory limit (table)");
    ERROR("a big string", tl_lua_dostring(L, "s = string.rep('x', 1 << 26)", "=rep"), TL_ERR_MEMORY,
          "memory limit");
    check_usable(L, "the memory limit (string)");
    /* a pcall inside catches the memory error; the script goes on */
    run_ok(L, "=caught",
           "local ok, err = pcall(string.rep, 'x', 1 << 26)\n"
           "assert(not ok and err:find('not enough memory'), err)");
    /* tensors count too: a 16 MiB tensor does not fit in 8 MiB, a 1 MiB one does */
    ERROR("a big tensor", tl_lua_dostring(L, "t = tl.zeros(4096, 1024)", "=tensor"), TL_ERR_MEMORY,
          "memory limit of 8388608 bytes exceeded", "a tensor of 16777216 bytes");
    run_ok(L, "=tensor", "local t = tl.zeros(256, 1024); assert(t:numel() == 262144)");
    /* in a call of a function, and a loaded chunk too big for the heap */
    run_ok(L, "=function", "function grow() local t = {} while true do t[#t + 1] = {} end end");
    tl_tensor *out = NULL;
    ERROR("in tl_lua_call", tl_lua_call(L, "grow", NULL, 0, &out, 1), TL_ERR_MEMORY,
          "tl_lua_call: memory limit");
    check_usable(L, "the memory limit (call)");
    tl_lua_close(L);
}

/* ---- the instruction limit
 * -------------------------------------------------------------------------- */
static void test_instruction_limit(void) {
    tl_lua *L = open_state(true, 0, 100000);
    if (!L) return;
    ERROR("a loop", tl_lua_dostring(L, "while true do end", "=loop"), TL_ERR_RUNTIME,
          "instruction limit of 100000 exceeded", "loop:1:");
    check_usable(L, "the instruction limit (loop)");
    ERROR("pcall cannot get past it",
          tl_lua_dostring(L, "while true do pcall(function() while true do end end) end", "=pcall"),
          TL_ERR_RUNTIME, "instruction limit");
    check_usable(L, "the instruction limit (pcall)");
    ERROR("coroutines share the budget",
          tl_lua_dostring(L,
                          "while true do coroutine.wrap(function()\n"
                          "  for i = 1, 60000 do end end)() end",
                          "=coroutines"),
          TL_ERR_RUNTIME, "instruction limit");
    check_usable(L, "the instruction limit (coroutines)");
    run_ok(L, "=define",
           "function spin(x) while true do end end\n"
           "function work(x) for i = 1, 20000 do end return x end");
    tl_tensor *x = vector(1, 2), *out = NULL;
    ERROR("in tl_lua_call", tl_lua_call(L, "spin", &x, 1, &out, 1), TL_ERR_RUNTIME,
          "instruction limit");
    /* the budget is per call: many calls of 20000 instructions each pass */
    for (int i = 0; i < 20; i++) {
        tl_status status = tl_lua_call(L, "work", &x, 1, &out, 1);
        CHECK(status == TL_OK, "call %d of work: %s", i, tl_last_error());
        tl_release(out);
        out = NULL;
    }
    double value = 0;
    ERROR("in tl_lua_get_number (__index)",
          tl_lua_dostring(L,
                          "spinning = setmetatable({}, {__index = function() "
                          "while true do end end})",
                          NULL) == TL_OK
              ? tl_lua_get_number(L, "spinning.x", &value)
              : TL_ERR_ARGUMENT,
          TL_ERR_RUNTIME, "instruction limit");
    check_usable(L, "the instruction limit (call)");
    tl_release(x);
    tl_lua_close(L);

    /* a limit below the hook's period is exact */
    L = open_state(false, 0, 10);
    if (L) {
        ERROR("a limit of 10",
              tl_lua_dostring(L, "local a = 0 for i = 1, 100 do a = a + i end", NULL),
              TL_ERR_RUNTIME, "instruction limit of 10 exceeded");
        OK(tl_lua_dostring(L, "x = 1", NULL));
        tl_lua_close(L);
    }
}

int main(void) {
    if (!make_run_dir("tlua_test_embed")) return 1;
    test_open_and_tl();
    test_run_errors();
    test_values();
    test_calls();
    test_reentry();
    test_sandbox();
    test_memory_limit();
    test_instruction_limit();
    return finish("test_embed");
}
