/* CPU kernels of the activation backward formulas, on dense same-dtype inputs:
   out = grad * f'(saved), "=" semantics. */
#include <math.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/cpu_kernels.h"

#define PARALLEL_THRESHOLD 32768

static inline float relu_grad(float g, float y) {
    return y > 0 ? g : 0;
}
static inline float tanh_grad(float g, float y) {
    return g * (1 - y * y);
}
static inline float sigmoid_grad(float g, float y) {
    return g * y * (1 - y);
}
/* d/dx [x * Phi(x)] = Phi(x) + x * phi(x) */
static inline float gelu_grad(float g, float x) {
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
    return g * (cdf + x * pdf);
}
static inline double relu_grad_f64(double g, double y) {
    return y > 0 ? g : 0;
}
static inline double tanh_grad_f64(double g, double y) {
    return g * (1 - y * y);
}
static inline double sigmoid_grad_f64(double g, double y) {
    return g * y * (1 - y);
}
static inline double gelu_grad_f64(double g, double x) {
    double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752));
    double pdf = 0.39894228040143268 * exp(-0.5 * x * x);
    return g * (cdf + x * pdf);
}

/* One kernel per (formula, dtype): f32 and f64 natively, bf16/f16 through f32. */
#define DEFINE_KERNELS(name)                                                                       \
    static tl_status name##_f32(tl_tensor *out, const tl_tensor *grad, const tl_tensor *saved) {   \
        float *o = tl_data(out);                                                                   \
        const float *g = tl_data(grad), *s = tl_data(saved);                                       \
        int64_t n = tl_numel(out);                                                                 \
        _Pragma("omp parallel for if (n > PARALLEL_THRESHOLD)") for (int64_t i = 0; i < n; i++)    \
            o[i] = name##_grad(g[i], s[i]);                                                        \
        return TL_OK;                                                                              \
    }                                                                                              \
    static tl_status name##_f64(tl_tensor *out, const tl_tensor *grad, const tl_tensor *saved) {   \
        double *o = tl_data(out);                                                                  \
        const double *g = tl_data(grad), *s = tl_data(saved);                                      \
        int64_t n = tl_numel(out);                                                                 \
        _Pragma("omp parallel for if (n > PARALLEL_THRESHOLD)") for (int64_t i = 0; i < n; i++)    \
            o[i] = name##_grad_f64(g[i], s[i]);                                                    \
        return TL_OK;                                                                              \
    }                                                                                              \
    static tl_status name##_bf16(tl_tensor *out, const tl_tensor *grad, const tl_tensor *saved) {  \
        uint16_t *o = tl_data(out);                                                                \
        const uint16_t *g = tl_data(grad), *s = tl_data(saved);                                    \
        int64_t n = tl_numel(out);                                                                 \
        _Pragma("omp parallel for if (n > PARALLEL_THRESHOLD)") for (int64_t i = 0; i < n; i++)    \
            o[i] = tl_bf16_round(name##_grad(tl_bf16_load(g[i]), tl_bf16_load(s[i])));             \
        return TL_OK;                                                                              \
    }                                                                                              \
    static tl_status name##_f16(tl_tensor *out, const tl_tensor *grad, const tl_tensor *saved) {   \
        uint16_t *o = tl_data(out);                                                                \
        const uint16_t *g = tl_data(grad), *s = tl_data(saved);                                    \
        int64_t n = tl_numel(out);                                                                 \
        _Pragma("omp parallel for if (n > PARALLEL_THRESHOLD)") for (int64_t i = 0; i < n; i++)    \
            o[i] = tl_f16_round(name##_grad(tl_f16_load(g[i]), tl_f16_load(s[i])));                \
        return TL_OK;                                                                              \
    }

DEFINE_KERNELS(relu)
DEFINE_KERNELS(gelu)
DEFINE_KERNELS(tanh)
DEFINE_KERNELS(sigmoid)

#define ENTRIES(name)                                                                              \
    {TL_OP_##name##_backward, TL_F32, "cpu_" #name "_backward_f32", {.binary = name##_f32}},       \
        {TL_OP_##name##_backward, TL_F64, "cpu_" #name "_backward_f64", {.binary = name##_f64}},   \
        {TL_OP_##name##_backward,                                                                  \
         TL_BF16,                                                                                  \
         "cpu_" #name "_backward_bf16",                                                            \
         {.binary = name##_bf16}},                                                                 \
    {                                                                                              \
        TL_OP_##name##_backward, TL_F16, "cpu_" #name "_backward_f16", {                           \
            .binary = name##_f16                                                                   \
        }                                                                                          \
    }

static const tl_kernel_entry entries[] = {ENTRIES(relu), ENTRIES(gelu), ENTRIES(tanh),
                                          ENTRIES(sigmoid)};

TL_KERNEL_TABLE(tl_cpu_activation_backward_table, TL_DEVICE_CPU, entries);
