/* CPU kernels of the fused LSTM / GRU cell pointwise math (family RNN_CELL), forward and
   backward, one pass over the rows each; 16-bit dtypes compute in float32. */
#include <stdlib.h>

#include "kernels/cpu/nn_kernels.h"

/* exp, sigmoid and tanh of the float compute type without a call, so that the loops over a row
   vectorize (glibc's expf and tanhf do not; tanhf alone cost 3x the step's GEMM): Cephes' expf
   and tanhf (relative error about 1e-7, a few float32 ulps). Float64 takes the C library's. */
static inline float cell_expf(float v) {
    float x = v != v ? 0.0f : v; /* NaN computes on 0 (no conversion of a NaN), then stays NaN */
    x = x > 88.3762626647949f ? 88.3762626647949f : x < -88.3762626647949f ? -88.3762626647949f : x;
    const float t = x * 1.44269504088896341f;
    const int32_t k = (int32_t)(t + (t >= 0 ? 0.5f : -0.5f)); /* SSE2 converts, floorf would not */
    const float n = (float)k;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float e = p * r * r + r + 1.0f;
    /* 2^n for n in [-127, 128]: two halves, so that neither exponent overflows its field */
    const int32_t k1 = k >> 1, k2 = k - k1;
    union {
        int32_t i;
        float f;
    } a = {(k1 + 127) << 23}, b = {(k2 + 127) << 23};
    return v != v ? v : e * a.f * b.f;
}
static inline float sigmoid_f(float x) {
    return 1.0f / (1.0f + cell_expf(-x));
}
static inline float tanh_f(float x) {
    const float ax = fabsf(x);
    /* small |x|: x + x^3 P(x^2); else 1 - 2 / (exp(2|x|) + 1) with x's sign */
    const float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    const float small = p * z * x + x;
    const float big = 1.0f - 2.0f / (cell_expf(2.0f * ax) + 1.0f);
    return ax < 0.625f ? small : (x < 0 ? -big : big);
}
static inline double sigmoid_d(double x) {
    return 1.0 / (1.0 + exp(-x));
}
#define NN_TANH(x)    _Generic((x), float : tanh_f, double : tanh)(x)
#define NN_SIGMOID(x) _Generic((x), float : sigmoid_f, double : sigmoid_d)(x)

/* Rows N and hidden size H of the [N, H] state t (any leading dims). */
static void rows_of(const tl_tensor *t, int64_t *N, int64_t *H) {
    *H = t->ndim ? t->shape[t->ndim - 1] : 1;
    *N = *H ? tl_numel(t) / *H : 0;
}

/* An absent optional input reads as zeros: a zeroed row of `width` elements (of at most 8 bytes)
   that every row reads (step 0); *zeros owns it. */
static tl_status input_rows(const tl_tensor *t, int64_t width, void **zeros, const void **data,
                            int64_t *step) {
    if (t) {
        *data = tl_data(t), *step = width;
        return TL_OK;
    }
    if (!*zeros) *zeros = calloc((size_t)(width > 0 ? width : 1), 8);
    if (!*zeros) return tl_error(TL_ERR_MEMORY, "rnn cell: out of memory for a zero row");
    *data = *zeros, *step = 0;
    return TL_OK;
}

/* omp simd on the float compute type's loops; float64's call the C library (no vector forms) */
#ifdef __clang__ /* the fuzzing build (-Werror): clang warns of a simd loop it leaves scalar */
#define CELL_SIMD_f32
#define CELL_SIMD_bf16
#define CELL_SIMD_f16
#else
#define CELL_SIMD_f32  NN_PRAGMA(omp simd)
#define CELL_SIMD_bf16 NN_PRAGMA(omp simd)
#define CELL_SIMD_f16  NN_PRAGMA(omp simd)
#endif
#define CELL_SIMD_f64

/* The loops below read and write whole rows through restrict pointers with no condition inside,
   so that the j loops vectorize (omp simd). Every output is given (ops/nn/rnn_cell.c allocates
   the ones a caller does not want). */

/* LSTM forward. out: h, c, workspace (the activated gates i, f, g, o, [N, 4H]); in: gates,
   gates2 (added to gates; may be NULL), c_prev [N, H]. */
#define DEFINE_LSTM_FORWARD(suffix, T, C, LOAD, STORE)                                             \
    static void lstm_row_##suffix(const T *restrict a, const T *restrict b, const T *restrict cp,  \
                                  T *restrict h, T *restrict c, T *restrict w, int64_t H) {        \
        CELL_SIMD_##suffix for (int64_t j = 0; j < H; j++) {                                       \
            const C i = NN_SIGMOID(LOAD(a[j]) + LOAD(b[j]));                                       \
            const C f = NN_SIGMOID(LOAD(a[H + j]) + LOAD(b[H + j]));                               \
            const C g = NN_TANH(LOAD(a[2 * H + j]) + LOAD(b[2 * H + j]));                          \
            const C o = NN_SIGMOID(LOAD(a[3 * H + j]) + LOAD(b[3 * H + j]));                       \
            const C cn = f * LOAD(cp[j]) + i * g;                                                  \
            c[j] = STORE(cn);                                                                      \
            h[j] = STORE(o * NN_TANH(cn));                                                         \
            w[j] = STORE(i), w[H + j] = STORE(f), w[2 * H + j] = STORE(g),                         \
            w[3 * H + j] = STORE(o);                                                               \
        }                                                                                          \
    }                                                                                              \
    static tl_status lstm_forward_##suffix(tl_tensor *const *out, const tl_tensor *const *in,      \
                                           const tl_op_args *args) {                               \
        (void)args;                                                                                \
        int64_t N, H, step = 0;                                                                    \
        rows_of(in[2], &N, &H);                                                                    \
        void *zeros = NULL;                                                                        \
        const void *g2 = NULL;                                                                     \
        TL_TRY(input_rows(in[1], 4 * H, &zeros, &g2, &step));                                      \
        const T *g1 = tl_data(in[0]), *b = g2, *cp = tl_data(in[2]);                               \
        T *h = tl_data(out[0]), *c = tl_data(out[1]), *ws = tl_data(out[2]);                       \
        NN_PARALLEL_FOR(N *H * 6) for (int64_t r = 0; r < N; r++) {                                \
            lstm_row_##suffix(g1 + r * 4 * H, b + r * step, cp + r * H, h + r * H, c + r * H,      \
                              ws + r * 4 * H, H);                                                  \
        }                                                                                          \
        free(zeros);                                                                               \
        return TL_OK;                                                                              \
    }
NN_FOR_FLOATING(DEFINE_LSTM_FORWARD)

/* LSTM backward. out: d_gates [N, 4H], d_c_prev; in: d_h, d_h2 (added to d_h), d_c (each may be
   NULL: zero), workspace, c_prev, c. With dh = d_h + d_h2 and dc = d_c + dh o (1 - tanh(c)^2):
   d_i = dc g i (1 - i), d_f = dc c_prev f (1 - f), d_g = dc i (1 - g^2),
   d_o = dh tanh(c) o (1 - o), d_c_prev = dc f. */
#define DEFINE_LSTM_BACKWARD(suffix, T, C, LOAD, STORE)                                            \
    static void lstm_back_row_##suffix(                                                            \
        const T *restrict dh1, const T *restrict dh2, const T *restrict dcn, const T *restrict w,  \
        const T *restrict cp, const T *restrict cc, T *restrict d, T *restrict dcp, int64_t H) {   \
        CELL_SIMD_##suffix for (int64_t j = 0; j < H; j++) {                                       \
            const C i = LOAD(w[j]), f = LOAD(w[H + j]), g = LOAD(w[2 * H + j]),                    \
                    o = LOAD(w[3 * H + j]);                                                        \
            const C dh = LOAD(dh1[j]) + LOAD(dh2[j]);                                              \
            const C tc = NN_TANH(LOAD(cc[j]));                                                     \
            const C dc = LOAD(dcn[j]) + dh * o * ((C)1 - tc * tc);                                 \
            d[j] = STORE(dc * g * i * ((C)1 - i));                                                 \
            d[H + j] = STORE(dc * LOAD(cp[j]) * f * ((C)1 - f));                                   \
            d[2 * H + j] = STORE(dc * i * ((C)1 - g * g));                                         \
            d[3 * H + j] = STORE(dh * tc * o * ((C)1 - o));                                        \
            dcp[j] = STORE(dc * f);                                                                \
        }                                                                                          \
    }                                                                                              \
    static tl_status lstm_backward_##suffix(tl_tensor *const *out, const tl_tensor *const *in,     \
                                            const tl_op_args *args) {                              \
        (void)args;                                                                                \
        int64_t N, H, s1 = 0, s2 = 0, s3 = 0;                                                      \
        rows_of(in[4], &N, &H);                                                                    \
        void *zeros = NULL;                                                                        \
        const void *p1 = NULL, *p2 = NULL, *p3 = NULL;                                             \
        tl_status status = input_rows(in[0], H, &zeros, &p1, &s1);                                 \
        if (status == TL_OK) status = input_rows(in[1], H, &zeros, &p2, &s2);                      \
        if (status == TL_OK) status = input_rows(in[2], H, &zeros, &p3, &s3);                      \
        if (status != TL_OK) {                                                                     \
            free(zeros);                                                                           \
            return status;                                                                         \
        }                                                                                          \
        const T *dh1 = p1, *dh2 = p2, *dcn = p3;                                                   \
        const T *ws = tl_data(in[3]), *cp = tl_data(in[4]), *cc = tl_data(in[5]);                  \
        T *dg = tl_data(out[0]), *dcp = tl_data(out[1]);                                           \
        NN_PARALLEL_FOR(N *H * 10) for (int64_t r = 0; r < N; r++) {                               \
            lstm_back_row_##suffix(dh1 + r * s1, dh2 + r * s2, dcn + r * s3, ws + r * 4 * H,       \
                                   cp + r * H, cc + r * H, dg + r * 4 * H, dcp + r * H, H);        \
        }                                                                                          \
        free(zeros);                                                                               \
        return TL_OK;                                                                              \
    }
NN_FOR_FLOATING(DEFINE_LSTM_BACKWARD)

/* GRU forward. out: h, workspace (r, z, n and gh's n part, [N, 4H]); in: gi, gh [N, 3H], h_prev
   [N, H]. r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z), n = tanh(gi_n + r gh_n),
   h = n + z (h_prev - n). */
#define DEFINE_GRU_FORWARD(suffix, T, C, LOAD, STORE)                                              \
    static void gru_row_##suffix(const T *restrict a, const T *restrict b, const T *restrict hp,   \
                                 T *restrict h, T *restrict w, int64_t H) {                        \
        CELL_SIMD_##suffix for (int64_t j = 0; j < H; j++) {                                       \
            const C rg = NN_SIGMOID(LOAD(a[j]) + LOAD(b[j]));                                      \
            const C z = NN_SIGMOID(LOAD(a[H + j]) + LOAD(b[H + j]));                               \
            const C hn = LOAD(b[2 * H + j]);                                                       \
            const C n = NN_TANH(LOAD(a[2 * H + j]) + rg * hn);                                     \
            h[j] = STORE(n + z * (LOAD(hp[j]) - n));                                               \
            w[j] = STORE(rg), w[H + j] = STORE(z), w[2 * H + j] = STORE(n),                        \
            w[3 * H + j] = STORE(hn);                                                              \
        }                                                                                          \
    }                                                                                              \
    static tl_status gru_forward_##suffix(tl_tensor *const *out, const tl_tensor *const *in,       \
                                          const tl_op_args *args) {                                \
        (void)args;                                                                                \
        int64_t N, H;                                                                              \
        rows_of(in[2], &N, &H);                                                                    \
        const T *gi = tl_data(in[0]), *gh = tl_data(in[1]), *hp = tl_data(in[2]);                  \
        T *h = tl_data(out[0]), *ws = tl_data(out[1]);                                             \
        NN_PARALLEL_FOR(N *H * 8) for (int64_t r = 0; r < N; r++) {                                \
            gru_row_##suffix(gi + r * 3 * H, gh + r * 3 * H, hp + r * H, h + r * H,                \
                             ws + r * 4 * H, H);                                                   \
        }                                                                                          \
        return TL_OK;                                                                              \
    }
NN_FOR_FLOATING(DEFINE_GRU_FORWARD)

/* GRU backward. out: d_gi, d_gh [N, 3H], d_h_prev [N, H]; in: d_h, d_h2 (added to d_h; may be
   NULL), workspace, h_prev. With dh = d_h + d_h2: d_n' = dh (1 - z) (1 - n^2) (n's
   pre-activation), d_z' = dh (h_prev - n) z (1 - z), d_r' = d_n' gh_n r (1 - r);
   d_gi = (d_r', d_z', d_n'), d_gh = (d_r', d_z', d_n' r), d_h_prev = dh z. */
#define DEFINE_GRU_BACKWARD(suffix, T, C, LOAD, STORE)                                             \
    static void gru_back_row_##suffix(const T *restrict dh1, const T *restrict dh2,                \
                                      const T *restrict w, const T *restrict hp, T *restrict dgi,  \
                                      T *restrict dgh, T *restrict dhp, int64_t H) {               \
        CELL_SIMD_##suffix for (int64_t j = 0; j < H; j++) {                                       \
            const C rg = LOAD(w[j]), z = LOAD(w[H + j]), n = LOAD(w[2 * H + j]),                   \
                    hn = LOAD(w[3 * H + j]);                                                       \
            const C dh = LOAD(dh1[j]) + LOAD(dh2[j]);                                              \
            const C dn = dh * ((C)1 - z) * ((C)1 - n * n);                                         \
            const C dz = dh * (LOAD(hp[j]) - n) * z * ((C)1 - z);                                  \
            const C dr = dn * hn * rg * ((C)1 - rg);                                               \
            dgi[j] = STORE(dr), dgi[H + j] = STORE(dz), dgi[2 * H + j] = STORE(dn);                \
            dgh[j] = STORE(dr), dgh[H + j] = STORE(dz), dgh[2 * H + j] = STORE(dn * rg);           \
            dhp[j] = STORE(dh * z);                                                                \
        }                                                                                          \
    }                                                                                              \
    static tl_status gru_backward_##suffix(tl_tensor *const *out, const tl_tensor *const *in,      \
                                           const tl_op_args *args) {                               \
        (void)args;                                                                                \
        int64_t N, H, s1 = 0, s2 = 0;                                                              \
        rows_of(in[3], &N, &H);                                                                    \
        void *zeros = NULL;                                                                        \
        const void *p1 = NULL, *p2 = NULL;                                                         \
        tl_status status = input_rows(in[0], H, &zeros, &p1, &s1);                                 \
        if (status == TL_OK) status = input_rows(in[1], H, &zeros, &p2, &s2);                      \
        if (status != TL_OK) {                                                                     \
            free(zeros);                                                                           \
            return status;                                                                         \
        }                                                                                          \
        const T *dh1 = p1, *dh2 = p2, *ws = tl_data(in[2]), *hp = tl_data(in[3]);                  \
        T *dgi = tl_data(out[0]), *dgh = tl_data(out[1]), *dhp = tl_data(out[2]);                  \
        NN_PARALLEL_FOR(N *H * 10) for (int64_t r = 0; r < N; r++) {                               \
            gru_back_row_##suffix(dh1 + r * s1, dh2 + r * s2, ws + r * 4 * H, hp + r * H,          \
                                  dgi + r * 3 * H, dgh + r * 3 * H, dhp + r * H, H);               \
        }                                                                                          \
        free(zeros);                                                                               \
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
