/* Sorting and selection bindings: x:sort, argsort, topk, kthvalue, median, unique and
   tl.searchsorted, bincount, multinomial (each also tl.op(x, ...) and x:op(...)); dims count
   from 1 (default -1, the last), index results and positions from 1. */
#include "binding.h"

/* dim (or nil for the last) at idx and an options table at idx + 1; a table at idx is the
   options with the last dim. Returns the options' index. */
static int dim_and_options(lua_State *L, int idx, const char *op, int *dim) {
    if (lua_istable(L, idx)) {
        *dim = -1;
        return idx;
    }
    *dim = tlb_opt_dim(L, idx, op, -1);
    return idx + 1;
}

/* pushes values and their indices counted from 1 (both new references, released here) */
static int push_pair(lua_State *L, tl_status status, tl_tensor *values, tl_tensor *indices) {
    if (status != TL_OK) return tlb_fail(L);
    tlb_box *values_box = tlb_newbox(L);
    values_box->tensor = values;
    tlb_account(L, values);
    tlb_box *indices_box = tlb_newbox(L);
    tl_tensor *shifted = NULL;
    status = tlb_one_based(indices, &shifted);
    tl_release(indices);
    if (status != TL_OK) return tlb_fail(L);
    indices_box->tensor = shifted;
    tlb_account(L, shifted);
    return 2;
}

/* one index result counted from 1 */
static int push_positions(lua_State *L, tl_status status, tl_tensor *positions) {
    tlb_box *box = tlb_newbox(L);
    tl_tensor *shifted = NULL;
    if (status == TL_OK) {
        status = tlb_one_based(positions, &shifted);
        tl_release(positions);
    }
    return tlb_result(L, box, status, shifted);
}

/* sort(dim = -1, {descending = false, stable = true}) -> values, indices (always stable) */
static int op_sort(lua_State *L) {
    static const tlb_option accepted[] = {
        {"descending", TLB_OPTION_BOOLEAN}, {"stable", TLB_OPTION_BOOLEAN}, {NULL, 0}};
    tl_tensor *x = tlb_check(L, 1, "sort"), *values = NULL, *indices = NULL;
    int dim;
    const int opts = dim_and_options(L, 2, "sort", &dim);
    bool descending = false, stable = true;
    if (tlb_check_options(L, opts, "sort", accepted)) {
        tlb_option_bool(L, opts, "sort", "descending", &descending);
        tlb_option_bool(L, opts, "sort", "stable", &stable);
    }
    /* the kernel counts positions from 1 */
    const tl_status status = tl_ag_sort_from(x, dim, descending, 1, &values, &indices);
    if (status != TL_OK) return tlb_fail(L);
    tlb_box *values_box = tlb_newbox(L);
    values_box->tensor = values;
    tlb_account(L, values);
    tlb_box *indices_box = tlb_newbox(L);
    indices_box->tensor = indices;
    tlb_account(L, indices);
    return 2;
}

/* argsort(dim = -1, {descending = false, stable = true}) -> indices */
static int op_argsort(lua_State *L) {
    static const tlb_option accepted[] = {
        {"descending", TLB_OPTION_BOOLEAN}, {"stable", TLB_OPTION_BOOLEAN}, {NULL, 0}};
    tl_tensor *x = tlb_check(L, 1, "argsort"), *indices = NULL;
    int dim;
    const int opts = dim_and_options(L, 2, "argsort", &dim);
    bool descending = false;
    if (tlb_check_options(L, opts, "argsort", accepted))
        tlb_option_bool(L, opts, "argsort", "descending", &descending);
    tlb_box *box = tlb_newbox(L);
    const tl_status status = tl_argsort_from(x, dim, descending, 1, &indices);
    return tlb_result(L, box, status, indices); /* counted from 1 by the kernel */
}

/* topk(k, dim = -1, {largest = true, sorted = true}) -> values, indices (always sorted) */
static int op_topk(lua_State *L) {
    static const tlb_option accepted[] = {
        {"largest", TLB_OPTION_BOOLEAN}, {"sorted", TLB_OPTION_BOOLEAN}, {NULL, 0}};
    tl_tensor *x = tlb_check(L, 1, "topk"), *values = NULL, *indices = NULL;
    const int64_t k = tlb_check_int(L, 2, "topk", "k");
    int dim;
    const int opts = dim_and_options(L, 3, "topk", &dim);
    bool largest = true, sorted = true;
    if (tlb_check_options(L, opts, "topk", accepted)) {
        tlb_option_bool(L, opts, "topk", "largest", &largest);
        tlb_option_bool(L, opts, "topk", "sorted", &sorted);
    }
    const tl_status status = tl_ag_topk(x, k, dim, largest, &values, &indices);
    return push_pair(L, status, values, indices);
}

static bool keepdim_option(lua_State *L, int idx, const char *op) {
    static const tlb_option accepted[] = {{"keepdim", TLB_OPTION_BOOLEAN}, {NULL, 0}};
    bool keepdim = false;
    if (tlb_check_options(L, idx, op, accepted)) tlb_option_bool(L, idx, op, "keepdim", &keepdim);
    return keepdim;
}

/* kthvalue(k, dim = -1, {keepdim = false}) -> values, indices */
static int op_kthvalue(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "kthvalue"), *values = NULL, *indices = NULL;
    const int64_t k = tlb_check_int(L, 2, "kthvalue", "k");
    int dim;
    const bool keepdim = keepdim_option(L, dim_and_options(L, 3, "kthvalue", &dim), "kthvalue");
    const tl_status status = tl_ag_kthvalue(x, k, dim, keepdim, &values, &indices);
    return push_pair(L, status, values, indices);
}

/* median() -> the lower median of every element (0-dim); median(dim, {keepdim}) -> values,
   indices */
static int op_median(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "median"), *values = NULL, *indices = NULL;
    if (lua_isnoneornil(L, 2)) {
        if (!lua_isnoneornil(L, 3)) return tlb_errorf(L, "median: options need a dim");
        tlb_box *box = tlb_newbox(L);
        const tl_status status = tl_ag_median_all(x, &values);
        return tlb_result(L, box, status, values);
    }
    const int dim = tlb_check_dim(L, 2, "median");
    const bool keepdim = keepdim_option(L, 3, "median");
    const tl_status status = tl_ag_median_dim(x, dim, keepdim, &values, &indices);
    return push_pair(L, status, values, indices);
}

/* unique({sorted = true, return_inverse = false, return_counts = false}) -> values[, inverse
   (1-based positions in values, x's shape)][, counts] (values always sorted) */
static int op_unique(lua_State *L) {
    static const tlb_option accepted[] = {{"sorted", TLB_OPTION_BOOLEAN},
                                          {"return_inverse", TLB_OPTION_BOOLEAN},
                                          {"return_counts", TLB_OPTION_BOOLEAN},
                                          {NULL, 0}};
    tl_tensor *x = tlb_check(L, 1, "unique"), *values = NULL, *inverse = NULL, *counts = NULL;
    bool sorted = true, want_inverse = false, want_counts = false;
    if (tlb_check_options(L, 2, "unique", accepted)) {
        tlb_option_bool(L, 2, "unique", "sorted", &sorted);
        tlb_option_bool(L, 2, "unique", "return_inverse", &want_inverse);
        tlb_option_bool(L, 2, "unique", "return_counts", &want_counts);
    }
    tlb_box *values_box = tlb_newbox(L);
    tlb_box *inverse_box = want_inverse ? tlb_newbox(L) : NULL;
    tlb_box *counts_box = want_counts ? tlb_newbox(L) : NULL;
    if (tl_unique(x, want_inverse, want_counts, &values, &inverse, &counts) != TL_OK)
        return tlb_fail(L);
    values_box->tensor = values;
    if (counts_box) counts_box->tensor = counts;
    if (inverse_box) {
        tl_tensor *shifted = NULL;
        const tl_status status = tlb_one_based(inverse, &shifted);
        tl_release(inverse);
        if (status != TL_OK) return tlb_fail(L);
        inverse_box->tensor = shifted;
    }
    return 1 + want_inverse + want_counts;
}

/* searchsorted(sorted, values, {right = false}) -> 1-based insertion points: i + 1 where i
   elements of the row come before the value (so 1 .. n + 1); values may be a number */
static int op_searchsorted(lua_State *L) {
    static const tlb_option accepted[] = {{"right", TLB_OPTION_BOOLEAN}, {NULL, 0}};
    tl_tensor *sorted = tlb_check(L, 1, "searchsorted"),
              *values = tlb_totensor(L, 2, "searchsorted");
    tl_tensor *scalar = NULL, *positions = NULL;
    tl_scalar s;
    if (!values && !tlb_to_scalar(L, 2, &s))
        return tlb_type_error(L, 2, "searchsorted", "a tensor or a number");
    bool right = false;
    if (tlb_check_options(L, 3, "searchsorted", accepted))
        tlb_option_bool(L, 3, "searchsorted", "right", &right);
    if (!values) {
        if (tl_full(NULL, 0, s, sorted->dtype, tl_tensor_device(sorted), &scalar) != TL_OK)
            return tlb_fail(L);
        values = scalar;
    }
    const tl_status status = tl_searchsorted(sorted, values, right, &positions);
    tl_release(scalar);
    return push_positions(L, status, positions);
}

/* bincount(bins, {minlength = 0, weights}): bins holds values >= 1, value v counted in bin v
   (1-based bins: out[v]); the length is max(minlength, the largest value) */
static int op_bincount(lua_State *L) {
    static const tlb_option accepted[] = {
        {"minlength", TLB_OPTION_INTEGER}, {"weights", TLB_OPTION_TENSOR}, {NULL, 0}};
    tl_tensor *bins = tlb_check(L, 1, "bincount"), *weights = NULL, *out = NULL;
    int64_t minlength = 0;
    if (tlb_check_options(L, 2, "bincount", accepted)) {
        tlb_option_integer(L, 2, "bincount", "minlength", &minlength);
        tlb_option_tensor(L, 2, "bincount", "weights", &weights);
    }
    tlb_box *box = tlb_newbox(L);
    tl_tensor *shifted =
        tlb_zero_based_indices(L, "bincount", "bins", bins, "the bins (values >= 1)", INT64_MAX);
    const tl_status status = tl_bincount(shifted, weights, minlength, &out);
    tl_release(shifted);
    return tlb_result(L, box, status, out);
}

/* multinomial(probs, n, {replacement = false}) -> 1-based categories, [n] or [rows, n] */
static int op_multinomial(lua_State *L) {
    static const tlb_option accepted[] = {{"replacement", TLB_OPTION_BOOLEAN}, {NULL, 0}};
    tl_tensor *probs = tlb_check(L, 1, "multinomial"), *samples = NULL;
    const int64_t n = tlb_check_int(L, 2, "multinomial", "n");
    bool replacement = false;
    if (tlb_check_options(L, 3, "multinomial", accepted))
        tlb_option_bool(L, 3, "multinomial", "replacement", &replacement);
    const tl_status status = tl_multinomial(probs, n, replacement, &samples);
    return push_positions(L, status, samples);
}

const luaL_Reg tlb_sort_methods[] = {
    {"sort", op_sort},
    {"argsort", op_argsort},
    {"topk", op_topk},
    {"kthvalue", op_kthvalue},
    {"median", op_median},
    {"unique", op_unique},
    {"searchsorted", op_searchsorted},
    {"bincount", op_bincount},
    {"multinomial", op_multinomial},
    {NULL, NULL},
};
