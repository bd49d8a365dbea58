/* C unit test of the sandbox by construction: the allow-listed tl, granted folders, require, the
   limits on finalizers, message handlers, patterns, time and tensor memory, the settings a call
   leaves behind, and the thread limits of the engine beneath them. */
#include <sys/stat.h>

#include "embed_support.h"

#include "tlua/autograd.h"
#include "tlua/device.h"
#include "tlua/runtime.h"

/* A sandboxed state with grants and limits. */
static tl_lua *open_sandbox(const char *const *read_dirs, const char *const *write_dirs,
                            const char *module_dir, uint64_t instruction_limit,
                            uint64_t time_limit_ms) {
    tl_lua_options options = {.sandbox = true,
                              .read_dirs = read_dirs,
                              .write_dirs = write_dirs,
                              .module_dir = module_dir,
                              .instruction_limit = instruction_limit,
                              .time_limit_ms = time_limit_ms};
    return open_with(&options);
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- tl is an allow-list ------------------------------------------------------------------ */
static void test_allow_list(void) {
    tl_lua *L = open_sandbox(NULL, NULL, NULL, 0, 0);
    if (!L) return;
    run_ok(L, "=absent",
           "for _, name in ipairs{'_read_idx', '_dist_new_group', '_dist_store_set', 'save',\n"
           "  'load', 'distributed', '_cuda_set_device', '_is_readable', 'progress', 'cli'} do\n"
           "  assert(rawget(tl, name) == nil and tl[name] == nil, name .. ' is in the sandbox')\n"
           "end\n"
           "assert(getmetatable(tl) == nil, 'a plain table, nothing loads on demand')\n"
           "assert(tl.data.read_idx == nil and tl.data.FashionMNIST == nil, 'no reader')\n"
           "assert(tl.cuda.set_device == nil and tl.cuda.device_count, 'tl.cuda: queries only')");
    run_ok(
        L, "=present",
        "local x = tl.ones(2, 3, {requires_grad = true})\n"
        "local y = (tl.matmul(x, tl.ones(3, 2)) + tl.relu(tl.ones(2, 2))):sum()\n"
        "y:backward(); assert(x.grad:sum():item() == 12)\n"
        "local m = tl.nn.Linear(3, 2); local opt = tl.optim.SGD(m:parameters(), {lr = 0.1})\n"
        "m(tl.ones(4, 3)):sum():backward(); opt:step()\n"
        "local loader = tl.data.DataLoader{tl.data.TensorDataset(tl.ones(4, 2)), batch_size = 2}\n"
        "assert(tl.autograd.Function and tl.softmax and tl.no_grad)");
    run_ok(L, "=metatable",
           "local t = tl.ones(1)\n"
           "assert(getmetatable(t) == 'tlua.Tensor', 'the metamethods are out of reach')\n"
           "local ok = pcall(function() getmetatable(t).__gc = print end)\n"
           "assert(not ok)");
    run_ok(L, "=no network", "assert(not pcall(require, 'tlua.distributed'))");
    /* no debug library here: tlua.options raises at the levels the modules give, which must
       still be the configuration's line */
    run_ok(L, "=options",
           "assert(debug == nil, 'no debug library')\n"
           "local nn, optim, data = tl.nn, tl.optim, tl.data\n"
           "local function sgd() return optim.SGD({tl.ones(1, {requires_grad = true})}, {lr = 1}) "
           "end\n"
           "local cases = {\n"
           "  function() nn.Linear(2, 3, {biass = false}) end,\n"
           "  function() nn.ReLU({inplace = true}) end,\n"
           "  function() nn.GELU({approx = 'tanh'}) end,\n"
           "  function() nn.functional.gelu(tl.ones(1), {approx = 'tanh'}) end,\n"
           "  function() nn.MoE{dim = 4, hidden = 8, experts = 2, top_k = 1, topk = 1} end,\n"
           "  function() nn.MoE(4, 8, 2, 1, {activaton = 'relu'}) end,\n"
           "  function() nn.BlockSparseLinear(8, 8, {block = 4, densty = 0.5}) end,\n"
           "  function() nn.init.kaiming_uniform_(tl.empty(2, 2), {mod = 'fan_in'}) end,\n"
           "  function() optim.SGD({tl.ones(1, {requires_grad = true})}, {lr = 1, lrr = 1}) end,\n"
           "  function() optim.StepLR(sgd(), {step_size = 1, gama = 0.5}) end,\n"
           "  function() optim.clip_grad_norm({}, 1, 2, {for_each = true}) end,\n"
           "  function() data.DataLoader{data.TensorDataset(tl.ones(2)), batchsize = 1} end,\n"
           "  function() tl.autograd.gradcheck(print, {}, {atoll = 1}) end,\n"
           "}\n"
           "for i, case in ipairs(cases) do\n"
           "  local ok, err = pcall(case)\n"
           "  assert(not ok and err:match('^options:%d+: .*unknown option'), i .. ': ' .. "
           "tostring(err))\n"
           "end");
    tl_lua_close(L);

    /* the network grant: tl.distributed, a world of one outside a launched job */
    tl_lua_options networked = {.sandbox = true, .network = true};
    L = open_with(&networked);
    if (!L) return;
    run_ok(L, "=network",
           "assert(tl.distributed == require('tlua.distributed'))\n"
           "assert(tl.distributed.world_size() == 1 and tl.distributed.rank() == 0)\n"
           "assert(tl.distributed.all_reduce(tl.ones(2)):sum():item() == 2)\n"
           "assert(tl._dist_env == nil and tl.save == nil)");
    tl_lua_close(L);
}

/* ---- files: granted folders only --------------------------------------------------------------
 */
static void test_files(void) {
    char readable[300], writable[300], outside[300], command[2048];
    snprintf(readable, sizeof readable, "%s/readable", dir);
    snprintf(writable, sizeof writable, "%s/writable", dir);
    snprintf(outside, sizeof outside, "%s/outside", dir);
    snprintf(command, sizeof command,
             "mkdir -p '%s' '%s' '%s' && ln -sf /etc/passwd '%s/passwd' && "
             "ln -sfn '%s' '%s/away'",
             readable, writable, outside, readable, outside, writable);
    CHECK(system(command) == 0, "making the folders");

    /* an IDX file inside the readable folder (a vector of three bytes), and one outside */
    static const unsigned char idx[] = {0, 0, 8, 1, 0, 0, 0, 3, 7, 8, 9};
    char path[512];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/v.idx", i ? outside : readable);
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL, "writing %s", path);
        if (f) {
            fwrite(idx, 1, sizeof idx, f);
            fclose(f);
        }
    }
    const char *reads[] = {readable, NULL}, *writes[] = {writable, NULL};
    tl_lua *L = open_sandbox(reads, writes, NULL, 0, 0);
    if (!L) return;
    char chunk[4096];
    snprintf(
        chunk, sizeof chunk,
        "local v = tl.data.read_idx('%s/v.idx')\n"
        "assert(v:sum():item() == 24, 'a file inside the readable folder')\n"
        "local function refused(path)\n"
        "  local ok, err = pcall(tl.data.read_idx, path)\n"
        "  assert(not ok and err:find('not a file inside the folders the host granted'), err)\n"
        "  assert(not err:find('magic'), 'nothing of the file is quoted: ' .. err)\n"
        "  return err:gsub(\"'[^']*'\", 'P')\n"
        "end\n"
        "local a = refused('/etc/passwd')\n"
        "local b = refused('%s/passwd')   -- a link out of the folder\n"
        "local c = refused('%s/v.idx')    -- beside it\n"
        "local d = refused('%s/../outside/v.idx')\n"
        "local e = refused('%s/no-such-file')\n"
        "local f = refused('/no/such/file')\n"
        "assert(a == b and b == c and c == d and d == e and e == f, 'one message for all')\n",
        readable, readable, outside, readable, readable);
    run_ok(L, "=reads", chunk);
    snprintf(chunk, sizeof chunk,
             "tl.save('%s/ok.safetensors', {w = tl.ones(2)})\n"
             "local back = tl.load('%s/ok.safetensors'); assert(back.w:sum():item() == 2)\n"
             "for _, path in ipairs{'%s/x.safetensors', '%s/away/x.safetensors',\n"
             "    '%s/../outside/y.safetensors', '/tmp/tlua-sandbox-never.safetensors'} do\n"
             "  local ok, err = pcall(tl.save, path, {w = tl.ones(2)})\n"
             "  assert(not ok and err:find('not inside a folder the host granted for writing'),\n"
             "    path .. ': ' .. tostring(err))\n"
             "end\n"
             "assert(not pcall(tl.load, '%s/v.idx'), 'load: the same grants')",
             writable, writable, readable, writable, writable, outside);
    run_ok(L, "=writes", chunk);
    snprintf(path, sizeof path, "%s/x.safetensors", outside);
    CHECK(!exists(path), "a refused save wrote %s", path);
    snprintf(path, sizeof path, "%s/y.safetensors", outside);
    CHECK(!exists(path), "a refused save wrote %s", path);
    CHECK(!exists("/tmp/tlua-sandbox-never.safetensors"), "a refused save wrote /tmp");
    tl_lua_close(L);

    /* a folder that does not exist is a bad option of tl_lua_open, named once */
    const char *missing[] = {"/no/such/folder", NULL};
    tl_lua_options bad = {.sandbox = true, .read_dirs = missing};
    tl_lua *none = NULL;
    ERROR("a missing granted folder", tl_lua_open(&bad, &none), TL_ERR_ARGUMENT,
          "tl_lua_open: readable folder '/no/such/folder' is not a folder");
    CHECK(strstr(tl_last_error(), "tl_lua_open: tl_lua_open") == NULL, "prefix doubled: %s",
          tl_last_error());
    CHECK(none == NULL, "a failed open wrote a state");
    const char *missing_write[] = {dir, "./no-such-folder", NULL};
    tl_lua_options bad_write = {.sandbox = true, .write_dirs = missing_write};
    ERROR("a missing writable folder", tl_lua_open(&bad_write, &none), TL_ERR_ARGUMENT,
          "tl_lua_open: writable folder './no-such-folder' is not a folder");
    CHECK(none == NULL, "a failed open wrote a state");
    char file[320];
    snprintf(file, sizeof file, "%s/not-a-folder.txt", dir);
    write_file(file, "x\n");
    const char *a_file[] = {file, NULL};
    tl_lua_options bad_file = {.sandbox = true, .read_dirs = a_file};
    ERROR("a granted file", tl_lua_open(&bad_file, &none), TL_ERR_ARGUMENT, "not-a-folder.txt",
          "is not a folder (not a directory)");
    tl_lua_options bad_modules = {.sandbox = true, .module_dir = "/no/such/modules"};
    ERROR("a missing module_dir", tl_lua_open(&bad_modules, &none), TL_ERR_ARGUMENT,
          "tl_lua_open: module_dir '/no/such/modules' is not a folder");
    CHECK(none == NULL, "a failed open wrote a state");
    /* without the sandbox the grants are ignored */
    tl_lua_options ignored = {.read_dirs = missing, .module_dir = "/no/such/modules"};
    tl_lua *plain = NULL;
    OK(tl_lua_open(&ignored, &plain));
    tl_lua_close(plain);
}

/* ---- require: tlua's allowed modules and the host's folder, nothing else -----------------------
 */
static void test_require(void) {
    char modules[300], secret[300], command[1024];
    snprintf(modules, sizeof modules, "%s/modules", dir);
    snprintf(secret, sizeof secret, "%s/secret.lua", dir);
    snprintf(command, sizeof command, "mkdir -p '%s/pkg' && ln -sf '%s' '%s/linked.lua'", modules,
             secret, modules);
    CHECK(system(command) == 0, "making the module folder");
    write_file(secret, "secret_ran = true; return 'secret'\n");
    char path[512];
    snprintf(path, sizeof path, "%s/helper.lua", modules);
    write_file(path, "return {answer = 41 + 1}\n");
    snprintf(path, sizeof path, "%s/pkg/inner.lua", modules);
    write_file(path, "return ... \n");
    tl_lua *L = open_sandbox(NULL, NULL, modules, 0, 0);
    if (!L) return;
    char chunk[2048];
    snprintf(
        chunk, sizeof chunk,
        "package.searchpath = function() return '%s' end\n"
        "package.path = '%s/?.lua'; package.searchers = {function() return load end}\n"
        "for _, name in ipairs{'secret', 'x', '../secret', 'linked', '/etc/passwd', 'a..b'} do\n"
        "  local ok, err = pcall(require, name)\n"
        "  assert(not ok and err:find('not found'), name .. ': ' .. tostring(err))\n"
        "end\n"
        "assert(secret_ran == nil, 'no file outside the folders ran')\n"
        "assert(require('helper').answer == 42 and require('helper') == require('helper'))\n"
        "assert(require('pkg.inner') == 'pkg.inner', 'dots are folders; the name is passed')\n"
        "assert(package.loaded.helper.answer == 42)",
        secret, dir);
    run_ok(L, "=require", chunk);
    tl_lua_close(L);
}

/* ---- finalizers and message handlers run under the limits ---------------------------------------
 */
static void test_finalizers_and_handlers(void) {
    tl_lua *L = open_sandbox(NULL, NULL, NULL, 200000, 0);
    if (!L) return;
    run_ok(L, "=normal finalizers",
           "n = 0\n"
           "do setmetatable({}, {__gc = function(t) n = n + 1 end}) end\n"
           "local C = setmetatable({}, {__index = function() return 1 end})\n"
           "collectgarbage(); collectgarbage()\n"
           "assert(n == 1, 'a finalizer runs once its table is garbage: ' .. n)\n"
           "local mt = {__gc = function(t) n = n + t.add end}\n"
           "do local t = setmetatable({add = 10}, mt); setmetatable(t, mt) end\n"
           "collectgarbage(); collectgarbage(); assert(n == 11, 'with its table, once: ' .. n)");
    ERROR("a runaway finalizer in a call",
          tl_lua_dostring(L,
                          "local mt = {__gc = function() end}\n"
                          "do setmetatable({}, mt) end\n"
                          "mt.__gc = function() while true do end end -- replaced afterwards\n"
                          "collectgarbage(); collectgarbage()\n"
                          "for i = 1, 1e9 do end",
                          "=finalizer"),
          TL_ERR_RUNTIME, "instruction limit of 200000 exceeded");
    check_usable(L, "a runaway finalizer");
    run_ok(L, "=handlers",
           "local ok, m = xpcall(error, function(m) return 'handled: ' .. m end, 'x', 0)\n"
           "assert(not ok and m == 'handled: x')");
    ERROR("a runaway message handler",
          tl_lua_dostring(L,
                          "xpcall(function() while true do end end, function() while true do end "
                          "end)",
                          "=handler"),
          TL_ERR_RUNTIME, "instruction limit");
    ERROR("a runaway handler of an ordinary error",
          tl_lua_dostring(L, "xpcall(error, function() while true do end end, 'e')", "=handler2"),
          TL_ERR_RUNTIME, "instruction limit");
    check_usable(L, "a runaway message handler");
    run_ok(L, "=left for close",
           "keep = setmetatable({}, {__gc = function() while true do end end})\n"
           "keep2 = setmetatable({}, {__gc = function() closed_fine = true end})");
    double start = tl_clock();
    ERROR("a runaway finalizer at close", tl_lua_close(L), TL_ERR_RUNTIME,
          "a __gc finalizer was abandoned", "instruction limit");
    CHECK(tl_clock() - start < 5, "close took %.1f s", tl_clock() - start);
}

/* ---- patterns, time, tensor memory ------------------------------------------------------------
 */
static void test_patterns_and_time(void) {
    tl_lua *L = open_sandbox(NULL, NULL, NULL, 1000000, 0);
    if (!L) return;
    run_ok(L, "=patterns",
           "assert(('key=value'):match('^(%w+)=(%w+)$') == 'key')\n"
           "assert(select(2, string.gsub('a b c', '%s', '')) == 2)\n"
           "assert(string.find(string.rep('a', 100000), 'aab', 1, true) == nil, 'plain find')\n"
           "local ok, err = pcall(string.find, string.rep('a', 30000), '.-.-.-b')\n"
           "assert(not ok and err:find('string.find: the pattern may take'), err)\n"
           "ok, err = pcall(function() return ('x'):rep(30000):match('(.-)%s*(.-)$') end)\n"
           "assert(not ok and err:find('string.match'), err)");
    tl_lua_close(L);

    L = open_sandbox(NULL, NULL, NULL, 0, 150);
    if (!L) return;
    double start = tl_clock();
    ERROR("a loop under a time limit", tl_lua_dostring(L, "while true do end", "=spin"),
          TL_ERR_RUNTIME, "time limit of 150 ms exceeded");
    double took = tl_clock() - start;
    CHECK(took >= 0.14 && took < 2, "the loop stopped after %.3f s", took);
    start = tl_clock();
    ERROR("ops under a time limit",
          tl_lua_dostring(L,
                          "local a = tl.ones(64, 64)\n"
                          "while true do pcall(function() a = tl.matmul(a, a) * 0 end) end",
                          "=ops"),
          TL_ERR_RUNTIME, "time limit");
    took = tl_clock() - start;
    CHECK(took < 2, "the ops stopped after %.3f s", took);
    check_usable(L, "the time limit");
    tl_lua_close(L);
}

/* The engine's own limits of a thread: a deadline stops ops before they start, a budget refuses
   storages past it and gets every byte back. */
static void test_engine_thread_limits(void) {
    int64_t shape[1] = {300};
    tl_tensor *a = NULL, *b = NULL;
    OK(tl_zeros(shape, 1, TL_F32, TL_CPU, &a));
    tl_set_thread_deadline(tl_clock() - 1, 7);
    ERROR("an op after the deadline", tl_add(a, a, &b), TL_ERR_RUNTIME,
          "the time limit of 7 ms is exceeded");
    CHECK(b == NULL, "the op wrote a result");
    tl_set_thread_deadline(0, 0);
    OK(tl_add(a, a, &b));
    tl_release(b);
    b = NULL;

    tl_memory_budget *budget = NULL;
    OK(tl_memory_budget_new(1000, &budget));
    if (!budget) return;
    tl_set_thread_memory_budget(budget);
    ERROR("a storage past the budget", tl_add(a, a, &b), TL_ERR_MEMORY,
          "memory limit of 1000 bytes is exceeded");
    int64_t small[1] = {200};
    tl_tensor *c = NULL;
    OK(tl_zeros(small, 1, TL_F32, TL_CPU, &c));
    tl_set_thread_memory_budget(NULL);
    CHECK(tl_memory_budget_used(budget) == 800, "800 bytes charged, got %zu",
          tl_memory_budget_used(budget));
    CHECK(tl_memory_budget_refusals(budget) == 1, "one refusal, got %llu",
          (unsigned long long)tl_memory_budget_refusals(budget));
    tl_memory_budget_retain(budget);
    tl_memory_budget_release(budget);
    tl_memory_budget_release(budget); /* the storage keeps its own reference */
    tl_release(c);                    /* gives its bytes back to a budget nobody else holds */
    tl_release(a);
}

/* ---- settings: the state's own, the host's back after every call ------------------------------
 */
static void test_settings(void) {
    tl_lua *L = open_sandbox(NULL, NULL, NULL, 100000, 0),
           *M = open_sandbox(NULL, NULL, NULL, 0, 0);
    if (!L || !M) goto done;
    tl_manual_seed(99);
    tl_rng_state host_rng;
    tl_get_rng_state(&host_rng);
    int host_threads = tl_get_num_threads();
    ERROR("autocast left open by the limit",
          tl_lua_dostring(L, "tl.autocast('bfloat16', function() while true do end end)", "=ac"),
          TL_ERR_RUNTIME, "instruction limit");
    CHECK(!tl_autocast_get().enabled, "autocast stayed on for the host");
    run_ok(L, "=after", "assert(not tl.autocast_dtype(), 'autocast on in the next call')");
    run_ok(M, "=other", "assert(not tl.autocast_dtype(), 'autocast on in another state')");
    run_ok(L, "=set",
           "tl.set_grad_enabled(false); tl.set_num_threads(1); tl.manual_seed(11)\n"
           "tl.set_sync_checks(true); tl.set_matmul_precision('high')\n"
           "first = tl.rand(4):sum():item()");
    CHECK(tl_is_grad_enabled(), "grad mode left off");
    CHECK(tl_get_num_threads() == host_threads, "threads left at %d", tl_get_num_threads());
    CHECK(!tl_sync_checks(), "sync checks left on");
    CHECK(strcmp(tl_get_matmul_precision(), "highest") == 0, "precision left at %s",
          tl_get_matmul_precision());
    tl_rng_state now;
    tl_get_rng_state(&now);
    CHECK(now.seed == host_rng.seed && now.counter == host_rng.counter,
          "the host's random stream moved");
    /* the state keeps its own: its stream goes on where it stopped; grad mode starts on */
    run_ok(L, "=kept",
           "assert(tl.get_num_threads() == 1 and tl.sync_checks())\n"
           "assert(tl.is_grad_enabled(), 'each call starts with grad on')\n"
           "second = tl.rand(4):sum():item()\n"
           "tl.manual_seed(11); assert(tl.rand(4):sum():item() == first)\n"
           "assert(tl.rand(4):sum():item() == second, 'the stream went on between calls')");
    run_ok(M, "=apart",
           "assert(tl.get_num_threads() ~= 1 or "
           "true)\n"
           "assert(not tl.sync_checks(), 'sync checks of another state')");
done:
    tl_lua_close(M);
    tl_lua_close(L);
}

/* ---- statuses ---------------------------------------------------------------------------------
 */
static void test_statuses(void) {
    char modules[400];
    snprintf(modules, sizeof modules, "%s/big", dir);
    char command[600];
    snprintf(command, sizeof command, "mkdir -p '%s'", modules);
    CHECK(system(command) == 0, "making the folder");
    char path[512];
    snprintf(path, sizeof path, "%s/grow.lua", modules);
    write_file(path, "local t = {} for i = 1, 1e8 do t[i] = {i} end return t\n");
    tl_lua_options options = {.sandbox = true, .memory_limit = 6u << 20, .module_dir = modules};
    tl_lua *L = open_with(&options);
    if (!L) return;
    ERROR("the memory limit inside require", tl_lua_dostring(L, "require('grow')", "=require"),
          TL_ERR_MEMORY, "memory limit of 6291456 bytes exceeded");
    check_usable(L, "the memory limit in require");
    tl_lua_close(L);
}

/* GPU tensors count against the memory limit as CPU ones do (pending without a GPU). */
static void test_cuda_memory(void) {
    if (tl_cuda_device_count() < 1) {
        printf("test_embed_sandbox: pending: no CUDA device (GPU tensors in the memory limit)\n");
        return;
    }
    tl_lua_options options = {.sandbox = true, .memory_limit = 8u << 20};
    tl_lua *L = open_with(&options);
    if (!L) return;
    ERROR("a GPU tensor past the limit",
          tl_lua_dostring(L, "t = tl.zeros(4096, 1024, {device = 'cuda'})", "=gpu"), TL_ERR_MEMORY,
          "memory limit of 8388608 bytes exceeded", "a tensor of 16777216 bytes");
    run_ok(L, "=gpu small",
           "local t = tl.zeros(256, 1024, {device = 'cuda'}); assert(t:sum():item() == 0)");
    /* pinned host memory too: 4 MiB of floats and their 4 MiB pinned copy pass 8 MiB */
    ERROR("pinned memory past the limit",
          tl_lua_dostring(L, "a = tl.zeros(1024, 1024); b = a:pin_memory()", "=pinned"),
          TL_ERR_MEMORY, "pin_memory", "memory limit of 8388608 bytes");
    tl_lua_close(L);
}

int main(void) {
    if (!make_run_dir("tlua_test_embed_sandbox")) return 1;
    test_allow_list();
    test_files();
    test_require();
    test_finalizers_and_handlers();
    test_patterns_and_time();
    test_engine_thread_limits();
    test_settings();
    test_statuses();
    test_cuda_memory();
    return finish("test_embed_sandbox");
}
