/* The tensor userdata: a box holding one reference, tensor arguments, release by __gc and __close.
   Uses the errors and argument helpers of args.c, which know nothing of the box. */
#include <stdio.h>

#include "binding.h"

tlb_box *tlb_newbox(lua_State *L) {
    tlb_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->tensor = NULL;
    lua_pushvalue(L, TLB_MT);
    lua_setmetatable(L, -2);
    return box;
}

/* Tensor memory counts as garbage-collector debt so that loops making large temporaries collect
   them at the pace of their memory, not of the (tiny) Lua heap. A collector step runs once the
   tensors made since the last one reach a quarter of the tensor memory live at that step (and at
   least 256 KiB). Under the generational collector (the tlua executable's, and the stock lua's)
   that step is a young collection: it frees the temporaries that died since the last one and
   costs what the young objects cost, not a traversal of the whole Lua heap (an incremental
   cycle per large activation of a network: 0.2 ms of host time each, most of a GPU training
   step). A tensor held across two young collections (the result of `a + b` still in its
   register when the next op steps the collector) ages into the old generation, whose dead wait
   for a full collection: one runs when the tensor memory in use passes what the last one left
   by that much again, or by the most the recent ones left (at least 64 MiB): old garbage
   stays within about the live memory of a training step, without a full collection for every
   doubling of the activations within each step; and a CUDA allocation that finds no memory runs one
   before it fails (module.c's reclaim hook). Tiny ops pay an addition and a compare. */
#ifndef TLB_ACCOUNT_STEP_BYTES
#define TLB_ACCOUNT_STEP_BYTES (256 << 10)
#endif
enum { FULL_COLLECTION_SLACK_BYTES = 64 << 20 };
static _Thread_local size_t pending_bytes;
static _Thread_local size_t step_bytes = TLB_ACCOUNT_STEP_BYTES;
static _Thread_local uint64_t full_collection_at; /* tensor bytes in use that start one */
static _Thread_local uint64_t most_left;          /* the most recent full collections left in use */

/* Bytes of tensor memory now held on the CPU and every GPU. */
static uint64_t tensor_bytes_in_use(void) {
    tl_cpu_memory_stats cpu;
    tl_cpu_get_memory_stats(&cpu);
    uint64_t total = cpu.allocated_bytes;
    for (int d = 0; d < tl_cuda_device_count(); d++) {
        tl_cuda_allocator_stats gpu;
        if (tl_cuda_memory_stats(d, &gpu) == TL_OK) total += gpu.allocated_bytes;
    }
    return total;
}

static uint64_t max_u64(uint64_t a, uint64_t b) {
    return a > b ? a : b;
}

void tlb_account(lua_State *L, const tl_tensor *t) {
    const tl_storage *s = t->storage;
    /* the tensor's own header, and its storage unless shared (a view) */
    pending_bytes += sizeof(tl_tensor);
    if (s->refcount == 1) pending_bytes += sizeof(tl_storage) + ((s->nbytes + 63) & ~(size_t)63);
    if (pending_bytes < step_bytes) return;
    size_t kb = pending_bytes >> 10;
    pending_bytes = 0;
    /* a step runs even when the user stopped the collector: ask first */
    if (!lua_gc(L, LUA_GCISRUNNING)) return;
    lua_gc(L, LUA_GCSTEP, kb > INT32_MAX ? INT32_MAX : (int)kb);
    uint64_t in_use = tensor_bytes_in_use();
    if (in_use >= full_collection_at) {
        lua_gc(L, LUA_GCCOLLECT);
        in_use = tensor_bytes_in_use();
        most_left = max_u64(most_left / 2, in_use); /* the past fades */
        full_collection_at = in_use + max_u64(most_left, FULL_COLLECTION_SLACK_BYTES);
    }
    step_bytes = max_u64(in_use / 4, TLB_ACCOUNT_STEP_BYTES);
}

/* The metatable is the tensor one (and the value a full userdata of a box's
   size: a light userdata given the metatable through the debug library is not
   a tensor). */
static bool has_tensor_metatable(lua_State *L, int idx) {
    if (!lua_getmetatable(L, idx)) return false;
    bool same = lua_rawequal(L, -1, TLB_MT);
    lua_pop(L, 1);
    return same && lua_type(L, idx) == LUA_TUSERDATA && lua_rawlen(L, idx) == sizeof(tlb_box);
}

bool tlb_is_tensor(lua_State *L, int idx) {
    return lua_touserdata(L, idx) && has_tensor_metatable(L, idx);
}

size_t tlb_check_list_length(lua_State *L, int idx, const char *op, const char *what) {
    if (!lua_istable(L, idx) || tlb_is_tensor(L, idx))
        tlb_type_error(L, idx, op, "a table of tensors");
    lua_Unsigned len = lua_rawlen(L, idx);
    if (len > 1u << 20)
        tlb_errorf(L, "%s: %s holds %llu tensors, at most %u", op, what, (unsigned long long)len,
                   1u << 20);
    return (size_t)len;
}

tl_tensor **tlb_check_tensor_list(lua_State *L, int idx, const char *op, const char *what,
                                  int *count) {
    const size_t n = tlb_check_list_length(L, idx, op, what);
    tl_tensor **list = lua_newuserdatauv(L, sizeof *list * (n > 0 ? n : 1), 0);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, idx, (lua_Integer)i + 1);
        list[i] = tlb_totensor(L, -1, op);
        if (!list[i])
            tlb_errorf(L, "%s: %s[%llu] expected a tensor, got %s", op, what,
                       (unsigned long long)i + 1, tlb_typename(L, -1));
        lua_pop(L, 1);
    }
    *count = (int)n;
    return list;
}

tl_tensor *tlb_totensor(lua_State *L, int idx, const char *op) {
    tlb_box *box = lua_touserdata(L, idx);
    if (!box || !has_tensor_metatable(L, idx)) return NULL;
    if (!box->tensor) {
        char where[96];
        tlb_errorf(L, "%s: %s is a tensor that was already released (closed)", op,
                   tlb_position(L, idx, NULL, where, sizeof where));
    }
    return box->tensor;
}

tl_tensor *tlb_check(lua_State *L, int idx, const char *op) {
    tl_tensor *t = tlb_totensor(L, idx, op);
    if (!t) tlb_type_error(L, idx, op, "a tensor");
    return t;
}

tl_tensor *tlb_opt_tensor(lua_State *L, int idx, const char *op, const char *what) {
    if (lua_isnoneornil(L, idx)) return NULL;
    tl_tensor *t = tlb_totensor(L, idx, op);
    char where[96];
    if (!t)
        tlb_errorf(L, "%s: %s expected a tensor or nil, got %s", op,
                   tlb_position(L, idx, what, where, sizeof where), tlb_typename(L, idx));
    return t;
}

void tlb_push_tensor(lua_State *L, tl_tensor *t) {
    tlb_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->tensor = NULL;
    if (luaL_getmetatable(L, TLB_TENSOR_NAME) != LUA_TTABLE)
        luaL_error(L, "tlua: tensors need tlua.core (require \"tlua\")");
    lua_setmetatable(L, -2);
    box->tensor = tl_retain(t);
    tlb_account(L, t);
}

tl_tensor *tlb_peek_tensor(lua_State *L, int idx) {
    tlb_box *box = luaL_testudata(L, idx, TLB_TENSOR_NAME);
    return box && lua_rawlen(L, idx) == sizeof *box ? box->tensor : NULL;
}

/* __gc and __close: drop the reference; a second call finds an empty box */
static int tensor_release(lua_State *L) {
    tlb_box *box = lua_touserdata(L, 1);
    if (box && tlb_is_tensor(L, 1)) {
        tl_tensor *t = box->tensor;
        box->tensor = NULL;
        tl_release(t);
    }
    return 0;
}

/* tl.release(t): drops t's reference now, as __close; a non-tensor is an error (as is_released) */
static int tensor_release_now(lua_State *L) {
    if (!tlb_is_tensor(L, 1)) return tlb_type_error(L, 1, "release", "a tensor");
    return tensor_release(L);
}

/* tl.is_tensor(v) */
static int tensor_is_tensor(lua_State *L) {
    lua_pushboolean(L, tlb_is_tensor(L, 1));
    return 1;
}

/* tl.is_released(t): true once __close (or release) dropped its reference */
static int tensor_is_released(lua_State *L) {
    if (!tlb_is_tensor(L, 1)) return tlb_type_error(L, 1, "is_released", "a tensor");
    lua_pushboolean(L, ((tlb_box *)lua_touserdata(L, 1))->tensor == NULL);
    return 1;
}

const luaL_Reg tlb_lifetime_meta[] = {
    {"__gc", tensor_release},
    {"__close", tensor_release},
    {NULL, NULL},
};

const luaL_Reg tlb_object_functions[] = {
    {"is_tensor", tensor_is_tensor},
    {"is_released", tensor_is_released},
    {"release", tensor_release_now},
    {NULL, NULL},
};
