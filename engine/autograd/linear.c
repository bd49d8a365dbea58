/* Recording linear, gelu_linear and outer: the functional ops forward, and in backward only the
   split gradient ops that are needed; only what those read is saved. */
#include "autograd/autocast.h"
#include "autograd/formula.h"

enum { LINEAR_INPUT, LINEAR_WEIGHT, LINEAR_BIAS };

/* Saved: slot 0 the input (only if the weight's gradient is needed), slot 1 the weight the GEMM
   used (only if the input's gradient is needed). The input's gradient comes in the input's dtype,
   the weight's and the bias's in theirs: under autocast, float32 parameters of bfloat16 GEMMs get
   float32 gradients written by the GEMMs themselves. */
static tl_status linear_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *grad;
    TL_TRY(tl_cast(g[0], node->input_dtype[LINEAR_INPUT], &grad));
    tl_status status = TL_OK;
    if (node->needs_input_grad[LINEAR_INPUT]) {
        tl_tensor *weight;
        status = tl_node_saved(node, 1, &weight);
        if (status == TL_OK) status = tl_linear_backward_input(grad, weight, &gi[LINEAR_INPUT]);
    }
    if (status == TL_OK && node->needs_input_grad[LINEAR_WEIGHT]) {
        tl_tensor *input;
        status = tl_node_saved(node, 0, &input);
        if (status == TL_OK)
            status = tl_linear_backward_weight_as(grad, input, node->input_dtype[LINEAR_WEIGHT],
                                                  &gi[LINEAR_WEIGHT]);
    }
    if (status == TL_OK && node->needs_input_grad[LINEAR_BIAS])
        status = tl_linear_backward_bias_as(grad, node->input_dtype[LINEAR_BIAS], &gi[LINEAR_BIAS]);
    tl_release(grad);
    return status;
}

/* params: the weight and bias as given (the recorded inputs), used: as the GEMMs take them */
static tl_status record_linear(tl_tensor *input, tl_tensor *const *params, tl_tensor *const *used,
                               tl_tensor **out) {
    TL_TRY(tl_linear(input, used[0], used[1], out));
    tl_node *node = NULL;
    tl_tensor *inputs[3] = {input, params[0], params[1]};
    tl_status status = tl_record("linear", linear_backward, 3, inputs, *out, &node);
    if (status == TL_OK && node && node->needs_input_grad[LINEAR_WEIGHT])
        status = tl_record_save(node, 0, "input", input, *out);
    if (status == TL_OK && node && node->needs_input_grad[LINEAR_INPUT])
        status = tl_record_save(node, 1, "weight", used[0], *out);
    return status;
}

/* Under autocast the input's cast is recorded (its gradient goes back through it), the weight's
   and the bias's are not (tl_autocast_parameters; see linear_backward). */
tl_status tl_ag_linear(tl_tensor *input, tl_tensor *weight, tl_tensor *bias, tl_tensor **out) {
    tl_tensor *operand[1] = {input}, *params[2] = {weight, bias}, *used[2] = {weight, bias};
    bool input_cast[1], params_cast[2];
    TL_TRY(tl_autocast_operands(TL_OP_linear_forward, operand, 1, input_cast));
    tl_status status = tl_autocast_parameters(TL_OP_linear_forward, used, 2, params_cast);
    if (status != TL_OK) return tl_autocast_release(operand, 1, input_cast, status);
    status = record_linear(operand[0], params, used, out);
    tl_autocast_release(used, 2, params_cast, status);
    return tl_autocast_release(operand, 1, input_cast, status);
}

/* gelu_linear(pre, W, b) = linear(gelu(pre), W, b), the feed-forward's second half, with
   gelu(pre) not kept: backward makes it again from pre where W's gradient needs it.
   dpre = gelu'(pre) (g W), dW = g^T gelu(pre), db = sum of g's rows. Saved: slot 0 pre (for
   dpre or dW), slot 1 the weight the GEMM used (for dpre). node->ints[0]: 1 for gelu's tanh
   form, 0 for the exact one. */
enum { GELU_LINEAR_PRE, GELU_LINEAR_WEIGHT, GELU_LINEAR_BIAS };

static tl_status gelu_of(bool tanh_form, const tl_tensor *pre, tl_tensor **out) {
    return tanh_form ? tl_gelu_tanh(pre, out) : tl_gelu(pre, out);
}

static tl_status gelu_linear_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const bool tanh_form = node->ints[0] != 0;
    tl_tensor *grad;
    TL_TRY(tl_cast(g[0], node->input_dtype[GELU_LINEAR_PRE], &grad));
    tl_status status = TL_OK;
    tl_tensor *pre = NULL;
    if (node->needs_input_grad[GELU_LINEAR_PRE] || node->needs_input_grad[GELU_LINEAR_WEIGHT])
        status = tl_node_saved(node, 0, &pre);
    if (status == TL_OK && node->needs_input_grad[GELU_LINEAR_PRE]) {
        tl_tensor *weight, *grad_h = NULL;
        status = tl_node_saved(node, 1, &weight);
        if (status == TL_OK) status = tl_linear_backward_input(grad, weight, &grad_h);
        if (status == TL_OK)
            status = tanh_form ? tl_gelu_tanh_backward(grad_h, pre, &gi[GELU_LINEAR_PRE])
                               : tl_gelu_backward(grad_h, pre, &gi[GELU_LINEAR_PRE]);
        tl_release(grad_h);
    }
    if (status == TL_OK && node->needs_input_grad[GELU_LINEAR_WEIGHT]) {
        tl_tensor *h = NULL;
        status = gelu_of(tanh_form, pre, &h);
        if (status == TL_OK)
            status = tl_linear_backward_weight_as(grad, h, node->input_dtype[GELU_LINEAR_WEIGHT],
                                                  &gi[GELU_LINEAR_WEIGHT]);
        tl_release(h);
    }
    if (status == TL_OK && node->needs_input_grad[GELU_LINEAR_BIAS])
        status = tl_linear_backward_bias_as(grad, node->input_dtype[GELU_LINEAR_BIAS],
                                            &gi[GELU_LINEAR_BIAS]);
    tl_release(grad);
    return status;
}

static tl_status record_gelu_linear(tl_tensor *pre, tl_tensor *const *params,
                                    tl_tensor *const *used, bool tanh_form, tl_tensor **out) {
    tl_tensor *h = NULL;
    TL_TRY(gelu_of(tanh_form, pre, &h));
    tl_status status = tl_linear(h, used[0], used[1], out);
    tl_release(h);
    if (status != TL_OK) return status;
    tl_node *node = NULL;
    tl_tensor *inputs[3] = {pre, params[0], params[1]};
    status = tl_record("gelu_linear", gelu_linear_backward, 3, inputs, *out, &node);
    if (status == TL_OK && node) node->ints[0] = tanh_form;
    if (status == TL_OK && node &&
        (node->needs_input_grad[GELU_LINEAR_PRE] || node->needs_input_grad[GELU_LINEAR_WEIGHT]))
        status = tl_record_save(node, 0, "pre", pre, *out);
    if (status == TL_OK && node && node->needs_input_grad[GELU_LINEAR_PRE])
        status = tl_record_save(node, 1, "weight", used[0], *out);
    return status;
}

/* The shapes, checked before the activation runs so that errors name gelu_linear */
static tl_status check_gelu_linear(const tl_tensor *pre, const tl_tensor *weight,
                                   const tl_tensor *bias) {
    const char *op = "gelu_linear";
    if (!pre || !weight) return tl_error(TL_ERR_ARGUMENT, "%s: pre and weight are required", op);
    if (weight->ndim != 2)
        return tl_error(TL_ERR_SHAPE, "%s: weight must be 2-D [out, in], got %d dims", op,
                        weight->ndim);
    if (pre->ndim < 1 || pre->shape[pre->ndim - 1] != weight->shape[1])
        return tl_error(TL_ERR_SHAPE, "%s: pre has %lld features but weight expects %lld", op,
                        pre->ndim < 1 ? 0LL : (long long)pre->shape[pre->ndim - 1],
                        (long long)weight->shape[1]);
    if (bias && bias->ndim != 1)
        return tl_error(TL_ERR_SHAPE, "%s: bias must be 1-D [%lld], got %d dims", op,
                        (long long)weight->shape[0], bias->ndim);
    if (bias && bias->shape[0] != weight->shape[0])
        return tl_error(TL_ERR_SHAPE, "%s: bias has %lld elements but weight has %lld rows", op,
                        (long long)bias->shape[0], (long long)weight->shape[0]);
    return TL_OK;
}

/* Under autocast as tl_ag_linear: pre's cast recorded, the parameters' casts not. */
tl_status tl_ag_gelu_linear(tl_tensor *pre, tl_tensor *weight, tl_tensor *bias, bool tanh_form,
                            tl_tensor **out) {
    TL_TRY(check_gelu_linear(pre, weight, bias));
    tl_tensor *operand[1] = {pre}, *params[2] = {weight, bias}, *used[2] = {weight, bias};
    bool input_cast[1], params_cast[2];
    TL_TRY(tl_autocast_operands(TL_OP_linear_forward, operand, 1, input_cast));
    tl_status status = tl_autocast_parameters(TL_OP_linear_forward, used, 2, params_cast);
    if (status != TL_OK) return tl_autocast_release(operand, 1, input_cast, status);
    status = record_gelu_linear(operand[0], params, used, tanh_form, out);
    tl_autocast_release(used, 2, params_cast, status);
    return tl_autocast_release(operand, 1, input_cast, status);
}

/* outer(a, b) = a b^T; da = g b, db = g^T a: linear's input and weight gradients with b and
   a seen as [m, 1] and [n, 1]; slot 0: a, slot 1: b */
static tl_status outer_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_status status = TL_OK;
    int64_t n = node->input_shape[0][0], m = node->input_shape[1][0];
    for (int i = 0; i < 2 && status == TL_OK; i++) {
        if (!node->needs_input_grad[i]) continue;
        tl_tensor *other, *column = NULL, *result = NULL;
        int64_t column_shape[2] = {i == 0 ? m : n, 1}, length = i == 0 ? n : m;
        status = tl_node_saved(node, 1 - i, &other);
        if (status == TL_OK) status = tl_view(other, column_shape, 2, &column);
        if (status == TL_OK)
            status = i == 0 ? tl_linear_backward_input(g[0], column, &result)
                            : tl_linear_backward_weight(g[0], column, &result);
        if (status == TL_OK) status = tl_reshape(result, &length, 1, &gi[i]);
        tl_release(column), tl_release(result);
    }
    return status;
}

tl_status tl_ag_outer(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    return tl_ag_product(TL_OP_outer_forward, "outer", outer_backward, tl_outer, a, b, out);
}
