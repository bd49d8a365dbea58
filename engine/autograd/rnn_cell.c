/* Recording the fused LSTM / GRU cell pointwise ops: one node each, its backward one fused
   kernel (lstm_cell_pointwise_backward, gru_cell_pointwise_backward). */
#include "autograd/autocast.h"
#include "autograd/formula.h"
#include "ops/nn/nn_common.h"

/* g as the dtype of node's output o (a new reference). */
static tl_status output_grad(tl_node *node, int o, tl_tensor *g, tl_tensor **out) {
    return tl_cast(g, node->output_dtype[o], out);
}

/* ---- lstm_cell_pointwise -------------------------------------------------------------------
   Inputs: gates, gates2 (may be NULL), c_prev. Outputs: h, c. Saved: slot 0 the workspace (the
   activated gates), slot 1 c_prev, slot 2 c; slots 3, 4 gates and gates2 (aliases, read only by
   the differentiable gradient of create_graph, which needs the activations as functions of
   them). ints[0]: whether there is a gates2. */
enum { LSTM_GATES, LSTM_GATES2, LSTM_C_PREV };

static tl_status lstm_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const bool *needs = node->needs_input_grad;
    tl_tensor *ws, *c_prev, *c, *dh = NULL, *dc = NULL, *dgates = NULL;
    TL_TRY(tl_node_saved(node, 0, &ws));
    TL_TRY(tl_node_saved(node, 1, &c_prev));
    TL_TRY(tl_node_saved(node, 2, &c));
    tl_status status = output_grad(node, 0, g[0], &dh);
    if (status == TL_OK) status = output_grad(node, 1, g[1], &dc);
    if (status == TL_OK)
        status = tl_lstm_cell_pointwise_backward(dh, NULL, dc, ws, c_prev, c, &dgates,
                                                 needs[LSTM_C_PREV] ? &gi[LSTM_C_PREV] : NULL);
    tl_release(dh), tl_release(dc);
    if (status != TL_OK) return status;
    if (needs[LSTM_GATES2]) gi[LSTM_GATES2] = tl_retain(dgates);
    if (needs[LSTM_GATES])
        gi[LSTM_GATES] = dgates;
    else
        tl_release(dgates);
    return TL_OK;
}

static tl_status record_lstm(tl_tensor *gates, tl_tensor *gates2, tl_tensor *c_prev, tl_tensor **h,
                             tl_tensor **c) {
    tl_tensor *inputs[3] = {gates, gates2, c_prev};
    const bool record = tl_should_record(3, inputs);
    tl_tensor *ws = NULL;
    TL_TRY(tl_lstm_cell_pointwise(gates, gates2, c_prev, h, c, record ? &ws : NULL));
    if (!record) {
        tl_mark_no_grad(3, inputs, *h);
        tl_mark_no_grad(3, inputs, *c);
        return TL_OK;
    }
    tl_node *node;
    tl_status status = tl_node_new_multi("lstm_cell_pointwise", lstm_backward, 3, inputs, 2, &node);
    if (status == TL_OK) {
        node->ints[0] = gates2 != NULL;
        status = tl_node_set_output(node, 0, *h);
        if (status == TL_OK) status = tl_node_set_output(node, 1, *c);
        if (status == TL_OK) status = tl_node_save(node, 0, "workspace", ws);
        if (status == TL_OK) status = tl_node_save(node, 1, "c_prev", c_prev);
        if (status == TL_OK) status = tl_node_save(node, 2, "result", *c);
        if (status == TL_OK) status = tl_node_save(node, 3, "gates", gates);
        if (status == TL_OK && gates2) status = tl_node_save(node, 4, "gates2", gates2);
        tl_node_release(node); /* the outputs hold it */
    }
    tl_release(ws);
    if (status != TL_OK) {
        tl_release(*h), tl_release(*c);
        *h = *c = NULL;
    }
    return status;
}

tl_status tl_ag_lstm_cell_pointwise(tl_tensor *gates, tl_tensor *gates2, tl_tensor *c_prev,
                                    tl_tensor **h, tl_tensor **c) {
    tl_tensor *operands[3] = {gates, gates2, c_prev};
    bool casted[3];
    TL_TRY(tl_autocast_operands(TL_OP_lstm_cell_pointwise, operands, 3, casted));
    return tl_autocast_release(operands, 3, casted,
                               record_lstm(operands[0], operands[1], operands[2], h, c));
}

/* ---- gru_cell_pointwise --------------------------------------------------------------------
   Inputs: gi, gh, h_prev. Output: h. Saved: slot 0 the workspace (r, z, n, gh's n part), slot 1
   h_prev; slots 2, 3 gi and gh (aliases, for create_graph's differentiable gradient). */
enum { GRU_GI, GRU_GH, GRU_H_PREV };

static tl_status gru_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const bool *needs = node->needs_input_grad;
    tl_tensor *ws, *h_prev, *dh = NULL;
    TL_TRY(tl_node_saved(node, 0, &ws));
    TL_TRY(tl_node_saved(node, 1, &h_prev));
    TL_TRY(output_grad(node, 0, g[0], &dh));
    tl_status status = tl_gru_cell_pointwise_backward(
        dh, NULL, ws, h_prev, needs[GRU_GI] ? &gi[GRU_GI] : NULL,
        needs[GRU_GH] ? &gi[GRU_GH] : NULL, needs[GRU_H_PREV] ? &gi[GRU_H_PREV] : NULL);
    tl_release(dh);
    return status;
}

static tl_status record_gru(tl_tensor *gi, tl_tensor *gh, tl_tensor *h_prev, tl_tensor **h) {
    tl_tensor *inputs[3] = {gi, gh, h_prev};
    const bool record = tl_should_record(3, inputs);
    tl_tensor *ws = NULL;
    TL_TRY(tl_gru_cell_pointwise(gi, gh, h_prev, h, record ? &ws : NULL));
    tl_node *node;
    tl_status status = tl_record("gru_cell_pointwise", gru_backward, 3, inputs, h, &node);
    if (status == TL_OK && node) {
        status = tl_record_save(node, 0, "workspace", ws, h);
        if (status == TL_OK) status = tl_record_save(node, 1, "h_prev", h_prev, h);
        if (status == TL_OK) status = tl_record_save(node, 2, "gi", gi, h);
        if (status == TL_OK) status = tl_record_save(node, 3, "gh", gh, h);
    }
    tl_release(ws);
    return status;
}

tl_status tl_ag_gru_cell_pointwise(tl_tensor *gi, tl_tensor *gh, tl_tensor *h_prev, tl_tensor **h) {
    tl_tensor *operands[3] = {gi, gh, h_prev};
    bool casted[3];
    TL_TRY(tl_autocast_operands(TL_OP_gru_cell_pointwise, operands, 3, casted));
    return tl_autocast_release(operands, 3, casted,
                               record_gru(operands[0], operands[1], operands[2], h));
}
