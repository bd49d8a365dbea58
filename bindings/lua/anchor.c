/* A state's anchor: what C objects that outlive a call (autograd callbacks) keep of their Lua
   state, so that they can tell which state they belong to and whether it is still open. */
#include <stdatomic.h>
#include <stdlib.h>

#include "binding.h"

struct tlb_anchor {
    lua_State *main; /* the state's main thread; NULL once the state closed */
    uint64_t id;     /* 1, 2, ... in the order states loaded tlua.core */
    _Atomic int refcount;
};

static _Atomic uint64_t next_id = 1;
static const char anchor_key = 'a';

/* The registry's box of the anchor is the oldest object of the state with a finalizer: Lua
   finalizes in reverse order, so it runs after every tensor's, and from then on the anchor says
   the state is closed. */
static int anchor_gc(lua_State *L) {
    tlb_anchor **box = lua_touserdata(L, 1);
    if (box && *box) {
        (*box)->main = NULL;
        tlb_anchor_release(*box);
        *box = NULL;
    }
    return 0;
}

void tlb_anchor_init(lua_State *L) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &anchor_key) != LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    tlb_anchor **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, anchor_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    tlb_anchor *a = malloc(sizeof *a);
    if (!a) luaL_error(L, "tlua.core: out of memory");
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    a->main = lua_tothread(L, -1);
    lua_pop(L, 1);
    a->id = atomic_fetch_add(&next_id, 1);
    atomic_init(&a->refcount, 1);
    *box = a;
    lua_rawsetp(L, LUA_REGISTRYINDEX, &anchor_key);
}

tlb_anchor *tlb_anchor_of(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &anchor_key);
    tlb_anchor **box = lua_touserdata(L, -1);
    lua_pop(L, 1);
    tlb_anchor *a = box ? *box : NULL;
    if (a) atomic_fetch_add(&a->refcount, 1);
    return a;
}

void tlb_anchor_release(tlb_anchor *a) {
    if (a && atomic_fetch_sub(&a->refcount, 1) == 1) free(a);
}

lua_State *tlb_anchor_state(const tlb_anchor *a) {
    return a ? a->main : NULL;
}

uint64_t tlb_anchor_id(const tlb_anchor *a) {
    return a ? a->id : 0;
}

bool tlb_anchor_is(const tlb_anchor *a, lua_State *L) {
    if (!a || !a->main || !L) return false;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &anchor_key);
    tlb_anchor **box = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return box && *box == a;
}

tl_status tlb_anchor_check(const tlb_anchor *a, lua_State *L, const char *what) {
    if (tlb_anchor_is(a, L)) return TL_OK;
    if (!L)
        return tl_error(TL_ERR_AUTOGRAD, "backward: %s needs a backward started from Lua", what);
    tlb_anchor *here = tlb_anchor_of(L);
    unsigned long long mine = (unsigned long long)tlb_anchor_id(a);
    unsigned long long other = (unsigned long long)tlb_anchor_id(here);
    tlb_anchor_release(here);
    if (!a || !a->main)
        return tl_error(TL_ERR_AUTOGRAD,
                        "backward: %s belongs to Lua state %llu, which is closed (this backward "
                        "runs in Lua state %llu)",
                        what, mine, other);
    return tl_error(TL_ERR_AUTOGRAD,
                    "backward: %s belongs to Lua state %llu, not to Lua state %llu that runs this "
                    "backward (a graph recorded in one state is differentiated in that state)",
                    what, mine, other);
}
