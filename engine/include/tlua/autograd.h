/* Autograd: gradient-recording versions of the ops (tl_ag_*), backward, no_grad. */
#ifndef TLUA_AUTOGRAD_H
#define TLUA_AUTOGRAD_H

#include <stdbool.h>

#include "tlua/nn.h"
#include "tlua/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- per-tensor state ---------------------------------------------------- */
/* Marks a leaf as requiring grad (floating dtypes only). */
tl_status tl_set_requires_grad(tl_tensor *t, bool requires_grad);
bool tl_requires_grad(const tl_tensor *t);
/* True for tensors not produced by a recorded op. */
bool tl_is_leaf(const tl_tensor *t);
/* The accumulated gradient (borrowed, NULL when none). */
tl_tensor *tl_grad(const tl_tensor *t);
/* Replaces the gradient (NULL clears it); grad must match t's shape and device. */
tl_status tl_set_grad(tl_tensor *t, tl_tensor *grad);
/* The name of the op that produced t ("mul"), or NULL for a leaf. */
const char *tl_grad_fn_name(const tl_tensor *t);
/* A new tensor sharing t's storage, outside the graph. */
tl_status tl_detach(tl_tensor *t, tl_tensor **out);
/* A leaf's "gradient ready" hook: backward calls fn(user, t) once per pass, after the last
   gradient that pass has for t was accumulated into t's grad (so grad is final for the pass;
   fn may read it and queue work on it). An error from fn stops the backward with that error.
   One hook per tensor: a new one replaces (and releases) the old; fn NULL removes it. release
   (may be NULL) frees user when the hook is replaced or t is freed, also on failure. */
typedef tl_status (*tl_grad_ready_fn)(void *user, tl_tensor *t);
typedef void (*tl_grad_ready_release)(void *user);
tl_status tl_set_grad_ready_hook(tl_tensor *t, tl_grad_ready_fn fn, void *user,
                                 tl_grad_ready_release release);

/* A tensor's gradient hook: each backward (and tl_autograd_grad) calls fn(user, grad,
   &replacement) with the whole gradient of t in that pass, before it is used: a leaf's before
   it is added into t's grad, a non-leaf's before the op that made t passes it on. fn may set
   *replacement (a new reference, t's shape) to use in grad's place. Hooks run in the order they
   were added; an error from fn stops the backward with that error. *id (may be NULL) names the
   hook for tl_remove_grad_hook. release (may be NULL) frees user when the hook is removed or
   its tensor's graph is freed, also on failure. t must require grad. */
typedef tl_status (*tl_grad_hook_fn)(void *user, tl_tensor *grad, tl_tensor **replacement);
tl_status tl_add_grad_hook(tl_tensor *t, tl_grad_hook_fn fn, void *user,
                           tl_grad_ready_release release, int64_t *id);
/* Removes the hook id of t (releasing its user); false when t has no such hook. */
bool tl_remove_grad_hook(tl_tensor *t, int64_t id);

/* ---- grad mode (per thread) --------------------------------------------- */
bool tl_is_grad_enabled(void);
/* Returns the previous mode, to restore it. */
bool tl_set_grad_enabled(bool enabled);

/* ---- autocast (per thread) ----------------------------------------------- */
/* Inside an autocast region the recording ops of the GEMM family (linear, matmul, outer,
   grouped_mm, grouped_matmul, block_sparse_linear, conv2d, scaled_dot_product_attention) cast
   their float32 operands to `dtype` (bfloat16 or float16; their kernels accumulate in float32)
   and layer_norm, softmax, log_softmax and cross_entropy cast bfloat16/float16 operands to
   float32 (the AUTOCAST rows of ops.def). The casts are recorded, so a float32 parameter gets a
   float32 gradient; float64 is never cast. Backward runs with autocast off. */
typedef struct tl_autocast_state {
    bool enabled;
    tl_dtype dtype; /* TL_BF16 or TL_F16 when enabled */
} tl_autocast_state;
tl_autocast_state tl_autocast_get(void);
/* Sets the state (an error for a dtype other than bfloat16/float16 when enabled); *previous
   (may be NULL) gets the old one, to restore it. */
tl_status tl_autocast_set(tl_autocast_state state, tl_autocast_state *previous);

/* ---- backward ----------------------------------------------------------- */
/* Accumulates d(root)/d(leaf) into every leaf that requires grad: a leaf without a grad gets
   the gradient as a tensor of its own, a leaf with a contiguous grad gets it added in place (so
   a grad that is a view of a larger buffer stays one), else a new sum. grad is
   d(loss)/d(root) (NULL means 1 for a one-element root). Without
   retain_graph the graph's saved tensors are freed as it goes. */
tl_status tl_backward(tl_tensor *root, tl_tensor *grad, bool retain_graph);
/* The gradients of the roots (count of them) with respect to inputs (n_inputs of them), without
   touching any tensor's grad: out[i] = sum over the roots of d(root)/d(inputs[i]) weighted by
   grads[r] (NULL entries, or grads NULL: 1 for one-element roots), a new reference, or NULL
   when no root depends on inputs[i]. Runs only the part of the graph between the roots and the
   inputs; tensor hooks run as in tl_backward, grad-ready hooks do not. Without retain_graph the
   saved tensors of the nodes it ran are freed. Inputs may be leaves or not; each must require
   grad. With create_graph the gradients are computed by recording ops (each op's differentiable
   gradient; an op without one is an error naming it), so they have a graph of their own and can
   be differentiated again; keep retain_graph with it to differentiate through the first graph. */
tl_status tl_autograd_grad(int count, tl_tensor *const *roots, tl_tensor *const *grads,
                           int n_inputs, tl_tensor *const *inputs, bool retain_graph,
                           bool create_graph, tl_tensor **out);

/* ---- recording ops: same contract as the tl_* ops, plus the graph ------- */
tl_status tl_ag_neg(tl_tensor *a, tl_tensor **out);
tl_status tl_ag_abs(tl_tensor *a, tl_tensor **out);
tl_status tl_ag_relu(tl_tensor *a, tl_tensor **out);
/* tl_ag_<name>(a, out) and tl_ag_<name>_with(a, numbers, out) for every POINTWISE row of
   tlua/ops.def (tl_ag_exp, tl_ag_leaky_relu_with, ...; a row without a gradient records
   nothing) */
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    tl_status tl_ag_##name(tl_tensor *a, tl_tensor **out);                                         \
    tl_status tl_ag_##name##_with(tl_tensor *a, const double *numbers, tl_tensor **out);
#include "tlua/ops.def"
/* tl_ag_<name>(a, b, out) for every POINTWISE_BINARY row (tl_ag_div, ...) */
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    tl_status tl_ag_##name(tl_tensor *a, tl_tensor *b, tl_tensor **out);
#include "tlua/ops.def"
/* tl_ag_<name>_with(a, b, c, numbers, out) for every POINTWISE_TERNARY row (tl_ag_lerp_with) */
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    tl_status tl_ag_##name##_with(tl_tensor *a, tl_tensor *b, tl_tensor *c, const double *numbers, \
                                  tl_tensor **out);
#include "tlua/ops.def"
tl_status tl_ag_pow_scalar(tl_tensor *a, double exponent, tl_tensor **out);
tl_status tl_ag_clamp(tl_tensor *a, bool has_min, double min, bool has_max, double max,
                      tl_tensor **out);
tl_status tl_ag_add(tl_tensor *a, tl_tensor *b, tl_tensor **out);
tl_status tl_ag_sub(tl_tensor *a, tl_tensor *b, tl_tensor **out);
tl_status tl_ag_mul(tl_tensor *a, tl_tensor *b, tl_tensor **out);
tl_status tl_ag_pow(tl_tensor *a, tl_tensor *b, tl_tensor **out);
tl_status tl_ag_where(tl_tensor *cond, tl_tensor *a, tl_tensor *b, tl_tensor **out);
tl_status tl_ag_cast(tl_tensor *a, tl_dtype dtype, tl_tensor **out);
tl_status tl_ag_to(tl_tensor *a, tl_dtype dtype, tl_device device, tl_tensor **out);
/* The recording forms of every REDUCE_OP row's functions (tlua/ops.h) */
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    tl_status tl_ag_##name##_dims(tl_tensor *a, const int *dims, int ndims, bool keepdim,          \
                                  double number, tl_tensor **out);                                 \
    tl_status tl_ag_##name##_all(tl_tensor *a, tl_tensor **out);                                   \
    tl_status tl_ag_##name##_dim(tl_tensor *a, int dim, bool keepdim, tl_tensor **out);
#include "tlua/ops.def"
tl_status tl_ag_max_all(tl_tensor *a, tl_tensor **out);
tl_status tl_ag_min_all(tl_tensor *a, tl_tensor **out);
tl_status tl_ag_max_dim(tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                        tl_tensor **indices);
tl_status tl_ag_min_dim(tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                        tl_tensor **indices);
tl_status tl_ag_softmax(tl_tensor *a, int dim, tl_tensor **out);
tl_status tl_ag_log_softmax(tl_tensor *a, int dim, tl_tensor **out);
/* cumsum along dim; its gradient is composed of forward ops: sum(g, dim) - cumsum(g, dim) + g */
tl_status tl_ag_cumsum(tl_tensor *x, int dim, tl_tensor **out);
/* cumprod, logcumsumexp, cummax and cummin (tlua/ops.h), their gradients composed of forward ops:
   cumprod's exact with zeros, logcumsumexp's in the log domain, cummax's and cummin's g scattered
   back to the indices */
tl_status tl_ag_cumprod(tl_tensor *x, int dim, tl_tensor **out);
tl_status tl_ag_logcumsumexp(tl_tensor *x, int dim, tl_tensor **out);
tl_status tl_ag_cummax(tl_tensor *x, int dim, tl_tensor **values, tl_tensor **indices);
tl_status tl_ag_cummin(tl_tensor *x, int dim, tl_tensor **values, tl_tensor **indices);
/* cat (tlua/ops.h): each piece's gradient a view of the result's */
tl_status tl_ag_cat(tl_tensor *const *list, int n, int dim, tl_tensor **out);
/* split and unbind (tlua/ops.h) recorded as one node whose outputs are the pieces: the input's
   gradient is one buffer holding each piece's gradient in its slice (a view, without a kernel,
   when those gradients already lie side by side in one dense buffer); a piece cannot be changed
   in place while it requires grad */
tl_status tl_ag_split(tl_tensor *x, int dim, const int64_t *sizes, int n, tl_tensor **out);
tl_status tl_ag_unbind(tl_tensor *x, int dim, tl_tensor **out);
/* gather and scatter_add (tlua/ops.h): each one's gradient is the other */
tl_status tl_ag_gather(tl_tensor *x, int dim, tl_tensor *index, tl_tensor **out);
tl_status tl_ag_scatter_add(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src,
                            tl_tensor **out);
/* scatter (tlua/ops.h): x's gradient g with the written places zeroed, src's g gathered there;
   the in-place forms (scatter_, scatter_add_) record the same gradients on x's history */
tl_status tl_ag_scatter(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src, tl_tensor **out);
tl_status tl_ag_scatter_value(tl_tensor *x, int dim, tl_tensor *index, tl_scalar value,
                              tl_tensor **out);
tl_status tl_ag_scatter_(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src);
tl_status tl_ag_scatter_value_(tl_tensor *x, int dim, tl_tensor *index, tl_scalar value);
tl_status tl_ag_scatter_add_(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src);
/* scatter_reduce (tlua/ops.h), torch's gradients: sum and mean pass g through (mean divided by
   the count), prod divides the product by each factor, amax and amin split g evenly among the
   values equal to the result (x's own only when include_self) */
tl_status tl_ag_scatter_reduce(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src,
                               const char *reduce, bool include_self, tl_tensor **out);
/* index_select as a recorded gather (its gradient a scatter_add); index_add, index_copy and
   index_fill (in place too) as recorded scatters; take and masked_select as recorded reshapes and
   gathers; masked_fill_ (x's old values get g where the mask is false, value where it is true) */
tl_status tl_ag_index_select(tl_tensor *x, int dim, tl_tensor *index, tl_tensor **out);
tl_status tl_ag_index_add(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src, double alpha,
                          tl_tensor **out);
tl_status tl_ag_index_add_(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src, double alpha);
tl_status tl_ag_index_copy(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src,
                           tl_tensor **out);
tl_status tl_ag_index_copy_(tl_tensor *x, int dim, tl_tensor *index, tl_tensor *src);
tl_status tl_ag_index_fill(tl_tensor *x, int dim, tl_tensor *index, tl_scalar value,
                           tl_tensor **out);
tl_status tl_ag_index_fill_(tl_tensor *x, int dim, tl_tensor *index, tl_scalar value);
tl_status tl_ag_take(tl_tensor *x, tl_tensor *index, tl_tensor **out);
tl_status tl_ag_masked_select(tl_tensor *x, tl_tensor *mask, tl_tensor **out);
tl_status tl_ag_masked_fill_(tl_tensor *x, tl_tensor *mask, tl_tensor *value);

/* sort, topk, kthvalue and median (tlua/ops.h) recorded: the values' gradient goes back to the
   positions the indices name (a scatter_add into zeros); the indices have none */
tl_status tl_ag_sort(tl_tensor *x, int dim, bool descending, tl_tensor **values,
                     tl_tensor **indices);
tl_status tl_ag_sort_from(tl_tensor *x, int dim, bool descending, int64_t base, tl_tensor **values,
                          tl_tensor **indices);
tl_status tl_ag_topk(tl_tensor *x, int64_t k, int dim, bool largest, tl_tensor **values,
                     tl_tensor **indices);
tl_status tl_ag_kthvalue(tl_tensor *x, int64_t k, int dim, bool keepdim, tl_tensor **values,
                         tl_tensor **indices);
tl_status tl_ag_median_dim(tl_tensor *x, int dim, bool keepdim, tl_tensor **values,
                           tl_tensor **indices);
tl_status tl_ag_median_all(tl_tensor *x, tl_tensor **out);
tl_status tl_ag_matmul(tl_tensor *a, tl_tensor *b, tl_tensor **out);
/* input [..., in], weight [out, in], bias [out] or NULL -> [..., out] */
tl_status tl_ag_linear(tl_tensor *input, tl_tensor *weight, tl_tensor *bias, tl_tensor **out);
/* linear(gelu(pre), weight, bias) (gelu's tanh form when tanh_form, else the exact one): a
   feed-forward's activation and second product as one node that keeps pre and not gelu(pre),
   which its backward makes again for the weight's gradient (the activation's memory once, not
   twice). pre [..., in]; gradients as tl_ag_linear's, pre's through gelu's derivative. */
tl_status tl_ag_gelu_linear(tl_tensor *pre, tl_tensor *weight, tl_tensor *bias, bool tanh_form,
                            tl_tensor **out);
/* linear(gelu(linear(input, weight1, bias1)), weight2, bias2) (biases may be NULL), a
   feed-forward as one node that keeps the first linear's output, not the gelu's: backward makes
   gelu's output again, and its GEMMs' epilogues make the bias gradients and (tanh form) gelu's
   derivative. Forward: gelu's kernel on the first linear's stored output, or with gelu_epilogue
   (tanh form) the first GEMM's GELU epilogue on its float32 sums (a kernel less, but in 16-bit
   dtypes the output backward makes again is then not the forward's exactly). Autocast as
   linear. */
tl_status tl_ag_linear_gelu_linear(tl_tensor *input, tl_tensor *weight1, tl_tensor *bias1,
                                   tl_tensor *weight2, tl_tensor *bias2, bool tanh_form,
                                   bool gelu_epilogue, tl_tensor **out);
/* a [n], b [m] -> [n, m] */
tl_status tl_ag_outer(tl_tensor *a, tl_tensor *b, tl_tensor **out);
/* tlua/ops.h's grouped products, recorded as one node over every group: backward runs the
   grouped input and weight gradient ops only when some input of that side needs them */
tl_status tl_ag_grouped_matmul(int count, tl_tensor *const *a, tl_tensor *const *b,
                               tl_tensor **out);
tl_status tl_ag_grouped_mm(tl_tensor *a, tl_tensor *b, tl_tensor *offsets, tl_tensor **out);
/* views */
tl_status tl_ag_view(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out);
tl_status tl_ag_reshape(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out);
tl_status tl_ag_transpose(tl_tensor *t, int dim0, int dim1, tl_tensor **out);
tl_status tl_ag_permute(tl_tensor *t, const int *dims, int ndim, tl_tensor **out);
tl_status tl_ag_narrow(tl_tensor *t, int dim, int64_t start, int64_t length, tl_tensor **out);
tl_status tl_ag_select(tl_tensor *t, int dim, int64_t index, tl_tensor **out);
tl_status tl_ag_squeeze(tl_tensor *t, int dim, tl_tensor **out);
tl_status tl_ag_squeeze_all(tl_tensor *t, tl_tensor **out);
tl_status tl_ag_unsqueeze(tl_tensor *t, int dim, tl_tensor **out);
tl_status tl_ag_expand(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out);
tl_status tl_ag_flatten(tl_tensor *t, int start_dim, int end_dim, tl_tensor **out);
tl_status tl_ag_contiguous(tl_tensor *t, tl_tensor **out);
tl_status tl_ag_clone(tl_tensor *t, tl_tensor **out);
tl_status tl_ag_diagonal(tl_tensor *t, int64_t offset, int dim1, int dim2, tl_tensor **out);
tl_status tl_ag_unfold(tl_tensor *t, int dim, int64_t size, int64_t step, tl_tensor **out);
tl_status tl_ag_movedim(tl_tensor *t, const int *from, const int *to, int n, tl_tensor **out);
/* shapes (tlua/ops.h), recorded: flip, roll, pad (constant) and diag_embed with nodes of their
   own (flip(g), roll(g, -shifts), pad(g, -pads), diagonal(g)); the others through the recorded
   ops they are made of */
tl_status tl_ag_tril(tl_tensor *x, int64_t k, tl_tensor **out);
tl_status tl_ag_triu(tl_tensor *x, int64_t k, tl_tensor **out);
tl_status tl_ag_flip(tl_tensor *x, const int *dims, int ndims, tl_tensor **out);
tl_status tl_ag_roll(tl_tensor *x, const int64_t *shifts, const int *dims, int n, tl_tensor **out);
tl_status tl_ag_tile(tl_tensor *x, const int64_t *reps, int n, tl_tensor **out);
tl_status tl_ag_repeat_interleave(tl_tensor *x, int64_t repeats, int dim, bool flatten,
                                  tl_tensor **out);
tl_status tl_ag_repeat_interleave_counts(tl_tensor *x, const tl_tensor *repeats, int dim,
                                         bool flatten, tl_tensor **out);
tl_status tl_ag_pad(tl_tensor *x, const int64_t *pads, int npads, tl_pad_mode mode, tl_scalar value,
                    tl_tensor **out);
tl_status tl_ag_diag_embed(tl_tensor *x, int64_t offset, int dim1, int dim2, tl_tensor **out);
tl_status tl_ag_diag(tl_tensor *x, int64_t k, tl_tensor **out);

/* ---- in place, recorded: same contract as tlua/ops.h's tl_<name>_, plus the graph --------
   While grad mode is on and x or an operand requires grad: x may not be a leaf that requires
   grad, nor a view of a tensor that requires grad (clone it, or change the base), nor (when x
   does not require grad yet) share its storage with other tensors; x's history then continues
   through a node of the op. add_, sub_, neg_ and matmul_ (x's gradient) save no input;
   relu_, tanh_, sigmoid_, exp_, sqrt_, softmax_ and log_softmax_ save the result (x itself,
   so a later in-place change of x fails at backward); ops whose gradient needs the old x (mul_
   and div_ with other requiring grad, gelu_, silu_, abs_, clamp_, log_, sin_, cos_, atan2_)
   save a copy of it.
   matmul_ refuses a w that requires grad (its gradient needs the overwritten x). */
tl_status tl_ag_add_(tl_tensor *x, tl_tensor *other);
tl_status tl_ag_sub_(tl_tensor *x, tl_tensor *other);
tl_status tl_ag_mul_(tl_tensor *x, tl_tensor *other);
tl_status tl_ag_neg_(tl_tensor *x);
tl_status tl_ag_abs_(tl_tensor *x);
tl_status tl_ag_relu_(tl_tensor *x);
tl_status tl_ag_clamp_(tl_tensor *x, bool has_min, double min, bool has_max, double max);
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    tl_status tl_ag_##name##_(tl_tensor *x);                                                       \
    tl_status tl_ag_##name##_with_(tl_tensor *x, const double *numbers);
#include "tlua/ops.def"
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    tl_status tl_ag_##name##_(tl_tensor *x, tl_tensor *other);
#include "tlua/ops.def"
tl_status tl_ag_softmax_(tl_tensor *x, int dim);
tl_status tl_ag_log_softmax_(tl_tensor *x, int dim);
tl_status tl_ag_matmul_(tl_tensor *x, tl_tensor *w);
/* fill_ and copy_ (tlua/tensor.h, tlua/ops.h) recorded: x's old values get no gradient, copy_'s
   src gets it */
tl_status tl_ag_fill_(tl_tensor *x, tl_scalar value);
tl_status tl_ag_copy_(tl_tensor *x, tl_tensor *src);

/* nn: tl_ag_conv2d, tl_ag_max_pool2d, ... are declared in tlua/nn.h beside their functional
   forms (included above) */

/* ---- custom functions (the Lua binding's autograd.Function) --------------
   A node whose backward is a callback: grads_out[i] is d(loss)/d(output i)
   (never NULL: zeros when an output got no gradient); it writes grads_in[j]
   for each input j with needs_input_grad[j] (NULL allowed: no gradient). */
typedef tl_status (*tl_custom_backward)(void *user, int num_outputs, tl_tensor *const *grads_out,
                                        int num_inputs, const bool *needs_input_grad,
                                        tl_tensor **grads_in);
typedef void (*tl_custom_release)(void *user);
/* Connects outputs (already computed, by any means) to inputs in the graph
   through a node named name. Takes ownership of user (release frees it,
   also on failure). Outputs that are leaves are marked as produced by it. */
tl_status tl_ag_custom(const char *name, int num_inputs, tl_tensor *const *inputs, int num_outputs,
                       tl_tensor *const *outputs, tl_custom_backward backward,
                       tl_custom_release release, void *user);

#ifdef __cplusplus
}
#endif

#endif
