/* Grouped product bindings: tl.grouped_matmul(As, Bs) -> Cs and tl.grouped_mm(A, B, offsets). */
#include <string.h>

#include "binding.h"

/* tl.grouped_matmul(As, Bs) -> Cs with Cs[i] = As[i] @ Bs[i] (2-D, free sizes per group) */
static int grouped_matmul(lua_State *L) {
    const char *op = "grouped_matmul";
    int na, nb;
    tl_tensor **a = tlb_check_tensor_list(L, 1, op, "As", &na);
    tl_tensor **b = tlb_check_tensor_list(L, 2, op, "Bs", &nb);
    if (na != nb)
        return tlb_errorf(L, "%s: As and Bs must have one matrix per group, got %d and %d", op, na,
                          nb);
    /* the result table and its boxes first: nothing can fail between the call and filling them */
    lua_createtable(L, na, 0);
    int result = lua_gettop(L);
    for (int i = 0; i < na; i++) {
        tlb_newbox(L);
        lua_rawseti(L, result, i + 1);
    }
    tl_tensor **out = lua_newuserdatauv(L, sizeof *out * (size_t)(na > 0 ? na : 1), 0);
    if (tl_ag_grouped_matmul(na, a, b, out) != TL_OK) return tlb_fail(L);
    for (int i = 0; i < na; i++) {
        lua_rawgeti(L, result, i + 1);
        tlb_box *box = lua_touserdata(L, -1);
        box->tensor = out[i];
        tlb_account(L, out[i]);
        lua_pop(L, 1);
    }
    lua_pushvalue(L, result);
    return 1;
}

/* offsets as a tensor: the argument itself, or a new int64 tensor from a Lua array */
static tl_tensor *offsets_arg(lua_State *L, int idx, const char *op) {
    tl_tensor *t = tlb_totensor(L, idx, op);
    if (t) return t;
    if (!lua_istable(L, idx))
        tlb_type_error(L, idx, op, "offsets as a table of integers or an integer tensor");
    lua_Unsigned n = lua_rawlen(L, idx);
    if (n > 1u << 24) tlb_errorf(L, "%s: offsets holds %llu ends", op, (unsigned long long)n);
    int64_t *ends = lua_newuserdatauv(L, sizeof *ends * (n > 0 ? n : 1), 0);
    for (lua_Unsigned i = 0; i < n; i++) {
        lua_rawgeti(L, idx, (lua_Integer)i + 1);
        int exact = 0;
        lua_Integer v = lua_tointegerx(L, -1, &exact);
        if (!exact)
            tlb_errorf(L, "%s: offsets[%llu] expected an integer, got %s", op,
                       (unsigned long long)i + 1,
                       lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : tlb_typename(L, -1));
        ends[i] = (int64_t)v;
        lua_pop(L, 1);
    }
    tlb_box *box = tlb_newbox(L); /* owns the tensor, collected with the call's values */
    int64_t shape[1] = {(int64_t)n};
    if (tl_empty(shape, 1, TL_I64, TL_CPU, &box->tensor) != TL_OK) tlb_fail(L);
    memcpy(tl_data(box->tensor), ends, sizeof *ends * n);
    return box->tensor;
}

/* tl.grouped_mm(A [T, K], B [G, K, N], offsets) -> [T, N] */
static int grouped_mm(lua_State *L) {
    const char *op = "grouped_mm";
    tl_tensor *a = tlb_check(L, 1, op), *b = tlb_check(L, 2, op);
    tl_tensor *offsets = offsets_arg(L, 3, op), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_grouped_mm(a, b, offsets, &out);
    return tlb_result(L, box, status, out);
}

const luaL_Reg tlb_grouped_functions[] = {
    {"grouped_matmul", grouped_matmul},
    {"grouped_mm", grouped_mm},
    {NULL, NULL},
};
