/* Differentiable gradients (create_graph) of the nn ops: conv2d, conv_transpose2d, batch_norm,
   the fused LSTM and GRU cells, the poolings and interpolate, written with recording ops over
   the nodes' saved tensors joined to the graph (tl_node_saved_attached); and the nodes those
   formulas record that no forward op makes (conv2d's weight gradient, the adjoints of the linear
   poolings), each with its gradient and its own differentiable one. */
#include <string.h>

#include "autograd/formula.h"
#include "autograd/nn_node.h"

static void release_all(tl_tensor **t, int n) {
    for (int i = 0; i < n; i++) tl_release(t[i]), t[i] = NULL;
}

/* g in the dtype of node's output o, recorded (a new reference) */
static tl_status output_grad(tl_node *node, int o, tl_tensor *g, tl_tensor **out) {
    return tl_ag_cast(g, node->output_dtype[o], out);
}

/* t summed over every dim but the channels (dim 1), in the dtype of node's input i, recorded:
   a bias's gradient */
static tl_status channel_sums(tl_node *node, int i, tl_tensor *t, tl_tensor **out) {
    int dims[TL_MAX_DIMS], count = 0;
    for (int d = 0; d < t->ndim; d++)
        if (d != 1) dims[count++] = d;
    tl_tensor *sum;
    TL_TRY(tl_ag_sum_dims(t, dims, count, false, 0, &sum));
    tl_status status = tl_ag_cast(sum, node->input_dtype[i], out);
    tl_release(sum);
    return status;
}

/* ---- conv2d, conv_transpose2d, conv2d_backward_weight ---------------------------------------
   conv2d is bilinear in (input, weight), and so are its two gradients: the input's,
   conv2d_backward_input(g, weight), is conv_transpose2d(g, weight) (recorded as that op); the
   weight's, conv2d_backward_weight(g, input), is recorded as a node of its own below. */
enum { CONV_INPUT, CONV_WEIGHT, CONV_BIAS };

/* conv2d's input gradient of g with weight at input_shape, recorded: conv_transpose2d with the
   output_padding that gives the input's size back, in - ((out - 1) stride - 2 padding + dilation
   (kernel - 1) + 1), the rows conv2d's floor division left out (< stride). */
static tl_status conv_input_grad(tl_tensor *g, tl_tensor *weight, const int64_t input_shape[4],
                                 const tl_conv2d_options *o, tl_tensor **out) {
    int64_t output_padding[2];
    for (int d = 0; d < 2; d++)
        output_padding[d] =
            input_shape[2 + d] - ((g->shape[2 + d] - 1) * o->stride[d] - 2 * o->padding[d] +
                                  o->dilation[d] * (weight->shape[2 + d] - 1) + 1);
    return tl_ag_conv_transpose2d(g, weight, NULL, o, output_padding, out);
}

/* conv2d_backward_weight: dW = the weight gradient of (grad, input). For dW's gradient G,
   grad's gradient is conv2d(input, G) and input's is conv2d's input gradient of (grad, G).
   Inputs: grad, input. Saved: slot 0 grad (when input's gradient is needed), slot 1 input (when
   grad's is). ints: the conv options (autograd/nn_node.h). */
enum { BW_GRAD, BW_INPUT };

static tl_status backward_weight_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const tl_conv2d_options o = tl_node_conv_options(node);
    tl_tensor *G, *saved;
    TL_TRY(tl_cast(g[0], node->output_dtype[0], &G));
    tl_status status = TL_OK;
    if (node->needs_input_grad[BW_GRAD]) {
        status = tl_node_saved(node, 1, &saved);
        if (status == TL_OK) status = tl_conv2d(saved, G, NULL, &o, &gi[BW_GRAD]);
    }
    if (status == TL_OK && node->needs_input_grad[BW_INPUT]) {
        status = tl_node_saved(node, 0, &saved);
        if (status == TL_OK)
            status =
                tl_conv2d_backward_input(saved, G, node->input_shape[BW_INPUT], &o, &gi[BW_INPUT]);
    }
    tl_release(G);
    return status;
}

static tl_status backward_weight_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const tl_conv2d_options o = tl_node_conv_options(node);
    tl_tensor *G, *saved = NULL;
    TL_TRY(output_grad(node, 0, g[0], &G));
    tl_status status = TL_OK;
    if (node->needs_input_grad[BW_GRAD]) {
        status = tl_node_saved_attached(node, 1, &saved);
        if (status == TL_OK) status = tl_ag_conv2d(saved, G, NULL, &o, &gi[BW_GRAD]);
        tl_release(saved), saved = NULL;
    }
    if (status == TL_OK && node->needs_input_grad[BW_INPUT]) {
        status = tl_node_saved_attached(node, 0, &saved);
        if (status == TL_OK)
            status = conv_input_grad(saved, G, node->input_shape[BW_INPUT], &o, &gi[BW_INPUT]);
        tl_release(saved);
    }
    tl_release(G);
    return status;
}

/* conv2d's weight gradient of (grad, input) at weight_shape, recorded */
static tl_status ag_conv2d_backward_weight(tl_tensor *grad, tl_tensor *input,
                                           const int64_t weight_shape[4],
                                           const tl_conv2d_options *o, tl_tensor **out) {
    TL_TRY(tl_conv2d_backward_weight(grad, input, weight_shape, o, out));
    tl_node *node;
    tl_tensor *inputs[2] = {grad, input};
    TL_TRY(tl_record("conv2d_backward_weight", backward_weight_backward, 2, inputs, out, &node));
    if (!node) return TL_OK;
    tl_node_store_conv_options(node, o);
    if (node->needs_input_grad[BW_INPUT]) TL_TRY(tl_record_save(node, 0, "grad", grad, out));
    if (node->needs_input_grad[BW_GRAD]) TL_TRY(tl_record_save(node, 1, "input", input, out));
    return TL_OK;
}

/* conv2d (nn.c: slot 0 the input, slot 1 the weight): dx = conv_transpose2d(g, W),
   dW = conv2d_backward_weight(g, x), db = g summed per channel */
static tl_status conv2d_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const tl_conv2d_options o = tl_node_conv_options(node);
    tl_tensor *grad, *saved = NULL;
    TL_TRY(output_grad(node, 0, g[0], &grad));
    tl_status status = TL_OK;
    if (node->needs_input_grad[CONV_INPUT]) {
        status = tl_node_saved_attached(node, 1, &saved);
        if (status == TL_OK)
            status =
                conv_input_grad(grad, saved, node->input_shape[CONV_INPUT], &o, &gi[CONV_INPUT]);
        tl_release(saved), saved = NULL;
    }
    if (status == TL_OK && node->needs_input_grad[CONV_WEIGHT]) {
        status = tl_node_saved_attached(node, 0, &saved);
        if (status == TL_OK)
            status = ag_conv2d_backward_weight(grad, saved, node->input_shape[CONV_WEIGHT], &o,
                                               &gi[CONV_WEIGHT]);
        tl_release(saved);
    }
    if (status == TL_OK && node->needs_input_grad[CONV_BIAS])
        status = channel_sums(node, CONV_BIAS, grad, &gi[CONV_BIAS]);
    tl_release(grad);
    return status;
}

/* conv_transpose2d, y = conv2d_backward_input(x, W) (nn.c: the same slots): dx = conv2d(g, W),
   dW = conv2d_backward_weight(x as the gradient, g as the input), db = g summed per channel */
/* The zero rows and columns (pad's order: width before, after, height before, after) that widen
   conv_transpose2d's input x to the size conv2d's rule maps the output's out_hw to: nonzero only
   where output_padding >= stride (as nn_conv_transpose_input widens it). */
static bool widening_pads(const int64_t *x, const int64_t *weight, const int64_t *out_hw,
                          const tl_conv2d_options *o, int64_t pads[4]) {
    bool any = false;
    for (int d = 0; d < 2; d++) {
        const int64_t span =
            out_hw[d] + 2 * o->padding[d] - o->dilation[d] * (weight[2 + d] - 1) - 1;
        const int64_t extra = span / o->stride[d] + 1 - x[2 + d];
        pads[d == 0 ? 3 : 1] = extra;
        pads[d == 0 ? 2 : 0] = 0;
        any = any || extra != 0;
    }
    return any;
}

static tl_status conv_transpose2d_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const tl_conv2d_options o = tl_node_conv_options(node);
    const int64_t *x = node->input_shape[CONV_INPUT], *w = node->input_shape[CONV_WEIGHT];
    tl_tensor *grad, *saved = NULL, *widened = NULL;
    TL_TRY(output_grad(node, 0, g[0], &grad));
    int64_t pads[4];
    const bool widen = widening_pads(x, w, grad->shape + 2, &o, pads);
    tl_status status = TL_OK;
    if (node->needs_input_grad[CONV_INPUT]) {
        /* conv2d(dy, w), cut back to x's shape where x was widened */
        status = tl_node_saved_attached(node, 1, &saved);
        if (status == TL_OK) status = tl_ag_conv2d(grad, saved, NULL, &o, &widened);
        if (status == TL_OK && widen) {
            const int64_t cut[4] = {0, -pads[1], 0, -pads[3]};
            status = tl_ag_pad(widened, cut, 4, TL_PAD_CONSTANT, tl_scalar_int(0), &gi[CONV_INPUT]);
        } else if (status == TL_OK) {
            gi[CONV_INPUT] = tl_retain(widened);
        }
        tl_release(saved), tl_release(widened), saved = widened = NULL;
    }
    if (status == TL_OK && node->needs_input_grad[CONV_WEIGHT]) {
        status = tl_node_saved_attached(node, 0, &saved);
        if (status == TL_OK && widen)
            status = tl_ag_pad(saved, pads, 4, TL_PAD_CONSTANT, tl_scalar_int(0), &widened);
        else if (status == TL_OK)
            widened = tl_retain(saved);
        if (status == TL_OK)
            status = ag_conv2d_backward_weight(widened, grad, w, &o, &gi[CONV_WEIGHT]);
        tl_release(saved), tl_release(widened);
    }
    if (status == TL_OK && node->needs_input_grad[CONV_BIAS])
        status = channel_sums(node, CONV_BIAS, grad, &gi[CONV_BIAS]);
    tl_release(grad);
    return status;
}

/* ---- batch_norm ------------------------------------------------------------------------------
   out = xhat w + b per channel (dim 1), xhat = (x - mean) invstd. db = sum(g), dw = sum(g xhat)
   over each channel's M elements. On the batch's statistics (training; mean and invstd =
   1 / sqrt(var + eps) are then functions of x) dx = w invstd (g - mean(g) - xhat mean(g xhat));
   on the running ones (constants) dx = w invstd g. Computed in the statistics dtype (float64 for
   float64, else float32), the batch's statistics recomputed from x with recording ops. nn.c
   saves slot 0 the input, 1 the weight, 2 the mean, 3 invstd; ints[0] whether there is a
   weight, ints[1] whether the batch's statistics were used; scalar[0] eps. */
enum { NORM_INPUT, NORM_WEIGHT, NORM_BIAS };

/* t [C] as [1, C, 1, ...] (ndim dims), recorded */
static tl_status per_channel(tl_tensor *t, int ndim, tl_tensor **out) {
    int64_t shape[TL_MAX_DIMS];
    for (int d = 0; d < ndim; d++) shape[d] = d == 1 ? t->shape[0] : 1;
    return tl_ag_reshape(t, shape, ndim, out);
}

/* The batch's mean (keepdim) and invstd of x over dims, recorded */
static tl_status batch_statistics(tl_tensor *x, const int *dims, int count, double eps,
                                  tl_tensor **mean, tl_tensor **invstd) {
    enum { CENTRED, SQUARE, VAR, EPS, VAR_EPS, TEMPS };
    tl_tensor *t[TEMPS] = {0};
    tl_status status = tl_ag_mean_dims(x, dims, count, true, 0, mean);
    if (status == TL_OK) status = tl_ag_sub(x, *mean, &t[CENTRED]);
    if (status == TL_OK) status = tl_ag_mul(t[CENTRED], t[CENTRED], &t[SQUARE]);
    if (status == TL_OK) status = tl_ag_mean_dims(t[SQUARE], dims, count, true, 0, &t[VAR]);
    if (status == TL_OK) status = tl_graph_number_like(x, eps, &t[EPS]);
    if (status == TL_OK) status = tl_ag_add(t[VAR], t[EPS], &t[VAR_EPS]);
    if (status == TL_OK) status = tl_ag_rsqrt(t[VAR_EPS], invstd);
    release_all(t, TEMPS);
    return status;
}

/* The saved statistic in slot as [1, C, 1, ...] of dtype (a constant) */
static tl_status saved_statistic(tl_node *node, int slot, tl_dtype dtype, int ndim,
                                 tl_tensor **out) {
    tl_tensor *saved, *cast;
    TL_TRY(tl_node_saved(node, slot, &saved));
    TL_TRY(tl_cast(saved, dtype, &cast));
    tl_status status = per_channel(cast, ndim, out);
    tl_release(cast);
    return status;
}

static tl_status batch_norm_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const bool *needs = node->needs_input_grad, batch = node->ints[1] != 0;
    const int ndim = node->input_ndim[NORM_INPUT];
    const tl_dtype stats = node->input_dtype[NORM_INPUT] == TL_F64 ? TL_F64 : TL_F32;
    int dims[TL_MAX_DIMS], count = 0;
    for (int d = 0; d < ndim; d++)
        if (d != 1) dims[count++] = d;
    enum {
        SAVED,
        X,
        GRAD,
        MEAN,
        CENTRED,
        INVSTD,
        XHAT,
        GX,
        W,
        W_C,
        SCALE,
        MEAN_G,
        MEAN_GX,
        XM,
        CENTRED_G,
        INNER,
        DX,
        TEMPS
    };
    tl_tensor *t[TEMPS] = {0};
    const bool want_gx = needs[NORM_WEIGHT] || (needs[NORM_INPUT] && batch);
    tl_status status = tl_ag_cast(g[0], stats, &t[GRAD]);
    if (status == TL_OK && (needs[NORM_INPUT] || needs[NORM_WEIGHT])) {
        status = tl_node_saved_attached(node, 0, &t[SAVED]);
        if (status == TL_OK) status = tl_ag_cast(t[SAVED], stats, &t[X]);
        if (status == TL_OK && batch)
            status = batch_statistics(t[X], dims, count, node->scalar[0], &t[MEAN], &t[INVSTD]);
        if (status == TL_OK && !batch) status = saved_statistic(node, 2, stats, ndim, &t[MEAN]);
        if (status == TL_OK && !batch) status = saved_statistic(node, 3, stats, ndim, &t[INVSTD]);
        if (status == TL_OK) status = tl_ag_sub(t[X], t[MEAN], &t[CENTRED]);
        if (status == TL_OK) status = tl_ag_mul(t[CENTRED], t[INVSTD], &t[XHAT]);
    }
    if (status == TL_OK && needs[NORM_BIAS])
        status = channel_sums(node, NORM_BIAS, t[GRAD], &gi[NORM_BIAS]);
    if (status == TL_OK && want_gx) status = tl_ag_mul(t[GRAD], t[XHAT], &t[GX]);
    if (status == TL_OK && needs[NORM_WEIGHT])
        status = channel_sums(node, NORM_WEIGHT, t[GX], &gi[NORM_WEIGHT]);
    if (status == TL_OK && needs[NORM_INPUT]) {
        if (node->ints[0]) {
            status = tl_node_saved_attached(node, 1, &t[W]);
            if (status == TL_OK) status = tl_ag_cast(t[W], stats, &t[W_C]);
            tl_release(t[W]), t[W] = NULL;
            if (status == TL_OK) status = per_channel(t[W_C], ndim, &t[W]);
            if (status == TL_OK) status = tl_ag_mul(t[INVSTD], t[W], &t[SCALE]);
        } else {
            t[SCALE] = tl_retain(t[INVSTD]);
        }
        if (status == TL_OK && batch) {
            status = tl_ag_mean_dims(t[GRAD], dims, count, true, 0, &t[MEAN_G]);
            if (status == TL_OK) status = tl_ag_mean_dims(t[GX], dims, count, true, 0, &t[MEAN_GX]);
            if (status == TL_OK) status = tl_ag_mul(t[XHAT], t[MEAN_GX], &t[XM]);
            if (status == TL_OK) status = tl_ag_sub(t[GRAD], t[MEAN_G], &t[CENTRED_G]);
            if (status == TL_OK) status = tl_ag_sub(t[CENTRED_G], t[XM], &t[INNER]);
        } else if (status == TL_OK) {
            t[INNER] = tl_retain(t[GRAD]);
        }
        if (status == TL_OK) status = tl_ag_mul(t[INNER], t[SCALE], &t[DX]);
        if (status == TL_OK)
            status = tl_ag_cast(t[DX], node->input_dtype[NORM_INPUT], &gi[NORM_INPUT]);
    }
    release_all(t, TEMPS);
    return status;
}

/* ---- lstm_cell_pointwise, gru_cell_pointwise ------------------------------------------------
   The fused kernels' backward (kernels/cpu/rnn_cell.c) written with recording pointwise ops, the
   activations recomputed from the saved gates (rnn_cell.c saves them for this). */

/* 1 - t, recorded */
static tl_status one_minus(tl_tensor *t, tl_tensor **out) {
    tl_tensor *one;
    TL_TRY(tl_graph_number_like(t, 1.0, &one));
    tl_status status = tl_ag_sub(one, t, out);
    tl_release(one);
    return status;
}

/* The sigmoid's derivative from its value s: s (1 - s), recorded */
static tl_status sigmoid_slope(tl_tensor *s, tl_tensor **out) {
    tl_tensor *rest;
    TL_TRY(one_minus(s, &rest));
    tl_status status = tl_ag_mul(s, rest, out);
    tl_release(rest);
    return status;
}

/* tanh's derivative from its value t: 1 - t^2, recorded */
static tl_status tanh_slope(tl_tensor *t, tl_tensor **out) {
    tl_tensor *square;
    TL_TRY(tl_ag_mul(t, t, &square));
    tl_status status = one_minus(square, out);
    tl_release(square);
    return status;
}

/* Run k (of width H) of t's last dim, recorded */
static tl_status run_of(tl_tensor *t, int k, int64_t H, tl_tensor **out) {
    return tl_ag_narrow(t, t->ndim - 1, k * H, H, out);
}

/* Run k of pre's last dim through sigmoid (or tanh), recorded */
static tl_status activated_run(tl_tensor *pre, int k, int64_t H, bool use_tanh, tl_tensor **out) {
    tl_tensor *run;
    TL_TRY(run_of(pre, k, H, &run));
    tl_status status = use_tanh ? tl_ag_tanh(run, out) : tl_ag_sigmoid(run, out);
    tl_release(run);
    return status;
}

/* LSTM (rnn_cell.c: slot 1 c_prev, 2 c, 3 gates, 4 gates2 when ints[0]): with i, f, o =
   sigmoid and g = tanh of gates (+ gates2)'s runs, dh, dc the outputs' gradients and
   dc' = dc + dh o (1 - tanh(c)^2): d_i = dc' g i (1 - i), d_f = dc' c_prev f (1 - f),
   d_g = dc' i (1 - g^2), d_o = dh tanh(c) o (1 - o) (both gates' gradient), d_c_prev = dc' f. */
enum { LSTM_GATES, LSTM_GATES2, LSTM_C_PREV };

static tl_status lstm_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const bool *needs = node->needs_input_grad;
    const int64_t H = node->input_shape[LSTM_C_PREV][node->input_ndim[LSTM_C_PREV] - 1];
    enum {
        GATES,
        GATES2,
        PRE,
        I,
        F,
        G,
        O,
        C_PREV,
        C,
        DH,
        DC,
        TC,
        TCS,
        DHO,
        DHOT,
        DCT,
        IS,
        FS,
        GS,
        OS,
        DI,
        DF,
        DG,
        DO,
        DGATES,
        TEMPS
    };
    tl_tensor *t[TEMPS] = {0};
    tl_status status = tl_node_saved_attached(node, 3, &t[GATES]);
    if (status == TL_OK && node->ints[0]) status = tl_node_saved_attached(node, 4, &t[GATES2]);
    if (status == TL_OK)
        status = t[GATES2] ? tl_ag_add(t[GATES], t[GATES2], &t[PRE])
                           : (t[PRE] = tl_retain(t[GATES]), TL_OK);
    if (status == TL_OK) status = activated_run(t[PRE], 0, H, false, &t[I]);
    if (status == TL_OK) status = activated_run(t[PRE], 1, H, false, &t[F]);
    if (status == TL_OK) status = activated_run(t[PRE], 2, H, true, &t[G]);
    if (status == TL_OK) status = activated_run(t[PRE], 3, H, false, &t[O]);
    if (status == TL_OK) status = tl_node_saved_attached(node, 1, &t[C_PREV]);
    if (status == TL_OK) status = tl_node_saved_attached(node, 2, &t[C]);
    if (status == TL_OK) status = output_grad(node, 0, g[0], &t[DH]);
    if (status == TL_OK) status = output_grad(node, 1, g[1], &t[DC]);
    if (status == TL_OK) status = tl_ag_tanh(t[C], &t[TC]);
    if (status == TL_OK) status = tanh_slope(t[TC], &t[TCS]);
    if (status == TL_OK) status = tl_ag_mul(t[DH], t[O], &t[DHO]);
    if (status == TL_OK) status = tl_ag_mul(t[DHO], t[TCS], &t[DHOT]);
    if (status == TL_OK) status = tl_ag_add(t[DC], t[DHOT], &t[DCT]);
    if (status == TL_OK && needs[LSTM_C_PREV]) status = tl_ag_mul(t[DCT], t[F], &gi[LSTM_C_PREV]);
    if (status == TL_OK && (needs[LSTM_GATES] || needs[LSTM_GATES2])) {
        status = sigmoid_slope(t[I], &t[IS]);
        if (status == TL_OK) status = sigmoid_slope(t[F], &t[FS]);
        if (status == TL_OK) status = tanh_slope(t[G], &t[GS]);
        if (status == TL_OK) status = sigmoid_slope(t[O], &t[OS]);
        if (status == TL_OK) status = tl_graph_product3(t[DCT], t[G], t[IS], &t[DI]);
        if (status == TL_OK) status = tl_graph_product3(t[DCT], t[C_PREV], t[FS], &t[DF]);
        if (status == TL_OK) status = tl_graph_product3(t[DCT], t[I], t[GS], &t[DG]);
        if (status == TL_OK) status = tl_graph_product3(t[DH], t[TC], t[OS], &t[DO]);
        tl_tensor *runs[4] = {t[DI], t[DF], t[DG], t[DO]};
        if (status == TL_OK) status = tl_ag_cat(runs, 4, t[DI]->ndim - 1, &t[DGATES]);
        if (status == TL_OK && needs[LSTM_GATES]) gi[LSTM_GATES] = tl_retain(t[DGATES]);
        if (status == TL_OK && needs[LSTM_GATES2]) gi[LSTM_GATES2] = tl_retain(t[DGATES]);
    }
    release_all(t, TEMPS);
    return status;
}

/* GRU (rnn_cell.c: slot 1 h_prev, 2 gi, 3 gh): r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z +
   gh_z), n = tanh(gi_n + r gh_n); with dh the output's gradient, d_n' = dh (1 - z) (1 - n^2),
   d_z' = dh (h_prev - n) z (1 - z), d_r' = d_n' gh_n r (1 - r): d_gi = (d_r', d_z', d_n'),
   d_gh = (d_r', d_z', d_n' r), d_h_prev = dh z. */
enum { GRU_GI, GRU_GH, GRU_H_PREV };

static tl_status gru_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const bool *needs = node->needs_input_grad;
    const int64_t H = node->input_shape[GRU_H_PREV][node->input_ndim[GRU_H_PREV] - 1];
    enum {
        GI,
        GH,
        H_PREV,
        DH,
        GI_R,
        GH_R,
        PRE_R,
        R,
        GI_Z,
        GH_Z,
        PRE_Z,
        Z,
        GI_N,
        HN,
        RHN,
        PRE_N,
        N,
        ZM,
        NS,
        DN,
        HMN,
        ZS,
        DZ,
        RS,
        DR,
        DNR,
        TEMPS
    };
    tl_tensor *t[TEMPS] = {0};
    tl_status status = tl_node_saved_attached(node, 2, &t[GI]);
    if (status == TL_OK) status = tl_node_saved_attached(node, 3, &t[GH]);
    if (status == TL_OK) status = tl_node_saved_attached(node, 1, &t[H_PREV]);
    if (status == TL_OK) status = output_grad(node, 0, g[0], &t[DH]);
    if (status == TL_OK) status = run_of(t[GI], 0, H, &t[GI_R]);
    if (status == TL_OK) status = run_of(t[GH], 0, H, &t[GH_R]);
    if (status == TL_OK) status = tl_ag_add(t[GI_R], t[GH_R], &t[PRE_R]);
    if (status == TL_OK) status = tl_ag_sigmoid(t[PRE_R], &t[R]);
    if (status == TL_OK) status = run_of(t[GI], 1, H, &t[GI_Z]);
    if (status == TL_OK) status = run_of(t[GH], 1, H, &t[GH_Z]);
    if (status == TL_OK) status = tl_ag_add(t[GI_Z], t[GH_Z], &t[PRE_Z]);
    if (status == TL_OK) status = tl_ag_sigmoid(t[PRE_Z], &t[Z]);
    if (status == TL_OK) status = run_of(t[GI], 2, H, &t[GI_N]);
    if (status == TL_OK) status = run_of(t[GH], 2, H, &t[HN]);
    if (status == TL_OK) status = tl_ag_mul(t[R], t[HN], &t[RHN]);
    if (status == TL_OK) status = tl_ag_add(t[GI_N], t[RHN], &t[PRE_N]);
    if (status == TL_OK) status = tl_ag_tanh(t[PRE_N], &t[N]);
    if (status == TL_OK && needs[GRU_H_PREV]) status = tl_ag_mul(t[DH], t[Z], &gi[GRU_H_PREV]);
    if (status == TL_OK && (needs[GRU_GI] || needs[GRU_GH])) {
        status = one_minus(t[Z], &t[ZM]);
        if (status == TL_OK) status = tanh_slope(t[N], &t[NS]);
        if (status == TL_OK) status = tl_graph_product3(t[DH], t[ZM], t[NS], &t[DN]);
        if (status == TL_OK) status = tl_ag_sub(t[H_PREV], t[N], &t[HMN]);
        if (status == TL_OK) status = sigmoid_slope(t[Z], &t[ZS]);
        if (status == TL_OK) status = tl_graph_product3(t[DH], t[HMN], t[ZS], &t[DZ]);
        if (status == TL_OK) status = sigmoid_slope(t[R], &t[RS]);
        if (status == TL_OK) status = tl_graph_product3(t[DN], t[HN], t[RS], &t[DR]);
        const int last = node->input_ndim[GRU_H_PREV] - 1;
        if (status == TL_OK && needs[GRU_GI]) {
            tl_tensor *runs[3] = {t[DR], t[DZ], t[DN]};
            status = tl_ag_cat(runs, 3, last, &gi[GRU_GI]);
        }
        if (status == TL_OK && needs[GRU_GH]) {
            status = tl_ag_mul(t[DN], t[R], &t[DNR]);
            tl_tensor *runs[3] = {t[DR], t[DZ], t[DNR]};
            if (status == TL_OK) status = tl_ag_cat(runs, 3, last, &gi[GRU_GH]);
        }
    }
    release_all(t, TEMPS);
    return status;
}

/* ---- max_pool2d, adaptive_max_pool2d ---------------------------------------------------------
   The input gradient puts each g at its window's argmax (pool.c: slot 0 the indices, flat in
   each [H, W] plane): recorded as zeros [N, C, H W] scatter_add (dim 2) of g [N, C, OH OW], whose
   gradient gathers there. */
static tl_status max_pool_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    const int64_t *in = node->input_shape[0];
    if (node->input_ndim[0] != 4)
        return tl_error(TL_ERR_AUTOGRAD, "create_graph: %s: expected a node of a 4-dim input",
                        node->name);
    tl_tensor *indices;
    TL_TRY(tl_node_saved(node, 0, &indices));
    enum { GRAD, ZEROS, FLAT_G, FLAT_I, SCATTERED, TEMPS };
    tl_tensor *t[TEMPS] = {0};
    const int64_t planes[3] = {in[0], in[1], in[2] * in[3]}, rows[3] = {in[0], in[1], -1};
    tl_status status = output_grad(node, 0, g[0], &t[GRAD]);
    if (status == TL_OK)
        status = tl_zeros(planes, 3, t[GRAD]->dtype, tl_tensor_device(t[GRAD]), &t[ZEROS]);
    if (status == TL_OK) status = tl_ag_reshape(t[GRAD], rows, 3, &t[FLAT_G]);
    if (status == TL_OK) status = tl_reshape(indices, rows, 3, &t[FLAT_I]);
    if (status == TL_OK)
        status = tl_ag_scatter_add(t[ZEROS], 2, t[FLAT_I], t[FLAT_G], &t[SCATTERED]);
    if (status == TL_OK) status = tl_ag_reshape(t[SCATTERED], in, 4, &gi[0]);
    release_all(t, TEMPS);
    return status;
}

/* ---- avg_pool2d, adaptive_avg_pool2d, interpolate ----------------------------------------------
   Each is linear in its input: the input gradient is the op's adjoint (its backward op) applied
   to g, and the adjoint's gradient is the op itself. The formula records the adjoint as a node of
   its own, "<op>_backward" (the op's ints and scalars; its output has the op's input shape),
   whose gradient runs the op: plainly, or recorded in its own differentiable formula. */
typedef struct linear_op {
    const char *name, *adjoint_name;
    /* the op on x with node's options (node: the op's or its adjoint's; out_hw: the op's output
       size), recorded or not */
    tl_status (*forward)(const tl_node *node, tl_tensor *x, const int64_t *out_hw, bool record,
                         tl_tensor **out);
    /* the adjoint of g at input_shape, not recorded */
    tl_status (*adjoint)(const tl_node *node, tl_tensor *g, const int64_t *input_shape,
                         tl_tensor **out);
} linear_op;

static tl_status avg_pool_forward(const tl_node *node, tl_tensor *x, const int64_t *out_hw,
                                  bool record, tl_tensor **out) {
    (void)out_hw;
    const tl_pool2d_options o = tl_node_pool_options(node);
    return record ? tl_ag_avg_pool2d(x, &o, out) : tl_avg_pool2d(x, &o, out);
}

static tl_status avg_pool_adjoint(const tl_node *node, tl_tensor *g, const int64_t *input_shape,
                                  tl_tensor **out) {
    const tl_pool2d_options o = tl_node_pool_options(node);
    return tl_avg_pool2d_backward(g, input_shape, &o, out);
}

static tl_status adaptive_avg_forward(const tl_node *node, tl_tensor *x, const int64_t *out_hw,
                                      bool record, tl_tensor **out) {
    (void)node;
    return record ? tl_ag_adaptive_avg_pool2d(x, out_hw[0], out_hw[1], out)
                  : tl_adaptive_avg_pool2d(x, out_hw[0], out_hw[1], out);
}

static tl_status adaptive_avg_adjoint(const tl_node *node, tl_tensor *g, const int64_t *input_shape,
                                      tl_tensor **out) {
    (void)node;
    return tl_adaptive_avg_pool2d_backward(g, input_shape, out);
}

static tl_status interpolate_forward(const tl_node *node, tl_tensor *x, const int64_t *out_hw,
                                     bool record, tl_tensor **out) {
    (void)out_hw;
    const tl_interpolate_options o = tl_node_interpolate_options(node);
    return record ? tl_ag_interpolate(x, &o, out) : tl_interpolate(x, &o, out);
}

static tl_status interpolate_adjoint(const tl_node *node, tl_tensor *g, const int64_t *input_shape,
                                     tl_tensor **out) {
    const tl_interpolate_options o = tl_node_interpolate_options(node);
    return tl_interpolate_backward(g, input_shape, &o, out);
}

static const linear_op linear_ops[] = {
    {"avg_pool2d", "avg_pool2d_backward", avg_pool_forward, avg_pool_adjoint},
    {"adaptive_avg_pool2d", "adaptive_avg_pool2d_backward", adaptive_avg_forward,
     adaptive_avg_adjoint},
    {"upsample_nearest2d", "upsample_nearest2d_backward", interpolate_forward, interpolate_adjoint},
    {"upsample_bilinear2d", "upsample_bilinear2d_backward", interpolate_forward,
     interpolate_adjoint},
};

/* The linear op whose node (the op's, or its adjoint's: *adjoint) node is */
static const linear_op *linear_op_of(const tl_node *node, bool *adjoint) {
    for (size_t i = 0; i < sizeof linear_ops / sizeof linear_ops[0]; i++) {
        *adjoint = strcmp(node->name, linear_ops[i].adjoint_name) == 0;
        if (*adjoint || strcmp(node->name, linear_ops[i].name) == 0) return &linear_ops[i];
    }
    return NULL;
}

/* The adjoint node's gradient: the op on g, not recorded; its input (the op's output) gives the
   output size */
static tl_status adjoint_backward(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    bool adjoint;
    const linear_op *op = linear_op_of(node, &adjoint);
    tl_tensor *grad;
    TL_TRY(tl_cast(g[0], node->output_dtype[0], &grad));
    tl_status status = op->forward(node, grad, node->input_shape[0] + 2, false, &gi[0]);
    tl_release(grad);
    return status;
}

/* Either node's differentiable gradient: the op's records the adjoint of g, the adjoint's
   records the op on g */
static tl_status linear_op_graph(tl_node *node, tl_tensor *const *g, tl_tensor **gi) {
    bool adjoint;
    const linear_op *op = linear_op_of(node, &adjoint);
    tl_tensor *grad;
    TL_TRY(output_grad(node, 0, g[0], &grad));
    tl_status status;
    if (adjoint) {
        status = op->forward(node, grad, node->input_shape[0] + 2, true, &gi[0]);
    } else {
        status = op->adjoint(node, grad, node->input_shape[0], &gi[0]);
        tl_node *adjoint_node = NULL;
        if (status == TL_OK)
            status = tl_record(op->adjoint_name, adjoint_backward, 1, &grad, &gi[0], &adjoint_node);
        if (adjoint_node) {
            memcpy(adjoint_node->ints, node->ints, sizeof node->ints);
            memcpy(adjoint_node->scalar, node->scalar, sizeof node->scalar);
            memcpy(adjoint_node->has_scalar, node->has_scalar, sizeof node->has_scalar);
        }
    }
    tl_release(grad);
    return status;
}

/* ---- the table (tl_graph_formula looks here after double_backward.c's) -------------------- */
const tl_graph_formula_row tl_nn_graph_formulas[] = {
    {"conv2d", 0, conv2d_graph},
    {"conv_transpose2d", 0, conv_transpose2d_graph},
    {"conv2d_backward_weight", 0, backward_weight_graph},
    {"batch_norm", 0, batch_norm_graph},
    {"lstm_cell_pointwise", 0, lstm_graph},
    {"gru_cell_pointwise", 0, gru_graph},
    {"max_pool2d", 0, max_pool_graph},
    {"adaptive_max_pool2d", 0, max_pool_graph},
    {"avg_pool2d", 0, linear_op_graph},
    {"avg_pool2d_backward", 0, linear_op_graph},
    {"adaptive_avg_pool2d", 0, linear_op_graph},
    {"adaptive_avg_pool2d_backward", 0, linear_op_graph},
    {"upsample_nearest2d", 0, linear_op_graph},
    {"upsample_nearest2d_backward", 0, linear_op_graph},
    {"upsample_bilinear2d", 0, linear_op_graph},
    {"upsample_bilinear2d_backward", 0, linear_op_graph},
};

const int tl_nn_graph_formula_count =
    (int)(sizeof tl_nn_graph_formulas / sizeof tl_nn_graph_formulas[0]);
