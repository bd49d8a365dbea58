/* The CUDA runtime from Lua: availability, synchronize, allocator statistics, matmul precision. */
#include "binding.h"
#include "tlua/cuda.h"

/* The device index of an optional argument: nil (cuda:0), an index, or "cuda:N". */
static int device_index(lua_State *L, int idx, const char *op) {
    if (lua_isnoneornil(L, idx)) return 0;
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

static int cuda_synchronize(lua_State *L) {
    if (tl_cuda_synchronize(device_index(L, 1, "synchronize")) != TL_OK) return tlb_fail(L);
    return 0;
}

static void set_number(lua_State *L, const char *name, uint64_t value) {
    lua_pushinteger(L, (lua_Integer)value);
    lua_setfield(L, -2, name);
}

static int cuda_memory_stats(lua_State *L) {
    tl_cuda_allocator_stats s;
    if (tl_cuda_memory_stats(device_index(L, 1, "memory_stats"), &s) != TL_OK) return tlb_fail(L);
    lua_createtable(L, 0, 12);
    set_number(L, "allocated", s.allocated_bytes);
    set_number(L, "reserved", s.reserved_bytes);
    set_number(L, "peak", s.peak_allocated_bytes);
    set_number(L, "peak_reserved", s.peak_reserved_bytes);
    set_number(L, "requested", s.requested_bytes);
    set_number(L, "active_blocks", s.active_blocks);
    set_number(L, "cached_blocks", s.cached_blocks);
    set_number(L, "alloc_count", s.alloc_count);
    set_number(L, "free_count", s.free_count);
    set_number(L, "cuda_malloc_count", s.cuda_malloc_count);
    set_number(L, "cuda_free_count", s.cuda_free_count);
    set_number(L, "oom_count", s.oom_count);
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

static int get_matmul_precision(lua_State *L) {
    lua_pushstring(L, tl_get_matmul_precision());
    return 1;
}

const luaL_Reg tlb_cuda_functions[] = {
    {"_cuda_is_available", cuda_is_available},
    {"_cuda_synchronize", cuda_synchronize},
    {"_cuda_memory_stats", cuda_memory_stats},
    {"_cuda_reset_peak_memory_stats", cuda_reset_peak_memory_stats},
    {"_cuda_empty_cache", cuda_empty_cache},
    {"set_matmul_precision", set_matmul_precision},
    {"get_matmul_precision", get_matmul_precision},
    {NULL, NULL},
};
