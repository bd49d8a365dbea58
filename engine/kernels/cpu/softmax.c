/* CPU softmax and log_softmax along one dim, numerically stable (the max is subtracted);
   bfloat16/float16 compute in float32, sums accumulate in double. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loop.h"

#define PARALLEL_THRESHOLD 16384

/* The tensors of a kernel, walked along loop.h's lines: in (read) and out (written, in's shape;
   may be in itself). */
enum { IN, OUT };

#define LOAD_F32(x)   (x)
#define LOAD_F64(x)   (x)
#define LOAD_BF16(x)  tl_bf16_load(x)
#define LOAD_F16(x)   tl_f16_load(x)
#define STORE_F32(x)  (x)
#define STORE_F64(x)  (x)
#define STORE_BF16(x) tl_bf16_round(x)
#define STORE_F16(x)  tl_f16_round(x)

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
    static void block_##sfx(const tl_cpu_lines *p, char *const *at, int64_t lanes,                 \
                            const void *mode) {                                                    \
        const bool log_mode = *(const bool *)mode;                                                 \
        const T *in = (const T *)at[IN];                                                           \
        T *out = (T *)at[OUT];                                                                     \
        const int64_t step_in = p->step[IN], step_out = p->step[OUT];                              \
        const int64_t lane_in = p->lane[IN], lane_out = p->lane[OUT];                              \
        if (lanes == 1 && step_in == 1 && step_out == 1) {                                         \
            row_##sfx(p->len, in, out, log_mode);                                                  \
            return;                                                                                \
        }                                                                                          \
        C max[TL_CPU_LANE_BLOCK];                                                                  \
        double sum[TL_CPU_LANE_BLOCK];                                                             \
        for (int64_t l = 0; l < lanes; l++) max[l] = -INFINITY, sum[l] = 0;                        \
        for (int64_t r = 0; r < p->len; r++) {                                                     \
            const T *row = in + r * step_in;                                                       \
            for (int64_t l = 0; l < lanes; l++) {                                                  \
                C v = LOAD(row[l * lane_in]);                                                      \
                if (v > max[l]) max[l] = v;                                                        \
            }                                                                                      \
        }                                                                                          \
        bool keep = NATIVE && !log_mode;                                                           \
        for (int64_t r = 0; r < p->len; r++) {                                                     \
            const T *row = in + r * step_in;                                                       \
            T *orow = out + r * step_out;                                                          \
            for (int64_t l = 0; l < lanes; l++) {                                                  \
                C e = EXP(LOAD(row[l * lane_in]) - max[l]);                                        \
                sum[l] += e;                                                                       \
                if (keep) orow[l * lane_out] = STORE(e);                                           \
            }                                                                                      \
        }                                                                                          \
        C scale[TL_CPU_LANE_BLOCK];                                                                \
        for (int64_t l = 0; l < lanes; l++)                                                        \
            scale[l] = log_mode ? (C)log(sum[l]) : (C)(1.0 / sum[l]);                              \
        for (int64_t r = 0; r < p->len; r++) {                                                     \
            const T *row = in + r * step_in;                                                       \
            T *orow = out + r * step_out;                                                          \
            for (int64_t l = 0; l < lanes; l++) {                                                  \
                T *o = &orow[l * lane_out];                                                        \
                C x = LOAD(row[l * lane_in]);                                                      \
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

static tl_status run(tl_cpu_lines_fn block, tl_tensor *out, const tl_tensor *in, int dim,
                     bool log_mode) {
    if (tl_numel(in) == 0) return TL_OK; /* else blocks of lanes would walk an empty dim */
    tl_cpu_lines lines;
    tl_cpu_lines_plan(&lines, 2, (const tl_tensor *[]){in, out}, dim);
    tl_cpu_lines_for_each(&lines, PARALLEL_THRESHOLD, block, &log_mode);
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
