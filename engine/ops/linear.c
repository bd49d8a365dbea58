/* linear and outer, and linear's split gradients: validate, make operands dense matrices,
   allocate, and run one GEMM kernel each (kernels/linear.c). */
#include <string.h>

#include "kernels/linear.h"
#include "tlua/ops.h"

/* A dense 2-D [rows, cols] version of t (a view when possible). */
static tl_status as_matrix(const tl_tensor *t, int64_t cols, tl_tensor **out) {
    /* the rows counted from the leading dims (not inferred: cols may be 0) */
    int64_t shape[2] = {1, cols};
    for (int d = 0; d + 1 < t->ndim; d++) shape[0] *= t->shape[d];
    tl_tensor *dense;
    TL_TRY(tl_contiguous((tl_tensor *)t, &dense));
    tl_status status = tl_reshape(dense, shape, 2, out);
    tl_release(dense);
    return status;
}

/* other has t's dtype and device; t is floating */
static tl_status check_same_kind(const char *op, const char *name, const tl_tensor *t,
                                 const char *other_name, const tl_tensor *other) {
    char a[16], b[16];
    if (!tl_device_equal(tl_tensor_device(other), tl_tensor_device(t)))
        return tl_error(TL_ERR_DEVICE, "%s: %s is on %s but %s is on %s", op, name,
                        tl_device_name(tl_tensor_device(t), a), other_name,
                        tl_device_name(tl_tensor_device(other), b));
    if (other->dtype != t->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: %s is %s but %s is %s", op, name,
                        tl_dtype_name(t->dtype), other_name, tl_dtype_name(other->dtype));
    if (!tl_dtype_is_floating(t->dtype))
        return tl_error(TL_ERR_DTYPE, "%s: expected a floating dtype, got %s", op,
                        tl_dtype_name(t->dtype));
    return TL_OK;
}

static tl_status check_present(const char *op, const char *name, const tl_tensor *t) {
    if (!t) return tl_error(TL_ERR_ARGUMENT, "%s: %s is missing", op, name);
    return TL_OK;
}

static tl_status check_linear(const tl_tensor *input, const tl_tensor *weight,
                              const tl_tensor *bias) {
    char si[256], sw[256];
    TL_TRY(check_present("linear", "input", input));
    TL_TRY(check_present("linear", "weight", weight));
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
    TL_TRY(check_same_kind("linear", "input", input, "weight", weight));
    if (bias) TL_TRY(check_same_kind("linear", "input", input, "bias", bias));
    return TL_OK;
}

/* t's dims but the last, then last */
static tl_status view_with_last(const tl_tensor *matrix, const tl_tensor *t, int64_t last,
                                tl_tensor **out) {
    int64_t shape[TL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[t->ndim - 1] = last;
    return tl_view((tl_tensor *)matrix, shape, t->ndim, out);
}

/* The dense operands of a linear: input as [rows, I], the weight and bias contiguous */
typedef struct dense_linear {
    tl_tensor *input, *weight, *bias;
} dense_linear;

static tl_status dense_operands(const tl_tensor *input, const tl_tensor *weight,
                                const tl_tensor *bias, dense_linear *d) {
    *d = (dense_linear){NULL, NULL, NULL};
    tl_status status = as_matrix(input, weight->shape[1], &d->input);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)weight, &d->weight);
    if (status == TL_OK && bias) status = tl_contiguous((tl_tensor *)bias, &d->bias);
    return status;
}

static void release_dense(dense_linear *d) {
    tl_release(d->input), tl_release(d->weight), tl_release(d->bias);
}

/* A new [rows, features] matrix like input */
static tl_status new_matrix(const tl_tensor *like, int64_t rows, int64_t features,
                            tl_tensor **out) {
    int64_t shape[2] = {rows, features};
    return tl_empty(shape, 2, like->dtype, tl_tensor_device(like), out);
}

tl_status tl_linear(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                    tl_tensor **out) {
    TL_TRY(check_linear(input, weight, bias));
    const int64_t out_features = weight->shape[0];
    dense_linear d;
    tl_tensor *out2d = NULL;
    tl_status status = dense_operands(input, weight, bias, &d);
    if (status == TL_OK) status = new_matrix(input, d.input->shape[0], out_features, &out2d);
    /* the bias by the GEMM's epilogue */
    if (status == TL_OK) status = tl_gemm_linear_forward(d.input, d.weight, d.bias, out2d);
    if (status == TL_OK) status = view_with_last(out2d, input, out_features, out);
    release_dense(&d);
    tl_release(out2d);
    return status;
}

tl_status tl_linear_gelu(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                         bool tanh_form, tl_tensor **out, tl_tensor **pre) {
    TL_TRY(check_linear(input, weight, bias));
    if (!tanh_form) { /* no GEMM epilogue computes the exact form */
        TL_TRY(tl_linear(input, weight, bias, pre));
        tl_status status = tl_gelu(*pre, out);
        if (status != TL_OK) tl_release(*pre), *pre = NULL;
        return status;
    }
    const int64_t out_features = weight->shape[0];
    dense_linear d;
    tl_tensor *out2d = NULL, *pre2d = NULL;
    tl_status status = dense_operands(input, weight, bias, &d);
    if (status == TL_OK) status = new_matrix(input, d.input->shape[0], out_features, &out2d);
    if (status == TL_OK) status = new_matrix(input, d.input->shape[0], out_features, &pre2d);
    if (status == TL_OK)
        status = tl_gemm_linear_gelu_forward(d.input, d.weight, d.bias, out2d, pre2d);
    if (status == TL_OK) status = view_with_last(out2d, input, out_features, out);
    if (status == TL_OK) {
        status = view_with_last(pre2d, input, out_features, pre);
        if (status != TL_OK) tl_release(*out), *out = NULL;
    }
    release_dense(&d);
    tl_release(out2d), tl_release(pre2d);
    return status;
}

/* grad [..., features] as a dense matrix, after checking it against t */
static tl_status grad_matrix(const char *op, const tl_tensor *grad, const tl_tensor *t,
                             const char *t_name, int64_t features, tl_tensor **out) {
    char sg[256];
    TL_TRY(check_present(op, "grad", grad));
    TL_TRY(check_present(op, t_name, t));
    if (grad->ndim < 1 || grad->shape[grad->ndim - 1] != features)
        return tl_error(TL_ERR_SHAPE, "%s: grad must be [..., %lld], got %s", op,
                        (long long)features, tl_shape_str(grad, sg, sizeof sg));
    TL_TRY(check_same_kind(op, "grad", grad, t_name, t));
    return as_matrix(grad, features, out);
}

static tl_status check_weight(const char *op, const tl_tensor *weight) {
    char sw[256];
    TL_TRY(check_present(op, "weight", weight));
    if (weight->ndim != 2)
        return tl_error(TL_ERR_SHAPE, "%s: weight must be [out_features, in_features], got %s", op,
                        tl_shape_str(weight, sw, sizeof sw));
    return TL_OK;
}

tl_status tl_linear_backward_input(const tl_tensor *grad, const tl_tensor *weight,
                                   tl_tensor **grad_input) {
    const char *op = "linear_backward_input";
    TL_TRY(check_weight(op, weight));
    tl_tensor *g = NULL, *w = NULL, *result = NULL;
    tl_status status = grad_matrix(op, grad, weight, "weight", weight->shape[0], &g);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)weight, &w);
    if (status == TL_OK) status = new_matrix(g, g->shape[0], weight->shape[1], &result);
    if (status == TL_OK) status = tl_gemm_linear_backward_input(g, w, result);
    if (status == TL_OK) status = view_with_last(result, grad, weight->shape[1], grad_input);
    tl_release(g), tl_release(w), tl_release(result);
    return status;
}

tl_status tl_linear_backward_input_gelu(const tl_tensor *grad, const tl_tensor *weight,
                                        const tl_tensor *pre, bool tanh_form,
                                        tl_tensor **grad_input) {
    const char *op = "linear_backward_input_gelu";
    char sg[256], sp[256];
    TL_TRY(check_weight(op, weight));
    TL_TRY(check_present(op, "pre", pre));
    if (pre->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "%s: pre must have at least 1 dim, got a 0-dim one", op);
    if (grad && (pre->ndim != grad->ndim || pre->shape[pre->ndim - 1] != weight->shape[1] ||
                 tl_numel(pre) / (weight->shape[1] ? weight->shape[1] : 1) !=
                     tl_numel(grad) / (weight->shape[0] ? weight->shape[0] : 1)))
        return tl_error(TL_ERR_SHAPE, "%s: pre %s does not match grad %s and weight [%lld, %lld]",
                        op, tl_shape_str(pre, sp, sizeof sp), tl_shape_str(grad, sg, sizeof sg),
                        (long long)weight->shape[0], (long long)weight->shape[1]);
    if (!tanh_form) { /* no GEMM epilogue computes the exact form's derivative */
        tl_tensor *grad_h = NULL;
        TL_TRY(tl_linear_backward_input(grad, weight, &grad_h));
        tl_status status = tl_gelu_backward(grad_h, pre, grad_input);
        tl_release(grad_h);
        return status;
    }
    tl_tensor *g = NULL, *w = NULL, *p = NULL, *result = NULL;
    tl_status status = grad_matrix(op, grad, weight, "weight", weight->shape[0], &g);
    if (status == TL_OK) status = check_same_kind(op, "grad", grad, "pre", pre);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)weight, &w);
    if (status == TL_OK) status = as_matrix(pre, weight->shape[1], &p);
    if (status == TL_OK) status = new_matrix(g, g->shape[0], weight->shape[1], &result);
    if (status == TL_OK) status = tl_gemm_linear_backward_input_dgelu(g, w, p, result);
    if (status == TL_OK) status = view_with_last(result, grad, weight->shape[1], grad_input);
    tl_release(g), tl_release(w), tl_release(p), tl_release(result);
    return status;
}

/* The dtype a GEMM over grad writes a gradient in for a caller that wants dtype: dtype itself
   when the GEMM can write it (grad's own, or float32 from 16-bit), grad's otherwise. */
static tl_dtype written_dtype(const tl_tensor *grad, tl_dtype dtype) {
    const bool half = grad->dtype == TL_BF16 || grad->dtype == TL_F16;
    return dtype == grad->dtype || (half && dtype == TL_F32) ? dtype : grad->dtype;
}

/* *t as dtype: a cast replacing it when it is not (released on failure). */
static tl_status finish_as(tl_dtype dtype, tl_status status, tl_tensor **t) {
    if (status != TL_OK || (*t)->dtype == dtype) return status;
    tl_tensor *cast = NULL;
    status = tl_cast(*t, dtype, &cast);
    tl_release(*t);
    *t = status == TL_OK ? cast : NULL;
    return status;
}

/* grad [..., O] and input [..., I] of one linear as dense matrices of the same rows */
static tl_status weight_grad_operands(const char *op, const tl_tensor *grad, const tl_tensor *input,
                                      tl_tensor **g, tl_tensor **x) {
    char sg[256], si[256];
    *g = *x = NULL;
    tl_status status = grad_matrix(op, grad, input, "input", grad->shape[grad->ndim - 1], g);
    if (status == TL_OK) status = as_matrix(input, input->shape[input->ndim - 1], x);
    if (status == TL_OK && (*g)->shape[0] != (*x)->shape[0])
        status = tl_error(TL_ERR_SHAPE, "%s: grad %s and input %s must have the same rows", op,
                          tl_shape_str(grad, sg, sizeof sg), tl_shape_str(input, si, sizeof si));
    return status;
}

/* The weight's gradient in weight_dtype, and with grad_bias the bias's in bias_dtype by the same
   GEMM (its bias-gradient epilogue): both written in the dtype the GEMM can write (written_dtype),
   then cast where the caller wants another. */
static tl_status weight_gradients(const char *op, const tl_tensor *grad, const tl_tensor *input,
                                  tl_dtype weight_dtype, tl_dtype bias_dtype,
                                  tl_tensor **grad_weight, tl_tensor **grad_bias) {
    if (!grad_weight) return tl_error(TL_ERR_ARGUMENT, "%s: grad_weight is NULL", op);
    *grad_weight = NULL;
    if (grad_bias) *grad_bias = NULL;
    TL_TRY(check_present(op, "grad", grad));
    TL_TRY(check_present(op, "input", input));
    if (grad->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "%s: grad must have at least 1 dim, got a 0-dim one", op);
    if (input->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "%s: input must have at least 1 dim, got a 0-dim one", op);
    tl_tensor *g = NULL, *x = NULL, *gw = NULL, *gb = NULL;
    tl_status status = weight_grad_operands(op, grad, input, &g, &x);
    const tl_dtype written = status == TL_OK ? written_dtype(g, weight_dtype) : weight_dtype;
    if (status == TL_OK) {
        int64_t shape[2] = {g->shape[1], x->shape[1]};
        status = tl_empty(shape, 2, written, tl_tensor_device(g), &gw);
    }
    if (status == TL_OK && grad_bias)
        status = tl_empty(&g->shape[1], 1, written, tl_tensor_device(g), &gb);
    if (status == TL_OK) status = tl_gemm_linear_backward_weight(g, x, false, gw, gb);
    if (status == TL_OK) status = finish_as(weight_dtype, status, &gw);
    if (status == TL_OK && gb) status = finish_as(bias_dtype, status, &gb);
    if (status == TL_OK) {
        *grad_weight = gw;
        if (grad_bias) *grad_bias = gb;
    } else {
        tl_release(gw), tl_release(gb);
    }
    tl_release(g), tl_release(x);
    return status;
}

tl_status tl_linear_backward_weight(const tl_tensor *grad, const tl_tensor *input,
                                    tl_tensor **grad_weight) {
    return weight_gradients("linear_backward_weight", grad, input, grad ? grad->dtype : TL_F32,
                            TL_F32, grad_weight, NULL);
}

tl_status tl_linear_backward_weight_as(const tl_tensor *grad, const tl_tensor *input,
                                       tl_dtype dtype, tl_tensor **grad_weight) {
    return weight_gradients("linear_backward_weight_as", grad, input, dtype, dtype, grad_weight,
                            NULL);
}

tl_status tl_linear_backward_weight_bias_as(const tl_tensor *grad, const tl_tensor *input,
                                            tl_dtype weight_dtype, tl_dtype bias_dtype,
                                            tl_tensor **grad_weight, tl_tensor **grad_bias) {
    return weight_gradients("linear_backward_weight_bias_as", grad, input, weight_dtype, bias_dtype,
                            grad_weight, grad_bias);
}

/* The bias's gradient in dtype: grad's rows summed by a GEMM against ones (NULL on failure). */
static tl_status bias_gradient(const char *op, const tl_tensor *grad, tl_dtype dtype,
                               tl_tensor **grad_bias) {
    if (!grad_bias) return tl_error(TL_ERR_ARGUMENT, "%s: grad_bias is NULL", op);
    *grad_bias = NULL;
    TL_TRY(check_present(op, "grad", grad));
    if (grad->ndim < 1)
        return tl_error(TL_ERR_SHAPE, "%s: grad must have at least 1 dim, got a 0-dim one", op);
    tl_tensor *g = NULL, *ones = NULL, *gb = NULL;
    tl_status status = grad_matrix(op, grad, grad, "grad", grad->shape[grad->ndim - 1], &g);
    if (status == TL_OK) status = tl_ones(&g->shape[0], 1, g->dtype, tl_tensor_device(g), &ones);
    if (status == TL_OK)
        status = tl_empty(&g->shape[1], 1, written_dtype(g, dtype), tl_tensor_device(g), &gb);
    if (status == TL_OK) status = tl_gemm_linear_backward_bias(g, ones, false, gb);
    if (status == TL_OK) status = finish_as(dtype, status, &gb);
    tl_release(g), tl_release(ones);
    if (status != TL_OK) {
        tl_release(gb);
        return status;
    }
    *grad_bias = gb;
    return TL_OK;
}

tl_status tl_linear_backward_bias(const tl_tensor *grad, tl_tensor **grad_bias) {
    return bias_gradient("linear_backward_bias", grad, grad ? grad->dtype : TL_F32, grad_bias);
}

tl_status tl_linear_backward_bias_as(const tl_tensor *grad, tl_dtype dtype, tl_tensor **grad_bias) {
    return bias_gradient("linear_backward_bias_as", grad, dtype, grad_bias);
}

tl_status tl_outer(const tl_tensor *a, const tl_tensor *b, tl_tensor **out) {
    char sa[256], sb[256];
    TL_TRY(check_present("outer", "a", a));
    TL_TRY(check_present("outer", "b", b));
    if (a->ndim != 1 || b->ndim != 1)
        return tl_error(TL_ERR_SHAPE, "outer: expected two 1-D tensors, got shapes %s and %s",
                        tl_shape_str(a, sa, sizeof sa), tl_shape_str(b, sb, sizeof sb));
    TL_TRY(check_same_kind("outer", "a", a, "b", b));
    tl_tensor *a_dense = NULL, *b_dense = NULL;
    int64_t shape[2] = {a->shape[0], b->shape[0]};
    tl_status status = tl_contiguous((tl_tensor *)a, &a_dense);
    if (status == TL_OK) status = tl_contiguous((tl_tensor *)b, &b_dense);
    if (status == TL_OK) status = tl_empty(shape, 2, a->dtype, tl_tensor_device(a), out);
    if (status == TL_OK) {
        status = tl_gemm_outer_forward(a_dense, b_dense, *out);
        if (status != TL_OK) tl_release(*out);
    }
    tl_release(a_dense), tl_release(b_dense);
    return status;
}
