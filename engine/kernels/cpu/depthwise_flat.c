/* CPU depthwise conv2d at stride 1: each plane copied once, in the compute type, into a frame with
   a zero border, so that every tap of every output is a read at a fixed offset (no bounds check),
   and the correlations run flat, LANES outputs (or partial sums) at a time in vector registers. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/depthwise.h"
#include "kernels/cpu/loop.h"

/* Outputs computed side by side, and the weight gradient's partial sums per tap: four vectors of
   float32 under AVX2 (four independent sums hide the additions' latency). */
#define LANES 32
/* Taps whose weight-gradient sums share each read of gy: 3 x 4 sums in registers under AVX2. */
#define TAP_GROUP 3

/* A frame: a plane laid out for a stride-1 correlation whose output has rows x cols, with taps
   (i, j), i < kh, j < kw, spaced dh and dw:
       out[r, c] = sum over i, j of frame[r + i dh, c + j dw] k[i, j].
   Its rows are pitch = cols + (kw - 1) dw wide; the source plane's element (0, 0) sits at (top,
   left) (negative: the source is cropped) and every other element is 0. Read flat, output (r, c)
   is element e = r pitch + c and its tap (i, j) is frame element e + i dh pitch + j dw, inside the
   frame for every e < out_len (whole rows, rounded up to LANES): the correlation runs over those e
   with no bounds check, and the columns c >= cols it computes besides are dropped. */
typedef struct frame {
    int64_t rows, cols;      /* the output's */
    int64_t pitch, out_len;  /* row width; the output elements computed */
    int64_t frame_rows, len; /* rows + (kh - 1) dh; the frame's elements (zeros after its rows) */
    int64_t top, left;
} frame;

static frame frame_of(const depthwise *g, int64_t rows, int64_t cols, int64_t top, int64_t left) {
    frame f = {.rows = rows, .cols = cols, .top = top, .left = left};
    f.pitch = cols + (g->kw - 1) * g->dw;
    f.out_len = (rows * f.pitch + LANES - 1) / LANES * LANES;
    f.frame_rows = rows + (g->kh - 1) * g->dh;
    f.len = f.out_len + (g->kh - 1) * g->dh * f.pitch + (g->kw - 1) * g->dw;
    return f;
}

/* The frame of each pass. Forward: x (H x W) at (ph, pw), giving y (OH x OW). Input gradient:
   dx[ih, iw] = sum over i, j of gy[ih + ph - i dh, iw + pw - j dw] w[i, j], the correlation of gy
   with the flipped kernel w[KH - 1 - i, KW - 1 - j]: gy at ((KH - 1) dh - ph, (KW - 1) dw - pw),
   giving dx (H x W). Weight gradient: dw[i, j] = sum over (oh, ow) of gy[oh, ow] x[oh - ph + i dh,
   ow - pw + j dw], x framed as in the forward and gy in the output's layout (zeros past column OW).
 */
static frame frame_of_pass(depthwise_pass pass, const depthwise *g) {
    if (pass == DEPTHWISE_INPUT)
        return frame_of(g, g->h, g->w, (g->kh - 1) * g->dh - g->ph, (g->kw - 1) * g->dw - g->pw);
    return frame_of(g, g->oh, g->ow, g->ph, g->pw);
}

/* The compute-type elements one thread works in: frames, output rows, kernels or partial sums. */
static int64_t thread_elements(depthwise_pass pass, const depthwise *g, const frame *f) {
    const int64_t taps = g->kh * g->kw;
    switch (pass) {
    case DEPTHWISE_FORWARD:
        return f->len + f->out_len + taps;
    case DEPTHWISE_INPUT:
        return g->m * (f->len + taps) + f->out_len;
    default:
        return f->len + f->out_len + g->m * taps * LANES;
    }
}

/* The tap offsets (i dh pitch + j dw for tap i KW + j) and each thread's scratch, in one block,
   zeroed once: every plane of a pass fills the same elements of a frame, so the rest (the border,
   the zeros past the rows) stays 0 from plane to plane. */
typedef struct work {
    char *block;
    int64_t *offsets;
    char *threads;
    size_t thread_bytes;
} work;

static tl_status work_alloc(work *wk, const depthwise *g, const frame *f, size_t thread_bytes) {
    const size_t offset_bytes = ((size_t)(g->kh * g->kw) * sizeof(int64_t) + 63) / 64 * 64;
    wk->thread_bytes = (thread_bytes + 63) / 64 * 64;
    /* zeroed: the frames' borders, which no fill writes */
    wk->block = calloc(1, offset_bytes + wk->thread_bytes * (size_t)nn_max_threads());
    if (!wk->block)
        return tl_error(TL_ERR_MEMORY, "conv2d: out of memory for the depthwise frames");
    wk->offsets = (int64_t *)wk->block;
    wk->threads = wk->block + offset_bytes;
    for (int64_t i = 0; i < g->kh; i++)
        for (int64_t j = 0; j < g->kw; j++)
            wk->offsets[i * g->kw + j] = i * g->dh * f->pitch + j * g->dw;
    return TL_OK;
}

static inline void *thread_scratch(const work *wk) {
    return wk->threads + wk->thread_bytes * (size_t)nn_thread_id();
}

/* Vectors of 32 bytes (GCC's and clang's vector extension): one AVX2 register, two on the baseline
   x86-64 (SSE2). LANES elements are LANES / (32 / sizeof(C)) of them, summed side by side. */
typedef float vector_float __attribute__((vector_size(32)));
typedef double vector_double __attribute__((vector_size(32)));

/* In compute type C (float for float32 and the 16-bit dtypes, double for float64), vectors V:
   correlate: out[e], e < len (a multiple of LANES), = the sum over planes p < count, then taps t
   (ascending), of k[p taps + t] frames[p frame_len + e + offsets[t]]: LANES outputs at a time,
   summed in registers (written once: no store per tap); false when a sum is not finite.
   dot_taps: lanes[t LANES + v] += the sum over e < len (a multiple of LANES), e = v mod LANES, of
   gy[e] frame[e + offsets[t]]: per tap, LANES partial sums in registers (TAP_GROUP taps at a
   time).
   lane_sum: the LANES partial sums of one tap added in order.
   The explicit vectors (memcpy: unaligned loads and stores) keep the sums in registers, where
   GCC's auto-vectorizer left correlate's taps scalar. */
#define DEFINE_FLAT(C)                                                                             \
    enum { VECTOR_##C = sizeof(vector_##C) / sizeof(C), SUMS_##C = LANES / VECTOR_##C };           \
    TL_CPU_WIDE static bool correlate_##C(C *restrict out, int64_t len, const C *restrict frames,  \
                                          int64_t frame_len, int64_t count, const C *restrict k,   \
                                          const int64_t *restrict offsets, int64_t taps) {         \
        vector_##C check = {0}; /* sum - sum: 0, or nan from an inf or nan sum */                  \
        for (int64_t e = 0; e < len; e += LANES) {                                                 \
            vector_##C acc[SUMS_##C];                                                              \
            for (int a = 0; a < SUMS_##C; a++) acc[a] = (vector_##C){0};                           \
            for (int64_t p = 0; p < count; p++)                                                    \
                for (int64_t t = 0; t < taps; t++) {                                               \
                    const C wv = k[p * taps + t];                                                  \
                    const C *src = frames + p * frame_len + e + offsets[t];                        \
                    for (int a = 0; a < SUMS_##C; a++) {                                           \
                        vector_##C x;                                                              \
                        memcpy(&x, src + a * VECTOR_##C, sizeof x);                                \
                        acc[a] += wv * x;                                                          \
                    }                                                                              \
                }                                                                                  \
            for (int a = 0; a < SUMS_##C; a++) {                                                   \
                memcpy(out + e + a * VECTOR_##C, &acc[a], sizeof acc[a]);                          \
                check += acc[a] - acc[a];                                                          \
            }                                                                                      \
        }                                                                                          \
        for (int v = 0; v < VECTOR_##C; v++)                                                       \
            if (check[v] != 0) return false;                                                       \
        return true;                                                                               \
    }                                                                                              \
    /* taps t .. t + TAP_GROUP - 1, reading each vector of gy once */                              \
    TL_CPU_WIDE static void dot_tap_group_##C(C *restrict lanes, const C *restrict gy,             \
                                              int64_t len, const C *restrict frame,                \
                                              const int64_t *restrict offsets) {                   \
        vector_##C acc[TAP_GROUP][SUMS_##C];                                                       \
        memcpy(acc, lanes, sizeof acc);                                                            \
        for (int64_t e = 0; e < len; e += LANES)                                                   \
            for (int a = 0; a < SUMS_##C; a++) {                                                   \
                vector_##C g;                                                                      \
                memcpy(&g, gy + e + a * VECTOR_##C, sizeof g);                                     \
                for (int q = 0; q < TAP_GROUP; q++) {                                              \
                    vector_##C x;                                                                  \
                    memcpy(&x, frame + offsets[q] + e + a * VECTOR_##C, sizeof x);                 \
                    acc[q][a] += g * x;                                                            \
                }                                                                                  \
            }                                                                                      \
        memcpy(lanes, acc, sizeof acc);                                                            \
    }                                                                                              \
    /* one tap */                                                                                  \
    TL_CPU_WIDE static void dot_tap_##C(C *restrict lanes, const C *restrict gy, int64_t len,      \
                                        const C *restrict src) {                                   \
        vector_##C acc[SUMS_##C];                                                                  \
        memcpy(acc, lanes, sizeof acc);                                                            \
        for (int64_t e = 0; e < len; e += LANES)                                                   \
            for (int a = 0; a < SUMS_##C; a++) {                                                   \
                vector_##C g, x;                                                                   \
                memcpy(&g, gy + e + a * VECTOR_##C, sizeof g);                                     \
                memcpy(&x, src + e + a * VECTOR_##C, sizeof x);                                    \
                acc[a] += g * x;                                                                   \
            }                                                                                      \
        memcpy(lanes, acc, sizeof acc);                                                            \
    }                                                                                              \
    static void dot_taps_##C(C *lanes, const C *gy, int64_t len, const C *frame,                   \
                             const int64_t *offsets, int64_t taps) {                               \
        int64_t t = 0;                                                                             \
        for (; t + TAP_GROUP <= taps; t += TAP_GROUP)                                              \
            dot_tap_group_##C(lanes + t * LANES, gy, len, frame, offsets + t);                     \
        for (; t < taps; t++) dot_tap_##C(lanes + t * LANES, gy, len, frame + offsets[t]);         \
    }                                                                                              \
    static C lane_sum_##C(const C *lanes) {                                                        \
        C sum = 0;                                                                                 \
        for (int v = 0; v < LANES; v++) sum += lanes[v];                                           \
        return sum;                                                                                \
    }

DEFINE_FLAT(float)
DEFINE_FLAT(double)

/* An OpenMP for over the next loop when work is large, and-ing flag over the threads. */
#define FLAT_PARALLEL_FOR(work, flag)                                                              \
    NN_PRAGMA(omp parallel for schedule(static) reduction(&& : flag)                               \
                  if ((work) > NN_PARALLEL_THRESHOLD))

/* Per dtype (T stored, C computed):
   fill: the frame f of plane src (src_rows x src_cols), converted to C: only the elements the
   source lands on (the others are 0 from the start, work_alloc);
   emit: the output's rows x cols elements of out (pitch apart) rounded to T;
   the three passes, OpenMP over planes (forward, input gradient: (n, c), each input channel's
   frame filled once; weight gradient: c, summing over n, so no two threads share a sum), each
   false when a sum was not finite (the caller then redoes the pass: see depthwise.h). */
#define DEFINE_FLAT_PASSES(suffix, T, C, LOAD, STORE)                                              \
    static void fill_##suffix(C *restrict dst, const frame *f, const T *restrict src,              \
                              int64_t src_rows, int64_t src_cols) {                                \
        const int64_t r0 = f->top < 0 ? -f->top : 0, c0 = f->left < 0 ? -f->left : 0;              \
        const int64_t r1 = src_rows < f->frame_rows - f->top ? src_rows : f->frame_rows - f->top;  \
        const int64_t c1 = src_cols < f->pitch - f->left ? src_cols : f->pitch - f->left;          \
        for (int64_t r = r0; r < r1; r++) {                                                        \
            C *restrict d = dst + (r + f->top) * f->pitch + f->left;                               \
            const T *restrict s = src + r * src_cols;                                              \
            for (int64_t c = c0; c < c1; c++) d[c] = LOAD(s[c]);                                   \
        }                                                                                          \
    }                                                                                              \
    static void emit_##suffix(T *restrict dst, const C *restrict out, const frame *f) {            \
        for (int64_t r = 0; r < f->rows; r++)                                                      \
            for (int64_t c = 0; c < f->cols; c++)                                                  \
                dst[r * f->cols + c] = STORE(out[r * f->pitch + c]);                               \
    }                                                                                              \
    static bool forward_##suffix(T *y, const T *x, const T *w, const depthwise *g, const frame *f, \
                                 const work *wk) {                                                 \
        const int64_t taps = g->kh * g->kw;                                                        \
        bool finite = true;                                                                        \
        FLAT_PARALLEL_FOR(g->n * g->o * g->oh * g->ow * taps, finite)                              \
        for (int64_t plane = 0; plane < g->n * g->c; plane++) {                                    \
            C *fr = thread_scratch(wk), *out = fr + f->len, *k = out + f->out_len;                 \
            const int64_t n = plane / g->c, c = plane % g->c;                                      \
            fill_##suffix(fr, f, x + plane * g->h * g->w, g->h, g->w);                             \
            for (int64_t o = c * g->m; o < (c + 1) * g->m; o++) {                                  \
                for (int64_t t = 0; t < taps; t++) k[t] = LOAD(w[o * taps + t]);                   \
                finite &= correlate_##C(out, f->out_len, fr, f->len, 1, k, wk->offsets, taps);     \
                emit_##suffix(y + (n * g->o + o) * g->oh * g->ow, out, f);                         \
            }                                                                                      \
        }                                                                                          \
        return finite;                                                                             \
    }                                                                                              \
    static bool input_##suffix(T *dx, const T *gy, const T *w, const depthwise *g, const frame *f, \
                               const work *wk) {                                                   \
        const int64_t taps = g->kh * g->kw;                                                        \
        bool finite = true;                                                                        \
        FLAT_PARALLEL_FOR(g->n * g->o * g->h * g->w * taps, finite)                                \
        for (int64_t plane = 0; plane < g->n * g->c; plane++) {                                    \
            C *fr = thread_scratch(wk), *out = fr + g->m * f->len, *k = out + f->out_len;          \
            const int64_t n = plane / g->c, c = plane % g->c;                                      \
            for (int64_t m = 0; m < g->m; m++) {                                                   \
                const int64_t o = c * g->m + m;                                                    \
                fill_##suffix(fr + m * f->len, f, gy + (n * g->o + o) * g->oh * g->ow, g->oh,      \
                              g->ow);                                                              \
                for (int64_t t = 0; t < taps; t++) /* the flipped kernel */                        \
                    k[m * taps + t] = LOAD(w[o * taps + taps - 1 - t]);                            \
            }                                                                                      \
            finite &= correlate_##C(out, f->out_len, fr, f->len, g->m, k, wk->offsets, taps);      \
            emit_##suffix(dx + plane * g->h * g->w, out, f);                                       \
        }                                                                                          \
        return finite;                                                                             \
    }                                                                                              \
    static bool weight_##suffix(T *dw, const T *gy, const T *x, const depthwise *g,                \
                                const frame *f, const work *wk) {                                  \
        const int64_t taps = g->kh * g->kw;                                                        \
        bool finite = true;                                                                        \
        frame fg = *f; /* gy in the output's layout: no border, zeros past column OW */            \
        fg.top = fg.left = 0, fg.frame_rows = g->oh, fg.len = f->out_len;                          \
        FLAT_PARALLEL_FOR(g->n * g->o * g->oh * g->ow * taps, finite)                              \
        for (int64_t c = 0; c < g->c; c++) {                                                       \
            C *fr = thread_scratch(wk), *gfr = fr + f->len, *lanes = gfr + f->out_len;             \
            memset(lanes, 0, sizeof(C) * (size_t)(g->m * taps * LANES));                           \
            for (int64_t n = 0; n < g->n; n++) {                                                   \
                fill_##suffix(fr, f, x + (n * g->c + c) * g->h * g->w, g->h, g->w);                \
                for (int64_t m = 0; m < g->m; m++) {                                               \
                    const int64_t o = c * g->m + m;                                                \
                    fill_##suffix(gfr, &fg, gy + (n * g->o + o) * g->oh * g->ow, g->oh, g->ow);    \
                    dot_taps_##C(lanes + m * taps * LANES, gfr, f->out_len, fr, wk->offsets,       \
                                 taps);                                                            \
                }                                                                                  \
            }                                                                                      \
            for (int64_t e = 0; e < g->m * taps; e++) {                                            \
                const C sum = lane_sum_##C(lanes + e * LANES);                                     \
                finite &= isfinite(sum) != 0;                                                      \
                dw[c * g->m * taps + e] = STORE(sum);                                              \
            }                                                                                      \
        }                                                                                          \
        return finite;                                                                             \
    }                                                                                              \
    static tl_status flat_##suffix(depthwise_pass pass, tl_tensor *out, const tl_tensor *a,        \
                                   const tl_tensor *b, const depthwise *g, bool *finite) {         \
        const frame f = frame_of_pass(pass, g);                                                    \
        work wk;                                                                                   \
        TL_TRY(work_alloc(&wk, g, &f, sizeof(C) * (size_t)thread_elements(pass, g, &f)));          \
        if (pass == DEPTHWISE_FORWARD)                                                             \
            *finite = forward_##suffix(tl_data(out), tl_data(a), tl_data(b), g, &f, &wk);          \
        else if (pass == DEPTHWISE_INPUT)                                                          \
            *finite = input_##suffix(tl_data(out), tl_data(a), tl_data(b), g, &f, &wk);            \
        else                                                                                       \
            *finite = weight_##suffix(tl_data(out), tl_data(a), tl_data(b), g, &f, &wk);           \
        free(wk.block);                                                                            \
        return TL_OK;                                                                              \
    }

NN_FOR_FLOATING(DEFINE_FLAT_PASSES)

tl_status tl_cpu_depthwise_flat(depthwise_pass pass, tl_tensor *out, const tl_tensor *a,
                                const tl_tensor *b, const depthwise *g, bool *finite) {
    switch (out->dtype) {
    case TL_F32:
        return flat_f32(pass, out, a, b, g, finite);
    case TL_F64:
        return flat_f64(pass, out, a, b, g, finite);
    case TL_BF16:
        return flat_bf16(pass, out, a, b, g, finite);
    case TL_F16:
        return flat_f16(pass, out, a, b, g, finite);
    default:
        return tl_error(TL_ERR_DTYPE, "conv2d: no depthwise kernel for this dtype");
    }
}
