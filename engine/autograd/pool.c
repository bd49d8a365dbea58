/* Recording pooling and interpolate ops: max (saving the argmax indices), average, adaptive,
   and interpolate's resampling; each backward runs its op's backward kernel. */
#include "autograd/formula.h"
#include "autograd/nn_node.h"
#include "ops/nn/nn_common.h"

/* grad_output as the output's dtype (a reference to release). */
static tl_status output_grad(tl_node *node, tl_tensor *g, tl_tensor **out) {
    return tl_cast(g, node->output_dtype[0], out);
}

/* ---- max_pool2d, adaptive_max_pool2d --------------------------------------------------------
   Saved: slot 0 the argmax indices. */
static tl_status max_pool2d_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *indices, *grad;
    TL_TRY(tl_node_saved(node, 0, &indices));
    TL_TRY(output_grad(node, g[0], &grad));
    /* the indices are the forward's own (and unchanged: tl_node_saved checks the version) */
    tl_status status = nn_max_pool2d_backward(grad, indices, node->input_shape[0], false, &gi[0]);
    tl_release(grad);
    return status;
}

/* Records the node of a max pooling that made *out and idx; hands idx to *indices or drops it
   (on failure *out is released and set to NULL). */
static tl_status record_max_pool(const char *name, tl_tensor *input, tl_tensor **out,
                                 tl_tensor *idx, tl_tensor **indices) {
    tl_node *node;
    tl_status status = tl_record(name, max_pool2d_backward, 1, &input, out, &node);
    if (status == TL_OK && node) status = tl_record_save(node, 0, "indices", idx, out);
    if (status == TL_OK && indices)
        *indices = idx;
    else
        tl_release(idx);
    return status;
}

tl_status tl_ag_max_pool2d_with(tl_tensor *input, const tl_pool2d_options *opts, tl_tensor **out,
                                tl_tensor **indices) {
    tl_tensor *idx;
    TL_TRY(tl_max_pool2d_with(input, opts, out, &idx));
    return record_max_pool("max_pool2d", input, out, idx, indices);
}

tl_status tl_ag_max_pool2d(tl_tensor *input, int64_t kernel_h, int64_t kernel_w, int64_t stride_h,
                           int64_t stride_w, int64_t pad_h, int64_t pad_w, tl_tensor **out) {
    tl_tensor *idx;
    TL_TRY(tl_max_pool2d(input, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, out, &idx));
    return record_max_pool("max_pool2d", input, out, idx, NULL);
}

tl_status tl_ag_adaptive_max_pool2d(tl_tensor *input, int64_t out_h, int64_t out_w, tl_tensor **out,
                                    tl_tensor **indices) {
    tl_tensor *idx;
    TL_TRY(tl_adaptive_max_pool2d(input, out_h, out_w, out, &idx));
    return record_max_pool("adaptive_max_pool2d", input, out, idx, indices);
}

/* ---- avg_pool2d ------------------------------------------------------------------------------
   Nothing saved; ints: kernel, stride, padding (h, w each), ceil_mode, count_include_pad,
   divisor. */
tl_pool2d_options tl_node_pool_options(const tl_node *node) {
    const int64_t *s = node->ints;
    return (tl_pool2d_options){.kernel_h = s[0],
                               .kernel_w = s[1],
                               .stride_h = s[2],
                               .stride_w = s[3],
                               .pad_h = s[4],
                               .pad_w = s[5],
                               .dilation_h = 1,
                               .dilation_w = 1,
                               .ceil_mode = s[6] != 0,
                               .count_include_pad = s[7] != 0,
                               .divisor = s[8]};
}

static tl_status avg_pool2d_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *grad;
    TL_TRY(output_grad(node, g[0], &grad));
    const tl_pool2d_options o = tl_node_pool_options(node);
    tl_status status = tl_avg_pool2d_backward(grad, node->input_shape[0], &o, &gi[0]);
    tl_release(grad);
    return status;
}

tl_status tl_ag_avg_pool2d(tl_tensor *input, const tl_pool2d_options *opts, tl_tensor **out) {
    TL_TRY(tl_avg_pool2d(input, opts, out));
    tl_node *node;
    TL_TRY(tl_record("avg_pool2d", avg_pool2d_backward, 1, &input, out, &node));
    if (!node) return TL_OK;
    const int64_t s[9] = {opts->kernel_h, opts->kernel_w, opts->stride_h,  opts->stride_w,
                          opts->pad_h,    opts->pad_w,    opts->ceil_mode, opts->count_include_pad,
                          opts->divisor};
    for (int i = 0; i < 9; i++) node->ints[i] = s[i];
    return TL_OK;
}

/* ---- adaptive_avg_pool2d: nothing saved (the output size is the output's) ------------------- */
static tl_status adaptive_avg_pool2d_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *grad;
    TL_TRY(output_grad(node, g[0], &grad));
    tl_status status = tl_adaptive_avg_pool2d_backward(grad, node->input_shape[0], &gi[0]);
    tl_release(grad);
    return status;
}

tl_status tl_ag_adaptive_avg_pool2d(tl_tensor *input, int64_t out_h, int64_t out_w,
                                    tl_tensor **out) {
    TL_TRY(tl_adaptive_avg_pool2d(input, out_h, out_w, out));
    tl_node *node;
    return tl_record("adaptive_avg_pool2d", adaptive_avg_pool2d_backward, 1, &input, out, &node);
}

/* ---- interpolate: nothing saved; ints: mode, size_h, size_w, align_corners; scalar: the scales */
tl_interpolate_options tl_node_interpolate_options(const tl_node *node) {
    return (tl_interpolate_options){.mode = (tl_interpolate_mode)node->ints[0],
                                    .size_h = node->ints[1],
                                    .size_w = node->ints[2],
                                    .align_corners = node->ints[3] != 0,
                                    .scale_h = node->scalar[0],
                                    .scale_w = node->scalar[1]};
}

static tl_status interpolate_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    tl_tensor *grad;
    TL_TRY(output_grad(node, g[0], &grad));
    const tl_interpolate_options o = tl_node_interpolate_options(node);
    tl_status status = tl_interpolate_backward(grad, node->input_shape[0], &o, &gi[0]);
    tl_release(grad);
    return status;
}

tl_status tl_ag_interpolate(tl_tensor *input, const tl_interpolate_options *opts, tl_tensor **out) {
    TL_TRY(tl_interpolate(input, opts, out));
    tl_node *node;
    const char *name =
        opts->mode == TL_INTERPOLATE_BILINEAR ? "upsample_bilinear2d" : "upsample_nearest2d";
    TL_TRY(tl_record(name, interpolate_backward, 1, &input, out, &node));
    if (!node) return TL_OK;
    node->ints[0] = opts->mode, node->ints[1] = opts->size_h, node->ints[2] = opts->size_w;
    node->ints[3] = opts->align_corners;
    node->scalar[0] = opts->scale_h, node->scalar[1] = opts->scale_w;
    return TL_OK;
}
