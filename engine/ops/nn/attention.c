/* scaled_dot_product_attention as ops: q, k, v and the options checked before anything is
   allocated, the leading dims folded into the kernels' [B, H, ., D] views (a contiguous copy only
   when they do not fold or the last dim is strided), the dropout stream reserved, then the
   forward or backward kernel. */
#include <math.h>

#include "core/storage.h"
#include "tlua/runtime.h"
#include "ops/nn/nn_common.h"
#include "ops/view.h"
#include "core/generator.h"

/* The sizes of one call: q [lead..., T, D], k and v [lead..., S, D]; B H = the leading dims'
   product (H the last leading dim, B the others). */
typedef struct attention_sizes {
    int lead;                     /* number of leading dims */
    int64_t B, H, T, S, D, heads; /* heads = B H */
    double scale;                 /* resolved: 1 / sqrt(D) for 0 */
} attention_sizes;

static tl_dtype lse_dtype(tl_dtype dtype) {
    return dtype == TL_F64 ? TL_F64 : TL_F32;
}

static bool same_dims(const tl_tensor *a, const tl_tensor *b, int count) {
    return memcmp(a->shape, b->shape, sizeof a->shape[0] * (size_t)count) == 0;
}

/* One of k, v (named name) against q: device, dtype, dims, leading dims, D, and S against k. */
static tl_status check_kv(const char *op, const tl_tensor *q, const char *name, const tl_tensor *t,
                          const tl_tensor *k) {
    char sq[256], st[256];
    if (!t) return tl_error(TL_ERR_ARGUMENT, "%s: %s is missing", op, name);
    TL_TRY(nn_check_like(op, "q", q, name, t, true));
    const int lead = q->ndim - 2;
    if (t->ndim != q->ndim || !same_dims(q, t, lead))
        return tl_error(TL_ERR_SHAPE,
                        "%s: %s must be [..., S, D] with q's leading dims (q is %s, [..., T, D]), "
                        "got %s",
                        op, name, tl_shape_str(q, sq, sizeof sq), tl_shape_str(t, st, sizeof st));
    if (t->shape[lead + 1] != q->shape[lead + 1])
        return tl_error(TL_ERR_SHAPE,
                        "%s: %s's last dim must be q's head dim D = %lld, got %s %s%s", op, name,
                        (long long)q->shape[lead + 1], name, tl_shape_str(t, st, sizeof st),
                        t == k ? ""
                               : " (a value dim other than the query's is not supported: "
                                 "Dv must equal D)");
    if (t != k && t->shape[lead] != k->shape[lead])
        return tl_error(TL_ERR_SHAPE, "%s: v must have k's number of keys S = %lld, got v %s", op,
                        (long long)k->shape[lead], tl_shape_str(t, st, sizeof st));
    return TL_OK;
}

/* Every argument of a forward or backward call, and the sizes. */
static tl_status check_inputs(const char *op, const tl_tensor *q, const tl_tensor *k,
                              const tl_tensor *v, const tl_attention_options *opts,
                              attention_sizes *s) {
    char sq[256];
    if (!q) return tl_error(TL_ERR_ARGUMENT, "%s: q is missing", op);
    if (q->ndim < 2)
        return tl_error(TL_ERR_SHAPE,
                        "%s: q must have at least 2 dims ([..., T, D]), got %s with %d dim%s", op,
                        tl_shape_str(q, sq, sizeof sq), q->ndim, q->ndim == 1 ? "" : "s");
    TL_TRY(nn_check_floating(op, "q", q));
    if (!k) return tl_error(TL_ERR_ARGUMENT, "%s: k is missing", op);
    TL_TRY(check_kv(op, q, "k", k, k));
    TL_TRY(check_kv(op, q, "v", v, k));
    const tl_attention_options defaults = {0};
    if (!opts) opts = &defaults;
    if (!(opts->scale >= 0) || isinf(opts->scale))
        return tl_error(TL_ERR_ARGUMENT,
                        "%s: scale must be a finite number > 0 (0 for 1 / sqrt(D)), got %g", op,
                        opts->scale);
    if (!(opts->dropout >= 0 && opts->dropout < 1))
        return tl_error(TL_ERR_ARGUMENT, "%s: dropout must be in [0, 1), got %g", op,
                        opts->dropout);
    const int lead = q->ndim - 2;
    *s = (attention_sizes){.lead = lead,
                           .B = 1,
                           .H = lead > 0 ? q->shape[lead - 1] : 1,
                           .T = q->shape[lead],
                           .S = k->shape[lead],
                           .D = q->shape[lead + 1]};
    for (int d = 0; d + 1 < lead; d++) s->B *= q->shape[d]; /* q's shape is checked: no overflow */
    s->heads = s->B * s->H;
    s->scale = opts->scale > 0 ? opts->scale : s->D > 0 ? 1.0 / sqrt((double)s->D) : 1.0;
    return TL_OK;
}

/* t [lead..., R, D] as the kernels' [B, H, R, D] view (last stride 1): a view when the leading
   dims fold into B (their strides chain), else a contiguous copy. A new reference. */
static tl_status as_4d(const tl_tensor *t, const attention_sizes *s, tl_tensor **out) {
    const int lead = s->lead;
    const int64_t R = t->shape[lead], D = t->shape[lead + 1];
    bool foldable = D <= 1 || t->strides[lead + 1] == 1;
    int64_t stride_b = 0, chained = -1;
    for (int d = lead - 2; d >= 0 && foldable; d--) { /* dims 0 .. lead - 2 make B */
        if (t->shape[d] == 1) continue;
        if (chained >= 0 && t->strides[d] != chained) foldable = false;
        if (chained < 0) stride_b = t->strides[d];
        chained = t->strides[d] * t->shape[d];
    }
    if (!foldable) {
        tl_tensor *c;
        TL_TRY(tl_contiguous((tl_tensor *)t, &c));
        tl_status status = as_4d(c, s, out);
        tl_release(c);
        return status;
    }
    /* a size-1 dim's stride is never used: give it the contiguous value */
    const int64_t row = t->strides[lead], stride_h = lead > 0 ? t->strides[lead - 1] : R * D;
    if (chained < 0) stride_b = s->H * stride_h;
    const int64_t shape[4] = {s->B, s->H, R, D};
    const int64_t strides[4] = {stride_b, stride_h, row, 1};
    return tl_make_view(t, shape, strides, 4, t->offset, out);
}

/* lse-shaped [lead..., T] (contiguous) as the kernels' [B, H, T]. */
static tl_status as_3d(const tl_tensor *t, const attention_sizes *s, tl_tensor **out) {
    const int64_t shape[3] = {s->B, s->H, s->T};
    const int64_t strides[3] = {s->H * s->T, s->T, 1};
    return tl_make_view(t, shape, strides, 3, t->offset, out);
}

static void lse_shape(const tl_tensor *q, int64_t *shape) {
    memcpy(shape, q->shape, sizeof shape[0] * (size_t)(q->ndim - 1));
}

/* A new out [lead..., H, T, D] laid out as [lead..., T, H, D] (each position's heads together, as
   torch's flash attention lays it out): a transposed view of a contiguous tensor, so the usual
   next step, out:transpose(H, T):reshape(..., T, H * D), costs no copy (nor its gradient). With
   fewer than 3 dims, contiguous. */
static tl_status new_output(const tl_tensor *q, tl_tensor **out) {
    const tl_device device = tl_tensor_device(q);
    if (q->ndim < 3) return tl_empty(q->shape, q->ndim, q->dtype, device, out);
    const int h = q->ndim - 3, t = q->ndim - 2;
    int64_t shape[TL_MAX_DIMS];
    memcpy(shape, q->shape, sizeof shape[0] * (size_t)q->ndim);
    shape[h] = q->shape[t], shape[t] = q->shape[h];
    tl_tensor *positions_first = NULL;
    TL_TRY(tl_empty(shape, q->ndim, q->dtype, device, &positions_first));
    tl_status status = tl_transpose(positions_first, h, t, out);
    tl_release(positions_first);
    return status;
}

tl_status tl_scaled_dot_product_attention_lse(const tl_tensor *q, const tl_tensor *k,
                                              const tl_tensor *v, const tl_attention_options *opts,
                                              tl_tensor **out, tl_tensor **lse, uint64_t *seed,
                                              uint64_t *counter) {
    const char *op = "scaled_dot_product_attention";
    attention_sizes s;
    TL_TRY(check_inputs(op, q, k, v, opts, &s));
    const double dropout = opts ? opts->dropout : 0;
    int64_t scores = 0; /* B H T S: the virtual [..., T, S] the dropout mask indexes */
    if (!tl_size_mul(s.heads, s.T, &scores) || !tl_size_mul(scores, s.S, &scores))
        return tl_error(TL_ERR_SHAPE,
                        "%s: the attention matrix [..., T = %lld, S = %lld] has too many elements",
                        op, (long long)s.T, (long long)s.S);
    tl_attention_args args = {.scale = s.scale,
                              .dropout = dropout,
                              .causal = opts && opts->causal,
                              .cudnn = tl_cudnn_enabled()};
    const tl_device device = tl_tensor_device(q);
    const tl_dtype dtype = q->dtype;
    int64_t lshape[TL_MAX_DIMS];
    lse_shape(q, lshape);
    /* no keys: the output is an empty sum (zeros) and every lse is -inf; no kernel */
    const bool run = s.heads > 0 && s.T > 0 && s.S > 0 && s.D > 0;
    tl_tensor *o = NULL, *l = NULL, *q4 = NULL, *k4 = NULL, *v4 = NULL, *o4 = NULL, *l3 = NULL;
    tl_status status = run       ? new_output(q, &o)
                       : s.S > 0 ? tl_empty(q->shape, q->ndim, dtype, device, &o)
                                 : tl_zeros(q->shape, q->ndim, dtype, device, &o);
    if (status == TL_OK)
        status = run ? tl_empty(lshape, q->ndim - 1, lse_dtype(dtype), device, &l)
                     : tl_full(lshape, q->ndim - 1, tl_scalar_float(s.S == 0 ? -INFINITY : 0.0),
                               lse_dtype(dtype), device, &l);
    /* the stream is taken whenever the mask has elements, as rand would take it */
    if (status == TL_OK && dropout > 0 && scores > 0)
        tl_random_reserve(device, (uint64_t)(scores / 4 + (scores % 4 != 0)), &args.seed,
                          &args.counter);
    if (status == TL_OK && run) {
        status = as_4d(q, &s, &q4);
        if (status == TL_OK) status = as_4d(k, &s, &k4);
        if (status == TL_OK) status = as_4d(v, &s, &v4);
        if (status == TL_OK) status = as_4d(o, &s, &o4);
        if (status == TL_OK) status = as_3d(l, &s, &l3);
        if (status == TL_OK) {
            const tl_kernel_entry *kernel = tl_dispatch(TL_OP_scaled_dot_product_attention, device,
                                                        dtype, NN_TENSORS(o4, q4, k4, v4));
            status =
                kernel ? kernel->fn.attention(o4, l3, q4, k4, v4, &args) : tl_dispatch_status();
        }
    }
    tl_release(q4), tl_release(k4), tl_release(v4), tl_release(o4), tl_release(l3);
    if (status != TL_OK) {
        tl_release(o), tl_release(l);
        return status;
    }
    *out = o;
    if (lse)
        *lse = l;
    else
        tl_release(l);
    if (seed) *seed = args.seed;
    if (counter) *counter = args.counter;
    return TL_OK;
}

tl_status tl_scaled_dot_product_attention(const tl_tensor *q, const tl_tensor *k,
                                          const tl_tensor *v, const tl_attention_options *opts,
                                          tl_tensor **out) {
    return tl_scaled_dot_product_attention_lse(q, k, v, opts, out, NULL, NULL, NULL);
}

/* t (named name) has exactly shape and dtype, on q's device. */
static tl_status check_saved(const char *op, const tl_tensor *q, const char *name,
                             const tl_tensor *t, const int64_t *shape, int ndim, tl_dtype dtype) {
    char want[256], got[256];
    if (!t) return tl_error(TL_ERR_ARGUMENT, "%s: %s is missing", op, name);
    TL_TRY(nn_check_like(op, "q", q, name, t, false));
    if (t->dtype != dtype)
        return tl_error(TL_ERR_DTYPE, "%s: %s must be %s, got %s", op, name, tl_dtype_name(dtype),
                        tl_dtype_name(t->dtype));
    if (!nn_same_shape(t, shape, ndim))
        return tl_error(TL_ERR_SHAPE, "%s: %s must be %s, got %s", op, name,
                        nn_shape_str(shape, ndim, want, sizeof want),
                        tl_shape_str(t, got, sizeof got));
    return TL_OK;
}

tl_status tl_scaled_dot_product_attention_backward(const tl_tensor *grad, const tl_tensor *q,
                                                   const tl_tensor *k, const tl_tensor *v,
                                                   const tl_tensor *out, const tl_tensor *lse,
                                                   const tl_attention_options *opts, uint64_t seed,
                                                   uint64_t counter, tl_tensor **grad_q,
                                                   tl_tensor **grad_k, tl_tensor **grad_v) {
    const char *op = "scaled_dot_product_attention_backward";
    attention_sizes s;
    TL_TRY(check_inputs(op, q, k, v, opts, &s));
    int64_t lshape[TL_MAX_DIMS];
    lse_shape(q, lshape);
    TL_TRY(check_saved(op, q, "grad", grad, q->shape, q->ndim, q->dtype));
    TL_TRY(check_saved(op, q, "out", out, q->shape, q->ndim, q->dtype));
    TL_TRY(check_saved(op, q, "lse", lse, lshape, q->ndim - 1, lse_dtype(q->dtype)));
    if (!grad_q && !grad_k && !grad_v) return TL_OK;
    const tl_device device = tl_tensor_device(q);
    const tl_dtype dtype = q->dtype;
    const tl_attention_args args = {.scale = s.scale,
                                    .dropout = opts ? opts->dropout : 0,
                                    .causal = opts && opts->causal,
                                    .cudnn = tl_cudnn_enabled(),
                                    .seed = seed,
                                    .counter = counter};
    /* no products (T, S, D or the heads zero): every gradient is an empty sum */
    const bool run = s.heads > 0 && s.T > 0 && s.S > 0 && s.D > 0;
    tl_tensor *gq = NULL, *gk = NULL, *gv = NULL;
    tl_tensor *views[9] = {0}; /* q, k, v, out, grad, lse, delta, the grads' views */
    tl_tensor **q4 = &views[0], **k4 = &views[1], **v4 = &views[2], **o4 = &views[3];
    tl_tensor **g4 = &views[4], **l3 = &views[5], **delta = &views[6];
    tl_tensor *grads4[3] = {0};
    tl_status status = TL_OK;
    tl_status (*make)(const int64_t *, int, tl_dtype, tl_device, tl_tensor **) =
        run ? tl_empty : tl_zeros;
    if (run && grad_q && grad_k && grad_v) {
        /* q, k and v cut from one projection get their gradients side by side in one buffer
           laid out as theirs, which the cut's backward takes as it is (no copy) */
        const tl_tensor *like[3] = {q, k, v};
        tl_tensor *made[3];
        status = tl_empty_siblings(like, 3, made);
        gq = made[0], gk = made[1], gv = made[2];
    } else {
        if (grad_q) status = make(q->shape, q->ndim, dtype, device, &gq);
        if (status == TL_OK && grad_k) status = make(k->shape, k->ndim, dtype, device, &gk);
        if (status == TL_OK && grad_v) status = make(v->shape, v->ndim, dtype, device, &gv);
    }
    if (status == TL_OK && run) {
        const int64_t dshape[3] = {s.B, s.H, s.T};
        status = as_4d(q, &s, q4);
        if (status == TL_OK) status = as_4d(k, &s, k4);
        if (status == TL_OK) status = as_4d(v, &s, v4);
        if (status == TL_OK) status = as_4d(out, &s, o4);
        if (status == TL_OK) status = as_4d(grad, &s, g4);
        if (status == TL_OK) {
            tl_tensor *lc = NULL;
            status = tl_contiguous((tl_tensor *)lse, &lc);
            if (status == TL_OK) status = as_3d(lc, &s, l3);
            tl_release(lc);
        }
        if (status == TL_OK) status = tl_empty(dshape, 3, lse_dtype(dtype), device, delta);
        tl_tensor *grads[3] = {gq, gk, gv};
        for (int i = 0; i < 3 && status == TL_OK; i++)
            if (grads[i]) status = as_4d(grads[i], &s, &grads4[i]);
        if (status == TL_OK) {
            tl_tensor *first = grads4[0] ? grads4[0] : grads4[1] ? grads4[1] : grads4[2];
            const tl_kernel_entry *kernel =
                tl_dispatch(TL_OP_scaled_dot_product_attention_backward, device, dtype,
                            NN_TENSORS(first, *g4, *q4, *k4));
            status = kernel ? kernel->fn.attention_backward(grads4[0], grads4[1], grads4[2], *delta,
                                                            *g4, *q4, *k4, *v4, *o4, *l3, &args)
                            : tl_dispatch_status();
        }
    }
    for (int i = 0; i < 7; i++) tl_release(views[i]);
    for (int i = 0; i < 3; i++) tl_release(grads4[i]);
    if (status != TL_OK) {
        tl_release(gq), tl_release(gk), tl_release(gv);
        return status;
    }
    if (grad_q) *grad_q = gq;
    if (grad_k) *grad_k = gk;
    if (grad_v) *grad_v = gv;
    return TL_OK;
}
