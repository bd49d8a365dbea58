/* Kernel signatures (each op family names one in ops.def), the kernel tables, and the typed
   dispatch by (op, device, dtype) every functional op goes through. */
#ifndef TLUA_KERNEL_H
#define TLUA_KERNEL_H

#include <stdbool.h>
#include <stdint.h>

#include "tlua/block_layout.h"
#include "tlua/conv.h"
#include "tlua/tensor.h"
#include "kernels/gemm.h"
#include "kernels/op.h"

#ifdef __cplusplus
extern "C" { /* CUDA C++ files register kernels and report variants too */
#endif

/* Scalars an op passes to its kernel: pow's exponent (scalar[0]); clamp's
   bounds (scalar[0..1] with has_scalar); randint's [low, high) (scalar[0..1]);
   dropout's p (scalar[0]: cpu/dropout.c states the kernel); a pointwise op's named numbers
   (scalar[0..2], resolved: kernels/op.h's tl_op_numbers); the random stream (seed, counter). */
typedef struct tl_op_args {
    double scalar[3];
    bool has_scalar[3];
    uint64_t seed;
    uint64_t counter;
    int dim; /* the dim an op works along (0-based), for the kernels that take one */
    /* gather: the range its index values must lie in, checked by the kernel as it reads them
       (the one kernel that fails on user input: the CPU's returns tl_index_range_error's
       error, CUDA's queues it in the device's fault record as a queued check does) */
    const tl_index_range *index_range;
} tl_op_args;

/* Elementwise kernels get inputs already broadcast (expanded, stride 0) to
   out's shape. `out` is freshly allocated or validated; kernels never fail
   on user input, only on device errors. */
typedef tl_status (*tl_unary_kernel)(tl_tensor *out, const tl_tensor *in, const tl_op_args *args);
/* args: the op's numbers (a pointwise backward's, its forward's), or NULL for none */
typedef tl_status (*tl_binary_kernel)(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                                      const tl_op_args *args);
typedef tl_status (*tl_ternary_kernel)(tl_tensor *out, const tl_tensor *cond, const tl_tensor *a,
                                       const tl_tensor *b);
typedef tl_status (*tl_fill_kernel)(tl_tensor *out, tl_scalar value);
/* dst and src have the same shape (src expanded); dtypes may differ; the
   kernel is looked up by src's dtype and handles every dst dtype. */
typedef tl_status (*tl_copy_kernel)(tl_tensor *dst, const tl_tensor *src);
/* Reduces dim of in into out (out has in's shape with dim of size 1);
   indices (int64, same shape as out) is set for max/min/argmax/argmin and
   NULL for sum/mean. For argmax/argmin `out` is NULL. */
typedef tl_status (*tl_reduce_kernel)(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,
                                      int dim);
/* The signature of a family that has none of its own (family rows naming `tensors`): outputs
   (written, or accumulated into where the op says so) and inputs, as the family's ops order
   them, and args (the op's numbers and dim). */
typedef tl_status (*tl_tensors_kernel)(tl_tensor *const *out, const tl_tensor *const *in,
                                       const tl_op_args *args);
/* A value reduction (family FOLD) of dim of in into out (in's shape with dim of size 1, the
   dtype of its row's output rule); args->scalar[0] is the op's number (kernels/reduction.h). */
typedef tl_status (*tl_fold_kernel)(tl_tensor *out, const tl_tensor *in, int dim,
                                    const tl_op_args *args);
/* Inclusive prefix sum along dim: out (in's shape, any strides, not overlapping in) gets
   out[.., i, ..] = sum of in[.., 0..i, ..] ("="); in has any strides, ndim >= 1. Floating inputs
   give their dtype (float64 and float32 accumulate in double, bfloat16 and float16 in float32,
   each output rounded once), integer and bool inputs int64 (wrapping, two's complement). */
typedef tl_status (*tl_scan_kernel)(tl_tensor *out, const tl_tensor *in, int dim);
/* The non-zero elements of in (contiguous, any dtype; NaN is non-zero, -0.0 is zero), in
   row-major order. With out NULL: *count = their number, on the host (CUDA waits for the device
   once). Else out (int64 [*count, ndim], contiguous) gets their 0-based coordinates ("="). */
typedef tl_status (*tl_nonzero_kernel)(tl_tensor *out, const tl_tensor *in, int64_t *count);
typedef tl_status (*tl_softmax_kernel)(tl_tensor *out, const tl_tensor *in, int dim);
/* Along dim, from the forward's output y and its gradient g (any strides, g maybe expanded):
   softmax_backward: grad_input = y * (g - sum(g * y)); log_softmax_backward: grad_input =
   g - exp(y) * sum(g) ("="). grad_input may be grad or output itself (same memory, offset and
   strides): each row's sum is read first, then each element is read before it is written. */
typedef tl_status (*tl_softmax_backward_kernel)(tl_tensor *grad_input, const tl_tensor *grad,
                                                const tl_tensor *output, int dim);
/* tl_gemm's device travels with the call: where the operands live and whose handle runs it */
typedef tl_status (*tl_gemm_kernel)(tl_device device, const GemmParams *params, const void *a,
                                    const void *b, void *c);
/* tl_gemm_grouped's problems, validated; problems with m, n or k zero are the kernel's to skip */
typedef tl_status (*tl_gemm_grouped_kernel)(tl_device device, const GemmGroupedParams *params);
/* matmul_inplace: x [rows, n] (a matrix GEMM reads in place) <- x @ w (w [n, n], GEMM-readable)
   by tiles of the workspace's rows (workspace [tile_rows, n], contiguous): each tile computed
   into the workspace, then copied back over it. */
typedef tl_status (*tl_matmul_inplace_kernel)(tl_tensor *x, const tl_tensor *w,
                                              tl_tensor *workspace);
typedef tl_status (*tl_random_kernel)(tl_tensor *out, const tl_op_args *args);

/* ---- nn kernels (engine/include/tlua/nn.h); tensors are dense (contiguous) ---- */
/* A 2-D sliding window over images [batch, channels, height, width]: conv2d's
   im2col/col2im and pooling. Output positions p = oh * out_w + ow read input rows
   oh * stride_h - pad_h + i * dilation_h, columns ow * stride_w - pad_w + j * dilation_w
   (i < kernel_h, j < kernel_w; dilation >= 1 spreads the kernel's taps apart). Columns of im2col:
   row r = (c * kernel_h + i) * kernel_w + j, sample b, position p at
   r * col_row_stride + b * col_batch_stride + p ([C*kh*kw, batch*P] or [batch, C*kh*kw, P]). */
typedef struct tl_window2d {
    int64_t batch, channels, height, width;
    int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
    int64_t out_h, out_w;
    int64_t col_row_stride, col_batch_stride;
} tl_window2d;
/* conv2d by a library's direct convolution (cuDNN on CUDA), dense NCHW tensors, the geometry
   of tlua/nn.h: conv2d_dnn: out = conv2d(a = input, b = weight); conv2d_dnn_backward_input:
   out = the input's gradient from a = grad, b = weight; conv2d_dnn_backward_weight: out = the
   weight's gradient from a = grad, b = input ("=" semantics each). */
typedef tl_status (*tl_conv_kernel)(tl_tensor *out, const tl_tensor *a, const tl_tensor *b,
                                    const tl_conv2d_options *options);
/* im2col: dst = columns of the images src (zeros where the window is in the padding).
   col2im: dst = images, each element the sum of the columns that read it ("="). */
typedef tl_status (*tl_im2col_kernel)(tl_tensor *dst, const tl_tensor *src,
                                      const tl_window2d *window);
/* out [N, C, out_h, out_w] = the window maxima of in (NaN wins); indices (int64, out's
   shape) = their flat positions ih * width + iw in the input plane. */
typedef tl_status (*tl_pool_kernel)(tl_tensor *out, tl_tensor *indices, const tl_tensor *in,
                                    const tl_window2d *window);
/* grad_in [N, C, H, W] = grad_out scattered (summed) to indices ("="). */
typedef tl_status (*tl_pool_backward_kernel)(tl_tensor *grad_in, const tl_tensor *grad_out,
                                             const tl_tensor *indices, const tl_window2d *window);
/* avg_pool2d / adaptive_avg_pool2d (and their backward) over window (dilation 1). Output oh
   averages rows oh * stride_h - pad_h .. + kernel_h - 1 clipped to the input, divided by divisor
   when > 0, else by the window's size clipped to the padded input (count_include_pad) or to the
   input; adaptive: rows floor(oh H / OH) .. ceil((oh + 1) H / OH) - 1, by their count (kernel,
   stride and padding unused). Columns likewise. */
typedef struct tl_avg_window2d {
    tl_window2d window;
    bool adaptive, count_include_pad;
    int64_t divisor;
} tl_avg_window2d;
/* forward: dst [N, C, OH, OW] = the window means of src [N, C, H, W]; backward: dst [N, C, H, W] =
   each output's gradient (src [N, C, OH, OW]) spread over its window as the forward divides ("=").
 */
typedef tl_status (*tl_avg_pool_kernel)(tl_tensor *dst, const tl_tensor *src,
                                        const tl_avg_window2d *window);
/* interpolate's resampling of images [batch, channels, in_h, in_w] to [.., out_h, out_w].
   nearest: output o reads input min(floor((float)o * (float)scale), in - 1); bilinear: source
   coordinate scale * o (align_corners) or max(scale * (o + 0.5) - 0.5, 0), computed in the compute
   type, blending its two neighbours (the last input row twice). scale: the source step per output
   step, as the op resolved it (equal sizes: 1). */
typedef struct tl_resize2d {
    int64_t batch, channels, in_h, in_w, out_h, out_w;
    double scale_h, scale_w;
    bool align_corners;
} tl_resize2d;
/* forward: dst [N, C, out_h, out_w] from src [N, C, in_h, in_w]; backward: dst [N, C, in_h, in_w]
   = the sum of src [N, C, out_h, out_w] times each output's weight on it ("="). */
typedef tl_status (*tl_resize_kernel)(tl_tensor *dst, const tl_tensor *src,
                                      const tl_resize2d *resize);
/* index_check: indices int32/int64, contiguous: an element outside [range->first, + count) is
   the error tl_index_range_error makes; at once on the CPU, raised by the next synchronization
   on CUDA (the check only queued). */
typedef tl_status (*tl_index_check_kernel)(const tl_tensor *indices, const tl_index_range *range);
/* indices int32/int64 [n], checked to be in range (on CUDA asynchronously: an index out of
   range reads a zero row and adds nowhere).
   embedding: out [n, D] = src [V, D] rows at indices;
   embedding_backward: out [V, D] = sum of src [n, D] rows per index, in order ("="). */
typedef tl_status (*tl_embedding_kernel)(tl_tensor *out, const tl_tensor *src,
                                         const tl_tensor *indices);
/* loss (0-dim, logits' dtype) = mean over rows of lse - (1 - s) x[target] - s/C sum(x);
   lse [N] (float32, or float64 for float64 logits) = log(sum(exp(x))) per row.
   target int32/int64 [N], checked to be in range (on CUDA asynchronously: a row whose target is
   out of range has a NaN loss). */
typedef tl_status (*tl_cross_entropy_kernel)(tl_tensor *loss, tl_tensor *lse,
                                             const tl_tensor *logits, const tl_tensor *target,
                                             double label_smoothing);
/* grad_logits [N, C] = (exp(x - lse) - (1 - s) onehot(target) - s/C) * grad_loss / N ("="). */
typedef tl_status (*tl_cross_entropy_backward_kernel)(tl_tensor *grad_logits,
                                                      const tl_tensor *grad_loss,
                                                      const tl_tensor *logits, const tl_tensor *lse,
                                                      const tl_tensor *target,
                                                      double label_smoothing);
/* The options of cross_entropy_rows: the first `classes` columns of each row are its classes
   (the columns past them, the row's padding to an aligned length, are not); targets count from
   first_class; a row whose target is ignore_index (when has_ignore) counts for nothing. */
typedef struct tl_cross_entropy_rows_args {
    int64_t classes, first_class;
    double label_smoothing;
    bool has_ignore;
    int64_t ignore_index;
    bool write_grad;
} tl_cross_entropy_rows_args;
/* Over logits [rows, L] (contiguous, L >= classes), target int32/int64 [rows] (in
   [first_class, first_class + classes), or ignore_index), scale (one element of row_loss's dtype):
   row_loss [rows] (float32, float64 for float64 logits) = lse - (1 - s) x[target] - s/classes
   sum(x) over the classes, 0 for an ignored row; when write_grad, logits is overwritten with its
   gradient (exp(x - lse) - (1 - s) onehot(target) - s/classes) * scale, 0 in the padding columns
   and on ignored rows. */
typedef tl_status (*tl_cross_entropy_rows_kernel)(tl_tensor *row_loss, tl_tensor *logits,
                                                  const tl_tensor *target, const tl_tensor *scale,
                                                  const tl_cross_entropy_rows_args *args);
/* Over rows of in [rows, D]: out = (s - mean) * rstd * weight + bias (weight, bias may be
   NULL); mean, rstd [rows] float32 (float64 for float64 input). layer_norm: s = in (residual
   and sum NULL); add_layer_norm: s = in + residual, written to sum (rounded to the dtype, and
   normalized as rounded, so that sum is what the backward reads). in, sum, weight and bias are
   in the dtype the kernel is dispatched for (T); mixed precision (autocast's bf16 activations
   over a float32 residual stream): when T is float32, residual and out may each be in one
   16-bit type instead (the same one for both): residual widened exactly on load, out rounded
   once from the float32 result. */
typedef tl_status (*tl_layer_norm_kernel)(tl_tensor *out, tl_tensor *sum, tl_tensor *mean,
                                          tl_tensor *rstd, const tl_tensor *in,
                                          const tl_tensor *residual, const tl_tensor *weight,
                                          const tl_tensor *bias, double eps);
/* A layer norm's gradients from grad_out [rows, D] and the forward's in (add_layer_norm's sum),
   mean, rstd and weight (may be NULL), "=" semantics, xhat = (in - mean) * rstd:
   grad_in = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) + grad_sum, gw = grad_out * weight
   (grad_sum, the gradient of add_layer_norm's sum, may be NULL: nothing added);
   grad_weight = sum over rows of grad_out * xhat, grad_bias = sum of grad_out's rows.
   layer_norm_backward_input writes grad_in only; layer_norm_backward_weight grad_weight and/or
   grad_bias (the other NULL; in, mean, rstd are read only for grad_weight); layer_norm_backward
   (one pass over the rows) grad_in and grad_weight and/or grad_bias. grad_residual (may be
   NULL; not with layer_norm_backward_weight) is grad_in again in a 16-bit type: add_layer_norm's
   residual's gradient in the residual's dtype, rounded once from the float32 grad_in, written
   in the same pass. Mixed precision as the forward: when T is float32, grad_out may be in a
   16-bit type (the one grad_residual has, when both are). */
typedef tl_status (*tl_layer_norm_backward_kernel)(tl_tensor *grad_in, tl_tensor *grad_residual,
                                                   tl_tensor *grad_weight, tl_tensor *grad_bias,
                                                   const tl_tensor *grad_out,
                                                   const tl_tensor *grad_sum, const tl_tensor *in,
                                                   const tl_tensor *mean, const tl_tensor *rstd,
                                                   const tl_tensor *weight);
/* batch_norm over in [N, C, S] (contiguous; S the product of the trailing dims, 1 without),
   per channel c over its M = N * S elements. Every per-channel tensor is contiguous [C] of the
   statistics dtype (float32; float64 for float64 input): weight, bias (may be NULL), mean and
   invstd (written), running_mean and running_var (read and updated in place; both NULL when
   training without them). training: mean and biased variance of the batch (sums in double),
   invstd = 1 / sqrt(var + eps), running r = (1 - momentum) r + momentum s (the unbiased
   variance, var * M / (M - 1)); M > 1. Not training: mean = running_mean, invstd = 1 /
   sqrt(running_var + eps). out = (x - mean) * invstd * weight + bias ("="). */
typedef struct tl_batch_norm_args {
    double momentum, eps;
    bool training;
} tl_batch_norm_args;
typedef tl_status (*tl_batch_norm_kernel)(tl_tensor *out, tl_tensor *mean, tl_tensor *invstd,
                                          tl_tensor *running_mean, tl_tensor *running_var,
                                          const tl_tensor *in, const tl_tensor *weight,
                                          const tl_tensor *bias, const tl_batch_norm_args *args);
/* batch_norm_backward_reduce: first = sum_dy [C] = sum of grad_out per channel, second =
   sum_dy_xhat [C] = sum of grad_out * (x - mean) * invstd (either NULL; in, mean and invstd
   are read only for second); weight, sum_dy, sum_dy_xhat NULL.
   batch_norm_backward_input: first = grad_in [N, C, S], second NULL; with sum_dy and
   sum_dy_xhat (the batch statistics' formula) grad_in = weight * invstd * (g - sum_dy / M -
   xhat * sum_dy_xhat / M), without them (running statistics) grad_in = g * invstd * weight
   (weight may be NULL: 1). Per-channel tensors as above; "=" semantics. */
typedef tl_status (*tl_batch_norm_backward_kernel)(tl_tensor *first, tl_tensor *second,
                                                   const tl_tensor *grad_out, const tl_tensor *in,
                                                   const tl_tensor *mean, const tl_tensor *invstd,
                                                   const tl_tensor *weight, const tl_tensor *sum_dy,
                                                   const tl_tensor *sum_dy_xhat);
/* Hyper-parameters of one optimizer step (PyTorch's names). */
typedef struct tl_optim_args {
    double lr, momentum, dampening, weight_decay; /* SGD (and lr, weight_decay for Adam) */
    double beta1, beta2, eps;                     /* Adam */
    int64_t step;                                 /* Adam: 1-based step count */
    bool nesterov, first_step;                    /* SGD */
    bool decoupled;                               /* Adam: AdamW's decoupled weight decay */
    /* adam_step_multi on CUDA: NULL, or 2 doubles in device memory, {lr, step}, that the kernel
       reads in place of lr and step (a step captured in a CUDA graph, whose replays each read
       the values the host wrote before them) */
    const double *hyper;
} tl_optim_args;
/* In place, one pass: sgd_step: state0 = momentum buffer (NULL without momentum), state1
   NULL; adam_step: state0 = exp_avg, state1 = exp_avg_sq. */
typedef tl_status (*tl_optim_kernel)(tl_tensor *param, const tl_tensor *grad, tl_tensor *state0,
                                     tl_tensor *state1, const tl_optim_args *args);
/* adam_step_multi: adam_step's update of n parameters at once (one launch), all contiguous and
   on one device. params[i] float32, float64, bfloat16 or float16 (mixed in one call), grads[i]
   of its dtype, exp_avg[i] and exp_avg_sq[i] float64 for a float64 param, else float32. master
   is NULL or master[i] is NULL, or a float32 copy of a bfloat16/float16 params[i]: the step then
   updates the master (read in place of the param) and params[i] = the new master rounded to
   its dtype. Computed in float (double for float64); args->step is shared. */
typedef tl_status (*tl_optim_multi_kernel)(tl_tensor *const *params, const tl_tensor *const *grads,
                                           tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                                           tl_tensor *const *master, int64_t n,
                                           const tl_optim_args *args);
/* clip_grad_norm_multi: total (0-dim, float32, or float64 when every grad is float64; on the
   grads' device) = the norm_type-norm (>= 1, or INFINITY) of the n grads together (n >= 1;
   contiguous, floating, dtypes may differ, any may be empty, none share memory): |x|^p per
   element in the grad's compute type (float; double for float64), sums (max for INFINITY) in
   double in a fixed order. coef = max_norm * (1 / (total + 1e-6)) in total's dtype; when it is
   not >= 1 (NaN included) every grad is scaled in place by it, in its compute type. No host
   synchronization on CUDA. */
typedef tl_status (*tl_clip_norm_multi_kernel)(tl_tensor *const *grads, int64_t n, double max_norm,
                                               double norm_type, tl_tensor *total);
/* Block-sparse linear over W [R*b, C*b] held as blocks [nnz, b, b] on layout's pattern
   (tlua/block_layout.h: indices already checked); dense operands are contiguous [rows, ...].
   block_sparse_linear:                 out [rows, R*b] = dense [rows, C*b] @ W^T (+ bias [R*b]
                                        when not NULL), other = blocks;
   block_sparse_linear_backward_input:  out [rows, C*b] = dense [rows, R*b] @ W, other = blocks;
   block_sparse_linear_backward_weight: out [nnz, b, b], block e = dense[:, row e]^T other[:, col e]
                                        (dense = grad [rows, R*b], other = x [rows, C*b]).
   "=" semantics; bias is NULL except in the forward. */
typedef tl_status (*tl_block_sparse_kernel)(tl_tensor *out, const tl_tensor *dense,
                                            const tl_tensor *other, const tl_tensor *bias,
                                            const tl_block_layout *layout);

/* Scaled dot-product attention, per (b, h) of q, out [B, H, T, D], k, v [B, H, S, D]: every
   operand's last dim has stride 1, its other strides are free (elements); lse, delta
   [B, H, T] contiguous float32 (float64 for float64 operands).
   p = softmax(scale q k^T, masked when causal: query i sees keys j <= i, PyTorch's top-left
   alignment), then dropout on p: element e = ((b H + h) T + i) S + j of the virtual
   [B, H, T, S] tensor is kept, times 1 / (1 - dropout), when the uniform that `rand` (float32)
   draws for element e from (seed, counter) is >= dropout, compared in float32 as `rand(...) >=
   p` compares: tl_philox_uniform_f32(seed, counter, e) >= (float)dropout (kernels/philox.h).
   attention: out = p v, lse = logsumexp of the masked scaled scores per query ("=").
   attention_backward: grad_q, grad_k, grad_v ("=", any may be NULL when not needed) from
   grad_out, q, k, v, out and lse; delta is scratch the kernel may fill with rowsum(grad_out *
   out). */
typedef struct tl_attention_args {
    double scale, dropout;
    bool causal;
    bool cudnn; /* a CUDA kernel may run it on cuDNN's fused attention (tl_cudnn_enabled) */
    uint64_t seed, counter; /* Philox stream of the dropout mask (unused without dropout) */
} tl_attention_args;
typedef tl_status (*tl_attention_kernel)(tl_tensor *out, tl_tensor *lse, const tl_tensor *q,
                                         const tl_tensor *k, const tl_tensor *v,
                                         const tl_attention_args *args);
typedef tl_status (*tl_attention_backward_kernel)(tl_tensor *grad_q, tl_tensor *grad_k,
                                                  tl_tensor *grad_v, tl_tensor *delta,
                                                  const tl_tensor *grad_out, const tl_tensor *q,
                                                  const tl_tensor *k, const tl_tensor *v,
                                                  const tl_tensor *out, const tl_tensor *lse,
                                                  const tl_attention_args *args);

/* A multi-layer RNN on cuDNN (CUDA only; ops/nn/rnn_dnn.c): the problem, and kernels over
   tensors as tl_tensors_kernel's (out[], in[]), every tensor contiguous. mode: 0 LSTM, 1 GRU,
   2 tanh, 3 relu (torch's gate orders); steps and batch: T and N of x [T, N, input_size] (0 for
   the layout). rnn_dnn_layout: out[0] int64 [2] on the CPU (the weight space's elements, the
   reserve's bytes for steps x batch in training), out[1] (NULL: the sizes alone) int64
   [layers * dirs, 2 * gates, 2] on the CPU: each matrix's and bias's element offset in the
   weight space (cuDNN's linear layers in order: the input's gates, then the hidden state's).
   rnn_dnn: out y [T, N, dirs * H], hy, cy [layers * dirs, N, H] (cy NULL but for the LSTM), reserve
   (training; bytes of the layout's size, NULL otherwise); in x, hx, cx (LSTM), weight space,
   seq_lengths (int32 [N] on the device, all T). rnn_dnn_backward_data: out dx, dhx, dcx; in y, dy,
   dhy, dcy (LSTM), hx, cx, weight space, reserve, seq_lengths. rnn_dnn_backward_weight (after the
   data pass, which changes the reserve): out dweight (the weight space's shape, "="); in x, hx, y,
   weight space, reserve, seq_lengths. */
typedef struct tl_rnn_dnn_config {
    int mode;
    int64_t input_size, hidden_size, layers, steps, batch;
    bool bidirectional, training;
} tl_rnn_dnn_config;
typedef tl_status (*tl_rnn_dnn_kernel)(tl_tensor *const *out, const tl_tensor *const *in,
                                       const tl_rnn_dnn_config *config);

/* The kernel signatures: SIGNATURE(member, type) gives tl_kernel_entry's union member `member`
   of that type, TL_SIG_<member> and its name. A new signature is its typedef above and a row
   here; the FAMILY rows of ops.def name the signature of each family. */
#define TL_KERNEL_SIGNATURES(SIGNATURE)                                                            \
    SIGNATURE(unary, tl_unary_kernel)                                                              \
    SIGNATURE(binary, tl_binary_kernel)                                                            \
    SIGNATURE(ternary, tl_ternary_kernel)                                                          \
    SIGNATURE(fill, tl_fill_kernel)                                                                \
    SIGNATURE(copy, tl_copy_kernel)                                                                \
    SIGNATURE(reduce, tl_reduce_kernel)                                                            \
    SIGNATURE(fold, tl_fold_kernel)                                                                \
    SIGNATURE(tensors, tl_tensors_kernel)                                                          \
    SIGNATURE(scan, tl_scan_kernel)                                                                \
    SIGNATURE(nonzero, tl_nonzero_kernel)                                                          \
    SIGNATURE(softmax, tl_softmax_kernel)                                                          \
    SIGNATURE(softmax_backward, tl_softmax_backward_kernel)                                        \
    SIGNATURE(gemm, tl_gemm_kernel)                                                                \
    SIGNATURE(gemm_grouped, tl_gemm_grouped_kernel)                                                \
    SIGNATURE(matmul_inplace, tl_matmul_inplace_kernel)                                            \
    SIGNATURE(random, tl_random_kernel)                                                            \
    SIGNATURE(im2col, tl_im2col_kernel)                                                            \
    SIGNATURE(conv, tl_conv_kernel)                                                                \
    SIGNATURE(pool, tl_pool_kernel)                                                                \
    SIGNATURE(pool_backward, tl_pool_backward_kernel)                                              \
    SIGNATURE(avg_pool, tl_avg_pool_kernel)                                                        \
    SIGNATURE(resize, tl_resize_kernel)                                                            \
    SIGNATURE(index_check, tl_index_check_kernel)                                                  \
    SIGNATURE(embedding, tl_embedding_kernel)                                                      \
    SIGNATURE(cross_entropy, tl_cross_entropy_kernel)                                              \
    SIGNATURE(cross_entropy_backward, tl_cross_entropy_backward_kernel)                            \
    SIGNATURE(cross_entropy_rows, tl_cross_entropy_rows_kernel)                                    \
    SIGNATURE(layer_norm, tl_layer_norm_kernel)                                                    \
    SIGNATURE(layer_norm_backward, tl_layer_norm_backward_kernel)                                  \
    SIGNATURE(batch_norm, tl_batch_norm_kernel)                                                    \
    SIGNATURE(batch_norm_backward, tl_batch_norm_backward_kernel)                                  \
    SIGNATURE(optim, tl_optim_kernel)                                                              \
    SIGNATURE(optim_multi, tl_optim_multi_kernel)                                                  \
    SIGNATURE(clip_norm_multi, tl_clip_norm_multi_kernel)                                          \
    SIGNATURE(block_sparse, tl_block_sparse_kernel)                                                \
    SIGNATURE(attention, tl_attention_kernel)                                                      \
    SIGNATURE(attention_backward, tl_attention_backward_kernel)                                    \
    SIGNATURE(rnn_dnn, tl_rnn_dnn_kernel)

/* Which member of tl_kernel_entry's union a kernel fills: its signature. Each op family has one
   (tl_family_signature); the registry rejects an entry whose signature is not its op's. */
typedef enum tl_kernel_signature {
    TL_SIG_none, /* a family without kernels (VIEW) */
#define TL_SIGNATURE_ENUM(member, type) TL_SIG_##member,
    TL_KERNEL_SIGNATURES(TL_SIGNATURE_ENUM)
#undef TL_SIGNATURE_ENUM
} tl_kernel_signature;

tl_kernel_signature tl_family_signature(tl_op_family family);
const char *tl_signature_name(tl_kernel_signature signature);

/* Sets of dtypes, one bit per tl_dtype: the dtypes one table entry serves. */
typedef uint32_t tl_dtype_set;
enum {
    TL_DTYPES_F32 = 1u << TL_F32,
    TL_DTYPES_F64 = 1u << TL_F64,
    TL_DTYPES_BF16 = 1u << TL_BF16,
    TL_DTYPES_F16 = 1u << TL_F16,
    TL_DTYPES_I32 = 1u << TL_I32,
    TL_DTYPES_I64 = 1u << TL_I64,
    TL_DTYPES_BOOL = 1u << TL_BOOL,
    TL_DTYPES_FLOATING = TL_DTYPES_F32 | TL_DTYPES_F64 | TL_DTYPES_BF16 | TL_DTYPES_F16,
    TL_DTYPES_INTEGER = TL_DTYPES_I32 | TL_DTYPES_I64,
    TL_DTYPES_NUMERIC = TL_DTYPES_FLOATING | TL_DTYPES_INTEGER,
    TL_DTYPES_ALL = TL_DTYPES_NUMERIC | TL_DTYPES_BOOL,
    /* the kernels' dtypes of a pointwise row by its dtypes rule (tlua/ops.def) */
    TL_POINTWISE_DTYPES_FLOAT = TL_DTYPES_FLOATING,
    TL_POINTWISE_DTYPES_FLOAT_ONLY = TL_DTYPES_FLOATING,
    TL_POINTWISE_DTYPES_INT = TL_DTYPES_NUMERIC,
    TL_POINTWISE_DTYPES_BOOL_OUT = TL_DTYPES_ALL,
    TL_POINTWISE_DTYPES_BITS = TL_DTYPES_INTEGER | TL_DTYPES_BOOL,
};

/* In a kernel table: one kernel function for (op, every dtype of dtypes). As returned by
   tl_dispatch: the registered kernel of one dtype, named "<name or device_op>_<dtype>"
   ("cpu_add_f32"). Write entries with TL_KERNEL, which sets the signature from the member. */
typedef struct tl_kernel_entry {
    tl_op op;
    tl_dtype_set dtypes;
    tl_kernel_signature signature;
    const char *name; /* in a table: NULL for "<device>_<op>", or a shared name ("cpu_gemm") */
    tl_dtype dtype;   /* as dispatched: the dtype it was found for */
    union {
#define TL_SIGNATURE_MEMBER(member, type) type member;
        TL_KERNEL_SIGNATURES(TL_SIGNATURE_MEMBER)
#undef TL_SIGNATURE_MEMBER
    } fn;
} tl_kernel_entry;

/* A table entry: `TL_KERNEL(add, TL_DTYPES_NUMERIC, binary, cuda_add)` registers cuda_add (a
   tl_binary_kernel: the compiler checks fn against the member) for add in six dtypes. */
#define TL_KERNEL(op, dtypes, member, fn)                                                          \
    {                                                                                              \
        TL_OP_##op, (dtypes), TL_SIG_##member, NULL, TL_F32, {                                     \
            .member = (fn)                                                                         \
        }                                                                                          \
    }
/* The same with a name shared by several ops ("cpu_gemm" gives "cpu_gemm_f32", ...). */
#define TL_KERNEL_NAMED(name, op, dtypes, member, fn)                                              \
    {                                                                                              \
        TL_OP_##op, (dtypes), TL_SIG_##member, (name), TL_F32, {                                   \
            .member = (fn)                                                                         \
        }                                                                                          \
    }
/* One function per floating dtype, fn_f32, fn_f64, fn_bf16 and fn_f16 (CPU kernels typed per
   dtype); TL_KERNELS_INTEGER the same for fn_i32 and fn_i64. */
#define TL_KERNELS_FLOATING(op, member, fn)                                                        \
    TL_KERNEL(op, TL_DTYPES_F32, member, fn##_f32),                                                \
        TL_KERNEL(op, TL_DTYPES_F64, member, fn##_f64),                                            \
        TL_KERNEL(op, TL_DTYPES_BF16, member, fn##_bf16),                                          \
        TL_KERNEL(op, TL_DTYPES_F16, member, fn##_f16)
#define TL_KERNELS_INTEGER(op, member, fn)                                                         \
    TL_KERNEL(op, TL_DTYPES_I32, member, fn##_i32), TL_KERNEL(op, TL_DTYPES_I64, member, fn##_i64)

/* A path a kernel may take (tensor cores or plain loops, one tile shape or another, dropout
   masks drawn ahead or per element): registered by the file that implements it, in a variant
   table (below), with the condition under which the kernel takes it and the dtypes where it can
   run; it belongs to the kernel of its (op, device, dtype). The kernel calls tl_variant_ran when
   it takes one (or several: a tile and a dropout mode), so tl.trace shows the variants that ran
   and the coverage report fails on a variant that no spec ran, or whose result no spec
   compared, on a device that has it.
   A path of a loop that many ops' kernels share (the elementwise walk, the reduction launch)
   is a loop variant: TL_LOOP_VARIANT names the loop instead of an op, the loop reports it with
   tl_loop_variant_ran, and it counts for the dtype of the kernel that ran it (tl.trace shows
   "loop.name" on that kernel's event). */
typedef struct tl_kernel_variant {
    tl_op op;
    tl_dtype_set dtypes;
    const char *name;      /* "mma_d64" */
    const char *condition; /* "bfloat16 or float16, head dim 64, operands 16-byte aligned" */
    const char *loop;      /* "elementwise" for a loop variant, NULL for an op's */
} tl_kernel_variant;
#define TL_VARIANT(op, dtypes, name, condition)                                                    \
    { TL_OP_##op, (dtypes), (name), (condition), NULL }
#define TL_LOOP_VARIANT(loop, dtypes, name, condition)                                             \
    { (tl_op)0, (dtypes), (name), (condition), (loop) }
/* Records that the running kernel (dispatched last on this thread) took variant for dtype. */
void tl_variant_ran(const tl_kernel_variant *variant, tl_dtype dtype);
/* Records that a loop variant ran for the kernel dispatched last on this thread (its dtype). */
void tl_loop_variant_ran(const tl_kernel_variant *variant);

/* A kernel table of one file. CMakeLists.txt finds every TL_KERNEL_TABLE (and
   TL_VARIANT_TABLE) that starts a line of a .c file of engine/kernels/cpu (or a .c or .cu file of
   engine/kernels/cuda) and kernels/registry.c registers them all: a new kernel file needs no
   other edit. */
typedef struct tl_kernel_table {
    tl_device_type device;
    const tl_kernel_entry *entries;
    int count;
} tl_kernel_table;
/* The variants a file implements. */
typedef struct tl_variant_table {
    tl_device_type device;
    const tl_kernel_variant *variants;
    int count;
} tl_variant_table;

/* Ends a kernel file: `TL_KERNEL_TABLE(tl_cpu_unary_table, TL_DEVICE_CPU, entries);` at the start
   of a line (CMakeLists.txt lists the tables from these lines). In CUDA C++ (a .cu file) the
   table has C linkage, as kernels/registry.c declares it. */
#ifdef __cplusplus
#define TL_KERNEL_TABLE_LINKAGE extern "C"
#else
#define TL_KERNEL_TABLE_LINKAGE
#endif
#define TL_KERNEL_TABLE(table_name, device, entries)                                               \
    TL_KERNEL_TABLE_LINKAGE const tl_kernel_table table_name = {                                   \
        device, entries, (int)(sizeof entries / sizeof entries[0])}
/* Lists a file's variants: `TL_VARIANT_TABLE(tl_cuda_attention_variants, TL_DEVICE_CUDA, list);`
   at the start of a line, list an array of TL_VARIANT(...). */
#define TL_VARIANT_TABLE(table_name, device, variants)                                             \
    TL_KERNEL_TABLE_LINKAGE const tl_variant_table table_name = {                                  \
        device, variants, (int)(sizeof variants / sizeof variants[0])}

/* Finds the kernel for (op, device, dtype) and records the run for tl.trace
   and the coverage report with the shapes of `tensors` (output first, then
   inputs; NULL-terminated, at most TL_TRACE_MAX_TENSORS). On failure sets an
   error naming the op, device and dtype and returns NULL. */
const tl_kernel_entry *tl_dispatch(tl_op op, tl_device device, tl_dtype dtype,
                                   const tl_tensor *const *tensors);
/* The same with explicit shapes (for GEMM, which sees pointers, not tensors). */
const tl_kernel_entry *tl_dispatch_shapes(tl_op op, tl_device device, tl_dtype dtype, int count,
                                          const int *ndims, const int64_t (*shapes)[TL_MAX_DIMS]);
/* The status of the calling thread's last failed dispatch: TL_ERR_DTYPE (no kernel for the
   dtype), TL_ERR_RUNTIME (a broken registry, or the thread's deadline passed: tlua/runtime.h).
   A caller returns it with the message the dispatch set. */
tl_status tl_dispatch_status(void);
/* True if a kernel exists (no error, no record). */
bool tl_has_kernel(tl_op op, tl_device_type device, tl_dtype dtype);

/* A view of t that holds each of its elements once, its 0-stride (expanded) dims made size 1:
   what a kernel writing one value to every element (fill) walks. */
static inline tl_tensor tl_distinct_elements(const tl_tensor *t) {
    tl_tensor view = *t;
    for (int d = 0; d < view.ndim; d++)
        if (view.strides[d] == 0) view.shape[d] = 1;
    return view;
}

#ifdef __cplusplus
}
#endif

#endif
