/* nn.LSTM / GRU / RNN on cuDNN as ops (family RNN_DNN, CUDA only): the weight space's layout,
   the forward and the backward (data, then weights); validate, allocate, dispatch. */
#include "core/size.h"
#include "ops/checks.h"
#include "ops/nn/nn_common.h"

static const char *OP = "rnn_dnn";

static int gates_of(int mode) {
    return mode == 0 ? 4 : mode == 1 ? 3 : 1;
}

static tl_status check_options(const tl_rnn_dnn_options *o) {
    if (!o || o->mode < 0 || o->mode > 3)
        return tl_error(TL_ERR_ARGUMENT, "%s: mode must be 0 (LSTM), 1 (GRU), 2 (tanh) or 3 (relu)",
                        OP);
    if (o->hidden_size < 1 || o->num_layers < 1)
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: hidden_size and num_layers must be positive, got %lld and %lld", OP,
                        (long long)o->hidden_size, (long long)o->num_layers);
    return TL_OK;
}

static tl_rnn_dnn_config config_of(const tl_rnn_dnn_options *o, int64_t input_size, int64_t steps,
                                   int64_t batch) {
    return (tl_rnn_dnn_config){.mode = o->mode,
                               .input_size = input_size,
                               .hidden_size = o->hidden_size,
                               .layers = o->num_layers,
                               .steps = steps,
                               .batch = batch,
                               .bidirectional = o->bidirectional,
                               .training = o->training};
}

static tl_status check_cuda(const tl_tensor *t, const char *name) {
    if (tl_tensor_device(t).type != TL_DEVICE_CUDA)
        return tl_error(TL_ERR_DEVICE, "%s: %s must be on a CUDA device (cuDNN's RNN)", OP, name);
    if (t->dtype != TL_F32 && t->dtype != TL_F64 && t->dtype != TL_F16)
        return tl_error(TL_ERR_DTYPE, "%s: %s must be float32, float64 or float16, got %s", OP,
                        name, tl_dtype_name(t->dtype));
    return TL_OK;
}

/* The non-NULL tensors of t[0..n), NULL-terminated, for the trace. */
static const tl_tensor *const *traced(const tl_tensor **list, const tl_tensor *const *t, int n) {
    int k = 0;
    for (int i = 0; i < n && k < 15; i++)
        if (t[i]) list[k++] = t[i];
    list[k] = NULL;
    return list;
}

static tl_status run(tl_op op, tl_tensor *const *out, int nout, const tl_tensor *const *in, int nin,
                     const tl_tensor *ref, const tl_rnn_dnn_config *c) {
    const tl_tensor *all[16], *list[16];
    for (int i = 0; i < nout; i++) all[i] = out[i];
    for (int i = 0; i < nin; i++) all[nout + i] = in[i];
    const tl_kernel_entry *k =
        tl_dispatch(op, tl_tensor_device(ref), ref->dtype, traced(list, all, nout + nin));
    return k ? k->fn.rnn_dnn(out, in, c) : tl_dispatch_status();
}

tl_status tl_rnn_dnn_layout(const tl_rnn_dnn_options *o, int64_t input_size, tl_dtype dtype,
                            tl_device device, int64_t *numel, tl_tensor **offsets) {
    TL_TRY(check_options(o));
    if (input_size < 1)
        return tl_error(TL_ERR_ARGUMENT, "%s: input_size must be positive, got %lld", OP,
                        (long long)input_size);
    tl_tensor *probe = NULL, *out[2] = {NULL, NULL};
    const int64_t zero = 0, two = 2;
    const int64_t shape[3] = {o->num_layers * (o->bidirectional ? 2 : 1), 2 * gates_of(o->mode), 2};
    tl_status status = tl_empty(&zero, 1, dtype, device, &probe);
    if (status == TL_OK) status = check_cuda(probe, "the weights");
    if (status == TL_OK) status = tl_empty(&two, 1, TL_I64, TL_CPU, &out[0]);
    if (status == TL_OK) status = tl_empty(shape, 3, TL_I64, TL_CPU, &out[1]);
    const tl_rnn_dnn_config c = config_of(o, input_size, 0, 0);
    const tl_tensor *in[1] = {probe};
    if (status == TL_OK) status = run(TL_OP_rnn_dnn_layout, out, 2, in, 1, probe, &c);
    tl_release(probe);
    if (status == TL_OK) *numel = ((const int64_t *)tl_data(out[0]))[0];
    tl_release(out[0]);
    if (status != TL_OK) {
        tl_release(out[1]);
        return status;
    }
    *offsets = out[1];
    return TL_OK;
}

/* the reserve's bytes for x's sequence (a layout run with its steps and batch) */
static tl_status reserve_bytes(const tl_rnn_dnn_config *c, const tl_tensor *x, int64_t *bytes) {
    tl_tensor *out[2] = {NULL, NULL}; /* no offsets: the sizes alone */
    const int64_t two = 2;
    tl_status status = tl_empty(&two, 1, TL_I64, TL_CPU, &out[0]);
    const tl_tensor *in[1] = {x};
    if (status == TL_OK) status = run(TL_OP_rnn_dnn_layout, out, 2, in, 1, x, c);
    if (status == TL_OK) *bytes = ((const int64_t *)tl_data(out[0]))[1];
    nn_release_all(out, 2);
    return status;
}

/* t has exactly shape (ndim dims), x's dtype and device */
static tl_status check_shape(const char *name, const tl_tensor *t, const int64_t *shape, int ndim,
                             const tl_tensor *x) {
    TL_TRY(tl_check_tensor_arg(OP, name, t));
    char st[256], sw[256];
    if (!nn_same_shape(t, shape, ndim))
        return tl_error(TL_ERR_SHAPE, "%s: %s must have shape %s, got %s", OP, name,
                        nn_shape_str(shape, ndim, sw, sizeof sw), tl_shape_str(t, st, sizeof st));
    return nn_check_like(OP, "x", x, name, t, true);
}

/* The checked sizes of x [T, N, I] and the states' shape [L * dirs, N, H]. */
static tl_status check_problem(const tl_tensor *x, const tl_tensor *hx, const tl_tensor *cx,
                               const tl_tensor *weight, const tl_rnn_dnn_options *o,
                               int64_t state[3]) {
    TL_TRY(check_options(o));
    TL_TRY(tl_check_tensor_arg(OP, "x", x));
    TL_TRY(check_cuda(x, "x"));
    char sx[256];
    if (x->ndim != 3 || x->shape[0] < 1 || x->shape[1] < 1 || x->shape[2] < 1)
        return tl_error(TL_ERR_SHAPE, "%s: x must be [T, N, input_size] of no empty dim, got %s",
                        OP, tl_shape_str(x, sx, sizeof sx));
    state[0] = o->num_layers * (o->bidirectional ? 2 : 1), state[1] = x->shape[1];
    state[2] = o->hidden_size;
    TL_TRY(check_shape("hx", hx, state, 3, x));
    if (o->mode == 0) TL_TRY(check_shape("cx", cx, state, 3, x));
    TL_TRY(tl_check_tensor_arg(OP, "weight", weight));
    if (weight->ndim != 1)
        return tl_error(TL_ERR_SHAPE, "%s: weight must be the 1-dim weight space", OP);
    return nn_check_like(OP, "x", x, "weight", weight, true);
}

tl_status tl_rnn_dnn(const tl_tensor *x, const tl_tensor *hx, const tl_tensor *cx,
                     const tl_tensor *weight, const tl_rnn_dnn_options *o, tl_tensor **y,
                     tl_tensor **hy, tl_tensor **cy, tl_tensor **reserve) {
    int64_t state[3];
    TL_TRY(check_problem(x, hx, cx, weight, o, state));
    const bool lstm = o->mode == 0;
    const tl_rnn_dnn_config c = config_of(o, x->shape[2], x->shape[0], x->shape[1]);
    const int64_t T = x->shape[0], N = x->shape[1];
    int64_t yshape[3] = {T, N, state[0] / o->num_layers * o->hidden_size}, bytes = 0;
    tl_tensor *in[5], *out[4] = {NULL, NULL, NULL, NULL}, *lengths = NULL;
    const tl_tensor *given[4] = {x, hx, lstm ? cx : NULL, weight};
    tl_status status = nn_contiguous_all(given, in, 4);
    if (status == TL_OK && o->training) status = reserve_bytes(&c, x, &bytes);
    if (status == TL_OK)
        status = tl_full(&N, 1, tl_scalar_int(T), TL_I32, tl_tensor_device(x), &lengths);
    in[4] = lengths;
    if (status == TL_OK) status = tl_empty(yshape, 3, x->dtype, tl_tensor_device(x), &out[0]);
    if (status == TL_OK) status = tl_empty(state, 3, x->dtype, tl_tensor_device(x), &out[1]);
    if (status == TL_OK && lstm)
        status = tl_empty(state, 3, x->dtype, tl_tensor_device(x), &out[2]);
    if (status == TL_OK && o->training) {
        const int64_t words = bytes / 8 + 1;
        status = tl_empty(&words, 1, TL_I64, tl_tensor_device(x), &out[3]);
    }
    if (status == TL_OK)
        status = run(TL_OP_rnn_dnn, out, 4, (const tl_tensor *const *)in, 5, x, &c);
    nn_release_all(in, 5);
    if (status != TL_OK) {
        nn_release_all(out, 4);
        return status;
    }
    *y = out[0], *hy = out[1];
    if (cy)
        *cy = out[2];
    else
        tl_release(out[2]);
    if (reserve)
        *reserve = out[3];
    else
        tl_release(out[3]);
    return TL_OK;
}

tl_status tl_rnn_dnn_backward(const tl_tensor *x, const tl_tensor *hx, const tl_tensor *cx,
                              const tl_tensor *weight, const tl_tensor *y, const tl_tensor *reserve,
                              const tl_tensor *dy, const tl_tensor *dhy, const tl_tensor *dcy,
                              const tl_rnn_dnn_options *o, tl_tensor **dx, tl_tensor **dhx,
                              tl_tensor **dcx, tl_tensor **dweight) {
    int64_t state[3];
    TL_TRY(check_problem(x, hx, cx, weight, o, state));
    const bool lstm = o->mode == 0;
    const int64_t yshape[3] = {x->shape[0], x->shape[1], state[0] / o->num_layers * state[2]};
    TL_TRY(check_shape("y", y, yshape, 3, x));
    TL_TRY(check_shape("dy", dy, yshape, 3, x));
    if (dhy) TL_TRY(check_shape("dhy", dhy, state, 3, x));
    if (dcy && lstm) TL_TRY(check_shape("dcy", dcy, state, 3, x));
    TL_TRY(tl_check_tensor_arg(OP, "reserve", reserve));
    if (tl_tensor_device(reserve).type != TL_DEVICE_CUDA || reserve->dtype != TL_I64)
        return tl_error(TL_ERR_ARGUMENT, "%s: reserve must be the forward's (int64 on the device)",
                        OP);
    tl_rnn_dnn_config c = config_of(o, x->shape[2], x->shape[0], x->shape[1]);
    c.training = true;
    const int64_t T = x->shape[0], N = x->shape[1];
    tl_tensor *in[9], *out[3] = {NULL, NULL, NULL}, *dw = NULL, *lengths = NULL;
    /* y, dy, dhy, dcy, hx, cx, weight, reserve (in place: cuDNN changes it) */
    const tl_tensor *given[8] = {y, dy, dhy, lstm ? dcy : NULL, hx, lstm ? cx : NULL, weight, NULL};
    tl_status status = nn_contiguous_all(given, in, 8);
    in[7] = tl_retain((tl_tensor *)reserve);
    if (status == TL_OK)
        status = tl_full(&N, 1, tl_scalar_int(T), TL_I32, tl_tensor_device(x), &lengths);
    in[8] = lengths;
    if (status == TL_OK) status = tl_empty(x->shape, 3, x->dtype, tl_tensor_device(x), &out[0]);
    if (status == TL_OK) status = tl_empty(state, 3, x->dtype, tl_tensor_device(x), &out[1]);
    if (status == TL_OK && lstm)
        status = tl_empty(state, 3, x->dtype, tl_tensor_device(x), &out[2]);
    if (status == TL_OK)
        status = run(TL_OP_rnn_dnn_backward_data, out, 3, (const tl_tensor *const *)in, 9, x, &c);
    if (status == TL_OK && dweight) {
        tl_tensor *xc = NULL;
        status = tl_contiguous((tl_tensor *)x, &xc);
        if (status == TL_OK)
            status = tl_empty(weight->shape, 1, x->dtype, tl_tensor_device(x), &dw);
        const tl_tensor *win[6] = {xc, in[4], in[0], in[6], in[7], lengths};
        if (status == TL_OK) status = run(TL_OP_rnn_dnn_backward_weight, &dw, 1, win, 6, x, &c);
        tl_release(xc);
    }
    nn_release_all(in, 9);
    if (status != TL_OK) {
        nn_release_all(out, 3);
        tl_release(dw);
        return status;
    }
    *dx = out[0], *dhx = out[1];
    if (dcx)
        *dcx = out[2];
    else
        tl_release(out[2]);
    if (dweight) *dweight = dw;
    return TL_OK;
}
