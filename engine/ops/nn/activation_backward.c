/* The pointwise backward ops (relu_backward, gelu_backward, ...): validate, make dense, dispatch.
 */
#include <string.h>

#include "kernels/kernel.h"
#include "ops/checks.h"
#include "tlua/ops.h"

static tl_status run(tl_op op, const tl_tensor *grad, const tl_tensor *saved, const double *numbers,
                     tl_tensor **out) {
    const char *name = tl_op_info_of(op)->name;
    TL_TRY(tl_check_tensor_arg(name, "grad", grad));
    TL_TRY(tl_check_tensor_arg(name, "saved", saved));
    char sg[256], ss[256];
    if (grad->ndim != saved->ndim ||
        memcmp(grad->shape, saved->shape, sizeof grad->shape[0] * (size_t)grad->ndim) != 0)
        return tl_error(TL_ERR_SHAPE, "%s: grad has shape %s but the saved tensor has %s", name,
                        tl_shape_str(grad, sg, sizeof sg), tl_shape_str(saved, ss, sizeof ss));
    if (!tl_device_equal(tl_tensor_device(grad), tl_tensor_device(saved)))
        return tl_error(TL_ERR_DEVICE, "%s: grad and the saved tensor are on different devices",
                        name);
    if (!tl_dtype_is_floating(saved->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype, got %s", name,
                        tl_dtype_name(saved->dtype));
    /* dense inputs of the saved tensor's dtype: kernels read flat arrays */
    tl_tensor *g = NULL, *s = NULL, *result = NULL;
    tl_status status = tl_cast((tl_tensor *)grad, saved->dtype, &g);
    tl_tensor *g_dense = NULL;
    if (status == TL_OK) status = tl_contiguous(g, &g_dense);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)saved, &s);
    if (status == TL_OK) status = tl_empty_like(s, &result);
    if (status == TL_OK) {
        const tl_kernel_entry *k = tl_dispatch(op, tl_tensor_device(s), s->dtype,
                                               (const tl_tensor *[]){result, g_dense, s, NULL});
        tl_op_args args = {0};
        for (int i = 0; numbers && i < TL_OP_MAX_NUMBERS; i++) args.scalar[i] = numbers[i];
        status = k ? k->fn.binary(result, g_dense, s, &args) : tl_dispatch_status();
    }
    tl_release(g), tl_release(g_dense), tl_release(s);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *out = result;
    return TL_OK;
}

/* every POINTWISE_BACKWARD row of ops.def: tl_<name>_with(grad, saved, numbers, out), the
   numbers its forward's (resolved), and tl_<name>(grad, saved, out) */
#define BACKWARD_OP(name)                                                                          \
    tl_status tl_##name##_with(const tl_tensor *grad, const tl_tensor *saved,                      \
                               const double *numbers, tl_tensor **out) {                           \
        return run(TL_OP_##name, grad, saved, numbers, out);                                       \
    }                                                                                              \
    tl_status tl_##name(const tl_tensor *grad, const tl_tensor *saved, tl_tensor **out) {          \
        return run(TL_OP_##name, grad, saved, NULL, out);                                          \
    }
#define POINTWISE_BACKWARD_OP(name, differentiable, backward) BACKWARD_OP(name)
#include "tlua/ops.def"
