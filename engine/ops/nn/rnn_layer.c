/* One LSTM direction's recurrence over a whole sequence, forward and backward, as loops over the
   steps in C (the fused runs of nn.LSTM): a GEMM and a fused cell kernel a step, without a Lua
   call, a tensor box or a collector step per step. */
#include <stdlib.h>

#include "ops/checks.h"
#include "ops/nn/nn_common.h"

#define OP_FORWARD  "_lstm_layer_forward"
#define OP_BACKWARD "_lstm_layer_backward"

static void release_list(tl_tensor **list, int64_t n) {
    for (int64_t i = 0; i < n; i++) tl_release(list[i]), list[i] = NULL;
}

/* Stacks the T tensors of list (each [N, X]) along a new first dim: [T, N, X]. */
static tl_status stack(tl_tensor **list, int64_t T, tl_tensor **out) {
    tl_tensor **rows = calloc((size_t)T, sizeof *rows);
    if (!rows) return tl_error(TL_ERR_MEMORY, "%s: out of host memory", OP_FORWARD);
    tl_status status = TL_OK;
    for (int64_t t = 0; t < T && status == TL_OK; t++) status = tl_unsqueeze(list[t], 0, &rows[t]);
    if (status == TL_OK) status = tl_cat(rows, (int)T, 0, out);
    release_list(rows, T);
    free(rows);
    return status;
}

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

/* xw [T, N, 4H] (T >= 1), w_hh [4H, H], states [N, H], every tensor floating, of xw's dtype and
   device. */
static tl_status check_layer(const char *op, const tl_tensor *xw, const tl_tensor *w_hh,
                             const char *const *names, const tl_tensor *const *states, int n) {
    TL_TRY(tl_check_tensor_arg(op, "xw", xw));
    TL_TRY(nn_check_floating(op, "xw", xw));
    TL_TRY(tl_check_tensor_arg(op, "w_hh", w_hh));
    if (w_hh->ndim != 2 || w_hh->shape[0] != 4 * w_hh->shape[1] || w_hh->shape[1] < 1)
        return tl_error(TL_ERR_SHAPE, "%s: w_hh must be [4H, H] with H >= 1, got %d dims", op,
                        w_hh->ndim);
    TL_TRY(nn_check_like(op, "xw", xw, "w_hh", w_hh, true));
    const int64_t H = w_hh->shape[1];
    if (xw->ndim != 3 || xw->shape[0] < 1)
        return tl_error(TL_ERR_SHAPE, "%s: xw must be [T, N, 4H] with T >= 1, got %d dims", op,
                        xw->ndim);
    const int64_t gates[3] = {xw->shape[0], xw->shape[1], 4 * H}, state[2] = {xw->shape[1], H};
    TL_TRY(check_shape(op, "xw", xw, gates, 3));
    for (int i = 0; i < n; i++) {
        if (!states[i]) continue;
        TL_TRY(nn_check_like(op, "xw", xw, names[i], states[i], true));
        TL_TRY(check_shape(op, names[i], states[i], state, 2));
    }
    return TL_OK;
}

/* The step the walk takes k-th (0-based): forward in time, or from the last step back. */
static int64_t step_at(int64_t k, int64_t T, bool reverse) {
    return reverse ? T - 1 - k : k;
}

tl_status tl_lstm_layer_forward(tl_tensor *xw, tl_tensor *h0, tl_tensor *c0, tl_tensor *w_hh,
                                bool reverse, tl_tensor **out, tl_tensor **h_last,
                                tl_tensor **c_last, tl_tensor **workspaces, tl_tensor **cells) {
    const char *names[2] = {"h0", "c0"};
    const tl_tensor *states[2] = {h0, c0};
    TL_TRY(tl_check_tensor_arg(OP_FORWARD, "h0", h0));
    TL_TRY(tl_check_tensor_arg(OP_FORWARD, "c0", c0));
    TL_TRY(check_layer(OP_FORWARD, xw, w_hh, names, states, 2));
    const int64_t T = xw->shape[0];
    /* per step (time order): the input projection's view, h, c and the activated gates */
    tl_tensor **x = calloc((size_t)(4 * T), sizeof *x);
    if (!x) return tl_error(TL_ERR_MEMORY, "%s: out of host memory", OP_FORWARD);
    tl_tensor **hs = x + T, **cs = x + 2 * T, **ws = x + 3 * T;
    tl_status status = tl_unbind(xw, 0, x);
    tl_tensor *h = tl_retain(h0), *c = tl_retain(c0);
    for (int64_t k = 0; k < T && status == TL_OK; k++) {
        const int64_t t = step_at(k, T, reverse);
        tl_tensor *recurrent = NULL;
        status = tl_linear(h, w_hh, NULL, &recurrent);
        if (status == TL_OK)
            status = tl_lstm_cell_pointwise(x[t], recurrent, c, &hs[t], &cs[t], &ws[t]);
        tl_release(recurrent);
        tl_release(h), tl_release(c);
        h = hs[t] ? tl_retain(hs[t]) : NULL;
        c = cs[t] ? tl_retain(cs[t]) : NULL;
    }
    if (status == TL_OK) status = stack(hs, T, out);
    if (status == TL_OK) status = stack(cs, T, cells);
    if (status == TL_OK) status = stack(ws, T, workspaces);
    if (status == TL_OK) {
        *h_last = h, *c_last = c;
    } else {
        tl_release(h), tl_release(c);
    }
    release_list(x, 4 * T);
    free(x);
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
    TL_TRY(check_layer(OP_BACKWARD, workspaces, w_hh, names, states, 3));
    const int64_t T = workspaces->shape[0], N = workspaces->shape[1], H = w_hh->shape[1];
    const int64_t sequence[3] = {T, N, H};
    TL_TRY(nn_check_like(OP_BACKWARD, "workspaces", workspaces, "cells", cells, true));
    TL_TRY(check_shape(OP_BACKWARD, "cells", cells, sequence, 3));
    if (grad_out) {
        TL_TRY(nn_check_like(OP_BACKWARD, "workspaces", workspaces, "grad_out", grad_out, true));
        TL_TRY(check_shape(OP_BACKWARD, "grad_out", grad_out, sequence, 3));
    }
    /* per step (time order): views of the output's gradient, the gates, the cells; and the gates'
       gradients */
    tl_tensor **g = calloc((size_t)(4 * T), sizeof *g);
    if (!g) return tl_error(TL_ERR_MEMORY, "%s: out of host memory", OP_BACKWARD);
    tl_tensor **ws = g + T, **cs = g + 2 * T, **dgates = g + 3 * T;
    tl_status status = grad_out ? tl_unbind(grad_out, 0, g) : TL_OK;
    if (status == TL_OK) status = tl_unbind(workspaces, 0, ws);
    if (status == TL_OK) status = tl_unbind(cells, 0, cs);
    tl_tensor *dh = grad_h ? tl_retain(grad_h) : NULL, *dc = grad_c ? tl_retain(grad_c) : NULL;
    /* the walk backward: from the forward's last step to its first */
    for (int64_t k = T - 1; k >= 0 && status == TL_OK; k--) {
        const int64_t t = step_at(k, T, reverse);
        const tl_tensor *c_prev = k == 0 ? c0 : cs[step_at(k - 1, T, reverse)];
        tl_tensor *dc_prev = NULL, *dh_prev = NULL;
        status = tl_lstm_cell_pointwise_backward(g[t], dh, dc, ws[t], c_prev, cs[t], &dgates[t],
                                                 &dc_prev);
        if (status == TL_OK) status = tl_matmul(dgates[t], w_hh, &dh_prev);
        tl_release(dh), tl_release(dc);
        dh = dh_prev, dc = dc_prev;
    }
    if (status == TL_OK) status = stack(dgates, T, grad_gates);
    if (status == TL_OK) {
        *grad_h0 = dh, *grad_c0 = dc;
    } else {
        tl_release(dh), tl_release(dc);
    }
    release_list(g, 4 * T);
    free(g);
    return status;
}
