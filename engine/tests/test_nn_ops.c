/* C unit test of embedding, cross_entropy, layer_norm, batch_norm's backward checks and the
   optimizer steps against float64 references, finite differences and PyTorch. */
#include "nn_test_support.h"

/* ---- embedding ------------------------------------------------------------------------------ */
static tl_status embedding_forward(const void *ctx, tl_tensor *const *in, tl_tensor **out) {
    return tl_ag_embedding((tl_tensor *)ctx, in[0], out);
}

static void test_embedding(void) {
    const int64_t V = 5, D = 4, values[6] = {3, 0, 3, 4, 1, 3};
    const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_BF16, TL_F16};
    for (int it = 0; it < 2; it++) {
        tl_dtype index_dtype = it ? TL_I32 : TL_I64;
        tl_tensor *idx = int_tensor(values, (int64_t[]){2, 3}, 2, index_dtype);
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
            tl_tensor *w = random_tensor((int64_t[]){V, D}, 2, dtypes[d], 1.0), *out = NULL;
            OK(tl_embedding(idx, w, &out));
            if (out) {
                CHECK(out->ndim == 3 && out->shape[0] == 2 && out->shape[1] == 3 &&
                          out->shape[2] == D,
                      "embedding: wrong output shape");
                double *wv = to_doubles(w), want[24];
                for (int i = 0; i < 6; i++)
                    for (int j = 0; j < D; j++) want[i * D + j] = wv[values[i] * D + j];
                check_close("embedding forward", out, want, 0);
                /* backward: rows summed per index */
                tl_tensor *g = random_tensor(out->shape, 3, dtypes[d], 1.0), *gw = NULL;
                OK(tl_embedding_backward(g, idx, V, &gw));
                if (gw) {
                    double *gv = to_doubles(g), sums[20] = {0};
                    for (int i = 0; i < 6; i++)
                        for (int j = 0; j < D; j++) sums[values[i] * D + j] += gv[i * D + j];
                    check_close("embedding backward", gw, sums, tolerance(dtypes[d]));
                    free(gv);
                }
                free(wv);
                tl_release(g), tl_release(gw);
            }
            tl_release(w), tl_release(out);
        }
        tl_tensor *w = random_tensor((int64_t[]){V, D}, 2, TL_F64, 1.0);
        OK(tl_set_requires_grad(w, true));
        gradcheck("embedding gradcheck", embedding_forward, idx, &w, 1);
        tl_release(w), tl_release(idx);
    }
    /* an index out of range: named with V, nothing written */
    tl_tensor *w = random_tensor((int64_t[]){V, D}, 2, TL_F32, 1.0), *out = NULL;
    tl_tensor *bad = int_tensor((int64_t[]){1, 7, 2}, (int64_t[]){3}, 1, TL_I64);
    tl_tensor *neg = int_tensor((int64_t[]){1, -1, 2}, (int64_t[]){3}, 1, TL_I32);
    FAILS(tl_embedding(bad, w, &out), TL_ERR_INDEX,
          "embedding: indices holds 7 at position 1 (shape [3]), out of range for the rows of "
          "weight (expected 0 <= index <= 4)");
    FAILS(tl_embedding(neg, w, &out), TL_ERR_INDEX, "indices holds -1 at position 1");
    tl_tensor *fidx = random_tensor((int64_t[]){3}, 1, TL_F32, 1.0);
    FAILS(tl_embedding(fidx, w, &out), TL_ERR_DTYPE, "indices must be int64 or int32");
    CHECK(out == NULL, "embedding: out was set by a failing call");
    tl_release(w), tl_release(bad), tl_release(neg), tl_release(fidx);
}

/* ---- cross_entropy -------------------------------------------------------------------------- */
typedef struct ce_case {
    tl_tensor *target;
    double smoothing;
} ce_case;

static double ce_ref(const double *x, const int64_t *t, int64_t N, int64_t C, double s) {
    double total = 0;
    for (int64_t i = 0; i < N; i++) {
        const double *row = x + i * C;
        double m = row[0], sum = 0, sum_x = 0;
        for (int64_t c = 1; c < C; c++) m = row[c] > m ? row[c] : m;
        for (int64_t c = 0; c < C; c++) sum += exp(row[c] - m), sum_x += row[c];
        double lse = m + log(sum);
        total += (1 - s) * (lse - row[t[i]]) + s / (double)C * ((double)C * lse - sum_x);
    }
    return total / (double)N;
}

static tl_status ce_forward(const void *ctx, tl_tensor *const *in, tl_tensor **out) {
    const ce_case *c = ctx;
    return tl_ag_cross_entropy(in[0], c->target, c->smoothing, out);
}

static void test_cross_entropy(void) {
    const int64_t N = 6, C = 5, targets[6] = {0, 4, 2, 2, 1, 3};
    const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_BF16, TL_F16};
    const double smoothings[2] = {0, 0.1};
    for (int it = 0; it < 2; it++) {
        tl_tensor *t = int_tensor(targets, &N, 1, it ? TL_I32 : TL_I64);
        for (int si = 0; si < 2; si++) {
            for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
                tl_tensor *x = random_tensor((int64_t[]){N, C}, 2, dtypes[d], 3.0);
                tl_tensor *loss = NULL, *lse = NULL;
                OK(tl_cross_entropy(x, t, smoothings[si], &loss, &lse));
                if (loss) {
                    double *xv = to_doubles(x), want = ce_ref(xv, targets, N, C, smoothings[si]);
                    CHECK(loss->ndim == 0 && loss->dtype == dtypes[d], "cross_entropy: loss "
                                                                       "must be 0-dim");
                    check_close("cross_entropy forward", loss, &want, tolerance(dtypes[d]));
                    free(xv);
                }
                tl_release(x), tl_release(loss), tl_release(lse);
            }
            tl_tensor *x = random_tensor((int64_t[]){N, C}, 2, TL_F64, 3.0);
            OK(tl_set_requires_grad(x, true));
            ce_case c = {t, smoothings[si]};
            gradcheck("cross_entropy gradcheck", ce_forward, &c, &x, 1);
            tl_release(x);
        }
        tl_release(t);
    }
    /* golden values from PyTorch 1.13:
       /usr/bin/python3 -c "import torch; x = torch.tensor([[1.0, 2.0, 0.5, -0.25],
         [-1.0, 0.0, 3.0, 1.5], [0.3, -0.7, 0.1, 2.2]], dtype=torch.float64,
         requires_grad=True); l = torch.nn.functional.cross_entropy(x, torch.tensor([1, 2, 0]),
         label_smoothing=0.2); l.backward(); print(l.item(), x.grad)" */
    const double xv[12] = {1.0, 2.0, 0.5, -0.25, -1.0, 0.0, 3.0, 1.5, 0.3, -0.7, 0.1, 2.2};
    const double golden_loss = 1.1981893875226279;
    const double golden_grad[12] = {
        0.055619257881470263, -0.086839818180771064,  0.027176962837452471,  0.0040435974618483334,
        -0.01193846223737503, -0.0038140744852836399, -0.025182118515491434, 0.040934655238150111,
        -0.24576408462750818, -0.0028457124475367761, 0.014092432618827564,  0.2345173644562174};
    tl_tensor *x = from_values(xv, (int64_t[]){3, 4}, 2, TL_F64), *loss = NULL;
    tl_tensor *t = int_tensor((int64_t[]){1, 2, 0}, (int64_t[]){3}, 1, TL_I64);
    OK(tl_set_requires_grad(x, true));
    OK(tl_ag_cross_entropy(x, t, 0.2, &loss));
    if (loss) {
        check_close("cross_entropy golden loss", loss, &golden_loss, 1e-14);
        OK(tl_backward(loss, NULL, false));
        if (tl_grad(x)) check_close("cross_entropy golden grad", tl_grad(x), golden_grad, 1e-14);
    }
    tl_release(loss), tl_release(x);
    /* large logits stay finite */
    const double big[6] = {1000, 999, -1000, 50, 1e4, 1e4 - 1};
    x = from_values(big, (int64_t[]){2, 3}, 2, TL_F32), loss = NULL;
    tl_tensor *t2 = int_tensor((int64_t[]){1, 2}, (int64_t[]){2}, 1, TL_I64);
    OK(tl_cross_entropy(x, t2, 0, &loss, NULL));
    if (loss) {
        double want = ((log(1 + exp(-1.0)) + 1) + (log(1 + exp(-1.0)) + 1)) / 2;
        check_close("cross_entropy large logits", loss, &want, 1e-5);
    }
    tl_release(loss);
    loss = NULL;
    /* errors */
    tl_tensor *bad = int_tensor((int64_t[]){1, 3}, (int64_t[]){2}, 1, TL_I64);
    tl_tensor *short_t = int_tensor((int64_t[]){1}, (int64_t[]){1}, 1, TL_I64);
    FAILS(tl_cross_entropy(x, bad, 0, &loss, NULL), TL_ERR_INDEX,
          "cross_entropy: target holds 3 at position 1 (shape [2]), out of range for the classes "
          "(expected 0 <= index <= 2)");
    FAILS(tl_cross_entropy(x, short_t, 0, &loss, NULL), TL_ERR_SHAPE, "target must be [2]");
    FAILS(tl_cross_entropy(x, t2, 1.5, &loss, NULL), TL_ERR_ARGUMENT, "label_smoothing");
    CHECK(loss == NULL, "cross_entropy: loss set by a failing call");
    tl_release(x), tl_release(t), tl_release(t2), tl_release(bad), tl_release(short_t);
}

/* ---- layer_norm ----------------------------------------------------------------------------- */
typedef struct norm_case {
    bool weight, bias;
    double eps;
} norm_case;

static tl_status norm_forward(const void *ctx, tl_tensor *const *in, tl_tensor **out) {
    const norm_case *c = ctx;
    return tl_ag_layer_norm(in[0], c->weight ? in[1] : NULL, c->bias ? in[2] : NULL, c->eps, out);
}

static void norm_ref(const double *x, const double *w, const double *b, int64_t rows, int64_t D,
                     double eps, double *out, double *mean, double *rstd) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * D;
        double mu = 0, var = 0;
        for (int64_t j = 0; j < D; j++) mu += xr[j];
        mu /= (double)D;
        for (int64_t j = 0; j < D; j++) var += (xr[j] - mu) * (xr[j] - mu);
        double s = 1 / sqrt(var / (double)D + eps);
        mean[r] = mu, rstd[r] = s;
        for (int64_t j = 0; j < D; j++)
            out[r * D + j] = (xr[j] - mu) * s * (w ? w[j] : 1) + (b ? b[j] : 0);
    }
}

static void test_layer_norm(void) {
    const tl_dtype dtypes[] = {TL_F64, TL_F32, TL_BF16, TL_F16};
    const int64_t shape[3] = {2, 3, 7}, D = 7, rows = 6;
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        tl_tensor *x = random_tensor(shape, 3, dtypes[d], 2.0);
        tl_tensor *w = random_tensor(&D, 1, dtypes[d], 1.0),
                  *b = random_tensor(&D, 1, dtypes[d], 1.0);
        tl_tensor *out = NULL, *mean = NULL, *rstd = NULL;
        OK(tl_layer_norm(x, w, b, 1e-5, &out, &mean, &rstd));
        if (out) {
            double *xv = to_doubles(x), *wv = to_doubles(w), *bv = to_doubles(b);
            double want[42], want_mean[6], want_rstd[6];
            norm_ref(xv, wv, bv, rows, D, 1e-5, want, want_mean, want_rstd);
            CHECK(mean->ndim == 2 && mean->shape[1] == 3, "layer_norm: mean shape");
            check_close("layer_norm forward", out, want, tolerance(dtypes[d]));
            check_close("layer_norm mean", mean, want_mean, dtypes[d] == TL_F64 ? 1e-12 : 1e-6);
            check_close("layer_norm rstd", rstd, want_rstd, dtypes[d] == TL_F64 ? 1e-12 : 1e-5);
            free(xv), free(wv), free(bv);
        }
        tl_release(x), tl_release(w), tl_release(b), tl_release(out), tl_release(mean);
        tl_release(rstd);
    }
    const norm_case cases[] = {
        {true, true, 1e-5}, {false, false, 1e-5}, {true, false, 0.1}, {false, true, 1e-3}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tl_tensor *in[3] = {random_tensor(shape, 3, TL_F64, 2.0), random_tensor(&D, 1, TL_F64, 1.0),
                            random_tensor(&D, 1, TL_F64, 1.0)};
        for (int i = 0; i < 3; i++) OK(tl_set_requires_grad(in[i], true));
        if (!cases[k].weight) OK(tl_set_requires_grad(in[1], false));
        if (!cases[k].bias) OK(tl_set_requires_grad(in[2], false));
        char what[64];
        snprintf(what, sizeof what, "layer_norm gradcheck case %zu", k);
        gradcheck(what, norm_forward, &cases[k], in, 3);
        for (int i = 0; i < 3; i++) tl_release(in[i]);
    }
    /* 16-bit backward against float64 on the same values */
    for (size_t d = 1; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        tl_tensor *x = random_tensor(shape, 3, dtypes[d], 2.0),
                  *w = random_tensor(&D, 1, dtypes[d], 1.0);
        tl_tensor *g = random_tensor(shape, 3, dtypes[d], 1.0);
        tl_tensor *x64 = NULL, *w64 = NULL, *g64 = NULL, *out = NULL, *mean = NULL, *rstd = NULL;
        tl_tensor *out64 = NULL, *mean64 = NULL, *rstd64 = NULL;
        OK(tl_cast(x, TL_F64, &x64));
        OK(tl_cast(w, TL_F64, &w64));
        OK(tl_cast(g, TL_F64, &g64));
        OK(tl_layer_norm(x, w, NULL, 1e-5, &out, &mean, &rstd));
        OK(tl_layer_norm(x64, w64, NULL, 1e-5, &out64, &mean64, &rstd64));
        tl_tensor *gi = NULL, *gw = NULL, *gb = NULL, *gi64 = NULL, *gw64 = NULL, *gb64 = NULL;
        OK(tl_layer_norm_backward_input(g, NULL, x, mean, rstd, w, &gi));
        OK(tl_layer_norm_backward_weight(g, x, mean, rstd, &gw, &gb));
        OK(tl_layer_norm_backward_input(g64, NULL, x64, mean64, rstd64, w64, &gi64));
        OK(tl_layer_norm_backward_weight(g64, x64, mean64, rstd64, &gw64, &gb64));
        if (gi && gw && gb && gi64 && gw64 && gb64) {
            double *a = to_doubles(gi64), *b = to_doubles(gw64), *c = to_doubles(gb64);
            check_close("layer_norm 16-bit backward input", gi, a, 3 * tolerance(dtypes[d]));
            check_close("layer_norm 16-bit backward weight", gw, b, 3 * tolerance(dtypes[d]));
            check_close("layer_norm 16-bit backward bias", gb, c, 3 * tolerance(dtypes[d]));
            free(a), free(b), free(c);
        }
        tl_release(x), tl_release(w), tl_release(g), tl_release(x64), tl_release(w64);
        tl_release(g64), tl_release(out), tl_release(mean), tl_release(rstd), tl_release(out64);
        tl_release(mean64), tl_release(rstd64), tl_release(gi), tl_release(gw), tl_release(gb);
        tl_release(gi64), tl_release(gw64), tl_release(gb64);
    }
    /* gating: only the bias needs grad, so the input kernel never runs and nothing is saved */
    tl_tensor *x = random_tensor(shape, 3, TL_F64, 2.0), *w = random_tensor(&D, 1, TL_F64, 1.0);
    tl_tensor *b = random_tensor(&D, 1, TL_F64, 1.0), *out = NULL;
    OK(tl_set_requires_grad(b, true));
    OK(tl_ag_layer_norm(x, w, b, 1e-5, &out));
    tl_bump_version(x), tl_bump_version(w);
    if (out) {
        tl_tensor *seed = random_tensor(shape, 3, TL_F64, 1.0);
        tl_trace_event *events = NULL;
        int count = 0;
        tl_trace_begin();
        OK(tl_backward(out, seed, false));
        OK(tl_trace_end(&events, &count));
        CHECK(!trace_has(events, count, "layer_norm_backward_input") &&
                  trace_has(events, count, "layer_norm_backward_weight"),
              "layer_norm gating: wrong kernels ran");
        if (tl_grad(b)) {
            double *s = to_doubles(seed), want[7] = {0};
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < D; j++) want[j] += s[r * D + j];
            check_close("layer_norm bias grad", tl_grad(b), want, 1e-12);
            free(s);
        }
        free(events);
        tl_release(seed);
    }
    tl_release(out), tl_release(x), tl_release(w), tl_release(b);
    /* errors */
    x = random_tensor(shape, 3, TL_F32, 1.0), out = NULL;
    tl_tensor *w6 = random_tensor((int64_t[]){6}, 1, TL_F32, 1.0);
    FAILS(tl_layer_norm(x, w6, NULL, 1e-5, &out, NULL, NULL), TL_ERR_SHAPE,
          "weight must be [7] (the last dim of input [2, 3, 7]), got [6]");
    FAILS(tl_layer_norm(x, NULL, NULL, -1, &out, NULL, NULL), TL_ERR_ARGUMENT, "eps");
    CHECK(out == NULL, "layer_norm: out set by a failing call");
    tl_release(x), tl_release(w6);
}

/* ---- optimizer steps ------------------------------------------------------------------------ */
#define PARAMS 6

static double grad_at(int t, int i) {
    return (double)((i * 7 + t * 3) % 11 - 5) / 4;
}

/* torch.optim.SGD written out in double. */
static void sgd_ref(double *p, double *buf, int steps, double lr, double momentum, double dampening,
                    double wd, bool nesterov) {
    for (int t = 0; t < steps; t++)
        for (int i = 0; i < PARAMS; i++) {
            double d = grad_at(t, i) + wd * p[i];
            if (momentum != 0) {
                buf[i] = t == 0 ? d : buf[i] * momentum + (1 - dampening) * d;
                d = nesterov ? d + momentum * buf[i] : buf[i];
            }
            p[i] -= lr * d;
        }
}

/* torch.optim.Adam / AdamW written out in double. */
static void adam_ref(double *p, double *m, double *v, int steps, double lr, double b1, double b2,
                     double eps, double wd, bool decoupled) {
    for (int t = 0; t < steps; t++) {
        double c1 = 1 - pow(b1, t + 1), c2 = 1 - pow(b2, t + 1);
        for (int i = 0; i < PARAMS; i++) {
            double g = grad_at(t, i);
            if (decoupled)
                p[i] *= 1 - lr * wd;
            else
                g += wd * p[i];
            m[i] = m[i] * b1 + (1 - b1) * g;
            v[i] = v[i] * b2 + (1 - b2) * g * g;
            p[i] -= lr / c1 * m[i] / (sqrt(v[i]) / sqrt(c2) + eps);
        }
    }
}

typedef enum { SGD, SGD_NESTEROV, ADAM, ADAMW } optim_kind;

/* Runs steps of kind in dtype from the standard start; returns the params as doubles. */
static double *run_optim(optim_kind kind, tl_dtype dtype, int steps) {
    const int64_t n = PARAMS;
    double p0[PARAMS], zeros[PARAMS] = {0};
    for (int i = 0; i < PARAMS; i++) p0[i] = (i - 2.5) / 2;
    tl_tensor *p = from_values(p0, &n, 1, dtype), *s0 = from_values(zeros, &n, 1, dtype);
    tl_tensor *s1 = from_values(zeros, &n, 1, dtype);
    for (int t = 0; t < steps; t++) {
        double g[PARAMS];
        for (int i = 0; i < PARAMS; i++) g[i] = grad_at(t, i);
        tl_tensor *grad = from_values(g, &n, 1, dtype);
        uint64_t version = p->storage->version;
        switch (kind) {
        case SGD:
            OK(tl_sgd_step(p, grad, s0, 0.1, 0.9, 0.1, 0.01, false, t == 0));
            break;
        case SGD_NESTEROV:
            OK(tl_sgd_step(p, grad, s0, 0.1, 0.9, 0, 0.01, true, t == 0));
            break;
        case ADAM:
            OK(tl_adam_step(p, grad, s0, s1, t + 1, 0.01, 0.9, 0.999, 1e-8, 0.1, false));
            break;
        case ADAMW:
            OK(tl_adam_step(p, grad, s0, s1, t + 1, 0.01, 0.9, 0.999, 1e-8, 0.1, true));
            break;
        }
        CHECK(p->storage->version > version, "optimizer step did not bump the version");
        tl_release(grad);
    }
    double *out = to_doubles(p);
    tl_release(p), tl_release(s0), tl_release(s1);
    return out;
}

static void test_optim(void) {
    const int steps = 4;
    /* float64 against the formulas in double */
    for (int kind = SGD; kind <= ADAMW; kind++) {
        double p[PARAMS], a[PARAMS] = {0}, b[PARAMS] = {0};
        for (int i = 0; i < PARAMS; i++) p[i] = (i - 2.5) / 2;
        if (kind == SGD) sgd_ref(p, a, steps, 0.1, 0.9, 0.1, 0.01, false);
        if (kind == SGD_NESTEROV) sgd_ref(p, a, steps, 0.1, 0.9, 0, 0.01, true);
        if (kind == ADAM) adam_ref(p, a, b, steps, 0.01, 0.9, 0.999, 1e-8, 0.1, false);
        if (kind == ADAMW) adam_ref(p, a, b, steps, 0.01, 0.9, 0.999, 1e-8, 0.1, true);
        double *got = run_optim((optim_kind)kind, TL_F64, steps);
        double err = max_error(got, p, PARAMS);
        CHECK(err < 1e-14, "optimizer %d float64: off the formulas by %g", kind, err);
        free(got);
    }
    /* float32 against PyTorch 1.13 (4 steps, params (i - 2.5) / 2, grads ((7i + 3t) % 11 - 5) / 4):
       /usr/bin/python3 -c "
       import torch
       def run(make):
           p = torch.tensor([(i - 2.5) / 2 for i in range(6)], requires_grad=True)
           opt = make([p])
           for t in range(4):
               p.grad = torch.tensor([((i * 7 + t * 3) % 11 - 5) / 4 for i in range(6)])
               opt.step()
           print(', '.join('%.9gf' % v for v in p.tolist()))
       run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01))
       run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01))
       run(lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1))
       run(lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1))" */
    const double golden[4][PARAMS] = {
        {-0.821478903f, -1.091488f, -0.218154192f, -0.0657845289f, 0.607697845f, 1.48103166f},
        {-0.811747432f, -1.17026281f, -0.20959343f, -0.147713929f, 0.614317894f, 1.57498717f},
        {-1.22257435f, -0.773430467f, -0.239735976f, 0.232119411f, 0.729228079f, 1.26480901f},
        {-1.22010064f, -0.772233844f, -0.239940554f, 0.231902093f, 0.72838217f, 1.26478505f},
    };
    for (int kind = SGD; kind <= ADAMW; kind++) {
        double *got = run_optim((optim_kind)kind, TL_F32, steps);
        double err = max_error(got, golden[kind], PARAMS);
        CHECK(err < 2e-6, "optimizer %d float32: off PyTorch by %g", kind, err);
        free(got);
        got = run_optim((optim_kind)kind, TL_BF16, steps);
        err = max_error(got, golden[kind], PARAMS);
        CHECK(err < 3e-2, "optimizer %d bfloat16: off PyTorch by %g", kind, err);
        free(got);
    }
    /* errors: nothing is written */
    const int64_t n = PARAMS, m = 5;
    tl_tensor *p = random_tensor(&n, 1, TL_F32, 1.0), *g = random_tensor(&n, 1, TL_F32, 1.0);
    tl_tensor *g5 = random_tensor(&m, 1, TL_F32, 1.0), *g64 = random_tensor(&n, 1, TL_F64, 1.0);
    tl_tensor *buf = random_tensor(&n, 1, TL_F32, 1.0);
    double *before = to_doubles(p);
    uint64_t version = p->storage->version;
    FAILS(tl_sgd_step(p, g5, NULL, 0.1, 0, 0, 0, false, true), TL_ERR_SHAPE,
          "grad has shape [5] but param has [6]");
    FAILS(tl_sgd_step(p, g64, NULL, 0.1, 0, 0, 0, false, true), TL_ERR_DTYPE, "grad is float64");
    FAILS(tl_sgd_step(p, g, NULL, 0.1, 0.9, 0, 0, false, true), TL_ERR_ARGUMENT,
          "needs a momentum_buffer");
    FAILS(tl_sgd_step(p, g, buf, 0.1, 0.9, 0.5, 0, true, true), TL_ERR_ARGUMENT, "nesterov");
    FAILS(tl_sgd_step(p, g, NULL, -1, 0, 0, 0, false, true), TL_ERR_ARGUMENT, "lr must be >= 0");
    FAILS(tl_adam_step(p, g, buf, g5, 1, 0.1, 0.9, 0.999, 1e-8, 0, false), TL_ERR_SHAPE,
          "exp_avg_sq has shape [5]");
    FAILS(tl_adam_step(p, g, buf, buf, 0, 0.1, 0.9, 0.999, 1e-8, 0, false), TL_ERR_ARGUMENT,
          "step counts from 1");
    FAILS(tl_adam_step(p, g, buf, buf, 1, 0.1, 1.0, 0.999, 1e-8, 0, true), TL_ERR_ARGUMENT,
          "betas");
    double *after = to_doubles(p);
    CHECK(memcmp(before, after, sizeof *before * PARAMS) == 0 && p->storage->version == version,
          "optimizer: a failing step wrote the param");
    free(before), free(after);
    tl_release(p), tl_release(g), tl_release(g5), tl_release(g64), tl_release(buf);
}

/* ---- batch_norm's backward ops: their checks name the op and the argument ---------------------
 */
static void expect_error(const char *what, tl_status status, const char *needle) {
    CHECK(status != TL_OK && strstr(tl_last_error(), needle) != NULL, "%s: got '%s', wanted '%s'",
          what, status == TL_OK ? "no error" : tl_last_error(), needle);
}

static void test_batch_norm_backward_checks(void) {
    const int64_t shape[3] = {4, 3, 2}, c = 3, c2 = 2;
    tl_tensor *x, *g, *mean, *invstd, *mean64, *short_stat, *sum_dy = NULL, *gi = NULL;
    OK(tl_zeros(shape, 3, TL_F32, TL_CPU, &x));
    OK(tl_zeros(shape, 3, TL_F32, TL_CPU, &g));
    OK(tl_zeros(&c, 1, TL_F32, TL_CPU, &mean));
    OK(tl_ones(&c, 1, TL_F32, TL_CPU, &invstd));
    OK(tl_zeros(&c, 1, TL_F64, TL_CPU, &mean64));
    OK(tl_zeros(&c2, 1, TL_F32, TL_CPU, &short_stat));
    expect_error("input: mean of float64",
                 tl_batch_norm_backward_input(g, x, mean64, invstd, NULL, NULL, NULL, &gi),
                 "batch_norm_backward_input: mean must be float32");
    expect_error("input: invstd of 2",
                 tl_batch_norm_backward_input(g, x, mean, short_stat, NULL, NULL, NULL, &gi),
                 "batch_norm_backward_input: invstd must be [3]");
    expect_error("input: one sum",
                 tl_batch_norm_backward_input(g, x, mean, invstd, NULL, mean, NULL, &gi),
                 "sum_dy and sum_dy_xhat must be both");
    expect_error("reduce: sum_dy_xhat without x",
                 tl_batch_norm_backward_reduce(g, NULL, mean, invstd, NULL, &sum_dy),
                 "batch_norm_backward_reduce: sum_dy_xhat needs input, mean and invstd");
    expect_error("reduce: grad of another shape",
                 tl_batch_norm_backward_reduce(short_stat, x, mean, invstd, NULL, &sum_dy),
                 "batch_norm_backward_reduce: grad must have at least 2 dims");
    CHECK(gi == NULL && sum_dy == NULL, "batch_norm backward: a failing call gave a result");
    /* sum_dy alone reads no input: the sums of ones per channel are N * S */
    tl_tensor *ones;
    OK(tl_ones(shape, 3, TL_F32, TL_CPU, &ones));
    OK(tl_batch_norm_backward_reduce(ones, NULL, NULL, NULL, &sum_dy, NULL));
    const float *s = tl_data(sum_dy);
    CHECK(s[0] == 8 && s[1] == 8 && s[2] == 8, "batch_norm_backward_reduce: sum_dy of ones");
    tl_release(ones), tl_release(sum_dy);
    tl_release(x), tl_release(g), tl_release(mean), tl_release(invstd), tl_release(mean64);
    tl_release(short_stat);
}

/* Mixed precision through the C API: add_layer_norm of a float32 input and a bfloat16 residual
   with a bfloat16 output, and tl_layer_norm_backward_as's gradients (the residual's in bfloat16
   from the same pass, or the input's own tensor when residual_dtype is the input's), against the
   float64 path on the same values; a bad residual_dtype is an error. */
static void test_layer_norm_mixed(void) {
    const int64_t shape[2] = {5, 12}, D = 12;
    tl_tensor *x = random_tensor(shape, 2, TL_F32, 2.0), *r = random_tensor(shape, 2, TL_BF16, 1.0);
    tl_tensor *w = random_tensor(&D, 1, TL_F32, 1.0), *g = random_tensor(shape, 2, TL_BF16, 1.0);
    tl_tensor *x64 = NULL, *r64 = NULL, *w64 = NULL, *g64 = NULL;
    OK(tl_cast(x, TL_F64, &x64));
    OK(tl_cast(r, TL_F64, &r64));
    OK(tl_cast(w, TL_F64, &w64));
    OK(tl_cast(g, TL_F64, &g64));
    tl_tensor *out = NULL, *sum = NULL, *mean = NULL, *rstd = NULL;
    tl_tensor *out64 = NULL, *sum64 = NULL, *mean64 = NULL, *rstd64 = NULL;
    OK(tl_add_layer_norm_as(x, r, w, NULL, 1e-5, TL_BF16, &out, &sum, &mean, &rstd));
    OK(tl_add_layer_norm(x64, r64, w64, NULL, 1e-5, &out64, &sum64, &mean64, &rstd64));
    tl_tensor *gi = NULL, *gr = NULL, *gw = NULL, *gi64 = NULL, *gw64 = NULL, *same = NULL;
    tl_tensor *alone = NULL, *alone_r = NULL;
    if (out && sum && out64) {
        CHECK(out->dtype == TL_BF16 && sum->dtype == TL_F32, "mixed add_layer_norm: dtypes %s %s",
              tl_dtype_name(out->dtype), tl_dtype_name(sum->dtype));
        double *want = to_doubles(out64), *want_sum = to_doubles(sum64);
        check_close("mixed add_layer_norm out", out, want, tolerance(TL_BF16));
        check_close("mixed add_layer_norm sum", sum, want_sum, tolerance(TL_F32));
        free(want), free(want_sum);
        OK(tl_layer_norm_backward_as(g, NULL, sum, mean, rstd, w, TL_BF16, &gi, &gr, &gw, NULL));
        OK(tl_layer_norm_backward(g64, NULL, sum64, mean64, rstd64, w64, &gi64, &gw64, NULL));
        OK(tl_layer_norm_backward_as(g, NULL, sum, mean, rstd, w, TL_F32, &alone, &same, NULL,
                                     NULL));
        OK(tl_layer_norm_backward_as(g, NULL, sum, mean, rstd, w, TL_F16, &alone_r, NULL, NULL,
                                     NULL));
    }
    if (gi && gr && gw && gi64 && gw64 && alone && same) {
        double *want_i = to_doubles(gi64), *want_w = to_doubles(gw64);
        CHECK(gi->dtype == TL_F32 && gr->dtype == TL_BF16 && gw->dtype == TL_F32,
              "mixed layer_norm backward: dtypes %s %s %s", tl_dtype_name(gi->dtype),
              tl_dtype_name(gr->dtype), tl_dtype_name(gw->dtype));
        check_close("mixed layer_norm backward input", gi, want_i, 3 * tolerance(TL_F32));
        check_close("mixed layer_norm backward residual", gr, want_i, tolerance(TL_BF16));
        check_close("mixed layer_norm backward weight", gw, want_w, 3 * tolerance(TL_F32));
        check_close("mixed layer_norm backward input alone", alone, want_i, 3 * tolerance(TL_F32));
        CHECK(same == alone, "residual_dtype the input's: the input's gradient itself");
        free(want_i), free(want_w);
    }
    tl_tensor *bad = NULL, *bad_r = NULL;
    CHECK(tl_layer_norm_backward_as(g, NULL, sum, mean, rstd, w, TL_I32, &bad, &bad_r, NULL,
                                    NULL) == TL_ERR_DTYPE &&
              !bad && !bad_r,
          "mixed layer_norm backward: an int32 residual_dtype is a dtype error");
    CHECK(tl_add_layer_norm_as(x64, r64, NULL, NULL, 1e-5, TL_BF16, &bad, NULL, NULL, NULL) ==
                  TL_ERR_DTYPE &&
              !bad,
          "mixed add_layer_norm: a bfloat16 output of float64 is a dtype error");
    tl_tensor *all[] = {x,   r,   w,    g,    x64,   r64,   w64,    g64,
                        out, sum, mean, rstd, out64, sum64, mean64, rstd64,
                        gi,  gr,  gw,   gi64, gw64,  same,  alone,  alone_r};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tl_release(all[i]);
}

int main(void) {
    test_embedding();
    test_cross_entropy();
    test_layer_norm();
    test_layer_norm_mixed();
    test_batch_norm_backward_checks();
    test_optim();
    if (failures) {
        printf("test_nn_ops: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_nn_ops: all passed\n");
    return 0;
}
