/* Index tensors from Lua: 1-based values, viewed as counting from 1 (tl_index_view) for the index
   ops, or checked and shifted to the C API's 0-based ones for the others. */
#include "binding.h"
#include "tlua/nn.h"

void tlb_check_index_dtype(lua_State *L, const char *op, const char *what,
                           const tl_tensor *indices) {
    if (indices->dtype != TL_I64 && indices->dtype != TL_I32)
        tlb_errorf(L, "%s: %s must be an int64 or int32 tensor of 1-based indices, got %s", op,
                   what, tl_dtype_name(indices->dtype));
}

/* indices - 1 as a new tensor (the C API counts from 0). */
tl_status tlb_zero_based(const tl_tensor *indices, tl_tensor **out) {
    tl_tensor *one = NULL;
    tl_status status = tl_scalar_tensor(tl_scalar_int(1), indices, &one);
    if (status == TL_OK) status = tl_sub(indices, one, out);
    tl_release(one);
    return status;
}

/* Checks that indices (the Lua argument named what) hold 1..count, before they are shifted:
   an error then speaks Lua's terms (1-based values and positions). On CUDA the check is
   queued like the op itself, and a failure is raised by the next synchronization. */
tl_status tlb_check_one_based(const tl_tensor *indices, const char *op, const char *what,
                              const char *range_of, int64_t count) {
    const tl_index_range range = {.op = op,
                                  .what = what,
                                  .range_of = range_of,
                                  .note = "indices count from 1",
                                  .first = 1,
                                  .count = count};
    return tl_check_index_range(indices, &range);
}

/* The index tensor indices (the Lua argument named what, counting from 1) as a new tensor that
   counts from 0, the C API's way, after checking its dtype and, where range_of names what it
   indexes, that it holds 1..count (NULL: not here, an operand the op itself refuses). Raises the
   error; the caller releases the result. */
tl_tensor *tlb_zero_based_indices(lua_State *L, const char *op, const char *what,
                                  const tl_tensor *indices, const char *range_of, int64_t count) {
    tlb_check_index_dtype(L, op, what, indices);
    tl_tensor *shifted = NULL;
    tl_status status = range_of ? tlb_check_one_based(indices, op, what, range_of, count) : TL_OK;
    if (status == TL_OK) status = tlb_zero_based(indices, &shifted);
    if (status != TL_OK) tlb_fail(L);
    return shifted;
}

/* The index argument at idx (1-based positions) as a view that counts from 1 (tl_index_view):
   the index ops check its values against the size they index as they read them, with nothing
   copied or shifted. Raises; the caller releases the view. */
tl_tensor *tlb_index_arg(lua_State *L, const char *op, int idx) {
    tl_tensor *indices = tlb_check(L, idx, op), *view = NULL;
    tlb_check_index_dtype(L, op, "index", indices);
    if (tl_index_view(indices, 1, &view) != TL_OK) tlb_fail(L);
    return view;
}

/* The same, its values checked here against count (the size it indexes, named range_of): an
   error then names op, for the forms that run through other ops (t[index] is index_select). */
tl_tensor *tlb_index_arg_checked(lua_State *L, const char *op, int idx, const char *range_of,
                                 int64_t count) {
    tl_tensor *view = tlb_index_arg(L, op, idx);
    if (tlb_check_one_based(view, op, "index", range_of, count) != TL_OK) {
        tl_release(view);
        tlb_fail(L);
    }
    return view;
}
