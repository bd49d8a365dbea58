/* Tensor methods: queries (size, dim, numel, item) and views (view, transpose, narrow, ...). */
#include "binding.h"

/* ---- queries ------------------------------------------------------------- */
/* t:size() -> shape table; t:size(d) -> size of dim d */
static int m_size(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "size");
    if (lua_isnoneornil(L, 2)) {
        tlb_push_shape(L, t);
        return 1;
    }
    int dim = tlb_check_dim(L, 2, "size");
    if (t->ndim == 0) return tlb_errorf(L, "size: a 0-dim tensor has no dim %d", dim + 1);
    if (tl_wrap_dim("size", dim, t->ndim, &dim) != TL_OK) return tlb_fail(L);
    lua_pushinteger(L, (lua_Integer)t->shape[dim]);
    return 1;
}

/* t:stride() -> the strides (in elements) as a table; t:stride(dim) -> one of them */
static int m_stride(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "stride");
    if (lua_isnoneornil(L, 2)) {
        lua_createtable(L, t->ndim, 0);
        for (int d = 0; d < t->ndim; d++) {
            lua_pushinteger(L, (lua_Integer)t->strides[d]);
            lua_rawseti(L, -2, d + 1);
        }
        return 1;
    }
    int dim = tlb_check_dim(L, 2, "stride");
    if (t->ndim == 0) return tlb_errorf(L, "stride: a 0-dim tensor has no dim %d", dim + 1);
    if (tl_wrap_dim("stride", dim, t->ndim, &dim) != TL_OK) return tlb_fail(L);
    lua_pushinteger(L, (lua_Integer)t->strides[dim]);
    return 1;
}

static int m_dim(lua_State *L) {
    lua_pushinteger(L, tlb_check(L, 1, "dim")->ndim);
    return 1;
}

static int m_numel(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)tl_numel(tlb_check(L, 1, "numel")));
    return 1;
}

static int m_item(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "item");
    tl_scalar s;
    if (tl_item(t, &s) != TL_OK) return tlb_fail(L);
    tlb_push_scalar(L, s, t->dtype);
    return 1;
}

/* t:pin_memory() -> a copy of CPU tensor t in pinned host memory (t itself when pinned) */
static int m_pin_memory(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "pin_memory");
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_pin_memory(t, &out);
    return tlb_result(L, box, status, out);
}

/* t:is_pinned() -> whether t lives in pinned host memory */
static int m_is_pinned(lua_State *L) {
    lua_pushboolean(L, tl_is_pinned(tlb_check(L, 1, "is_pinned")));
    return 1;
}

static int m_is_contiguous(lua_State *L) {
    lua_pushboolean(L, tl_is_contiguous(tlb_check(L, 1, "is_contiguous")));
    return 1;
}

/* ---- views ---------------------------------------------------------------- */
typedef tl_status (*shape_view_fn)(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out);

/* view(shape...), reshape(shape...), expand(shape...) */
static int shape_view(lua_State *L, const char *op, shape_view_fn fn) {
    tl_tensor *t = tlb_check(L, 1, op), *out = NULL;
    int64_t shape[TL_MAX_DIMS];
    int opts_index;
    int ndim = tlb_shape_args(L, 2, op, shape, &opts_index);
    if (opts_index) return tlb_type_error(L, opts_index, op, "a size (an integer)");
    tlb_box *box = tlb_newbox(L);
    tl_status status = fn(t, shape, ndim, &out);
    return tlb_result(L, box, status, out);
}

static int m_view(lua_State *L) {
    return shape_view(L, "view", tl_ag_view);
}
static int m_reshape(lua_State *L) {
    return shape_view(L, "reshape", tl_ag_reshape);
}
static int m_expand(lua_State *L) {
    return shape_view(L, "expand", tl_ag_expand);
}

static int m_transpose(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "transpose"), *out = NULL;
    int d0 = tlb_check_dim(L, 2, "transpose"), d1 = tlb_check_dim(L, 3, "transpose");
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_transpose(t, d0, d1, &out);
    return tlb_result(L, box, status, out);
}

/* t(): a matrix transposed; a tensor of 0 or 1 dims as it is (a view either way), as torch */
static int m_t(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "t"), *out = NULL;
    if (t->ndim > 2)
        return tlb_errorf(L, "t: expected a tensor of at most 2 dims, got %d (use transpose)",
                          t->ndim);
    tlb_box *box = tlb_newbox(L);
    tl_status status =
        t->ndim == 2 ? tl_ag_transpose(t, 0, 1, &out) : tl_ag_reshape(t, t->shape, t->ndim, &out);
    return tlb_result(L, box, status, out);
}

/* permute(d1, d2, ...) or permute({d1, d2, ...}) */
static int m_permute(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "permute"), *out = NULL;
    int dims[TL_MAX_DIMS], n = 0;
    if (lua_istable(L, 2)) {
        lua_Unsigned len = lua_rawlen(L, 2);
        if (len > TL_MAX_DIMS)
            return tlb_errorf(L, "permute: expected at most %d dims, got %d", TL_MAX_DIMS,
                              (int)len);
        for (n = 0; n < (int)len; n++) {
            lua_rawgeti(L, 2, n + 1);
            dims[n] = tlb_check_dim(L, -1, "permute");
            lua_pop(L, 1);
        }
    } else {
        int top = lua_gettop(L);
        if (top - 1 > TL_MAX_DIMS)
            return tlb_errorf(L, "permute: expected at most %d dims, got %d", TL_MAX_DIMS, top - 1);
        for (int i = 2; i <= top; i++) dims[n++] = tlb_check_dim(L, i, "permute");
    }
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_permute(t, dims, n, &out);
    return tlb_result(L, box, status, out);
}

/* narrow(dim, start, length): start counts from 1 (negative from the end) */
static int m_narrow(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "narrow"), *out = NULL;
    int dim = tlb_check_dim(L, 2, "narrow"), wrapped;
    int64_t start = tlb_check_index(L, 3, "narrow");
    int64_t length = tlb_check_int(L, 4, "narrow", "length");
    if (tl_wrap_dim("narrow", dim, t->ndim, &wrapped) != TL_OK) return tlb_fail(L);
    if (start < 0) {
        int64_t size = t->ndim > 0 ? t->shape[wrapped] : 1;
        if (start + size < 0)
            return tlb_errorf(L, "narrow: start %lld is out of range for dim %d of size %lld",
                              (long long)start, wrapped + 1, (long long)size);
        start += size;
    }
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_narrow(t, dim, start, length, &out);
    return tlb_result(L, box, status, out);
}

/* select(dim, index): index counts from 1 (negative from the end) */
static int m_select(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "select"), *out = NULL;
    int dim = tlb_check_dim(L, 2, "select");
    int64_t index = tlb_check_index(L, 3, "select");
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_select(t, dim, index, &out);
    return tlb_result(L, box, status, out);
}

/* ---- splitting: Lua tables of views ----------------------------------------------------------
   Pushes a table of n empty boxes, then runs make (which fills out with n new references) and
   puts each piece into its box: no reference is held outside the collector's reach when a Lua
   error strikes. */
typedef tl_status (*pieces_fn)(tl_tensor *t, int dim, const int64_t *sizes, int n, tl_tensor **out);

static int push_pieces(lua_State *L, tl_tensor *t, int dim, const int64_t *sizes, int n,
                       pieces_fn make) {
    tl_tensor **out = lua_newuserdatauv(L, sizeof *out * (size_t)(n > 0 ? n : 1), 0);
    tlb_box **boxes = lua_newuserdatauv(L, sizeof *boxes * (size_t)(n > 0 ? n : 1), 0);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        boxes[i] = tlb_newbox(L);
        lua_rawseti(L, -2, i + 1);
    }
    if (make(t, dim, sizes, n, out) != TL_OK) return tlb_fail(L);
    for (int i = 0; i < n; i++) {
        boxes[i]->tensor = out[i];
        tlb_account(L, out[i]);
    }
    return 1;
}

static tl_status split_pieces(tl_tensor *t, int dim, const int64_t *sizes, int n, tl_tensor **out) {
    return tl_ag_split(t, dim, sizes, n, out);
}
static tl_status unbind_pieces(tl_tensor *t, int dim, const int64_t *sizes, int n,
                               tl_tensor **out) {
    (void)sizes, (void)n;
    return tl_ag_unbind(t, dim, out);
}

/* split(size, dim = 1): pieces of size (the last what is left); split({sizes}, dim = 1): pieces
   of those sizes, which add up to the dim's size */
static int m_split(lua_State *L) {
    const char *op = "split";
    tl_tensor *t = tlb_check(L, 1, op);
    const int dim = tlb_opt_dim(L, 3, op, 0);
    int n;
    int64_t *sizes;
    if (lua_istable(L, 2) && !tlb_is_tensor(L, 2)) {
        const size_t count = tlb_check_list_length(L, 2, op, "sizes");
        if (count == 0 || count > TL_SPLIT_MAX_PIECES)
            return tlb_errorf(L, "%s: expected 1 to %d sizes, got %d", op, TL_SPLIT_MAX_PIECES,
                              (int)count);
        n = (int)count;
        sizes = lua_newuserdatauv(L, sizeof *sizes * count, 0);
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, 2, i + 1);
            if (!lua_isinteger(L, -1))
                return tlb_errorf(L, "%s: sizes[%d] expected an integer, got %s", op, i + 1,
                                  tlb_typename(L, -1));
            sizes[i] = (int64_t)lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
    } else {
        const int64_t size = tlb_check_int(L, 2, op, "size");
        if (tl_split_count(t, dim, size, &n) != TL_OK) return tlb_fail(L);
        sizes = lua_newuserdatauv(L, sizeof *sizes * (size_t)n, 0);
        tl_split_sizes(t, dim, size, n, sizes);
    }
    return push_pieces(L, t, dim, sizes, n, split_pieces);
}

/* chunk(chunks, dim = 1): at most chunks pieces of equal size (the last smaller), as torch */
static int m_chunk(lua_State *L) {
    const char *op = "chunk";
    tl_tensor *t = tlb_check(L, 1, op);
    const int64_t chunks = tlb_check_int(L, 2, op, "chunks");
    const int dim = tlb_opt_dim(L, 3, op, 0);
    int n;
    int64_t size;
    if (tl_chunk_count(t, dim, chunks, &n, &size) != TL_OK) return tlb_fail(L);
    int64_t *sizes = lua_newuserdatauv(L, sizeof *sizes * (size_t)n, 0);
    tl_split_sizes(t, dim, size, n, sizes);
    return push_pieces(L, t, dim, sizes, n, split_pieces);
}

/* unbind(dim = 1): the slices along dim, each without it */
static int m_unbind(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "unbind");
    const int dim = tlb_opt_dim(L, 2, "unbind", 0);
    int d;
    if (t->ndim == 0)
        return tlb_errorf(L, "unbind: expected a tensor with at least 1 dim, got a 0-dim one");
    if (tl_wrap_dim("unbind", dim, t->ndim, &d) != TL_OK) return tlb_fail(L);
    if (t->shape[d] > TL_SPLIT_MAX_PIECES)
        return tlb_errorf(L, "unbind: dim %d has %lld slices, more than %d", d + 1,
                          (long long)t->shape[d], TL_SPLIT_MAX_PIECES);
    return push_pieces(L, t, dim, NULL, (int)t->shape[d], unbind_pieces);
}

/* squeeze() drops every size-1 dim; squeeze(dim) that one if its size is 1 */
static int m_squeeze(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "squeeze"), *out = NULL;
    bool all = lua_isnoneornil(L, 2);
    int dim = all ? 0 : tlb_check_dim(L, 2, "squeeze");
    tlb_box *box = tlb_newbox(L);
    tl_status status = all ? tl_ag_squeeze_all(t, &out) : tl_ag_squeeze(t, dim, &out);
    return tlb_result(L, box, status, out);
}

static int m_unsqueeze(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "unsqueeze"), *out = NULL;
    int dim = tlb_check_dim(L, 2, "unsqueeze");
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_unsqueeze(t, dim, &out);
    return tlb_result(L, box, status, out);
}

/* flatten(start_dim = 1, end_dim = -1) */
static int m_flatten(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "flatten"), *out = NULL;
    int start = tlb_opt_dim(L, 2, "flatten", 0), end = tlb_opt_dim(L, 3, "flatten", -1);
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_flatten(t, start, end, &out);
    return tlb_result(L, box, status, out);
}

static int m_contiguous(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "contiguous"), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_contiguous(t, &out);
    if (status == TL_OK && out == t) { /* already contiguous: the same object */
        tl_release(out);
        lua_settop(L, 1);
        return 1;
    }
    return tlb_result(L, box, status, out);
}

static int m_clone(lua_State *L) {
    tl_tensor *t = tlb_check(L, 1, "clone"), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_clone(t, &out);
    return tlb_result(L, box, status, out);
}

const luaL_Reg tlb_view_methods[] = {
    {"size", m_size},
    {"stride", m_stride},
    {"dim", m_dim},
    {"numel", m_numel},
    {"item", m_item},
    {"totable", tlb_totable},
    {"is_contiguous", m_is_contiguous},
    {"pin_memory", m_pin_memory},
    {"is_pinned", m_is_pinned},
    {"view", m_view},
    {"reshape", m_reshape},
    {"expand", m_expand},
    {"transpose", m_transpose},
    {"t", m_t},
    {"permute", m_permute},
    {"narrow", m_narrow},
    {"select", m_select},
    {"split", m_split},
    {"chunk", m_chunk},
    {"unbind", m_unbind},
    {"squeeze", m_squeeze},
    {"unsqueeze", m_unsqueeze},
    {"flatten", m_flatten},
    {"contiguous", m_contiguous},
    {"clone", m_clone},
    {NULL, NULL},
};
