/* nn op bindings: conv2d, embedding, cross_entropy, layer_norm, add_layer_norm, batch_norm, the
   fused LSTM / GRU cell pointwise ops (and their raw forms tl._lstm_cell_forward, ...), dropout,
   the fused optimizer steps (tl._sgd_step, tl._adam_step, tl._adam_step_multi), the fused
   gradient clip (tl._clip_grad_norm_multi) and the row gather of the DataLoader
   (tl._gather_rows). Lua indices (embedding, class targets, gathered rows) count from 1; the C
   API's from 0. */
#include <string.h>

#include "binding.h"
#include "tlua/nn.h"

/* ---- 1-based index tensors ------------------------------------------------------------------ */
/* Checks that indices (the Lua argument named what) is an integer tensor. */
/* ---- conv2d ------------------------------------------------------------------------
 */
/* conv2d's and conv_transpose2d's options: stride, padding, dilation (each an integer or
   {h, w}), groups; output_padding for conv_transpose2d */
static const tlb_option conv_options[] = {
    {"stride", TLB_OPTION_PAIR},
    {"padding", TLB_OPTION_PAIR},
    {"dilation", TLB_OPTION_PAIR},
    {"groups", TLB_OPTION_INTEGER},
    {NULL, 0},
};
static const tlb_option conv_transpose_options[] = {
    {"stride", TLB_OPTION_PAIR},         {"padding", TLB_OPTION_PAIR},
    {"dilation", TLB_OPTION_PAIR},       {"groups", TLB_OPTION_INTEGER},
    {"output_padding", TLB_OPTION_PAIR}, {NULL, 0},
};

/* The arguments (input, weight, bias?, {options}) of op: the options table may take bias's
   place; output_padding (NULL for conv2d) is read when given. */
static void conv_arguments(lua_State *L, const char *op, const tlb_option *accepted,
                           tl_tensor **input, tl_tensor **weight, tl_tensor **bias,
                           tl_conv2d_options *o, int64_t output_padding[2]) {
    *input = tlb_check(L, 1, op), *weight = tlb_check(L, 2, op);
    *bias = NULL;
    int opts = 4;
    if (lua_istable(L, 3) && !tlb_is_tensor(L, 3))
        opts = 3;
    else
        *bias = tlb_opt_tensor(L, 3, op, "bias");
    *o = tl_conv2d_defaults();
    if (tlb_check_options(L, opts, op, accepted)) {
        tlb_option_pair(L, opts, op, "stride", o->stride);
        tlb_option_pair(L, opts, op, "padding", o->padding);
        tlb_option_pair(L, opts, op, "dilation", o->dilation);
        tlb_option_integer(L, opts, op, "groups", &o->groups);
        if (output_padding) tlb_option_pair(L, opts, op, "output_padding", output_padding);
    }
}

/* conv2d(input, weight, bias?, {stride = 1, padding = 0, dilation = 1, groups = 1}) */
static int nn_conv2d(lua_State *L) {
    tl_tensor *input, *weight, *bias;
    tl_conv2d_options o;
    conv_arguments(L, "conv2d", conv_options, &input, &weight, &bias, &o, NULL);
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_conv2d(input, weight, bias, &o, &out);
    return tlb_result(L, box, status, out);
}

/* conv_transpose2d(input, weight, bias?, {stride = 1, padding = 0, output_padding = 0,
   dilation = 1, groups = 1}) */
static int nn_conv_transpose2d(lua_State *L) {
    tl_tensor *input, *weight, *bias;
    tl_conv2d_options o;
    int64_t output_padding[2] = {0, 0};
    conv_arguments(L, "conv_transpose2d", conv_transpose_options, &input, &weight, &bias, &o,
                   output_padding);
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_conv_transpose2d(input, weight, bias, &o, output_padding, &out);
    return tlb_result(L, box, status, out);
}

/* ---- embedding, cross_entropy ------------------------------------------------------------------
 */
/* embedding(indices, weight): indices (int64/int32, any shape) count from 1 */
static int nn_embedding(lua_State *L) {
    tl_tensor *indices = tlb_check(L, 1, "embedding"), *weight = tlb_check(L, 2, "embedding");
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    const bool matrix = weight->ndim == 2; /* else tl_ag_embedding refuses the weight */
    tl_tensor *shifted =
        tlb_zero_based_indices(L, "embedding", "indices", indices,
                               matrix ? "the weight's rows" : NULL, matrix ? weight->shape[0] : 0);
    tl_status status = tl_ag_embedding(shifted, weight, &out);
    tl_release(shifted);
    return tlb_result(L, box, status, out);
}

/* cross_entropy(logits, target, {label_smoothing = 0, reduction = "mean"} or a number): target
   holds classes 1..C */
static int nn_cross_entropy(lua_State *L) {
    static const tlb_option accepted[] = {
        {"label_smoothing", TLB_OPTION_NUMBER},
        {"reduction", TLB_OPTION_STRING},
        {NULL, 0},
    };
    tl_tensor *logits = tlb_check(L, 1, "cross_entropy");
    tl_tensor *target = tlb_check(L, 2, "cross_entropy");
    double smoothing = 0;
    const char *reduction = "mean";
    if (lua_type(L, 3) == LUA_TNUMBER) {
        smoothing = lua_tonumber(L, 3);
    } else if (tlb_check_options(L, 3, "cross_entropy", accepted)) {
        tlb_option_number(L, 3, "cross_entropy", "label_smoothing", &smoothing);
        tlb_option_string(L, 3, "cross_entropy", "reduction", &reduction);
        if (strcmp(reduction, "mean") != 0)
            return tlb_errorf(L, "cross_entropy: reduction '%s' is not supported (only 'mean')",
                              reduction);
    }
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    const bool matrix = logits->ndim == 2; /* else tl_ag_cross_entropy refuses the logits */
    tl_tensor *shifted = tlb_zero_based_indices(L, "cross_entropy", "target", target,
                                                matrix ? "the logits' classes" : NULL,
                                                matrix ? logits->shape[1] : 0);
    tl_status status = tl_ag_cross_entropy(logits, shifted, smoothing, &out);
    tl_release(shifted);
    return tlb_result(L, box, status, out);
}

/* linear_cross_entropy(input [..., C], weight [V, C], target, {bias, label_smoothing = 0,
   ignore_index, reduction = "mean" | "sum", chunk = 0}): the classifier's loss without the
   [N, V] logits (tl_linear_cross_entropy); target holds classes 1..V (or ignore_index) */
static int nn_linear_cross_entropy(lua_State *L) {
    static const char *const op = "linear_cross_entropy";
    static const tlb_option accepted[] = {
        {"bias", TLB_OPTION_TENSOR},          {"label_smoothing", TLB_OPTION_NUMBER},
        {"ignore_index", TLB_OPTION_INTEGER}, {"reduction", TLB_OPTION_STRING},
        {"chunk", TLB_OPTION_INTEGER},        {NULL, 0},
    };
    tl_tensor *input = tlb_check(L, 1, op), *weight = tlb_check(L, 2, op);
    tl_tensor *target = tlb_check(L, 3, op), *bias = NULL;
    tl_linear_cross_entropy_options o = {.reduction = TL_REDUCTION_MEAN};
    if (tlb_check_options(L, 4, op, accepted)) {
        const char *reduction = "mean";
        tlb_option_tensor(L, 4, op, "bias", &bias);
        tlb_option_number(L, 4, op, "label_smoothing", &o.label_smoothing);
        o.has_ignore = tlb_option_integer(L, 4, op, "ignore_index", &o.ignore_index);
        tlb_option_integer(L, 4, op, "chunk", &o.chunk_rows);
        tlb_option_string(L, 4, op, "reduction", &reduction);
        if (strcmp(reduction, "sum") == 0)
            o.reduction = TL_REDUCTION_SUM;
        else if (strcmp(reduction, "mean") != 0)
            return tlb_errorf(L, "%s: reduction must be 'mean' or 'sum', got '%s'", op, reduction);
    }
    tlb_check_index_dtype(L, op, "target", target);
    o.target_base = 1; /* Lua's classes count from 1: the engine reads them so, unshifted */
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_linear_cross_entropy(input, weight, bias, target, &o, &out);
    return tlb_result(L, box, status, out);
}

/* ---- several results ------------------------------------------------------------------------
 */
/* n boxes pushed for results (the first at stack index *base) */
static void new_boxes(lua_State *L, tlb_box **boxes, int n, int *base) {
    *base = lua_gettop(L) + 1;
    for (int i = 0; i < n; i++) boxes[i] = tlb_newbox(L);
}
/* Fills the boxes with out (a NULL result becomes nil), or raises the engine's error. */
static int box_results(lua_State *L, tl_status status, tlb_box **boxes, tl_tensor **out, int n,
                       int base) {
    if (status != TL_OK) return tlb_fail(L);
    for (int i = 0; i < n; i++) {
        if (out[i]) {
            boxes[i]->tensor = out[i];
            tlb_account(L, out[i]);
        } else {
            lua_pushnil(L);
            lua_replace(L, base + i);
        }
    }
    return n;
}

/* ---- layer_norm --------------------------------------------------------------------------------
 */
/* The output_dtype option (at idx) of layer_norm and add_layer_norm over operands a and b (b
   may be NULL): a dtype's name, or "autocast": the autocast dtype inside an autocast region
   (for operands that are not float64), else the op's own. Sets *dtype and returns true when the
   output's dtype is given, false for the op's own. */
static bool output_dtype_option(lua_State *L, int idx, const char *op, const tl_tensor *a,
                                const tl_tensor *b, tl_dtype *dtype) {
    const char *name = NULL;
    if (!tlb_option_string(L, idx, op, "output_dtype", &name)) return false;
    if (strcmp(name, "autocast") == 0) {
        const tl_autocast_state autocast = tl_autocast_get();
        *dtype = autocast.dtype;
        return autocast.enabled && a->dtype != TL_F64 && (!b || b->dtype != TL_F64);
    }
    if (tl_dtype_parse(name, dtype) != TL_OK)
        tlb_errorf(L, "%s: output_dtype must be a dtype's name or \"autocast\", got '%s'", op,
                   name);
    return true;
}

static const tlb_option layer_norm_options[] = {{"output_dtype", TLB_OPTION_STRING}, {NULL, 0}};

/* layer_norm(input, weight?, bias?, eps = 1e-5, {output_dtype}): over the last dim */
static int nn_layer_norm(lua_State *L) {
    const char *op = "layer_norm";
    tl_tensor *input = tlb_check(L, 1, op);
    tl_tensor *weight = tlb_opt_tensor(L, 2, op, "weight");
    tl_tensor *bias = tlb_opt_tensor(L, 3, op, "bias");
    double eps = lua_isnoneornil(L, 4) ? 1e-5 : tlb_check_number(L, 4, op, "eps");
    tl_dtype dtype = TL_F32;
    const bool as = tlb_check_options(L, 5, op, layer_norm_options) &&
                    output_dtype_option(L, 5, op, input, NULL, &dtype);
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = as ? tl_ag_layer_norm_as(input, weight, bias, eps, dtype, &out)
                          : tl_ag_layer_norm(input, weight, bias, eps, &out);
    return tlb_result(L, box, status, out);
}

static const tlb_option add_layer_norm_options[] = {
    {"eps", TLB_OPTION_NUMBER}, {"output_dtype", TLB_OPTION_STRING}, {NULL, 0}};

/* add_layer_norm(x, residual, weight?, bias?, {eps = 1e-5, output_dtype}) -> y, s: s = x +
   residual, y = layer_norm(s) over the last dim, one fused op */
static int nn_add_layer_norm(lua_State *L) {
    const char *op = "add_layer_norm";
    tl_tensor *input = tlb_check(L, 1, op), *residual = tlb_check(L, 2, op);
    tl_tensor *weight = tlb_opt_tensor(L, 3, op, "weight");
    tl_tensor *bias = tlb_opt_tensor(L, 4, op, "bias");
    double eps = 1e-5;
    tl_dtype dtype = TL_F32;
    bool as = false;
    if (tlb_check_options(L, 5, op, add_layer_norm_options)) {
        tlb_option_number(L, 5, op, "eps", &eps);
        as = output_dtype_option(L, 5, op, input, residual, &dtype);
    }
    tlb_box *boxes[2];
    tl_tensor *out[2] = {NULL, NULL};
    int base;
    new_boxes(L, boxes, 2, &base);
    tl_status status =
        as ? tl_ag_add_layer_norm_as(input, residual, weight, bias, eps, dtype, &out[0], &out[1])
           : tl_ag_add_layer_norm(input, residual, weight, bias, eps, &out[0], &out[1]);
    return box_results(L, status, boxes, out, 2, base);
}

/* ---- batch_norm --------------------------------------------------------------------------------
 */
static const tlb_option batch_norm_options[] = {
    {"weight", TLB_OPTION_TENSOR},   {"bias", TLB_OPTION_TENSOR}, {"training", TLB_OPTION_BOOLEAN},
    {"momentum", TLB_OPTION_NUMBER}, {"eps", TLB_OPTION_NUMBER},  {NULL, 0},
};

/* batch_norm(input, running_mean?, running_var?, {weight, bias, training = false, momentum = 0.1,
   eps = 1e-5}): per channel (dim 2); training updates the running statistics in place */
static int nn_batch_norm(lua_State *L) {
    const char *op = "batch_norm";
    tl_tensor *input = tlb_check(L, 1, op);
    tl_tensor *running_mean = tlb_opt_tensor(L, 2, op, "running_mean");
    tl_tensor *running_var = tlb_opt_tensor(L, 3, op, "running_var");
    tl_tensor *weight = NULL, *bias = NULL;
    bool training = false;
    double momentum = 0.1, eps = 1e-5;
    if (tlb_check_options(L, 4, op, batch_norm_options)) {
        tlb_option_tensor(L, 4, op, "weight", &weight);
        tlb_option_tensor(L, 4, op, "bias", &bias);
        tlb_option_bool(L, 4, op, "training", &training);
        tlb_option_number(L, 4, op, "momentum", &momentum);
        tlb_option_number(L, 4, op, "eps", &eps);
    }
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_batch_norm(input, weight, bias, running_mean, running_var, training,
                                        momentum, eps, &out);
    return tlb_result(L, box, status, out);
}

/* ---- dropout ------------------------------------------------------------------------------- */
/* dropout(x, p = 0.5): x * keep / (1 - p), keep = rand(x.shape) >= p drawn in one kernel; p = 0
   returns x itself */
static int nn_dropout(lua_State *L) {
    tl_tensor *x = tlb_check(L, 1, "dropout"), *out = NULL;
    double p = lua_isnoneornil(L, 2) ? 0.5 : tlb_check_number(L, 2, "dropout", "p");
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_dropout(x, p, &out);
    return tlb_result(L, box, status, out);
}

/* ---- optimizer steps (used by tl.optim) ---------------------------------------------------------
 */
/* _sgd_step(param, grad, momentum_buffer|nil, lr, momentum, dampening, weight_decay, nesterov,
   first_step, check_only): in place; check_only: the step's checks alone (a missing buffer is
   one the step will create) */
static int nn_sgd_step(lua_State *L) {
    const char *op = "_sgd_step";
    tl_tensor *param = tlb_check(L, 1, op), *grad = tlb_check(L, 2, op);
    tl_tensor *buffer = tlb_opt_tensor(L, 3, op, "momentum_buffer");
    double lr = tlb_check_number(L, 4, op, "lr");
    double momentum = tlb_check_number(L, 5, op, "momentum");
    double dampening = tlb_check_number(L, 6, op, "dampening");
    double weight_decay = tlb_check_number(L, 7, op, "weight_decay");
    bool nesterov = lua_toboolean(L, 8), first_step = lua_toboolean(L, 9);
    tl_status status = lua_toboolean(L, 10)
                           ? tl_sgd_step_check(param, grad, buffer, lr, momentum, dampening,
                                               weight_decay, nesterov)
                           : tl_sgd_step(param, grad, buffer, lr, momentum, dampening, weight_decay,
                                         nesterov, first_step);
    if (status != TL_OK) return tlb_fail(L);
    return 0;
}

/* Adam's hyper-parameters, the Lua arguments first .. first + 4. */
typedef struct adam_numbers {
    double lr, beta1, beta2, eps, weight_decay;
} adam_numbers;

/* hyper: lr's place holds a tensor {lr, step} (the multi step's hyper form), not read here */
static adam_numbers check_adam_numbers(lua_State *L, int first, const char *op, bool hyper) {
    adam_numbers a;
    a.lr = hyper ? 0.0 : tlb_check_number(L, first, op, "lr");
    a.beta1 = tlb_check_number(L, first + 1, op, "beta1");
    a.beta2 = tlb_check_number(L, first + 2, op, "beta2");
    a.eps = tlb_check_number(L, first + 3, op, "eps");
    a.weight_decay = tlb_check_number(L, first + 4, op, "weight_decay");
    return a;
}

/* _adam_step(param, grad, exp_avg|nil, exp_avg_sq|nil, step, lr, beta1, beta2, eps,
   weight_decay, decoupled, check_only): in place; step counts from 1; check_only: the step's
   checks alone (missing moments are ones the step will create) */
static int nn_adam_step(lua_State *L) {
    const char *op = "_adam_step";
    tl_tensor *param = tlb_check(L, 1, op), *grad = tlb_check(L, 2, op);
    tl_tensor *exp_avg = tlb_opt_tensor(L, 3, op, "exp_avg");
    tl_tensor *exp_avg_sq = tlb_opt_tensor(L, 4, op, "exp_avg_sq");
    int64_t step = tlb_check_int(L, 5, op, "step");
    adam_numbers a = check_adam_numbers(L, 6, op, false);
    bool decoupled = lua_toboolean(L, 11);
    tl_status status = lua_toboolean(L, 12)
                           ? tl_adam_step_check(param, grad, exp_avg, exp_avg_sq, step, a.lr,
                                                a.beta1, a.beta2, a.eps, a.weight_decay, decoupled)
                           : tl_adam_step(param, grad, exp_avg, exp_avg_sq, step, a.lr, a.beta1,
                                          a.beta2, a.eps, a.weight_decay, decoupled);
    if (status != TL_OK) return tlb_fail(L);
    return 0;
}

/* The tensors of the list at idx (n of them; optional: nil, or false/nil entries allowed, which
   give NULL), in scratch memory the collector owns; NULL for an absent optional list. */
static tl_tensor **optim_list(lua_State *L, int idx, const char *op, const char *what, size_t n,
                              bool optional) {
    if (optional && lua_isnoneornil(L, idx)) return NULL;
    if (!lua_istable(L, idx) || tlb_is_tensor(L, idx))
        tlb_type_error(L, idx, op, "a table of tensors");
    lua_Unsigned len = lua_rawlen(L, idx);
    if (optional ? len > n : len != n)
        tlb_errorf(L, "%s: %s holds %llu tensors but params holds %llu", op, what,
                   (unsigned long long)len, (unsigned long long)n);
    tl_tensor **list = lua_newuserdatauv(L, sizeof *list * (n > 0 ? n : 1), 0);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, idx, (lua_Integer)i + 1);
        list[i] = tlb_totensor(L, -1, op);
        if (!list[i] && !(optional && !lua_toboolean(L, -1)))
            tlb_errorf(L, "%s: %s[%llu] expected a tensor%s, got %s", op, what,
                       (unsigned long long)i + 1, optional ? " or false" : "", tlb_typename(L, -1));
        lua_pop(L, 1);
    }
    return list;
}

/* _adam_step_multi(params, grads, exp_avgs, exp_avg_sqs, masters|nil, lr, beta1, beta2, eps,
   weight_decay, step, decoupled): tl_adam_step_multi over the lists (tables of tensors, one per
   parameter; masters[i] false or nil where a parameter has no master copy), in place. lr may be
   a tensor {lr, step} (tl_adam_step_multi_hyper; step is then nil): a captured step. */
static int nn_adam_step_multi(lua_State *L) {
    const char *op = "_adam_step_multi";
    size_t n = tlb_check_list_length(L, 1, op, "params");
    tl_tensor **params = optim_list(L, 1, op, "params", n, false);
    tl_tensor **grads = optim_list(L, 2, op, "grads", n, false);
    tl_tensor **exp_avg = optim_list(L, 3, op, "exp_avgs", n, false);
    tl_tensor **exp_avg_sq = optim_list(L, 4, op, "exp_avg_sqs", n, false);
    tl_tensor **master = optim_list(L, 5, op, "masters", n, true);
    tl_tensor *hyper = tlb_peek_tensor(L, 6);
    adam_numbers a = check_adam_numbers(L, 6, op, hyper != NULL);
    if (hyper) {
        if (tl_adam_step_multi_hyper(params, (const tl_tensor *const *)grads, exp_avg, exp_avg_sq,
                                     master, (int64_t)n, hyper, a.beta1, a.beta2, a.eps,
                                     a.weight_decay, lua_toboolean(L, 12)) != TL_OK)
            return tlb_fail(L);
        return 0;
    }
    int64_t step = tlb_check_int(L, 11, op, "step");
    bool decoupled = lua_toboolean(L, 12);
    if (tl_adam_step_multi(params, (const tl_tensor *const *)grads, exp_avg, exp_avg_sq, master,
                           (int64_t)n, step, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                           decoupled) != TL_OK)
        return tlb_fail(L);
    return 0;
}

/* _clip_grad_norm_multi(grads, max_norm, norm_type = 2): tl_clip_grad_norm_multi over the list (a
   table of tensors, scaled in place) -> the total norm, a new 0-dim tensor (no host wait) */
static int nn_clip_grad_norm_multi(lua_State *L) {
    const char *op = "_clip_grad_norm_multi";
    lua_settop(L, 3); /* the list's scratch goes above the arguments */
    size_t n = tlb_check_list_length(L, 1, op, "grads");
    tl_tensor **grads = optim_list(L, 1, op, "grads", n, false);
    double max_norm = tlb_check_number(L, 2, op, "max_norm");
    double norm_type = lua_isnoneornil(L, 3) ? 2.0 : tlb_check_number(L, 3, op, "norm_type");
    tlb_box *box = tlb_newbox(L);
    tl_tensor *total = NULL;
    tl_status status = tl_clip_grad_norm_multi(grads, (int64_t)n, max_norm, norm_type, &total);
    return tlb_result(L, box, status, total);
}

/* ---- row gather (DataLoader batches) ------------------------------------------------------------
 */
/* Copies rows of the contiguous CPU tensor src into out (CPU, contiguous). */
static void gather_rows_cpu(const tl_tensor *src, const int64_t *rows, int64_t n, tl_tensor *out) {
    size_t row_bytes = tl_dtype_size(src->dtype);
    for (int d = 1; d < src->ndim; d++) row_bytes *= (size_t)src->shape[d];
    const char *from = tl_data(src);
    char *to = tl_data(out);
    for (int64_t i = 0; i < n; i++)
        memcpy(to + (size_t)i * row_bytes, from + (size_t)rows[i] * row_bytes, row_bytes);
}

/* On a device other than the CPU: an embedding of the rows seen as [N, row] (integers and bools
   through float64, exact for |v| <= 2^53). */
static tl_status gather_rows_device(tl_tensor *src, const tl_tensor *rows0, tl_tensor **out) {
    int64_t n = rows0->shape[0];
    int64_t flat[2] = {src->shape[0], 1};
    for (int d = 1; d < src->ndim; d++) flat[1] *= src->shape[d];
    tl_tensor *c = NULL, *as_float = NULL, *table = NULL, *picked = NULL, *cast = NULL;
    tl_status status = tl_contiguous(src, &c);
    bool floating = tl_dtype_is_floating(src->dtype);
    if (status == TL_OK) {
        if (floating)
            as_float = tl_retain(c);
        else
            status = tl_cast(c, TL_F64, &as_float);
    }
    if (status == TL_OK) status = tl_view(as_float, flat, 2, &table);
    if (status == TL_OK) status = tl_embedding(rows0, table, &picked);
    if (status == TL_OK && !floating) status = tl_cast(picked, src->dtype, &cast);
    if (status == TL_OK) {
        int64_t shape[TL_MAX_DIMS];
        memcpy(shape, src->shape, sizeof shape[0] * (size_t)src->ndim);
        shape[0] = n;
        status = tl_view(floating ? picked : cast, shape, src->ndim, out);
    }
    tl_release(c), tl_release(as_float), tl_release(table), tl_release(picked), tl_release(cast);
    return status;
}

/* _gather_rows(t, indices): t[indices[1]], t[indices[2]], ... stacked along dim 1 (as
   index_select(t, 1, indices)); indices 1-D, int64 or int32, counting from 1, moved to t's
   device when they are elsewhere. Not recorded by autograd (data loading). */
static int nn_gather_rows(lua_State *L) {
    const char *op = "_gather_rows";
    tl_tensor *src = tlb_check(L, 1, op), *indices = tlb_check(L, 2, op);
    tlb_check_index_dtype(L, op, "indices", indices);
    if (src->ndim < 1) return tlb_errorf(L, "%s: a 0-dim tensor has no rows", op);
    if (indices->ndim != 1) {
        char s[256];
        return tlb_errorf(L, "%s: indices must be 1-D, got shape %s", op,
                          tl_shape_str(indices, s, sizeof s));
    }
    int64_t n = indices->shape[0], rows = src->shape[0];
    tlb_box *box = tlb_newbox(L);
    tl_tensor *out = NULL;
    tl_status status;
    if (!tl_device_equal(tl_tensor_device(src), tl_tensor_device(indices))) {
        /* indices follow the data: a CPU order gathers rows of a dataset kept on a GPU */
        tlb_box *moved = tlb_newbox(L);
        if (tl_to(indices, indices->dtype, tl_tensor_device(src), &moved->tensor) != TL_OK)
            return tlb_fail(L);
        indices = moved->tensor;
        lua_insert(L, -2); /* keep the moved indices alive below the result's box */
    }
    if (tl_tensor_device(src).type == TL_DEVICE_CPU) {
        /* 0-based row numbers, checked, in a scratch userdata (collected with the stack) */
        int64_t *rows0 = lua_newuserdatauv(L, sizeof(int64_t) * (size_t)(n > 0 ? n : 1), 0);
        tl_tensor *idx = NULL, *c = NULL;
        if (tl_contiguous(indices, &idx) != TL_OK) return tlb_fail(L);
        const void *data = tl_data(idx);
        int64_t bad = -1, value = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = idx->dtype == TL_I64 ? ((const int64_t *)data)[i]
                                             : (int64_t)((const int32_t *)data)[i];
            if (v < 1 || v > rows) {
                bad = i, value = v;
                break;
            }
            rows0[i] = v - 1;
        }
        tl_release(idx);
        if (bad >= 0)
            return tlb_errorf(L,
                              "%s: index %lld at position %lld is out of range for a tensor "
                              "with %lld rows (expected 1 <= index <= %lld)",
                              op, (long long)value, (long long)(bad + 1), (long long)rows,
                              (long long)rows);
        int64_t shape[TL_MAX_DIMS];
        memcpy(shape, src->shape, sizeof shape[0] * (size_t)src->ndim);
        shape[0] = n;
        status = tl_contiguous(src, &c);
        if (status == TL_OK) status = tl_empty(shape, src->ndim, src->dtype, TL_CPU, &out);
        if (status == TL_OK) gather_rows_cpu(c, rows0, n, out);
        tl_release(c);
        if (status != TL_OK) {
            tl_release(out);
            return tlb_fail(L);
        }
        lua_pop(L, 1); /* the scratch rows: box is on top again */
        return tlb_result(L, box, status, out);
    }
    tl_tensor *shifted = NULL;
    status = tlb_check_one_based(indices, op, "indices", "the rows", rows);
    if (status == TL_OK) status = tlb_zero_based(indices, &shifted);
    if (status == TL_OK) status = gather_rows_device(src, shifted, &out);
    tl_release(shifted);
    return tlb_result(L, box, status, out);
}

/* ---- the fused LSTM / GRU cell pointwise ops --------------------------------------------------
 */

/* lstm_cell_pointwise(gates, c_prev) or (gates, gates2, c_prev) -> h, c: recorded */
static int nn_lstm_cell_pointwise(lua_State *L) {
    const char *op = "lstm_cell_pointwise";
    const bool two = !lua_isnoneornil(L, 3);
    tl_tensor *gates = tlb_check(L, 1, op);
    tl_tensor *gates2 = two ? tlb_check(L, 2, op) : NULL;
    tl_tensor *c_prev = tlb_check(L, two ? 3 : 2, op);
    tlb_box *boxes[2];
    tl_tensor *out[2] = {NULL, NULL};
    int base;
    new_boxes(L, boxes, 2, &base);
    tl_status status = tl_ag_lstm_cell_pointwise(gates, gates2, c_prev, &out[0], &out[1]);
    return box_results(L, status, boxes, out, 2, base);
}

/* gru_cell_pointwise(gi, gh, h_prev) -> h: recorded */
static int nn_gru_cell_pointwise(lua_State *L) {
    const char *op = "gru_cell_pointwise";
    tl_tensor *gi = tlb_check(L, 1, op), *gh = tlb_check(L, 2, op), *h_prev = tlb_check(L, 3, op);
    tl_tensor *out = NULL;
    tlb_box *box = tlb_newbox(L);
    tl_status status = tl_ag_gru_cell_pointwise(gi, gh, h_prev, &out);
    return tlb_result(L, box, status, out);
}

/* _lstm_cell_forward(gates, gates2?, c_prev) -> h, c, workspace: not recorded (the fused
   sequence runs of nn.LSTM) */
static int nn_lstm_cell_forward(lua_State *L) {
    const char *op = "_lstm_cell_forward";
    tl_tensor *gates = tlb_check(L, 1, op), *gates2 = tlb_opt_tensor(L, 2, op, "gates2");
    tl_tensor *c_prev = tlb_check(L, 3, op);
    tlb_box *boxes[3];
    tl_tensor *out[3] = {NULL, NULL, NULL};
    int base;
    new_boxes(L, boxes, 3, &base);
    tl_status status = tl_lstm_cell_pointwise(gates, gates2, c_prev, &out[0], &out[1], &out[2]);
    return box_results(L, status, boxes, out, 3, base);
}

/* _lstm_cell_backward(grad_h?, grad_h2?, grad_c?, workspace, c_prev, c, want_c_prev)
   -> grad_gates, grad_c_prev (nil unless wanted): not recorded */
static int nn_lstm_cell_backward(lua_State *L) {
    const char *op = "_lstm_cell_backward";
    tl_tensor *gh = tlb_opt_tensor(L, 1, op, "grad_h"), *gh2 = tlb_opt_tensor(L, 2, op, "grad_h2");
    tl_tensor *gc = tlb_opt_tensor(L, 3, op, "grad_c"), *ws = tlb_check(L, 4, op);
    tl_tensor *c_prev = tlb_check(L, 5, op), *c = tlb_check(L, 6, op);
    const bool want = lua_toboolean(L, 7);
    tlb_box *boxes[2];
    tl_tensor *out[2] = {NULL, NULL};
    int base;
    new_boxes(L, boxes, 2, &base);
    tl_status status =
        tl_lstm_cell_pointwise_backward(gh, gh2, gc, ws, c_prev, c, &out[0], want ? &out[1] : NULL);
    return box_results(L, status, boxes, out, 2, base);
}

/* _lstm_layer_forward(xw, h0, c0, w_hh, reverse) -> out, h_last, c_last, workspaces, cells: one
   LSTM direction over a sequence, not recorded (nn.LSTM's fused runs) */
static int nn_lstm_layer_forward(lua_State *L) {
    const char *op = "_lstm_layer_forward";
    tl_tensor *xw = tlb_check(L, 1, op), *h0 = tlb_check(L, 2, op), *c0 = tlb_check(L, 3, op);
    tl_tensor *w_hh = tlb_check(L, 4, op);
    const bool reverse = lua_toboolean(L, 5);
    tlb_box *boxes[5];
    tl_tensor *out[5] = {NULL, NULL, NULL, NULL, NULL};
    int base;
    new_boxes(L, boxes, 5, &base);
    tl_status status = tl_lstm_layer_forward(xw, h0, c0, w_hh, reverse, &out[0], &out[1], &out[2],
                                             &out[3], &out[4]);
    return box_results(L, status, boxes, out, 5, base);
}

/* _lstm_layer_backward(grad_out?, grad_h?, grad_c?, workspaces, cells, c0, w_hh, reverse)
   -> grad_xw, grad_h0, grad_c0: not recorded */
static int nn_lstm_layer_backward(lua_State *L) {
    const char *op = "_lstm_layer_backward";
    tl_tensor *g_out = tlb_opt_tensor(L, 1, op, "grad_out");
    tl_tensor *g_h = tlb_opt_tensor(L, 2, op, "grad_h"), *g_c = tlb_opt_tensor(L, 3, op, "grad_c");
    tl_tensor *ws = tlb_check(L, 4, op), *cells = tlb_check(L, 5, op), *c0 = tlb_check(L, 6, op);
    tl_tensor *w_hh = tlb_check(L, 7, op);
    const bool reverse = lua_toboolean(L, 8);
    tlb_box *boxes[3];
    tl_tensor *out[3] = {NULL, NULL, NULL};
    int base;
    new_boxes(L, boxes, 3, &base);
    tl_status status = tl_lstm_layer_backward(g_out, g_h, g_c, ws, cells, c0, w_hh, reverse,
                                              &out[0], &out[1], &out[2]);
    return box_results(L, status, boxes, out, 3, base);
}

/* _gru_cell_forward(gi, gh, h_prev) -> h, workspace: not recorded */
static int nn_gru_cell_forward(lua_State *L) {
    const char *op = "_gru_cell_forward";
    tl_tensor *gi = tlb_check(L, 1, op), *gh = tlb_check(L, 2, op), *h_prev = tlb_check(L, 3, op);
    tlb_box *boxes[2];
    tl_tensor *out[2] = {NULL, NULL};
    int base;
    new_boxes(L, boxes, 2, &base);
    tl_status status = tl_gru_cell_pointwise(gi, gh, h_prev, &out[0], &out[1]);
    return box_results(L, status, boxes, out, 2, base);
}

/* _gru_cell_backward(grad_h, grad_h2?, workspace, h_prev) -> grad_gi, grad_gh, grad_h_prev (its
   direct part): not recorded */
static int nn_gru_cell_backward(lua_State *L) {
    const char *op = "_gru_cell_backward";
    tl_tensor *gh = tlb_check(L, 1, op), *gh2 = tlb_opt_tensor(L, 2, op, "grad_h2");
    tl_tensor *ws = tlb_check(L, 3, op), *h_prev = tlb_check(L, 4, op);
    tlb_box *boxes[3];
    tl_tensor *out[3] = {NULL, NULL, NULL};
    int base;
    new_boxes(L, boxes, 3, &base);
    tl_status status =
        tl_gru_cell_pointwise_backward(gh, gh2, ws, h_prev, &out[0], &out[1], &out[2]);
    return box_results(L, status, boxes, out, 3, base);
}

/* ---- nn.LSTM / GRU / RNN on cuDNN (CUDA only; nn/recurrent_dnn.lua's autograd.Function) ---- */
/* the options at idx..idx+4: mode, hidden_size, num_layers, bidirectional, training */
static tl_rnn_dnn_options dnn_options(lua_State *L, int idx) {
    tl_rnn_dnn_options o;
    o.mode = (int)luaL_checkinteger(L, idx);
    o.hidden_size = luaL_checkinteger(L, idx + 1);
    o.num_layers = luaL_checkinteger(L, idx + 2);
    o.bidirectional = lua_toboolean(L, idx + 3);
    o.training = lua_toboolean(L, idx + 4);
    return o;
}

/* _rnn_dnn_layout(mode, hidden, layers, bidirectional, input_size, dtype, device) -> the weight
   space's elements, offsets (int64 [layers * dirs, 2 * gates, 2], 0-based elements, -1: none) */
static int nn_rnn_dnn_layout(lua_State *L) {
    const char *op = "_rnn_dnn_layout";
    tl_rnn_dnn_options o;
    o.mode = (int)luaL_checkinteger(L, 1);
    o.hidden_size = luaL_checkinteger(L, 2);
    o.num_layers = luaL_checkinteger(L, 3);
    o.bidirectional = lua_toboolean(L, 4);
    o.training = false;
    const int64_t input_size = luaL_checkinteger(L, 5);
    const tl_dtype dtype = tlb_check_dtype(L, 6, op);
    const tl_device device = tlb_check_device(L, 7, op);
    int64_t numel = 0;
    tl_tensor *offsets = NULL;
    lua_pushinteger(L, 0); /* numel's place */
    tlb_box *box = tlb_newbox(L);
    if (tl_rnn_dnn_layout(&o, input_size, dtype, device, &numel, &offsets) != TL_OK)
        return tlb_fail(L);
    box->tensor = offsets;
    tlb_account(L, offsets);
    lua_pushinteger(L, numel);
    lua_replace(L, -3);
    return 2;
}

/* _rnn_dnn_forward(x, hx, cx?, weight, mode, hidden, layers, bidirectional, training)
   -> y, hy, cy (LSTM, else nil), reserve (training, else nil) */
static int nn_rnn_dnn_forward(lua_State *L) {
    const char *op = "_rnn_dnn_forward";
    tl_tensor *x = tlb_check(L, 1, op), *hx = tlb_check(L, 2, op);
    tl_tensor *cx = tlb_opt_tensor(L, 3, op, "cx"), *w = tlb_check(L, 4, op);
    tl_rnn_dnn_options o = dnn_options(L, 5);
    tlb_box *boxes[4];
    tl_tensor *out[4] = {NULL, NULL, NULL, NULL};
    int base;
    new_boxes(L, boxes, 4, &base);
    tl_status status = tl_rnn_dnn(x, hx, cx, w, &o, &out[0], &out[1], &out[2], &out[3]);
    return box_results(L, status, boxes, out, 4, base);
}

/* _rnn_dnn_backward(x, hx, cx?, weight, y, reserve, dy, dhy?, dcy?, mode, hidden, layers,
   bidirectional, want_weight) -> dx, dhx, dcx (LSTM, else nil), dweight (wanted, else nil) */
static int nn_rnn_dnn_backward(lua_State *L) {
    const char *op = "_rnn_dnn_backward";
    tl_tensor *x = tlb_check(L, 1, op), *hx = tlb_check(L, 2, op);
    tl_tensor *cx = tlb_opt_tensor(L, 3, op, "cx"), *w = tlb_check(L, 4, op);
    tl_tensor *y = tlb_check(L, 5, op), *reserve = tlb_check(L, 6, op), *dy = tlb_check(L, 7, op);
    tl_tensor *dhy = tlb_opt_tensor(L, 8, op, "dhy"), *dcy = tlb_opt_tensor(L, 9, op, "dcy");
    tl_rnn_dnn_options o = dnn_options(L, 10); /* want_weight in training's place */
    const bool want_weight = o.training;
    o.training = true;
    tlb_box *boxes[4];
    tl_tensor *out[4] = {NULL, NULL, NULL, NULL};
    int base;
    new_boxes(L, boxes, 4, &base);
    tl_status status = tl_rnn_dnn_backward(x, hx, cx, w, y, reserve, dy, dhy, dcy, &o, &out[0],
                                           &out[1], &out[2], want_weight ? &out[3] : NULL);
    return box_results(L, status, boxes, out, 4, base);
}

/* tl.add_layer_norm(x, ...) and x:add_layer_norm(...) */
const luaL_Reg tlb_nn_methods[] = {
    {"add_layer_norm", nn_add_layer_norm},
    {NULL, NULL},
};

const luaL_Reg tlb_nn_functions[] = {
    {"conv2d", nn_conv2d},
    {"conv_transpose2d", nn_conv_transpose2d},
    {"embedding", nn_embedding},
    {"cross_entropy", nn_cross_entropy},
    {"linear_cross_entropy", nn_linear_cross_entropy},
    {"layer_norm", nn_layer_norm},
    {"batch_norm", nn_batch_norm},
    {"lstm_cell_pointwise", nn_lstm_cell_pointwise},
    {"gru_cell_pointwise", nn_gru_cell_pointwise},
    {"_lstm_cell_forward", nn_lstm_cell_forward},
    {"_lstm_layer_forward", nn_lstm_layer_forward},
    {"_lstm_layer_backward", nn_lstm_layer_backward},
    {"_lstm_cell_backward", nn_lstm_cell_backward},
    {"_gru_cell_forward", nn_gru_cell_forward},
    {"_gru_cell_backward", nn_gru_cell_backward},
    {"_rnn_dnn_layout", nn_rnn_dnn_layout},
    {"_rnn_dnn_forward", nn_rnn_dnn_forward},
    {"_rnn_dnn_backward", nn_rnn_dnn_backward},
    {"dropout", nn_dropout},
    {"_sgd_step", nn_sgd_step},
    {"_adam_step", nn_adam_step},
    {"_adam_step_multi", nn_adam_step_multi},
    {"_clip_grad_norm_multi", nn_clip_grad_norm_multi},
    {"_gather_rows", nn_gather_rows},
    {NULL, NULL},
};
