/* Scan bindings: t:cumsum(dim) (1-based dim, negative from the end) and t:nonzero() (1-based
   coordinates), each also tl.cumsum(t, dim), tl.nonzero(t). */
#include "binding.h"

/* cumsum(dim): the inclusive prefix sum along dim, recorded for autograd */
static int op_cumsum(lua_State *L) {
    const char *op = "cumsum";
    tl_tensor *t = tlb_check(L, 1, op), *out = NULL;
    if (lua_isnoneornil(L, 2)) return tlb_type_error(L, 2, op, "a dim (an integer)");
    int dim = tlb_check_dim(L, 2, op);
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_cumsum(t, dim, &out);
    return tlb_result(L, box, status, out);
}

/* nonzero(): int64 [count, ndim], the 1-based coordinates of the non-zero (true) elements in
   row-major order */
static int op_nonzero(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "nonzero"), *coords = NULL, *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_nonzero(t, &coords);
    if (status == TL_OK) {
        status = tlb_one_based(coords, &out);
        tl_release(coords);
    }
    return tlb_result(L, box, status, out);
}

const luaL_Reg tlb_scan_methods[] = {
    {"cumsum", op_cumsum},
    {"nonzero", op_nonzero},
    {NULL, NULL},
};
