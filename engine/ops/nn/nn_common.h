/* Internal to the nn ops: argument checks naming op and argument, unchecked autograd paths. */
#ifndef TLUA_NN_COMMON_H
#define TLUA_NN_COMMON_H

#include <stdio.h>
#include <string.h>

#include "kernels/kernel.h"
#include "core/size.h"
#include "tlua/nn.h"

/* t has a floating dtype. */
static inline tl_status nn_check_floating(const char *op, const char *name, const tl_tensor *t) {
    if (!tl_dtype_is_floating(t->dtype))
        return tl_error(TL_ERR_DTYPE,
                        "%s: %s must have a floating dtype (float32, float64, bfloat16, float16), "
                        "got %s",
                        op, name, tl_dtype_name(t->dtype));
    return TL_OK;
}

/* t is int32 or int64. */
static inline tl_status nn_check_integer(const char *op, const char *name, const tl_tensor *t) {
    if (t->dtype != TL_I32 && t->dtype != TL_I64)
        return tl_error(TL_ERR_DTYPE, "%s: %s must be int64 or int32, got %s", op, name,
                        tl_dtype_name(t->dtype));
    return TL_OK;
}

/* t (named name) is on ref's device and, when same_dtype, has ref's dtype. */
static inline tl_status nn_check_like(const char *op, const char *ref_name, const tl_tensor *ref,
                                      const char *name, const tl_tensor *t, bool same_dtype) {
    char a[16], b[16];
    if (!tl_device_equal(tl_tensor_device(t), tl_tensor_device(ref)))
        return tl_error(TL_ERR_DEVICE, "%s: %s is on %s but %s is on %s", op, ref_name,
                        tl_device_name(tl_tensor_device(ref), a), name,
                        tl_device_name(tl_tensor_device(t), b));
    if (same_dtype && t->dtype != ref->dtype)
        return tl_error(TL_ERR_DTYPE, "%s: %s is %s but %s is %s", op, ref_name,
                        tl_dtype_name(ref->dtype), name, tl_dtype_name(t->dtype));
    return TL_OK;
}

/* Releases t[0..n) (NULL entries too) and clears them. */
static inline void nn_release_all(tl_tensor **t, int64_t n) {
    for (int64_t i = 0; i < n; i++) tl_release(t[i]), t[i] = NULL;
}

/* Contiguous forms of t[0..n) (NULL stays NULL): new references in c. */
static inline tl_status nn_contiguous_all(const tl_tensor *const *t, tl_tensor **c, int n) {
    tl_status status = TL_OK;
    for (int i = 0; i < n; i++) c[i] = NULL;
    for (int i = 0; i < n && status == TL_OK; i++)
        if (t[i]) status = tl_contiguous((tl_tensor *)t[i], &c[i]);
    return status;
}

static inline bool nn_same_shape(const tl_tensor *t, const int64_t *shape, int ndim) {
    return t->ndim == ndim && memcmp(t->shape, shape, sizeof shape[0] * (size_t)ndim) == 0;
}

/* Writes "[2, 3]" for a shape array (as tl_shape_str does for a tensor). */
static inline const char *nn_shape_str(const int64_t *shape, int ndim, char *buf, int size) {
    int at = 0;
    buf[0] = '\0';
    at += snprintf(buf + at, (size_t)(size - at), "[");
    for (int d = 0; d < ndim && at < size; d++)
        at += snprintf(buf + at, (size_t)(size - at), d ? ", %lld" : "%lld", (long long)shape[d]);
    if (at < size) snprintf(buf + at, (size_t)(size - at), "]");
    return buf;
}

/* The sliding window of a kernel over images [batch, channels, height, width] (image), with
   its output size; the column strides are left to the caller. */
static inline tl_window2d nn_window(const int64_t *image, int64_t kernel_h, int64_t kernel_w,
                                    int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                    int64_t pad_w, int64_t out_h, int64_t out_w) {
    return (tl_window2d){.batch = image[0],
                         .channels = image[1],
                         .height = image[2],
                         .width = image[3],
                         .kernel_h = kernel_h,
                         .kernel_w = kernel_w,
                         .stride_h = stride_h,
                         .stride_w = stride_w,
                         .pad_h = pad_h,
                         .pad_w = pad_w,
                         .dilation_h = 1,
                         .dilation_w = 1,
                         .out_h = out_h,
                         .out_w = out_w};
}

/* A pooling window (tlua/nn.h's tl_pool2d_options) over images [N, C, H, W] (image), its
   output size, refusing bad sizes and padding over half the kernel (op names the caller). */
tl_status nn_pool_window(const char *op, const int64_t *image, const tl_pool2d_options *opts,
                         tl_window2d *window);
/* Adaptive pooling's sizes (out_h, out_w >= 0) as a window (kernel, stride 1, padding 0). */
tl_status nn_adaptive_window(const char *op, const int64_t *image, int64_t out_h, int64_t out_w,
                             tl_window2d *window);

/* tl_max_pool2d_backward; check_indices = false skips the range check of indices (two
   reductions) for indices the forward made, as autograd's. */
/* Runs an image op's kernel: call(k, dst, src, desc) with k the kernel of op for src's device
   and dtype, src made dense and dst a new tensor of dst_shape; an empty src leaves dst zeros.
   The avg_pool and resize families, whose kernels take (dst, src, their description). */
typedef tl_status (*nn_image_call)(const tl_kernel_entry *k, tl_tensor *dst, const tl_tensor *src,
                                   const void *desc);
tl_status nn_run_image_kernel(tl_op op, const tl_tensor *src, const int64_t dst_shape[4],
                              nn_image_call call, const void *desc, tl_tensor **out);
/* conv_transpose2d's input [N, C, H, W] with zero rows and columns at its end, so that conv2d's
   size rule (kernel kernel_hw) maps the output's out_hw back to it (a new reference to input itself
   when it does already: output_padding < stride). */
tl_status nn_conv_transpose_input(tl_tensor *input, const int64_t kernel_hw[2],
                                  const int64_t out_hw[2], const tl_conv2d_options *o,
                                  tl_tensor **out);
tl_status nn_max_pool2d_backward(const tl_tensor *grad, const tl_tensor *indices,
                                 const int64_t input_shape[4], bool check_indices,
                                 tl_tensor **grad_input);

/* lstm_cell_pointwise and its backward (tlua/nn.h) writing into given contiguous outputs of the
   shapes the ops would allocate (rnn_layer.c's walks write each step into slices of their
   stacked results). */
tl_status nn_lstm_cell_into(const tl_tensor *gates, const tl_tensor *gates2,
                            const tl_tensor *c_prev, tl_tensor *h, tl_tensor *c,
                            tl_tensor *workspace);
tl_status nn_lstm_cell_backward_into(const tl_tensor *grad_h, const tl_tensor *grad_h2,
                                     const tl_tensor *grad_c, const tl_tensor *workspace,
                                     const tl_tensor *c_prev, const tl_tensor *c,
                                     tl_tensor *grad_gates, tl_tensor *grad_c_prev);

/* Adam's hyper-parameters, checked once for the per-parameter and the multi-tensor step (op
   names the caller): step >= 1, lr, eps, weight_decay >= 0, betas in [0, 1). */
tl_status nn_check_adam_hyper(const char *op, int64_t step, double lr, double beta1, double beta2,
                              double eps, double weight_decay);
/* The kernels' arguments of an Adam step (decoupled: AdamW), per parameter or multi-tensor. */
static inline tl_optim_args nn_adam_args(int64_t step, double lr, double beta1, double beta2,
                                         double eps, double weight_decay, bool decoupled) {
    return (tl_optim_args){.lr = lr,
                           .weight_decay = weight_decay,
                           .beta1 = beta1,
                           .beta2 = beta2,
                           .eps = eps,
                           .step = step,
                           .decoupled = decoupled};
}
/* v >= 0 (NaN refused), an error naming op and the argument otherwise. */
tl_status nn_check_at_least_zero(const char *op, const char *name, double v);

/* A NULL-terminated tensor list for tl_dispatch's trace: the output first, then the inputs. */
#define NN_TENSORS(...) ((const tl_tensor *const[]){__VA_ARGS__, NULL})

#endif
