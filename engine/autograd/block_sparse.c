/* Recording block_sparse_linear: backward runs only the split kernels of the inputs needing grad.
 */
#include "autograd/autocast.h"
#include "autograd/formula.h"
#include "ops/nn/nn_common.h"

/* Inputs: x, blocks, bias (may be NULL). Saved: slot 0 x (only if the blocks' gradient is
   needed), slot 1 the blocks (only if x's is), slots 2 .. 8 the layout's tensors.
   ints[0]: the block size. */
enum { BSL_INPUT, BSL_BLOCKS, BSL_BIAS };
enum { SAVED_X, SAVED_BLOCKS, SAVED_LAYOUT, LAYOUT_TENSORS = 7 };

static const char *const layout_names[LAYOUT_TENSORS] = {
    "layout.row_offsets", "layout.col_indices", "layout.col_offsets", "layout.row_indices",
    "layout.col_blocks",  "layout.coo_rows",    "layout.coo_cols"};

static void layout_tensors(const tl_block_layout *layout, const tl_tensor *out[LAYOUT_TENSORS]) {
    out[0] = layout->row_offsets, out[1] = layout->col_indices, out[2] = layout->col_offsets;
    out[3] = layout->row_indices, out[4] = layout->col_blocks, out[5] = layout->coo_rows;
    out[6] = layout->coo_cols;
}

static tl_status saved_layout(tl_node *node, tl_block_layout *layout) {
    tl_tensor *t[LAYOUT_TENSORS];
    for (int i = 0; i < LAYOUT_TENSORS; i++) TL_TRY(tl_node_saved(node, SAVED_LAYOUT + i, &t[i]));
    *layout = (tl_block_layout){.row_offsets = t[0],
                                .col_indices = t[1],
                                .col_offsets = t[2],
                                .row_indices = t[3],
                                .col_blocks = t[4],
                                .coo_rows = t[5],
                                .coo_cols = t[6]};
    return TL_OK;
}

static tl_status block_sparse_linear_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *grad;
    TL_TRY(tl_cast(g[0], node->output_dtype[0], &grad));
    tl_block_layout layout;
    tl_status status = TL_OK;
    if (node->needs_input_grad[BSL_INPUT] || node->needs_input_grad[BSL_BLOCKS])
        status = saved_layout(node, &layout);
    if (status == TL_OK && node->needs_input_grad[BSL_INPUT]) {
        tl_tensor *blocks;
        status = tl_node_saved(node, SAVED_BLOCKS, &blocks);
        if (status == TL_OK)
            status = tl_block_sparse_linear_backward_input(grad, blocks, &layout, &gi[BSL_INPUT]);
    }
    if (status == TL_OK && node->needs_input_grad[BSL_BLOCKS]) {
        tl_tensor *x;
        status = tl_node_saved(node, SAVED_X, &x);
        if (status == TL_OK)
            status = tl_block_sparse_linear_backward_weight(grad, x, &layout, node->ints[0],
                                                            &gi[BSL_BLOCKS]);
    }
    if (status == TL_OK && node->needs_input_grad[BSL_BIAS])
        status = tl_linear_backward_bias(grad, &gi[BSL_BIAS]);
    tl_release(grad);
    return status;
}

static tl_status record_block_sparse_linear(tl_tensor *x, tl_tensor *blocks,
                                            const tl_block_layout *layout, tl_tensor *bias,
                                            tl_tensor **out) {
    TL_TRY(tl_block_sparse_linear(x, blocks, layout, bias, out));
    tl_node *node;
    tl_tensor *inputs[3] = {x, blocks, bias};
    TL_TRY(tl_record("block_sparse_linear", block_sparse_linear_backward, 3, inputs, out, &node));
    if (!node) return TL_OK;
    node->ints[0] = blocks->shape[1];
    if (node->needs_input_grad[BSL_BLOCKS]) TL_TRY(tl_record_save(node, SAVED_X, "input", x, out));
    if (node->needs_input_grad[BSL_INPUT])
        TL_TRY(tl_record_save(node, SAVED_BLOCKS, "blocks", blocks, out));
    if (node->needs_input_grad[BSL_INPUT] || node->needs_input_grad[BSL_BLOCKS]) {
        const tl_tensor *t[LAYOUT_TENSORS];
        layout_tensors(layout, t);
        for (int i = 0; i < LAYOUT_TENSORS; i++)
            TL_TRY(tl_record_save(node, SAVED_LAYOUT + i, layout_names[i], (tl_tensor *)t[i], out));
    }
    return TL_OK;
}

tl_status tl_ag_block_sparse_linear(tl_tensor *x, tl_tensor *blocks, const tl_block_layout *layout,
                                    tl_tensor *bias, tl_tensor **out) {
    tl_tensor *operands[3] = {x, blocks, bias};
    bool casted[3];
    TL_TRY(tl_autocast_operands(TL_OP_block_sparse_linear, operands, 3, casted));
    return tl_autocast_release(
        operands, 3, casted,
        record_block_sparse_linear(operands[0], operands[1], layout, operands[2], out));
}
