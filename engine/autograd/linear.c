/* Recording linear and outer: forward and split backward kernels, each called
   only for the gradients needed; only what those kernels read is saved. */
#include <string.h>

#include "autograd/graph.h"
#include "kernels/linear.h"

enum { LINEAR_INPUT, LINEAR_WEIGHT, LINEAR_BIAS };

/* A dense 2-D [rows, cols] version of t (a view when possible). */
static tl_status as_matrix(tl_tensor *t, int64_t cols, tl_tensor **out) {
    int64_t shape[2] = {-1, cols};
    tl_tensor *dense;
    TL_TRY(tl_contiguous(t, &dense));
    tl_status status = tl_reshape(dense, shape, 2, out);
    tl_release(dense);
    return status;
}

static tl_status check_linear(const tl_tensor *input, const tl_tensor *weight,
                              const tl_tensor *bias) {
    char si[256], sw[256], a[16], b[16];
    if (weight->ndim != 2)
        return tl_error(TL_ERR_SHAPE, "linear: weight must be [out_features, in_features], got %s",
                        tl_shape_str(weight, sw, sizeof sw));
    if (input->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "linear: input must have at least 1 dim, got a 0-dim one");
    if (input->shape[input->ndim - 1] != weight->shape[1])
        return tl_error(TL_ERR_SHAPE,
                        "linear: input has %lld features but weight expects %lld (input shape %s, "
                        "weight shape %s)",
                        (long long)input->shape[input->ndim - 1], (long long)weight->shape[1],
                        tl_shape_str(input, si, sizeof si), tl_shape_str(weight, sw, sizeof sw));
    if (bias && (bias->ndim != 1 || bias->shape[0] != weight->shape[0]))
        return tl_error(TL_ERR_SHAPE, "linear: bias must have shape [%lld], got %s",
                        (long long)weight->shape[0], tl_shape_str(bias, sw, sizeof sw));
    const tl_tensor *others[2] = {weight, bias};
    for (int i = 0; i < 2; i++) {
        const tl_tensor *t = others[i];
        if (!t) continue;
        const char *name = i == 0 ? "weight" : "bias";
        if (!tl_device_equal(tl_tensor_device(t), tl_tensor_device(input)))
            return tl_error(TL_ERR_DEVICE, "linear: input is on %s but %s is on %s",
                            tl_device_name(tl_tensor_device(input), a), name,
                            tl_device_name(tl_tensor_device(t), b));
        if (t->dtype != input->dtype)
            return tl_error(TL_ERR_DTYPE, "linear: input is %s but %s is %s",
                            tl_dtype_name(input->dtype), name, tl_dtype_name(t->dtype));
    }
    if (!tl_dtype_is_floating(input->dtype))
        return tl_error(TL_ERR_DTYPE, "linear: expected a floating dtype, got %s",
                        tl_dtype_name(input->dtype));
    return TL_OK;
}

/* Saved: slot 0 the 2-D input (only if the weight's gradient is needed),
   slot 1 the weight (only if the input's gradient is needed). */
static tl_status linear_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    int64_t out_features = node->input_shape[LINEAR_WEIGHT][0];
    int64_t in_features = node->input_shape[LINEAR_WEIGHT][1];
    tl_device device = tl_tensor_device(g[0]);
    tl_dtype dtype = node->input_dtype[LINEAR_INPUT];
    tl_tensor *grad = NULL, *cast = NULL;
    tl_status status = tl_cast(g[0], dtype, &cast);
    if (status == TL_OK) status = as_matrix(cast, out_features, &grad);
    tl_release(cast);
    if (status != TL_OK) return status;
    int64_t rows = grad->shape[0];
    if (status == TL_OK && node->needs_input_grad[LINEAR_INPUT]) {
        tl_tensor *weight, *grad_input = NULL;
        int64_t shape[2] = {rows, in_features};
        status = tl_node_saved(node, 1, &weight);
        if (status == TL_OK) status = tl_empty(shape, 2, dtype, device, &grad_input);
        if (status == TL_OK) status = tl_linear_backward_input(grad, weight, grad_input);
        if (status == TL_OK)
            status = tl_reshape(grad_input, node->input_shape[LINEAR_INPUT],
                                node->input_ndim[LINEAR_INPUT], &gi[LINEAR_INPUT]);
        tl_release(grad_input);
    }
    if (status == TL_OK && node->needs_input_grad[LINEAR_WEIGHT]) {
        tl_tensor *input;
        status = tl_node_saved(node, 0, &input);
        if (status == TL_OK)
            status =
                tl_empty(node->input_shape[LINEAR_WEIGHT], 2, dtype, device, &gi[LINEAR_WEIGHT]);
        if (status == TL_OK) status = tl_linear_backward_weight(grad, input, gi[LINEAR_WEIGHT]);
    }
    if (status == TL_OK && node->needs_input_grad[LINEAR_BIAS]) {
        status = tl_empty(&out_features, 1, dtype, device, &gi[LINEAR_BIAS]);
        if (status == TL_OK) status = tl_linear_backward_bias(grad, gi[LINEAR_BIAS]);
    }
    tl_release(grad);
    return status;
}

tl_status tl_ag_linear(tl_tensor *input, tl_tensor *weight, tl_tensor *bias, tl_tensor **out) {
    TL_TRY(check_linear(input, weight, bias));
    int64_t in_features = weight->shape[1], out_features = weight->shape[0];
    tl_tensor *input2d = NULL, *weight_dense = NULL, *bias_dense = NULL, *out2d = NULL;
    tl_status status = as_matrix(input, in_features, &input2d);
    if (status == TL_OK) status = tl_contiguous(weight, &weight_dense);
    if (status == TL_OK && bias) status = tl_contiguous(bias, &bias_dense);
    if (status == TL_OK) {
        int64_t shape[2] = {input2d->shape[0], out_features};
        status = tl_empty(shape, 2, input->dtype, tl_tensor_device(input), &out2d);
    }
    if (status == TL_OK) status = tl_linear_forward(input2d, weight_dense, bias_dense, out2d);
    if (status == TL_OK) {
        int64_t shape[TL_MAX_DIMS];
        memcpy(shape, input->shape, sizeof shape);
        shape[input->ndim - 1] = out_features;
        status = tl_view(out2d, shape, input->ndim, out);
    }
    tl_node *node = NULL;
    tl_tensor *inputs[3] = {input, weight, bias};
    if (status == TL_OK) status = tl_record("linear", linear_backward, 3, inputs, *out, &node);
    if (status == TL_OK && node && node->needs_input_grad[LINEAR_WEIGHT])
        status = tl_record_save(node, 0, "input", input2d, *out);
    if (status == TL_OK && node && node->needs_input_grad[LINEAR_INPUT])
        status = tl_record_save(node, 1, "weight", weight_dense, *out);
    tl_release(input2d), tl_release(weight_dense), tl_release(bias_dense), tl_release(out2d);
    return status;
}

/* outer(a, b) = a b^T; da = g b, db = g^T a, by the linear backward kernels
   on b and a seen as [m, 1] and [n, 1]; slot 0: a, slot 1: b */
static tl_status outer_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *grad;
    TL_TRY(tl_contiguous(g[0], &grad));
    tl_status status = TL_OK;
    int64_t n = node->input_shape[0][0], m = node->input_shape[1][0];
    for (int i = 0; i < 2 && status == TL_OK; i++) {
        if (!node->needs_input_grad[i]) continue;
        tl_tensor *other, *column = NULL, *result = NULL;
        int64_t column_shape[2] = {i == 0 ? m : n, 1}, result_shape[2] = {i == 0 ? n : m, 1};
        status = tl_node_saved(node, 1 - i, &other);
        if (status == TL_OK) status = tl_view(other, column_shape, 2, &column);
        if (status == TL_OK)
            status = tl_empty(result_shape, 2, grad->dtype, tl_tensor_device(grad), &result);
        if (status == TL_OK)
            status = i == 0 ? tl_linear_backward_input(grad, column, result)
                            : tl_linear_backward_weight(grad, column, result);
        if (status == TL_OK) status = tl_view(result, &result_shape[0], 1, &gi[i]);
        tl_release(column), tl_release(result);
    }
    tl_release(grad);
    return status;
}

tl_status tl_ag_outer(tl_tensor *a, tl_tensor *b, tl_tensor **out) {
    char sa[256], sb[256], da[16], db[16];
    if (a->ndim != 1 || b->ndim != 1)
        return tl_error(TL_ERR_SHAPE, "outer: expected two 1-D tensors, got shapes %s and %s",
                        tl_shape_str(a, sa, sizeof sa), tl_shape_str(b, sb, sizeof sb));
    if (a->dtype != b->dtype || !tl_dtype_is_floating(a->dtype))
        return tl_error(TL_ERR_DTYPE,
                        "outer: expected two tensors of one floating dtype, got %s "
                        "and %s",
                        tl_dtype_name(a->dtype), tl_dtype_name(b->dtype));
    if (!tl_device_equal(tl_tensor_device(a), tl_tensor_device(b)))
        return tl_error(TL_ERR_DEVICE, "outer: expected both tensors on one device, got %s and %s",
                        tl_device_name(tl_tensor_device(a), da),
                        tl_device_name(tl_tensor_device(b), db));
    tl_tensor *a_dense = NULL, *b_dense = NULL;
    int64_t shape[2] = {a->shape[0], b->shape[0]};
    tl_status status = tl_contiguous(a, &a_dense);
    if (status == TL_OK) status = tl_contiguous(b, &b_dense);
    if (status == TL_OK) status = tl_empty(shape, 2, a->dtype, tl_tensor_device(a), out);
    if (status == TL_OK) {
        status = tl_outer_forward(a_dense, b_dense, *out);
        if (status != TL_OK) tl_release(*out);
    }
    tl_node *node = NULL;
    tl_tensor *inputs[2] = {a, b};
    if (status == TL_OK) status = tl_record("outer", outer_backward, 2, inputs, *out, &node);
    if (status == TL_OK && node && node->needs_input_grad[1])
        status = tl_record_save(node, 0, "self", a_dense, *out);
    if (status == TL_OK && node && node->needs_input_grad[0])
        status = tl_record_save(node, 1, "other", b_dense, *out);
    tl_release(a_dense), tl_release(b_dense);
    return status;
}
