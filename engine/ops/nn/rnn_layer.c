/* One LSTM direction's recurrence over a whole sequence, forward and backward, as loops over the
   steps in C (the fused runs of nn.LSTM): a GEMM and a fused cell kernel a step, without a Lua
   call, a tensor box or a collector step per step. */

#include "ops/checks.h"
#include "ops/nn/nn_common.h"

#define OP_FORWARD  "_lstm_layer_forward"
#define OP_BACKWARD "_lstm_layer_backward"

/* shape's dims are want's (n of them), else an error naming the argument. */
static tl_status check_shape(const char *op, const char *name, const tl_tensor *t,
                             const int64_t *want, int n) {
    bool ok = t->ndim == n;
    for (int d = 0; ok && d < n; d++) ok = t->shape[d] == want[d];
    if (ok) return TL_OK;
    char got[128], expected[128];
    return tl_error(TL_ERR_SHAPE, "%s: %s must have shape %s, got %s", op, name,
                    tl_format_shape(want, n, expected, sizeof expected),
                    tl_format_shape(t->shape, t->ndim, got, sizeof got));
}

/* gates (named gates_name: the forward's xw, the backward's workspaces) [T, N, 4H] (T >= 1),
   w_hh [4H, H], states [N, H], every tensor floating, of gates' dtype and device. */
static tl_status check_layer(const char *op, const char *gates_name, const tl_tensor *xw,
                             const tl_tensor *w_hh, const char *const *names,
                             const tl_tensor *const *states, int n) {
    TL_TRY(tl_check_tensor_arg(op, gates_name, xw));
    TL_TRY(nn_check_floating(op, gates_name, xw));
    TL_TRY(tl_check_tensor_arg(op, "w_hh", w_hh));
    if (w_hh->ndim != 2 || w_hh->shape[0] != 4 * w_hh->shape[1] || w_hh->shape[1] < 1)
        return tl_error(TL_ERR_SHAPE, "%s: w_hh must be [4H, H] with H >= 1, got %d dims", op,
                        w_hh->ndim);
    TL_TRY(nn_check_like(op, gates_name, xw, "w_hh", w_hh, true));
    const int64_t H = w_hh->shape[1];
    if (xw->ndim != 3 || xw->shape[0] < 1)
        return tl_error(TL_ERR_SHAPE, "%s: %s must be [T, N, 4H] with T >= 1, got %d dims", op,
                        gates_name, xw->ndim);
    const int64_t gates[3] = {xw->shape[0], xw->shape[1], 4 * H}, state[2] = {xw->shape[1], H};
    TL_TRY(check_shape(op, gates_name, xw, gates, 3));
    for (int i = 0; i < n; i++) {
        if (!states[i]) continue;
        TL_TRY(nn_check_like(op, gates_name, xw, names[i], states[i], true));
        TL_TRY(check_shape(op, names[i], states[i], state, 2));
    }
    return TL_OK;
}

/* The step the walk takes k-th (0-based): forward in time, or from the last step back. */
static int64_t step_at(int64_t k, int64_t T, bool reverse) {
    return reverse ? T - 1 - k : k;
}

/* A tensor of shape (n dims) like ref (dtype, device). */
static tl_status empty_like(const tl_tensor *ref, const int64_t *shape, int n, tl_tensor **out) {
    return tl_empty(shape, n, ref->dtype, tl_tensor_device(ref), out);
}

/* Views of step t of each of n stacked [T, ...] tensors (a contiguous slice each). */
static tl_status steps_of(tl_tensor *const *stacked, int64_t t, tl_tensor **view, int n) {
    tl_status status = TL_OK;
    for (int i = 0; i < n; i++) view[i] = NULL;
    for (int i = 0; i < n && status == TL_OK; i++) status = tl_select(stacked[i], 0, t, &view[i]);
    return status;
}

tl_status tl_lstm_layer_forward(tl_tensor *xw, tl_tensor *h0, tl_tensor *c0, tl_tensor *w_hh,
                                bool reverse, tl_tensor **out, tl_tensor **h_last,
                                tl_tensor **c_last, tl_tensor **workspaces, tl_tensor **cells) {
    const char *names[2] = {"h0", "c0"};
    const tl_tensor *states[2] = {h0, c0};
    TL_TRY(tl_check_tensor_arg(OP_FORWARD, "h0", h0));
    TL_TRY(tl_check_tensor_arg(OP_FORWARD, "c0", c0));
    TL_TRY(check_layer(OP_FORWARD, "xw", xw, w_hh, names, states, 2));
    const int64_t T = xw->shape[0], N = xw->shape[1], H = w_hh->shape[1];
    const int64_t sequence[3] = {T, N, H}, gates[3] = {T, N, 4 * H};
    /* the results, stacked over the steps: h (out), c (cells), the activated gates */
    enum { OUT, CELLS, GATES, RESULTS };
    tl_tensor *result[RESULTS] = {NULL, NULL, NULL};
    tl_status status = empty_like(xw, sequence, 3, &result[OUT]);
    if (status == TL_OK) status = empty_like(xw, sequence, 3, &result[CELLS]);
    if (status == TL_OK) status = empty_like(xw, gates, 3, &result[GATES]);
    tl_tensor *h = tl_retain(h0), *c = tl_retain(c0);
    for (int64_t k = 0; k < T && status == TL_OK; k++) {
        const int64_t t = step_at(k, T, reverse);
        /* step t's views: its input projection, then h, c and the gates it writes */
        tl_tensor *x = NULL, *step[RESULTS], *recurrent = NULL;
        status = tl_select(xw, 0, t, &x);
        if (status == TL_OK) status = steps_of(result, t, step, RESULTS);
        if (status == TL_OK) status = tl_linear(h, w_hh, NULL, &recurrent);
        if (status == TL_OK)
            status = nn_lstm_cell_into(x, recurrent, c, step[OUT], step[CELLS], step[GATES]);
        tl_release(h), tl_release(c);
        h = step[OUT], c = step[CELLS];
        tl_release(step[GATES]), tl_release(recurrent), tl_release(x);
    }
    /* the walk's last state, apart from the stacked results (a module may return both) */
    if (status == TL_OK) status = tl_clone(h, h_last);
    if (status == TL_OK) status = tl_clone(c, c_last);
    tl_release(h), tl_release(c);
    if (status == TL_OK) {
        *out = result[OUT], *cells = result[CELLS], *workspaces = result[GATES];
    } else {
        nn_release_all(result, RESULTS);
    }
    return status;
}

tl_status tl_lstm_layer_backward(tl_tensor *grad_out, tl_tensor *grad_h, tl_tensor *grad_c,
                                 tl_tensor *workspaces, tl_tensor *cells, tl_tensor *c0,
                                 tl_tensor *w_hh, bool reverse, tl_tensor **grad_gates,
                                 tl_tensor **grad_h0, tl_tensor **grad_c0) {
    TL_TRY(tl_check_tensor_arg(OP_BACKWARD, "workspaces", workspaces));
    TL_TRY(tl_check_tensor_arg(OP_BACKWARD, "cells", cells));
    TL_TRY(tl_check_tensor_arg(OP_BACKWARD, "c0", c0));
    const char *names[3] = {"grad_h", "grad_c", "c0"};
    const tl_tensor *states[3] = {grad_h, grad_c, c0};
    TL_TRY(check_layer(OP_BACKWARD, "workspaces", workspaces, w_hh, names, states, 3));
    const int64_t T = workspaces->shape[0], N = workspaces->shape[1], H = w_hh->shape[1];
    const int64_t sequence[3] = {T, N, H}, state[2] = {N, H};
    TL_TRY(nn_check_like(OP_BACKWARD, "workspaces", workspaces, "cells", cells, true));
    TL_TRY(check_shape(OP_BACKWARD, "cells", cells, sequence, 3));
    if (grad_out) {
        TL_TRY(nn_check_like(OP_BACKWARD, "workspaces", workspaces, "grad_out", grad_out, true));
        TL_TRY(check_shape(OP_BACKWARD, "grad_out", grad_out, sequence, 3));
    }
    tl_tensor *dgates = NULL;
    TL_TRY(empty_like(workspaces, workspaces->shape, 3, &dgates));
    tl_tensor *dh = grad_h ? tl_retain(grad_h) : NULL, *dc = grad_c ? tl_retain(grad_c) : NULL;
    tl_status status = TL_OK;
    /* the walk backward: from the forward's last step to its first */
    for (int64_t k = T - 1; k >= 0 && status == TL_OK; k--) {
        const int64_t t = step_at(k, T, reverse);
        /* step t's views: the output's gradient, the gates, c, c before it, and its dgates */
        tl_tensor *g = NULL, *ws = NULL, *c = NULL, *c_prev = NULL, *dg = NULL;
        tl_tensor *dc_prev = NULL, *dh_prev = NULL;
        if (grad_out) status = tl_select(grad_out, 0, t, &g);
        if (status == TL_OK) status = tl_select(workspaces, 0, t, &ws);
        if (status == TL_OK) status = tl_select(cells, 0, t, &c);
        if (status == TL_OK)
            status = k == 0 ? (c_prev = tl_retain(c0), TL_OK)
                            : tl_select(cells, 0, step_at(k - 1, T, reverse), &c_prev);
        if (status == TL_OK) status = tl_select(dgates, 0, t, &dg);
        if (status == TL_OK) status = empty_like(workspaces, state, 2, &dc_prev);
        if (status == TL_OK)
            status = nn_lstm_cell_backward_into(g, dh, dc, ws, c_prev, c, dg, dc_prev);
        if (status == TL_OK) status = tl_matmul(dg, w_hh, &dh_prev);
        tl_release(g), tl_release(ws), tl_release(c), tl_release(c_prev), tl_release(dg);
        tl_release(dh), tl_release(dc);
        dh = dh_prev, dc = dc_prev;
    }
    if (status == TL_OK) {
        *grad_gates = dgates, *grad_h0 = dh, *grad_c0 = dc;
    } else {
        tl_release(dgates), tl_release(dh), tl_release(dc);
    }
    return status;
}
