/* CPU softmax and log_softmax along one dim, numerically stable (the max is subtracted);
   bfloat16/float16 compute in float32, sums accumulate in double. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

#define LANE_BLOCK         64
#define PARALLEL_THRESHOLD 16384

/* As in the reduce kernels: `outer` positions times `lanes` kept elements (a unit-stride
   kept dim walked in the inner loop, when the softmax dim is not unit-stride) times `len`
   elements along dim. out has in's shape. */
typedef struct softmax_plan {
    int64_t len, step_in, step_out;
    int64_t lanes, lane_in, lane_out;
    int nouter;
    int64_t outer_shape[TL_MAX_DIMS], outer_in[TL_MAX_DIMS], outer_out[TL_MAX_DIMS];
    int64_t outer, blocks;
} softmax_plan;

static void make_plan(softmax_plan *p, const tl_tensor *out, const tl_tensor *in, int dim) {
    memset(p, 0, sizeof *p);
    p->len = in->shape[dim];
    p->step_in = in->strides[dim];
    p->step_out = out->strides[dim];
    const int lane = p->len <= 1 || p->step_in != 1 ? tl_cpu_unit_lane(in, dim) : -1;
    p->lanes = lane >= 0 ? in->shape[lane] : 1;
    if (lane >= 0) {
        p->lane_in = in->strides[lane];
        p->lane_out = out->strides[lane];
    }
    p->outer = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (d == dim || d == lane || in->shape[d] == 1) continue;
        int i = p->nouter++;
        p->outer_shape[i] = in->shape[d];
        p->outer_in[i] = in->strides[d];
        p->outer_out[i] = out->strides[d];
        p->outer *= in->shape[d];
    }
    p->blocks = (p->lanes + LANE_BLOCK - 1) / LANE_BLOCK;
}

/* Element offsets (in, out) of work item `item` and its number of lanes. */
static int64_t locate(const softmax_plan *p, int64_t item, int64_t *in_off, int64_t *out_off) {
    int64_t o = item / p->blocks, l0 = (item % p->blocks) * LANE_BLOCK;
    *in_off = l0 * p->lane_in;
    *out_off = l0 * p->lane_out;
    for (int d = p->nouter - 1; d >= 0; d--) {
        int64_t i = o % p->outer_shape[d];
        o /= p->outer_shape[d];
        *in_off += i * p->outer_in[d];
        *out_off += i * p->outer_out[d];
    }
    int64_t left = p->lanes - l0;
    return left < LANE_BLOCK ? left : LANE_BLOCK;
}

static inline float bf16_to_f32(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#define LOAD_F32(x)   (x)
#define LOAD_F64(x)   (x)
#define LOAD_BF16(x)  bf16_to_f32(x)
#define LOAD_F16(x)   tl_f16_to_f32(x)
#define STORE_F32(x)  (x)
#define STORE_F64(x)  (x)
#define STORE_BF16(x) tl_f32_to_bf16(x)
#define STORE_F16(x)  tl_f32_to_f16(x)

/* One block of lanes: max along dim, the sum of exp(x - max), then the output. C is the
   compute type; NATIVE says out can hold the exponentials between the passes (C == T). A
   row of -inf gives NaN (-inf - -inf), a NaN anywhere in a row gives a row of NaN. */
#define DEFINE_SOFTMAX(sfx, T, C, LOAD, STORE, EXP, NATIVE)                                        \
    /* the common case: one contiguous row */                                                      \
    static void row_##sfx(int64_t len, const T *in, T *out, bool log_mode) { /* in may be out */   \
        C max = -INFINITY;                                                                         \
        for (int64_t r = 0; r < len; r++) {                                                        \
            C v = LOAD(in[r]);                                                                     \
            max = v > max ? v : max;                                                               \
        }                                                                                          \
        double sum = 0;                                                                            \
        if (NATIVE && !log_mode) {                                                                 \
            for (int64_t r = 0; r < len; r++) {                                                    \
                C e = EXP(LOAD(in[r]) - max);                                                      \
                out[r] = STORE(e);                                                                 \
                sum += e;                                                                          \
            }                                                                                      \
            C scale = (C)(1.0 / sum);                                                              \
            for (int64_t r = 0; r < len; r++) out[r] = STORE(LOAD(out[r]) * scale);                \
            return;                                                                                \
        }                                                                                          \
        for (int64_t r = 0; r < len; r++) sum += EXP(LOAD(in[r]) - max);                           \
        if (log_mode) {                                                                            \
            C log_sum = (C)log(sum);                                                               \
            for (int64_t r = 0; r < len; r++) out[r] = STORE((LOAD(in[r]) - max) - log_sum);       \
        } else {                                                                                   \
            C scale = (C)(1.0 / sum);                                                              \
            for (int64_t r = 0; r < len; r++) out[r] = STORE(EXP(LOAD(in[r]) - max) * scale);      \
        }                                                                                          \
    }                                                                                              \
    static void block_##sfx(const softmax_plan *p, const char *in_base, char *out_base,            \
                            int64_t lanes, bool log_mode) {                                        \
        const T *in = (const T *)in_base;                                                          \
        T *out = (T *)out_base;                                                                    \
        if (lanes == 1 && p->step_in == 1 && p->step_out == 1) {                                   \
            row_##sfx(p->len, in, out, log_mode);                                                  \
            return;                                                                                \
        }                                                                                          \
        C max[LANE_BLOCK];                                                                         \
        double sum[LANE_BLOCK];                                                                    \
        for (int64_t l = 0; l < lanes; l++) max[l] = -INFINITY, sum[l] = 0;                        \
        for (int64_t r = 0; r < p->len; r++) {                                                     \
            const T *row = in + r * p->step_in;                                                    \
            for (int64_t l = 0; l < lanes; l++) {                                                  \
                C v = LOAD(row[l * p->lane_in]);                                                   \
                if (v > max[l]) max[l] = v;                                                        \
            }                                                                                      \
        }                                                                                          \
        bool keep = NATIVE && !log_mode;                                                           \
        for (int64_t r = 0; r < p->len; r++) {                                                     \
            const T *row = in + r * p->step_in;                                                    \
            T *orow = out + r * p->step_out;                                                       \
            for (int64_t l = 0; l < lanes; l++) {                                                  \
                C e = EXP(LOAD(row[l * p->lane_in]) - max[l]);                                     \
                sum[l] += e;                                                                       \
                if (keep) orow[l * p->lane_out] = STORE(e);                                        \
            }                                                                                      \
        }                                                                                          \
        C scale[LANE_BLOCK];                                                                       \
        for (int64_t l = 0; l < lanes; l++)                                                        \
            scale[l] = log_mode ? (C)log(sum[l]) : (C)(1.0 / sum[l]);                              \
        for (int64_t r = 0; r < p->len; r++) {                                                     \
            const T *row = in + r * p->step_in;                                                    \
            T *orow = out + r * p->step_out;                                                       \
            for (int64_t l = 0; l < lanes; l++) {                                                  \
                T *o = &orow[l * p->lane_out];                                                     \
                C x = LOAD(row[l * p->lane_in]);                                                   \
                if (log_mode)                                                                      \
                    *o = STORE((x - max[l]) - scale[l]);                                           \
                else if (keep)                                                                     \
                    *o = STORE(LOAD(*o) * scale[l]);                                               \
                else                                                                               \
                    *o = STORE(EXP(x - max[l]) * scale[l]);                                        \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_SOFTMAX(f32, float, float, LOAD_F32, STORE_F32, expf, true)
DEFINE_SOFTMAX(f64, double, double, LOAD_F64, STORE_F64, exp, true)
DEFINE_SOFTMAX(bf16, uint16_t, float, LOAD_BF16, STORE_BF16, expf, false)
DEFINE_SOFTMAX(f16, uint16_t, float, LOAD_F16, STORE_F16, expf, false)

typedef void (*block_fn)(const softmax_plan *p, const char *in, char *out, int64_t lanes,
                         bool log_mode);

static tl_status run(block_fn block, tl_tensor *out, const tl_tensor *in, int dim, bool log_mode) {
    if (tl_numel(in) == 0) return TL_OK; /* else blocks of lanes would walk an empty dim */
    softmax_plan p;
    make_plan(&p, out, in, dim);
    int64_t items = p.outer * p.blocks, size = (int64_t)tl_dtype_size(in->dtype);
    const char *in_data = tl_data(in);
    char *out_data = tl_data(out);
#pragma omp parallel for if (items > 1 && p.outer * p.lanes * p.len > PARALLEL_THRESHOLD)
    for (int64_t item = 0; item < items; item++) {
        int64_t in_off, out_off;
        int64_t lanes = locate(&p, item, &in_off, &out_off);
        block(&p, in_data + in_off * size, out_data + out_off * size, lanes, log_mode);
    }
    return TL_OK;
}

#define DEFINE_KERNELS(sfx)                                                                        \
    static tl_status softmax_##sfx(tl_tensor *out, const tl_tensor *in, int dim) {                 \
        return run(block_##sfx, out, in, dim, false);                                              \
    }                                                                                              \
    static tl_status log_softmax_##sfx(tl_tensor *out, const tl_tensor *in, int dim) {             \
        return run(block_##sfx, out, in, dim, true);                                               \
    }
DEFINE_KERNELS(f32)
DEFINE_KERNELS(f64)
DEFINE_KERNELS(bf16)
DEFINE_KERNELS(f16)

static const tl_kernel_entry entries[] = {
    TL_KERNELS_FLOATING(softmax, softmax, softmax),
    TL_KERNELS_FLOATING(log_softmax, softmax, log_softmax),
};

TL_KERNEL_TABLE(tl_cpu_softmax_table, TL_DEVICE_CPU, entries);
