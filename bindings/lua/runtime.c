/* Runtime functions: clock, threads, seeds, and the kernel trace (tl.trace, tl.kernels). */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

static int rt_clock(lua_State *L) {
    lua_pushnumber(L, (lua_Number)tl_clock());
    return 1;
}

static int rt_set_num_threads(lua_State *L) {
    int64_t n = tlb_check_int(L, 1, "set_num_threads", "n");
    if (n > INT_MAX) n = INT_MAX;
    if (n < INT_MIN) n = INT_MIN;
    if (tl_set_num_threads((int)n) != TL_OK) return tlb_fail(L);
    return 0;
}

static int rt_get_num_threads(lua_State *L) {
    lua_pushinteger(L, tl_get_num_threads());
    return 1;
}

static int rt_manual_seed(lua_State *L) {
    tl_manual_seed((uint64_t)tlb_check_int(L, 1, "manual_seed", "seed"));
    return 0;
}

/* _set_cudnn_enabled(bool) and _cudnn_enabled(): tl.cuda's cudnn_enabled setting */
static int rt_set_cudnn_enabled(lua_State *L) {
    if (!lua_isboolean(L, 1))
        return tlb_errorf(L, "set_cudnn_enabled: argument 1 expected a boolean, got %s",
                          tlb_typename(L, 1));
    tl_set_cudnn_enabled(lua_toboolean(L, 1));
    return 0;
}

static int rt_cudnn_enabled(lua_State *L) {
    lua_pushboolean(L, tl_cudnn_enabled());
    return 1;
}

/* _set_hopper_gemm_enabled(bool) and _hopper_gemm_enabled(): tl.cuda's hopper_gemm_enabled */
static int rt_set_hopper_gemm_enabled(lua_State *L) {
    if (!lua_isboolean(L, 1))
        return tlb_errorf(L, "set_hopper_gemm_enabled: argument 1 expected a boolean, got %s",
                          tlb_typename(L, 1));
    tl_set_hopper_gemm_enabled(lua_toboolean(L, 1));
    return 0;
}

static int rt_hopper_gemm_enabled(lua_State *L) {
    lua_pushboolean(L, tl_hopper_gemm_enabled());
    return 1;
}

/* get_rng_state() -> an int64 tensor {seed, counter} (the seed's 64 bits as a signed integer):
   the one generator every device draws from (Philox blocks, counted), for a checkpoint */
static int rt_get_rng_state(lua_State *L) {
    tl_rng_state state;
    tl_get_rng_state(&state);
    int64_t words[2] = {(int64_t)state.seed, (int64_t)state.counter}, shape = 2;
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_from_host(words, &shape, 1, TL_I64, TL_CPU, &out);
    return tlb_result(L, box, status, out);
}

/* set_rng_state(state): restores what get_rng_state returned (an int64 tensor of 2 elements) */
static int rt_set_rng_state(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "set_rng_state");
    if (t->dtype != TL_I64 || t->ndim != 1 || t->shape[0] != 2)
        return tlb_errorf(L,
                          "set_rng_state: argument 1 expected the int64 tensor of 2 elements "
                          "get_rng_state returns, got a %s tensor of %lld elements",
                          tl_dtype_name(t->dtype), (long long)tl_numel(t));
    int64_t words[2];
    tl_tensor *dense = NULL;
    tl_status status = tl_contiguous(t, &dense);
    if (status == TL_OK) status = tl_to_host(dense, words);
    tl_release(dense);
    if (status != TL_OK) return tlb_fail(L);
    if (words[1] < 0)
        return tlb_errorf(L, "set_rng_state: the counter must be >= 0, got %lld",
                          (long long)words[1]);
    tl_set_rng_state((tl_rng_state){.seed = (uint64_t)words[0], .counter = (uint64_t)words[1]});
    return 0;
}

/* set_sync_checks(bool): CUDA index checks wait and raise at once (true) or are raised by the
   next synchronization (false, the default); sync_checks() -> the setting */
static int rt_set_sync_checks(lua_State *L) {
    if (!lua_isboolean(L, 1))
        return tlb_errorf(L, "set_sync_checks: argument 1 expected a boolean, got %s",
                          tlb_typename(L, 1));
    tl_set_sync_checks(lua_toboolean(L, 1));
    return 0;
}

static int rt_sync_checks(lua_State *L) {
    lua_pushboolean(L, tl_sync_checks());
    return 1;
}

static int rt_cuda_device_count(lua_State *L) {
    lua_pushinteger(L, tl_cuda_device_count());
    return 1;
}

/* ---- memory statistics ------------------------------------------------------ */
static const tlb_counter cpu_counters[] = {
    {"allocated", offsetof(tl_cpu_memory_stats, allocated_bytes)},
    {"peak", offsetof(tl_cpu_memory_stats, peak_allocated_bytes)},
    {"active_blocks", offsetof(tl_cpu_memory_stats, active_blocks)},
    {"alloc_count", offsetof(tl_cpu_memory_stats, alloc_count)},
    {"free_count", offsetof(tl_cpu_memory_stats, free_count)},
};

/* tl.memory_stats("cpu") -> {allocated, peak, active_blocks, alloc_count, free_count} in bytes
   (a CUDA device is served by tl.cuda.memory_stats, which tlua/init.lua forwards to) */
static int rt_cpu_memory_stats(lua_State *L) {
    tl_cpu_memory_stats s;
    tl_cpu_get_memory_stats(&s);
    tlb_push_counters(L, &s, cpu_counters, (int)(sizeof cpu_counters / sizeof *cpu_counters));
    return 1;
}

static int rt_cpu_reset_peak_memory_stats(lua_State *L) {
    (void)L;
    tl_cpu_reset_peak_memory_stats();
    return 0;
}

/* ---- trace ---------------------------------------------------------------- */
/* A to-be-closed guard of tl.trace: ends the trace if fn raised, and frees
   the copied events however the call ends. */
typedef struct trace_guard {
    bool recording;
    tl_trace_event *events;
} trace_guard;

static int trace_guard_close(lua_State *L) {
    trace_guard *g = lua_touserdata(L, 1);
    if (!g) return 0;
    if (g->recording) {
        g->recording = false;
        tl_trace_event *events = NULL;
        int count = 0;
        tl_trace_end(&events, &count);
        free(events);
    }
    free(g->events);
    g->events = NULL;
    return 0;
}

static void set_string(lua_State *L, const char *key, const char *value) {
    lua_pushstring(L, value ? value : "?");
    lua_setfield(L, -2, key);
}

static void push_event(lua_State *L, const tl_trace_event *e) {
    char device[16];
    lua_createtable(L, 0, 5);
    set_string(L, "op", e->op);
    set_string(L, "kernel", e->kernel);
    set_string(L, "device", tl_device_name(e->device, device));
    set_string(L, "dtype", tl_dtype_name(e->dtype));
    lua_createtable(L, e->ntensors, 0);
    for (int i = 0; i < e->ntensors && i < TL_TRACE_MAX_TENSORS; i++) {
        lua_createtable(L, e->ndims[i], 0);
        for (int d = 0; d < e->ndims[i] && d < TL_MAX_DIMS; d++) {
            lua_pushinteger(L, (lua_Integer)e->shapes[i][d]);
            lua_rawseti(L, -2, d + 1);
        }
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "shapes");
    if (e->nvariants > 0) { /* the paths taken: variants = {...}, variant = "a+b" */
        lua_createtable(L, e->nvariants, 0);
        luaL_Buffer joined;
        luaL_buffinit(L, &joined);
        for (int i = 0; i < e->nvariants && i < TL_TRACE_MAX_VARIANTS; i++) {
            if (i) luaL_addchar(&joined, '+');
            luaL_addstring(&joined, e->variants[i]);
        }
        luaL_pushresult(&joined);
        lua_setfield(L, -3, "variant");
        for (int i = 0; i < e->nvariants && i < TL_TRACE_MAX_VARIANTS; i++) {
            lua_pushstring(L, e->variants[i]);
            lua_rawseti(L, -2, i + 1);
        }
        lua_setfield(L, -2, "variants");
    }
}

/* tl.trace(fn, ...) -> list of kernel runs {op=, kernel=, device=, dtype=, shapes=},
   followed by fn's results. Errors of fn pass through (the trace is ended). */
static int rt_trace(lua_State *L) {
    if (!tlb_is_callable(L, 1)) return tlb_type_error(L, 1, "trace", "a function");
    int nargs = lua_gettop(L) - 1;
    trace_guard *g = lua_newuserdatauv(L, sizeof *g, 0);
    g->recording = false;
    g->events = NULL;
    tlb_push_guard_metatable(L, trace_guard_close);
    lua_setmetatable(L, -2);
    lua_toclose(L, -1);
    int base = lua_gettop(L);
    luaL_checkstack(L, nargs + 1, "trace");
    for (int i = 1; i <= nargs + 1; i++) lua_pushvalue(L, i);
    tl_trace_begin();
    g->recording = true;
    lua_call(L, nargs, LUA_MULTRET);
    g->recording = false;
    int count = 0;
    tl_status status = tl_trace_end(&g->events, &count);
    if (status != TL_OK) return tlb_fail(L);
    lua_createtable(L, count, 0);
    for (int i = 0; i < count; i++) {
        push_event(L, &g->events[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_insert(L, base + 1);
    return lua_gettop(L) - base;
}

/* Pushes a table {op=, kernel=, device=, dtype=, runs=} of a registered kernel (or variant; the
   caller adds its fields). */
static void push_kernel_fields(lua_State *L, const char *op, const char *kernel,
                               tl_device_type device, tl_dtype dtype, uint64_t runs) {
    lua_createtable(L, 0, 7);
    if (op) set_string(L, "op", op); /* a loop's variant has neither */
    if (kernel) set_string(L, "kernel", kernel);
    set_string(L, "device", device == TL_DEVICE_CPU ? "cpu" : "cuda");
    set_string(L, "dtype", tl_dtype_name(dtype));
    lua_pushinteger(L, (lua_Integer)runs);
    lua_setfield(L, -2, "runs");
}

/* tl.kernels() -> list of {op=, kernel=, device=, dtype=, runs=} */
static int rt_kernels(lua_State *L) {
    int count = tl_kernel_list(NULL, 0);
    if (count < 0) count = 0;
    tl_kernel_info *infos = lua_newuserdatauv(L, sizeof *infos * (size_t)(count ? count : 1), 0);
    int total = tl_kernel_list(infos, count);
    if (total < count) count = total;
    lua_createtable(L, count, 0);
    for (int i = 0; i < count; i++) {
        const tl_kernel_info *k = &infos[i];
        push_kernel_fields(L, k->op, k->kernel, k->device, k->dtype, k->runs);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* tl.kernel_variants() -> list of {op=, kernel=, variant=, condition=, device=, dtype=, runs=}:
   the paths of the kernels that have several; a path of a loop many kernels share has loop=
   (its name) instead of op= and kernel= */
static int rt_kernel_variants(lua_State *L) {
    int count = tl_kernel_variant_list(NULL, 0);
    tl_kernel_variant_info *infos =
        lua_newuserdatauv(L, sizeof *infos * (size_t)(count ? count : 1), 0);
    int total = tl_kernel_variant_list(infos, count);
    if (total < count) count = total;
    lua_createtable(L, count, 0);
    for (int i = 0; i < count; i++) {
        const tl_kernel_variant_info *v = &infos[i];
        push_kernel_fields(L, v->op, v->kernel, v->device, v->dtype, v->runs);
        set_string(L, "variant", v->variant);
        set_string(L, "condition", v->condition);
        if (v->loop) set_string(L, "loop", v->loop);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* t.numbers = the names of a pointwise row's numbers ("min_val=-1 max_val=1": {"min_val",
   "max_val"}) */
static void set_number_names(lua_State *L, const char *numbers) {
    lua_newtable(L);
    int n = 0;
    for (const char *p = numbers; *p;) {
        while (*p == ' ') p++;
        const char *equals = strchr(p, '=');
        if (!equals) break;
        lua_pushlstring(L, p, (size_t)(equals - p));
        lua_rawseti(L, -2, ++n);
        for (p = equals; *p && *p != ' '; p++) {
        }
    }
    lua_setfield(L, -2, "numbers");
}

/* tl.ops() -> the op table: list of {name=, family=, differentiable=, backward=}
   with backward "none", "kernels" or "composed"; pointwise rows add dtypes (their rule in lower
   case: "float", "float_only", "int", "bool_out", "bits") and numbers (their names) */
static int rt_ops(lua_State *L) {
    int count = tl_op_list(NULL, 0);
    tl_op_description *ops = lua_newuserdatauv(L, (size_t)count * sizeof *ops, 0);
    tl_op_list(ops, count);
    lua_createtable(L, count, 0);
    for (int i = 0; i < count; i++) {
        lua_createtable(L, 0, 4);
        set_string(L, "name", ops[i].name);
        set_string(L, "family", ops[i].family);
        lua_pushboolean(L, ops[i].differentiable);
        lua_setfield(L, -2, "differentiable");
        set_string(L, "backward", ops[i].backward);
        if (ops[i].dtypes) {
            char rule[16];
            size_t n = 0;
            for (; ops[i].dtypes[n] && n + 1 < sizeof rule; n++) {
                char c = ops[i].dtypes[n];
                rule[n] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
            }
            rule[n] = 0;
            set_string(L, "dtypes", rule);
            set_number_names(L, ops[i].numbers);
        }
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

const luaL_Reg tlb_runtime_functions[] = {
    {"ops", rt_ops},
    {"_cpu_memory_stats", rt_cpu_memory_stats},
    {"_cpu_reset_peak_memory_stats", rt_cpu_reset_peak_memory_stats},
    {"clock", rt_clock},
    {"set_num_threads", rt_set_num_threads},
    {"get_num_threads", rt_get_num_threads},
    {"manual_seed", rt_manual_seed},
    {"get_rng_state", rt_get_rng_state},
    {"_set_cudnn_enabled", rt_set_cudnn_enabled},
    {"_cudnn_enabled", rt_cudnn_enabled},
    {"_set_hopper_gemm_enabled", rt_set_hopper_gemm_enabled},
    {"_hopper_gemm_enabled", rt_hopper_gemm_enabled},
    {"set_rng_state", rt_set_rng_state},
    {"cuda_device_count", rt_cuda_device_count},
    {"set_sync_checks", rt_set_sync_checks},
    {"sync_checks", rt_sync_checks},
    {"trace", rt_trace},
    {"kernels", rt_kernels},
    {"kernel_variants", rt_kernel_variants},
    {NULL, NULL},
};
