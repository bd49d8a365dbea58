/* Functional ops: validate, allocate the output, dispatch to a kernel. No autograd. */
#ifndef TLUA_OPS_H
#define TLUA_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "tlua/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise, unary ------------------------------------------------- */
tl_status tl_neg(const tl_tensor *a, tl_tensor **out);
tl_status tl_abs(const tl_tensor *a, tl_tensor **out);
tl_status tl_relu(const tl_tensor *a, tl_tensor **out);

/* ---- pointwise: tl_<name>(a, out) for every POINTWISE row of tlua/ops.def (exp, log,
   sqrt, tanh, sigmoid, gelu with the exact erf form, floor, leaky_relu, isnan, ...), in the
   dtypes of the row's rule (FLOAT: floating inputs keep their dtype, integer and bool inputs
   give float32; INT: integers stay exact; BOOL_OUT: bool results; ...), and
   tl_<name>_with(a, numbers, out) with the row's numbers (numbers[i] NaN, or numbers NULL: the
   row's default; tl_leaky_relu_with(x, (double[]){0.2}, &y)) ------------------------------ */
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    tl_status tl_##name(const tl_tensor *a, tl_tensor **out);                                      \
    tl_status tl_##name##_with(const tl_tensor *a, const double *numbers, tl_tensor **out);
#include "tlua/ops.def"
/* a ^ exponent for a number exponent. */
tl_status tl_pow_scalar(const tl_tensor *a, double exponent, tl_tensor **out);
/* Clamps to [min, max]; either bound may be absent. */
tl_status tl_clamp(const tl_tensor *a, bool has_min, double min, bool has_max, double max,
                   tl_tensor **out);

/* ---- elementwise, binary, broadcasting, dtype promotion ----------------- */
tl_status tl_add(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
tl_status tl_sub(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
tl_status tl_mul(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
tl_status tl_pow(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
/* Pointwise binary: tl_<name>(a, b, out) for every POINTWISE_BINARY row of tlua/ops.def (tl_div:
   true division, tl_atan2, tl_maximum, tl_bitwise_and, ...), in the dtypes of the row's rule
   (FLOAT: integer and bool inputs give float32; INT: integers exact, an integer divisor of 0
   giving 0; BOOL_OUT: bool results; BITS: integer and bool inputs only). */
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    tl_status tl_##name(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
#include "tlua/ops.def"
/* Pointwise ternary: tl_<name>(a, b, c, out) and tl_<name>_with(a, b, c, numbers, out) for every
   POINTWISE_TERNARY row (tl_lerp(start, end, weight), tl_addcmul(x, t1, t2) with value,
   tl_clamp_tensor(x, min, max)), the three broadcast, in their common dtype by the row's rule. */
#define POINTWISE_TERNARY_OP(name, differentiable, backward, dtypes, spec)                         \
    tl_status tl_##name(const tl_tensor *a, const tl_tensor *b, const tl_tensor *c,                \
                        tl_tensor **out);                                                          \
    tl_status tl_##name##_with(const tl_tensor *a, const tl_tensor *b, const tl_tensor *c,         \
                               const double *numbers, tl_tensor **out);
#include "tlua/ops.def"
/* Comparisons give bool. */
tl_status tl_eq(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
tl_status tl_ne(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
tl_status tl_lt(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
tl_status tl_le(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
tl_status tl_gt(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
tl_status tl_ge(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
/* cond ? a : b, elementwise, all three broadcast; cond must be bool. */
tl_status tl_where(const tl_tensor *cond, const tl_tensor *a, const tl_tensor *b, tl_tensor **out);

/* ---- in place and casts ------------------------------------------------- */
tl_status tl_fill_(tl_tensor *t, tl_scalar value);
/* Copies src into dst, broadcasting src to dst's shape and casting dtypes.
   Validates everything before writing. */
tl_status tl_copy_(tl_tensor *dst, const tl_tensor *src);
/* A new tensor with dtype and device (the input, retained, if both match). */
tl_status tl_to(tl_tensor *t, tl_dtype dtype, tl_device device, tl_tensor **out);
tl_status tl_cast(tl_tensor *t, tl_dtype dtype, tl_tensor **out);

/* ---- reductions ---------------------------------------------------------
   For every REDUCE_OP row of tlua/ops.def (sum, mean, ...): tl_<name>_dims reduces the ndims
   dims listed (0-based, negative from the end; ndims 0: every element, a 0-dim result without
   keepdim) with the op's number (std's correction, norm's order); tl_<name>_all reduces every
   element and tl_<name>_dim one dim, with the row's default number. The row says the dtypes
   (sum: every dtype, integers and bool giving int64; mean: floating). */
#define REDUCE_OP(name, differentiable, backward, dtypes, output, empty, number_name, param)       \
    tl_status tl_##name##_dims(const tl_tensor *a, const int *dims, int ndims, bool keepdim,       \
                               double number, tl_tensor **out);                                    \
    tl_status tl_##name##_all(const tl_tensor *a, tl_tensor **out);                                \
    tl_status tl_##name##_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out);
#include "tlua/ops.def"
/* max, min, argmax, argmin: */
tl_status tl_max_all(const tl_tensor *a, tl_tensor **out);
tl_status tl_min_all(const tl_tensor *a, tl_tensor **out);
/* values and int64 indices of the first extreme along dim. */
tl_status tl_max_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                     tl_tensor **indices);
tl_status tl_min_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **values,
                     tl_tensor **indices);
/* argmax/argmin over all elements (flat index) or along a dim. */
tl_status tl_argmax_all(const tl_tensor *a, tl_tensor **out);
tl_status tl_argmin_all(const tl_tensor *a, tl_tensor **out);
tl_status tl_argmax_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out);
tl_status tl_argmin_dim(const tl_tensor *a, int dim, bool keepdim, tl_tensor **out);
/* Inclusive prefix sum along dim (0-based, negative from the end; a 0-dim tensor takes 0 or -1
   and gives a copy): out[.., i, ..] = x[.., 0, ..] + ... + x[.., i, ..]. Floating inputs keep
   their dtype (bfloat16/float16 accumulate in float32, each output rounded once), integer and
   bool inputs give int64 (wrapping). Any strides; the result is contiguous. */
tl_status tl_cumsum(const tl_tensor *x, int dim, tl_tensor **out);
/* Cumulative ops along dim (0-based, negative from the end; a 0-dim x is one line): cumprod
   (floating inputs keep their dtype, integers and bool multiply in int64, wrapping), logcumsumexp
   (log of the running sum of exp, floating only), cummax / cummin (the running extreme and the
   0-based int64 index where it was last reached: ties take the later index and a NaN stays, with
   the latest NaN's index, as torch's). */
tl_status tl_cumprod(const tl_tensor *x, int dim, tl_tensor **out);
tl_status tl_logcumsumexp(const tl_tensor *x, int dim, tl_tensor **out);
tl_status tl_cummax(const tl_tensor *x, int dim, tl_tensor **values, tl_tensor **indices);
tl_status tl_cummin(const tl_tensor *x, int dim, tl_tensor **values, tl_tensor **indices);
/* The coordinates (0-based, int64 [count, ndim]) of x's non-zero (true) elements in row-major
   order, as torch.nonzero; NaN is non-zero. Any dtype. On CUDA the count comes back to the
   host to size the result: the host waits for the device once. */
tl_status tl_nonzero(const tl_tensor *x, tl_tensor **out);

/* ---- joining ---------------------------------------------------------------------------------
   cat: the n tensors of list joined along dim (0-based, negative from the end) into a new tensor:
   same dtype, device, rank and sizes but along dim; tensors without elements are skipped
   whatever their shape, as torch does. */
tl_status tl_cat(tl_tensor *const *list, int n, int dim, tl_tensor **out);

/* ---- splitting: views of x along dim (0-based, negative from the end) -------------------------
   split: n views of the given sizes (each >= 0, adding up to x's size along dim), in order.
   tl_split_count: how many pieces split(size) makes (ceil(length / size); one for an empty dim)
   and tl_split_sizes their sizes (size each, the last what is left). tl_chunk_count: the pieces
   chunk(chunks) makes, as torch: *size = ceil(length / chunks) each (the last smaller), so fewer
   than chunks may come (6 into 4 gives 2, 2, 2); an empty dim gives chunks empty pieces. unbind:
   x's shape[dim] slices without dim. At most TL_SPLIT_MAX_PIECES pieces. */
#define TL_SPLIT_MAX_PIECES 65536
tl_status tl_split(tl_tensor *x, int dim, const int64_t *sizes, int n, tl_tensor **out);
tl_status tl_split_count(const tl_tensor *x, int dim, int64_t size, int *n);
void tl_split_sizes(const tl_tensor *x, int dim, int64_t size, int n, int64_t *sizes);
tl_status tl_chunk_count(const tl_tensor *x, int dim, int64_t chunks, int *n, int64_t *size);
tl_status tl_unbind(tl_tensor *x, int dim, tl_tensor **out);

/* ---- indexing along a dim (0-based dim and index values, int64 or int32 index) -------------
   gather: out (index's shape, x's dtype) at p = x at p with its dim-th coordinate replaced by
   index[p]; index has x's rank and no larger size than x but along dim. scatter_add: a copy of x
   with src[p] added at p with its dim-th coordinate replaced by index[p] (duplicates add up: in
   index order on the CPU, in any order on CUDA); index no larger than src anywhere, nor than x
   but along dim; src has x's dtype. An index value outside [0, size of x along dim) is an error
   (tl_check_index_range: on CUDA raised at the next synchronization). */
tl_status tl_gather(const tl_tensor *x, int dim, const tl_tensor *index, tl_tensor **out);
tl_status tl_scatter_add(const tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                         tl_tensor **out);
/* scatter: a copy of x with src[p] written at p with its dim-th coordinate replaced by index[p]
   (the shapes and checks of scatter_add); of duplicate places one written value stays (the last
   in index order on the CPU, any one on CUDA). tl_scatter_value writes one value (it must fit
   x's dtype). The in-place forms write x itself (writable; src and index that share its memory
   are read from copies) and bump its version; everything is checked before the first write. */
tl_status tl_scatter(const tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                     tl_tensor **out);
tl_status tl_scatter_value(const tl_tensor *x, int dim, const tl_tensor *index, tl_scalar value,
                           tl_tensor **out);
tl_status tl_scatter_(tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src);
tl_status tl_scatter_value_(tl_tensor *x, int dim, const tl_tensor *index, tl_scalar value);
tl_status tl_scatter_add_(tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src);
/* scatter_reduce: a copy of x with src folded in at the places of scatter by reduce ("sum",
   "prod", "mean", "amax", "amin"; NaN wins amax/amin); with include_self false, the places src
   reaches start without x's value (a place nothing reaches keeps it). mean divides by the count
   of values folded in (integers floored, as torch, exact while the sums stay within 2^53). Number
   dtypes (not bool); integer sums and products wrap. */
typedef enum tl_scatter_reduction {
    TL_SCATTER_REDUCE_SUM,
    TL_SCATTER_REDUCE_PROD,
    TL_SCATTER_REDUCE_MEAN,
    TL_SCATTER_REDUCE_AMAX,
    TL_SCATTER_REDUCE_AMIN,
} tl_scatter_reduction;
tl_status tl_scatter_reduction_parse(const char *reduce, tl_scatter_reduction *out);
tl_status tl_scatter_reduce(const tl_tensor *x, int dim, const tl_tensor *index,
                            const tl_tensor *src, const char *reduce, bool include_self,
                            tl_tensor **out);
/* mean's divisor: how many values were folded in at each place of x (x's own when include_self),
   at least 1; x's shape and dtype */
tl_status tl_scatter_reduce_count(const tl_tensor *x, int dim, const tl_tensor *index,
                                  const tl_tensor *src, bool include_self, tl_tensor **count);

/* ---- indexing by a list of positions (ops/index_select.c) ----------------------------------
   index: 1-d (or 0-d: one position), int64 or int32, values in [0, size of x along dim).
   index_select: x's slices along dim at the positions of index, in index's order (repeats
   allowed); it is a gather through tl_index_select_as_gather's view of index (x's rank,
   expanded: nothing copied), which the recording form uses too. index_add: x plus alpha * src's
   slices added at index's positions along dim (src: x's shape but index's length along dim;
   duplicates add up as in scatter_add; an integer x takes an integer alpha); index_copy: src's
   slices written there (of duplicates one stays); index_fill: value written in x's slices at
   index. Each is a scatter through tl_index_positions' view of index (x's rank, src's shape, or
   x's with index's length along dim: *d gets the wrapped dim), as the recording forms do. */
tl_status tl_index_select(const tl_tensor *x, int dim, const tl_tensor *index, tl_tensor **out);
tl_status tl_index_select_as_gather(const tl_tensor *x, int dim, const tl_tensor *index,
                                    tl_tensor **positions);
tl_status tl_index_positions(const char *op, const tl_tensor *x, int dim, const tl_tensor *index,
                             const tl_tensor *src, int *d, tl_tensor **positions);
/* src * alpha in x's dtype (src itself, retained, when alpha is 1) */
tl_status tl_index_add_scaled(const char *op, const tl_tensor *x, const tl_tensor *src,
                              double alpha, tl_tensor **scaled);
tl_status tl_index_add(const tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                       double alpha, tl_tensor **out);
tl_status tl_index_add_(tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                        double alpha);
tl_status tl_index_copy(const tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src,
                        tl_tensor **out);
tl_status tl_index_copy_(tl_tensor *x, int dim, const tl_tensor *index, const tl_tensor *src);
tl_status tl_index_fill(const tl_tensor *x, int dim, const tl_tensor *index, tl_scalar value,
                        tl_tensor **out);
tl_status tl_index_fill_(tl_tensor *x, int dim, const tl_tensor *index, tl_scalar value);
/* take: x's elements at flat (row-major) positions index (any shape, values in [0, numel(x))),
   in index's shape; tl_take_positions checks index and gives it 1-d. */
tl_status tl_take(const tl_tensor *x, const tl_tensor *index, tl_tensor **out);
tl_status tl_take_positions(const tl_tensor *x, const tl_tensor *index, tl_tensor **flat);
/* masked_select: the elements of x where the bool mask is true, x and mask broadcast together,
   in row-major order, as a 1-d tensor. tl_masked_positions gives the broadcast shape and the
   flat positions of the true elements (int64, 1-d; on CUDA their count comes back to the host:
   one wait). */
tl_status tl_masked_select(const tl_tensor *x, const tl_tensor *mask, tl_tensor **out);
tl_status tl_masked_positions(const tl_tensor *x, const tl_tensor *mask, int64_t *shape, int *ndim,
                              tl_tensor **positions);
/* masked_fill_: x <- value where mask (bool) is true; mask and value (x's dtype, 0-dim or any
   shape) broadcast to x's shape. tl_masked_fill_check makes its checks (the recording form
   too). */
tl_status tl_masked_fill_(tl_tensor *x, const tl_tensor *mask, const tl_tensor *value);
tl_status tl_masked_fill_check(const char *op, const tl_tensor *x, const tl_tensor *mask,
                               const tl_tensor *value);

/* ---- shapes (0-based dims, negative from the end; every dtype) ----------------------------
   Each is made of other ops' kernels (ops/shape.c, ops/pad.c): masks and where, index_select by
   positions computed once per dim, expand and reshape, cat and copies; a new tensor. */
/* The lower (tril) or upper (triu) triangle of the last two dims, the rest zeros: element
   (i, j) is kept when j - i <= k (tril) or j - i >= k (triu); batched over the leading dims. */
tl_status tl_tril(const tl_tensor *x, int64_t k, tl_tensor **out);
tl_status tl_triu(const tl_tensor *x, int64_t k, tl_tensor **out);
/* x reversed along each of the ndims dims (no dim twice). */
tl_status tl_flip(tl_tensor *x, const int *dims, int ndims, tl_tensor **out);
/* x shifted by shifts[i] along dims[i] (n pairs; a dim may repeat, its shifts add), elements
   leaving one end coming back at the other; n == 0: x's elements in row-major order shifted by
   shifts[0], then back in x's shape, as torch.roll without dims. */
tl_status tl_roll(tl_tensor *x, const int64_t *shifts, const int *dims, int n, tl_tensor **out);
/* x repeated reps[i] times along each dim (torch.tile: fewer reps than dims are padded with
   ones in front, more give x new leading dims of size 1 first). reps >= 0. */
tl_status tl_tile(tl_tensor *x, const int64_t *reps, int n, tl_tensor **out);
/* Each slice of x along dim repeated `repeats` times in place (torch.repeat_interleave);
   flatten: x's elements in row-major order (dim ignored), a 1-d result. */
tl_status tl_repeat_interleave(tl_tensor *x, int64_t repeats, int dim, bool flatten,
                               tl_tensor **out);
/* The same with a count per slice: repeats (int64 or int32, 1-d of x's size along dim, or
   one element for all, >= 0, on x's device). Its total is read back to size the result. */
tl_status tl_repeat_interleave_counts(tl_tensor *x, const tl_tensor *repeats, int dim, bool flatten,
                                      tl_tensor **out);
typedef enum tl_pad_mode {
    TL_PAD_CONSTANT,
    TL_PAD_REFLECT,   /* mirrored without the edge element: pad < the dim's size */
    TL_PAD_REPLICATE, /* the edge element repeated: a dim of at least one element */
    TL_PAD_CIRCULAR,  /* wrapped around: pad <= the dim's size */
} tl_pad_mode;
/* x padded by pads[2i] elements before and pads[2i + 1] after its dim ndim - 1 - i (torch's
   order: the last dim first), npads even, at most 2 ndim. Constant mode fills with value and
   takes negative pads (elements cut off); the other modes need pads >= 0. */
tl_status tl_pad(tl_tensor *x, const int64_t *pads, int npads, tl_pad_mode mode, tl_scalar value,
                 tl_tensor **out);
/* Zeros of x's shape with one more dim, x's last dim laid on the diagonal (offset) of dims dim1
   and dim2 of the result (torch.diag_embed); dims wrap against the result's rank. */
tl_status tl_diag_embed(tl_tensor *x, int64_t offset, int dim1, int dim2, tl_tensor **out);
/* 1-d x: the square matrix with x on diagonal k; 2-d x: a copy of its diagonal k. */
tl_status tl_diag(tl_tensor *x, int64_t k, tl_tensor **out);
/* int64 [..., classes]: 1 where the last coordinate equals index (0-based, int64 or int32),
   else 0; classes < 0 takes the largest index + 1 (read back: the host waits). An index outside
   [0, classes) is an error (on CUDA raised at the next synchronization). */
tl_status tl_one_hot(const tl_tensor *index, int64_t classes, tl_tensor **out);

/* ---- sorting and selection (0-based dims, int64 0-based indices) ---------------------------
   Every dtype; the order is the values' with NaN above +inf and -0 equal to +0, as torch's.
   sort: x's elements along dim in ascending (descending) order, stably (ties, NaNs among them,
   keep their order), with their positions along dim; argsort the positions only. topk: the k
   largest (smallest) along dim, best first, ties in position order (0 <= k <= the size).
   kthvalue: the k-th smallest along dim (1 <= k <= the size), the first of its ties in sorted
   order; median: the lower median along dim ((n - 1) / 2 of the sorted row, a NaN where the row
   has one, as torch), or of every element (a 0-dim value; NaN for a floating x without
   elements); keepdim keeps dim with size 1. */
tl_status tl_sort(const tl_tensor *x, int dim, bool descending, tl_tensor **values,
                  tl_tensor **indices);
tl_status tl_argsort(const tl_tensor *x, int dim, bool descending, tl_tensor **indices);
/* The same with the positions counted from base (the indices' index_base: the Lua binding
   asks for 1), written so by the kernel: no pass over them afterwards. */
tl_status tl_sort_from(const tl_tensor *x, int dim, bool descending, int64_t base,
                       tl_tensor **values, tl_tensor **indices);
tl_status tl_argsort_from(const tl_tensor *x, int dim, bool descending, int64_t base,
                          tl_tensor **indices);
tl_status tl_topk(const tl_tensor *x, int64_t k, int dim, bool largest, tl_tensor **values,
                  tl_tensor **indices);
tl_status tl_kthvalue(const tl_tensor *x, int64_t k, int dim, bool keepdim, tl_tensor **values,
                      tl_tensor **indices);
tl_status tl_median_dim(const tl_tensor *x, int dim, bool keepdim, tl_tensor **values,
                        tl_tensor **indices);
tl_status tl_median_all(const tl_tensor *x, tl_tensor **out);
/* unique: x's distinct values, flattened and sorted (each NaN its own value); inverse (x's
   shape, int64) each element's position among them, counts how often each occurs (either
   pointer may be NULL when not wanted). On CUDA the count comes back to the host (a wait). */
tl_status tl_unique(const tl_tensor *x, bool want_inverse, bool want_counts, tl_tensor **values,
                    tl_tensor **inverse, tl_tensor **counts);
/* searchsorted: for each of values, the number of elements of sorted (ascending along its last
   dim) that come before it, or with right that are not after it: the insertion point in [0, n]
   (int64, values' shape). sorted 1-d serves every value; else values has sorted's leading dims
   and each row searches its own row. Same dtype (numeric), same device. */
tl_status tl_searchsorted(const tl_tensor *sorted, const tl_tensor *values, bool right,
                          tl_tensor **out);
/* bincount: out[v] = how many elements of bins (1-d int64 or int32, values >= 0) equal v, or the
   sum of their weights (1-d, floating, bins' length; float64 for float64 weights, else float32);
   the length is max(minlength, the largest value + 1), read back to the host (a wait on CUDA). */
tl_status tl_bincount(const tl_tensor *bins, const tl_tensor *weights, int64_t minlength,
                      tl_tensor **out);

/* Sums t down to shape, undoing broadcasting (leading dims and size-1 dims).
   Takes t's reference (returns it as is when nothing needs summing). */
tl_status tl_sum_to_shape(tl_tensor *t, const int64_t *shape, int ndim, tl_tensor **out);
/* Numerically stable (max subtracted); floating dtypes. */
tl_status tl_softmax(const tl_tensor *a, int dim, tl_tensor **out);
tl_status tl_log_softmax(const tl_tensor *a, int dim, tl_tensor **out);
/* The gradient of softmax (log_softmax) along dim from the forward's output and the output's
   gradient, into a new tensor. */
tl_status tl_softmax_backward(const tl_tensor *grad, const tl_tensor *output, int dim,
                              tl_tensor **grad_input);
tl_status tl_log_softmax_backward(const tl_tensor *grad, const tl_tensor *output, int dim,
                                  tl_tensor **grad_input);
/* The same into grad_input (output's shape and dtype, may be grad or output itself: the
   kernel reads each element before writing it). */
tl_status tl_softmax_backward_into(tl_tensor *grad_input, const tl_tensor *grad,
                                   const tl_tensor *output, int dim);
tl_status tl_log_softmax_backward_into(tl_tensor *grad_input, const tl_tensor *grad,
                                       const tl_tensor *output, int dim);

/* ---- matmul through GemmParams ------------------------------------------
   1-D x 1-D dot, 2-D x 2-D, and batched with broadcast batch dims
   (as torch.matmul); floating dtypes, both the same. */
tl_status tl_matmul(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);
/* Its split gradients, for out = input @ other (broadcast batch dims, 1-D operands):
   d(input) = grad @ other^T summed to input_shape, d(other) = input^T @ grad summed to
   other_shape. */
tl_status tl_matmul_backward_input(const tl_tensor *grad, const tl_tensor *other,
                                   const int64_t *input_shape, int input_ndim, tl_tensor **out);
tl_status tl_matmul_backward_other(const tl_tensor *grad, const tl_tensor *input,
                                   const int64_t *other_shape, int other_ndim, tl_tensor **out);

/* ---- linear and outer through GemmParams ---------------------------------
   out[..., O] = input[..., I] @ weight[O, I]^T + bias[O] (bias may be NULL); input, weight and
   bias of one floating dtype, on one device. */
tl_status tl_linear(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                    tl_tensor **out);
/* Its split gradients, for grad [..., O]: grad_input [..., I] = grad @ weight;
   grad_weight [O, I] = the sum over rows of grad^T input (input [..., I] with grad's rows);
   grad_bias [O] = the sum of grad's rows. Each is one GEMM. On failure (and these below) the
   gradients asked for are NULL. */
tl_status tl_linear_backward_input(const tl_tensor *grad, const tl_tensor *weight,
                                   tl_tensor **grad_input);
tl_status tl_linear_backward_weight(const tl_tensor *grad, const tl_tensor *input,
                                    tl_tensor **grad_weight);
tl_status tl_linear_backward_bias(const tl_tensor *grad, tl_tensor **grad_bias);
/* The same two in a dtype of the caller's: a 16-bit grad's GEMM writes float32 itself (autocast's
   float32 parameters take their gradients so, with no cast kernel); another dtype is a cast of
   the GEMM's result. */
tl_status tl_linear_backward_weight_as(const tl_tensor *grad, const tl_tensor *input,
                                       tl_dtype dtype, tl_tensor **grad_weight);
tl_status tl_linear_backward_bias_as(const tl_tensor *grad, tl_dtype dtype, tl_tensor **grad_bias);
/* Both: the bias's sums come from the weight's GEMM (its bias-gradient epilogue), no pass of their
   own. */
tl_status tl_linear_backward_weight_bias_as(const tl_tensor *grad, const tl_tensor *input,
                                            tl_dtype weight_dtype, tl_dtype bias_dtype,
                                            tl_tensor **grad_weight, tl_tensor **grad_bias);
/* pre = linear(input, weight, bias) and out = gelu(pre) (the tanh form when tanh_form, the exact
   one otherwise): the tanh form in one GEMM (its GELU epilogue, keeping pre), the exact one as
   linear then gelu. */
tl_status tl_linear_gelu(const tl_tensor *input, const tl_tensor *weight, const tl_tensor *bias,
                         bool tanh_form, tl_tensor **out, tl_tensor **pre);
/* grad_input = (grad @ weight) * gelu'(pre), linear's input gradient through a gelu whose input
   was pre [..., I]: the tanh form in one GEMM (its dGELU epilogue), the exact one as the GEMM then
   gelu_backward. */
tl_status tl_linear_backward_input_gelu(const tl_tensor *grad, const tl_tensor *weight,
                                        const tl_tensor *pre, bool tanh_form,
                                        tl_tensor **grad_input);
/* out[N, M] = a[N] b[M]^T, one floating dtype, one device. */
tl_status tl_outer(const tl_tensor *a, const tl_tensor *b, tl_tensor **out);

/* ---- grouped matrix products: one grouped GEMM launch per call ------------------------------
   out[i] = a[i] @ b[i] for count pairs of 2-D matrices of free sizes (a[i] [m_i, k_i], b[i]
   [k_i, n_i], views read in place where GEMM can), one floating dtype, one device; out gets
   count new tensors. Its split gradients: grad_a[i] = grad[i] @ other[i]^T and grad_b[i] =
   input[i]^T @ grad[i]. */
tl_status tl_grouped_matmul(int count, tl_tensor *const *a, tl_tensor *const *b, tl_tensor **out);
tl_status tl_grouped_matmul_backward_input(int count, tl_tensor *const *grad,
                                           tl_tensor *const *other, tl_tensor **out);
tl_status tl_grouped_matmul_backward_other(int count, tl_tensor *const *grad,
                                           tl_tensor *const *input, tl_tensor **out);
/* a [T, K], b [G, K, N] -> out [T, N]: rows offsets[g-1] .. offsets[g]-1 (0-based, offsets[-1]
   = 0) of a times b[g]. offsets: int32 or int64 [G] on any device, cumulative ends,
   nondecreasing, at most T (empty groups allowed; rows past offsets[G-1] are zeros). Offsets on
   a GPU are read back to the host (cuBLAS's grouped GEMM takes its sizes there): one wait.
   Split gradients: grad_input [T, K] (grad [T, N] segments times b[g]^T) and grad_weight
   [G, K, N] (a's segment^T times grad's; zeros for an empty group). */
tl_status tl_grouped_mm(const tl_tensor *a, const tl_tensor *b, const tl_tensor *offsets,
                        tl_tensor **out);
tl_status tl_grouped_mm_backward_input(const tl_tensor *grad, const tl_tensor *b,
                                       const tl_tensor *offsets, tl_tensor **out);
tl_status tl_grouped_mm_backward_weight(const tl_tensor *grad, const tl_tensor *a,
                                        const tl_tensor *offsets, tl_tensor **out);

/* ---- pointwise backward kernels: tl_<name>(grad, saved, out) for every POINTWISE_BACKWARD
   row of tlua/ops.def. grad is d(loss)/d(output), saved the forward's result (relu, tanh,
   sigmoid) or input (gelu, silu); same shapes, floating; out has saved's dtype.
   tl_<name>_with(grad, saved, numbers, out) takes the forward's numbers, resolved (leaky_relu's
   negative_slope: TL_OP_MAX_NUMBERS doubles); tl_<name> passes zeros. ---------- */
#define POINTWISE_BACKWARD_OP(name, differentiable, backward)                                      \
    tl_status tl_##name(const tl_tensor *grad, const tl_tensor *saved, tl_tensor **out);           \
    tl_status tl_##name##_with(const tl_tensor *grad, const tl_tensor *saved,                      \
                               const double *numbers, tl_tensor **out);
#include "tlua/ops.def"

/* ---- in place: x <- f(x, ...) ------------------------------------------------------------
   Each writes its result into x itself (through a view into its base), bumps x's storage
   version and returns TL_OK. The result must fit x: other broadcasts to x's shape (it never
   grows x), and the result's dtype (that of the out-of-place op) can be stored in x's dtype (a
   floating result never goes into an integer x, nor an integer one into a bool x). On any error
   x is unchanged. An expanded x (elements sharing memory) is refused; an other that overlaps x
   is read from a copy. No autograd (tlua/autograd.h has the recording forms, tl_ag_<name>_). */
tl_status tl_add_(tl_tensor *x, const tl_tensor *other);
tl_status tl_sub_(tl_tensor *x, const tl_tensor *other);
tl_status tl_mul_(tl_tensor *x, const tl_tensor *other);
/* every POINTWISE_BINARY row: tl_div_(x, other) (true division), tl_atan2_ (floating x), ... */
#define POINTWISE_BINARY_OP(name, differentiable, backward, dtypes)                                \
    tl_status tl_##name##_(tl_tensor *x, const tl_tensor *other);
#include "tlua/ops.def"
tl_status tl_neg_(tl_tensor *x);
tl_status tl_abs_(tl_tensor *x);
tl_status tl_relu_(tl_tensor *x);
tl_status tl_clamp_(tl_tensor *x, bool has_min, double min, bool has_max, double max);
/* every POINTWISE row of tlua/ops.def: tl_exp_(x), tl_gelu_(x), ... (a floating x where the
   result is floating), tl_leaky_relu_with_(x, numbers) */
#define POINTWISE_OP(name, differentiable, backward, dtypes, spec)                                 \
    tl_status tl_##name##_(tl_tensor *x);                                                          \
    tl_status tl_##name##_with_(tl_tensor *x, const double *numbers);
#include "tlua/ops.def"
/* along dim, as tl_softmax / tl_log_softmax */
tl_status tl_softmax_(tl_tensor *x, int dim);
tl_status tl_log_softmax_(tl_tensor *x, int dim);
/* x[..., n] <- x @ w for a square w [n, n] of any strides, x of w's dtype and device. Row tiles
   of x go through a workspace of 16 MiB on CUDA, 8 MiB on the CPU (or one row when a row is
   larger), each tile written back once computed, never a copy of x (two halves for an x whose
   rows GEMM cannot read in place: each tile is copied first). w is read from a copy where it
   overlaps x or GEMM cannot read it in place. */
tl_status tl_matmul_(tl_tensor *x, const tl_tensor *w);

/* ---- integer ranges ------------------------------------------------------ */
/* start, start + step, ... while < end (> end for a negative step), computed exactly in int64
   for any int64 operands (the count ceil((end - start) / step) without overflow), then cast
   to dtype (not bool; int32 values must fit). tl_arange (tlua/tensor.h) is its double form. */
tl_status tl_arange_int(int64_t start, int64_t end, int64_t step, tl_dtype dtype, tl_device device,
                        tl_tensor **out);

/* ---- random (the global generator of tl_manual_seed) --------------------- */
/* uniform [0, 1) */
tl_status tl_rand(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                  tl_tensor **out);
/* standard normal */
tl_status tl_randn(const int64_t *shape, int ndim, tl_dtype dtype, tl_device device,
                   tl_tensor **out);
/* integers uniform in [low, high) */
tl_status tl_randint(int64_t low, int64_t high, const int64_t *shape, int ndim, tl_dtype dtype,
                     tl_device device, tl_tensor **out);
/* a random permutation of 0 .. n-1 */
tl_status tl_randperm(int64_t n, tl_dtype dtype, tl_device device, tl_tensor **out);
/* n categories (int64, 0-based) drawn from each row of probs (1-d [C] -> [n], 2-d [R, C] ->
   [R, n]; floating, non-negative, finite, each row with a positive sum: not normalised), with or
   without replacement (then n <= C and each row needs n non-zero probabilities); from the
   global generator's stream: one seed, the same draws on every device. A bad row is an error
   (on CUDA raised by the next synchronization). */
tl_status tl_multinomial(const tl_tensor *probs, int64_t n, bool replacement, tl_tensor **out);

#ifdef __cplusplus
}
#endif

#endif
