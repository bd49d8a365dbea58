/* libFuzzer harness: the embedding sandbox under random configurations. The bytes choose
   statements from a list of escape attempts and runaway work (files inside, beside and through
   links out of the granted folder, require, the network, finalizers, message handlers,
   patterns, loops, big tensors, settings); each configuration runs in a new sandboxed state with
   limits. Invariants: no file outside the granted folders is opened, read, written or made (inotify
   on a canary folder), every call and the close return within their limits and a margin, and the
   thread's settings are the host's again after each. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tlua/autograd.h"
#include "tlua/embed.h"
#include "tlua/runtime.h"

#ifndef TLUA_SOURCE_DIR
#define TLUA_SOURCE_DIR "."
#endif

#define TIME_LIMIT_MS 300
#define MARGIN_S      5.0 /* an instrumented build, one kernel begun before the limit */

__attribute__((noreturn)) static void broken(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_sandbox: invariant broken: %s%s%s\n", what, detail ? ": " : "",
            detail ? detail : "");
    abort();
}

static char root[256], granted[320], outside[320], modules[320];
static int watch_fd = -1;

static void write_bytes(const char *folder, const char *name, const void *bytes, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n) broken("cannot write the fixture", path);
    fclose(f);
}

static void link_to(const char *target, const char *folder, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    if (symlink(target, path) != 0) broken("cannot make a link", path);
}

static void remove_fixture(void) {
    char command[300];
    snprintf(command, sizeof command, "rm -rf '%s'", root);
    if (root[0] && system(command) != 0)
        fprintf(stderr, "fuzz_sandbox: could not remove %s\n", root);
}

/* root/granted (readable and writable) with links out, root/outside (canaries, watched),
   root/modules (the host's module folder) with a link out. */
static void make_fixture(void) {
    snprintf(root, sizeof root, "/tmp/tlua-fuzz-sandbox.XXXXXX");
    if (!mkdtemp(root)) broken("mkdtemp", root);
    atexit(remove_fixture);
    snprintf(granted, sizeof granted, "%s/granted", root);
    snprintf(outside, sizeof outside, "%s/outside", root);
    snprintf(modules, sizeof modules, "%s/modules", root);
    if (mkdir(granted, 0700) || mkdir(outside, 0700) || mkdir(modules, 0700)) broken("mkdir", root);
    static const unsigned char idx[] = {0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9};
    write_bytes(outside, "canary.idx", idx, sizeof idx);
    write_bytes(granted, "inside.idx", idx, sizeof idx);
    write_bytes(outside, "canary.lua", "escaped = true\n", 15);
    write_bytes(modules, "mod.lua", "return {value = 1}\n", 19);
    char target[512];
    snprintf(target, sizeof target, "%s/canary.idx", outside);
    link_to(target, granted, "out_file");
    link_to(outside, granted, "out_dir");
    snprintf(target, sizeof target, "%s/canary.lua", outside);
    link_to(target, modules, "out.lua");
    watch_fd = inotify_init1(IN_NONBLOCK);
    if (watch_fd < 0) broken("inotify_init1", NULL);
    uint32_t mask = IN_ACCESS | IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_OPEN | IN_CREATE |
                    IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM;
    if (inotify_add_watch(watch_fd, outside, mask) < 0) broken("inotify_add_watch", outside);
}

/* Fails on any event of the canary folder since the last call. */
static void check_untouched(const char *config) {
    char buffer[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n = read(watch_fd, buffer, sizeof buffer);
    if (n <= 0) return;
    const struct inotify_event *e = (const struct inotify_event *)buffer;
    fprintf(stderr, "configuration:\n%s\n", config);
    char detail[128];
    snprintf(detail, sizeof detail, "'%s' (mask 0x%x)", e->len ? e->name : "the folder",
             (unsigned)e->mask);
    broken("a file outside the granted folders was touched", detail);
}

/* ---- the configuration ------------------------------------------------------------------------
 */
typedef struct reader {
    const uint8_t *data;
    size_t size, at;
} reader;

static unsigned next(reader *r) {
    return r->at < r->size ? r->data[r->at++] : 0;
}

/* Statements: %d is filled with a byte of the input (pools P, M, S are 1-based, mod their size
   in the prelude). */
static const char *const statements[] = {
    "pcall(tl.save, P[%d], {w = tl.ones(3)})",
    "pcall(tl.load, P[%d])",
    "pcall(tl.data.read_idx, P[%d])",
    "pcall(tl.data.FashionMNIST, {root = P[%d]})",
    "pcall(require, M[%d])",
    "package.searchpath = function() return P[%d] end; pcall(require, 'x')",
    "for _, f in pairs(tl) do if type(f) == 'function' then pcall(f, P[%d]) end end",
    "for _, m in pairs{tl.data, tl.optim, tl.autograd, tl.cuda} do for _, f in pairs(m) do "
    "if type(f) == 'function' then pcall(f, P[%d]) end end end",
    "while true do end -- %d",
    "for i = 1, 1e12 do end -- %d",
    "do setmetatable({}, {__gc = function() while true do end end}) end collectgarbage() -- %d",
    "keep%d = setmetatable({}, {__gc = function() while true do end end})",
    "xpcall(function() while true do end end, function() while true do end end) -- %d",
    "xpcall(error, function() while true do end end, 'e%d')",
    "pcall(string.find, string.rep('a', %d * 1000), S[1 + %d %% #S])",
    "tl.autocast('bfloat16', function() local a = tl.ones(8, 8) for i = 1, 1e9 + %d do "
    "a = a:matmul(a) end end)",
    "pcall(function() local n = 64 * (1 + %d %% 6); local a = tl.ones(n, n); a = a:matmul(a) end)",
    "tl.set_grad_enabled(false); tl.manual_seed(%d); tl.set_num_threads(1); "
    "tl.set_sync_checks(true)",
    "coroutine.wrap(function() while true do end end)() -- %d",
    "pcall(load, string.dump(function() return %d end))",
    "pcall(function() getmetatable(tl.ones(1)).__gc = function() while true do end end end) -- %d",
    "pcall(tl.zeros, %d * 1000000)",
    "local s = string.rep('x', 1 << (10 + %d %% 20))",
    "pcall(function() return tl.distributed.init() end) -- %d",
    "pcall(function() local t = {} for i = 1, 1e7 do t[i] = {i, %d} end end)",
    "local ok = pcall(string.gsub, string.rep('ab', 500 * %d), '(a-)(b-)(a-)%%1', '%%2')",
};
#define N_STATEMENTS ((unsigned)(sizeof statements / sizeof statements[0]))

/* The pools the statements index: paths, module names, patterns. */
static char *prelude(void) {
    static char text[4096];
    snprintf(
        text, sizeof text,
        "local G, O = '%s', '%s'\n"
        "P = {G .. '/ok.safetensors', G .. '/out_file', G .. '/out_dir/canary.idx',\n"
        "  G .. '/out_dir/new.safetensors', O .. '/canary.idx', O .. '/new.safetensors',\n"
        "  G .. '/../outside/canary.idx', G .. '/./inside.idx', '/etc/passwd',\n"
        "  '/proc/self/environ', '', G, G .. '/', O, G .. '/out_dir', 'relative.safetensors',\n"
        "  '../../x', G .. '/ok.safetensors\\0/../../outside/canary.idx',\n"
        "  G .. '/' .. string.rep('a', 300), G .. '/inside.idx'}\n"
        "setmetatable(P, {__index = function(t, k) return rawget(t, 1 + k %% #t) end})\n"
        "M = {'tlua.core', 'tlua.distributed', 'mod', 'out', '../outside/canary', 'tlua.cli',\n"
        "  'tlua.progress', 'io', 'debug', 'os', 'tlua.sandbox', 'tlua', 'tlua.nn', 'mod.x',\n"
        "  'out_dir.canary', ''}\n"
        "setmetatable(M, {__index = function(t, k) return rawget(t, 1 + k %% #t) end})\n"
        "S = {'.-.-.-b', '(.-)%%s*(.-)$', 'a*a*a*a*b', '^(a+)+$', '%%bab', '[%%w_]+'}\n",
        granted, outside);
    return text;
}

static char *make_config(reader *r) {
    size_t cap = 8192, len = 0;
    char *text = malloc(cap);
    if (!text) broken("out of memory", NULL);
    len = (size_t)snprintf(text, cap, "%s", prelude());
    unsigned count = 1 + next(r) % 8;
    for (unsigned i = 0; i < count && len + 512 < cap; i++) {
        const char *s = statements[next(r) % N_STATEMENTS];
        unsigned a = next(r), b = next(r);
        char line[512];
        snprintf(line, sizeof line, s, a, b);
        len += (size_t)snprintf(text + len, cap - len, "pcall(function() %s end)\n", line);
    }
    return text;
}

/* ---- one run ----------------------------------------------------------------------------------
 */
static bool same_settings(const tl_rng_state *rng, int threads) {
    tl_rng_state now;
    tl_get_rng_state(&now);
    return tl_is_grad_enabled() && !tl_autocast_get().enabled && now.seed == rng->seed &&
           now.counter == rng->counter && tl_get_num_threads() == threads;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (watch_fd < 0) {
        setenv("TLUA_LUA_PATH", TLUA_SOURCE_DIR "/bindings/lua", 0);
        make_fixture();
    }
    reader r = {data, size, 0};
    char *config = make_config(&r);
    const char *dirs[] = {granted, NULL};
    tl_lua_options options = {.sandbox = true,
                              .memory_limit = 64u << 20,
                              .instruction_limit = 200000,
                              .time_limit_ms = TIME_LIMIT_MS,
                              .read_dirs = dirs,
                              .write_dirs = dirs,
                              .module_dir = modules};
    tl_rng_state rng;
    tl_get_rng_state(&rng);
    int threads = tl_get_num_threads();
    tl_lua *L = NULL;
    if (tl_lua_open(&options, &L) != TL_OK) broken("tl_lua_open failed", tl_last_error());
    double start = tl_clock();
    (void)tl_lua_dostring(L, config, "=fuzz");
    double took = tl_clock() - start;
    if (took > TIME_LIMIT_MS / 1000.0 + MARGIN_S) {
        fprintf(stderr, "configuration:\n%s\n", config);
        broken("a call ran past its time limit", NULL);
    }
    if (!same_settings(&rng, threads)) broken("a call left its settings behind", config);
    start = tl_clock();
    (void)tl_lua_close(L);
    if (tl_clock() - start > TIME_LIMIT_MS / 1000.0 + MARGIN_S) {
        fprintf(stderr, "configuration:\n%s\n", config);
        broken("tl_lua_close ran past the limits", NULL);
    }
    check_untouched(config);
    free(config);
    return 0;
}
