/* CPU kernels of the pointwise backward ops (family POINTWISE_BACKWARD in ops.def), on dense
   same-dtype inputs: out = f(grad, saved) with the math of kernels/pointwise.h and the forward's
   numbers (args->scalar, NULL for none), "=" semantics. */
#include <math.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/pointwise.h"

#define PARALLEL_THRESHOLD 32768

/* the forward's numbers as doubles (the math converts them to its compute type) */
#define NUMBERS                                                                                    \
    const double p0 = args ? args->scalar[0] : 0, p1 = args ? args->scalar[1] : 0,                 \
                 p2 = args ? args->scalar[2] : 0;

/* One kernel per (formula, dtype): f32 and f64 natively, bf16/f16 through f32. */
#define DEFINE_KERNELS(name)                                                                       \
    static tl_status name##_f32(tl_tensor *out, const tl_tensor *grad, const tl_tensor *saved,     \
                                const tl_op_args *args) {                                          \
        float *o = tl_data(out);                                                                   \
        const float *g = tl_data(grad), *s = tl_data(saved);                                       \
        int64_t n = tl_numel(out);                                                                 \
        NUMBERS                                                                                    \
        _Pragma("omp parallel for if (n > PARALLEL_THRESHOLD)") for (int64_t i = 0; i < n; i++)    \
            o[i] = tl_pointwise_##name##_f(g[i], s[i], p0, p1, p2);                                \
        return TL_OK;                                                                              \
    }                                                                                              \
    static tl_status name##_f64(tl_tensor *out, const tl_tensor *grad, const tl_tensor *saved,     \
                                const tl_op_args *args) {                                          \
        double *o = tl_data(out);                                                                  \
        const double *g = tl_data(grad), *s = tl_data(saved);                                      \
        int64_t n = tl_numel(out);                                                                 \
        NUMBERS                                                                                    \
        _Pragma("omp parallel for if (n > PARALLEL_THRESHOLD)") for (int64_t i = 0; i < n; i++)    \
            o[i] = tl_pointwise_##name##_d(g[i], s[i], p0, p1, p2);                                \
        return TL_OK;                                                                              \
    }                                                                                              \
    static tl_status name##_bf16(tl_tensor *out, const tl_tensor *grad, const tl_tensor *saved,    \
                                 const tl_op_args *args) {                                         \
        uint16_t *o = tl_data(out);                                                                \
        const uint16_t *g = tl_data(grad), *s = tl_data(saved);                                    \
        int64_t n = tl_numel(out);                                                                 \
        NUMBERS                                                                                    \
        _Pragma("omp parallel for if (n > PARALLEL_THRESHOLD)") for (int64_t i = 0; i < n; i++)    \
            o[i] = tl_bf16_round(                                                                  \
                tl_pointwise_##name##_f(tl_bf16_load(g[i]), tl_bf16_load(s[i]), p0, p1, p2));      \
        return TL_OK;                                                                              \
    }                                                                                              \
    static tl_status name##_f16(tl_tensor *out, const tl_tensor *grad, const tl_tensor *saved,     \
                                const tl_op_args *args) {                                          \
        uint16_t *o = tl_data(out);                                                                \
        const uint16_t *g = tl_data(grad), *s = tl_data(saved);                                    \
        int64_t n = tl_numel(out);                                                                 \
        NUMBERS                                                                                    \
        _Pragma("omp parallel for if (n > PARALLEL_THRESHOLD)") for (int64_t i = 0; i < n; i++)    \
            o[i] = tl_f16_round(                                                                   \
                tl_pointwise_##name##_f(tl_f16_load(g[i]), tl_f16_load(s[i]), p0, p1, p2));        \
        return TL_OK;                                                                              \
    }

#define POINTWISE_BACKWARD_OP(name, differentiable, backward) DEFINE_KERNELS(name)
#include "tlua/ops.def"

static const tl_kernel_entry entries[] = {
#define POINTWISE_BACKWARD_OP(name, differentiable, backward)                                      \
    TL_KERNELS_FLOATING(name, binary, name),
#include "tlua/ops.def"
};

TL_KERNEL_TABLE(tl_cpu_activation_backward_table, TL_DEVICE_CPU, entries);
