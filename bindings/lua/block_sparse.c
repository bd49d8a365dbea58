/* Block-sparse bindings: tl.block_sparse_linear(x, blocks, layout, bias?) and
   tl.block_layout_validate(layout, nnz); a layout is a table of int32 index tensors. */
#include "binding.h"

/* layout's tensor field name (an error naming op and the field when it is not a tensor). */
static const tl_tensor *layout_field(lua_State *L, int idx, const char *op, const char *name) {
    lua_getfield(L, idx, name);
    tl_tensor *t = tlb_totensor(L, -1, op);
    if (!t)
        tlb_errorf(L, "%s: layout.%s expected an int32 index tensor, got %s", op, name,
                   tlb_typename(L, -1));
    lua_pop(L, 1); /* the layout table keeps the tensor alive */
    return t;
}

static tl_block_layout layout_arg(lua_State *L, int idx, const char *op) {
    if (!lua_istable(L, idx) || tlb_is_tensor(L, idx))
        tlb_type_error(L, idx, op, "a layout table (tl.nn.block_layout(mask))");
    return (tl_block_layout){.row_offsets = layout_field(L, idx, op, "row_offsets"),
                             .col_indices = layout_field(L, idx, op, "col_indices"),
                             .col_offsets = layout_field(L, idx, op, "col_offsets"),
                             .row_indices = layout_field(L, idx, op, "row_indices"),
                             .col_blocks = layout_field(L, idx, op, "col_blocks"),
                             .coo_rows = layout_field(L, idx, op, "coo_rows"),
                             .coo_cols = layout_field(L, idx, op, "coo_cols")};
}

/* tl.block_sparse_linear(x [..., in], blocks [nnz, b, b], layout, bias?) -> [..., out] */
static int block_sparse_linear(lua_State *L) {
    const char *op = "block_sparse_linear";
    tl_tensor *x = tlb_check(L, 1, op), *blocks = tlb_check(L, 2, op);
    tl_block_layout layout = layout_arg(L, 3, op);
    tl_tensor *bias = lua_isnoneornil(L, 4) ? NULL : tlb_check(L, 4, op), *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_block_sparse_linear(x, blocks, &layout, bias, &out);
    return tlb_result(L, box, status, out);
}

/* tl.block_layout_validate(layout, nnz): true, or raises naming the first bad index */
static int block_layout_validate(lua_State *L) {
    const char *op = "block_layout_validate";
    tl_block_layout layout = layout_arg(L, 1, op);
    lua_Integer nnz = luaL_checkinteger(L, 2);
    if (tl_block_layout_validate(&layout, (int64_t)nnz) != TL_OK) return tlb_fail(L);
    lua_pushboolean(L, 1);
    return 1;
}

const luaL_Reg tlb_block_sparse_functions[] = {
    {"block_sparse_linear", block_sparse_linear},
    {"block_layout_validate", block_layout_validate},
    {NULL, NULL},
};
