/* Index tensors from Lua: 1-based values checked, then shifted to the C API's 0-based ones. */
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

/* The index argument at idx (1-based positions along dim of x) as a 0-based tensor, checked
   against x's size along dim; a dim out of range is left to the op, which names it. */
tl_tensor *tlb_index_along(lua_State *L, const char *op, const tl_tensor *x, int dim, int idx) {
    const int d = dim < 0 ? dim + x->ndim : dim;
    const bool valid = x->ndim > 0 && d >= 0 && d < x->ndim;
    return tlb_zero_based_indices(L, op, "index", tlb_check(L, idx, op),
                                  valid ? "the size along dim" : NULL, valid ? x->shape[d] : 0);
}
