/* Scan bindings: t:cumsum(dim), t:cumprod(dim), t:logcumsumexp(dim), t:cummax(dim) and
   t:cummin(dim) (1-based dim, negative from the end; cummax and cummin give values and 1-based
   indices) and t:nonzero() (1-based coordinates), each also tl.<name>(t, ...). */
#include "binding.h"

typedef tl_status (*scan_fn)(tl_tensor *x, int dim, tl_tensor **out);
static int scan(lua_State *L, const char *op, scan_fn fn) {
    tl_tensor *t = tlb_check(L, 1, op), *out = NULL;
    if (lua_isnoneornil(L, 2)) return tlb_type_error(L, 2, op, "a dim (an integer)");
    int dim = tlb_check_dim(L, 2, op);
    tlb_box *box = tlb_newbox(L);
    tl_status status = fn(t, dim, &out);
    return tlb_result(L, box, status, out);
}
/* cumsum(dim): the inclusive prefix sum along dim, recorded for autograd */
static int op_cumsum(lua_State *L) {
    return scan(L, "cumsum", tl_ag_cumsum);
}
static int op_cumprod(lua_State *L) {
    return scan(L, "cumprod", tl_ag_cumprod);
}
static int op_logcumsumexp(lua_State *L) {
    return scan(L, "logcumsumexp", tl_ag_logcumsumexp);
}

/* cummax(dim), cummin(dim): the running extreme and the 1-based index it was last reached at */
typedef tl_status (*running_extreme_fn)(tl_tensor *x, int dim, tl_tensor **values,
                                        tl_tensor **indices);
static int running_extreme(lua_State *L, const char *op, running_extreme_fn fn) {
    tl_tensor *t = tlb_check(L, 1, op), *values = NULL, *indices = NULL, *shifted = NULL;
    if (lua_isnoneornil(L, 2)) return tlb_type_error(L, 2, op, "a dim (an integer)");
    int dim = tlb_check_dim(L, 2, op);
    tlb_box *values_box = tlb_newbox(L);
    tlb_box *indices_box = tlb_newbox(L);
    if (fn(t, dim, &values, &indices) != TL_OK) return tlb_fail(L);
    values_box->tensor = values;
    tlb_account(L, values);
    tl_status status = tlb_one_based(indices, &shifted);
    tl_release(indices);
    if (status != TL_OK) return tlb_fail(L);
    indices_box->tensor = shifted;
    tlb_account(L, shifted);
    return 2;
}
static int op_cummax(lua_State *L) {
    return running_extreme(L, "cummax", tl_ag_cummax);
}
static int op_cummin(lua_State *L) {
    return running_extreme(L, "cummin", tl_ag_cummin);
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
    {"cumsum", op_cumsum}, {"cumprod", op_cumprod}, {"logcumsumexp", op_logcumsumexp},
    {"cummax", op_cummax}, {"cummin", op_cummin},   {"nonzero", op_nonzero},
    {NULL, NULL},
};
