/* Nodes whose backward is a callback: custom functions written in Lua (or C). */
#include "autograd/graph.h"

static tl_status custom_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (node->released)
        return tl_error(TL_ERR_AUTOGRAD,
                        "backward: trying to go through '%s' a second time (its saved state was "
                        "freed); pass retain_graph = true to the first backward",
                        node->name);
    return node->custom_backward(node->custom_user, node->num_outputs, g, node->num_inputs,
                                 node->needs_input_grad, gi);
}

tl_status tl_ag_custom(const char *name, int num_inputs, tl_tensor *const *inputs, int num_outputs,
                       tl_tensor *const *outputs, tl_custom_backward backward,
                       tl_custom_release release, void *user) {
    if (num_inputs > TL_NODE_MAX_INPUTS || num_outputs > TL_NODE_MAX_OUTPUTS) {
        if (release) release(user);
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: a custom function takes at most %d tensor inputs and %d outputs, got "
                        "%d and %d",
                        name, TL_NODE_MAX_INPUTS, TL_NODE_MAX_OUTPUTS, num_inputs, num_outputs);
    }
    if (!tl_should_record(num_inputs, inputs)) {
        for (int o = 0; o < num_outputs; o++) tl_mark_no_grad(num_inputs, inputs, outputs[o]);
        if (release) release(user);
        return TL_OK;
    }
    tl_node *node;
    tl_status status = tl_node_new(name, custom_backward, num_inputs, inputs, &node);
    if (status != TL_OK) {
        if (release) release(user);
        return status;
    }
    node->custom_backward = backward;
    node->custom_release = release;
    node->custom_user = user;
    for (int o = 0; o < num_outputs && status == TL_OK; o++) {
        if (!tl_dtype_is_floating(outputs[o]->dtype)) continue;
        status = tl_node_set_output(node, o, outputs[o]);
    }
    node->num_outputs = num_outputs;
    tl_node_release(node); /* the outputs hold it */
    return status;
}
