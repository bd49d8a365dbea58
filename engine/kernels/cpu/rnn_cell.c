/* CPU kernels of the fused LSTM / GRU cell pointwise math (family RNN_CELL), forward and
   backward, one pass over the rows each; 16-bit dtypes compute in float32. */
#include "kernels/cpu/nn_kernels.h"

static inline float sigmoid_f(float x) {
    return 1.0f / (1.0f + expf(-x));
}
static inline double sigmoid_d(double x) {
    return 1.0 / (1.0 + exp(-x));
}
#define NN_TANH(x)    _Generic((x), float : tanhf, double : tanh)(x)
#define NN_SIGMOID(x) _Generic((x), float : sigmoid_f, double : sigmoid_d)(x)

/* Rows N and hidden size H of the [N, H] state t (any leading dims). */
static void rows_of(const tl_tensor *t, int64_t *N, int64_t *H) {
    *H = t->ndim ? t->shape[t->ndim - 1] : 1;
    *N = *H ? tl_numel(t) / *H : 0;
}

static const void *data_or_null(const tl_tensor *t) {
    return t ? tl_data(t) : NULL;
}

/* LSTM forward. out: h, c, workspace (the activated gates i, f, g, o, [N, 4H]; may be NULL);
   in: gates [N, 4H], gates2 (added to gates; may be NULL), c_prev [N, H]. */
#define DEFINE_LSTM_FORWARD(suffix, T, C, LOAD, STORE)                                             \
    static tl_status lstm_forward_##suffix(tl_tensor *const *out, const tl_tensor *const *in,      \
                                           const tl_op_args *args) {                               \
        (void)args;                                                                                \
        int64_t N, H;                                                                              \
        rows_of(in[2], &N, &H);                                                                    \
        const T *g1 = tl_data(in[0]), *g2 = data_or_null(in[1]), *cp = tl_data(in[2]);             \
        T *h = tl_data(out[0]), *c = tl_data(out[1]), *ws = out[2] ? tl_data(out[2]) : NULL;       \
        NN_PARALLEL_FOR(N *H * 6) for (int64_t r = 0; r < N; r++) {                                \
            const T *a = g1 + r * 4 * H, *b = g2 ? g2 + r * 4 * H : NULL;                          \
            for (int64_t j = 0; j < H; j++) {                                                      \
                C pre[4];                                                                          \
                for (int k = 0; k < 4; k++)                                                        \
                    pre[k] = LOAD(a[k * H + j]) + (b ? LOAD(b[k * H + j]) : (C)0);                 \
                const C i = NN_SIGMOID(pre[0]), f = NN_SIGMOID(pre[1]), g = NN_TANH(pre[2]),       \
                        o = NN_SIGMOID(pre[3]);                                                    \
                const C cn = f * LOAD(cp[r * H + j]) + i * g;                                      \
                c[r * H + j] = STORE(cn);                                                          \
                h[r * H + j] = STORE(o * NN_TANH(cn));                                             \
                if (ws) {                                                                          \
                    T *w = ws + r * 4 * H + j;                                                     \
                    w[0] = STORE(i), w[H] = STORE(f), w[2 * H] = STORE(g), w[3 * H] = STORE(o);    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }
NN_FOR_FLOATING(DEFINE_LSTM_FORWARD)

/* LSTM backward. out: d_gates [N, 4H], d_c_prev (may be NULL); in: d_h, d_h2 (added to d_h),
   d_c (each may be NULL: zero), workspace, c_prev, c. With dh = d_h + d_h2 and
   dc = d_c + dh o (1 - tanh(c)^2): d_i = dc g i (1 - i), d_f = dc c_prev f (1 - f),
   d_g = dc i (1 - g^2), d_o = dh tanh(c) o (1 - o), d_c_prev = dc f. */
#define DEFINE_LSTM_BACKWARD(suffix, T, C, LOAD, STORE)                                            \
    static tl_status lstm_backward_##suffix(tl_tensor *const *out, const tl_tensor *const *in,     \
                                            const tl_op_args *args) {                              \
        (void)args;                                                                                \
        int64_t N, H;                                                                              \
        rows_of(in[4], &N, &H);                                                                    \
        const T *dh1 = data_or_null(in[0]), *dh2 = data_or_null(in[1]),                            \
                *dcn = data_or_null(in[2]);                                                        \
        const T *ws = tl_data(in[3]), *cp = tl_data(in[4]), *cc = tl_data(in[5]);                  \
        T *dg = tl_data(out[0]), *dcp = out[1] ? tl_data(out[1]) : NULL;                           \
        NN_PARALLEL_FOR(N *H * 10) for (int64_t r = 0; r < N; r++) {                               \
            for (int64_t j = 0; j < H; j++) {                                                      \
                const int64_t s = r * H + j;                                                       \
                const T *w = ws + r * 4 * H + j;                                                   \
                const C i = LOAD(w[0]), f = LOAD(w[H]), g = LOAD(w[2 * H]), o = LOAD(w[3 * H]);    \
                const C dh = (dh1 ? LOAD(dh1[s]) : (C)0) + (dh2 ? LOAD(dh2[s]) : (C)0);            \
                const C tc = NN_TANH(LOAD(cc[s]));                                                 \
                const C dc = (dcn ? LOAD(dcn[s]) : (C)0) + dh * o * ((C)1 - tc * tc);              \
                T *d = dg + r * 4 * H + j;                                                         \
                d[0] = STORE(dc * g * i * ((C)1 - i));                                             \
                d[H] = STORE(dc * LOAD(cp[s]) * f * ((C)1 - f));                                   \
                d[2 * H] = STORE(dc * i * ((C)1 - g * g));                                         \
                d[3 * H] = STORE(dh * tc * o * ((C)1 - o));                                        \
                if (dcp) dcp[s] = STORE(dc * f);                                                   \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }
NN_FOR_FLOATING(DEFINE_LSTM_BACKWARD)

/* GRU forward. out: h, workspace (r, z, n and gh's n part, [N, 4H]; may be NULL); in: gi, gh
   [N, 3H], h_prev [N, H]. r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z),
   n = tanh(gi_n + r gh_n), h = n + z (h_prev - n). */
#define DEFINE_GRU_FORWARD(suffix, T, C, LOAD, STORE)                                              \
    static tl_status gru_forward_##suffix(tl_tensor *const *out, const tl_tensor *const *in,       \
                                          const tl_op_args *args) {                                \
        (void)args;                                                                                \
        int64_t N, H;                                                                              \
        rows_of(in[2], &N, &H);                                                                    \
        const T *gi = tl_data(in[0]), *gh = tl_data(in[1]), *hp = tl_data(in[2]);                  \
        T *h = tl_data(out[0]), *ws = out[1] ? tl_data(out[1]) : NULL;                             \
        NN_PARALLEL_FOR(N *H * 8) for (int64_t r = 0; r < N; r++) {                                \
            const T *a = gi + r * 3 * H, *b = gh + r * 3 * H;                                      \
            for (int64_t j = 0; j < H; j++) {                                                      \
                const C rg = NN_SIGMOID(LOAD(a[j]) + LOAD(b[j]));                                  \
                const C z = NN_SIGMOID(LOAD(a[H + j]) + LOAD(b[H + j]));                           \
                const C hn = LOAD(b[2 * H + j]);                                                   \
                const C n = NN_TANH(LOAD(a[2 * H + j]) + rg * hn);                                 \
                h[r * H + j] = STORE(n + z * (LOAD(hp[r * H + j]) - n));                           \
                if (ws) {                                                                          \
                    T *w = ws + r * 4 * H + j;                                                     \
                    w[0] = STORE(rg), w[H] = STORE(z), w[2 * H] = STORE(n), w[3 * H] = STORE(hn);  \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }
NN_FOR_FLOATING(DEFINE_GRU_FORWARD)

/* GRU backward. out: d_gi, d_gh [N, 3H], d_h_prev [N, H] (each may be NULL); in: d_h, d_h2
   (added to d_h; may be NULL), workspace, h_prev. With dh = d_h + d_h2:
   d_n' = dh (1 - z) (1 - n^2) (n's pre-activation), d_z' = dh (h_prev - n) z (1 - z),
   d_r' = d_n' gh_n r (1 - r); d_gi = (d_r', d_z', d_n'), d_gh = (d_r', d_z', d_n' r),
   d_h_prev = dh z. */
#define DEFINE_GRU_BACKWARD(suffix, T, C, LOAD, STORE)                                             \
    static tl_status gru_backward_##suffix(tl_tensor *const *out, const tl_tensor *const *in,      \
                                           const tl_op_args *args) {                               \
        (void)args;                                                                                \
        int64_t N, H;                                                                              \
        rows_of(in[3], &N, &H);                                                                    \
        const T *dh1 = tl_data(in[0]), *dh2 = data_or_null(in[1]);                                 \
        const T *ws = tl_data(in[2]), *hp = tl_data(in[3]);                                        \
        T *dgi = out[0] ? tl_data(out[0]) : NULL, *dgh = out[1] ? tl_data(out[1]) : NULL;          \
        T *dhp = out[2] ? tl_data(out[2]) : NULL;                                                  \
        NN_PARALLEL_FOR(N *H * 10) for (int64_t r = 0; r < N; r++) {                               \
            for (int64_t j = 0; j < H; j++) {                                                      \
                const int64_t s = r * H + j;                                                       \
                const T *w = ws + r * 4 * H + j;                                                   \
                const C rg = LOAD(w[0]), z = LOAD(w[H]), n = LOAD(w[2 * H]), hn = LOAD(w[3 * H]);  \
                const C dh = LOAD(dh1[s]) + (dh2 ? LOAD(dh2[s]) : (C)0);                           \
                const C dn = dh * ((C)1 - z) * ((C)1 - n * n);                                     \
                const C dz = dh * (LOAD(hp[s]) - n) * z * ((C)1 - z);                              \
                const C dr = dn * hn * rg * ((C)1 - rg);                                           \
                if (dgi) {                                                                         \
                    T *d = dgi + r * 3 * H + j;                                                    \
                    d[0] = STORE(dr), d[H] = STORE(dz), d[2 * H] = STORE(dn);                      \
                }                                                                                  \
                if (dgh) {                                                                         \
                    T *d = dgh + r * 3 * H + j;                                                    \
                    d[0] = STORE(dr), d[H] = STORE(dz), d[2 * H] = STORE(dn * rg);                 \
                }                                                                                  \
                if (dhp) dhp[s] = STORE(dh * z);                                                   \
            }                                                                                      \
        }                                                                                          \
        return TL_OK;                                                                              \
    }
NN_FOR_FLOATING(DEFINE_GRU_BACKWARD)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(lstm_cell_pointwise, tensors, lstm_forward),
    TL_KERNELS_FLOATING(lstm_cell_pointwise_backward, tensors, lstm_backward),
    TL_KERNELS_FLOATING(gru_cell_pointwise, tensors, gru_forward),
    TL_KERNELS_FLOATING(gru_cell_pointwise_backward, tensors, gru_backward),
};

TL_KERNEL_TABLE(tl_cpu_rnn_cell_table, TL_DEVICE_CPU, entries);
