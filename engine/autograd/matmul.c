/* Recording matmul: saves other only for the input's gradient and input only
   for other's, and calls only the backward kernels that are needed. */
#include "autograd/graph.h"

/* slot 0: input (kept when other's gradient is needed), slot 1: other */
static tl_status matmul_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (node->needs_input_grad[0]) {
        tl_tensor *other;
        TL_TRY(tl_node_saved(node, 1, &other));
        TL_TRY(tl_matmul_backward_input(g[0], other, node->input_shape[0], node->input_ndim[0],
                                        &gi[0]));
    }
    if (node->needs_input_grad[1]) {
        tl_tensor *input;
        TL_TRY(tl_node_saved(node, 0, &input));
        TL_TRY(tl_matmul_backward_other(g[0], input, node->input_shape[1], node->input_ndim[1],
                                        &gi[1]));
    }
    return TL_OK;
}

tl_status tl_ag_matmul(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    TL_TRY(tl_matmul(a, b, out));
    tl_tensor *inputs[2] = {a, b};
    tl_node *node;
    TL_TRY(tl_record("matmul", matmul_backward, 2, inputs, *out, &node));
    if (node && node->needs_input_grad[1]) TL_TRY(tl_record_save(node, 0, "self", a, *out));
    if (node && node->needs_input_grad[0]) TL_TRY(tl_record_save(node, 1, "other", b, *out));
    return TL_OK;
}
