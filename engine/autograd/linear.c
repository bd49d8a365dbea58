/* Recording linear, gelu_linear, linear_gelu_linear and outer: the functional ops forward, and in
   backward only the split gradient ops that are needed; only what those read is saved. */
#include "autograd/autocast.h"
#include "autograd/formula.h"

enum { LINEAR_INPUT, LINEAR_WEIGHT, LINEAR_BIAS };

/* The gradients of a weight (input weight of node) and its bias (input weight + 1) from grad,
   the output's gradient of that linear, and its input: saved slot `slot`, or `input` when not
   NULL; both in the dtypes of the recorded inputs. Both wanted: one GEMM (the bias's sums by its
   epilogue). */
static tl_status parameter_grads(tl_node *node, int weight, const tl_tensor *grad, int slot,
                                 const tl_tensor *input, tl_tensor **gi) {
    const bool want_weight = node->needs_input_grad[weight],
               want_bias = node->needs_input_grad[weight + 1];
    tl_status status = TL_OK;
    if (want_weight && !input) {
        tl_tensor *saved;
        status = tl_node_saved(node, slot, &saved);
        input = saved;
    }
    if (status != TL_OK) return status;
    if (want_weight && want_bias)
        return tl_linear_backward_weight_bias_as(grad, input, node->input_dtype[weight],
                                                 node->input_dtype[weight + 1], &gi[weight],
                                                 &gi[weight + 1]);
    if (want_weight)
        status = tl_linear_backward_weight_as(grad, input, node->input_dtype[weight], &gi[weight]);
    if (status == TL_OK && want_bias)
        status = tl_linear_backward_bias_as(grad, node->input_dtype[weight + 1], &gi[weight + 1]);
    return status;
}

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
    if (status == TL_OK) status = parameter_grads(node, LINEAR_WEIGHT, grad, 0, NULL, gi);
    tl_release(grad);
    return status;
}

/* How each linear-family node records itself: input as the GEMMs take it, params as given (the
   recorded inputs), used as the GEMMs take them; form: the node's GELU options (0 for linear). */
typedef tl_status (*record_fn)(tl_tensor *input, tl_tensor *const *params, tl_tensor *const *used,
                               int form, tl_tensor **out);

/* Under autocast the input's cast is recorded (its gradient goes back through it), the count
   parameters' are not (tl_autocast_parameters: their gradients come in their own dtypes, written
   by the GEMMs). */
static tl_status record_autocast(tl_tensor *input, tl_tensor **params, int count, int form,
                                 record_fn record, tl_tensor **out) {
    tl_tensor *operand[1] = {input}, *used[4];
    bool input_cast[1], params_cast[4];
    for (int i = 0; i < count; i++) used[i] = params[i];
    TL_TRY(tl_autocast_operands(TL_OP_linear_forward, operand, 1, input_cast));
    tl_status status = tl_autocast_parameters(TL_OP_linear_forward, used, count, params_cast);
    if (status != TL_OK) return tl_autocast_release(operand, 1, input_cast, status);
    status = record(operand[0], params, used, form, out);
    tl_autocast_release(used, count, params_cast, status);
    return tl_autocast_release(operand, 1, input_cast, status);
}

static tl_status record_linear(tl_tensor *input, tl_tensor *const *params, tl_tensor *const *used,
                               int form, tl_tensor **out) {
    (void)form; /* no GELU */
    TL_TRY(tl_linear(input, used[0], used[1], out));
    tl_node *node = NULL;
    tl_tensor *inputs[3] = {input, params[0], params[1]};
    tl_status status = tl_record("linear", linear_backward, 3, inputs, out, &node);
    if (status == TL_OK && node && node->needs_input_grad[LINEAR_WEIGHT])
        status = tl_record_save(node, 0, "input", input, out);
    if (status == TL_OK && node && node->needs_input_grad[LINEAR_INPUT])
        status = tl_record_save(node, 1, "weight", used[0], out);
    return status;
}

tl_status tl_ag_linear(tl_tensor *input, tl_tensor *weight, tl_tensor *bias, tl_tensor **out) {
    tl_tensor *params[2] = {weight, bias};
    return record_autocast(input, params, 2, 0, record_linear, out);
}

/* gelu_linear(pre, W, b) = linear(gelu(pre), W, b), the feed-forward's second half, with
   gelu(pre) not kept: backward makes it again from pre where W's gradient needs it.
   dpre = gelu'(pre) (g W) (the tanh form: one GEMM with its dGELU epilogue), dW = g^T gelu(pre),
   db = sum of g's rows (with dW: by its GEMM's epilogue). Saved: slot 0 pre (for dpre or dW),
   slot 1 the weight the GEMM used (for dpre). node->ints[0]: 1 for gelu's tanh form, 0 for the
   exact one. */
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
        tl_tensor *weight;
        status = tl_node_saved(node, 1, &weight);
        if (status == TL_OK)
            status =
                tl_linear_backward_input_gelu(grad, weight, pre, tanh_form, &gi[GELU_LINEAR_PRE]);
    }
    tl_tensor *h = NULL;
    if (status == TL_OK && node->needs_input_grad[GELU_LINEAR_WEIGHT])
        status = gelu_of(tanh_form, pre, &h);
    if (status == TL_OK) status = parameter_grads(node, GELU_LINEAR_WEIGHT, grad, 0, h, gi);
    tl_release(h);
    tl_release(grad);
    return status;
}

static tl_status record_gelu_linear(tl_tensor *pre, tl_tensor *const *params,
                                    tl_tensor *const *used, int form, tl_tensor **out) {
    const bool tanh_form = form != 0;
    tl_tensor *h = NULL;
    TL_TRY(gelu_of(tanh_form, pre, &h));
    tl_status status = tl_linear(h, used[0], used[1], out);
    tl_release(h);
    if (status != TL_OK) return status;
    tl_node *node = NULL;
    tl_tensor *inputs[3] = {pre, params[0], params[1]};
    status = tl_record("gelu_linear", gelu_linear_backward, 3, inputs, out, &node);
    if (status == TL_OK && node) node->ints[0] = tanh_form;
    if (status == TL_OK && node &&
        (node->needs_input_grad[GELU_LINEAR_PRE] || node->needs_input_grad[GELU_LINEAR_WEIGHT]))
        status = tl_record_save(node, 0, "pre", pre, out);
    if (status == TL_OK && node && node->needs_input_grad[GELU_LINEAR_PRE])
        status = tl_record_save(node, 1, "weight", used[0], out);
    return status;
}

/* One product's shapes, checked before anything runs so that errors name the fused op: an input
   of `features` features (its last dim), weight [out, in], bias [out] or NULL (names as the op's
   arguments). */
typedef struct product_names {
    const char *input, *weight, *bias;
} product_names;

static tl_status check_product(const char *op, product_names names, int64_t features,
                               const tl_tensor *weight, const tl_tensor *bias) {
    if (!weight) return tl_error(TL_ERR_ARGUMENT, "%s: %s is required", op, names.weight);
    if (weight->ndim != 2)
        return tl_error(TL_ERR_SHAPE, "%s: %s must be 2-D [out, in], got %d dims", op, names.weight,
                        weight->ndim);
    if (features != weight->shape[1])
        return tl_error(TL_ERR_SHAPE, "%s: %s has %lld features but %s expects %lld", op,
                        names.input, (long long)features, names.weight,
                        (long long)weight->shape[1]);
    if (bias && bias->ndim != 1)
        return tl_error(TL_ERR_SHAPE, "%s: %s must be 1-D [%lld], got %d dims", op, names.bias,
                        (long long)weight->shape[0], bias->ndim);
    if (bias && bias->shape[0] != weight->shape[0])
        return tl_error(TL_ERR_SHAPE, "%s: %s has %lld elements but %s has %lld rows", op,
                        names.bias, (long long)bias->shape[0], names.weight,
                        (long long)weight->shape[0]);
    return TL_OK;
}

/* The last dim of an input (0 for a 0-dim one) */
static tl_status input_features(const char *op, const char *name, const tl_tensor *input,
                                int64_t *features) {
    if (!input) return tl_error(TL_ERR_ARGUMENT, "%s: %s is required", op, name);
    *features = input->ndim < 1 ? 0 : input->shape[input->ndim - 1];
    return TL_OK;
}

static tl_status check_gelu_linear(const tl_tensor *pre, const tl_tensor *weight,
                                   const tl_tensor *bias) {
    int64_t features = 0;
    TL_TRY(input_features("gelu_linear", "pre", pre, &features));
    return check_product("gelu_linear", (product_names){"pre", "weight", "bias"}, features, weight,
                         bias);
}

tl_status tl_ag_gelu_linear(tl_tensor *pre, tl_tensor *weight, tl_tensor *bias, bool tanh_form,
                            tl_tensor **out) {
    TL_TRY(check_gelu_linear(pre, weight, bias));
    tl_tensor *params[2] = {weight, bias};
    return record_autocast(pre, params, 2, tanh_form ? 1 : 0, record_gelu_linear, out);
}

/* linear_gelu_linear(x, W1, b1, W2, b2) = linear(gelu(linear(x, W1, b1)), W2, b2), a
   transformer's feed-forward as one node. Forward: pre = x W1^T + b1 (bias epilogue), h =
   gelu(pre) (mlp_hidden: gelu's kernel, or the first GEMM's GELU epilogue), y = h W2^T + b2; h
   is not kept.
   Backward, each part only where a gradient needs it:
     dW2 = g^T h, db2 = g's row sums   (h = gelu(pre) made again; one GEMM, bias-gradient epilogue)
     dpre = (g W2) * gelu'(pre)        (one GEMM, dGELU epilogue)
     dW1 = dpre^T x, db1 = dpre's row sums, dx = dpre W1.
   Saved: slot 0 x (for dW1), slot 1 W1 as its GEMM took it (for dx), slot 2 pre, slot 3 W2 as
   its GEMM took it (for dpre). node->ints[0]: 1 for gelu's tanh form, 0 for the exact one. */
enum { MLP_INPUT, MLP_W1, MLP_B1, MLP_W2, MLP_B2 };
/* record_mlp's form: bits of gelu's tanh form and of the GELU epilogue */
enum { MLP_TANH = 1, MLP_GELU_EPILOGUE = 2 };

static bool mlp_wants_first(const tl_node *node) {
    return node->needs_input_grad[MLP_INPUT] || node->needs_input_grad[MLP_W1] ||
           node->needs_input_grad[MLP_B1];
}

static tl_status mlp_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const bool tanh_form = node->ints[0] != 0;
    tl_tensor *grad, *pre = NULL, *h = NULL, *dpre = NULL;
    TL_TRY(tl_cast(g[0], node->input_dtype[MLP_INPUT], &grad));
    tl_status status = tl_node_saved(node, 2, &pre);
    if (status == TL_OK && node->needs_input_grad[MLP_W2]) status = gelu_of(tanh_form, pre, &h);
    if (status == TL_OK) status = parameter_grads(node, MLP_W2, grad, -1, h, gi);
    if (status == TL_OK && mlp_wants_first(node)) {
        tl_tensor *w2;
        status = tl_node_saved(node, 3, &w2);
        if (status == TL_OK)
            status = tl_linear_backward_input_gelu(grad, w2, pre, tanh_form, &dpre);
    }
    if (status == TL_OK && dpre) status = parameter_grads(node, MLP_W1, dpre, 0, NULL, gi);
    if (status == TL_OK && dpre && node->needs_input_grad[MLP_INPUT]) {
        tl_tensor *w1;
        status = tl_node_saved(node, 1, &w1);
        if (status == TL_OK) status = tl_linear_backward_input(dpre, w1, &gi[MLP_INPUT]);
    }
    tl_release(h), tl_release(dpre), tl_release(grad);
    return status;
}

/* h = gelu(pre) for the second GEMM: by gelu's kernel from the stored pre (the h backward makes
   again is then the forward's), or with gelu_epilogue by the first GEMM's epilogue from its
   float32 sums (one kernel less; h then differs from backward's by pre's rounding) */
static tl_status mlp_hidden(tl_tensor *x, tl_tensor *const *used, bool tanh_form,
                            bool gelu_epilogue, tl_tensor **h, tl_tensor **pre) {
    if (gelu_epilogue) return tl_linear_gelu(x, used[0], used[1], tanh_form, h, pre);
    TL_TRY(tl_linear(x, used[0], used[1], pre));
    tl_status status = gelu_of(tanh_form, *pre, h);
    if (status != TL_OK) tl_release(*pre), *pre = NULL;
    return status;
}

static tl_status record_mlp(tl_tensor *x, tl_tensor *const *params, tl_tensor *const *used,
                            int form, tl_tensor **out) {
    const bool tanh_form = form & MLP_TANH;
    tl_tensor *h = NULL, *pre = NULL;
    TL_TRY(mlp_hidden(x, used, tanh_form, form & MLP_GELU_EPILOGUE, &h, &pre));
    tl_status status = tl_linear(h, used[2], used[3], out);
    tl_release(h);
    tl_node *node = NULL;
    tl_tensor *inputs[5] = {x, params[0], params[1], params[2], params[3]};
    if (status == TL_OK)
        status = tl_record("linear_gelu_linear", mlp_backward, 5, inputs, out, &node);
    if (status == TL_OK && node) {
        node->ints[0] = tanh_form;
        if (node->needs_input_grad[MLP_W1]) status = tl_record_save(node, 0, "input", x, out);
        if (status == TL_OK && node->needs_input_grad[MLP_INPUT])
            status = tl_record_save(node, 1, "weight1", used[0], out);
        if (status == TL_OK) status = tl_record_save(node, 2, "pre", pre, out);
        if (status == TL_OK && mlp_wants_first(node))
            status = tl_record_save(node, 3, "weight2", used[2], out);
    }
    tl_release(pre);
    return status;
}

tl_status tl_ag_linear_gelu_linear(tl_tensor *input, tl_tensor *weight1, tl_tensor *bias1,
                                   tl_tensor *weight2, tl_tensor *bias2, bool tanh_form,
                                   bool gelu_epilogue, tl_tensor **out) {
    const char *op = "linear_gelu_linear";
    int64_t features = 0;
    TL_TRY(input_features(op, "input", input, &features));
    TL_TRY(
        check_product(op, (product_names){"input", "weight1", "bias1"}, features, weight1, bias1));
    TL_TRY(check_product(op, (product_names){"the hidden layer", "weight2", "bias2"},
                         weight1->shape[0], weight2, bias2));
    tl_tensor *params[4] = {weight1, bias1, weight2, bias2};
    const int form = (tanh_form ? MLP_TANH : 0) | (gelu_epilogue ? MLP_GELU_EPILOGUE : 0);
    return record_autocast(input, params, 4, form, record_mlp, out);
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
