/* Small tensor arithmetic shared by backward formulas. */
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
