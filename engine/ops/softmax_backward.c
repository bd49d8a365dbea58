/* softmax and log_softmax backward along one dim: validate, dispatch to the fused kernels, into
   a new tensor or into grad_input (which may be grad or output itself). */
#include <string.h>

#include "kernels/kernel.h"
#include "core/storage.h"
#include "ops/checks.h"
#include "tlua/ops.h"

static bool same_shape(const tl_tensor *a, const tl_tensor *b) {
    return a->ndim == b->ndim &&
           memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0;
}

/* t has output's shape and device; arg names it in the messages. */
static tl_status check_like_output(const char *name, const char *arg, const tl_tensor *t,
                                   const tl_tensor *output) {
    tl_device dt = tl_tensor_device(t), dy = tl_tensor_device(output);
    if (!tl_device_equal(dt, dy)) {
        char nt[16], ny[16];
        return tl_error(TL_ERR_DEVICE, "%s: expected %s on output's device %s, got %s", name, arg,
                        tl_device_name(dy, ny), tl_device_name(dt, nt));
    }
    if (!same_shape(t, output)) {
        char st[256], sy[256];
        return tl_error(TL_ERR_SHAPE, "%s: %s of shape %s does not match output's shape %s", name,
                        arg, tl_shape_str(t, st, sizeof st), tl_shape_str(output, sy, sizeof sy));
    }
    return TL_OK;
}

/* grad and output agree; dim wrapped into *d (a 0-dim output takes dim 0 or -1). */
static tl_status check_inputs(const char *name, const tl_tensor *grad, const tl_tensor *output,
                              int dim, int *d) {
    TL_TRY(tl_check_tensor_arg(name, "grad", grad));
    TL_TRY(tl_check_tensor_arg(name, "output", output));
    if (!tl_dtype_is_floating(output->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: expected output of a floating dtype, got %s", name,
                        tl_dtype_name(output->dtype));
    TL_TRY(check_like_output(name, "grad", grad, output));
    return tl_wrap_dim(name, dim, output->ndim, d);
}

/* grad_input can take the result: output's shape, dtype and device, no expanded dim. */
static tl_status check_grad_input(const char *name, const tl_tensor *grad_input,
                                  const tl_tensor *output) {
    TL_TRY(tl_check_tensor_arg(name, "grad_input", grad_input));
    if (grad_input->dtype != output->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: expected grad_input of output's dtype %s, got %s", name,
                        tl_dtype_name(output->dtype), tl_dtype_name(grad_input->dtype));
    TL_TRY(check_like_output(name, "grad_input", grad_input, output));
    return tl_check_writable(name, "grad_input", grad_input);
}

/* What the kernel reads for t: t itself where it is grad_input's very elements or apart from
   them, else a copy (partly overlapping memory); grad in another dtype is cast to dtype. */
static tl_status readable(const tl_tensor *t, const tl_tensor *grad_input, tl_dtype dtype,
                          tl_tensor **out) {
    if (t->dtype != dtype) {
        TL_TRY(tl_empty(t->shape, t->ndim, dtype, tl_tensor_device(t), out));
        tl_status status = tl_copy_(*out, t);
        if (status != TL_OK) tl_release(*out);
        return status;
    }
    if (!tl_same_elements(t, grad_input) && tl_may_overlap(t, grad_input)) return tl_clone(t, out);
    *out = tl_retain((tl_tensor *)t);
    return TL_OK;
}

/* t as the kernel sees it: a 0-dim tensor as [1] (as ops/softmax.c does). */
static tl_status kernel_view(const tl_tensor *t, tl_tensor **out) {
    if (t->ndim > 0) {
        *out = tl_retain((tl_tensor *)t);
        return TL_OK;
    }
    int64_t one = 1;
    return tl_make_view(t, &one, &one, 1, t->offset, out);
}

/* grad_input = op's gradient along d, all arguments validated. */
static tl_status backward_into(tl_op op, tl_tensor *grad_input, const tl_tensor *grad,
                               const tl_tensor *output, int d) {
    tl_tensor *g = NULL, *y = NULL, *views[3] = {NULL, NULL, NULL};
    tl_status status = readable(grad, grad_input, output->dtype, &g);
    if (status == TL_OK) status = readable(output, grad_input, output->dtype, &y);
    if (status == TL_OK) status = kernel_view(grad_input, &views[0]);
    if (status == TL_OK) status = kernel_view(g, &views[1]);
    if (status == TL_OK) status = kernel_view(y, &views[2]);
    if (status == TL_OK) {
        const tl_tensor *traced[] = {views[0], views[1], views[2], NULL};
        const tl_kernel_entry *kernel =
            tl_dispatch(op, tl_tensor_device(output), output->dtype, traced);
        /* an empty tensor has nothing to compute: no loop may scale with its other dims */
        status = !kernel ? tl_dispatch_status()
                 : tl_numel(views[0]) == 0
                     ? TL_OK
                     : kernel->fn.softmax_backward(views[0], views[1], views[2], d);
    }
    for (int i = 0; i < 3; i++) tl_release(views[i]);
    tl_release(g);
    tl_release(y);
    return status;
}

static tl_status backward_op(tl_op op, const tl_tensor *grad, const tl_tensor *output, int dim,
                             tl_tensor **grad_input) {
    int d;
    TL_TRY(check_inputs(tl_op_info_of(op)->name, grad, output, dim, &d));
    tl_tensor *result;
    TL_TRY(tl_empty_like(output, &result));
    tl_status status = backward_into(op, result, grad, output, d);
    if (status != TL_OK) {
        tl_release(result);
        return status;
    }
    *grad_input = result;
    return TL_OK;
}

static tl_status backward_op_into(tl_op op, tl_tensor *grad_input, const tl_tensor *grad,
                                  const tl_tensor *output, int dim) {
    const char *name = tl_op_info_of(op)->name;
    int d;
    TL_TRY(check_inputs(name, grad, output, dim, &d));
    TL_TRY(check_grad_input(name, grad_input, output));
    TL_TRY(backward_into(op, grad_input, grad, output, d));
    tl_bump_version(grad_input);
    return TL_OK;
}

tl_status tl_softmax_backward(const tl_tensor *grad, const tl_tensor *output, int dim,
                              tl_tensor **grad_input) {
    return backward_op(TL_OP_softmax_backward, grad, output, dim, grad_input);
}

tl_status tl_log_softmax_backward(const tl_tensor *grad, const tl_tensor *output, int dim,
                                  tl_tensor **grad_input) {
    return backward_op(TL_OP_log_softmax_backward, grad, output, dim, grad_input);
}

tl_status tl_softmax_backward_into(tl_tensor *grad_input, const tl_tensor *grad,
                                   const tl_tensor *output, int dim) {
    return backward_op_into(TL_OP_softmax_backward, grad_input, grad, output, dim);
}

tl_status tl_log_softmax_backward_into(tl_tensor *grad_input, const tl_tensor *grad,
                                       const tl_tensor *output, int dim) {
    return backward_op_into(TL_OP_log_softmax_backward, grad_input, grad, output, dim);
}
