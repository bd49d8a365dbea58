/* Shape bindings: tril, triu, flip, roll, tile, repeat_interleave, pad, one_hot, movedim,
   diagonal, diag, diag_embed and unfold, each tl.op(x, ...) and x:op(...) (dims count from 1,
   negative from the end). */
#include <string.h>

#include "binding.h"

/* An integer, or a table of integers (the argument named what), into values (at most max);
   returns their count. */
static int check_integers(lua_State *L, int idx, const char *op, const char *what, int64_t *values,
                          int max) {
    if (!lua_istable(L, idx)) {
        values[0] = tlb_check_int(L, idx, op, what);
        return 1;
    }
    const lua_Unsigned n = lua_rawlen(L, idx);
    if (n > (lua_Unsigned)max)
        tlb_errorf(L, "%s: expected at most %d %s, got %d", op, max, what, (int)n);
    for (int i = 0; i < (int)n; i++) {
        lua_rawgeti(L, idx, i + 1);
        values[i] = tlb_check_int(L, lua_gettop(L), op, what);
        lua_pop(L, 1);
    }
    return (int)n;
}

/* A dim or a table of dims, as the C API's dims (0-based, negative from the end). */
static int check_dims(lua_State *L, int idx, const char *op, int *dims) {
    if (!lua_istable(L, idx)) {
        dims[0] = tlb_check_dim(L, idx, op);
        return 1;
    }
    const lua_Unsigned n = lua_rawlen(L, idx);
    if (n > TL_MAX_DIMS)
        tlb_errorf(L, "%s: expected at most %d dims, got %d", op, TL_MAX_DIMS, (int)n);
    for (int i = 0; i < (int)n; i++) {
        lua_rawgeti(L, idx, i + 1);
        dims[i] = tlb_check_dim(L, lua_gettop(L), op);
        lua_pop(L, 1);
    }
    return (int)n;
}

/* ---- tril, triu: (x, k = 0) ---------------------------------------------------------------- */
typedef tl_status (*triangle_fn)(tl_tensor *x, int64_t k, tl_tensor **out);
static int triangle(lua_State *L, const char *op, triangle_fn fn) {
    tl_tensor *x = tlb_check(L, 1, op), *out = NULL;
    const int64_t k = lua_isnoneornil(L, 2) ? 0 : tlb_check_int(L, 2, op, "k");
    tlb_box *box = tlb_newbox(L);
    const tl_status status = fn(x, k, &out);
    return tlb_result(L, box, status, out);
}
static int op_tril(lua_State *L) {
    return triangle(L, "tril", tl_ag_tril);
}
static int op_triu(lua_State *L) {
    return triangle(L, "triu", tl_ag_triu);
}

/* ---- flip(x, dims...): a dim, several or a table --------------------------------------------- */
static int op_flip(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "flip"), *out = NULL;
    int dims[TL_MAX_DIMS], n = 0;
    const int top = lua_gettop(L);
    if (top < 2) return tlb_type_error(L, 2, "flip", "a dim or a table of dims");
    if (lua_istable(L, 2)) {
        n = check_dims(L, 2, "flip", dims);
    } else {
        if (top - 1 > TL_MAX_DIMS)
            return tlb_errorf(L, "flip: expected at most %d dims, got %d", TL_MAX_DIMS, top - 1);
        for (int i = 2; i <= top; i++) dims[n++] = tlb_check_dim(L, i, "flip");
    }
    tlb_box *box = tlb_newbox(L);
    const tl_status status = tl_ag_flip(x, dims, n, &out);
    return tlb_result(L, box, status, out);
}

/* ---- roll(x, shifts, dims?): numbers or tables of one length; no dims: the flattened x ----- */
static int op_roll(lua_State *L) {
    const char *op = "roll";
    tl_tensor *x = tlb_check(L, 1, op), *out = NULL;
    int64_t shifts[TL_MAX_DIMS];
    int dims[TL_MAX_DIMS];
    const int n = check_integers(L, 2, op, "shifts", shifts, TL_MAX_DIMS);
    int ndims = 0;
    if (lua_isnoneornil(L, 3)) {
        if (n != 1) return tlb_errorf(L, "%s: without dims expected one shift, got %d", op, n);
    } else {
        ndims = check_dims(L, 3, op, dims);
        if (ndims != n)
            return tlb_errorf(L, "%s: got %d shifts for %d dims (expected one shift per dim)", op,
                              n, ndims);
        if (n == 0) return tlb_errorf(L, "%s: expected at least one dim, got {}", op);
    }
    tlb_box *box = tlb_newbox(L);
    const tl_status status = tl_ag_roll(x, shifts, dims, ndims, &out);
    return tlb_result(L, box, status, out);
}

/* ---- tile(x, reps...): a table or integers ----------------------------------------------- */
static int op_tile(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "tile"), *out = NULL;
    int64_t reps[TL_MAX_DIMS];
    int opts;
    const int n = tlb_shape_args(L, 2, "tile", reps, &opts);
    if (opts) return tlb_type_error(L, opts, "tile", "a count (an integer)");
    tlb_box *box = tlb_newbox(L);
    const tl_status status = tl_ag_tile(x, reps, n, &out);
    return tlb_result(L, box, status, out);
}

/* ---- repeat_interleave(x, repeats, dim?): repeats an integer or a tensor of counts; no dim: the
   flattened x --------------------------------------------------------------------------------- */
static int op_repeat_interleave(lua_State *L) {
    const char *op = "repeat_interleave";
    tl_tensor *x = tlb_check(L, 1, op), *out = NULL;
    tl_tensor *counts = tlb_totensor(L, 2, op);
    const int64_t repeats = counts ? 0 : tlb_check_int(L, 2, op, "repeats");
    const bool flatten = lua_isnoneornil(L, 3);
    const int dim = flatten ? 0 : tlb_check_dim(L, 3, op);
    tlb_box *box = tlb_newbox(L);
    const tl_status status = counts ? tl_ag_repeat_interleave_counts(x, counts, dim, flatten, &out)
                                    : tl_ag_repeat_interleave(x, repeats, dim, flatten, &out);
    return tlb_result(L, box, status, out);
}

/* ---- pad(x, pads, {mode = "constant", value = 0}): pads in torch's order (the last dim first,
   before and after) --------------------------------------------------------------------------- */
static int op_pad(lua_State *L) {
    const char *op = "pad";
    static const tlb_option accepted[] = {
        {"mode", TLB_OPTION_STRING}, {"value", TLB_OPTION_NUMBER}, {NULL, 0}};
    tl_tensor *x = tlb_check(L, 1, op), *out = NULL;
    if (!lua_istable(L, 2)) return tlb_type_error(L, 2, op, "a table of pads");
    int64_t pads[2 * TL_MAX_DIMS];
    const int n = check_integers(L, 2, op, "pads", pads, 2 * TL_MAX_DIMS);
    const char *mode_name = "constant";
    double value = 0;
    if (tlb_check_options(L, 3, op, accepted)) {
        tlb_option_string(L, 3, op, "mode", &mode_name);
        tlb_option_number(L, 3, op, "value", &value);
    }
    static const char *const modes[] = {"constant", "reflect", "replicate", "circular"};
    int mode = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(mode_name, modes[i]) == 0) mode = i;
    if (mode < 0)
        return tlb_errorf(L,
                          "%s: unknown mode '%s' (expected constant, reflect, replicate or "
                          "circular)",
                          op, mode_name);
    if (mode != TL_PAD_CONSTANT && value != 0)
        return tlb_errorf(L, "%s: a value is only used by constant mode, got mode '%s'", op,
                          mode_name);
    lua_Integer as_integer;
    const tl_scalar fill = lua_numbertointeger(value, &as_integer) && (double)as_integer == value
                               ? tl_scalar_int((int64_t)as_integer)
                               : tl_scalar_float(value);
    tlb_box *box = tlb_newbox(L);
    const tl_status status = tl_ag_pad(x, pads, n, (tl_pad_mode)mode, fill, &out);
    return tlb_result(L, box, status, out);
}

/* ---- one_hot(index, classes = -1): index 1-based (int64 or int32) -> int64 [..., classes];
   classes -1 or nil: the largest index ------------------------------------------------------ */
static int op_one_hot(lua_State *L) {
    const char *op = "one_hot";
    tl_tensor *index = tlb_check(L, 1, op), *out = NULL;
    int64_t classes = lua_isnoneornil(L, 2) ? -1 : tlb_check_int(L, 2, op, "classes");
    if (classes < -1)
        return tlb_errorf(L, "%s: classes must be >= 0 (or -1 to infer it), got %lld", op,
                          (long long)classes);
    tlb_check_index_dtype(L, op, "index", index);
    if (classes < 0) { /* the largest index, read back */
        if (tl_numel(index) == 0)
            return tlb_errorf(L, "%s: cannot infer the number of classes from an empty index", op);
        tl_tensor *top = NULL;
        tl_scalar largest;
        tl_status status = tl_amax_all(index, &top);
        if (status == TL_OK) status = tl_item(top, &largest);
        tl_release(top);
        if (status != TL_OK) return tlb_fail(L);
        classes = largest.value.i > 0 ? largest.value.i : 0;
    }
    tlb_box *box = tlb_newbox(L);
    tl_tensor *zero_based =
        tlb_zero_based_indices(L, op, "index", index, "the number of classes", classes);
    tl_status status = tl_one_hot(zero_based, classes, &out);
    tl_release(zero_based);
    return tlb_result(L, box, status, out);
}

/* ---- movedim(x, from, to): dims or tables of dims of one length ---------------------------- */
static int op_movedim(lua_State *L) {
    const char *op = "movedim";
    tl_tensor *x = tlb_check(L, 1, op), *out = NULL;
    int from[TL_MAX_DIMS], to[TL_MAX_DIMS];
    const int n = check_dims(L, 2, op, from), m = check_dims(L, 3, op, to);
    if (n != m)
        return tlb_errorf(L, "%s: got %d source dims and %d destinations (expected as many)", op, n,
                          m);
    tlb_box *box = tlb_newbox(L);
    const tl_status status = tl_ag_movedim(x, from, to, n, &out);
    return tlb_result(L, box, status, out);
}

/* ---- diagonal(x, offset = 0, dim1 = 1, dim2 = 2), diag_embed(x, offset = 0, dim1 = -2,
   dim2 = -1), diag(x, k = 0) --------------------------------------------------------------- */
typedef tl_status (*diagonal_fn)(tl_tensor *x, int64_t offset, int dim1, int dim2, tl_tensor **out);
static int diagonal(lua_State *L, const char *op, diagonal_fn fn, int dim1, int dim2) {
    tl_tensor *x = tlb_check(L, 1, op), *out = NULL;
    const int64_t offset = lua_isnoneornil(L, 2) ? 0 : tlb_check_int(L, 2, op, "offset");
    const int d1 = tlb_opt_dim(L, 3, op, dim1), d2 = tlb_opt_dim(L, 4, op, dim2);
    tlb_box *box = tlb_newbox(L);
    const tl_status status = fn(x, offset, d1, d2, &out);
    return tlb_result(L, box, status, out);
}
static int op_diagonal(lua_State *L) {
    return diagonal(L, "diagonal", tl_ag_diagonal, 0, 1);
}
static int op_diag_embed(lua_State *L) {
    return diagonal(L, "diag_embed", tl_ag_diag_embed, -2, -1);
}
static int op_diag(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "diag"), *out = NULL;
    const int64_t k = lua_isnoneornil(L, 2) ? 0 : tlb_check_int(L, 2, "diag", "k");
    tlb_box *box = tlb_newbox(L);
    const tl_status status = tl_ag_diag(x, k, &out);
    return tlb_result(L, box, status, out);
}

/* ---- unfold(x, dim, size, step): the windows along dim, a view ----------------------------- */
static int op_unfold(lua_State *L) {
    const char *op = "unfold";
    tl_tensor *x = tlb_check(L, 1, op), *out = NULL;
    const int dim = tlb_check_dim(L, 2, op);
    const int64_t size = tlb_check_int(L, 3, op, "size"), step = tlb_check_int(L, 4, op, "step");
    tlb_box *box = tlb_newbox(L);
    const tl_status status = tl_ag_unfold(x, dim, size, step, &out);
    return tlb_result(L, box, status, out);
}

const luaL_Reg tlb_shape_methods[] = {
    {"tril", op_tril},       {"triu", op_triu},
    {"flip", op_flip},       {"roll", op_roll},
    {"tile", op_tile},       {"repeat_interleave", op_repeat_interleave},
    {"pad", op_pad},         {"one_hot", op_one_hot},
    {"movedim", op_movedim}, {"diagonal", op_diagonal},
    {"diag", op_diag},       {"diag_embed", op_diag_embed},
    {"unfold", op_unfold},   {NULL, NULL},
};
