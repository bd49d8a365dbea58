/* Neural-network ops (conv2d, pooling, embedding, losses, layer norm, block-sparse linear,
   scaled dot-product attention, dropout) and optimizer steps. */
#ifndef TLUA_NN_H
#define TLUA_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "tlua/block_layout.h"
#include "tlua/conv.h"
#include "tlua/ops.h"
#include "tlua/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dims and indices are 0-based. Floating ops take float32, float64, bfloat16 or float16 (the
   16-bit ones compute in float32); every tensor of one call has the same dtype and device.
   Functional ops return new tensors ("=" semantics); backward functions compute one gradient
   each, so autograd runs only those it needs. Each op's recording form (tl_ag_conv2d, ...:
   the functional op plus the autograd graph, see tlua/autograd.h) is declared beside it. */

/* ---- conv2d, conv_transpose2d: the geometry, tl_conv2d_options, is in tlua/conv.h ---------- */
/* input [N, C, H, W], weight [O, C / groups, kh, kw], bias [O] or NULL -> out [N, O, OH, OW]
   with OH = (H + 2 padding - dilation (kh - 1) - 1) / stride + 1, OW likewise; opts NULL: the
   defaults. By im2col + GEMM (tl_gemm), batched over the samples and the groups. */
tl_status tl_conv2d(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                    const tl_conv2d_options *opts, tl_tensor **out);
/* grad_input [input_shape] from grad [N, O, OH, OW] and the weight. */
tl_status tl_conv2d_backward_input(const tl_tensor *grad, const tl_tensor *weight,
                                   const int64_t input_shape[4], const tl_conv2d_options *opts,
                                   tl_tensor **grad_input);
/* grad_weight [weight_shape] from grad [N, O, OH, OW] and the input. */
tl_status tl_conv2d_backward_weight(const tl_tensor *grad, const tl_tensor *input,
                                    const int64_t weight_shape[4], const tl_conv2d_options *opts,
                                    tl_tensor **grad_weight);
/* grad_bias [O]: grad [N, O, OH, OW] summed over N, OH, OW. */
tl_status tl_conv2d_backward_bias(const tl_tensor *grad, tl_tensor **grad_bias);
tl_status tl_ag_conv2d(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                       const tl_conv2d_options *opts, tl_tensor **out);

/* The transposed convolution (conv2d's gradient with respect to its input, as a layer): input
   [N, C, H, W], weight [C, O / groups, kh, kw], bias [O] or NULL -> out [N, O, OH, OW] with
   OH = (H - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1, OW likewise;
   0 <= output_padding < max(stride, dilation), as torch (rows and columns at the end that
   conv2d's rounding down would drop; past stride, rows that no input reaches hold the bias). out =
   conv2d_backward_input(input, weight) + bias; its input gradient is conv2d(grad, weight), its
   weight gradient conv2d_backward_weight with the roles swapped. */
tl_status tl_conv_transpose2d(const tl_tensor *input, const tl_tensor *weight,
                              const tl_tensor *bias, const tl_conv2d_options *opts,
                              const int64_t output_padding[2], tl_tensor **out);
tl_status tl_ag_conv_transpose2d(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                                 const tl_conv2d_options *opts, const int64_t output_padding[2],
                                 tl_tensor **out);

/* ---- max_pool2d ----------------------------------------------------------------------------
   input [N, C, H, W] -> out [N, C, OH, OW], OH = (H + 2 pad_h - kernel_h) / stride_h + 1;
   padding is never chosen and pad <= kernel / 2 (as PyTorch); a NaN in a window wins.
   indices (int64, out's shape): each maximum's position ih * W + iw in its input plane. */
tl_status tl_max_pool2d(const tl_tensor *input, int64_t kernel_h, int64_t kernel_w,
                        int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                        tl_tensor **out, tl_tensor **indices);
/* grad_input [input_shape]: grad [N, C, OH, OW] summed at indices. */
tl_status tl_max_pool2d_backward(const tl_tensor *grad, const tl_tensor *indices,
                                 const int64_t input_shape[4], tl_tensor **grad_input);
tl_status tl_ag_max_pool2d(tl_tensor *input, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                           int64_t stride_w, int64_t pad_h, int64_t pad_w, tl_tensor **out);

/* ---- pooling with every option --------------------------------------------------------------
   A window: kernel >= 1, stride >= 1, 0 <= padding <= kernel / 2, dilation >= 1 (max pooling
   only; average pooling takes 1); ceil_mode rounds the output size up, as long as the last window
   starts inside the input or its left padding (PyTorch's rule). count_include_pad and divisor
   (> 0 divides every window's sum; 0: none) are average pooling's. */
typedef struct tl_pool2d_options {
    int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
    bool ceil_mode, count_include_pad;
    int64_t divisor;
} tl_pool2d_options;
/* max_pool2d with dilation and ceil_mode: input [N, C, H, W]; a window whose taps all fall in
   the padding is refused. indices as tl_max_pool2d's. */
tl_status tl_max_pool2d_with(const tl_tensor *input, const tl_pool2d_options *opts, tl_tensor **out,
                             tl_tensor **indices);
/* Recording form; indices (may be NULL) gets a reference to the argmax positions. */
tl_status tl_ag_max_pool2d_with(tl_tensor *input, const tl_pool2d_options *opts, tl_tensor **out,
                                tl_tensor **indices);
/* adaptive_max_pool2d: input [N, C, H, W] -> [N, C, out_h, out_w] (sizes >= 1), output (oh, ow)
   the maximum over rows floor(oh H / out_h) .. ceil((oh + 1) H / out_h) - 1 and the columns
   likewise; indices as tl_max_pool2d's, its backward tl_max_pool2d_backward. */
tl_status tl_adaptive_max_pool2d(const tl_tensor *input, int64_t out_h, int64_t out_w,
                                 tl_tensor **out, tl_tensor **indices);
tl_status tl_ag_adaptive_max_pool2d(tl_tensor *input, int64_t out_h, int64_t out_w, tl_tensor **out,
                                    tl_tensor **indices);
/* avg_pool2d: input [N, C, H, W] -> the window means [N, C, OH, OW] (opts' dilation must be 1). */
tl_status tl_avg_pool2d(const tl_tensor *input, const tl_pool2d_options *opts, tl_tensor **out);
/* grad_input [input_shape] from grad [N, C, OH, OW]: each gradient spread over its window. */
tl_status tl_avg_pool2d_backward(const tl_tensor *grad, const int64_t input_shape[4],
                                 const tl_pool2d_options *opts, tl_tensor **grad_input);
tl_status tl_ag_avg_pool2d(tl_tensor *input, const tl_pool2d_options *opts, tl_tensor **out);
/* adaptive_avg_pool2d: the means over adaptive_max_pool2d's windows. */
tl_status tl_adaptive_avg_pool2d(const tl_tensor *input, int64_t out_h, int64_t out_w,
                                 tl_tensor **out);
tl_status tl_adaptive_avg_pool2d_backward(const tl_tensor *grad, const int64_t input_shape[4],
                                          tl_tensor **grad_input);
tl_status tl_ag_adaptive_avg_pool2d(tl_tensor *input, int64_t out_h, int64_t out_w,
                                    tl_tensor **out);

/* ---- interpolate -----------------------------------------------------------------------------
   input [N, C, H, W] -> [N, C, OH, OW]: OH = size_h when > 0, else floor(H * scale_h) (scale > 0,
   a result >= 1); scales given are used as PyTorch uses them (the source step is 1 / scale),
   else the step is H / OH. nearest: output o reads min(floor(o * step), H - 1) (in float);
   bilinear: align_corners maps the corner pixels' centres onto each other. */
typedef enum tl_interpolate_mode {
    TL_INTERPOLATE_NEAREST,
    TL_INTERPOLATE_BILINEAR
} tl_interpolate_mode;
typedef struct tl_interpolate_options {
    tl_interpolate_mode mode;
    int64_t size_h, size_w;  /* 0: from the scale */
    double scale_h, scale_w; /* 0: none */
    bool align_corners;      /* bilinear only */
} tl_interpolate_options;
tl_status tl_interpolate(const tl_tensor *input, const tl_interpolate_options *opts,
                         tl_tensor **out);
/* grad_input [input_shape] from grad [N, C, OH, OW] (OH, OW as the forward made them). */
tl_status tl_interpolate_backward(const tl_tensor *grad, const int64_t input_shape[4],
                                  const tl_interpolate_options *opts, tl_tensor **grad_input);
tl_status tl_ag_interpolate(tl_tensor *input, const tl_interpolate_options *opts, tl_tensor **out);

/* ---- block_sparse_linear -------------------------------------------------------------------
   y [..., R*b] = x [..., C*b] @ W^T + bias with W [R*b, C*b] held as blocks [nnz, b, b] on the
   pattern that layout indexes (tlua/block_layout.h); bias [R*b] may be NULL. The layout's
   contents are checked on every CPU call; on a GPU tl_block_layout_validate checks them
   (copying them to the host), and the kernels never read outside any tensor whatever an
   index says. */
tl_status tl_block_sparse_linear(const tl_tensor *x, const tl_tensor *blocks,
                                 const tl_block_layout *layout, const tl_tensor *bias,
                                 tl_tensor **out);
/* grad_input [..., C*b] = grad [..., R*b] @ W (dense x sparse). */
tl_status tl_block_sparse_linear_backward_input(const tl_tensor *grad, const tl_tensor *blocks,
                                                const tl_block_layout *layout,
                                                tl_tensor **grad_input);
/* grad_blocks [nnz, block, block]: block e = grad[:, its row]^T @ x[:, its column], over all
   leading dims (dense x dense sampled on the pattern). The bias's is tl_linear_backward_bias. */
tl_status tl_block_sparse_linear_backward_weight(const tl_tensor *grad, const tl_tensor *x,
                                                 const tl_block_layout *layout, int64_t block,
                                                 tl_tensor **grad_blocks);
/* Shapes, dtype, device and every index of a layout of nnz blocks against the others. */
tl_status tl_block_layout_validate(const tl_block_layout *layout, int64_t nnz);
/* Recording form: one node; backward runs only the kernels of the inputs that need grad. */
tl_status tl_ag_block_sparse_linear(tl_tensor *x, tl_tensor *blocks, const tl_block_layout *layout,
                                    tl_tensor *bias, tl_tensor **out);

/* ---- scaled_dot_product_attention ---------------------------------------------------------
   q [..., T, D], k [..., S, D], v [..., S, D] (the same leading dims, none or more; one dtype and
   device; floating) -> out [..., T, D] (contiguous) = softmax(scale q k^T) v per leading index,
   fused: no [T, S] matrix is ever made (the kernels run an online softmax over tiles).
   causal: query i sees keys j <= i (PyTorch's top-left alignment: with T > S, rows past S see
   every key). dropout p in [0, 1): the softmax's element (.., i, j) is kept, times 1 / (1 - p),
   when the float32 uniform tl_rand would draw for element ((..) T + i) S + j of [..., T, S] is
   >= p: after tl_manual_seed(s) the mask is tl_rand([..., T, S]) >= p, and the op takes those
   numbers from the global stream as that rand would. T or S or D zero: no kernel (S zero gives
   zeros). */
typedef struct tl_attention_options {
    double scale;   /* > 0; 0 means 1 / sqrt(D); negative, NaN or inf is refused */
    bool causal;    /* key j visible to query i only when j <= i */
    double dropout; /* in [0, 1) */
} tl_attention_options;
/* opts may be NULL: scale 1 / sqrt(D), not causal, no dropout. */
tl_status tl_scaled_dot_product_attention(const tl_tensor *q, const tl_tensor *k,
                                          const tl_tensor *v, const tl_attention_options *opts,
                                          tl_tensor **out);
/* The same, also giving what the backward reads: lse [..., T] (float32, float64 for float64
   inputs; may be NULL) = each query's logsumexp of its scaled, masked scores (before dropout;
   -inf when S is 0; 0 when D is 0, out being empty), and the dropout mask's Philox stream (seed,
   counter; each may be NULL, 0 without dropout). */
tl_status tl_scaled_dot_product_attention_lse(const tl_tensor *q, const tl_tensor *k,
                                              const tl_tensor *v, const tl_attention_options *opts,
                                              tl_tensor **out, tl_tensor **lse, uint64_t *seed,
                                              uint64_t *counter);
/* grad_q [..., T, D], grad_k, grad_v [..., S, D] (each may be NULL when not wanted) from grad
   [..., T, D] (out's gradient) and the forward's q, k, v, out, lse, options and stream: the
   same mask is drawn again from (seed, counter). */
tl_status tl_scaled_dot_product_attention_backward(const tl_tensor *grad, const tl_tensor *q,
                                                   const tl_tensor *k, const tl_tensor *v,
                                                   const tl_tensor *out, const tl_tensor *lse,
                                                   const tl_attention_options *opts, uint64_t seed,
                                                   uint64_t counter, tl_tensor **grad_q,
                                                   tl_tensor **grad_k, tl_tensor **grad_v);
/* Recording form (autograd/attention.c): one node saving q, k, v, out, lse and the stream;
   backward runs the backward kernel once for the gradients needed. */
tl_status tl_ag_scaled_dot_product_attention(tl_tensor *q, tl_tensor *k, tl_tensor *v,
                                             const tl_attention_options *opts, tl_tensor **out);

/* ---- index range checks (tl_index_range and its message: tlua/error.h) ------------------- */
/* Checks every element of indices (int32 or int64, any shape). On the CPU the error is raised
   at once, at the first offending position. On CUDA the check is queued on the device's
   stream, like the kernels that read the indices, and a failure is raised by the next
   synchronization with that device (tl_cuda_synchronize, a copy to the host such as tl_item;
   an offending position, not necessarily the first): the host never waits for a check, and a
   kernel given an out-of-range index reads zeros (or NaN) in its place. With
   tl_set_sync_checks(true) a CUDA check waits and raises at once, as on the CPU. */
tl_status tl_check_index_range(const tl_tensor *indices, const tl_index_range *range);

/* ---- embedding -----------------------------------------------------------------------------
   indices (int64 or int32, any shape, values in [0, V)), weight [V, D] -> out [..., D]. An
   index out of range is an error naming it and V (tl_check_index_range: on CUDA raised by the
   next synchronization, the row read as zeros). */
tl_status tl_embedding(const tl_tensor *indices, const tl_tensor *weight, tl_tensor **out);
/* grad_weight [num_weights, D]: the rows of grad [..., D] summed per index, in order. */
tl_status tl_embedding_backward(const tl_tensor *grad, const tl_tensor *indices,
                                int64_t num_weights, tl_tensor **grad_weight);
tl_status tl_ag_embedding(tl_tensor *indices, tl_tensor *weight, tl_tensor **out);

/* ---- cross_entropy -------------------------------------------------------------------------
   logits [N, C], target (int64 or int32 [N], classes in [0, C)), label_smoothing in [0, 1]
   -> loss (0-dim, logits' dtype): the mean over rows of -sum_c q_c log_softmax(logits)_c with
   q = (1 - label_smoothing) onehot(target) + label_smoothing / C (torch's cross_entropy).
   log_sum_exp (may be NULL): each row's log(sum(exp(logits))), [N], float32 (float64 for
   float64 logits), what the backward reads. */
tl_status tl_cross_entropy(const tl_tensor *logits, const tl_tensor *target, double label_smoothing,
                           tl_tensor **loss, tl_tensor **log_sum_exp);
/* grad_logits [N, C] = (softmax(logits) - q) * grad / N, grad the loss's gradient (one
   element). */
tl_status tl_cross_entropy_backward(const tl_tensor *grad, const tl_tensor *logits,
                                    const tl_tensor *target, const tl_tensor *log_sum_exp,
                                    double label_smoothing, tl_tensor **grad_logits);
tl_status tl_ag_cross_entropy(tl_tensor *logits, tl_tensor *target, double label_smoothing,
                              tl_tensor **loss);

/* ---- linear_cross_entropy ------------------------------------------------------------------
   The classifier's loss without its [N, V] logits: the reduction over rows i of
   cross_entropy(input_i weight^T + bias, target_i), label smoothing as tl_cross_entropy's, a row
   whose target is ignore_index (when has_ignore) counting for nothing ("mean" divides by the
   rows kept). It runs in chunks of chunk_rows rows (0: as many as keep a chunk's logits near 256
   MiB): a GEMM writes the chunk's logits into one buffer (on CUDA its rows padded to a multiple of
   64 classes, so every GEMM is aligned), the row kernel reduces them to row losses and, when
   gradients are asked for, overwrites them with their gradient, from which the split linear GEMM
   kernels make the chunk's rows of grad input and add its share of grad weight and grad bias. The
   gradients (of the loss, for a loss gradient of 1) come out of the forward pass; the recording
   form scales them by the loss's gradient in backward.
   input [..., C] floating, weight [V, C] and bias [V] (or NULL) of input's dtype, target int32 or
   int64 of input's shape without the last dim (classes counting from target_base: in
   [target_base, target_base + V), or ignore_index; C callers count from 0, Lua from 1). loss:
   0-dim, float32 (float64 for float64 input); grads (NULL: none): each asked for comes out in its
   tensor's dtype and shape (the weight's and bias's gradients accumulate in float32). */
typedef enum tl_reduction { TL_REDUCTION_MEAN, TL_REDUCTION_SUM } tl_reduction;
typedef struct tl_linear_cross_entropy_options {
    double label_smoothing;
    tl_reduction reduction;
    bool has_ignore;
    int64_t ignore_index; /* compared with the target as given */
    int64_t chunk_rows;
    int64_t target_base;
} tl_linear_cross_entropy_options;
typedef struct tl_linear_cross_entropy_grads {
    bool want_input, want_weight, want_bias; /* asked */
    bool params_float32; /* the weight's and bias's gradients in float32 (autocast's parameters) */
    tl_tensor *input, *weight, *bias; /* given: new references (NULL where not asked) */
} tl_linear_cross_entropy_grads;
tl_status tl_linear_cross_entropy(const tl_tensor *input, const tl_tensor *weight,
                                  const tl_tensor *bias, const tl_tensor *target,
                                  const tl_linear_cross_entropy_options *options, tl_tensor **loss,
                                  tl_linear_cross_entropy_grads *grads);
/* Recorded: the gradients of the inputs that require one are made in the forward pass and
   saved; backward scales them by the loss's gradient. Under autocast input, weight and bias take
   the autocast dtype (the GEMM family's rule); the weight and bias casts are not recorded (as
   linear's): their float32 gradients come straight from the float32 sums. */
tl_status tl_ag_linear_cross_entropy(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                                     tl_tensor *target,
                                     const tl_linear_cross_entropy_options *options,
                                     tl_tensor **loss);

/* ---- layer_norm ----------------------------------------------------------------------------
   Over the last dim D of input [..., D]: out = (x - mean) / sqrt(var + eps) * weight + bias
   (biased variance; weight, bias [D] or NULL). mean, rstd (each may be NULL): input's shape
   without the last dim, float32 (float64 for float64 input), what the backward reads. */
tl_status tl_layer_norm(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                        double eps, tl_tensor **out, tl_tensor **mean, tl_tensor **rstd);
/* The same with out in dtype: input's, or bfloat16 or float16 for a float32 input (mixed
   precision: computed in float32 and rounded once, what a float32 layer norm followed by a cast
   gives, without the cast's pass; autocast's bf16 activations). */
tl_status tl_layer_norm_as(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                           double eps, tl_dtype dtype, tl_tensor **out, tl_tensor **mean,
                           tl_tensor **rstd);
/* The input's gradient (rstd * (gw - mean(gw) - xhat * mean(gw * xhat)), gw = grad * weight),
   plus grad_sum when given (add_layer_norm: the gradient of its sum, which reaches both its
   input and its residual; NULL adds nothing). input is the tensor normalized (add_layer_norm's
   sum). */
tl_status tl_layer_norm_backward_input(const tl_tensor *grad, const tl_tensor *grad_sum,
                                       const tl_tensor *input, const tl_tensor *mean,
                                       const tl_tensor *rstd, const tl_tensor *weight,
                                       tl_tensor **grad_input);
/* grad_weight = sum over rows of grad * (x - mean) * rstd, grad_bias = sum of grad's rows;
   pass NULL for the one not wanted (input, mean and rstd may be NULL without grad_weight). */
tl_status tl_layer_norm_backward_weight(const tl_tensor *grad, const tl_tensor *input,
                                        const tl_tensor *mean, const tl_tensor *rstd,
                                        tl_tensor **grad_weight, tl_tensor **grad_bias);
/* Both in one pass over the rows (one read of grad and input): grad_input as
   tl_layer_norm_backward_input, grad_weight and grad_bias as tl_layer_norm_backward_weight
   (either may be NULL, not both). Faster than the two when the input's and the weight's
   gradients are both wanted. */
tl_status tl_layer_norm_backward(const tl_tensor *grad, const tl_tensor *grad_sum,
                                 const tl_tensor *input, const tl_tensor *mean,
                                 const tl_tensor *rstd, const tl_tensor *weight,
                                 tl_tensor **grad_input, tl_tensor **grad_weight,
                                 tl_tensor **grad_bias);
/* tl_layer_norm_backward (or _input when neither grad_weight nor grad_bias is asked) for
   add_layer_norm in mixed precision: grad may be in the output's 16-bit type over a float32
   input, and grad_residual (may be NULL) gets grad_input again in residual_dtype (the input's,
   or a 16-bit type for a float32 input: the residual's), written in the same pass. */
tl_status tl_layer_norm_backward_as(const tl_tensor *grad, const tl_tensor *grad_sum,
                                    const tl_tensor *input, const tl_tensor *mean,
                                    const tl_tensor *rstd, const tl_tensor *weight,
                                    tl_dtype residual_dtype, tl_tensor **grad_input,
                                    tl_tensor **grad_residual, tl_tensor **grad_weight,
                                    tl_tensor **grad_bias);
tl_status tl_ag_layer_norm(tl_tensor *input, tl_tensor *weight, tl_tensor *bias, double eps,
                           tl_tensor **out);
/* Recorded tl_layer_norm_as (under autocast a 16-bit input is first cast to float32, as
   tl_ag_layer_norm's; out is then in dtype). */
tl_status tl_ag_layer_norm_as(tl_tensor *input, tl_tensor *weight, tl_tensor *bias, double eps,
                              tl_dtype dtype, tl_tensor **out);
/* In place: x <- layer_norm(x, weight, bias, eps) (the conditions of tlua/ops.h's in-place
   ops); mean and rstd (each may be NULL) as above. A non-contiguous x is normalised through a
   contiguous copy written back. */
tl_status tl_layer_norm_(tl_tensor *x, const tl_tensor *weight, const tl_tensor *bias, double eps,
                         tl_tensor **mean, tl_tensor **rstd);
/* Recorded: its backward recovers the normalised input from the output, (y - bias) / weight,
   with the saved mean and rstd (a weight with zeros cannot be inverted: backward then fails
   naming the op). */
tl_status tl_ag_layer_norm_(tl_tensor *x, tl_tensor *weight, tl_tensor *bias, double eps);

/* ---- add_layer_norm ------------------------------------------------------------------------
   The residual add of a pre-norm transformer fused with the next layer norm: sum = input +
   residual (same shape and device), out = layer_norm(sum, weight, bias, eps), in one pass.
   sum, mean and rstd (each may be NULL) as layer_norm's; the backward is layer_norm's of sum,
   whose input gradient (with the sum's own gradient added) is both input's and residual's.
   input and residual may differ in dtype: the sum and out are in the promoted one (as input +
   residual), and a float32 input with a bfloat16 or float16 residual (a 16-bit branch added to
   a float32 residual stream) reads the residual as it is, without a cast's pass. */
tl_status tl_add_layer_norm(const tl_tensor *input, const tl_tensor *residual,
                            const tl_tensor *weight, const tl_tensor *bias, double eps,
                            tl_tensor **out, tl_tensor **sum, tl_tensor **mean, tl_tensor **rstd);
/* The same with out in dtype (the sum's dtype, or a 16-bit type for a float32 sum, as
   tl_layer_norm_as). */
tl_status tl_add_layer_norm_as(const tl_tensor *input, const tl_tensor *residual,
                               const tl_tensor *weight, const tl_tensor *bias, double eps,
                               tl_dtype dtype, tl_tensor **out, tl_tensor **sum, tl_tensor **mean,
                               tl_tensor **rstd);
/* Recorded: out and sum are both outputs (either may be used later); backward runs one kernel
   (tl_layer_norm_backward) when input or residual and weight or bias want gradients. */
tl_status tl_ag_add_layer_norm(tl_tensor *input, tl_tensor *residual, tl_tensor *weight,
                               tl_tensor *bias, double eps, tl_tensor **out, tl_tensor **sum);
/* Recorded tl_add_layer_norm_as. Under autocast a 16-bit input or residual is cast to float32
   as layer_norm's, except a residual in the autocast dtype beside a float32 input: the kernel
   reads it as it is, and its gradient comes back in its dtype from the same pass. */
tl_status tl_ag_add_layer_norm_as(tl_tensor *input, tl_tensor *residual, tl_tensor *weight,
                                  tl_tensor *bias, double eps, tl_dtype dtype, tl_tensor **out,
                                  tl_tensor **sum);

/* ---- batch_norm ----------------------------------------------------------------------------
   Per channel c (dim 1) of input [N, C, ...] (ndim >= 2, any trailing dims), over its M = N *
   (trailing sizes) elements: out = (x - mean) * invstd * weight + bias, invstd = 1 / sqrt(var +
   eps) (weight, bias [C] or NULL; any floating dtype: they compute in the statistics dtype,
   float32, float64 for float64 input). training: the batch's mean and biased variance (M > 1,
   or M == 0: an empty output, NaN statistics), and running_mean and running_var (both [C] of
   a floating dtype, or both NULL) move in place: r = (1 - momentum) r + momentum s, s the batch
   mean and unbiased variance (momentum in [0, 1], the caller's factor: a cumulative average
   passes 1 / batches). Not training: the running statistics (required) normalize. save_mean,
   save_invstd (each may be NULL): [C] in the statistics dtype, the mean and invstd used, what
   the backward reads. */
tl_status tl_batch_norm(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                        tl_tensor *running_mean, tl_tensor *running_var, bool training,
                        double momentum, double eps, tl_tensor **out, tl_tensor **save_mean,
                        tl_tensor **save_invstd);
/* sum_dy = grad summed per channel, sum_dy_xhat = grad * (x - mean) * invstd summed per
   channel ([C], statistics dtype); pass NULL for the one not wanted (input, mean and invstd may
   be NULL without sum_dy_xhat). They are the bias's and the weight's gradients. */
tl_status tl_batch_norm_backward_reduce(const tl_tensor *grad, const tl_tensor *input,
                                        const tl_tensor *mean, const tl_tensor *invstd,
                                        tl_tensor **sum_dy, tl_tensor **sum_dy_xhat);
/* The input's gradient: with sum_dy and sum_dy_xhat (a forward on the batch's statistics)
   weight * invstd * (grad - sum_dy / M - xhat * sum_dy_xhat / M), xhat = (x - mean) * invstd;
   with both NULL (on the running statistics) grad * invstd * weight. weight may be NULL. */
tl_status tl_batch_norm_backward_input(const tl_tensor *grad, const tl_tensor *input,
                                       const tl_tensor *mean, const tl_tensor *invstd,
                                       const tl_tensor *weight, const tl_tensor *sum_dy,
                                       const tl_tensor *sum_dy_xhat, tl_tensor **grad_input);
/* Recorded (input, weight and bias differentiable; the running statistics are updated as
   tl_batch_norm does, outside the graph). */
tl_status tl_ag_batch_norm(tl_tensor *input, tl_tensor *weight, tl_tensor *bias,
                           tl_tensor *running_mean, tl_tensor *running_var, bool training,
                           double momentum, double eps, tl_tensor **out);
/* ---- lstm_cell_pointwise, gru_cell_pointwise -----------------------------------------------
   The pointwise part of one LSTM step, fused: gates [..., 4H] (x W_ih^T + b_ih + h W_hh^T + b_hh;
   gates2, when not NULL, of gates' shape, is added to it: the two projections apart), c_prev
   [..., H] (the leading dims of gates), all of one floating dtype and device (16-bit dtypes
   compute in float32) -> h, c [..., H] with torch's gate order i, f, g, o:
   c = sigmoid(f) c_prev + sigmoid(i) tanh(g), h = sigmoid(o) tanh(c). workspace (may be NULL):
   the activated gates [..., 4H], what the backward reads. */
tl_status tl_lstm_cell_pointwise(const tl_tensor *gates, const tl_tensor *gates2,
                                 const tl_tensor *c_prev, tl_tensor **h, tl_tensor **c,
                                 tl_tensor **workspace);
/* grad_gates [..., 4H] (the gradient of gates, and of gates2) and grad_c_prev (may be NULL: not
   computed) from the gradients of h (grad_h + grad_h2) and of c, each of them NULL for zero,
   with the forward's workspace, c_prev and c. */
tl_status tl_lstm_cell_pointwise_backward(const tl_tensor *grad_h, const tl_tensor *grad_h2,
                                          const tl_tensor *grad_c, const tl_tensor *workspace,
                                          const tl_tensor *c_prev, const tl_tensor *c,
                                          tl_tensor **grad_gates, tl_tensor **grad_c_prev);
tl_status tl_ag_lstm_cell_pointwise(tl_tensor *gates, tl_tensor *gates2, tl_tensor *c_prev,
                                    tl_tensor **h, tl_tensor **c);
/* The pointwise part of one GRU step, fused: gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh
   [..., 3H], h_prev [..., H] -> h [..., H] with torch's gates r, z, n: r = sigmoid(gi_r + gh_r),
   z = sigmoid(gi_z + gh_z), n = tanh(gi_n + r gh_n), h = (1 - z) n + z h_prev. workspace (may be
   NULL): r, z, n and gh_n [..., 4H], what the backward reads. */
tl_status tl_gru_cell_pointwise(const tl_tensor *gi, const tl_tensor *gh, const tl_tensor *h_prev,
                                tl_tensor **h, tl_tensor **workspace);
/* The gradients of gi, gh [..., 3H] and h_prev (its direct part, z grad; each output NULL: not
   computed) from the gradient of h (grad_h + grad_h2, grad_h2 may be NULL), the workspace and
   h_prev. */
tl_status tl_gru_cell_pointwise_backward(const tl_tensor *grad_h, const tl_tensor *grad_h2,
                                         const tl_tensor *workspace, const tl_tensor *h_prev,
                                         tl_tensor **grad_gi, tl_tensor **grad_gh,
                                         tl_tensor **grad_h_prev);
tl_status tl_ag_gru_cell_pointwise(tl_tensor *gi, tl_tensor *gh, tl_tensor *h_prev, tl_tensor **h);

/* ---- lstm_layer: one LSTM direction over a sequence (not recorded: nn.LSTM's fused runs) --------
   xw [T, N, 4H] (x W_ih^T + b_ih + b_hh of every step), h0, c0 [N, H], w_hh [4H, H], one floating
   dtype and device; reverse walks from the last step to the first. Per step (in the walk's order)
   gates = xw[t] + h W_hh^T, then lstm_cell_pointwise: out [T, N, H] the h of every step (time
   order), h_last and c_last the walk's last state, workspaces [T, N, 4H] and cells [T, N, H]
   what the backward reads. */
tl_status tl_lstm_layer_forward(tl_tensor *xw, tl_tensor *h0, tl_tensor *c0, tl_tensor *w_hh,
                                bool reverse, tl_tensor **out, tl_tensor **h_last,
                                tl_tensor **c_last, tl_tensor **workspaces, tl_tensor **cells);
/* The gradients of xw (grad_gates [T, N, 4H]), h0 and c0 from those of out, h_last and c_last
   (each NULL for zero), walking the steps back: per step the cell's fused backward, then
   dh = grad_gates[t] W_hh. W_hh's gradient (sum over steps of grad_gates[t]^T h_prev) is one GEMM
   the caller makes. */
tl_status tl_lstm_layer_backward(tl_tensor *grad_out, tl_tensor *grad_h, tl_tensor *grad_c,
                                 tl_tensor *workspaces, tl_tensor *cells, tl_tensor *c0,
                                 tl_tensor *w_hh, bool reverse, tl_tensor **grad_gates,
                                 tl_tensor **grad_h0, tl_tensor **grad_c0);

/* ---- rnn_dnn: nn.LSTM / GRU / RNN on cuDNN (CUDA only) ------------------------------------
   mode: 0 LSTM, 1 GRU, 2 tanh, 3 relu (torch's gate orders: the weight space holds torch's
   w_ih, w_hh, b_ih, b_hh of each layer and direction at the layout's offsets); training keeps
   the reserve the backward reads. float32, float64 and float16. */
typedef struct tl_rnn_dnn_options {
    int mode;
    int64_t hidden_size, num_layers;
    bool bidirectional, training;
} tl_rnn_dnn_options;
/* The weight space of the problem: *numel its elements, offsets (int64 [num_layers * dirs,
   2 * gates, 2] on the CPU) the element offset of each of cuDNN's matrices and biases (the
   input's gates in order, then the hidden state's; -1 for none). */
tl_status tl_rnn_dnn_layout(const tl_rnn_dnn_options *o, int64_t input_size, tl_dtype dtype,
                            tl_device device, int64_t *numel, tl_tensor **offsets);
/* x [T, N, I], hx [L * dirs, N, H], cx (the LSTM's; else ignored), weight (1-dim, the
   layout's numel), all of x's dtype and device -> y [T, N, dirs * H], hy, cy (LSTM; may be
   NULL), reserve (training; may be NULL). */
tl_status tl_rnn_dnn(const tl_tensor *x, const tl_tensor *hx, const tl_tensor *cx,
                     const tl_tensor *weight, const tl_rnn_dnn_options *o, tl_tensor **y,
                     tl_tensor **hy, tl_tensor **cy, tl_tensor **reserve);
/* The gradients of x, hx, cx (may be NULL) and, when dweight is not NULL, of the weight space,
   from dy and dhy, dcy (either NULL: zero), after a training forward of these x, hx, cx, weight,
   y and reserve; cuDNN changes the reserve: one backward per forward. */
tl_status tl_rnn_dnn_backward(const tl_tensor *x, const tl_tensor *hx, const tl_tensor *cx,
                              const tl_tensor *weight, const tl_tensor *y, const tl_tensor *reserve,
                              const tl_tensor *dy, const tl_tensor *dhy, const tl_tensor *dcy,
                              const tl_rnn_dnn_options *o, tl_tensor **dx, tl_tensor **dhx,
                              tl_tensor **dcx, tl_tensor **dweight);

/* ---- dropout -------------------------------------------------------------------------------
   x (floating, any strides), p in [0, 1] -> out = x * keep / (1 - p), x's shape and dtype,
   contiguous, in one kernel: element e (x's row-major index) is kept when the float32 uniform
   that tl_rand draws for element e of the global stream is >= p, the kernel drawing it itself
   (ceil(n / 4) Philox blocks reserved: after tl_manual_seed(s), keep = tl_rand(x's shape) >= p).
   A dropped element is x * 0 (a NaN stays NaN). p = 0: *out is x itself (a new reference);
   p = 1: x * 0; neither draws. seed, counter (each may be NULL) get the stream the mask came
   from, which backward needs. */
tl_status tl_dropout(const tl_tensor *x, double p, tl_tensor **out, uint64_t *seed,
                     uint64_t *counter);
/* grad_input = grad * keep / (1 - p) with the mask of the stream (seed, counter): the forward's
   kernel on the gradient (grad of the forward's shape; p = 0: grad itself). */
tl_status tl_dropout_backward(const tl_tensor *grad, double p, uint64_t seed, uint64_t counter,
                              tl_tensor **grad_input);
/* Recorded: the node keeps p and the stream, no tensor. p = 0 returns x, recording nothing. */
tl_status tl_ag_dropout(tl_tensor *x, double p, tl_tensor **out);
/* In place: x <- dropout(x, p) (the conditions of tlua/ops.h's in-place ops), the same mask as
   tl_dropout's; p = 0 leaves x as it is. */
tl_status tl_dropout_(tl_tensor *x, double p, uint64_t *seed, uint64_t *counter);
tl_status tl_ag_dropout_(tl_tensor *x, double p);

/* ---- optimizer steps: in place, one fused pass, no autograd; bump the versions of what they
   write. param, grad and the state tensors: same shape, dtype and device; param and state
   contiguous. Update rules of torch.optim (maximize = false). -------------------------------- */
/* torch.optim.SGD. momentum_buffer may be NULL when momentum == 0; first_step: the buffer is
   set to the (decayed) gradient instead of being updated. nesterov needs momentum > 0 and
   dampening == 0. */
tl_status tl_sgd_step(tl_tensor *param, const tl_tensor *grad, tl_tensor *momentum_buffer,
                      double lr, double momentum, double dampening, double weight_decay,
                      bool nesterov, bool first_step);
/* torch.optim.Adam (decoupled = false: L2 weight decay added to the gradient) or AdamW
   (decoupled = true: param *= 1 - lr * weight_decay), amsgrad = false; step counts from 1
   (this step included). */
tl_status tl_adam_step(tl_tensor *param, const tl_tensor *grad, tl_tensor *exp_avg,
                       tl_tensor *exp_avg_sq, int64_t step, double lr, double beta1, double beta2,
                       double eps, double weight_decay, bool decoupled);
/* tl_adam_step over n parameters at once: one kernel (adam_step_multi, traced with shapes [n]
   and [elements]) for all of them, which share the hyper-parameters and the step count. Every
   tensor contiguous (grads may be strided) and on one device; params[i] floating (dtypes may
   differ), grads[i] of its shape and dtype; exp_avg[i], exp_avg_sq[i] of its shape, float64 for
   a float64 param, else float32. master may be NULL, or master[i] NULL, or a float32 copy of a
   bfloat16/float16 params[i] (its shape): the step then runs on the master and params[i]
   becomes the new master rounded to its dtype. Written tensors must not share memory. Everything
   is checked before anything is written; messages name the parameter, counting from 1. */
tl_status tl_adam_step_multi(tl_tensor *const *params, const tl_tensor *const *grads,
                             tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                             tl_tensor *const *master, int64_t n, int64_t step, double lr,
                             double beta1, double beta2, double eps, double weight_decay,
                             bool decoupled);
/* tl_adam_step_multi with lr and step read from hyper, a contiguous float64 tensor of shape [2]
   ({lr, step}) on the params' device: on a GPU the kernel reads them (no host wait: a step
   captured in a CUDA graph reads, at each replay, what the host wrote there before it); on the
   CPU they are checked as the numbers of tl_adam_step_multi are. */
tl_status tl_adam_step_multi_hyper(tl_tensor *const *params, const tl_tensor *const *grads,
                                   tl_tensor *const *exp_avg, tl_tensor *const *exp_avg_sq,
                                   tl_tensor *const *master, int64_t n, const tl_tensor *hyper,
                                   double beta1, double beta2, double eps, double weight_decay,
                                   bool decoupled);
/* torch.nn.utils.clip_grad_norm_ over n gradients at once, in place, no autograd: *total (new,
   0-dim, on the grads' device; float32, or float64 when every grad is float64) = the norm_type
   norm (a number >= 1, or INFINITY) of all the grads together; every grad is then scaled by
   coef = max_norm / (total + 1e-6) when coef < 1 or NaN (torch's clamp(coef, max = 1): a NaN or
   infinite total gives NaN or zero gradients). One kernel (clip_grad_norm_multi, traced with
   shapes [n] and [elements]); on CUDA a few launches whatever n is and no host synchronization.
   grads: floating (dtypes may differ), contiguous, on one device, none sharing memory, any may be
   empty; max_norm > 0. n = 0 gives a float32 0 on the CPU. Everything is checked before
   anything is written; messages name the grad, counting from 1. */
tl_status tl_clip_grad_norm_multi(tl_tensor *const *grads, int64_t n, double max_norm,
                                  double norm_type, tl_tensor **total);
/* The checks of a step, and nothing else: an optimizer checks every parameter before it steps
   any. A state tensor may be NULL (a first step creates it); the messages are the step's. */
tl_status tl_sgd_step_check(const tl_tensor *param, const tl_tensor *grad,
                            const tl_tensor *momentum_buffer, double lr, double momentum,
                            double dampening, double weight_decay, bool nesterov);
tl_status tl_adam_step_check(const tl_tensor *param, const tl_tensor *grad,
                             const tl_tensor *exp_avg, const tl_tensor *exp_avg_sq, int64_t step,
                             double lr, double beta1, double beta2, double eps, double weight_decay,
                             bool decoupled);

#ifdef __cplusplus
}
#endif

#endif
