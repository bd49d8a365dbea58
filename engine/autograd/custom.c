/* Nodes whose backward is a callback: custom functions written in Lua (or C). */
#include <string.h>

#include "autograd/graph.h"

/* A gradient must match its input: same shape, dtype and device (the engine
   accumulates it into the input's gradient as is). */
static tl_status check_gradient(const tl_node *node, int i, const tl_tensor *grad) {
    char got[256], want[256];
    if (grad->ndim != node->input_ndim[i] ||
        memcmp(grad->shape, node->input_shape[i], sizeof grad->shape[0] * (size_t)grad->ndim) != 0)
        return tl_error(
            TL_ERR_SHAPE,
            "%s backward: the gradient of input %d has shape %s, expected %s (the "
            "input's shape)",
            node->name, i + 1, tl_shape_str(grad, got, sizeof got),
            tl_format_shape(node->input_shape[i], node->input_ndim[i], want, sizeof want));
    if (grad->dtype != node->input_dtype[i])
        return tl_error(TL_ERR_DTYPE,
                        "%s backward: the gradient of input %d has dtype %s, expected %s (the "
                        "input's dtype)",
                        node->name, i + 1, tl_dtype_name(grad->dtype),
                        tl_dtype_name(node->input_dtype[i]));
    if (!tl_device_equal(tl_tensor_device(grad), node->input_device[i])) {
        tl_device_name(tl_tensor_device(grad), got);
        tl_device_name(node->input_device[i], want);
        return tl_error(TL_ERR_DEVICE,
                        "%s backward: the gradient of input %d is on %s, expected %s (the "
                        "input's device)",
                        node->name, i + 1, got, want);
    }
    return TL_OK;
}

static tl_status custom_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (node->released)
        return tl_error(TL_ERR_AUTOGRAD,
                        "backward: trying to go through '%s' a second time (its saved state was "
                        "freed); pass retain_graph = true to the first backward",
                        node->name);
    TL_TRY(node->custom_backward(node->custom_user, node->num_outputs, g, node->num_inputs,
                                 node->needs_input_grad, gi));
    for (int i = 0; i < node->num_inputs; i++) {
        tl_status status = gi[i] ? check_gradient(node, i, gi[i]) : TL_OK;
        if (status == TL_OK) continue;
        for (int j = 0; j < node->num_inputs; j++) {
            tl_release(gi[j]);
            gi[j] = NULL;
        }
        return status;
    }
    return TL_OK;
}

tl_status tl_ag_custom(const char *name, int num_inputs, tl_tensor *const *inputs, int num_outputs,
                       tl_tensor *const *outputs, tl_custom_backward backward,
                       tl_custom_release release, void *user) {
    if (num_inputs < 0 || num_inputs > TL_NODE_MAX_ARITY || num_outputs < 0 ||
        num_outputs > TL_NODE_MAX_ARITY) {
        if (release) release(user);
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: a custom function takes 0 to %d tensor inputs and outputs, got %d "
                        "and %d",
                        name, TL_NODE_MAX_ARITY, num_inputs, num_outputs);
    }
    if (!tl_should_record(num_inputs, inputs)) {
        /* say why: no input required grad (naming this function), grad mode was off, or
           an input was detached */
        for (int o = 0; o < num_outputs; o++)
            tl_mark_no_grad_by(name, num_inputs, inputs, outputs[o]);
        if (release) release(user);
        return TL_OK;
    }
    tl_node *node;
    tl_status status =
        tl_node_new_multi(name, custom_backward, num_inputs, inputs, num_outputs, &node);
    if (status != TL_OK) {
        if (release) release(user);
        return status;
    }
    node->custom_backward = backward;
    node->custom_release = release;
    node->custom_user = user;
    for (int o = 0; o < num_outputs && status == TL_OK; o++) {
        const tl_tensor *t = outputs[o];
        if (tl_dtype_is_floating(t->dtype)) {
            status = tl_node_set_output(node, o, outputs[o]);
            continue;
        }
        /* not differentiable: stays out of the graph, its gradient is zeros like it */
        node->output_ndim[o] = t->ndim;
        memcpy(node->output_shape[o], t->shape, sizeof node->output_shape[o]);
        node->output_dtype[o] = t->dtype;
    }
    node->num_outputs = num_outputs;
    tl_node_release(node); /* the outputs hold it */
    return status;
}
