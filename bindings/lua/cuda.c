/* The CUDA runtime from Lua: availability, synchronize, allocator statistics, matmul precision,
   CUDA graph handles. */
#include <stddef.h>

#include "binding.h"
#include "tlua/cuda.h"

/* The device index of an optional argument: nil (the default device, "cuda"), an index, or
   "cuda:N". */
static int device_index(lua_State *L, int idx, const char *op) {
    if (lua_isnoneornil(L, idx)) return tl_default_cuda_device();
    if (lua_type(L, idx) == LUA_TSTRING) {
        tl_device device = tlb_check_device(L, idx, op);
        if (device.type != TL_DEVICE_CUDA)
            return tlb_errorf(L, "%s: expected a CUDA device, got '%s'", op, lua_tostring(L, idx));
        return device.index;
    }
    int64_t index = tlb_check_int(L, idx, op, "a device index");
    if (index < 0 || index > 1023) return tlb_errorf(L, "%s: bad device index %d", op, (int)index);
    return (int)index;
}

static int cuda_is_available(lua_State *L) {
    lua_pushboolean(L, tl_cuda_is_available());
    return 1;
}

/* set_device(index | "cuda:N"): the device "cuda" names from now on */
static int cuda_set_device(lua_State *L) {
    tlb_check_process(L, "set_device");
    if (lua_isnoneornil(L, 1)) return tlb_errorf(L, "set_device: expected a device index");
    if (tl_set_default_cuda_device(device_index(L, 1, "set_device")) != TL_OK) return tlb_fail(L);
    return 0;
}

static int cuda_current_device(lua_State *L) {
    lua_pushinteger(L, tl_default_cuda_device());
    return 1;
}

static int cuda_synchronize(lua_State *L) {
    if (tl_cuda_synchronize(device_index(L, 1, "synchronize")) != TL_OK) return tlb_fail(L);
    return 0;
}

static const tlb_counter cuda_counters[] = {
    {"allocated", offsetof(tl_cuda_allocator_stats, allocated_bytes)},
    {"reserved", offsetof(tl_cuda_allocator_stats, reserved_bytes)},
    {"peak", offsetof(tl_cuda_allocator_stats, peak_allocated_bytes)},
    {"peak_reserved", offsetof(tl_cuda_allocator_stats, peak_reserved_bytes)},
    {"requested", offsetof(tl_cuda_allocator_stats, requested_bytes)},
    {"active_blocks", offsetof(tl_cuda_allocator_stats, active_blocks)},
    {"cached_blocks", offsetof(tl_cuda_allocator_stats, cached_blocks)},
    {"alloc_count", offsetof(tl_cuda_allocator_stats, alloc_count)},
    {"free_count", offsetof(tl_cuda_allocator_stats, free_count)},
    {"cuda_malloc_count", offsetof(tl_cuda_allocator_stats, cuda_malloc_count)},
    {"cuda_free_count", offsetof(tl_cuda_allocator_stats, cuda_free_count)},
    {"oom_count", offsetof(tl_cuda_allocator_stats, oom_count)},
};

static int cuda_memory_stats(lua_State *L) {
    tl_cuda_allocator_stats s;
    if (tl_cuda_memory_stats(device_index(L, 1, "memory_stats"), &s) != TL_OK) return tlb_fail(L);
    tlb_push_counters(L, &s, cuda_counters, (int)(sizeof cuda_counters / sizeof *cuda_counters));
    return 1;
}

static int cuda_reset_peak_memory_stats(lua_State *L) {
    if (tl_cuda_reset_peak_memory_stats(device_index(L, 1, "reset_peak_memory_stats")) != TL_OK)
        return tlb_fail(L);
    return 0;
}

static int cuda_empty_cache(lua_State *L) {
    int device = lua_isnoneornil(L, 1) ? -1 : device_index(L, 1, "empty_cache");
    if (tl_cuda_empty_cache(device) != TL_OK) return tlb_fail(L);
    return 0;
}

static int set_matmul_precision(lua_State *L) {
    const char *precision = luaL_checkstring(L, 1);
    if (tl_set_matmul_precision(precision) != TL_OK) return tlb_fail(L);
    return 0;
}

/* get_device_name(device?): the product name of a device (default: the current one) */
static int cuda_get_device_name(lua_State *L) {
    char name[256];
    if (tl_cuda_device_name(device_index(L, 1, "get_device_name"), name, sizeof name) != TL_OK)
        return tlb_fail(L);
    lua_pushstring(L, name);
    return 1;
}

/* get_device_capability(device?): major, minor (default: the current device) */
static int cuda_get_device_capability(lua_State *L) {
    int major = 0, minor = 0;
    if (tl_cuda_device_capability(device_index(L, 1, "get_device_capability"), &major, &minor) !=
        TL_OK)
        return tlb_fail(L);
    lua_pushinteger(L, major);
    lua_pushinteger(L, minor);
    return 2;
}

/* host_waits(): how many times the host has waited for a GPU on tlua's behalf (tlua/cuda.h) */
static int cuda_host_waits(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)tl_cuda_host_waits());
    return 1;
}

static int get_matmul_precision(lua_State *L) {
    lua_pushstring(L, tl_get_matmul_precision());
    return 1;
}

/* ---- graphs: a userdata holding a tl_cuda_graph (NULL once destroyed) ----------------------- */
#define GRAPH_MT "tlua.CudaGraphHandle"

static tl_cuda_graph **graph_slot(lua_State *L, int idx, const char *op) {
    tl_cuda_graph **slot = luaL_testudata(L, idx, GRAPH_MT);
    if (!slot) tlb_errorf(L, "%s: expected a graph handle", op);
    return slot;
}

static int graph_gc(lua_State *L) {
    tl_cuda_graph **slot = luaL_testudata(L, 1, GRAPH_MT);
    if (slot && *slot) {
        tl_cuda_graph_destroy(*slot);
        *slot = NULL;
    }
    return 0;
}

/* _cuda_graph_capture(device, fn, ...) -> handle, fn's results | nil, message: fn(...) run while
   the device's stream is captured. The capture ends here whatever fn does, so no Lua path can leave
   a device capturing: on an error of fn, or a refusal of the capture, the graph is freed and nil
   comes back with the message. */
static int cuda_graph_capture(lua_State *L) {
    int device = device_index(L, 1, "graph");
    int top = lua_gettop(L);
    if (top < 2) return tlb_errorf(L, "graph: expected a function to capture");
    tl_cuda_graph **slot = lua_newuserdatauv(L, sizeof *slot, 0);
    *slot = NULL;
    if (luaL_newmetatable(L, GRAPH_MT)) {
        lua_pushcfunction(L, graph_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    const int handle = top + 1;
    /* no collection during the capture: a finalizer it ran (a graph's, a pinned buffer's) could
       make a call the capture cannot hold, breaking it (which depends on when the collector's
       steps happen to fall) */
    const bool collecting = lua_gc(L, LUA_GCISRUNNING);
    lua_gc(L, LUA_GCSTOP);
    if (tl_cuda_graph_capture_begin(device, slot) != TL_OK) {
        if (collecting) lua_gc(L, LUA_GCRESTART);
        return tlb_fail(L);
    }
    for (int i = 2; i <= top; i++) lua_pushvalue(L, i); /* fn and its arguments */
    const int called = lua_pcall(L, top - 2, LUA_MULTRET, 0);
    if (collecting) lua_gc(L, LUA_GCRESTART);
    if (called != LUA_OK) {
        tl_cuda_graph_destroy(*slot);
        *slot = NULL;
        lua_pushnil(L);
        lua_insert(L, -2); /* nil, the error value */
        return 2;
    }
    if (tl_cuda_graph_capture_end(*slot) != TL_OK) {
        tl_cuda_graph_destroy(*slot);
        *slot = NULL;
        lua_pushnil(L);
        lua_pushstring(L, tl_last_error());
        return 2;
    }
    const int results = lua_gettop(L) - handle;
    lua_pushvalue(L, handle);
    lua_rotate(L, handle + 1, 1); /* handle, fn's results */
    return results + 1;
}

static int cuda_graph_replay(lua_State *L) {
    tl_cuda_graph **slot = graph_slot(L, 1, "graph");
    if (tl_cuda_graph_replay(*slot) != TL_OK) return tlb_fail(L);
    return 0;
}

/* _cuda_graph_destroy(handle): frees it now (its memory back to the cache) */
static int cuda_graph_destroy(lua_State *L) {
    graph_slot(L, 1, "graph");
    return graph_gc(L);
}

static int cuda_is_capturing(lua_State *L) {
    lua_pushboolean(L, tl_cuda_is_capturing(device_index(L, 1, "is_capturing")));
    return 1;
}

const luaL_Reg tlb_cuda_functions[] = {
    {"_cuda_graph_capture", cuda_graph_capture},
    {"_cuda_graph_replay", cuda_graph_replay},
    {"_cuda_graph_destroy", cuda_graph_destroy},
    {"_cuda_is_capturing", cuda_is_capturing},
    {"_cuda_is_available", cuda_is_available},
    {"_cuda_synchronize", cuda_synchronize},
    {"_cuda_host_waits", cuda_host_waits},
    {"_cuda_get_device_name", cuda_get_device_name},
    {"_cuda_get_device_capability", cuda_get_device_capability},
    {"_cuda_set_device", cuda_set_device},
    {"_cuda_current_device", cuda_current_device},
    {"_cuda_memory_stats", cuda_memory_stats},
    {"_cuda_reset_peak_memory_stats", cuda_reset_peak_memory_stats},
    {"_cuda_empty_cache", cuda_empty_cache},
    {"set_matmul_precision", set_matmul_precision},
    {"get_matmul_precision", get_matmul_precision},
    {NULL, NULL},
};
