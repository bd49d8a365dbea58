/* Small tensor arithmetic shared by backward formulas, and recording one-input ops. */
#include "autograd/formula.h"

static tl_status with_number(tl_status (*op)(const tl_tensor *, const tl_tensor *, tl_tensor **),
                             const tl_tensor *t, double v, tl_tensor **out) {
    tl_tensor *number;
    TL_TRY(tl_full(NULL, 0, tl_scalar_float(v), t->dtype, tl_tensor_device(t), &number));
    tl_status status = op(t, number, out);
    tl_release(number);
    return status;
}

tl_status tl_mul_number(const tl_tensor *t, double v, tl_tensor **out) {
    return with_number(tl_mul, t, v, out);
}

tl_status tl_add_number(const tl_tensor *t, double v, tl_tensor **out) {
    return with_number(tl_add, t, v, out);
}

tl_status tl_mask_or_zero(const tl_tensor *mask, const tl_tensor *t, tl_tensor **out) {
    tl_tensor *zero;
    TL_TRY(tl_zeros(NULL, 0, t->dtype, tl_tensor_device(t), &zero));
    tl_status status = tl_where(mask, t, zero, out);
    tl_release(zero);
    return status;
}

tl_status tl_mul3(const tl_tensor *a, const tl_tensor *b, const tl_tensor *c, tl_tensor **out) {
    tl_tensor *ab;
    TL_TRY(tl_mul(a, b, &ab));
    tl_status status = tl_mul(ab, c, out);
    tl_release(ab);
    return status;
}

tl_status tl_record_unary(const char *name, tl_backward_fn backward, tl_status forward_status,
                          tl_tensor *a, tl_tensor **out, bool save_input, bool save_result,
                          tl_node **node_out) {
    TL_TRY(forward_status);
    tl_node *node;
    TL_TRY(tl_record(name, backward, 1, &a, *out, &node));
    if (node && save_input) TL_TRY(tl_record_save(node, 0, "self", a, *out));
    if (node && save_result) TL_TRY(tl_record_save(node, 0, "result", *out, *out));
    if (node_out) *node_out = node;
    return TL_OK;
}

tl_status tl_reduce_to_input(tl_node *node, int i, tl_status status, tl_tensor **gi) {
    if (status != TL_OK) return status;
    tl_tensor *full = gi[i];
    gi[i] = NULL;
    return tl_sum_to_shape(full, node->input_shape[i], node->input_ndim[i], &gi[i]);
}
