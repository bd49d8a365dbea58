/* Recording nn ops: backward runs only the needed split kernels; save only what they read. */
#include "autograd/autocast.h"
#include "autograd/formula.h"
#include "autograd/nn_node.h"
#include "ops/checks.h"
#include "ops/nn/nn_common.h"

/* Every backward sets gi[i] only for needed inputs, "=" semantics: the engine accumulates. */

/* grad_output as the output's dtype (a reference to release). */
static tl_status output_grad(tl_node *node, tl_tensor *g, tl_tensor **out) {
    return tl_cast(g, node->output_dtype[0], out);
}

/* ---- conv2d, conv_transpose2d --------------------------------------------------------------
   Inputs: input, weight, bias (may be NULL). Saved: slot 0 the input (only if the weight's
   gradient is needed), slot 1 the weight (only if the input's gradient is needed).
   ints: the options (autograd/nn_node.h). */
enum { CONV_INPUT, CONV_WEIGHT, CONV_BIAS };

void tl_node_store_conv_options(tl_node *node, const tl_conv2d_options *o) {
    int64_t *s = node->ints;
    s[0] = o->stride[0], s[1] = o->stride[1], s[2] = o->padding[0], s[3] = o->padding[1];
    s[4] = o->dilation[0], s[5] = o->dilation[1], s[6] = o->groups;
}

tl_conv2d_options tl_node_conv_options(const tl_node *node) {
    const int64_t *s = node->ints;
    return (tl_conv2d_options){{s[0], s[1]}, {s[2], s[3]}, {s[4], s[5]}, s[6]};
}

static tl_status conv2d_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const tl_conv2d_options o = tl_node_conv_options(node);
    tl_tensor *grad;
    TL_TRY(output_grad(node, g[0], &grad));
    tl_status status = TL_OK;
    if (node->needs_input_grad[CONV_INPUT]) {
        tl_tensor *weight;
        status = tl_node_saved(node, 1, &weight);
        if (status == TL_OK)
            status = tl_conv2d_backward_input(grad, weight, node->input_shape[CONV_INPUT], &o,
                                              &gi[CONV_INPUT]);
    }
    if (status == TL_OK && node->needs_input_grad[CONV_WEIGHT]) {
        tl_tensor *input;
        status = tl_node_saved(node, 0, &input);
        if (status == TL_OK)
            status = tl_conv2d_backward_weight(grad, input, node->input_shape[CONV_WEIGHT], &o,
                                               &gi[CONV_WEIGHT]);
    }
    if (status == TL_OK && node->needs_input_grad[CONV_BIAS])
        status = tl_conv2d_backward_bias(grad, &gi[CONV_BIAS]);
    tl_release(grad);
    return status;
}

/* y = conv_transpose2d(x, w) = conv2d_backward_input(x', w), x' = x with the zero rows and
   columns an output_padding >= stride needs (nn_conv_transpose_input; x itself otherwise):
   dx = conv2d(dy, w) cut to x's shape, dw = conv2d_backward_weight(x' as the gradient, dy as the
   input), db = dy summed per channel. */
static tl_status conv_transpose2d_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const tl_conv2d_options o = tl_node_conv_options(node);
    tl_tensor *grad;
    TL_TRY(output_grad(node, g[0], &grad));
    tl_tensor *weight = NULL, *input = NULL;
    tl_status status = TL_OK;
    if (node->needs_input_grad[CONV_INPUT]) status = tl_node_saved(node, 1, &weight);
    if (status == TL_OK && weight) {
        tl_tensor *widened = NULL;
        const int64_t *x = node->input_shape[CONV_INPUT];
        status = tl_conv2d(grad, weight, NULL, &o, &widened);
        if (status == TL_OK && (widened->shape[2] != x[2] || widened->shape[3] != x[3])) {
            /* the rows and columns past x's end are the widening zeros' gradients: cut off */
            int64_t cut[4] = {0, x[3] - widened->shape[3], 0, x[2] - widened->shape[2]};
            status = tl_pad(widened, cut, 4, TL_PAD_CONSTANT, tl_scalar_int(0), &gi[CONV_INPUT]);
        } else if (status == TL_OK) {
            gi[CONV_INPUT] = tl_retain(widened);
        }
        tl_release(widened);
    }
    if (status == TL_OK && node->needs_input_grad[CONV_WEIGHT])
        status = tl_node_saved(node, 0, &input);
    if (status == TL_OK && input) {
        tl_tensor *widened = NULL;
        status = nn_conv_transpose_input(input, node->input_shape[CONV_WEIGHT] + 2, grad->shape + 2,
                                         &o, &widened);
        if (status == TL_OK)
            status = tl_conv2d_backward_weight(widened, grad, node->input_shape[CONV_WEIGHT], &o,
                                               &gi[CONV_WEIGHT]);
        tl_release(widened);
    }
    if (status == TL_OK && node->needs_input_grad[CONV_BIAS])
        status = tl_conv2d_backward_bias(grad, &gi[CONV_BIAS]);
    tl_release(grad);
    return status;
}

/* Records a node of the op (run already, *out its result) with the conv's saved tensors. */
static tl_status record_conv(const char *name, tl_backward_fn backward, tl_tensor *input,
                             tl_tensor *weight, tl_tensor *bias, const tl_conv2d_options *o,
                             tl_tensor **out) {
    tl_node *node;
    tl_tensor *inputs[3] = {input, weight, bias};
    TL_TRY(tl_record(name, backward, 3, inputs, out, &node));
    if (!node) return TL_OK;
    tl_node_store_conv_options(node, o);
    if (node->needs_input_grad[CONV_WEIGHT]) TL_TRY(tl_record_save(node, 0, "input", input, out));
    if (node->needs_input_grad[CONV_INPUT]) TL_TRY(tl_record_save(node, 1, "weight", weight, out));
    return TL_OK;
}

static tl_status record_conv2d(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                               const tl_conv2d_options *o, tl_tensor **out) {
    TL_TRY(tl_conv2d(input, weight, bias, o, out));
    return record_conv("conv2d", conv2d_backward, input, weight, bias, o, out);
}

static tl_status record_conv_transpose2d(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                                         const tl_conv2d_options *o,
                                         const int64_t output_padding[2], tl_tensor **out) {
    TL_TRY(tl_conv_transpose2d(input, weight, bias, o, output_padding, out));
    return record_conv("conv_transpose2d", conv_transpose2d_backward, input, weight, bias, o, out);
}

tl_status tl_ag_conv2d(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                       const tl_conv2d_options *opts, tl_tensor **out) {
    const tl_conv2d_options o = opts ? *opts : tl_conv2d_defaults();
    tl_tensor *operands[3] = {input, weight, bias};
    bool casted[3];
    TL_TRY(tl_autocast_operands(TL_OP_conv2d_forward, operands, 3, casted));
    return tl_autocast_release(operands, 3, casted,
                               record_conv2d(operands[0], operands[1], operands[2], &o, out));
}

tl_status tl_ag_conv_transpose2d(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                                 const tl_conv2d_options *opts, const int64_t output_padding[2],
                                 tl_tensor **out) {
    const tl_conv2d_options o = opts ? *opts : tl_conv2d_defaults();
    tl_tensor *operands[3] = {input, weight, bias};
    bool casted[3];
    TL_TRY(tl_autocast_operands(TL_OP_conv2d_forward, operands, 3, casted));
    return tl_autocast_release(
        operands, 3, casted,
        record_conv_transpose2d(operands[0], operands[1], operands[2], &o, output_padding, out));
}

/* ---- embedding -----------------------------------------------------------------------------
   Inputs: indices (never differentiable), weight. Saved: slot 0 the indices. */
static tl_status embedding_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (!node->needs_input_grad[1]) return TL_OK;
    tl_tensor *indices, *grad;
    TL_TRY(tl_node_saved(node, 0, &indices));
    TL_TRY(output_grad(node, g[0], &grad));
    tl_status status = tl_embedding_backward(grad, indices, node->input_shape[1][0], &gi[1]);
    tl_release(grad);
    return status;
}

tl_status tl_ag_embedding(tl_tensor *indices, tl_tensor *weight, tl_tensor **out) {
    TL_TRY(tl_embedding(indices, weight, out));
    tl_node *node;
    tl_tensor *inputs[2] = {indices, weight};
    TL_TRY(tl_record("embedding", embedding_backward, 2, inputs, out, &node));
    if (node && node->needs_input_grad[1]) TL_TRY(tl_record_save(node, 0, "indices", indices, out));
    return TL_OK;
}

/* ---- cross_entropy -------------------------------------------------------------------------
   Inputs: logits, target (never differentiable). Saved: slot 0 the logits, slot 1 the target,
   slot 2 the per-row log-sum-exp. scalar[0]: label_smoothing. */
static tl_status cross_entropy_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    if (!node->needs_input_grad[0]) return TL_OK;
    tl_tensor *logits, *target, *lse;
    TL_TRY(tl_node_saved(node, 0, &logits));
    TL_TRY(tl_node_saved(node, 1, &target));
    TL_TRY(tl_node_saved(node, 2, &lse));
    return tl_cross_entropy_backward(g[0], logits, target, lse, node->scalar[0], &gi[0]);
}

static tl_status record_cross_entropy(tl_tensor *logits, tl_tensor *target, double label_smoothing,
                                      tl_tensor **loss) {
    tl_tensor *lse;
    TL_TRY(tl_cross_entropy(logits, target, label_smoothing, loss, &lse));
    tl_node *node;
    tl_tensor *inputs[2] = {logits, target};
    tl_status status = tl_record("cross_entropy", cross_entropy_backward, 2, inputs, loss, &node);
    if (status == TL_OK && node) {
        node->scalar[0] = label_smoothing;
        status = tl_record_save(node, 0, "logits", logits, loss);
        if (status == TL_OK) status = tl_record_save(node, 1, "target", target, loss);
        if (status == TL_OK) status = tl_record_save(node, 2, "log_sum_exp", lse, loss);
    }
    tl_release(lse);
    return status;
}

tl_status tl_ag_cross_entropy(tl_tensor *logits, tl_tensor *target, double label_smoothing,
                              tl_tensor **loss) {
    tl_tensor *operands[1] = {logits};
    bool casted[1];
    TL_TRY(tl_autocast_operands(TL_OP_cross_entropy, operands, 1, casted));
    return tl_autocast_release(operands, 1, casted,
                               record_cross_entropy(operands[0], target, label_smoothing, loss));
}

/* ---- linear_cross_entropy ------------------------------------------------------------------
   Inputs: input, weight, bias (may be NULL), target (never differentiable). Saved: slots 0, 1, 2
   the gradients of input, weight and bias that the forward made (each only where needed). */
enum { LCE_INPUT, LCE_WEIGHT, LCE_BIAS };

static tl_status linear_cross_entropy_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_status status = TL_OK;
    for (int i = LCE_INPUT; i <= LCE_BIAS && status == TL_OK; i++) {
        if (!node->needs_input_grad[i]) continue;
        tl_tensor *made, *scale = NULL;
        status = tl_node_saved(node, i, &made);
        /* the loss's gradient in the made gradient's dtype (1 or a power of two, as a loss is
           usually scaled, is exact in every dtype) */
        if (status == TL_OK) status = tl_cast(g[0], made->dtype, &scale);
        if (status == TL_OK) status = tl_mul(made, scale, &gi[i]);
        tl_release(scale);
    }
    return status;
}

/* params: the weight and bias as given (the recorded inputs), used: as the GEMMs take them */
static tl_status record_linear_cross_entropy(tl_tensor *input, tl_tensor *const *params,
                                             tl_tensor *const *used, tl_tensor *target,
                                             const tl_linear_cross_entropy_options *o,
                                             tl_tensor **loss) {
    tl_tensor *weight = params[0], *bias = params[1];
    tl_tensor *inputs[4] = {input, weight, bias, target};
    const bool record = tl_should_record(3, inputs);
    tl_linear_cross_entropy_grads grads = {
        .want_input = record && tl_requires_grad(input),
        .want_weight = record && tl_requires_grad(weight),
        .want_bias = record && bias && tl_requires_grad(bias),
        .params_float32 = weight->dtype == TL_F32 && used[0]->dtype != TL_F32,
    };
    TL_TRY(tl_linear_cross_entropy(input, used[0], used[1], target, o, loss, &grads));
    tl_node *node = NULL;
    tl_status status =
        tl_record("linear_cross_entropy", linear_cross_entropy_backward, 4, inputs, loss, &node);
    tl_tensor *made[3] = {grads.input, grads.weight, grads.bias};
    static const char *const names[3] = {"grad_input", "grad_weight", "grad_bias"};
    for (int i = 0; i < 3 && status == TL_OK && node; i++)
        if (made[i]) status = tl_record_save(node, i, names[i], made[i], loss);
    for (int i = 0; i < 3; i++) tl_release(made[i]);
    return status;
}

tl_status tl_ag_linear_cross_entropy(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                                     tl_tensor *target,
                                     const tl_linear_cross_entropy_options *options,
                                     tl_tensor **loss) {
    tl_tensor *operand[1] = {input}, *params[2] = {weight, bias}, *used[2] = {weight, bias};
    bool input_cast[1], params_cast[2];
    TL_TRY(tl_autocast_operands(TL_OP_linear_cross_entropy, operand, 1, input_cast));
    tl_status status = tl_autocast_parameters(TL_OP_linear_cross_entropy, used, 2, params_cast);
    if (status != TL_OK) return tl_autocast_release(operand, 1, input_cast, status);
    status = record_linear_cross_entropy(operand[0], params, used, target, options, loss);
    tl_autocast_release(used, 2, params_cast, status);
    return tl_autocast_release(operand, 1, input_cast, status);
}

/* ---- layer_norm ----------------------------------------------------------------------------
   Inputs: input, weight, bias (either may be NULL). Saved: slots 0, 2, 3 the input, mean and
   rstd (only if the input's or the weight's gradient is needed), slot 1 the weight (only if
   the input's gradient is needed). ints[0]: whether there is a weight. */
enum { NORM_INPUT, NORM_WEIGHT, NORM_BIAS };

/* A layer norm's wanted gradients (each out pointer NULL when not wanted) from grad, grad_sum
   (add_layer_norm's sum's gradient, or NULL) and the forward's input, mean, rstd and weight: the
   one-pass kernel when the input's gradient and the weight's or the bias's are all wanted, else
   the split kernel of each side that is. */
static tl_status layer_norm_wanted(const tl_tensor *grad, const tl_tensor *grad_sum,
                                   const tl_tensor *input, const tl_tensor *mean,
                                   const tl_tensor *rstd, const tl_tensor *weight,
                                   tl_tensor **grad_input, tl_tensor **grad_weight,
                                   tl_tensor **grad_bias) {
    if (grad_input && (grad_weight || grad_bias))
        return tl_layer_norm_backward(grad, grad_sum, input, mean, rstd, weight, grad_input,
                                      grad_weight, grad_bias);
    if (grad_input)
        return tl_layer_norm_backward_input(grad, grad_sum, input, mean, rstd, weight, grad_input);
    if (grad_weight || grad_bias)
        return tl_layer_norm_backward_weight(grad, input, mean, rstd, grad_weight, grad_bias);
    return TL_OK;
}

/* The gradients from the forward's input, mean, rstd and weight (as tl_node_saved gave them). */
static tl_status layer_norm_gradients(tl_node *node, const tl_tensor *grad, tl_tensor *input,
                                      tl_tensor *mean, tl_tensor *rstd, tl_tensor *weight,
                                      tl_tensor **gi) {
    const bool *needs = node->needs_input_grad;
    return layer_norm_wanted(
        grad, NULL, input, mean, rstd, weight, needs[NORM_INPUT] ? &gi[NORM_INPUT] : NULL,
        needs[NORM_WEIGHT] ? &gi[NORM_WEIGHT] : NULL, needs[NORM_BIAS] ? &gi[NORM_BIAS] : NULL);
}

/* The gradients of a normalisation from its saved tensors (either norm's *_gradients). */
typedef tl_status (*norm_gradients_fn)(tl_node *node, const tl_tensor *grad, tl_tensor *input,
                                       tl_tensor *mean, tl_tensor *scale, tl_tensor *weight,
                                       tl_tensor **gi);

/* A normalisation's backward: the saved input (slot 0), weight (slot 1, when the input's
   gradient needs it: ints[0]), mean (slot 2) and 1 / std (slot 3), as far as the needed
   gradients read them, handed to gradients. */
static tl_status norm_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi,
                               norm_gradients_fn gradients) {
    const bool *needs = node->needs_input_grad;
    tl_tensor *grad, *input = NULL, *mean = NULL, *scale = NULL, *weight = NULL;
    TL_TRY(output_grad(node, g[0], &grad));
    tl_status status = TL_OK;
    if (needs[NORM_INPUT] || needs[NORM_WEIGHT]) {
        status = tl_node_saved(node, 0, &input);
        if (status == TL_OK) status = tl_node_saved(node, 2, &mean);
        if (status == TL_OK) status = tl_node_saved(node, 3, &scale);
    }
    if (status == TL_OK && needs[NORM_INPUT] && node->ints[0])
        status = tl_node_saved(node, 1, &weight);
    if (status == TL_OK) status = gradients(node, grad, input, mean, scale, weight, gi);
    tl_release(grad);
    return status;
}

static tl_status layer_norm_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return norm_backward(node, g, gi, layer_norm_gradients);
}

static tl_status record_layer_norm(tl_tensor *input, tl_tensor *weight, tl_tensor *bias, double eps,
                                   tl_dtype dtype, tl_tensor **out) {
    tl_tensor *mean, *rstd;
    TL_TRY(tl_layer_norm_as(input, weight, bias, eps, dtype, out, &mean, &rstd));
    tl_node *node;
    tl_tensor *inputs[3] = {input, weight, bias};
    tl_status status = tl_record("layer_norm", layer_norm_backward, 3, inputs, out, &node);
    if (status == TL_OK && node) {
        const bool *needs = node->needs_input_grad;
        node->ints[0] = weight != NULL;
        node->scalar[0] = eps;
        if (needs[NORM_INPUT] || needs[NORM_WEIGHT]) {
            status = tl_record_save(node, 0, "input", input, out);
            if (status == TL_OK) status = tl_record_save(node, 2, "mean", mean, out);
            if (status == TL_OK) status = tl_record_save(node, 3, "rstd", rstd, out);
        }
        if (status == TL_OK && needs[NORM_INPUT] && weight)
            status = tl_record_save(node, 1, "weight", weight, out);
    }
    tl_release(mean), tl_release(rstd);
    return status;
}

/* dtype: the output's, or TL_DTYPE_COUNT for the (cast) input's. */
static tl_status autocast_layer_norm(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                                     double eps, tl_dtype dtype, tl_tensor **out) {
    TL_TRY(tl_check_tensor_arg("layer_norm", "input", input));
    tl_tensor *operands[3] = {input, weight, bias};
    bool casted[3];
    TL_TRY(tl_autocast_operands(TL_OP_layer_norm, operands, 3, casted));
    if (dtype == TL_DTYPE_COUNT) dtype = operands[0]->dtype;
    return tl_autocast_release(
        operands, 3, casted,
        record_layer_norm(operands[0], operands[1], operands[2], eps, dtype, out));
}

tl_status tl_ag_layer_norm(tl_tensor *input, tl_tensor *weight, tl_tensor *bias, double eps,
                           tl_tensor **out) {
    return autocast_layer_norm(input, weight, bias, eps, TL_DTYPE_COUNT, out);
}

tl_status tl_ag_layer_norm_as(tl_tensor *input, tl_tensor *weight, tl_tensor *bias, double eps,
                              tl_dtype dtype, tl_tensor **out) {
    return autocast_layer_norm(input, weight, bias, eps, dtype, out);
}

/* ---- add_layer_norm ------------------------------------------------------------------------
   Inputs: input, residual, weight, bias (either may be NULL). Outputs: 0 the normalized out, 1
   the sum s = input + residual. Saved: slots 2, 3 the mean and rstd and slot 4 the sum (when a
   gradient of input, residual or weight is needed), slot 1 the weight (when input's or
   residual's is). ints[0]: whether there is a weight. The sum's gradient is NULL when nobody
   used the sum (absent_output_grads): nothing is then added. */
enum { ADD_NORM_INPUT, ADD_NORM_RESIDUAL, ADD_NORM_WEIGHT, ADD_NORM_BIAS };

static tl_status add_layer_norm_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const bool *needs = node->needs_input_grad;
    const bool want_sum = needs[ADD_NORM_INPUT] || needs[ADD_NORM_RESIDUAL];
    tl_tensor *grad = NULL, *grad_sum = NULL, *sum = NULL, *mean = NULL, *rstd = NULL;
    tl_tensor *weight = NULL, *grad_input = NULL;
    tl_status status = TL_OK;
    if (want_sum || needs[ADD_NORM_WEIGHT]) {
        status = tl_node_saved(node, 4, &sum);
        if (status == TL_OK) status = tl_node_saved(node, 2, &mean);
        if (status == TL_OK) status = tl_node_saved(node, 3, &rstd);
    }
    if (status == TL_OK && want_sum && node->ints[0]) status = tl_node_saved(node, 1, &weight);
    /* out unused (only the sum was): its gradient is zero */
    if (status == TL_OK)
        status = g[0] ? tl_cast(g[0], node->output_dtype[0], &grad)
                      : tl_zeros(node->output_shape[0], node->output_ndim[0], node->output_dtype[0],
                                 node->input_device[ADD_NORM_INPUT], &grad);
    if (status == TL_OK && want_sum && g[1])
        status = tl_cast(g[1], node->output_dtype[1], &grad_sum);
    /* a residual in a 16-bit type over the float32 sum (mixed precision): its gradient in its
       dtype, written by the same pass */
    const tl_dtype residual_dtype = node->input_dtype[ADD_NORM_RESIDUAL];
    tl_tensor *grad_residual = NULL;
    const bool apart = needs[ADD_NORM_RESIDUAL] && residual_dtype != node->output_dtype[1];
    if (status == TL_OK && apart)
        status = tl_layer_norm_backward_as(grad, grad_sum, sum, mean, rstd, weight, residual_dtype,
                                           &grad_input, &grad_residual,
                                           needs[ADD_NORM_WEIGHT] ? &gi[ADD_NORM_WEIGHT] : NULL,
                                           needs[ADD_NORM_BIAS] ? &gi[ADD_NORM_BIAS] : NULL);
    else if (status == TL_OK)
        status = layer_norm_wanted(grad, grad_sum, sum, mean, rstd, weight,
                                   want_sum ? &grad_input : NULL,
                                   needs[ADD_NORM_WEIGHT] ? &gi[ADD_NORM_WEIGHT] : NULL,
                                   needs[ADD_NORM_BIAS] ? &gi[ADD_NORM_BIAS] : NULL);
    tl_release(grad), tl_release(grad_sum);
    if (status != TL_OK) return status;
    /* input's and residual's gradients are the same values: one tensor, a reference for each. The
       engine never writes into a gradient it holds more than one reference of (accumulation is
       out of place, a leaf's grad is a copy, tl_grad_is_disposable counts references), so
       accumulating into one never changes the other. */
    if (needs[ADD_NORM_RESIDUAL])
        gi[ADD_NORM_RESIDUAL] = apart ? grad_residual : tl_retain(grad_input);
    if (needs[ADD_NORM_INPUT])
        gi[ADD_NORM_INPUT] = grad_input;
    else
        tl_release(grad_input);
    return TL_OK;
}

static tl_status record_add_layer_norm(tl_tensor *input, tl_tensor *residual, tl_tensor *weight,
                                       tl_tensor *bias, double eps, tl_dtype dtype, tl_tensor **out,
                                       tl_tensor **sum) {
    tl_tensor *inputs[4] = {input, residual, weight, bias};
    const bool record = tl_should_record(4, inputs);
    tl_tensor *mean = NULL, *rstd = NULL;
    TL_TRY(tl_add_layer_norm_as(input, residual, weight, bias, eps, dtype, out, sum,
                                record ? &mean : NULL, record ? &rstd : NULL));
    if (!record) {
        tl_mark_no_grad(4, inputs, *out);
        tl_mark_no_grad(4, inputs, *sum);
        return TL_OK;
    }
    tl_node *node;
    tl_status status =
        tl_node_new_multi("add_layer_norm", add_layer_norm_backward, 4, inputs, 2, &node);
    if (status == TL_OK) {
        const bool *needs = node->needs_input_grad;
        const bool want_sum = needs[ADD_NORM_INPUT] || needs[ADD_NORM_RESIDUAL];
        node->ints[0] = weight != NULL;
        node->scalar[0] = eps;
        node->absent_output_grads = true;
        status = tl_node_set_output(node, 0, *out);
        if (status == TL_OK) status = tl_node_set_output(node, 1, *sum);
        if (status == TL_OK && (want_sum || needs[ADD_NORM_WEIGHT])) {
            status = tl_node_save(node, 4, "sum", *sum);
            if (status == TL_OK) status = tl_node_save(node, 2, "mean", mean);
            if (status == TL_OK) status = tl_node_save(node, 3, "rstd", rstd);
        }
        if (status == TL_OK && want_sum && weight) status = tl_node_save(node, 1, "weight", weight);
        tl_node_release(node); /* the outputs hold it */
    }
    tl_release(mean), tl_release(rstd);
    if (status != TL_OK) {
        tl_release(*out), tl_release(*sum);
        *out = *sum = NULL;
    }
    return status;
}

/* Under autocast the operands go to float32 (LAYER_NORM's rule), except a residual in the
   autocast dtype beside a float32 input (or the input beside a float32 residual): the kernel
   reads it as it is. dtype: the output's, or TL_DTYPE_COUNT for the sum's. */
static tl_status autocast_add_layer_norm(tl_tensor *input, tl_tensor *residual, tl_tensor *weight,
                                         tl_tensor *bias, double eps, tl_dtype dtype,
                                         tl_tensor **out, tl_tensor **sum) {
    const char *op = "add_layer_norm";
    TL_TRY(tl_check_tensor_arg(op, "input", input));
    TL_TRY(tl_check_tensor_arg(op, "residual", residual));
    const tl_autocast_state autocast = tl_autocast_get();
    /* the operand kept in its 16-bit type, at index 0 or 1 of operands (-1: none) */
    int keep = -1;
    if (autocast.enabled && input->dtype == TL_F32 && residual->dtype == autocast.dtype) keep = 1;
    if (autocast.enabled && residual->dtype == TL_F32 && input->dtype == autocast.dtype) keep = 0;
    tl_tensor *operands[4] = {input, residual, weight, bias};
    tl_tensor *cast[4] = {keep == 0 ? NULL : input, keep == 1 ? NULL : residual, weight, bias};
    bool casted[4];
    TL_TRY(tl_autocast_operands(TL_OP_add_layer_norm, cast, 4, casted));
    for (int i = 0; i < 4; i++)
        if (i != keep) operands[i] = cast[i];
    if (dtype == TL_DTYPE_COUNT) dtype = tl_promote_types(operands[0]->dtype, operands[1]->dtype);
    return tl_autocast_release(cast, 4, casted,
                               record_add_layer_norm(operands[0], operands[1], operands[2],
                                                     operands[3], eps, dtype, out, sum));
}

tl_status tl_ag_add_layer_norm(tl_tensor *input, tl_tensor *residual, tl_tensor *weight,
                               tl_tensor *bias, double eps, tl_tensor **out, tl_tensor **sum) {
    return autocast_add_layer_norm(input, residual, weight, bias, eps, TL_DTYPE_COUNT, out, sum);
}

tl_status tl_ag_add_layer_norm_as(tl_tensor *input, tl_tensor *residual, tl_tensor *weight,
                                  tl_tensor *bias, double eps, tl_dtype dtype, tl_tensor **out,
                                  tl_tensor **sum) {
    return autocast_add_layer_norm(input, residual, weight, bias, eps, dtype, out, sum);
}

/* ---- batch_norm ----------------------------------------------------------------------------
   Inputs: input, weight, bias (either may be NULL; the running statistics are no inputs: the
   forward updates them outside the graph). Saved: slots 0, 2, 3 the input, mean and invstd (only
   if the input's or the weight's gradient is needed), slot 1 the weight (only if the input's
   gradient is needed). ints[0]: whether there is a weight; ints[1]: whether the forward used the
   batch's statistics (the input's gradient then goes through them). The per-channel sums run
   once, and only those the needed gradients read. */
static tl_status batch_norm_gradients(tl_node *node, const tl_tensor *grad, tl_tensor *input,
                                      tl_tensor *mean, tl_tensor *invstd, tl_tensor *weight,
                                      tl_tensor **gi) {
    const bool *needs = node->needs_input_grad, batch = node->ints[1] != 0;
    const bool want_dy = needs[NORM_BIAS] || (needs[NORM_INPUT] && batch);
    const bool want_dy_xhat = needs[NORM_WEIGHT] || (needs[NORM_INPUT] && batch);
    tl_tensor *sum_dy = NULL, *sum_dy_xhat = NULL;
    tl_status status = TL_OK;
    if (want_dy || want_dy_xhat)
        status = tl_batch_norm_backward_reduce(grad, input, mean, invstd, want_dy ? &sum_dy : NULL,
                                               want_dy_xhat ? &sum_dy_xhat : NULL);
    if (status == TL_OK && needs[NORM_INPUT])
        status =
            tl_batch_norm_backward_input(grad, input, mean, invstd, weight, batch ? sum_dy : NULL,
                                         batch ? sum_dy_xhat : NULL, &gi[NORM_INPUT]);
    if (status == TL_OK && needs[NORM_WEIGHT])
        status = tl_cast(sum_dy_xhat, node->input_dtype[NORM_WEIGHT], &gi[NORM_WEIGHT]);
    if (status == TL_OK && needs[NORM_BIAS])
        status = tl_cast(sum_dy, node->input_dtype[NORM_BIAS], &gi[NORM_BIAS]);
    tl_release(sum_dy), tl_release(sum_dy_xhat);
    return status;
}

static tl_status batch_norm_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    return norm_backward(node, g, gi, batch_norm_gradients);
}

tl_status tl_ag_batch_norm(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                           tl_tensor *running_mean, tl_tensor *running_var, bool training,
                           double momentum, double eps, tl_tensor **out) {
    tl_tensor *mean, *invstd;
    TL_TRY(tl_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
                         out, &mean, &invstd));
    tl_node *node;
    tl_tensor *inputs[3] = {input, weight, bias};
    tl_status status = tl_record("batch_norm", batch_norm_backward, 3, inputs, out, &node);
    if (status == TL_OK && node) {
        const bool *needs = node->needs_input_grad;
        node->ints[0] = weight != NULL;
        node->ints[1] = training;
        node->scalar[0] = eps;
        if (needs[NORM_INPUT] || needs[NORM_WEIGHT]) {
            status = tl_record_save(node, 0, "input", input, out);
            if (status == TL_OK) status = tl_record_save(node, 2, "mean", mean, out);
            if (status == TL_OK) status = tl_record_save(node, 3, "invstd", invstd, out);
        }
        if (status == TL_OK && needs[NORM_INPUT] && weight)
            status = tl_record_save(node, 1, "weight", weight, out);
    }
    tl_release(mean), tl_release(invstd);
    return status;
}

/* ---- layer_norm_ in place: slots 0 the result y (x after the op), 1 the weight, 2 mean,
   3 rstd, 4 the bias. Backward recovers the input, x = mean + (y - bias) / weight / rstd (in
   float32 for bfloat16/float16), then takes layer_norm's gradients. ints[0], ints[1]: whether
   there is a weight, a bias. ------------------------------------------------------------------ */
static tl_status check_invertible(const tl_tensor *weight) {
    tl_tensor *zero = NULL, *is_zero = NULL, *count = NULL;
    tl_scalar zeros = {0};
    tl_status status = tl_zeros(NULL, 0, weight->dtype, tl_tensor_device(weight), &zero);
    if (status == TL_OK) status = tl_eq(weight, zero, &is_zero);
    if (status == TL_OK) status = tl_sum_all(is_zero, &count);
    if (status == TL_OK) status = tl_item(count, &zeros);
    tl_release(zero), tl_release(is_zero), tl_release(count);
    if (status == TL_OK && tl_scalar_to_double(zeros) > 0)
        return tl_error(TL_ERR_AUTOGRAD,
                        "backward: layer_norm_ recovers its input from its output as (y - bias) / "
                        "weight, but weight has %.0f zero(s); use tl.layer_norm (out of place) "
                        "where the weight may be zero",
                        tl_scalar_to_double(zeros));
    return status;
}

static tl_status recover_input(tl_node *node, const tl_tensor *y, tl_tensor **input) {
    tl_tensor *weight = NULL, *bias = NULL, *mean, *rstd;
    TL_TRY(tl_node_saved(node, 2, &mean));
    TL_TRY(tl_node_saved(node, 3, &rstd));
    if (node->ints[0]) TL_TRY(tl_node_saved(node, 1, &weight));
    if (node->ints[1]) TL_TRY(tl_node_saved(node, 4, &bias));
    if (weight) TL_TRY(check_invertible(weight));
    tl_dtype compute = y->dtype == TL_F64 ? TL_F64 : TL_F32;
    tl_tensor *x = NULL, *mean_col = NULL, *rstd_col = NULL;
    tl_status status = y->dtype == compute ? tl_clone(y, &x) : tl_cast((tl_tensor *)y, compute, &x);
    if (status == TL_OK) status = tl_unsqueeze(mean, -1, &mean_col);
    if (status == TL_OK) status = tl_unsqueeze(rstd, -1, &rstd_col);
    if (status == TL_OK && bias) status = tl_sub_(x, bias);
    if (status == TL_OK && weight) status = tl_div_(x, weight);
    if (status == TL_OK) status = tl_div_(x, rstd_col);
    if (status == TL_OK) status = tl_add_(x, mean_col);
    if (status == TL_OK) status = tl_cast(x, y->dtype, input);
    tl_release(x), tl_release(mean_col), tl_release(rstd_col);
    return status;
}

static tl_status layer_norm_inplace_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *grad, *y, *input = NULL, *mean, *rstd, *weight = NULL;
    TL_TRY(tl_node_saved(node, 0, &y));
    TL_TRY(tl_node_saved(node, 2, &mean));
    TL_TRY(tl_node_saved(node, 3, &rstd));
    if (node->ints[0]) TL_TRY(tl_node_saved(node, 1, &weight));
    TL_TRY(output_grad(node, g[0], &grad));
    tl_status status = TL_OK;
    if (node->needs_input_grad[NORM_INPUT] || node->needs_input_grad[NORM_WEIGHT])
        status = recover_input(node, y, &input);
    if (status == TL_OK) status = layer_norm_gradients(node, grad, input, mean, rstd, weight, gi);
    tl_release(grad), tl_release(input);
    return status;
}

tl_status tl_ag_layer_norm_(tl_tensor *x, tl_tensor *weight, tl_tensor *bias, double eps) {
    tl_node *node;
    tl_tensor *operands[2] = {weight, bias}, *mean = NULL, *rstd = NULL;
    TL_TRY(tl_inplace_begin("layer_norm_", layer_norm_inplace_backward, x, 2, operands, &node));
    tl_status status =
        tl_layer_norm_(x, weight, bias, eps, node ? &mean : NULL, node ? &rstd : NULL);
    status = tl_inplace_end(node, status, x);
    if (status == TL_OK && node) {
        node->ints[0] = weight != NULL;
        node->ints[1] = bias != NULL;
        node->scalar[0] = eps;
        status = tl_node_save(node, 0, "result", x);
        if (status == TL_OK) status = tl_node_save(node, 2, "mean", mean);
        if (status == TL_OK) status = tl_node_save(node, 3, "rstd", rstd);
        if (status == TL_OK && weight) status = tl_node_save(node, 1, "weight", weight);
        if (status == TL_OK && bias) status = tl_node_save(node, 4, "bias", bias);
    }
    tl_release(mean), tl_release(rstd);
    return status;
}
