/* The fused LSTM / GRU cell pointwise ops (family RNN_CELL): validate, make the operands
   contiguous, allocate the outputs and dispatch, forward and backward. */
#include "core/size.h"
#include "ops/checks.h"
#include "ops/nn/nn_common.h"

#define MAX_TRACED 8

/* The traced tensors of a dispatch: the non-NULL ones of t[0..n), NULL-terminated. */
static const tl_tensor *const *traced(const tl_tensor **list, const tl_tensor *const *t, int n) {
    int k = 0;
    for (int i = 0; i < n && k < MAX_TRACED - 1; i++)
        if (t[i]) list[k++] = t[i];
    list[k] = NULL;
    return list;
}

/* t is a floating tensor on ref's device with ref's dtype (ref itself when NULL). */
static tl_status check_operand(const char *op, const char *ref_name, const tl_tensor *ref,
                               const char *name, const tl_tensor *t) {
    TL_TRY(tl_check_tensor_arg(op, name, t));
    TL_TRY(nn_check_floating(op, name, t));
    return ref ? nn_check_like(op, ref_name, ref, name, t, true) : TL_OK;
}

/* t has state's leading dims and last dim width * H (state [..., H]). */
static tl_status check_width(const char *op, const char *name, const tl_tensor *t,
                             const char *state_name, const tl_tensor *state, int width) {
    char st[256], ss[256];
    bool ok = state->ndim >= 1 && t->ndim == state->ndim;
    for (int d = 0; ok && d < t->ndim - 1; d++) ok = t->shape[d] == state->shape[d];
    if (ok) ok = t->shape[t->ndim - 1] == width * state->shape[state->ndim - 1];
    if (!ok)
        return tl_error(TL_ERR_SHAPE,
                        "%s: %s must be [..., %d * H] with the leading dims of %s [..., H], got "
                        "%s and %s %s",
                        op, name, width, state_name, tl_shape_str(t, st, sizeof st), state_name,
                        tl_shape_str(state, ss, sizeof ss));
    return TL_OK;
}

/* Allocates outputs out[i] (want[i] false: NULL) of shape like[i] with width times its last dim
   (1: like[i]'s shape) in dtype on device. */
static tl_status outputs(tl_tensor **out, const bool *want, const tl_tensor *const *like,
                         const int *width, int n, tl_dtype dtype, tl_device device) {
    tl_status status = TL_OK;
    for (int i = 0; i < n; i++) out[i] = NULL;
    for (int i = 0; i < n && status == TL_OK; i++) {
        if (!want[i]) continue;
        int64_t shape[TL_MAX_DIMS];
        const int nd = like[i]->ndim;
        for (int d = 0; d < nd; d++) shape[d] = like[i]->shape[d];
        if (!tl_size_mul(shape[nd - 1], width[i], &shape[nd - 1]))
            status = tl_error(TL_ERR_SHAPE, "rnn cell: a size overflows");
        else
            status = tl_empty(shape, nd, dtype, device, &out[i]);
    }
    if (status != TL_OK) nn_release_all(out, n);
    return status;
}

/* Runs op's kernel over out[0..nout) and the contiguous in[0..nin); rows of nothing skip it. */
static tl_status run(tl_op op, tl_tensor **out, int nout, const tl_tensor *const *in, int nin,
                     const tl_tensor *state) {
    tl_tensor *c[6];
    tl_status status = nn_contiguous_all(in, c, nin);
    if (status == TL_OK) {
        const tl_tensor *all[12], *list[MAX_TRACED];
        for (int i = 0; i < nout; i++) all[i] = out[i];
        for (int i = 0; i < nin; i++) all[nout + i] = c[i];
        const tl_kernel_entry *k =
            tl_dispatch(op, tl_tensor_device(state), state->dtype, traced(list, all, nout + nin));
        const tl_op_args args = {0};
        status = !k                     ? tl_dispatch_status()
                 : tl_numel(state) == 0 ? TL_OK
                                        : k->fn.tensors(out, (const tl_tensor *const *)c, &args);
    }
    nn_release_all(c, nin);
    return status;
}

/* Hands out[i] to *dest[i] (NULL dest: released) on success, releases them all otherwise. */
static tl_status hand_out(tl_status status, tl_tensor **out, tl_tensor **const *dest, int n) {
    for (int i = 0; i < n; i++) {
        if (status == TL_OK && dest[i])
            *dest[i] = out[i];
        else
            tl_release(out[i]);
    }
    return status;
}

static tl_status check_lstm(const char *op, const tl_tensor *gates, const tl_tensor *gates2,
                            const tl_tensor *c_prev) {
    TL_TRY(check_operand(op, NULL, NULL, "c_prev", c_prev));
    if (c_prev->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "%s: c_prev must have at least 1 dim ([..., H]), got 0", op);
    TL_TRY(check_operand(op, "c_prev", c_prev, "gates", gates));
    TL_TRY(check_width(op, "gates", gates, "c_prev", c_prev, 4));
    if (gates2) {
        TL_TRY(check_operand(op, "c_prev", c_prev, "gates2", gates2));
        TL_TRY(check_width(op, "gates2", gates2, "c_prev", c_prev, 4));
    }
    return TL_OK;
}

tl_status tl_lstm_cell_pointwise(const tl_tensor *gates, const tl_tensor *gates2,
                                 const tl_tensor *c_prev, tl_tensor **h, tl_tensor **c,
                                 tl_tensor **workspace) {
    TL_TRY(check_lstm("lstm_cell_pointwise", gates, gates2, c_prev));
    tl_tensor *out[3];
    const bool want[3] = {true, true, true}; /* the CPU kernels write every output */
    const tl_tensor *like[3] = {c_prev, c_prev, c_prev};
    const int width[3] = {1, 1, 4};
    TL_TRY(outputs(out, want, like, width, 3, c_prev->dtype, tl_tensor_device(c_prev)));
    const tl_tensor *in[3] = {gates, gates2, c_prev};
    tl_status status = run(TL_OP_lstm_cell_pointwise, out, 3, in, 3, c_prev);
    tl_tensor **const dest[3] = {h, c, workspace};
    return hand_out(status, out, dest, 3);
}

/* outputs given are contiguous, of c_prev's dtype and device, h and c of its shape, workspace of
   its shape with 4 times its last dim (an error naming what is not) */
static tl_status check_into(const char *op, const tl_tensor *c_prev, const char *const *names,
                            tl_tensor *const *out, const int *width, int n) {
    for (int i = 0; i < n; i++) {
        if (!out[i] || !tl_is_contiguous(out[i]))
            return tl_error(TL_ERR_ARGUMENT, "%s: the output %s must be a contiguous tensor", op,
                            names[i]);
        TL_TRY(check_operand(op, "c_prev", c_prev, names[i], out[i]));
        TL_TRY(check_width(op, names[i], out[i], "c_prev", c_prev, width[i]));
    }
    return TL_OK;
}

tl_status nn_lstm_cell_into(const tl_tensor *gates, const tl_tensor *gates2,
                            const tl_tensor *c_prev, tl_tensor *h, tl_tensor *c,
                            tl_tensor *workspace) {
    const char *op = "lstm_cell_pointwise";
    TL_TRY(check_lstm(op, gates, gates2, c_prev));
    tl_tensor *out[3] = {h, c, workspace};
    const char *names[3] = {"h", "c", "workspace"};
    const int width[3] = {1, 1, 4};
    TL_TRY(check_into(op, c_prev, names, out, width, 3));
    const tl_tensor *in[3] = {gates, gates2, c_prev};
    return run(TL_OP_lstm_cell_pointwise, out, 3, in, 3, c_prev);
}

/* a gradient of the output state (may be NULL) matches it */
static tl_status check_grad(const char *op, const char *name, const tl_tensor *g,
                            const char *state_name, const tl_tensor *state) {
    if (!g) return TL_OK;
    TL_TRY(check_operand(op, state_name, state, name, g));
    char sg[256], ss[256];
    if (!nn_same_shape(g, state->shape, state->ndim))
        return tl_error(TL_ERR_SHAPE, "%s: %s must have %s's shape %s, got %s", op, name,
                        state_name, tl_shape_str(state, ss, sizeof ss),
                        tl_shape_str(g, sg, sizeof sg));
    return TL_OK;
}

static tl_status check_lstm_backward(const char *op, const tl_tensor *grad_h,
                                     const tl_tensor *grad_h2, const tl_tensor *grad_c,
                                     const tl_tensor *workspace, const tl_tensor *c_prev,
                                     const tl_tensor *c) {
    TL_TRY(check_operand(op, NULL, NULL, "c_prev", c_prev));
    if (c_prev->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "%s: c_prev must have at least 1 dim ([..., H]), got 0", op);
    TL_TRY(check_grad(op, "c", c, "c_prev", c_prev));
    TL_TRY(tl_check_tensor_arg(op, "c", c));
    TL_TRY(check_operand(op, "c_prev", c_prev, "workspace", workspace));
    TL_TRY(check_width(op, "workspace", workspace, "c_prev", c_prev, 4));
    TL_TRY(check_grad(op, "grad_h", grad_h, "c_prev", c_prev));
    TL_TRY(check_grad(op, "grad_h2", grad_h2, "c_prev", c_prev));
    return check_grad(op, "grad_c", grad_c, "c_prev", c_prev);
}

tl_status tl_lstm_cell_pointwise_backward(const tl_tensor *grad_h, const tl_tensor *grad_h2,
                                          const tl_tensor *grad_c, const tl_tensor *workspace,
                                          const tl_tensor *c_prev, const tl_tensor *c,
                                          tl_tensor **grad_gates, tl_tensor **grad_c_prev) {
    const char *op = "lstm_cell_pointwise_backward";
    TL_TRY(check_lstm_backward(op, grad_h, grad_h2, grad_c, workspace, c_prev, c));
    tl_tensor *out[2];
    const bool want[2] = {true, true};
    const tl_tensor *like[2] = {c_prev, c_prev};
    const int width[2] = {4, 1};
    TL_TRY(outputs(out, want, like, width, 2, c_prev->dtype, tl_tensor_device(c_prev)));
    const tl_tensor *in[6] = {grad_h, grad_h2, grad_c, workspace, c_prev, c};
    tl_status status = run(TL_OP_lstm_cell_pointwise_backward, out, 2, in, 6, c_prev);
    tl_tensor **const dest[2] = {grad_gates, grad_c_prev};
    return hand_out(status, out, dest, 2);
}

tl_status nn_lstm_cell_backward_into(const tl_tensor *grad_h, const tl_tensor *grad_h2,
                                     const tl_tensor *grad_c, const tl_tensor *workspace,
                                     const tl_tensor *c_prev, const tl_tensor *c,
                                     tl_tensor *grad_gates, tl_tensor *grad_c_prev) {
    const char *op = "lstm_cell_pointwise_backward";
    TL_TRY(check_lstm_backward(op, grad_h, grad_h2, grad_c, workspace, c_prev, c));
    tl_tensor *out[2] = {grad_gates, grad_c_prev};
    const char *names[2] = {"grad_gates", "grad_c_prev"};
    const int width[2] = {4, 1};
    TL_TRY(check_into(op, c_prev, names, out, width, 2));
    const tl_tensor *in[6] = {grad_h, grad_h2, grad_c, workspace, c_prev, c};
    return run(TL_OP_lstm_cell_pointwise_backward, out, 2, in, 6, c_prev);
}

tl_status tl_gru_cell_pointwise(const tl_tensor *gi, const tl_tensor *gh, const tl_tensor *h_prev,
                                tl_tensor **h, tl_tensor **workspace) {
    const char *op = "gru_cell_pointwise";
    TL_TRY(check_operand(op, NULL, NULL, "h_prev", h_prev));
    if (h_prev->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "%s: h_prev must have at least 1 dim ([..., H]), got 0", op);
    TL_TRY(check_operand(op, "h_prev", h_prev, "gi", gi));
    TL_TRY(check_width(op, "gi", gi, "h_prev", h_prev, 3));
    TL_TRY(check_operand(op, "h_prev", h_prev, "gh", gh));
    TL_TRY(check_width(op, "gh", gh, "h_prev", h_prev, 3));
    tl_tensor *out[2];
    const bool want[2] = {true, true};
    const tl_tensor *like[2] = {h_prev, h_prev};
    const int width[2] = {1, 4};
    TL_TRY(outputs(out, want, like, width, 2, h_prev->dtype, tl_tensor_device(h_prev)));
    const tl_tensor *in[3] = {gi, gh, h_prev};
    tl_status status = run(TL_OP_gru_cell_pointwise, out, 2, in, 3, h_prev);
    tl_tensor **const dest[2] = {h, workspace};
    return hand_out(status, out, dest, 2);
}

tl_status tl_gru_cell_pointwise_backward(const tl_tensor *grad_h, const tl_tensor *grad_h2,
                                         const tl_tensor *workspace, const tl_tensor *h_prev,
                                         tl_tensor **grad_gi, tl_tensor **grad_gh,
                                         tl_tensor **grad_h_prev) {
    const char *op = "gru_cell_pointwise_backward";
    TL_TRY(check_operand(op, NULL, NULL, "h_prev", h_prev));
    if (h_prev->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "%s: h_prev must have at least 1 dim ([..., H]), got 0", op);
    TL_TRY(tl_check_tensor_arg(op, "grad_h", grad_h));
    TL_TRY(check_grad(op, "grad_h", grad_h, "h_prev", h_prev));
    TL_TRY(check_grad(op, "grad_h2", grad_h2, "h_prev", h_prev));
    TL_TRY(check_operand(op, "h_prev", h_prev, "workspace", workspace));
    TL_TRY(check_width(op, "workspace", workspace, "h_prev", h_prev, 4));
    tl_tensor *out[3];
    const bool want[3] = {true, true, true};
    const tl_tensor *like[3] = {h_prev, h_prev, h_prev};
    const int width[3] = {3, 3, 1};
    TL_TRY(outputs(out, want, like, width, 3, h_prev->dtype, tl_tensor_device(h_prev)));
    const tl_tensor *in[4] = {grad_h, grad_h2, workspace, h_prev};
    tl_status status = run(TL_OP_gru_cell_pointwise_backward, out, 3, in, 4, h_prev);
    tl_tensor **const dest[3] = {grad_gi, grad_gh, grad_h_prev};
    return hand_out(status, out, dest, 3);
}
